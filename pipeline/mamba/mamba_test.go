package mamba_test

import (
	"strings"
	"testing"

	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/mamba"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
	"github.com/tputool/tputool/pipeline/testkit/mambaref"
	"github.com/tputool/tputool/pipeline/testkit/moecheck"
	"github.com/tputool/tputool/pipeline/testkit/refcheck"
)

// TestConfig: MambaConfig's defaults (mamba-130m's sizes: 24 layers of
// hidden 768 give 129,135,360 parameters, tied, the card's 130M); rank
// "auto"; FalconMamba's mixer_rms_eps; the refusals.
func TestConfig(t *testing.T) {
	m, err := lm.New(lmckpt.ParseConfig(t, `{"architectures": ["MambaForCausalLM"], "num_hidden_layers": 24, "vocab_size": 50280, "use_bias": false}`))
	if err != nil {
		t.Fatal(err)
	}
	o := m.(*mamba.Model).Options()
	if d := o.Mamba; d.Inner != 1536 || d.State != 16 || d.Rank != 48 || d.ConvKernel != 4 || o.RMSEps != 0 || !o.Spec.TieEmbeddings || !o.ConvBias || o.ProjBias {
		t.Errorf("defaults: %+v", o)
	}
	if n := lmckpt.Params(m); n != 129_135_360 {
		t.Errorf("%d parameters, want 129,135,360", n)
	}
	// falcon-mamba-7b's config writes expand 16 beside intermediate_size
	// 8192, which wins.
	f, err := mamba.Resolve(lmckpt.ParseConfig(t, `{"architectures": ["FalconMambaForCausalLM"], "hidden_size": 4096, "num_hidden_layers": 64, "vocab_size": 65024, "time_step_rank": 256, "tie_word_embeddings": false, "expand": 16, "intermediate_size": 8192}`))
	if err != nil {
		t.Fatal(err)
	}
	if f.RMSEps != 1e-6 || f.Mamba.Rank != 256 || f.Mamba.Inner != 8192 || f.ProjBias || f.Spec.BOS != 0 {
		t.Errorf("FalconMamba: %+v", f)
	}
	if d, err := mamba.Resolve(lmckpt.ParseConfig(t, `{"architectures": ["MambaForCausalLM"]}`)); err != nil || !d.ProjBias {
		t.Errorf("MambaConfig's use_bias default true: %+v, %v", d.ProjBias, err)
	}
	for _, c := range []struct{ js, want string }{
		{`"time_step_rank": "wide"`, "time_step_rank"},
		{`"conv_kernel": 1`, "conv_kernel 1"},
		{`"hidden_act": "swish2"`, "hidden_act"},
	} {
		_, err := lm.New(lmckpt.ParseConfig(t, `{"architectures": ["MambaForCausalLM"], `+c.js+`}`))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error naming %q", c.js, err, c.want)
		}
	}
}

// TestLogitsMatchReference runs a tiny Mamba and a tiny FalconMamba on a
// left-padded batch of two prompts (the longer over two scan chunks),
// then decode steps, compiled and eager, on the go and cpu backends,
// against mambaref's float64 recurrence token by token; and in bfloat16
// compute, within a few percent.
func TestLogitsMatchReference(t *testing.T) {
	prompts := [][]int{{1, 7, 21, 33, 4}, {1, 9, 14, 60, 3, 5, 41, 27, 11, 19, 50, 2, 8, 31, 44, 12, 6, 22, 35}}
	const steps = 8
	for _, c := range []mambaref.Mamba{mambaref.Tiny(), mambaref.TinyFalcon()} {
		dir, l := lmckpt.WriteLoad(t, c.Write)
		rm, err := c.Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		seqs := refcheck.GreedySequences(rm, prompts, steps)
		moecheck.Run(t, "", l, rm, prompts, seqs, steps, 1e-4)
		t.Logf("seed %d bfloat16: worst relative error %.3g", c.Seed, moecheck.BFloat16(t, l, rm, prompts, 0.05))
	}
}

// TestSwitchesMatter: a FalconMamba reference without its RMS norms, and
// a Mamba reference with them, differ from the models.
func TestSwitchesMatter(t *testing.T) {
	prompt := []int{1, 9, 14, 60, 3, 5, 41, 27, 11, 19, 50, 2, 8, 31, 44, 12, 6, 22}
	for _, c := range []mambaref.Mamba{mambaref.Tiny(), mambaref.TinyFalcon()} {
		dir, l := lmckpt.WriteLoad(t, c.Write)
		rm, err := c.Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		mc := rm.C
		mc.Falcon, mc.RMSEps = !mc.Falcon, 1e-6
		mutant := &mambaref.Model{C: mc, W: rm.W}
		refcheck.Discriminates(t, moecheck.Prefill(t, l, prompt)[0], prompt, rm.Logits, 1e-3, refcheck.Mutant{Name: "the mixer's RMS norms switched", Logits: mutant.Logits})
	}
}
