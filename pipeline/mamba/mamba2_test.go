package mamba_test

import (
	"strings"
	"testing"

	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/mamba"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
	"github.com/tputool/tputool/pipeline/testkit/mamba2ref"
	"github.com/tputool/tputool/pipeline/testkit/moecheck"
	"github.com/tputool/tputool/pipeline/testkit/refcheck"
)

// mamba2Prompts are longer than the tiny models' chunk of 4, so that the
// chunked scan carries its state across chunks.
var mamba2Prompts = [][]int{{1, 7, 21, 33, 4, 9}, {1, 9, 14, 60, 3, 5, 41, 27, 11, 19, 50}}

// TestMamba2LogitsMatchReference runs tiny Mamba2ForCausalLMs (the
// default time_step_limit written as Python's [0.0, Infinity]; biases, a
// tied head and dt capped at 0.05) on a left-padded batch of two prompts
// and decode steps, compiled and eager, on the go and cpu backends,
// against mamba2ref's float64 forward (its mixer token by token); and in
// bfloat16 within a few percent. A reference taking the gated norm per
// group, as mamba_ssm's kernels do, differs.
func TestMamba2LogitsMatchReference(t *testing.T) {
	const steps = 6
	capped := mamba2ref.TinyLM()
	capped.ProjBias, capped.Tied, capped.DtMax, capped.Seed = true, true, 0.05, 181
	for _, c := range []struct {
		name string
		lm   mamba2ref.LM
	}{{"default", mamba2ref.TinyLM()}, {"capped", capped}} {
		t.Run(c.name, func(t *testing.T) {
			dir, l := lmckpt.WriteLoad(t, c.lm.Write)
			rm, err := c.lm.Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			o := l.Model.(*mamba.Mamba2Model).Options()
			if o.Mixer.DtMax != c.lm.DtMax || o.Eps != c.lm.Eps || o.ProjBias != c.lm.ProjBias {
				t.Fatalf("options %+v", o)
			}
			seqs := refcheck.GreedySequences(rm, mamba2Prompts, steps)
			moecheck.Run(t, "", l, rm, mamba2Prompts, seqs, steps, 1e-4)
			t.Logf("bfloat16: worst relative error %.3g", moecheck.BFloat16(t, l, rm, mamba2Prompts, 0.05))
			grouped := &mamba2ref.LMModel{C: rm.C, W: rm.W, NormGroups: c.lm.Groups}
			prompt := mamba2Prompts[1]
			refcheck.Discriminates(t, moecheck.Prefill(t, l, prompt)[0], prompt, rm.Logits, 1e-3,
				refcheck.Mutant{Name: "the gated norm per group", Logits: grouped.Logits})
		})
	}
}

// mambaCodestral is mistralai/Mamba-Codestral-7B-v0.1's config.json, its
// time_step_limit as Python writes it.
const mambaCodestral = `{"architectures": ["Mamba2ForCausalLM"], "bos_token_id": 0, "chunk_size": 256, "conv_kernel": 4,
	"eos_token_id": 0, "expand": 2, "head_dim": 64, "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.1,
	"layer_norm_epsilon": 1e-05, "model_type": "mamba2", "n_groups": 8, "num_heads": 128, "num_hidden_layers": 64,
	"pad_token_id": 0, "rescale_prenorm_residual": false, "residual_in_fp32": true, "rms_norm": true, "state_size": 128,
	"tie_word_embeddings": false, "time_step_floor": 0.0001, "time_step_limit": [0.0, Infinity], "time_step_max": 0.1,
	"time_step_min": 0.001, "time_step_rank": 256, "torch_dtype": "bfloat16", "use_bias": false, "use_cache": true,
	"use_conv_bias": true, "vocab_size": 32768}`

// TestMamba2Config reads Mamba-Codestral-7B's config.json (7,285,403,648
// parameters, its card's 7.29B) and refuses what it cannot run.
func TestMamba2Config(t *testing.T) {
	m, err := lm.New(lmckpt.ParseConfig(t, mambaCodestral))
	if err != nil {
		t.Fatal(err)
	}
	o := m.(*mamba.Mamba2Model).Options()
	if n := lmckpt.Params(m); n != 7_285_403_648 {
		t.Errorf("%d parameters, want 7,285,403,648", n)
	}
	if o.Mamba.Heads != 128 || o.Mamba.HeadDim != 64 || o.Mamba.Groups != 8 || o.Mamba.State != 128 || o.Mixer.Chunk != 256 ||
		o.Mixer.NormGroups != 1 || o.Mixer.DtMin != 0 || o.Mixer.DtMax != 0 || o.ProjBias || !o.ConvBias || o.Spec.TieEmbeddings ||
		o.Spec.Layers != 64 || o.Spec.EOS[0] != 0 || o.Spec.BOS != 0 {
		t.Errorf("options %+v", o)
	}
	if got := m.(lm.Renamer).RenameWeight("backbone.embedding.weight"); got != "backbone.embeddings.weight" {
		t.Errorf("backbone.embedding.weight read as %s", got)
	}
	for _, bad := range []struct{ js, want string }{
		{`"expand": 3`, "expand × hidden_size"},
		{`"n_groups": 3`, "n_groups 3 must divide"},
		{`"hidden_act": "gelu"`, "hidden_act"},
		{`"time_step_limit": [0.5, 0.1]`, "time_step_limit"},
	} {
		js := strings.Replace(mambaCodestral, `"vocab_size": 32768}`, `"vocab_size": 32768, `+bad.js+`}`, 1)
		if _, err := mamba.ResolveMamba2(lmckpt.ParseConfig(t, js)); err == nil || !strings.Contains(err.Error(), bad.want) || !strings.Contains(err.Error(), "config.json") {
			t.Errorf("%s: error %v, want one naming config.json and %q", bad.js, err, bad.want)
		}
	}
}
