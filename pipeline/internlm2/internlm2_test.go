package internlm2_test

import (
	"math"
	"strings"
	"testing"

	"github.com/tputool/tputool/pipeline/internlm2"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
	"github.com/tputool/tputool/pipeline/testkit/lmref"
	"github.com/tputool/tputool/pipeline/testkit/moecheck"
	"github.com/tputool/tputool/pipeline/testkit/refcheck"
)

var prompts = [][]int{{1, 7, 21, 33, 4}, {1, 9, 14, 60, 3, 5, 41, 27, 11, 19, 50}}

// toInternLM2 writes the Llama in src as an InternLM2 release holds it:
// q_proj, k_proj and v_proj (and their biases) fused into attention.wqkv
// by key/value group as InternLM2Attention reads it back ("b q (h gs d)":
// each group's query heads, then its key head, then its value head), or
// with plain the rows q, then k, then v (a mutant); the other tensors
// renamed; the config with InternLM2Config's bias.
func toInternLM2(t *testing.T, src, dst string, c lmckpt.Config, plain bool) {
	t.Helper()
	ts, cfg, err := lmckpt.Rewrap(src, func(n string) string { return n })
	if err != nil {
		t.Fatal(err)
	}
	rename := strings.NewReplacer(".input_layernorm.", ".attention_norm.", ".post_attention_layernorm.", ".ffn_norm.",
		".self_attn.o_proj.", ".attention.wo.", ".mlp.gate_proj.", ".feed_forward.w1.", ".mlp.up_proj.", ".feed_forward.w3.",
		".mlp.down_proj.", ".feed_forward.w2.")
	out := lmckpt.FuseQKV(ts, c.Heads, c.KVHeads, c.HeadDim, !plain, ".attention.wqkv.")
	for i, x := range out {
		switch x.Name {
		case "model.embed_tokens.weight":
			out[i].Name = "model.tok_embeddings.weight"
		case "lm_head.weight":
			out[i].Name = "output.weight"
		default:
			out[i].Name = rename.Replace(x.Name)
		}
	}
	delete(cfg, "attention_bias")
	delete(cfg, "head_dim")
	cfg["bias"] = c.QKVBias
	cfg["architectures"], cfg["model_type"] = []string{internlm2.Architecture}, "internlm2"
	if err := lmckpt.WriteCheckpoint(dst, cfg, out); err != nil {
		t.Fatal(err)
	}
}

// TestLogitsMatchReference writes tiny Llamas (4 query heads over 2
// key/value heads, with and without the biases of wqkv and wo, and 4
// heads over 1) as InternLM2 releases and runs them on a left-padded
// batch and decode steps, compiled and eager, on the go and cpu backends,
// against lmref's float64 Llama reading the original; a release of two
// groups fused with the rows in q, k, v order must differ.
func TestLogitsMatchReference(t *testing.T) {
	for _, tc := range []struct {
		name     string
		kv       int
		bias     bool
		checkBad bool
	}{{"grouped", 2, false, true}, {"grouped biases", 2, true, true}, {"one kv head", 1, false, false}} {
		t.Run(tc.name, func(t *testing.T) {
			// An eps and a rope_theta that are not InternLM2Config's
			// defaults, so that a misread field shows.
			c := lmckpt.Config{Vocab: 64, Hidden: 32, Intermediate: 48, Layers: 3, Heads: 4, KVHeads: tc.kv, HeadDim: 8, Eps: 0.02,
				RopeTheta: []float64{50, 50, 50}, Window: []int{0, 0, 0}, QKVBias: tc.bias, OBias: tc.bias}
			src := t.TempDir()
			if err := (lmckpt.Tiny{Arch: "LlamaForCausalLM", Config: c, Seed: 180}).Write(src); err != nil {
				t.Fatal(err)
			}
			rm, err := lmref.Load(src, c)
			if err != nil {
				t.Fatal(err)
			}
			_, l := lmckpt.WriteLoad(t, func(dir string) error { toInternLM2(t, src, dir, c, false); return nil })
			moecheck.Run(t, "", l, rm, prompts, refcheck.GreedySequences(rm, prompts, 6), 6, 1e-4)
			if !tc.checkBad { // one group: its rows are q, k, v anyway
				return
			}
			_, plain := lmckpt.WriteLoad(t, func(dir string) error { toInternLM2(t, src, dir, c, true); return nil })
			moecheck.Differs(t, "wqkv read in q, k, v order", l, plain, prompts[1], 1e-3)
		})
	}
}

