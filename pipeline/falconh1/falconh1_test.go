package falconh1_test

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"

	"github.com/tputool/tputool/compile"
	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/pipeline/falconh1"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/nn"
	"github.com/tputool/tputool/pipeline/testkit/falconh1ref"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
	"github.com/tputool/tputool/pipeline/testkit/moecheck"
	"github.com/tputool/tputool/pipeline/testkit/refcheck"
)

// TestConfig: FalconH1Config's defaults (128 mixer heads of 8 over
// mamba_d_ssm 1024, state 256, no norm on the mixer, a KV cache and the
// mixer's state on every layer); Python's Infinity in time_step_limit;
// the refusals, each naming its field.
func TestConfig(t *testing.T) {
	m, err := lm.New(lmckpt.ParseConfig(t, `{"architectures": ["FalconH1ForCausalLM"], "time_step_limit": [0.0, Infinity]}`))
	if err != nil {
		t.Fatal(err)
	}
	o := m.(*falconh1.Model).FalconOptions()
	d := o.Mamba
	if d.Heads != 128 || d.HeadDim != 8 || d.State != 256 || d.Groups != 1 || d.ConvKernel != 4 || o.MambaOpts.Norm != nn.Mamba2NoNorm ||
		o.MambaOpts.Chunk != 256 || o.MambaOpts.DtMax != 0 || o.Spec.KVHeads != 8 || o.Spec.VocabSize != 128000 || o.FinalNorm != "model.final_layernorm" {
		t.Errorf("defaults: %+v", o)
	}
	if names := lm.HeldState(m, 0, 1, 16, 0); len(names) != 4 || names[2].Name != "conv" || names[3].Name != "ssm" {
		t.Errorf("layer state %+v, want k, v, conv, ssm", names)
	}
	for _, c := range []struct{ js, want string }{
		{`"mlp_multipliers": [1.0]`, "mlp_multipliers has 1 values"},
		{`"ssm_multipliers": [1.0, 1.0]`, "ssm_multipliers has 2 values"},
		{`"mamba_n_heads": 12, "mamba_d_head": 64`, "must be the mixer's width 1024"},
		{`"mamba_d_head": "wide"`, "mamba_d_head"},
		{`"time_step_limit": [0.5, 0.1]`, "time_step_limit"},
		{`"layer_types": ["sliding_attention"], "num_hidden_layers": 1`, "sliding_attention"},
		{`"key_multiplier": 0`, "key_multiplier must be positive"},
		{`"ssm_multipliers": [1.0, 1.0, 0.0, 1.0, 1.0]`, "ssm_multipliers[2] must be positive"},
		{`"time_step_limit": [0.0, 0.0]`, "high > 0"},
		{`"hidden_act": "gelu"`, "hidden_act"},
	} {
		_, err := lm.New(lmckpt.ParseConfig(t, `{"architectures": ["FalconH1ForCausalLM"], `+c.js+`}`))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error naming %q", c.js, err, c.want)
		}
	}
	_, err = lm.New(lmckpt.ParseConfig(t, `{"architectures": ["FalconH1ForCausalLM"], "partial_rotary_factor": 0.5}`))
	if !errors.Is(err, errs.ErrUnsupported) {
		t.Errorf("a partial rotary: %v, want ErrUnsupported", err)
	}
}

func load(t *testing.T, c falconh1ref.FalconH1) (*lm.Loaded, *falconh1ref.Model) {
	t.Helper()
	dir, l := lmckpt.WriteLoad(t, c.Write)
	rm, err := c.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	return l, rm
}

// TestLogitsMatchReference runs the tiny Falcon-H1s (the grouped norm
// before the gate; and no norm, every bias, tied, dt capped) on a
// left-padded batch of two prompts, the longer over several SSD chunks,
// then decode steps token by token, compiled and eager, on the go and cpu
// backends, against falconh1ref's float64 forward; and in bfloat16
// compute, within a few percent.
func TestLogitsMatchReference(t *testing.T) {
	prompts := [][]int{{1, 7, 21, 33, 4}, {1, 9, 14, 60, 3, 5, 41, 27, 11, 19, 50}}
	const steps = 8
	for _, c := range []falconh1ref.FalconH1{falconh1ref.Tiny(), falconh1ref.TinyPlain()} {
		l, rm := load(t, c)
		seqs := refcheck.GreedySequences(rm, prompts, steps)
		moecheck.Run(t, "", l, rm, prompts, seqs, steps, 1e-4)
		t.Logf("seed %d bfloat16: worst relative error %.3g", c.Seed, moecheck.BFloat16(t, l, rm, prompts, 0.05))
		// int8 KV caches: their scales follow the mixer's state in the
		// layer's held state (k, v, conv, ssm, k_scale, v_scale).
		r, err := compile.NewRunner(refcheck.GoBackend(t), l, compile.Options{Mode: compile.Compiled, KVDType: dtypes.Int8})
		if err != nil {
			t.Fatal(err)
		}
		f := refcheck.TeacherForced(t, r.NewState(), rm, prompts, seqs, steps, 0.05)
		t.Logf("seed %d int8 KV caches: max relative error %.3g", c.Seed, f.Worst)
		r.Close()
	}
}

