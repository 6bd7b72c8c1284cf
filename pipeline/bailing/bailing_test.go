package bailing_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/tputool/tputool/compile"
	"github.com/tputool/tputool/pipeline/bailing"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/testkit/dsref"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
	"github.com/tputool/tputool/pipeline/testkit/moecheck"
	"github.com/tputool/tputool/pipeline/testkit/mtpcheck"
	"github.com/tputool/tputool/pipeline/testkit/refcheck"
)

var prompts = [][]int{{1, 7, 21, 33, 4}, {1, 9, 14, 60, 3, 5, 41, 27, 11, 19, 50}}

// TestLingLogitsMatchReference runs tiny Ling 2.0s (Ling-mini-2.0's
// switches: a fused q/k/v projection without biases, q/k norms, 2 of 4
// expert groups open, routed_scaling_factor 2.5, the router's biases all
// negative so that the closed groups' −∞ decides, a multi-token-prediction
// layer left unread; and the other paths: biases on the fused projection
// and on attention.dense, one group, a tied head) on a left-padded batch
// of two prompts plus decode steps, with each experts formulation,
// compiled and eager, on the go and cpu backends, against dsref's float64
// BailingMoeV2ForCausalLM.
func TestLingLogitsMatchReference(t *testing.T) {
	const steps = 6
	const tol = 1e-4
	for _, c := range []struct {
		name string
		ling dsref.Ling
	}{{"mini", dsref.TinyLing()}, {"biases", dsref.TinyLingBiases()}} {
		t.Run(c.name, func(t *testing.T) {
			dir, l := lmckpt.WriteLoad(t, c.ling.Write)
			rm, err := c.ling.Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			moecheck.Run(t, "", l, rm, prompts, refcheck.GreedySequences(rm, prompts, steps), steps, tol)
		})
	}
}

// TestLingSwitchesMatter checks that the comparison above can fail where
// Ling 2.0 differs from its kin: closing the router's groups with 0 (as
// DeepSeek-V3 in transformers does), rotating whole heads, reading the
// fused projection's keys and values in the other order, or (on the
// other paths) leaving out attention.dense's bias gives other logits than
// the model.
func TestLingSwitchesMatter(t *testing.T) {
	type mutation struct {
		name string
		f    func(m *dsref.GLMModel)
	}
	for _, c := range []struct {
		name string
		ling dsref.Ling
		muts []mutation
	}{
		{"mini", dsref.TinyLing(), []mutation{
			{"groups closed with 0", func(m *dsref.GLMModel) { m.C.MaskInf = false }},
			{"full rotary", func(m *dsref.GLMModel) { m.C.PartialRotary = 1 }},
			{"v before k", func(m *dsref.GLMModel) {
				for n, v := range m.W {
					if k, ok := strings.CutSuffix(n, "self_attn.k_proj.weight"); ok {
						m.W[n], m.W[k+"self_attn.v_proj.weight"] = m.W[k+"self_attn.v_proj.weight"], v
					}
				}
			}},
		}},
		{"biases", dsref.TinyLingBiases(), []mutation{
			{"no dense bias", func(m *dsref.GLMModel) { m.C.OBias = false }},
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir, l := lmckpt.WriteLoad(t, c.ling.Write)
			prompt := prompts[1]
			got := moecheck.Prefill(t, l, prompt)
			rm, err := c.ling.Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			var mutants []refcheck.Mutant
			for _, mu := range c.muts {
				mm, err := c.ling.Load(dir)
				if err != nil {
					t.Fatal(err)
				}
				mu.f(mm)
				mutants = append(mutants, refcheck.Mutant{Name: mu.name, Logits: mm.Logits})
			}
			refcheck.Discriminates(t, got[0], prompt, rm.Logits, 1e-3, mutants...)
		})
	}
}

