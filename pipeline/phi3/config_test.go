package phi3_test

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/llama"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/phi3"
)

func newModel(t *testing.T, js string) (lm.Model, error) {
	t.Helper()
	cfg, err := config.ParseModel([]byte(js))
	if err != nil {
		t.Fatal(err)
	}
	return lm.New(cfg)
}

// ones is a JSON list of n ones: the releases' LongRoPE factors are not
// transcribed here (only their count matters to the sizes).
func ones(n int) string { return "[" + strings.TrimSuffix(strings.Repeat("1.0,", n), ",") + "]" }

// params counts a model's parameters, and those a token uses (each
// layer's experts by TopK of Num).
func params(m lm.Model) (all, active int64) {
	topK, experts := int64(1), int64(1)
	if r, ok := m.(lm.Routed); ok {
		for i := range m.Spec().Layers {
			if e := r.Experts(i); e != nil {
				topK, experts = int64(e.TopK), int64(e.Num)
			}
		}
	}
	for _, w := range lm.Weights(m) {
		k := int64(1)
		for _, d := range w.Shape {
			k *= int64(d)
		}
		all += k
		if strings.Contains(w.Name, ".experts.") {
			k = k * topK / experts
		}
		active += k
	}
	return all, active
}

// TestReleaseSizes builds the releases' configurations as their
// config.json files give them (sizes, windows, rotary settings; the
// LongRoPE factor lists replaced by ones of the same length) and checks
// the parameter counts the Hub publishes for them: Phi-3-mini-4k
// 3,821,079,552; Phi-3.5-mini (LongRoPE) the same; Phi-4-mini
// 3,836,021,760 (tied, partial rotary 0.75, 24 heads over 8); Phi-4
// 14,659,507,200; Phi-3.5-MoE 41,873,153,344, of which 6.64B active
// (two of sixteen experts; the model card says 6.6B).
func TestReleaseSizes(t *testing.T) {
	const mini = `"architectures": ["Phi3ForCausalLM"], "model_type": "phi3", "vocab_size": 32064, "hidden_size": 3072, "intermediate_size": 8192,
		"num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 32, "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "tie_word_embeddings": false`
	for _, c := range []struct {
		name, js       string
		params, active int64
		check          func(t *testing.T, m lm.Model)
	}{
		{"Phi-3-mini-4k", `{` + mini + `, "max_position_embeddings": 4096, "original_max_position_embeddings": 4096, "rope_scaling": null, "sliding_window": 2047}`,
			3_821_079_552, 3_821_079_552, func(t *testing.T, m lm.Model) {
				s := m.Spec()
				if s.SlidingWindow != 2047 || s.LayerKinds[0] != lm.KindSliding || s.MaxPositions != 4096 {
					t.Errorf("window %d, kinds %v, positions %d", s.SlidingWindow, s.LayerKinds[:2], s.MaxPositions)
				}
			}},
		{"Phi-3.5-mini", `{` + mini + `, "max_position_embeddings": 131072, "original_max_position_embeddings": 4096, "sliding_window": 262144,
			"rope_scaling": {"type": "longrope", "short_factor": ` + ones(48) + `, "long_factor": ` + ones(48) + `}}`,
			3_821_079_552, 3_821_079_552, func(t *testing.T, m lm.Model) {
				r := m.(*llama.Model).Options().Rope
				if want := math.Sqrt(1 + math.Log(32)/math.Log(4096)); r.LongAfter != 4096 || math.Abs(r.AttentionFactor-want) > 1e-12 || len(r.LongInvFreq) != 48 {
					t.Errorf("rope %+v, want the switch at 4096 and factor %v", r, want)
				}
			}},
		{"Phi-4-mini", `{"architectures": ["Phi3ForCausalLM"], "model_type": "phi3", "vocab_size": 200064, "hidden_size": 3072, "intermediate_size": 8192,
			"num_hidden_layers": 32, "num_attention_heads": 24, "num_key_value_heads": 8, "rms_norm_eps": 1e-05, "rope_theta": 10000.0,
			"tie_word_embeddings": true, "partial_rotary_factor": 0.75, "max_position_embeddings": 131072, "original_max_position_embeddings": 4096,
			"sliding_window": 262144, "rope_scaling": {"type": "longrope", "short_factor": ` + ones(48) + `, "long_factor": ` + ones(48) + `}}`,
			3_836_021_760, 3_836_021_760, func(t *testing.T, m lm.Model) {
				o := m.(*llama.Model).Options()
				if o.Rope.RotaryDim != 96 || !o.Spec.TieEmbeddings || o.Spec.HeadDim != 128 || o.Spec.KVHeads != 8 {
					t.Errorf("rotary %d, tied %v, head %d, kv %d", o.Rope.RotaryDim, o.Spec.TieEmbeddings, o.Spec.HeadDim, o.Spec.KVHeads)
				}
			}},
		{"Phi-4", `{"architectures": ["Phi3ForCausalLM"], "model_type": "phi3", "vocab_size": 100352, "hidden_size": 5120, "intermediate_size": 17920,
			"num_hidden_layers": 40, "num_attention_heads": 40, "num_key_value_heads": 10, "rms_norm_eps": 1e-05, "rope_theta": 250000,
			"max_position_embeddings": 16384, "original_max_position_embeddings": 16384, "rope_scaling": null, "sliding_window": null, "tie_word_embeddings": false}`,
			14_659_507_200, 14_659_507_200, func(t *testing.T, m lm.Model) {
				if s := m.Spec(); s.SlidingWindow != 0 || s.LayerKinds[0] != lm.KindFull {
					t.Errorf("window %d, kinds %v", s.SlidingWindow, s.LayerKinds[:2])
				}
			}},
		{"Phi-3.5-MoE", `{"architectures": ["PhiMoEForCausalLM"], "model_type": "phimoe", "vocab_size": 32064, "hidden_size": 4096, "intermediate_size": 6400,
			"num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "rms_norm_eps": 1e-05, "rope_theta": 10000.0,
			"attention_bias": true, "lm_head_bias": true, "num_local_experts": 16, "num_experts_per_tok": 2, "router_jitter_noise": 0.01,
			"input_jitter_noise": 0.01, "max_position_embeddings": 131072, "original_max_position_embeddings": 4096, "sliding_window": 131072,
			"tie_word_embeddings": false, "rope_scaling": {"type": "longrope", "short_factor": ` + ones(64) + `, "long_factor": ` + ones(64) + `,
			"short_mscale": 1.243163121016122, "long_mscale": 1.243163121016122, "original_max_position_embeddings": 4096}}`,
			41_873_153_344, 6_640_999_744, func(t *testing.T, m lm.Model) {
				o := m.(*phi3.MoEModel).Options()
				if !o.SparseMixer || o.JitterEps != 0.01 || o.TopK != 2 || o.Experts != 16 || !o.LayerNorm || !o.HeadBias || !o.QKVBias || !o.OBias {
					t.Errorf("options %+v", o)
				}
				if o.Rope.AttentionFactor != 1.243163121016122 || o.Rope.LongAttentionFactor != 1.243163121016122 {
					t.Errorf("mscales %v, %v", o.Rope.AttentionFactor, o.Rope.LongAttentionFactor)
				}
			}},
	} {
		t.Run(c.name, func(t *testing.T) {
			m, err := newModel(t, c.js)
			if err != nil {
				t.Fatal(err)
			}
			all, active := params(m)
			if all != c.params || active != c.active {
				t.Errorf("%d parameters (%d active), want %d (%d)", all, active, c.params, c.active)
			}
			c.check(t, m)
		})
	}
}