// TestSwitchesMatter checks that the test above can fail where Falcon-H1
// departs from its kin: references without each multiplier, or with the
// mixer's norm after the gate, give other logits than the model.
func TestSwitchesMatter(t *testing.T) {
	l, rm := load(t, falconh1ref.Tiny())
	prompt := []int{1, 9, 14, 60, 3, 5, 41, 27, 11}
	var mutants []refcheck.Mutant
	for _, c := range []struct {
		name   string
		mutate func(*falconh1ref.FalconH1)
	}{
		{"no ssm_multipliers", func(c *falconh1ref.FalconH1) { c.SSM = [5]float64{1, 1, 1, 1, 1} }},
		{"no dt multiplier", func(c *falconh1ref.FalconH1) { c.SSM[4] = 1 }},
		{"no key_multiplier", func(c *falconh1ref.FalconH1) { c.Key = 1 }},
		{"no attention_in_multiplier", func(c *falconh1ref.FalconH1) { c.AttnIn = 1 }},
		{"no ssm_in_multiplier", func(c *falconh1ref.FalconH1) { c.SSMIn = 1 }},
		{"no ssm_out_multiplier", func(c *falconh1ref.FalconH1) { c.SSMOut = 1 }},
		{"no mlp gate multiplier", func(c *falconh1ref.FalconH1) { c.MLP[0] = 1 }},
		{"no lm_head_multiplier", func(c *falconh1ref.FalconH1) { c.LMHead = 1 }},
		{"no embedding_multiplier", func(c *falconh1ref.FalconH1) { c.Embedding = 1 }},
		{"no attention_out_multiplier", func(c *falconh1ref.FalconH1) { c.AttnOut = 1 }},
		{"no mlp down multiplier", func(c *falconh1ref.FalconH1) { c.MLP[1] = 1 }},
		{"the norm after the gate", func(c *falconh1ref.FalconH1) { c.NormBeforeGate = false }},
	} {
		mc := rm.C
		c.mutate(&mc)
		mutant := &falconh1ref.Model{C: mc, W: rm.W}
		mutants = append(mutants, refcheck.Mutant{Name: c.name, Logits: mutant.Logits})
	}
	refcheck.Discriminates(t, moecheck.Prefill(t, l, prompt)[0], prompt, rm.Logits, 1e-3, mutants...)

	// TinyPlain's dt cap (time_step_limit) and its mixer without a norm.
	l, rm = load(t, falconh1ref.TinyPlain())
	noCap, withNorm := &falconh1ref.Model{C: rm.C, W: rm.W}, &falconh1ref.Model{C: rm.C, W: rm.W}
	noCap.C.DtMax = 0
	withNorm.C.RMSNorm, withNorm.C.NormBeforeGate = true, true
	withNorm.W = map[string][]float64{}
	for n, v := range rm.W {
		withNorm.W[n] = v
	}
	for i := range rm.C.Layers {
		ones := make([]float64, rm.C.Inner())
		for j := range ones {
			ones[j] = 1
		}
		withNorm.W[fmt.Sprintf("model.layers.%d.mamba.norm.weight", i)] = ones
	}
	refcheck.Discriminates(t, moecheck.Prefill(t, l, prompt)[0], prompt, rm.Logits, 1e-3,
		refcheck.Mutant{Name: "no dt cap", Logits: noCap.Logits}, refcheck.Mutant{Name: "a norm before the gate", Logits: withNorm.Logits})
	if math.IsNaN(rm.Logits(prompt)[0][0]) {
		t.Error("the reference gives NaN")
	}
}