// lingMini is a config.json with Ling-mini-2.0's sizes (the model card's
// 16.26B parameters, 1.43B active of which 789M outside the embedding
// and head, follow from them).
const lingMini = `{
  "architectures": ["BailingMoeV2ForCausalLM"], "model_type": "bailing_moe_v2",
  "vocab_size": 157184, "hidden_size": 2048, "intermediate_size": 5120, "moe_intermediate_size": 512,
  "num_hidden_layers": 20, "num_attention_heads": 16, "num_key_value_heads": 4, "head_dim": 128,
  "partial_rotary_factor": 0.5, "rope_theta": 600000, "rope_scaling": null, "max_position_embeddings": 32768,
  "use_qkv_bias": false, "use_bias": false, "use_qk_norm": true, "use_rmsnorm": true, "norm_head": false,
  "num_experts": 256, "num_shared_experts": 1, "num_experts_per_tok": 8, "n_group": 8, "topk_group": 4,
  "routed_scaling_factor": 2.5, "score_function": "sigmoid", "router_dtype": "fp32", "norm_topk_prob": true,
  "moe_shared_expert_intermediate_size": 512, "first_k_dense_replace": 1, "num_nextn_predict_layers": 1,
  "rms_norm_eps": 1e-06, "tie_word_embeddings": false, "hidden_act": "silu", "torch_dtype": "bfloat16"
}`

