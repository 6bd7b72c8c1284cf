package gptj_test

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/tputool/tputool/pipeline/gptj"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/testkit/gptjref"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
	"github.com/tputool/tputool/pipeline/testkit/moecheck"
	"github.com/tputool/tputool/pipeline/testkit/refcheck"
)

var prompts = [][]int{{1, 7, 21, 33, 4}, {1, 9, 14, 60, 3, 5, 41, 27, 11, 19, 50}}

// TestLogitsMatchReference runs tiny GPT-Js (half of each head rotated,
// with the old buffers' names; and rotary_dim null, read by tputool as
// the whole head) on a
// left-padded batch of two prompts and decode steps, compiled and eager,
// on the go and cpu backends, against gptjref's float64 forward under the
// checkpoints' names; and in bfloat16 within a few percent. A reference
// rotating halves instead of adjacent pairs differs.
func TestLogitsMatchReference(t *testing.T) {
	const steps = 6
	whole := gptjref.Tiny()
	whole.RotaryDim, whole.Buffers, whole.Seed = 0, false, 111
	for _, c := range []struct {
		name string
		gptj gptjref.GPTJ
	}{{"partial", gptjref.Tiny()}, {"whole", whole}} {
		t.Run(c.name, func(t *testing.T) {
			dir, l := lmckpt.WriteLoad(t, c.gptj.Write)
			rm, err := c.gptj.Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			seqs := refcheck.GreedySequences(rm, prompts, steps)
			moecheck.Run(t, "", l, rm, prompts, seqs, steps, 1e-4)
			t.Logf("bfloat16: worst relative error %.3g", moecheck.BFloat16(t, l, rm, prompts, 0.05))
			halves := &gptjref.Model{C: rm.C, W: rm.W, Halves: true}
			prompt := prompts[1]
			refcheck.Discriminates(t, moecheck.Prefill(t, l, prompt)[0], prompt, rm.Logits, 1e-3,
				refcheck.Mutant{Name: "the rotary over halves", Logits: halves.Logits})
		})
	}
}

// gptj6b is EleutherAI/gpt-j-6b's config.json (its sizes; the task and
// generation fields left out).
const gptj6b = `{"activation_function": "gelu_new", "architectures": ["GPTJForCausalLM"], "attn_pdrop": 0.0,
	"bos_token_id": 50256, "embd_pdrop": 0.0, "eos_token_id": 50256, "gradient_checkpointing": false,
	"initializer_range": 0.02, "layer_norm_epsilon": 1e-05, "model_type": "gptj", "n_embd": 4096, "n_head": 16,
	"n_inner": null, "n_layer": 28, "n_positions": 2048, "resid_pdrop": 0.0, "rotary": true, "rotary_dim": 64,
	"scale_attn_weights": true, "tie_word_embeddings": false, "tokenizer_class": "GPT2Tokenizer",
	"torch_dtype": "float32", "use_cache": true, "vocab_size": 50400}`

// TestConfig reads GPT-J-6B's config.json (6,050,882,784 parameters, the
// "6B" of its name) and refuses what it cannot run, naming the field.
func TestConfig(t *testing.T) {
	m, err := lm.New(lmckpt.ParseConfig(t, gptj6b))
	if err != nil {
		t.Fatal(err)
	}
	o := m.(*gptj.Model).Options()
	s := m.Spec()
	if n := lmckpt.Params(m); n != 6_050_882_784 {
		t.Errorf("%d parameters, want 6,050,882,784", n)
	}
	if s.Hidden != 4096 || s.Layers != 28 || s.Heads != 16 || s.KVHeads != 16 || s.HeadDim != 256 || s.Intermediate != 16384 ||
		o.Rope.RotaryDim != 64 || !o.RopePairs || !o.Parallel || o.QKVBias || o.OBias || !o.MLPBias || !o.HeadBias || !o.LayerNorm ||
		s.MaxPositions != 2048 || s.EOS[0] != 50256 || s.TieEmbeddings {
		t.Errorf("spec %+v, options %+v", s, o)
	}
	r := m.(lm.Renamer)
	for stored, want := range map[string]string{
		"transformer.wte.weight":               "model.embed_tokens.weight",
		"transformer.ln_f.bias":                "model.norm.bias",
		"transformer.h.5.ln_1.weight":          "model.layers.5.input_layernorm.weight",
		"transformer.h.5.attn.q_proj.weight":   "model.layers.5.self_attn.q_proj.weight",
		"transformer.h.5.attn.out_proj.weight": "model.layers.5.self_attn.o_proj.weight",
		"transformer.h.5.mlp.fc_in.bias":       "model.layers.5.mlp.up_proj.bias",
		"transformer.h.5.mlp.fc_out.weight":    "model.layers.5.mlp.down_proj.weight",
		"lm_head.bias":                         "lm_head.bias",
	} {
		if got := r.RenameWeight(stored); got != want {
			t.Errorf("%s read as %s, want %s", stored, got, want)
		}
	}
	// tie_word_embeddings ties lm_head's weight (its bias stays); the
	// rotary keeps rotary_dim's dims exactly (30 of 88 does not survive a
	// factor rounded back); Llama's names win over GPT-J's, as
	// attribute_map sets them last; no rope field is read.
	tied, err := gptj.Resolve(lmckpt.ParseConfig(t, `{"architectures": ["GPTJForCausalLM"], "n_embd": 4096, "hidden_size": 352, "n_head": 4,
		"n_layer": 2, "rotary_dim": 30, "tie_word_embeddings": true, "rope_theta": 500000, "vocab_size": 100}`))
	if err != nil {
		t.Fatal(err)
	}
	if !tied.Spec.TieEmbeddings || !tied.HeadBias || tied.Spec.Hidden != 352 || tied.Spec.HeadDim != 88 || tied.Rope.RotaryDim != 30 ||
		tied.Spec.Intermediate != 4*352 || fmt.Sprintf("%.6g", tied.Rope.InvFreq[1]) != fmt.Sprintf("%.6g", math.Pow(10000, -2.0/30)) {
		t.Errorf("tied, rotary_dim 30: %+v (inv_freq %v)", tied, tied.Rope.InvFreq)
	}
	for _, bad := range []struct{ js, want string }{
		{`"rotary_dim": 300`, "rotary_dim 300"},
		{`"rotary_dim": 7`, "rotary_dim 7"},
		{`"n_head": 3`, "not a multiple"},
		{`"activation_function": "swish2"`, "hidden_act"},
	} {
		js := strings.Replace(gptj6b, `"vocab_size": 50400}`, `"vocab_size": 50400, `+bad.js+`}`, 1)
		_, err := gptj.Resolve(lmckpt.ParseConfig(t, js))
		if err == nil || !strings.Contains(err.Error(), bad.want) || !strings.Contains(err.Error(), "config.json") {
			t.Errorf("%s: error %v, want one naming config.json and %q", bad.js, err, bad.want)
		}
	}
}
