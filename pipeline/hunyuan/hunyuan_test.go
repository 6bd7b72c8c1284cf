package hunyuan_test

import (
	"encoding/json"
	"errors"
	"maps"
	"math"
	"strings"
	"testing"

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/loader/safetensors"
	_ "github.com/tputool/tputool/pipeline/hunyuan"
	"github.com/tputool/tputool/pipeline/llama"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/qwen3moe"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
	"github.com/tputool/tputool/pipeline/testkit/lmref"
	"github.com/tputool/tputool/pipeline/testkit/moecheck"
	"github.com/tputool/tputool/pipeline/testkit/refcheck"
)

// a13b is Hunyuan-A13B-Instruct's shape as its model card and config
// give it: 32 layers, hidden 4096, 32 heads of 128 over 8 KV heads, 64
// experts of 3072 and one shared MLP of 3072 on every layer, top 8, a
// vocabulary of 128167, the alpha-1000 rotary, the per-layer lists.
const a13b = `{"architectures": ["HunYuanMoEV1ForCausalLM"], "model_type": "hunyuan_v1_moe",
	"vocab_size": 128167, "hidden_size": 4096, "intermediate_size": 3072, "num_hidden_layers": 32,
	"num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "attention_head_dim": 128,
	"max_position_embeddings": 32768, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
	"rope_scaling": {"alpha": 1000.0, "beta_fast": 32, "beta_slow": 1, "factor": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0, "type": "dynamic"},
	"num_experts": 64, "moe_topk": [8,8,8,8,8,8,8,8,8,8,8,8,8,8,8,8,8,8,8,8,8,8,8,8,8,8,8,8,8,8,8,8],
	"moe_intermediate_size": [3072,3072,3072,3072,3072,3072,3072,3072,3072,3072,3072,3072,3072,3072,3072,3072,3072,3072,3072,3072,3072,3072,3072,3072,3072,3072,3072,3072,3072,3072,3072,3072],
	"num_shared_expert": [1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1],
	"use_mixed_mlp_moe": true, "use_qk_norm": true, "use_cla": false, "tie_word_embeddings": true,
	"attention_bias": false, "mlp_bias": false, "bos_token_id": 1, "eos_token_id": 127960}`

// TestConfig: the classes' defaults; Hunyuan-A13B's shape, 80.4B
// parameters of which 12.7B are active a token (the card's 80B and
// 13B); the alpha rotary's base; the refusals, each naming its field.
func TestConfig(t *testing.T) {
	m, err := lm.New(lmckpt.ParseConfig(t, `{"architectures": ["HunYuanDenseV1ForCausalLM"]}`))
	if err != nil {
		t.Fatal(err)
	}
	o := m.(*llama.Model).Options()
	if s := o.Spec; !o.QKNorm || !o.QKNormAfterRope || o.MLPBias || o.QKVBias || s.VocabSize != 290943 || s.KVHeads != 32 || s.HeadDim != 128 ||
		o.Eps != 1e-5 || s.BOS != 1 || s.EOS[0] != 2 || s.TieEmbeddings {
		t.Errorf("dense defaults: spec %+v, options %+v", s, o)
	}

	m, err = lm.New(lmckpt.ParseConfig(t, a13b))
	if err != nil {
		t.Fatal(err)
	}
	mo := m.(*qwen3moe.Model).Options()
	if mo.Experts != 64 || mo.TopK != 8 || mo.MoEIntermediate != 3072 || mo.SharedIntermediate != 3072 || !mo.NormTopK {
		t.Errorf("A13B: options %+v", mo)
	}
	var total, experts int64
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
	active := total - experts*(64-8)/64
	if total < 79_500_000_000 || total > 81_000_000_000 || active < 12_500_000_000 || active > 13_500_000_000 {
		t.Errorf("A13B: %d parameters, %d active; the card says 80B and 13B", total, active)
	}
	for _, w := range lm.Weights(m) {
		if strings.HasSuffix(w.Name, "mlp.gate.wg.weight") && (!w.F32 || w.Matmul || !w.Router) {
			t.Errorf("%s: F32 %v, Matmul %v, Router %v; want a float32 router", w.Name, w.F32, w.Matmul, w.Router)
		}
	}
	// The rotary's base: 10000 · 1000^(128/126).
	want := 1 / math.Pow(10000*math.Pow(1000, 128.0/126), 2.0/128)
	if got := mo.Rope.InvFreq[1]; math.Abs(got-want) > 1e-12*want {
		t.Errorf("inv_freq[1] = %g, want %g", got, want)
	}

	for _, c := range []struct{ js, want string }{
		{`{"use_cla": true}`, "use_cla"},
		{`{"moe_intermediate_size": 1024}`, "moe_intermediate_size 1024"},
		{`{"num_shared_expert": 2}`, "num_shared_expert is 2"},
		{`{"moe_topk": [8, 4]}`, "moe_topk has 2 entries for 32 layers"},
		{`{"num_hidden_layers": 2, "moe_topk": [8, 4], "moe_intermediate_size": 3072, "num_shared_expert": 1}`, "moe_topk differs between layers"},
		{`{"moe_topk": 65}`, "moe_topk 65"},
		{`{"num_experts": "many"}`, "num_experts: expected an integer"},
		{`{"rope_scaling": {"type": "dynamic", "alpha": -2.0}}`, "alpha must be positive"},
		{`{"rope_scaling": {"type": "dynamic", "alpha": "x"}}`, "alpha must be a number"},
	} {
		var base, edit map[string]any
		if err := json.Unmarshal([]byte(a13b), &base); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal([]byte(c.js), &edit); err != nil {
			t.Fatal(err)
		}
		maps.Copy(base, edit)
		js, _ := json.Marshal(base)
		_, err := lm.New(lmckpt.ParseConfig(t, string(js)))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error naming %q", c.js, err, c.want)
		}
		if c.want == "use_cla" && !errors.Is(err, errs.ErrUnsupported) {
			t.Errorf("use_cla: %v is not ErrUnsupported", err)
		}
	}
}

