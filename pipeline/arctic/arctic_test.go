package arctic_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/pipeline/arctic"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/testkit/arcticref"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
	"github.com/tputool/tputool/pipeline/testkit/moecheck"
	"github.com/tputool/tputool/pipeline/testkit/refcheck"
)

var prompts = [][]int{{1, 7, 21, 33, 4}, {1, 9, 14, 60, 3, 5, 41, 27, 11, 19, 50}}

// TestLogitsMatchReference runs tiny Arctics (the releases' layout: the
// experts beside the attention with the residual MLP on every layer; and
// ArcticConfig's defaults': a sparse block after the attention on every
// second layer, one expert a token, dense ArcticMLPs between) on a
// left-padded batch of two prompts and decode steps, with each experts
// formulation, compiled and eager, on the go and cpu backends, against
// arcticref's float64 forward; and in bfloat16 compute within a few
// percent.
func TestLogitsMatchReference(t *testing.T) {
	const steps = 6
	for _, c := range []struct {
		name string
		a    arcticref.Arctic
	}{{"parallel", arcticref.Tiny()}, {"sequential", arcticref.Sequential()}, {"parallel-everyother", arcticref.ParallelEveryOther()}} {
		t.Run(c.name, func(t *testing.T) {
			dir, l := lmckpt.WriteLoad(t, c.a.Write)
			rm, err := c.a.Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			moecheck.Run(t, "", l, rm, prompts, refcheck.GreedySequences(rm, prompts, steps), steps, 1e-4)
			t.Logf("bfloat16: worst relative error %.3g", moecheck.BFloat16(t, l, rm, prompts, 0.05))
		})
	}
}

// TestSwitchesMatter checks that the test above can fail where Arctic's
// layer is its own: a reference running the experts on the stream after
// the attention, or without the residual MLP, gives other logits.
func TestSwitchesMatter(t *testing.T) {
	c := arcticref.Tiny()
	dir, l := lmckpt.WriteLoad(t, c.Write)
	rm, err := c.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	prompt := prompts[1]
	got := moecheck.Prefill(t, l, prompt)
	after := &arcticref.Model{C: rm.C, W: rm.W, MoEAfterAttention: true}
	noResidual := &arcticref.Model{C: rm.C, W: map[string][]float64{}}
	for n, v := range rm.W {
		if strings.Contains(n, "residual_mlp.w2") {
			v = make([]float64, len(v))
		}
		noResidual.W[n] = v
	}
	refcheck.Discriminates(t, got[0], prompt, rm.Logits, 1e-3,
		refcheck.Mutant{Name: "experts after the attention", Logits: after.Logits},
		refcheck.Mutant{Name: "no residual MLP", Logits: noResidual.Logits})
}

// instruct is an Arctic config of snowflake-arctic-instruct's sizes.
func instruct(extra string) string {
	return `{"architectures": ["ArcticForCausalLM"], "model_type": "arctic", "hidden_size": 7168, "intermediate_size": 4864,
	"num_hidden_layers": 35, "num_attention_heads": 56, "num_key_value_heads": 8, "num_local_experts": 128, "num_experts_per_tok": 2,
	"moe_layer_frequency": 1, "parallel_attn_mlp_res": true, "use_residual": true, "vocab_size": 32000,
	"max_position_embeddings": 4096, "rms_norm_eps": 1e-05, "rope_theta": 10000, "hidden_act": "silu", "tie_word_embeddings": false,
	"bos_token_id": 1, "eos_token_id": 2, "sliding_window": null, "torch_dtype": "bfloat16"` + extra + `}`
}

// TestConfig reads an Arctic config of snowflake-arctic-instruct's sizes
// (478,584,608,768 parameters, 17,318,647,808 active a token: the card's
// 480B and 17B) and refuses what it cannot run, naming the field.
func TestConfig(t *testing.T) {
	m, err := lm.New(lmckpt.ParseConfig(t, instruct("")))
	if err != nil {
		t.Fatal(err)
	}
	a := m.(*arctic.Model)
	o, s := a.Options(), m.Spec()
	if n := lmckpt.Params(m); n != 478_584_608_768 {
		t.Errorf("%d parameters, want 478,584,608,768", n)
	}
	active := lmckpt.Params(m) - int64(s.Layers)*int64(o.Experts-o.TopK)*3*int64(o.MoEIntermediate)*int64(s.Hidden)
	if active != 17_318_647_808 {
		t.Errorf("%d active parameters, want 17,318,647,808", active)
	}
	if !a.Parallel || !o.Sparse[0] || !o.NormTopK || s.KVHeads != 8 || s.HeadDim != 128 {
		t.Errorf("spec %+v, options %+v", s, o)
	}
	if got := a.RenameWeight("model.layers.3.block_sparse_moe.mlp.w3.weight"); got != "model.layers.3.mlp.up_proj.weight" {
		t.Errorf("dense w3 read as %s", got)
	}
	// ArcticConfig has no use_residual: parallel_attn_mlp_res alone
	// decides; the attention reads no biases or head_dim.
	js := strings.Replace(instruct(`, "attention_bias": true, "head_dim": 64`), `"use_residual": true, `, "", 1)
	if _, parallel, err := arctic.Resolve(lmckpt.ParseConfig(t, js)); err != nil || !parallel {
		t.Errorf("without use_residual: parallel %v, %v", parallel, err)
	} else if o, _, _ := arctic.Resolve(lmckpt.ParseConfig(t, js)); o.QKVBias || o.Spec.HeadDim != 128 {
		t.Errorf("attention_bias or head_dim read: %+v", o.Spec)
	}
	seq, _, err := arctic.Resolve(lmckpt.ParseConfig(t, `{"architectures": ["ArcticForCausalLM"], "hidden_size": 64, "num_attention_heads": 4,
		"num_hidden_layers": 4}`))
	if err != nil || seq.Experts != 8 || seq.TopK != 1 || !seq.NormTopK || seq.Sparse[0] || !seq.Sparse[1] {
		t.Errorf("ArcticConfig's defaults: %+v, %v", seq, err)
	}
	for _, bad := range []struct {
		extra, want string
		unsupported bool
	}{
		{`, "quantization": {"q_bits": 8}`, "quantization", true},
		{`, "use_residual": false`, "parallel_attn_mlp_res true with use_residual false", true},
		{`, "rope_scaling": {"type": "linear", "factor": 2}`, "rope_scaling", true},
		{`, "moe_layer_frequency": 0`, "moe_layer_frequency must be positive", false},
	} {
		js := instruct(bad.extra)
		for _, key := range []string{`"use_residual": true, `, `"moe_layer_frequency": 1, `} {
			if strings.Contains(bad.extra, strings.SplitN(key, ":", 2)[0]) {
				js = strings.Replace(js, key, "", 1)
			}
		}
		_, _, err := arctic.Resolve(lmckpt.ParseConfig(t, js))
		if err == nil || !strings.Contains(err.Error(), bad.want) || !strings.Contains(err.Error(), "config.json") || errors.Is(err, errs.ErrUnsupported) != bad.unsupported {
			t.Errorf("%s: error %v, want one naming config.json and %q", bad.extra, err, bad.want)
		}
	}
}
