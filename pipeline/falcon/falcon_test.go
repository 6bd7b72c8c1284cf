package falcon_test

import (
	"strings"
	"testing"

	"github.com/tputool/tputool/pipeline/falcon"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/testkit/falconref"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
	"github.com/tputool/tputool/pipeline/testkit/moecheck"
	"github.com/tputool/tputool/pipeline/testkit/refcheck"
)

var prompts = [][]int{{1, 7, 21, 33, 4}, {1, 9, 14, 60, 3, 5, 41, 27, 11, 19, 50}}

// TestLogitsMatchReference runs tiny Falcons in each layout (the new
// architecture with grouped key/value heads and two LayerNorms, Falcon
// 2's one LayerNorm, Falcon-7B's multi-query, and a key/value head per
// head in sequence with biases, and that with Falcon-RW's alibi, over a
// key/value head per head and over one) on a
// left-padded batch of two prompts
// and decode steps, compiled and eager, on the go and cpu backends,
// against falconref's float64 forward under the checkpoints' names; and
// in bfloat16 within a few percent.
func TestLogitsMatchReference(t *testing.T) {
	const steps = 6
	for _, c := range []struct {
		name   string
		falcon falconref.Falcon
	}{{"40b", falconref.New40B()}, {"falcon2", falconref.Falcon2()}, {"7b", falconref.Falcon7B()}, {"sequential", falconref.Sequential()}, {"rw", falconref.RW()}, {"rw-multiquery", falconref.RWMultiQuery()}} {
		t.Run(c.name, func(t *testing.T) {
			dir, l := lmckpt.WriteLoad(t, c.falcon.Write)
			rm, err := c.falcon.Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			seqs := refcheck.GreedySequences(rm, prompts, steps)
			moecheck.Run(t, "", l, rm, prompts, seqs, steps, 1e-4)
			t.Logf("bfloat16: worst relative error %.3g", moecheck.BFloat16(t, l, rm, prompts, 0.05))
		})
	}
}

// TestSwitchesMatter checks that the test above can fail where the
// layouts differ: the new architecture's rows read as Falcon-7B's blocks
// or within each group in another order (k and v before the query
// heads), and its second LayerNorm read as the first.
func TestSwitchesMatter(t *testing.T) {
	c := falconref.New40B()
	dir, l := lmckpt.WriteLoad(t, c.Write)
	rm, err := c.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	prompt := prompts[1]
	got := moecheck.Prefill(t, l, prompt)
	oneLn := &falconref.Model{C: rm.C, W: map[string][]float64{}}
	oneLn.C.NumLn = 1
	for n, v := range rm.W {
		oneLn.W[strings.Replace(strings.Replace(n, "ln_attn", "input_layernorm", 1), "ln_mlp", "unused_ln", 1)] = v
	}
	// The fused rows of each group rotated by two heads: the reference
	// then reads a group's k and v where the model reads query heads.
	rotated := &falconref.Model{C: rm.C, W: map[string][]float64{}}
	D := c.Hidden / c.Heads
	per := c.Heads/c.KVHeads + 2
	for n, v := range rm.W {
		if strings.HasSuffix(n, "query_key_value.weight") {
			row := len(v) / (c.KVHeads * per * D)
			w := make([]float64, len(v))
			for g := 0; g < c.KVHeads; g++ {
				for j := 0; j < per; j++ {
					from, to := (g*per+j)*D*row, (g*per+(j+2)%per)*D*row
					copy(w[to:to+D*row], v[from:from+D*row])
				}
			}
			v = w
		}
		rotated.W[n] = v
	}
	// The rows read as Falcon-7B's blocks (every query head, then the keys,
	// then the values), what a model without QKVPerHead would read: the
	// reference's group g then takes block rows, moved here to its slots.
	blocks := &falconref.Model{C: rm.C, W: map[string][]float64{}}
	for n, v := range rm.W {
		if strings.HasSuffix(n, "query_key_value.weight") {
			row := len(v) / (c.KVHeads * per * D)
			w := make([]float64, len(v))
			move := func(from, to int) { copy(w[to*D*row:(to+1)*D*row], v[from*D*row:(from+1)*D*row]) }
			for g := 0; g < c.KVHeads; g++ {
				for j := 0; j < per-2; j++ {
					move(g*(per-2)+j, g*per+j)
				}
				move(c.Heads+g, g*per+per-2)
				move(c.Heads+c.KVHeads+g, g*per+per-1)
			}
			v = w
		}
		blocks.W[n] = v
	}
	refcheck.Discriminates(t, got[0], prompt, rm.Logits, 1e-3,
		refcheck.Mutant{Name: "one LayerNorm", Logits: oneLn.Logits},
		refcheck.Mutant{Name: "the group's rows in another order", Logits: rotated.Logits},
		refcheck.Mutant{Name: "the rows read as blocks", Logits: blocks.Logits})
}

// TestAlibiScaled checks that Falcon-RW's test can fail: BLOOM's order,
// the linear biases added after the scores are scaled, differs.
func TestAlibiScaled(t *testing.T) {
	c := falconref.RW()
	dir, l := lmckpt.WriteLoad(t, c.Write)
	rm, err := c.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	prompt := prompts[1]
	bloomOrder := &falconref.Model{C: rm.C, W: rm.W, UnscaledAlibi: true}
	refcheck.Discriminates(t, moecheck.Prefill(t, l, prompt)[0], prompt, rm.Logits, 1e-3,
		refcheck.Mutant{Name: "alibi after the scaling", Logits: bloomOrder.Logits})
}

