package qwen1_test

import (
	"math"
	"strings"
	"testing"

	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/qwen1"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
	"github.com/tputool/tputool/pipeline/testkit/lmref"
	"github.com/tputool/tputool/pipeline/testkit/moecheck"
	"github.com/tputool/tputool/pipeline/testkit/refcheck"
)

var prompts = [][]int{{1, 7, 21, 33, 4}, {1, 9, 14, 60, 3, 5, 41, 27, 11, 19, 50}}

// toQwen writes the Llama in src as a Qwen 1 release holds it: q_proj,
// k_proj and v_proj (weights and biases) one after the other in
// attn.c_attn, o_proj as attn.c_proj, the gate as mlp.w2 and the up
// projection as mlp.w1 (or, swapped, the other way round: a mutant),
// under transformer.; the config in QWenConfig's names, intermediate_size
// twice the MLP's width, as QWenMLP halves it.
func toQwen(t *testing.T, src, dst string, c lmckpt.Config, swapped bool) {
	t.Helper()
	ts, cfg, err := lmckpt.Rewrap(src, func(n string) string { return n })
	if err != nil {
		t.Fatal(err)
	}
	gate, up := ".mlp.w2.", ".mlp.w1."
	if swapped {
		gate, up = up, gate
	}
	rename := strings.NewReplacer("model.layers.", "transformer.h.", ".input_layernorm.", ".ln_1.", ".post_attention_layernorm.", ".ln_2.",
		".self_attn.o_proj.", ".attn.c_proj.", ".mlp.gate_proj.", gate, ".mlp.up_proj.", up, ".mlp.down_proj.", ".mlp.c_proj.")
	out := lmckpt.FuseQKV(ts, c.Heads, c.KVHeads, c.HeadDim, false, ".attn.c_attn.")
	for i, x := range out {
		switch x.Name {
		case "model.embed_tokens.weight":
			out[i].Name = "transformer.wte.weight"
		case "model.norm.weight":
			out[i].Name = "transformer.ln_f.weight"
		default:
			out[i].Name = rename.Replace(x.Name)
		}
	}
	for from, to := range map[string]string{"rms_norm_eps": "layer_norm_epsilon", "rope_theta": "rotary_emb_base", "head_dim": "kv_channels"} {
		cfg[to] = cfg[from]
		delete(cfg, from)
	}
	delete(cfg, "num_key_value_heads")
	delete(cfg, "attention_bias")
	cfg["intermediate_size"] = 2 * c.Intermediate
	delete(cfg, "mlp_bias")
	cfg["no_bias"], cfg["rotary_pct"], cfg["use_dynamic_ntk"], cfg["use_logn_attn"], cfg["seq_length"] = !c.OBias, 1.0, true, true, 128
	cfg["architectures"], cfg["model_type"] = []string{qwen1.Architecture}, "qwen"
	if err := lmckpt.WriteCheckpoint(dst, cfg, out); err != nil {
		t.Fatal(err)
	}
}

// TestLogitsMatchReference writes tiny Llamas with q/k/v biases (Qwen's
// c_attn has one), without and with the other projections' biases
// (no_bias true and false), as Qwen 1 releases and runs
// it on a left-padded batch and decode steps, compiled and eager, on the
// go and cpu backends, against lmref's float64 Llama reading the
// original; a release read with w1 and w2 the other way round differs.
func TestLogitsMatchReference(t *testing.T) {
	for _, biases := range []bool{false, true} {
		t.Run(map[bool]string{false: "no_bias", true: "biases"}[biases], func(t *testing.T) { testLogits(t, biases) })
	}
}

func testLogits(t *testing.T, biases bool) {
	// An eps and a base that are not QWenConfig's defaults, so that a
	// misread field shows.
	c := lmckpt.Config{Vocab: 64, Hidden: 32, Intermediate: 48, Layers: 3, Heads: 4, KVHeads: 4, HeadDim: 8, Eps: 0.02,
		RopeTheta: []float64{50, 50, 50}, Window: []int{0, 0, 0}, QKVBias: true, OBias: biases, MLPBias: biases}
	src := t.TempDir()
	if err := (lmckpt.Tiny{Arch: "LlamaForCausalLM", Config: c, Seed: 200}).Write(src); err != nil {
		t.Fatal(err)
	}
	rm, err := lmref.Load(src, c)
	if err != nil {
		t.Fatal(err)
	}
	_, l := lmckpt.WriteLoad(t, func(dir string) error { toQwen(t, src, dir, c, false); return nil })
	if s := l.Model.Spec(); s.MaxPositions != 128 || s.Intermediate != 48 {
		t.Fatalf("spec %+v: the context is seq_length's 128, the MLP half of intermediate_size", s)
	}
	moecheck.Run(t, "", l, rm, prompts, refcheck.GreedySequences(rm, prompts, 6), 6, 1e-4)
	_, swapped := lmckpt.WriteLoad(t, func(dir string) error { toQwen(t, src, dir, c, true); return nil })
	moecheck.Differs(t, "w1 and w2 swapped", l, swapped, prompts[1], 1e-3)
}