// TestConfigErrors checks what the families' configuration classes refuse
// or default: a rope type Phi3Config does not read (unsupported, named),
// LongRoPE factors of the wrong count, Phi-3.5-MoE without its mscales,
// a top k other than sparsemixer's 2, a negative jitter; and
// original_max_position_embeddings defaulting to Phi3Config's 4096.
func TestConfigErrors(t *testing.T) {
	dense := func(extra string) string {
		return `{"architectures": ["Phi3ForCausalLM"], "hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 2, "vocab_size": 50,
			"intermediate_size": 96, "max_position_embeddings": 8192` + extra + `}`
	}
	moe := func(extra string) string {
		return `{"architectures": ["PhimoeForCausalLM"], "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 2,
			"vocab_size": 50, "intermediate_size": 96, "num_local_experts": 4` + extra + `}`
	}
	for _, c := range []struct {
		name, js, want string
		unsupported    bool
	}{
		{"dense: a linear rope", dense(`, "rope_scaling": {"type": "linear", "factor": 2}`), `"linear"`, true},
		{"dense: factors of the wrong count", dense(`, "rope_scaling": {"type": "longrope", "short_factor": [1, 1], "long_factor": ` + ones(8) + `}`), "short_factor", false},
		{"moe: no mscales", moe(`, "rope_scaling": {"type": "longrope", "short_factor": ` + ones(8) + `, "long_factor": ` + ones(8) + `, "original_max_position_embeddings": 64}`), "short_mscale", false},
		{"moe: top 4", moe(`, "num_experts_per_tok": 4`), "num_experts_per_tok", false},
		{"moe: one expert", moe(`, "num_local_experts": 1`), "num_local_experts", false},
		{"moe: a negative jitter", moe(`, "router_jitter_noise": -0.1`), "router_jitter_noise", false},
		{"moe: a yarn rope", moe(`, "rope_scaling": {"type": "yarn", "factor": 4}`), `"yarn"`, true},
	} {
		_, err := newModel(t, c.js)
		if err == nil || !strings.Contains(err.Error(), c.want) || errors.Is(err, errs.ErrUnsupported) != c.unsupported {
			t.Errorf("%s: %v; want an error naming %s (unsupported: %v)", c.name, err, c.want, c.unsupported)
		}
	}
	m, err := newModel(t, dense(`, "rope_scaling": {"type": "longrope", "short_factor": `+ones(8)+`, "long_factor": `+ones(8)+`}`))
	if err != nil {
		t.Fatal(err)
	}
	if r := m.(*llama.Model).Options().Rope; r.LongAfter != 4096 || math.Abs(r.AttentionFactor-math.Sqrt(1+math.Log(2)/math.Log(4096))) > 1e-12 {
		t.Errorf("original length %d, factor %v: want Phi3Config's 4096 and sqrt(1 + ln 2/ln 4096)", r.LongAfter, r.AttentionFactor)
	}
	for _, arch := range []string{"PhimoeForCausalLM", "PhiMoEForCausalLM"} {
		if _, err := newModel(t, strings.Replace(moe(""), "PhimoeForCausalLM", arch, 1)); err != nil {
			t.Errorf("%s: %v", arch, err)
		}
	}
}
