package gptneo_test

import (
	"strings"
	"testing"

	"github.com/tputool/tputool/pipeline/gptneo"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/testkit/gptneoref"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
	"github.com/tputool/tputool/pipeline/testkit/moecheck"
	"github.com/tputool/tputool/pipeline/testkit/refcheck"
)

var prompts = [][]int{{1, 7, 21, 33, 4}, {1, 9, 14, 60, 3, 5, 41, 27, 11, 19, 50}}

// TestLogitsMatchReference runs a tiny GPT-Neo (global and local layers
// alternating, a window of 4 tokens, shorter than the prompts; the old
// buffers) on a left-padded batch of two prompts and decode steps,
// compiled and eager, on the go and cpu backends, against gptneoref's
// float64 forward under the checkpoints' names; and in bfloat16 within a
// few percent. A reference whose local layers attend in full differs.
func TestLogitsMatchReference(t *testing.T) {
	const steps = 6
	c := gptneoref.Tiny()
	dir, l := lmckpt.WriteLoad(t, c.Write)
	rm, err := c.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	seqs := refcheck.GreedySequences(rm, prompts, steps)
	moecheck.Run(t, "", l, rm, prompts, seqs, steps, 1e-4)
	t.Logf("bfloat16: worst relative error %.3g", moecheck.BFloat16(t, l, rm, prompts, 0.05))
	global := &gptneoref.Model{C: rm.C, W: rm.W, Global: true}
	prompt := prompts[1]
	refcheck.Discriminates(t, moecheck.Prefill(t, l, prompt)[0], prompt, rm.Logits, 1e-3,
		refcheck.Mutant{Name: "the local layers attending in full", Logits: global.Logits})
}

// gptNeo125M is EleutherAI/gpt-neo-125m's config.json (the summary
// fields left out).
const gptNeo125M = `{"activation_function": "gelu_new", "architectures": ["GPTNeoForCausalLM"], "attention_dropout": 0,
	"attention_layers": ["global", "local", "global", "local", "global", "local", "global", "local", "global", "local",
	"global", "local"], "attention_types": [[["global", "local"], 6]], "bos_token_id": 50256, "embed_dropout": 0,
	"eos_token_id": 50256, "gradient_checkpointing": false, "hidden_size": 768, "initializer_range": 0.02,
	"intermediate_size": null, "layer_norm_epsilon": 1e-05, "max_position_embeddings": 2048, "model_type": "gpt_neo",
	"num_heads": 12, "num_layers": 12, "resid_dropout": 0, "use_cache": true, "vocab_size": 50257, "window_size": 256}`

// TestConfig reads GPT-Neo 125M's config.json (125,198,592 parameters,
// the tied head counted once) and refuses what it cannot run, naming the
// field.
func TestConfig(t *testing.T) {
	m, err := lm.New(lmckpt.ParseConfig(t, gptNeo125M))
	if err != nil {
		t.Fatal(err)
	}
	o := m.(*gptneo.Model).Options()
	s := m.Spec()
	if n := lmckpt.Params(m); n != 125_198_592 {
		t.Errorf("%d parameters, want 125,198,592", n)
	}
	if s.Hidden != 768 || s.Layers != 12 || s.Heads != 12 || s.KVHeads != 12 || s.Intermediate != 3072 || s.SlidingWindow != 256 ||
		s.LayerKinds[0] != lm.KindFull || s.LayerKinds[1] != lm.KindSliding || s.LayerKinds[11] != lm.KindSliding ||
		o.AttnScale != 1 || o.QKVBias || !o.OBias || !o.MLPBias || o.FusedQKV || !o.LayerNorm || !o.UngatedMLP ||
		o.Positions.Rows != 2048 || s.MaxPositions != 2048 || !s.TieEmbeddings || s.EOS[0] != 50256 || o.Eps != 1e-5 {
		t.Errorf("spec %+v, options %+v", s, o)
	}
	r := m.(lm.Renamer)
	for stored, want := range map[string]string{
		"transformer.wte.weight":                       "model.embed_tokens.weight",
		"transformer.ln_f.bias":                        "model.norm.bias",
		"transformer.h.3.ln_1.weight":                  "model.layers.3.input_layernorm.weight",
		"transformer.h.3.attn.attention.q_proj.weight": "model.layers.3.self_attn.q_proj.weight",
		"transformer.h.3.attn.attention.out_proj.bias": "model.layers.3.self_attn.o_proj.bias",
		"transformer.h.3.mlp.c_fc.bias":                "model.layers.3.mlp.up_proj.bias",
		"transformer.h.3.mlp.c_proj.weight":            "model.layers.3.mlp.down_proj.weight",
		"transformer.h.3.attn.attention.bias":          "model.layers.3.attn.attention.bias",
		"lm_head.weight":                               "lm_head.weight",
	} {
		if got := r.RenameWeight(stored); got != want {
			t.Errorf("%s read as %s, want %s", stored, got, want)
		}
	}
	if _, skip := m.(lm.Skipper).SkipWeight("model.layers.3.attn.attention.masked_bias"); !skip {
		t.Error("masked_bias not skipped")
	}
	// Without attention_types, GPTNeoConfig's default: 24 layers.
	if o24, err := gptneo.Resolve(lmckpt.ParseConfig(t, `{"architectures": ["GPTNeoForCausalLM"], "num_layers": 24}`)); err != nil || o24.Spec.LayerKinds[23] != lm.KindSliding {
		t.Errorf("the default attention_types: %v", err)
	}
	for _, bad := range []struct{ js, want string }{
		{`"attention_types": [[["global", "local"], 5]]`, "lists 10 layers, num_layers is 12"},
		{`"attention_types": [[["global", "sparse"], 6]]`, `kind "sparse"`},
		{`"attention_types": [["global", 6]]`, "attention_types[0]"},
		{`"window_size": 0`, "window_size 0"},
	} {
		js := strings.Replace(gptNeo125M, `"attention_types": [[["global", "local"], 6]]`, bad.js, 1)
		if bad.want == "window_size 0" {
			js = strings.Replace(gptNeo125M, `"window_size": 256`, bad.js, 1)
		}
		_, err := gptneo.Resolve(lmckpt.ParseConfig(t, js))
		if err == nil || !strings.Contains(err.Error(), bad.want) || !strings.Contains(err.Error(), "config.json") {
			t.Errorf("%s: error %v, want one naming config.json and %q", bad.js, err, bad.want)
		}
	}
}