// qwen7bChat is Qwen/Qwen-7B-Chat's config.json (auto_map left out).
const qwen7bChat = `{"architectures": ["QWenLMHeadModel"], "attn_dropout_prob": 0.0, "bf16": false, "emb_dropout_prob": 0.0,
	"fp16": false, "fp32": false, "hidden_size": 4096, "intermediate_size": 22016, "initializer_range": 0.02, "kv_channels": 128,
	"layer_norm_epsilon": 1e-06, "max_position_embeddings": 32768, "model_type": "qwen", "no_bias": true, "num_attention_heads": 32,
	"num_hidden_layers": 32, "onnx_safe": null, "rotary_emb_base": 10000, "rotary_pct": 1.0, "scale_attn_weights": true,
	"seq_length": 8192, "tie_word_embeddings": false, "tokenizer_class": "QWenTokenizer", "transformers_version": "4.32.0",
	"use_cache": true, "use_dynamic_ntk": true, "use_flash_attn": "auto", "use_logn_attn": true, "vocab_size": 151936}`

// TestConfig reads Qwen-7B-Chat's config.json (7,721,324,544
// parameters): the MLP half of intermediate_size, the context bounded at
// seq_length, c_attn's bias alone; its renames and skipped buffers;
// rotary_pct and scale_attn_weights (not read: QWenAttention sets it);
// the refusals.
func TestConfig(t *testing.T) {
	m, err := lm.New(lmckpt.ParseConfig(t, qwen7bChat))
	if err != nil {
		t.Fatal(err)
	}
	o := m.(*qwen1.Model).Options()
	s := m.Spec()
	if n := lmckpt.Params(m); n != 7_721_324_544 {
		t.Errorf("%d parameters, want 7,721,324,544", n)
	}
	if s.Layers != 32 || s.Heads != 32 || s.KVHeads != 32 || s.HeadDim != 128 || s.Intermediate != 11008 || s.MaxPositions != 8192 ||
		o.Eps != 1e-6 || s.TieEmbeddings || !o.FusedQKV || !o.QKVBias || o.OBias || o.MLPBias || o.Rope.RotaryDim != 128 ||
		math.Abs(o.Rope.InvFreq[1]*math.Pow(10000, 2.0/128)-1) > 1e-12 {
		t.Errorf("spec %+v, options %+v", s, o)
	}
	r := m.(lm.Renamer)
	for stored, want := range map[string]string{
		"transformer.wte.weight":             "model.embed_tokens.weight",
		"transformer.ln_f.weight":            "model.norm.weight",
		"transformer.h.7.ln_1.weight":        "model.layers.7.input_layernorm.weight",
		"transformer.h.7.ln_2.weight":        "model.layers.7.post_attention_layernorm.weight",
		"transformer.h.7.attn.c_attn.bias":   "model.layers.7.self_attn.qkv_proj.bias",
		"transformer.h.7.attn.c_proj.weight": "model.layers.7.self_attn.o_proj.weight",
		"transformer.h.7.mlp.w1.weight":      "model.layers.7.mlp.up_proj.weight",
		"transformer.h.7.mlp.w2.weight":      "model.layers.7.mlp.gate_proj.weight",
		"transformer.h.7.mlp.c_proj.weight":  "model.layers.7.mlp.down_proj.weight",
		"lm_head.weight":                     "lm_head.weight",
	} {
		if got := r.RenameWeight(stored); got != want {
			t.Errorf("%s read as %s, want %s", stored, got, want)
		}
	}
	sk := m.(lm.Skipper)
	for name, want := range map[string]bool{"transformer.h.3.attn.rotary_emb.inv_freq": true, "transformer.h.3.attn.masked_bias": true,
		"transformer.h.3.attn.c_attn.bias": false} {
		if _, got := sk.SkipWeight(name); got != want {
			t.Errorf("SkipWeight(%s) = %v, want %v", name, got, want)
		}
	}
	// rotary_pct turns part of each head; no_bias false biases every
	// projection.
	o2, err := qwen1.Resolve(lmckpt.ParseConfig(t, `{"architectures": ["QWenLMHeadModel"], "hidden_size": 64, "num_attention_heads": 4,
		"kv_channels": 16, "intermediate_size": 96, "rotary_pct": 0.5, "scale_attn_weights": false, "no_bias": false, "use_dynamic_ntk": false, "use_logn_attn": false, "seq_length": 16}`))
	if err != nil {
		t.Fatal(err)
	}
	if o2.Rope.RotaryDim != 8 || !o2.OBias || !o2.MLPBias || o2.Spec.HeadDim != 16 || o2.Spec.MaxPositions != 8192 || o2.Spec.Intermediate != 48 {
		t.Errorf("rotary_pct 0.5: %+v, spec %+v", o2.Rope, o2.Spec)
	}
	for cfg, want := range map[string]string{
		`{"architectures": ["QWenLMHeadModel"], "hidden_size": 64, "num_attention_heads": 4}`:                   "kv_channels 128 × num_attention_heads 4 is not hidden_size 64",
		`{"architectures": ["QWenLMHeadModel"], "hidden_size": 64, "num_attention_heads": 4, "kv_channels": 8}`: "kv_channels 8",
		`{"architectures": ["QWenLMHeadModel"], "intermediate_size": 101}`:                                      "intermediate_size 101 is odd",
	} {
		if _, err := qwen1.Resolve(lmckpt.ParseConfig(t, cfg)); err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "config.json") {
			t.Errorf("%s: %v, want %q", cfg, err, want)
		}
	}
}