// internlm25 is internlm/internlm2_5-7b-chat's config.json (auto_map
// left out).
const internlm25 = `{"architectures": ["InternLM2ForCausalLM"], "attn_implementation": "eager", "bias": false, "bos_token_id": 1,
	"eos_token_id": 2, "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 14336,
	"max_position_embeddings": 32768, "model_type": "internlm2", "num_attention_heads": 32, "num_hidden_layers": 32,
	"num_key_value_heads": 8, "pad_token_id": 2, "pretraining_tp": 1, "rms_norm_eps": 1e-05,
	"rope_scaling": {"type": "dynamic", "factor": 2.0}, "rope_theta": 1000000, "tie_word_embeddings": false,
	"torch_dtype": "bfloat16", "use_cache": true, "vocab_size": 92544}`

// TestConfig reads InternLM 2.5 7B Chat's config.json (7,737,708,544
// parameters, the card's "7B"): dynamic rope scaling, grouped key/value
// heads, no biases, the untied head; its renames; InternLM2Config's bias
// default (true); the refusals.
func TestConfig(t *testing.T) {
	m, err := lm.New(lmckpt.ParseConfig(t, internlm25))
	if err != nil {
		t.Fatal(err)
	}
	o := m.(*internlm2.Model).Options()
	s := m.Spec()
	if n := lmckpt.Params(m); n != 7_737_708_544 {
		t.Errorf("%d parameters, want 7,737,708,544", n)
	}
	if s.Layers != 32 || s.Heads != 32 || s.KVHeads != 8 || s.HeadDim != 128 || s.Intermediate != 14336 || o.Eps != 1e-5 ||
		o.Rope.Type != "dynamic" || math.Abs(math.Pow(o.Rope.InvFreq[1], -float64(s.HeadDim)/2)/1e6-1) > 1e-9 || s.TieEmbeddings ||
		s.EOS[0] != 2 || s.BOS != 1 || o.QKVBias || o.OBias || o.MLPBias || !o.FusedQKV || !o.QKVPerHead || s.MaxPositions != 32768 {
		t.Errorf("spec %+v, options %+v", s, o)
	}
	r := m.(lm.Renamer)
	for stored, want := range map[string]string{
		"model.tok_embeddings.weight":                  "model.embed_tokens.weight",
		"model.norm.weight":                            "model.norm.weight",
		"output.weight":                                "lm_head.weight",
		"model.layers.7.attention_norm.weight":         "model.layers.7.input_layernorm.weight",
		"model.layers.7.ffn_norm.weight":               "model.layers.7.post_attention_layernorm.weight",
		"model.layers.7.attention.wqkv.weight":         "model.layers.7.self_attn.qkv_proj.weight",
		"model.layers.7.attention.wqkv.bias":           "model.layers.7.self_attn.qkv_proj.bias",
		"model.layers.7.attention.wo.weight":           "model.layers.7.self_attn.o_proj.weight",
		"model.layers.7.feed_forward.w1.weight":        "model.layers.7.mlp.gate_proj.weight",
		"model.layers.7.feed_forward.w3.weight":        "model.layers.7.mlp.up_proj.weight",
		"model.layers.7.feed_forward.w2.weight":        "model.layers.7.mlp.down_proj.weight",
		"model.layers.7.attention.rotary_emb.inv_freq": "model.layers.7.attention.rotary_emb.inv_freq",
	} {
		if got := r.RenameWeight(stored); got != want {
			t.Errorf("%s read as %s, want %s", stored, got, want)
		}
	}
	// bias absent is InternLM2Config's True.
	o2, err := internlm2.Resolve(lmckpt.ParseConfig(t, `{"architectures": ["InternLM2ForCausalLM"], "hidden_size": 64,
		"num_attention_heads": 4, "num_hidden_layers": 2, "vocab_size": 100, "intermediate_size": 96}`))
	if err != nil {
		t.Fatal(err)
	}
	if !o2.QKVBias || !o2.OBias || o2.MLPBias || o2.Spec.KVHeads != 4 || o2.Spec.HeadDim != 16 || o2.Spec.TieEmbeddings {
		t.Errorf("defaults: %+v", o2)
	}
	for cfg, want := range map[string]string{
		`{"architectures": ["InternLM2ForCausalLM"], "hidden_size": 64, "num_attention_heads": 4, "head_dim": 32}`:                                    "head_dim 32",
		`{"architectures": ["InternLM2ForCausalLM"], "rope_scaling": {"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 1024}}`: `rope_scaling type "yarn"`,
	} {
		if _, err := internlm2.Resolve(lmckpt.ParseConfig(t, cfg)); err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "config.json") {
			t.Errorf("%s: %v, want %q", cfg, err, want)
		}
	}
}
