package deepseekv1_test

import (
	"strings"
	"testing"

	"github.com/tputool/tputool/pipeline/deepseekv1"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/qwen3moe"
	"github.com/tputool/tputool/pipeline/testkit/deepseekv1ref"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
	"github.com/tputool/tputool/pipeline/testkit/moecheck"
	"github.com/tputool/tputool/pipeline/testkit/refcheck"
)

var prompts = [][]int{{1, 7, 21, 33, 4}, {1, 9, 14, 60, 3, 5, 41, 27, 11, 19, 50}}

// TestLogitsMatchReference runs tiny DeepSeek MoEs (deepseek-moe-16b's
// layout: a dense first layer, then experts on every layer, the top 3 of
// 8 undivided, 2 shared experts; and one with experts on every second
// layer, grouped-query attention, the top 2 of 4 divided by their sum
// and no shared ones) on a left-padded batch of two prompts and decode
// steps, with each experts formulation, compiled and eager, on the go and
// cpu backends, against deepseekv1ref's float64 forward; and in bfloat16
// compute within a few percent.
func TestLogitsMatchReference(t *testing.T) {
	const steps = 6
	for _, c := range []struct {
		name string
		ds   deepseekv1ref.Deepseek
	}{{"moe16b", deepseekv1ref.Tiny()}, {"everyother", deepseekv1ref.EveryOther()}} {
		t.Run(c.name, func(t *testing.T) {
			dir, l := lmckpt.WriteLoad(t, c.ds.Write)
			rm, err := c.ds.Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			moecheck.Run(t, "", l, rm, prompts, refcheck.GreedySequences(rm, prompts, steps), steps, 1e-4)
			t.Logf("bfloat16: worst relative error %.3g", moecheck.BFloat16(t, l, rm, prompts, 0.05))
		})
	}
}

// TestSwitchesMatter checks that the test above can fail where DeepSeek's
// block is its own: a reference dividing the top weights by their sum, or
// without the shared experts, gives other logits than the model.
func TestSwitchesMatter(t *testing.T) {
	c := deepseekv1ref.Tiny()
	dir, l := lmckpt.WriteLoad(t, c.Write)
	rm, err := c.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	prompt := prompts[1]
	got := moecheck.Prefill(t, l, prompt)
	divided := &deepseekv1ref.Model{C: rm.C, W: rm.W}
	divided.C.Norm = true
	unshared := &deepseekv1ref.Model{C: rm.C, W: map[string][]float64{}}
	for n, v := range rm.W {
		if strings.Contains(n, "shared_experts.down_proj") {
			v = make([]float64, len(v))
		}
		unshared.W[n] = v
	}
	refcheck.Discriminates(t, got[0], prompt, rm.Logits, 1e-3,
		refcheck.Mutant{Name: "weights divided", Logits: divided.Logits},
		refcheck.Mutant{Name: "no shared experts", Logits: unshared.Logits})
}

// moe16b is deepseek-ai/deepseek-moe-16b-base's config.json.
func moe16b(extra string) string {
	return `{"architectures": ["DeepseekForCausalLM"], "attention_bias": false, "attention_dropout": 0.0, "aux_loss_alpha": 0.001,
	"bos_token_id": 100000, "eos_token_id": 100001, "first_k_dense_replace": 1, "hidden_act": "silu", "hidden_size": 2048,
	"initializer_range": 0.02, "intermediate_size": 10944, "max_position_embeddings": 4096, "model_type": "deepseek",
	"moe_intermediate_size": 1408, "moe_layer_freq": 1, "n_routed_experts": 64, "n_shared_experts": 2, "norm_topk_prob": false,
	"num_attention_heads": 16, "num_experts_per_tok": 6, "num_hidden_layers": 28, "num_key_value_heads": 16, "pretraining_tp": 1,
	"rms_norm_eps": 1e-06, "rope_scaling": null, "rope_theta": 10000, "scoring_func": "softmax", "seq_aux": true,
	"tie_word_embeddings": false, "torch_dtype": "bfloat16", "use_cache": true, "vocab_size": 102400` + extra + `}`
}

// TestConfig reads deepseek-moe-16b's config.json (16,375,728,128
// parameters, the card's 16.4B; 2,828,650,496 active a token, its 2.8B)
// and refuses what it cannot run, naming the field.
func TestConfig(t *testing.T) {
	m, err := lm.New(lmckpt.ParseConfig(t, moe16b("")))
	if err != nil {
		t.Fatal(err)
	}
	o, s := m.(*qwen3moe.Model).Options(), m.Spec()
	if n := lmckpt.Params(m); n != 16_375_728_128 {
		t.Errorf("%d parameters, want 16,375,728,128", n)
	}
	sparse := 0
	for _, v := range o.Sparse {
		if v {
			sparse++
		}
	}
	active := lmckpt.Params(m) - int64(sparse)*int64(o.Experts-o.TopK)*3*int64(o.MoEIntermediate)*int64(s.Hidden)
	if active != 2_828_650_496 {
		t.Errorf("%d active parameters, want 2,828,650,496", active)
	}
	if o.Sparse[0] || !o.Sparse[1] || sparse != 27 || o.Experts != 64 || o.TopK != 6 || o.NormTopK || o.SharedIntermediate != 2816 ||
		s.Intermediate != 10944 || s.BOS != 100000 || s.EOS[0] != 100001 {
		t.Errorf("spec %+v, options %+v", s, o)
	}
	// MoEGate divides only when it takes more than one: with one expert
	// its softmax weight stays, norm_topk_prob or not.
	one, err := deepseekv1.Resolve(lmckpt.ParseConfig(t, strings.Replace(strings.Replace(moe16b(""), `"num_experts_per_tok": 6`, `"num_experts_per_tok": 1`, 1),
		`"norm_topk_prob": false`, `"norm_topk_prob": true`, 1)))
	if err != nil || one.NormTopK {
		t.Errorf("one expert with norm_topk_prob: NormTopK %v, %v", one.NormTopK, err)
	}
	dense, err := deepseekv1.Resolve(lmckpt.ParseConfig(t, strings.Replace(moe16b(""), `"n_routed_experts": 64`, `"n_routed_experts": null`, 1)))
	if err != nil || dense.Experts != 0 {
		t.Errorf("n_routed_experts null: %+v, %v", dense.Experts, err)
	}
	for _, bad := range []struct{ extra, want string }{
		{`, "scoring_func": "sigmoid"`, `scoring_func "sigmoid"`},
		{`, "num_experts_per_tok": 65`, "num_experts_per_tok 65 must be in [1, n_routed_experts 64]"},
		{`, "moe_layer_freq": 0`, "moe_layer_freq must be positive"},
	} {
		js := moe16b("")
		for _, key := range []string{`"scoring_func": "softmax", `, `"num_experts_per_tok": 6, `, `"moe_layer_freq": 1, `} {
			if strings.Contains(bad.extra, strings.SplitN(key, ":", 2)[0]) {
				js = strings.Replace(js, key, "", 1)
			}
		}
		_, err := deepseekv1.Resolve(lmckpt.ParseConfig(t, strings.TrimSuffix(js, "}")+bad.extra+"}"))
		if err == nil || !strings.Contains(err.Error(), bad.want) || !strings.Contains(err.Error(), "config.json") {
			t.Errorf("%s: error %v, want one naming config.json and %q", bad.extra, err, bad.want)
		}
	}
}
