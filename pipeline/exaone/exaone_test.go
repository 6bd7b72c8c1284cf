package exaone_test

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/tputool/tputool/pipeline/exaone"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
	"github.com/tputool/tputool/pipeline/testkit/lmref"
	"github.com/tputool/tputool/pipeline/testkit/moecheck"
	"github.com/tputool/tputool/pipeline/testkit/refcheck"
)

var prompts = [][]int{{1, 7, 21, 33, 4}, {1, 9, 14, 60, 3, 5, 41, 27, 11, 19, 50}}

// exaoneName is the EXAONE name of a Llama tensor, as the releases store
// it; swap reads c_fc_0 and c_fc_1 the other way round (a mutant).
func exaoneName(n string, swap bool) string {
	gate, up := "c_fc_0", "c_fc_1"
	if swap {
		gate, up = up, gate
	}
	r := strings.NewReplacer("model.layers.", "transformer.h.", ".input_layernorm.", ".ln_1.", ".post_attention_layernorm.", ".ln_2.",
		".self_attn.o_proj.", ".attn.attention.out_proj.", ".self_attn.", ".attn.attention.",
		".mlp.gate_proj.", ".mlp."+gate+".", ".mlp.up_proj.", ".mlp."+up+".", ".mlp.down_proj.", ".mlp.c_proj.")
	switch n {
	case "model.embed_tokens.weight":
		return "transformer.wte.weight"
	case "model.norm.weight":
		return "transformer.ln_f.weight"
	}
	return r.Replace(n)
}

// toExaone writes the Llama in src as an EXAONE release holds it: its
// tensors renamed, its config in ExaoneConfig's names.
func toExaone(t *testing.T, src, dst string, swap bool) {
	t.Helper()
	ts, cfg, err := lmckpt.Rewrap(src, func(n string) string { return exaoneName(n, swap) })
	if err != nil {
		t.Fatal(err)
	}
	for from, to := range map[string]string{"num_hidden_layers": "num_layers", "rms_norm_eps": "layer_norm_epsilon", "hidden_act": "activation_function"} {
		if v, ok := cfg[from]; ok {
			cfg[to] = v
			delete(cfg, from)
		}
	}
	cfg["architectures"], cfg["model_type"] = []string{exaone.Architecture}, "exaone"
	if err := lmckpt.WriteCheckpoint(dst, cfg, ts); err != nil {
		t.Fatal(err)
	}
}

// TestLogitsMatchReference writes a tiny Llama (grouped KV heads, untied
// and tied) as an EXAONE release and runs it on a left-padded batch and
// decode steps, compiled and eager, on the go and cpu backends, against
// lmref's float64 Llama reading the original; and checks that a release
// read with c_fc_0 and c_fc_1 swapped differs.
func TestLogitsMatchReference(t *testing.T) {
	for _, tied := range []bool{false, true} {
		// An eps and a rope_theta that are not ExaoneConfig's defaults, so
		// that a misread field shows.
		c := lmckpt.Config{Vocab: 64, Hidden: 32, Intermediate: 48, Layers: 3, Heads: 4, KVHeads: 2, HeadDim: 8, Eps: 0.02, Tied: tied,
			RopeTheta: []float64{50, 50, 50}, Window: []int{0, 0, 0}}
		tc := lmckpt.Tiny{Arch: "LlamaForCausalLM", Config: c, Seed: 170}
		src := t.TempDir()
		if err := tc.Write(src); err != nil {
			t.Fatal(err)
		}
		rm, err := lmref.Load(src, c)
		if err != nil {
			t.Fatal(err)
		}
		_, l := lmckpt.WriteLoad(t, func(dir string) error { toExaone(t, src, dir, false); return nil })
		if l.Model.Spec().TieEmbeddings != tied {
			t.Fatalf("tied %v read as %v", tied, l.Model.Spec().TieEmbeddings)
		}
		moecheck.Run(t, "", l, rm, prompts, refcheck.GreedySequences(rm, prompts, 6), 6, 1e-4)
		_, swapped := lmckpt.WriteLoad(t, func(dir string) error { toExaone(t, src, dir, true); return nil })
		moecheck.Differs(t, fmt.Sprintf("tied %v: c_fc_0 and c_fc_1 swapped", tied), l, swapped, prompts[1], 1e-3)
	}
}