// TestLingConfig reads Ling-mini-2.0's sizes and the tensor names of its
// checkpoints, the configuration class's defaults, and refuses what it
// cannot run, naming the field.
func TestLingConfig(t *testing.T) {
	m, err := lm.New(lmckpt.ParseConfig(t, lingMini))
	if err != nil {
		t.Fatal(err)
	}
	o := m.(*bailing.Model).Options()
	total, experts := int64(0), int64(0)
	for _, w := range lm.Weights(m) {
		n := int64(1)
		for _, d := range w.Shape {
			n *= int64(d)
		}
		total += n
		if strings.Contains(w.Name, ".mlp.experts.") {
			experts += n
		}
	}
	// The card's 789M activated outside the embedding and the head.
	active := total - experts + experts*8/256 - 2*157184*2048
	if total != 16_255_643_392 || active != 789_147_392 {
		t.Errorf("%d parameters, %d active outside the embedding and head; want 16,255,643,392 and 789,147,392", total, active)
	}
	s := m.Spec()
	if !o.GQA || !o.FusedQKV || o.QKVBias || o.OBias || !o.QKNorm || !o.MaskInf || s.Heads != 16 || s.KVHeads != 4 || s.HeadDim != 128 ||
		o.Rope.RotaryDim != 64 || o.Experts != 256 || o.TopK != 8 || o.Groups != 8 || o.TopKGroup != 4 || !o.NormTopK || o.RoutedScale != 2.5 ||
		o.Shared != 1 || o.Sparse[0] || !o.Sparse[1] || s.Layers != 20 || o.MTPLayers != 1 || s.TieEmbeddings {
		t.Errorf("spec %+v, options %+v", s, o)
	}
	if n := m.(lm.MultiToken).MTPLayers(); n != 1 {
		t.Errorf("%d multi-token-prediction layers, want 1", n)
	}
	if r, ok := m.(lm.Skipper).SkipWeight("model.layers.20.eh_proj.weight"); !ok || !strings.Contains(r, "multi-token") {
		t.Errorf("layer 20 not skipped: %q %v", r, ok)
	}
	r := m.(lm.Renamer)
	for stored, want := range map[string]string{
		"model.word_embeddings.weight":                    "model.embed_tokens.weight",
		"model.layers.3.attention.query_key_value.weight": "model.layers.3.self_attn.qkv_proj.weight",
		"model.layers.3.attention.query_key_value.bias":   "model.layers.3.self_attn.qkv_proj.bias",
		"model.layers.3.attention.dense.weight":           "model.layers.3.self_attn.o_proj.weight",
		"model.layers.3.attention.query_layernorm.weight": "model.layers.3.self_attn.q_norm.weight",
		"model.layers.3.attention.key_layernorm.weight":   "model.layers.3.self_attn.k_norm.weight",
		"model.layers.3.mlp.gate.expert_bias":             "model.layers.3.mlp.gate.expert_bias",
		"model.layers.3.mlp.experts.7.up_proj.weight":     "model.layers.3.mlp.experts.7.up_proj.weight",
		"model.layers.20.final_layernorm.weight":          "model.layers.20.final_layernorm.weight",
		"model.layers.3.attention.rotary_emb.inv_freq":    "model.layers.3.attention.rotary_emb.inv_freq",
	} {
		if got := r.RenameWeight(stored); got != want {
			t.Errorf("%s read as %s, want %s", stored, got, want)
		}
	}

	// BailingMoeV2Config's defaults where a config leaves fields out.
	d, err := bailing.Resolve(lmckpt.ParseConfig(t, `{"architectures": ["BailingMoeV2ForCausalLM"], "num_key_value_heads": 4, "intermediate_size": 256, "moe_intermediate_size": 64}`))
	if err != nil {
		t.Fatal(err)
	}
	if d.Spec.Hidden != 1024 || d.Spec.Heads != 16 || d.Spec.Layers != 24 || d.Spec.VocabSize != 30592 || d.Experts != 16 || d.TopK != 2 ||
		d.Groups != 8 || d.TopKGroup != 4 || d.RoutedScale != 2.5 || !d.OBias || d.QKVBias || d.QKNorm || d.Rope.RotaryDim != 32 ||
		d.Eps != 1e-5 || d.Spec.MaxPositions != 16384 || d.Shared != 0 || !d.Sparse[0] {
		t.Errorf("defaults: %+v", d)
	}
	// BailingMoeV2Gate renormalizes whenever top_k > 1, whatever
	// norm_topk_prob says.
	n, err := bailing.Resolve(lmckpt.ParseConfig(t, `{"architectures": ["BailingMoeV2ForCausalLM"], "num_key_value_heads": 4, "intermediate_size": 256,
		"moe_intermediate_size": 64, "norm_topk_prob": false}`))
	if err != nil || !n.NormTopK {
		t.Errorf("norm_topk_prob false: %v, NormTopK %v", err, n.NormTopK)
	}

	base := `"architectures": ["BailingMoeV2ForCausalLM"], "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "num_hidden_layers": 2, "intermediate_size": 32, "vocab_size": 100, "moe_intermediate_size": 16, "num_experts": 8, "num_experts_per_tok": 2, "n_group": 1, "topk_group": 1, "first_k_dense_replace": 1`
	for _, bad := range []struct {
		js, want    string
		unsupported bool
	}{
		{`"num_key_value_heads": 3`, "num_key_value_heads", false},
		{`"num_key_value_heads": null`, "num_key_value_heads is missing", false},
		{`"n_group": 3`, "n_group 3 must divide num_experts 8", false},
		{`"num_experts_per_tok": 9`, "num_experts_per_tok 9", false},
		{`"num_experts": 0`, "num_experts must be positive", false},
		{`"score_function": "softmax"`, `score_function "softmax" is not supported`, true},
		{`"moe_intermediate_size": null`, "moe_intermediate_size must be set", false},
		{`"intermediate_size": 0`, "intermediate_size must be positive", false},
		{`"first_k_dense_replace": -1`, "first_k_dense_replace must not be negative", false},
		{`"num_shared_experts": 1, "moe_shared_expert_intermediate_size": 32`, "moe_shared_expert_intermediate_size 32 differs from moe_intermediate_size 16", true},
		{`"norm_head": true`, "norm_head true", true},
		{`"use_rmsnorm": false`, "use_rmsnorm false", true},
		{`"partial_rotary_factor": 0.1`, "rotary dim", false},
		{`"num_experts": 1000000`, "expert MLPs", false},
	} {
		_, err := bailing.Resolve(lmckpt.ParseConfig(t, fmt.Sprintf("{%s, %s}", base, bad.js)))
		if err == nil || !strings.Contains(err.Error(), bad.want) || !strings.Contains(err.Error(), "config.json") {
			t.Errorf("%s: error %v, want one naming config.json and %q", bad.js, err, bad.want)
		}
		if err != nil && bad.unsupported != strings.Contains(err.Error(), "not supported") {
			t.Errorf("%s: error %v", bad.js, err)
		}
	}
}

// TestLingMTPMatchesReference drafts with a tiny Ling 2.0's
// multi-token-prediction head as a State's steps feed it
// (mtpcheck.Follow): the head's logits must be dsref's
// (BailingMoeV2MTPLayer's) within 1e-4, and its chained greedy drafts the
// reference's.
func TestLingMTPMatchesReference(t *testing.T) {
	const tol = 1e-4
	c := dsref.TinyLing()
	dir, l := lmckpt.WriteLoad(t, c.Write)
	if err := l.WithMTP(); err != nil {
		t.Fatal(err)
	}
	rm, err := c.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	r, err := compile.NewRunner(refcheck.CPUBackend(t), l, compile.Options{Mode: compile.Compiled})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	st := r.NewState()
	defer st.Release()
	mtpcheck.Follow(t, st, rm, []int{1, 9, 14, 60, 3, 5, 41, 27, 11, 19, 50}, tol)
}
