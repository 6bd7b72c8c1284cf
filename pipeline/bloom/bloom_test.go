package bloom_test

import (
	"math"
	"strings"
	"testing"

	"github.com/tputool/tputool/pipeline/bloom"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/nn"
	"github.com/tputool/tputool/pipeline/testkit/bloomref"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
	"github.com/tputool/tputool/pipeline/testkit/moecheck"
	"github.com/tputool/tputool/pipeline/testkit/refcheck"
)

var prompts = [][]int{{1, 7, 21, 33, 4}, {1, 9, 14, 60, 3, 5, 41, 27, 11, 19, 50}}

// TestLogitsMatchReference runs tiny BLOOMs (BloomModel's bare names, 6
// heads whose slopes take the extra odd powers; GPT-style
// "transformer." names and 8 heads) on a left-padded batch of two prompts
// and decode steps, compiled and eager, on the go and cpu backends,
// against bloomref's float64 forward; and in bfloat16 within a few
// percent. A reference without the linear biases differs.
func TestLogitsMatchReference(t *testing.T) {
	const steps = 6
	eight := bloomref.Tiny()
	eight.Heads, eight.Hidden, eight.Prefix, eight.Seed = 8, 64, "transformer.", 141
	for _, c := range []struct {
		name  string
		bloom bloomref.Bloom
	}{{"six", bloomref.Tiny()}, {"eight", eight}} {
		t.Run(c.name, func(t *testing.T) {
			dir, l := lmckpt.WriteLoad(t, c.bloom.Write)
			rm, err := c.bloom.Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			seqs := refcheck.GreedySequences(rm, prompts, steps)
			moecheck.Run(t, "", l, rm, prompts, seqs, steps, 1e-4)
			t.Logf("bfloat16: worst relative error %.3g", moecheck.BFloat16(t, l, rm, prompts, 0.05))
			flat := &bloomref.Model{C: rm.C, W: rm.W, NoALiBi: true}
			prompt := prompts[1]
			refcheck.Discriminates(t, moecheck.Prefill(t, l, prompt)[0], prompt, rm.Logits, 1e-3,
				refcheck.Mutant{Name: "no linear biases", Logits: flat.Logits})
		})
	}
}

// TestSlopes checks nn.ALiBiSlopes against bloomref's and the values of
// the ALiBi paper: 8 heads 2^-1..2^-8; 6 heads 2^-2, 2^-4, 2^-6, 2^-8 and
// then 8 heads' first and third.
func TestSlopes(t *testing.T) {
	for n := 1; n <= 40; n++ {
		got, want := nn.ALiBiSlopes(n), bloomref.Slopes(n)
		if len(got) != n {
			t.Fatalf("%d heads: %d slopes", n, len(got))
		}
		for i := range want {
			if math.Abs(got[i]-want[i]) > 1e-7*want[i] {
				t.Errorf("%d heads: slope %d is %g, want %g", n, i, got[i], want[i])
			}
		}
	}
	for n, want := range map[int][]float64{
		8: {0.5, 0.25, 0.125, 0.0625, 0.03125, 0.015625, 0.0078125, 0.00390625},
		6: {0.25, 0.0625, 0.015625, 0.00390625, 0.5, 0.125},
	} {
		for i, v := range nn.ALiBiSlopes(n) {
			if v != want[i] {
				t.Errorf("%d heads: slope %d is %g, want %g", n, i, v, want[i])
			}
		}
	}
}

// bloom560m is bigscience/bloom-560m's config.json.
const bloom560m = `{"apply_residual_connection_post_layernorm": false, "architectures": ["BloomForCausalLM"],
	"attention_dropout": 0.0, "attention_softmax_in_fp32": true, "bias_dropout_fusion": true, "bos_token_id": 1,
	"eos_token_id": 2, "hidden_dropout": 0.0, "hidden_size": 1024, "initializer_range": 0.02, "layer_norm_epsilon": 1e-05,
	"masked_softmax_fusion": true, "model_type": "bloom", "n_head": 16, "n_inner": null, "n_layer": 24, "offset_alibi": 100,
	"pad_token_id": 3, "pretraining_tp": 1, "skip_bias_add": true, "skip_bias_add_qkv": false, "slow_but_exact": false,
	"unk_token_id": 0, "use_cache": true, "vocab_size": 250880}`