// exaone35 is LGAI-EXAONE/EXAONE-3.5-2.4B-Instruct's config.json (the
// auto_map and dropout fields left out).
const exaone35 = `{"activation_function": "silu", "architectures": ["ExaoneForCausalLM"], "bos_token_id": 1, "eos_token_id": 361,
	"head_dim": 80, "hidden_size": 2560, "intermediate_size": 7168, "layer_norm_epsilon": 1e-05, "max_position_embeddings": 32768,
	"model_type": "exaone", "num_attention_heads": 32, "num_key_value_heads": 8, "num_layers": 30, "pad_token_id": 0,
	"rope_scaling": {"factor": 8.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0, "original_max_position_embeddings": 8192,
	"rope_type": "llama3"}, "rope_theta": 1000000.0, "tie_word_embeddings": true, "torch_dtype": "bfloat16", "use_cache": true,
	"vocab_size": 102400}`

// TestConfig reads EXAONE 3.5 2.4B's config.json (2,405,327,360
// parameters, the card's "2.4B"): ExaoneConfig's names, llama3's rope
// scaling, the tied head; its renames.
func TestConfig(t *testing.T) {
	m, err := lm.New(lmckpt.ParseConfig(t, exaone35))
	if err != nil {
		t.Fatal(err)
	}
	o := m.(*exaone.Model).Options()
	s := m.Spec()
	if n := lmckpt.Params(m); n != 2_405_327_360 {
		t.Errorf("%d parameters, want 2,405,327,360", n)
	}
	if s.Layers != 30 || s.Heads != 32 || s.KVHeads != 8 || s.HeadDim != 80 || s.Intermediate != 7168 || o.Eps != 1e-5 ||
		o.Rope.Type != "llama3" || math.Abs(math.Pow(o.Rope.InvFreq[1], -float64(s.HeadDim)/2)/1e6-1) > 1e-9 || !s.TieEmbeddings || s.EOS[0] != 361 || s.BOS != 1 || o.QKVBias || o.MLPBias || s.MaxPositions != 32768 {
		t.Errorf("spec %+v, options %+v", s, o)
	}
	r := m.(lm.Renamer)
	for stored, want := range map[string]string{
		"transformer.wte.weight":                         "model.embed_tokens.weight",
		"transformer.ln_f.weight":                        "model.norm.weight",
		"transformer.h.7.ln_1.weight":                    "model.layers.7.input_layernorm.weight",
		"transformer.h.7.ln_2.weight":                    "model.layers.7.post_attention_layernorm.weight",
		"transformer.h.7.attn.attention.k_proj.weight":   "model.layers.7.self_attn.k_proj.weight",
		"transformer.h.7.attn.attention.out_proj.weight": "model.layers.7.self_attn.o_proj.weight",
		"transformer.h.7.mlp.c_fc_0.weight":              "model.layers.7.mlp.gate_proj.weight",
		"transformer.h.7.mlp.c_fc_1.weight":              "model.layers.7.mlp.up_proj.weight",
		"transformer.h.7.mlp.c_proj.weight":              "model.layers.7.mlp.down_proj.weight",
		"lm_head.weight":                                 "lm_head.weight",
	} {
		if got := r.RenameWeight(stored); got != want {
			t.Errorf("%s read as %s, want %s", stored, got, want)
		}
	}
	// intermediate_size null is 4 × hidden; a head_dim that disagrees
	// with hidden / heads is refused.
	o2, err := exaone.Resolve(lmckpt.ParseConfig(t, `{"architectures": ["ExaoneForCausalLM"], "hidden_size": 64, "num_attention_heads": 4,
		"num_layers": 2, "head_dim": 16, "intermediate_size": null, "vocab_size": 100}`))
	if err != nil {
		t.Fatal(err)
	}
	if o2.Spec.HeadDim != 16 || o2.Spec.Intermediate != 256 || o2.Spec.Layers != 2 || !o2.Spec.TieEmbeddings {
		t.Errorf("resolved %+v", o2.Spec)
	}
	if _, err := exaone.Resolve(lmckpt.ParseConfig(t, `{"architectures": ["ExaoneForCausalLM"], "hidden_size": 64, "num_attention_heads": 4,
		"head_dim": 32}`)); err == nil || !strings.Contains(err.Error(), "head_dim 32") || !strings.Contains(err.Error(), "config.json") {
		t.Errorf("head_dim 32 of 64 / 4: %v", err)
	}
}
