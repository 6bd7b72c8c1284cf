package gptneox_test

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/tputool/tputool/pipeline/gptneox"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
	"github.com/tputool/tputool/pipeline/testkit/moecheck"
	"github.com/tputool/tputool/pipeline/testkit/neoxref"
	"github.com/tputool/tputool/pipeline/testkit/refcheck"
)

var prompts = [][]int{{1, 7, 21, 33, 4}, {1, 9, 14, 60, 3, 5, 41, 27, 11, 19, 50}}

// TestLogitsMatchReference runs tiny GPT-NeoXs (a Pythia: the parallel
// residual, a quarter of each head rotated, the old buffers in the
// checkpoint; and the sequential residual with half rotated, no
// attention biases and a tied head) on a left-padded batch of two prompts
// and decode steps, compiled and eager, on the go and cpu backends,
// against neoxref's float64 forward under the checkpoints' names; and in
// bfloat16 within a few percent.
func TestLogitsMatchReference(t *testing.T) {
	const steps = 6
	for _, c := range []struct {
		name string
		neox neoxref.NeoX
	}{{"pythia", neoxref.Tiny()}, {"sequential", neoxref.TinySequential()}} {
		t.Run(c.name, func(t *testing.T) {
			dir, l := lmckpt.WriteLoad(t, c.neox.Write)
			rm, err := c.neox.Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			seqs := refcheck.GreedySequences(rm, prompts, steps)
			moecheck.Run(t, "", l, rm, prompts, seqs, steps, 1e-4)
			t.Logf("bfloat16: worst relative error %.3g", moecheck.BFloat16(t, l, rm, prompts, 0.05))
		})
	}
}

// TestSwitchesMatter checks that the test above can fail where GPT-NeoX
// departs from its kin: a reference reading the fused projection as
// blocks of all queries, keys and values (Phi-3's layout), rotating whole
// heads, or with the other residual gives other logits than the model.
func TestSwitchesMatter(t *testing.T) {
	c := neoxref.Tiny()
	dir, l := lmckpt.WriteLoad(t, c.Write)
	rm, err := c.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	prompt := prompts[1]
	got := moecheck.Prefill(t, l, prompt)
	blocks := &neoxref.Model{C: rm.C, W: map[string][]float64{}}
	H, D := c.Hidden, c.Hidden/c.Heads
	for n, v := range rm.W {
		if strings.HasSuffix(n, "query_key_value.weight") || strings.HasSuffix(n, "query_key_value.bias") {
			// The rows of block j (q, k, v) of head h moved to head h's
			// slot j, so that the reference's per-head reading takes
			// blocks: what a [q; k; v] reading of the stored rows would.
			row := len(v) / (3 * H)
			w := make([]float64, len(v))
			for j := 0; j < 3; j++ {
				for h := 0; h < c.Heads; h++ {
					copy(w[(h*3+j)*D*row:(h*3+j+1)*D*row], v[(j*H+h*D)*row:(j*H+(h+1)*D)*row])
				}
			}
			v = w
		}
		blocks.W[n] = v
	}
	whole := &neoxref.Model{C: rm.C, W: rm.W}
	whole.C.RotaryPct = 1
	seq := &neoxref.Model{C: rm.C, W: rm.W}
	seq.C.Parallel = false
	refcheck.Discriminates(t, got[0], prompt, rm.Logits, 1e-3,
		refcheck.Mutant{Name: "the fused projection in blocks", Logits: blocks.Logits},
		refcheck.Mutant{Name: "the rotary over whole heads", Logits: whole.Logits},
		refcheck.Mutant{Name: "the sequential residual", Logits: seq.Logits})
}

// pythia410m is EleutherAI/pythia-410m's config.json.
const pythia410m = `{"architectures": ["GPTNeoXForCausalLM"], "bos_token_id": 0, "eos_token_id": 0, "hidden_act": "gelu",
	"hidden_size": 1024, "initializer_range": 0.02, "intermediate_size": 4096, "layer_norm_eps": 1e-05,
	"max_position_embeddings": 2048, "model_type": "gpt_neox", "num_attention_heads": 16, "num_hidden_layers": 24,
	"rotary_emb_base": 10000, "rotary_pct": 0.25, "tie_word_embeddings": false, "torch_dtype": "float16",
	"use_cache": true, "use_parallel_residual": true, "vocab_size": 50304}`