// falcon7b is tiiuae/falcon-7b's config.json (transformers' names).
const falcon7b = `{"alibi": false, "apply_residual_connection_post_layernorm": false, "architectures": ["FalconForCausalLM"],
	"attention_dropout": 0.0, "bias": false, "bos_token_id": 11, "eos_token_id": 11, "hidden_dropout": 0.0,
	"hidden_size": 4544, "initializer_range": 0.02, "layer_norm_epsilon": 1e-05, "model_type": "falcon",
	"multi_query": true, "new_decoder_architecture": false, "num_attention_heads": 71, "num_hidden_layers": 32,
	"parallel_attn": true, "torch_dtype": "bfloat16", "use_cache": true, "vocab_size": 65024}`

// falconRW1B is tiiuae/falcon-rw-1b's config.json (transformers' names).
const falconRW1B = `{"alibi": true, "apply_residual_connection_post_layernorm": false, "architectures": ["FalconForCausalLM"],
	"attention_dropout": 0.0, "bias": true, "bos_token_id": 1, "eos_token_id": 2, "hidden_dropout": 0.0, "hidden_size": 2048,
	"initializer_range": 0.02, "layer_norm_epsilon": 1e-05, "model_type": "falcon", "multi_query": false,
	"new_decoder_architecture": false, "num_attention_heads": 32, "num_hidden_layers": 24, "parallel_attn": false,
	"torch_dtype": "bfloat16", "use_cache": true, "vocab_size": 50304}`

// TestConfig reads Falcon-7B's config.json (6,921,720,704 parameters, the
// "7B" of its name) and a Falcon-40B-shaped one, and refuses what it
// cannot run, naming the field.
func TestConfig(t *testing.T) {
	m, err := lm.New(lmckpt.ParseConfig(t, falcon7b))
	if err != nil {
		t.Fatal(err)
	}
	o := m.(*falcon.Model).Options()
	s := m.Spec()
	if n := lmckpt.Params(m); n != 6_921_720_704 {
		t.Errorf("%d parameters, want 6,921,720,704", n)
	}
	if s.Heads != 71 || s.KVHeads != 1 || s.HeadDim != 64 || s.Intermediate != 18176 || !o.Parallel || o.QKVPerHead || !o.FusedQKV ||
		o.QKVBias || o.MLPBias || !s.TieEmbeddings || o.Rope.RotaryDim != 64 || s.EOS[0] != 11 {
		t.Errorf("spec %+v, options %+v", s, o)
	}
	m40, err := falcon.Resolve(lmckpt.ParseConfig(t, `{"architectures": ["FalconForCausalLM"], "model_type": "falcon", "hidden_size": 8192,
		"num_attention_heads": 128, "num_kv_heads": 8, "num_hidden_layers": 60, "new_decoder_architecture": true, "vocab_size": 65024}`))
	if err != nil {
		t.Fatal(err)
	}
	if m40.Spec.KVHeads != 8 || !m40.QKVPerHead || !m40.Parallel || m40.Norms.PreAttn != "ln_attn" || m40.Norms.PreMLP != "ln_mlp" {
		t.Errorf("40B: %+v", m40)
	}
	// Falcon-RW-1B (1,311,625,216 parameters): alibi, no rotary, the
	// sequential block, a key/value head per head.
	rw, err := lm.New(lmckpt.ParseConfig(t, falconRW1B))
	if err != nil {
		t.Fatal(err)
	}
	if n := lmckpt.Params(rw); n != 1_311_625_216 {
		t.Errorf("Falcon-RW-1B: %d parameters, want 1,311,625,216", n)
	}
	if o := rw.(*falcon.Model).Options(); !o.ALiBi || !o.ALiBiScaled || len(o.NoRope) != 24 || !o.NoRope[23] || o.Parallel ||
		!o.QKVPerHead || o.Spec.KVHeads != 32 || !o.QKVBias {
		t.Errorf("Falcon-RW-1B: %+v", o)
	}
	r := m.(lm.Renamer)
	for stored, want := range map[string]string{
		"transformer.word_embeddings.weight":                    "model.embed_tokens.weight",
		"transformer.ln_f.bias":                                 "model.norm.bias",
		"transformer.h.4.self_attention.query_key_value.weight": "model.layers.4.self_attn.qkv_proj.weight",
		"transformer.h.4.self_attention.dense.weight":           "model.layers.4.self_attn.o_proj.weight",
		"transformer.h.4.mlp.dense_h_to_4h.weight":              "model.layers.4.mlp.up_proj.weight",
		"transformer.h.4.ln_mlp.bias":                           "model.layers.4.ln_mlp.bias",
	} {
		if got := r.RenameWeight(stored); got != want {
			t.Errorf("%s read as %s, want %s", stored, got, want)
		}
	}
	for _, bad := range []struct{ js, want string }{
		{`"model_type": "RefinedWeb"`, "RefinedWeb"},
		{`"new_decoder_architecture": true, "num_kv_heads": 3`, "num_kv_heads 3 must divide"},
		{`"new_decoder_architecture": true, "parallel_attn": false`, "parallel_attn false"},
		{`"new_decoder_architecture": true, "num_ln_in_parallel_attn": 3`, "num_ln_in_parallel_attn must be 1 or 2"},
	} {
		_, err := falcon.Resolve(lmckpt.ParseConfig(t, `{"architectures": ["FalconForCausalLM"], "hidden_size": 64, "num_attention_heads": 4, `+bad.js+`}`))
		if err == nil || !strings.Contains(err.Error(), bad.want) || !strings.Contains(err.Error(), "config.json") {
			t.Errorf("%s: error %v, want one naming config.json and %q", bad.js, err, bad.want)
		}
	}
}
