package bamba_test

import (
	"strings"
	"testing"

	"github.com/tputool/tputool/compile"
	"github.com/tputool/tputool/pipeline/bamba"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/nn"
	"github.com/tputool/tputool/pipeline/testkit/bambaref"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
	"github.com/tputool/tputool/pipeline/testkit/moecheck"
	"github.com/tputool/tputool/pipeline/testkit/refcheck"
)

// TestConfig: BambaConfig's defaults (128 mixer heads of 64, state 256;
// the rotary over half of each head whatever config.json says), the
// attention layers attn_layer_indices names, and the refusals.
func TestConfig(t *testing.T) {
	m, err := lm.New(lmckpt.ParseConfig(t, `{"architectures": ["BambaForCausalLM"], "attn_layer_indices": [9, 18, 27], "partial_rotary_factor": 1.0}`))
	if err != nil {
		t.Fatal(err)
	}
	o := m.(*bamba.Model).BambaOptions()
	if d := o.Mamba; d.Heads != 128 || d.HeadDim != 64 || d.State != 256 || o.Rope.RotaryDim != 64 || o.Spec.HeadDim != 128 ||
		o.Spec.LayerKinds[9] != lm.KindFull || o.Spec.LayerKinds[0] != nn.KindMamba || o.FinalNorm != "model.final_layernorm" {
		t.Errorf("defaults: %+v", o)
	}
	// Nor does rope_parameters' factor change it.
	m, err = lm.New(lmckpt.ParseConfig(t, `{"architectures": ["BambaForCausalLM"], "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 1.0}}`))
	if err != nil {
		t.Fatal(err)
	}
	if o := m.(*bamba.Model).BambaOptions(); o.Rope.RotaryDim != 64 || o.Spec.LayerKinds[0] != nn.KindMamba || o.Spec.LayerKinds[31] != nn.KindMamba {
		t.Errorf("rope_parameters' partial_rotary_factor 1: rotary %d, layer kinds %v", o.Rope.RotaryDim, o.Spec.LayerKinds)
	}
	for _, c := range []struct{ js, want string }{
		{`"attn_layer_indices": [40]`, "attn_layer_indices holds 40"},
		{`"mamba_n_heads": 100`, "mamba_n_heads 100 must divide mamba_expand × hidden_size 8192"},
		{`"mamba_n_heads": 64, "mamba_d_head": 64`, "mamba_n_heads 64 × mamba_d_head 64"},
		{`"rope_parameters": [1]`, "rope_parameters"},
		{`"hidden_act": "gelu"`, "hidden_act"},
	} {
		_, err := lm.New(lmckpt.ParseConfig(t, `{"architectures": ["BambaForCausalLM"], `+c.js+`}`))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error naming %q", c.js, err, c.want)
		}
	}
}

// TestLogitsMatchReference runs the tiny Bamba on a left-padded batch of
// two prompts (over several SSD chunks) and decode steps, compiled and
// eager, on the go and cpu backends, against bambaref's float64 forward;
// in bfloat16 within a few percent; and a reference rotating whole heads
// differs. TestProjBias runs the mixer's in_proj and out_proj biases.
func TestLogitsMatchReference(t *testing.T) {
	prompts := [][]int{{1, 7, 21, 33, 4}, {1, 9, 14, 60, 3, 5, 41, 27, 11, 19, 50}}
	const steps = 6
	c := bambaref.Tiny()
	dir, l := lmckpt.WriteLoad(t, c.Write)
	rm, err := c.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	seqs := refcheck.GreedySequences(rm, prompts, steps)
	moecheck.Run(t, "", l, rm, prompts, seqs, steps, 1e-4)
	t.Logf("bfloat16: worst relative error %.3g", moecheck.BFloat16(t, l, rm, prompts, 0.05))
	whole := &bambaref.Model{C: rm.C, W: rm.W}
	whole.C.Rotary = 1
	prompt := prompts[1]
	refcheck.Discriminates(t, moecheck.Prefill(t, l, prompt)[0], prompt, rm.Logits, 1e-3, refcheck.Mutant{Name: "the rotary over whole heads", Logits: whole.Logits})
}

// TestProjBias: with mamba_proj_bias (in_proj and out_proj biases) and
// the attention layer first, compiled, against bambaref.
func TestProjBias(t *testing.T) {
	prompts := [][]int{{1, 7, 21, 33, 4}, {1, 9, 14, 60, 3, 5, 41, 27, 11, 19, 50}}
	const steps = 4
	c := bambaref.TinyBias()
	dir, l := lmckpt.WriteLoad(t, c.Write)
	rm, err := c.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	seqs := refcheck.GreedySequences(rm, prompts, steps)
	r, err := compile.NewRunner(refcheck.GoBackend(t), l, compile.Options{Mode: compile.Compiled})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	f := refcheck.TeacherForced(t, r.NewState(), rm, prompts, seqs, steps, 1e-4)
	t.Logf("max relative error %.3g", f.Worst)
}