// TestConfig reads Pythia-410M's config.json (405,334,016 parameters, the
// "410m" of its name counting them so) and GPTNeoXConfig's defaults, v5's
// rope_parameters, and the refusals.
func TestConfig(t *testing.T) {
	m, err := lm.New(lmckpt.ParseConfig(t, pythia410m))
	if err != nil {
		t.Fatal(err)
	}
	o := m.(*gptneox.Model).Options()
	s := m.Spec()
	if n := lmckpt.Params(m); n != 405_334_016 {
		t.Errorf("%d parameters, want 405,334,016", n)
	}
	if s.Heads != 16 || s.KVHeads != 16 || s.HeadDim != 64 || o.Rope.RotaryDim != 16 || !o.Parallel || !o.QKVPerHead || !o.FusedQKV ||
		!o.QKVBias || !o.OBias || !o.MLPBias || !o.LayerNorm || !o.UngatedMLP || o.Eps != 1e-5 || s.TieEmbeddings || s.EOS[0] != 0 || s.BOS != 0 {
		t.Errorf("spec %+v, options %+v", s, o)
	}
	r := m.(lm.Renamer)
	for stored, want := range map[string]string{
		"gpt_neox.embed_in.weight":                         "model.embed_tokens.weight",
		"embed_out.weight":                                 "lm_head.weight",
		"gpt_neox.final_layer_norm.bias":                   "model.norm.bias",
		"gpt_neox.layers.3.attention.query_key_value.bias": "model.layers.3.self_attn.qkv_proj.bias",
		"gpt_neox.layers.3.attention.dense.weight":         "model.layers.3.self_attn.o_proj.weight",
		"gpt_neox.layers.3.mlp.dense_h_to_4h.weight":       "model.layers.3.mlp.up_proj.weight",
		"gpt_neox.layers.3.mlp.dense_4h_to_h.bias":         "model.layers.3.mlp.down_proj.bias",
		"gpt_neox.layers.3.post_attention_layernorm.bias":  "model.layers.3.post_attention_layernorm.bias",
	} {
		if got := r.RenameWeight(stored); got != want {
			t.Errorf("%s read as %s, want %s", stored, got, want)
		}
	}
	for _, name := range []string{"gpt_neox.layers.3.attention.bias", "gpt_neox.layers.3.attention.masked_bias", "gpt_neox.layers.3.attention.rotary_emb.inv_freq"} {
		if _, skip := m.(lm.Skipper).SkipWeight(name); !skip {
			t.Errorf("%s not skipped", name)
		}
	}

	d, err := gptneox.Resolve(lmckpt.ParseConfig(t, `{"architectures": ["GPTNeoXForCausalLM"]}`))
	if err != nil {
		t.Fatal(err)
	}
	if d.Spec.Hidden != 6144 || d.Spec.Layers != 44 || d.Spec.Heads != 64 || d.Spec.VocabSize != 50432 || d.Rope.RotaryDim != 24 || !d.Parallel || !d.QKVBias {
		t.Errorf("defaults: %+v", d)
	}
	// transformers v5 writes the rotary's fields into rope_parameters.
	v5, err := gptneox.Resolve(lmckpt.ParseConfig(t, `{"architectures": ["GPTNeoXForCausalLM"], "hidden_size": 256, "num_attention_heads": 4,
		"rope_parameters": {"rope_type": "default", "rope_theta": 50000, "partial_rotary_factor": 0.5}, "use_parallel_residual": false, "attention_bias": false}`))
	if err != nil {
		t.Fatal(err)
	}
	// inv_freq[1] = theta^(-2/32).
	if v5.Rope.RotaryDim != 32 || v5.Parallel || v5.QKVBias || v5.OBias || !v5.MLPBias || fmt.Sprintf("%.6g", v5.Rope.InvFreq[1]) != fmt.Sprintf("%.6g", math.Pow(50000, -2.0/32)) {
		t.Errorf("v5 rope_parameters: %+v (inv_freq %v)", v5, v5.Rope.InvFreq)
	}
	// GPTNeoXConfig sets rope_theta from rotary_emb_base (10000 without
	// it) and partial_rotary_factor from rotary_pct (0.25), whatever the
	// config's own say; num_key_value_heads is not read.
	for _, c := range []struct {
		js    string
		theta float64
		rot   int
	}{
		{`"rope_theta": 50000, "partial_rotary_factor": 1.0`, 10000, 4},
		{`"rope_theta": 50000, "rotary_emb_base": 20000, "rotary_pct": 0.5`, 20000, 8},
		{`"num_key_value_heads": 2`, 10000, 4},
	} {
		n, err := gptneox.Resolve(lmckpt.ParseConfig(t, `{"architectures": ["GPTNeoXForCausalLM"], "hidden_size": 64, "num_attention_heads": 4, `+c.js+`}`))
		if err != nil {
			t.Fatal(err)
		}
		if n.Rope.RotaryDim != c.rot || n.Spec.KVHeads != 4 || fmt.Sprintf("%.6g", n.Rope.InvFreq[1]) != fmt.Sprintf("%.6g", math.Pow(c.theta, -2.0/float64(c.rot))) {
			t.Errorf("%s: rotary %d, KV heads %d, inv_freq %v; want rotary %d, base %v", c.js, n.Rope.RotaryDim, n.Spec.KVHeads, n.Rope.InvFreq, c.rot, c.theta)
		}
	}
	for _, bad := range []struct{ js, want string }{
		{`"hidden_size": 66`, "not a multiple of num_attention_heads"},
		{`"hidden_act": "swish2"`, "hidden_act"},
	} {
		_, err := gptneox.Resolve(lmckpt.ParseConfig(t, `{"architectures": ["GPTNeoXForCausalLM"], "num_attention_heads": 16, `+bad.js+`}`))
		if err == nil || !strings.Contains(err.Error(), bad.want) || !strings.Contains(err.Error(), "config.json") {
			t.Errorf("%s: error %v, want one naming config.json and %q", bad.js, err, bad.want)
		}
	}
}