// TestConfig reads BLOOM-560M's config.json (559,214,592 parameters, its
// model card's count) and refuses what it cannot run, naming the field.
func TestConfig(t *testing.T) {
	m, err := lm.New(lmckpt.ParseConfig(t, bloom560m))
	if err != nil {
		t.Fatal(err)
	}
	o := m.(*bloom.Model).Options()
	s := m.Spec()
	if n := lmckpt.Params(m); n != 559_214_592 {
		t.Errorf("%d parameters, want 559,214,592", n)
	}
	if s.Hidden != 1024 || s.Layers != 24 || s.Heads != 16 || s.KVHeads != 16 || s.HeadDim != 64 || s.Intermediate != 4096 ||
		!o.ALiBi || !o.FusedQKV || !o.QKVPerHead || !o.QKVBias || !o.OBias || !o.MLPBias || !o.LayerNorm || !o.UngatedMLP ||
		len(o.NoRope) != 24 || !o.NoRope[0] || s.MaxPositions != 2048 || s.BOS != 1 || s.EOS[0] != 2 || !s.TieEmbeddings {
		t.Errorf("spec %+v, options %+v", s, o)
	}
	r := m.(lm.Renamer)
	for stored, want := range map[string]string{
		"word_embeddings.weight":                                "model.embed_tokens.weight",
		"transformer.word_embeddings.weight":                    "model.embed_tokens.weight",
		"word_embeddings_layernorm.bias":                        bloom.EmbedNorm + ".bias",
		"ln_f.weight":                                           "model.norm.weight",
		"h.3.input_layernorm.weight":                            "model.layers.3.input_layernorm.weight",
		"transformer.h.3.self_attention.query_key_value.weight": "model.layers.3.self_attn.qkv_proj.weight",
		"h.3.self_attention.dense.bias":                         "model.layers.3.self_attn.o_proj.bias",
		"h.3.post_attention_layernorm.bias":                     "model.layers.3.post_attention_layernorm.bias",
		"h.3.mlp.dense_h_to_4h.weight":                          "model.layers.3.mlp.up_proj.weight",
		"h.23.mlp.dense_4h_to_h.bias":                           "model.layers.23.mlp.down_proj.bias",
	} {
		if got := r.RenameWeight(stored); got != want {
			t.Errorf("%s read as %s, want %s", stored, got, want)
		}
	}
	// n_embed (the first uploads') is hidden_size; seq_length bounds the
	// context; n_inner is not read (BloomMLP is 4 × hidden).
	o2, err := bloom.Resolve(lmckpt.ParseConfig(t, `{"architectures": ["BloomForCausalLM"], "n_embed": 96, "hidden_size": 32, "n_head": 4,
		"n_layer": 2, "n_inner": 100, "seq_length": 4096, "vocab_size": 100}`))
	if err != nil {
		t.Fatal(err)
	}
	if o2.Spec.Hidden != 96 || o2.Spec.HeadDim != 24 || o2.Spec.Intermediate != 384 || o2.Spec.MaxPositions != 4096 {
		t.Errorf("resolved %+v", o2.Spec)
	}
	for _, bad := range []struct{ js, want string }{
		{`"apply_residual_connection_post_layernorm": true`, "apply_residual_connection_post_layernorm"},
		{`"slow_but_exact": true, "pretraining_tp": 4`, "slow_but_exact"},
		{`"n_head": 5`, "not a multiple"},
	} {
		js := strings.Replace(bloom560m, `"vocab_size": 250880}`, `"vocab_size": 250880, `+bad.js+`}`, 1)
		_, err := bloom.Resolve(lmckpt.ParseConfig(t, js))
		if err == nil || !strings.Contains(err.Error(), bad.want) || !strings.Contains(err.Error(), "config.json") {
			t.Errorf("%s: error %v, want one naming config.json and %q", bad.js, err, bad.want)
		}
	}
	// slow_but_exact without tensor-parallel slices, and pretraining_tp
	// without slow_but_exact, are the plain product.
	js := strings.Replace(bloom560m, `"slow_but_exact": false`, `"slow_but_exact": true`, 1)
	if _, err := bloom.Resolve(lmckpt.ParseConfig(t, js)); err != nil {
		t.Errorf("slow_but_exact with pretraining_tp 1: %v", err)
	}
	js = strings.Replace(bloom560m, `"pretraining_tp": 1`, `"pretraining_tp": 4`, 1)
	if _, err := bloom.Resolve(lmckpt.ParseConfig(t, js)); err != nil {
		t.Errorf("pretraining_tp 4 without slow_but_exact: %v", err)
	}
}
