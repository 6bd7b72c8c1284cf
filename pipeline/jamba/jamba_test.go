package jamba_test

import (
	"strings"
	"testing"

	"github.com/tputool/tputool/pipeline/jamba"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/nn"
	"github.com/tputool/tputool/pipeline/testkit/jambaref"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
	"github.com/tputool/tputool/pipeline/testkit/moecheck"
	"github.com/tputool/tputool/pipeline/testkit/refcheck"
)

// TestConfig: JambaConfig's defaults (Jamba-v0.1: 32 layers, attention at
// 4, 12, 20 and 28, experts on every odd layer; 51,570,323,328
// parameters, the card's 52B); the refusals.
func TestConfig(t *testing.T) {
	m, err := lm.New(lmckpt.ParseConfig(t, `{"architectures": ["JambaForCausalLM"]}`))
	if err != nil {
		t.Fatal(err)
	}
	o := m.(*jamba.Model).JambaOptions()
	var attn, sparse []int
	for i, k := range o.Spec.LayerKinds {
		if k == lm.KindFull {
			attn = append(attn, i)
		} else if k != nn.KindMamba1 {
			t.Errorf("layer %d: kind %q", i, k)
		}
		if o.Sparse[i] {
			sparse = append(sparse, i)
		}
	}
	if len(attn) != 4 || attn[0] != 4 || attn[3] != 28 || len(sparse) != 16 || sparse[0] != 1 || o.Mamba.Rank != 256 || o.Mamba.Inner != 8192 {
		t.Errorf("attention %v, sparse %v, mamba %+v", attn, sparse, o.Mamba)
	}
	if n := lmckpt.Params(m); n != 51_570_323_328 {
		t.Errorf("%d parameters, want 51,570,323,328 (the card's 52B)", n)
	}
	for _, c := range []struct{ js, want string }{
		{`"attn_layer_offset": 8`, "attn_layer_period 8 / offset 8"},
		{`"num_experts_per_tok": 20`, "num_experts_per_tok 20"},
		{`"mamba_dt_rank": "wide"`, "mamba_dt_rank"},
		{`"hidden_act": "gelu"`, "hidden_act"},
	} {
		_, err := lm.New(lmckpt.ParseConfig(t, `{"architectures": ["JambaForCausalLM"], `+c.js+`}`))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error naming %q", c.js, err, c.want)
		}
	}
}

// TestLogitsMatchReference runs the tiny Jamba (Mamba and attention
// layers, dense and sparse feed-forwards) on a left-padded batch of two
// prompts (the longer over two scan chunks) and decode steps with each
// experts formulation, compiled and eager, on the go and cpu backends,
// against jambaref's float64 forward; and in bfloat16 compute.
func TestLogitsMatchReference(t *testing.T) {
	prompts := [][]int{{1, 7, 21, 33, 4}, {1, 9, 14, 60, 3, 5, 41, 27, 11, 19, 50, 2, 8, 31, 44, 12, 6, 22, 35}}
	const steps = 6
	c := jambaref.Tiny()
	dir, l := lmckpt.WriteLoad(t, c.Write)
	rm, err := c.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	moecheck.Run(t, "", l, rm, prompts, refcheck.GreedySequences(rm, prompts, steps), steps, 1e-4)
	t.Logf("bfloat16: worst relative error %.3g", moecheck.BFloat16(t, l, rm, prompts, 0.05))
}

// TestSwitchesMatter: a reference that renormalizes the top k, or whose
// dt, B and C norms lose their weights, differs.
func TestSwitchesMatter(t *testing.T) {
	c := jambaref.Tiny()
	dir, l := lmckpt.WriteLoad(t, c.Write)
	rm, err := c.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	prompt := []int{1, 9, 14, 60, 3, 5, 41, 27, 11, 19, 50}
	renorm := &jambaref.Model{C: rm.C, W: rm.W, Renorm: true}
	unnormed := &jambaref.Model{C: rm.C, W: map[string][]float64{}}
	for n, v := range rm.W {
		if strings.HasSuffix(n, "_layernorm.weight") && strings.Contains(n, ".mamba.") { // the dt, B and C norms' weights all 1
			ones := make([]float64, len(v))
			for i := range ones {
				ones[i] = 1
			}
			v = ones
		}
		unnormed.W[n] = v
	}
	refcheck.Discriminates(t, moecheck.Prefill(t, l, prompt)[0], prompt, rm.Logits, 1e-3,
		refcheck.Mutant{Name: "the top k renormalized", Logits: renorm.Logits}, refcheck.Mutant{Name: "the dt, B and C norms without their weights", Logits: unnormed.Logits})
}