// tinyMoE is a small Hunyuan-A13B: 6 experts of width 24 and a shared
// MLP of 24, top 2, GQA 4 over 2, heads of 16, the alpha rotary.
func tinyMoE(seed uint64) lmckpt.Tiny {
	c := lmckpt.Config{Vocab: 64, Hidden: 32, Intermediate: 24, Layers: 3, Heads: 4, KVHeads: 2, HeadDim: 16, Eps: 1e-5,
		RopeTheta: []float64{10000, 10000, 10000}, Window: []int{0, 0, 0}, Experts: 6, TopK: 2,
		HunYuan: true, QKNorm: true, RopeAlpha: 1000, Tied: true}
	return lmckpt.Tiny{Arch: "HunYuanMoEV1ForCausalLM", Config: c, Seed: seed}
}

// TestMoELogitsMatchReference runs the tiny HunYuan MoE on a left-padded
// batch of two prompts plus decode steps, with each experts
// formulation, compiled and eager, on the go and cpu backends, against
// lmref's float64 forward; and in bfloat16 compute, within a few
// percent.
func TestMoELogitsMatchReference(t *testing.T) {
	prompts := [][]int{{1, 7, 21, 33, 4}, {1, 9, 14, 60, 3, 5, 41, 27, 11, 19, 50}}
	const steps = 6
	tc := tinyMoE(41)
	dir, l := lmckpt.WriteLoad(t, tc.Write)
	rm, err := lmref.Load(dir, tc.Config)
	if err != nil {
		t.Fatal(err)
	}
	moecheck.Run(t, "", l, rm, prompts, refcheck.GreedySequences(rm, prompts, steps), steps, 1e-4)

	tc.DType = safetensors.BF16
	dir, l = lmckpt.WriteLoad(t, tc.Write)
	if rm, err = lmref.Load(dir, tc.Config); err != nil {
		t.Fatal(err)
	}
	t.Logf("bfloat16: worst relative error %.3g", moecheck.BFloat16(t, l, rm, prompts, 0.05))
}

// TestSwitchesMatter checks that the tests above can fail where HunYuan
// departs from its kin: references without the shared MLP, with the top
// 1 or without the alpha, and a dense one with the q/k norms before the
// rotary (Qwen3's order), give other logits than the models.
func TestSwitchesMatter(t *testing.T) {
	tc := tinyMoE(41)
	dir, l := lmckpt.WriteLoad(t, tc.Write)
	rm, err := lmref.Load(dir, tc.Config)
	if err != nil {
		t.Fatal(err)
	}
	prompt := []int{1, 9, 14, 60, 3, 5, 41}
	got := moecheck.Prefill(t, l, prompt)
	noShared := &lmref.Model{C: rm.C, W: map[string][]float64{}}
	for n, v := range rm.W {
		if strings.Contains(n, ".shared_mlp.down_proj.") {
			v = make([]float64, len(v))
		}
		noShared.W[n] = v
	}
	top1 := &lmref.Model{C: rm.C, W: rm.W}
	top1.C.TopK = 1
	noAlpha := &lmref.Model{C: rm.C, W: rm.W}
	noAlpha.C.RopeAlpha = 0
	refcheck.Discriminates(t, got[0], prompt, rm.Logits, 1e-2,
		refcheck.Mutant{Name: "no shared MLP", Logits: noShared.Logits},
		refcheck.Mutant{Name: "the top 1", Logits: top1.Logits},
		refcheck.Mutant{Name: "no alpha", Logits: noAlpha.Logits})

	// The dense model's q/k norms after the rotary: Qwen3's order (its
	// q_norm and k_norm before the rotary, with these weights) differs.
	dc := tc.Config
	dc.Experts, dc.TopK = 0, 0
	dense := lmckpt.Tiny{Arch: "HunYuanDenseV1ForCausalLM", Config: dc, Seed: 42}
	dir, l = lmckpt.WriteLoad(t, dense.Write)
	if rm, err = lmref.Load(dir, dense.Config); err != nil {
		t.Fatal(err)
	}
	before := &lmref.Model{C: rm.C, W: map[string][]float64{}}
	before.C.HunYuan = false
	for n, v := range rm.W {
		n = strings.Replace(n, "query_layernorm", "q_norm", 1)
		before.W[strings.Replace(n, "key_layernorm", "k_norm", 1)] = v
	}
	refcheck.Discriminates(t, moecheck.Prefill(t, l, prompt)[0], prompt, rm.Logits, 1e-2,
		refcheck.Mutant{Name: "the q/k norms before the rotary", Logits: before.Logits})
}
