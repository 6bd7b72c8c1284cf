package gpt2_test

import (
	"strings"
	"testing"

	"github.com/tputool/tputool/pipeline/gpt2"
	"github.com/tputool/tputool/pipeline/llama"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/testkit/gpt2ref"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
	"github.com/tputool/tputool/pipeline/testkit/moecheck"
	"github.com/tputool/tputool/pipeline/testkit/refcheck"
)

var prompts = [][]int{{1, 7, 21, 33, 4}, {1, 9, 14, 60, 3, 5, 41, 27, 11, 19, 50}}

// TestLogitsMatchReference runs tiny GPT-2s (GPT2LMHeadModel's names with
// the causal-mask buffers; and GPT2Model's bare names with a stored tied
// head, n_inner set and scale_attn_weights false) on a left-padded batch
// of two prompts and decode steps, compiled and eager, on the go and cpu
// backends, against gpt2ref's float64 forward under the checkpoints'
// names; and in bfloat16 within a few percent; and one with Stanford
// CRFM's scale_attn_by_inverse_layer_idx. A reference that reads the
// position table one row off differs, and for the last one a reference
// that scales every layer's scores alike.
func TestLogitsMatchReference(t *testing.T) {
	const steps = 6
	bare := gpt2ref.Tiny()
	bare.Prefix, bare.Buffers, bare.StoredHead, bare.Inner, bare.Unscaled, bare.Seed = "", false, true, 48, true, 121
	crfm := gpt2ref.Tiny() // Stanford CRFM's (BioMedLM's) scale_attn_by_inverse_layer_idx
	crfm.InverseLayer, crfm.Seed = true, 122
	crfmUnscaled := crfm // and with scale_attn_weights false: 1/(i+1) alone
	crfmUnscaled.Unscaled, crfmUnscaled.Seed = true, 123
	for _, c := range []struct {
		name string
		gpt2 gpt2ref.GPT2
	}{{"lmhead", gpt2ref.Tiny()}, {"bare", bare}, {"inverse-layer", crfm}, {"inverse-layer-unscaled", crfmUnscaled}} {
		t.Run(c.name, func(t *testing.T) {
			dir, l := lmckpt.WriteLoad(t, c.gpt2.Write)
			rm, err := c.gpt2.Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			seqs := refcheck.GreedySequences(rm, prompts, steps)
			moecheck.Run(t, "", l, rm, prompts, seqs, steps, 1e-4)
			t.Logf("bfloat16: worst relative error %.3g", moecheck.BFloat16(t, l, rm, prompts, 0.05))
			shifted := &gpt2ref.Model{C: rm.C, W: rm.W, Shift: 1}
			prompt := prompts[1]
			mutants := []refcheck.Mutant{{Name: "the position table one row off", Logits: shifted.Logits}}
			if c.gpt2.InverseLayer {
				flat := &gpt2ref.Model{C: rm.C, W: rm.W}
				flat.C.InverseLayer = false
				mutants = append(mutants, refcheck.Mutant{Name: "every layer's scores scaled alike", Logits: flat.Logits})
			}
			refcheck.Discriminates(t, moecheck.Prefill(t, l, prompt)[0], prompt, rm.Logits, 1e-3, mutants...)
		})
	}
}

// gpt2Small is openai-community/gpt2's config.json.
const gpt2Small = `{"activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"], "attn_pdrop": 0.1,
	"bos_token_id": 50256, "embd_pdrop": 0.1, "eos_token_id": 50256, "initializer_range": 0.02,
	"layer_norm_epsilon": 1e-05, "model_type": "gpt2", "n_ctx": 1024, "n_embd": 768, "n_head": 12, "n_layer": 12,
	"n_positions": 1024, "resid_pdrop": 0.1, "summary_activation": null, "summary_first_dropout": 0.1,
	"summary_proj_to_labels": true, "summary_type": "cls_index", "summary_use_proj": true,
	"task_specific_params": {"text-generation": {"do_sample": true, "max_length": 50}}, "vocab_size": 50257}`

// TestConfig reads GPT-2's config.json (124,439,808 parameters, the tied
// head counted once) and refuses what it cannot run, naming the field.
func TestConfig(t *testing.T) {
	m, err := lm.New(lmckpt.ParseConfig(t, gpt2Small))
	if err != nil {
		t.Fatal(err)
	}
	o := m.(*gpt2.Model).Options()
	s := m.Spec()
	if n := lmckpt.Params(m); n != 124_439_808 {
		t.Errorf("%d parameters, want 124,439,808", n)
	}
	if s.Hidden != 768 || s.Layers != 12 || s.Heads != 12 || s.KVHeads != 12 || s.HeadDim != 64 || s.Intermediate != 3072 ||
		!o.FusedQKV || !o.QKVBias || !o.OBias || !o.MLPBias || o.HeadBias || !o.LayerNorm || !o.UngatedMLP || o.Parallel ||
		o.AttnScale != 0 || o.Positions.Rows != 1024 || len(o.NoRope) != 12 || !o.NoRope[11] ||
		s.MaxPositions != 1024 || s.EOS[0] != 50256 || s.BOS != 50256 || !s.TieEmbeddings || s.VocabSize != 50257 {
		t.Errorf("spec %+v, options %+v", s, o)
	}
	// Layer 0 reads the position table and runs its own graph; every
	// matrix of a block is stored transposed, no vector is.
	ws := m.LayerWeights(0)
	if ws[0].Name != llama.PositionsWeight || ws[0].Shape[0] != 1024 || ws[0].Matmul {
		t.Errorf("layer 0 begins with %+v, want the position table", ws[0])
	}
	if v := m.(lm.Varianter); v.LayerVariant(0) != "nope+positions" || v.LayerVariant(1) != "nope" {
		t.Errorf("variants %q, %q", v.LayerVariant(0), v.LayerVariant(1))
	}
	transposed := 0
	for _, w := range m.LayerWeights(1) {
		if w.Name == llama.PositionsWeight {
			t.Error("layer 1 reads the position table")
		}
		if w.Transposed != w.Matmul {
			t.Errorf("%s: Transposed %v, Matmul %v", w.Name, w.Transposed, w.Matmul)
		}
		if w.Transposed {
			transposed++
		}
	}
	if transposed != 4 {
		t.Errorf("%d transposed matrices a layer, want 4", transposed)
	}
	r := m.(lm.Renamer)
	for stored, want := range map[string]string{
		"transformer.wte.weight":             "model.embed_tokens.weight",
		"wte.weight":                         "model.embed_tokens.weight",
		"transformer.wpe.weight":             llama.PositionsWeight,
		"wpe.weight":                         llama.PositionsWeight,
		"ln_f.bias":                          "model.norm.bias",
		"transformer.h.5.ln_1.weight":        "model.layers.5.input_layernorm.weight",
		"h.5.ln_2.bias":                      "model.layers.5.post_attention_layernorm.bias",
		"transformer.h.5.attn.c_attn.weight": "model.layers.5.self_attn.qkv_proj.weight",
		"h.5.attn.c_attn.bias":               "model.layers.5.self_attn.qkv_proj.bias",
		"transformer.h.5.attn.c_proj.weight": "model.layers.5.self_attn.o_proj.weight",
		"transformer.h.5.mlp.c_fc.bias":      "model.layers.5.mlp.up_proj.bias",
		"h.11.mlp.c_proj.weight":             "model.layers.11.mlp.down_proj.weight",
		"lm_head.weight":                     "lm_head.weight",
		"transformer.h.5.attn.bias":          "model.layers.5.attn.bias",
	} {
		if got := r.RenameWeight(stored); got != want {
			t.Errorf("%s read as %s, want %s", stored, got, want)
		}
	}
	sk := m.(lm.Skipper)
	for name, want := range map[string]bool{"h.0.attn.bias": true, "transformer.h.3.attn.masked_bias": true,
		"model.layers.3.attn.bias": true, "model.layers.3.self_attn.qkv_proj.bias": false, "h.0.attn.c_attn.bias": false} {
		if _, got := sk.SkipWeight(name); got != want {
			t.Errorf("SkipWeight(%s) = %v, want %v", name, got, want)
		}
	}
	// Llama's names win over GPT-2's, as attribute_map sets them last;
	// scale_attn_weights false scales by 1; no rope field is read.
	o2, err := gpt2.Resolve(lmckpt.ParseConfig(t, `{"architectures": ["GPT2LMHeadModel"], "n_embd": 4096, "hidden_size": 96, "n_head": 4,
		"n_layer": 2, "n_inner": 100, "scale_attn_weights": false, "rope_scaling": {"rope_type": "bogus"}, "vocab_size": 100,
		"max_position_embeddings": 64}`))
	if err != nil {
		t.Fatal(err)
	}
	if o2.Spec.Hidden != 96 || o2.Spec.HeadDim != 24 || o2.Spec.Intermediate != 100 || o2.AttnScale != 1 ||
		o2.Positions.Rows != 64 || o2.Spec.MaxPositions != 64 {
		t.Errorf("resolved %+v", o2)
	}
	for _, bad := range []struct{ js, want string }{
		{`"add_cross_attention": true`, "add_cross_attention"},
		{`"n_head": 5`, "not a multiple"},
		{`"activation_function": "swish2"`, "hidden_act"},
	} {
		js := strings.Replace(gpt2Small, `"vocab_size": 50257}`, `"vocab_size": 50257, `+bad.js+`}`, 1)
		_, err := gpt2.Resolve(lmckpt.ParseConfig(t, js))
		if err == nil || !strings.Contains(err.Error(), bad.want) || !strings.Contains(err.Error(), "config.json") {
			t.Errorf("%s: error %v, want one naming config.json and %q", bad.js, err, bad.want)
		}
	}
}

// TestBigCodeLogitsMatchReference runs tiny GPTBigCodes, multi-query (one
// key and value head) and not (c_attn's rows by head), as
// TestLogitsMatchReference runs GPT-2. A reference that splits the
// multi-head c_attn as GPT-2 does (all the queries, then all the keys)
// differs.
func TestBigCodeLogitsMatchReference(t *testing.T) {
	const steps = 6
	mha := gpt2ref.TinyBigCode()
	mha.MultiQuery, mha.Inner, mha.Seed = false, 40, 131
	for _, c := range []struct {
		name string
		gpt2 gpt2ref.GPT2
	}{{"mqa", gpt2ref.TinyBigCode()}, {"mha", mha}} {
		t.Run(c.name, func(t *testing.T) {
			dir, l := lmckpt.WriteLoad(t, c.gpt2.Write)
			rm, err := c.gpt2.Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := l.Model.Spec().KVHeads, map[bool]int{true: 1, false: 4}[c.gpt2.MultiQuery]; got != want {
				t.Errorf("%d KV heads, want %d", got, want)
			}
			seqs := refcheck.GreedySequences(rm, prompts, steps)
			moecheck.Run(t, "", l, rm, prompts, seqs, steps, 1e-4)
			t.Logf("bfloat16: worst relative error %.3g", moecheck.BFloat16(t, l, rm, prompts, 0.05))
			shifted := &gpt2ref.Model{C: rm.C, W: rm.W, Shift: 1}
			mutants := []refcheck.Mutant{{Name: "the position table one row off", Logits: shifted.Logits}}
			if !c.gpt2.MultiQuery {
				asGPT2 := c.gpt2
				asGPT2.BigCode = false
				flat := &gpt2ref.Model{C: asGPT2, W: transposed(rm.W, asGPT2)}
				mutants = append(mutants, refcheck.Mutant{Name: "c_attn split as GPT-2's", Logits: flat.Logits})
			}
			prompt := prompts[1]
			refcheck.Discriminates(t, moecheck.Prefill(t, l, prompt)[0], prompt, rm.Logits, 1e-3, mutants...)
		})
	}
}

// transposed is a GPTBigCode's weights w with every block matrix turned
// to Conv1D's [in, out], for a GPT-2 reference c over the same values.
func transposed(w map[string][]float64, c gpt2ref.GPT2) map[string][]float64 {
	out := make(map[string][]float64, len(w))
	H, I := c.Hidden, 4*c.Hidden
	if c.Inner > 0 {
		I = c.Inner
	}
	for name, v := range w {
		var rows, cols int // stored [out, in]
		switch {
		case strings.HasSuffix(name, "attn.c_attn.weight"):
			rows, cols = 3*H, H
		case strings.HasSuffix(name, "attn.c_proj.weight"):
			rows, cols = H, H
		case strings.HasSuffix(name, "mlp.c_fc.weight"):
			rows, cols = I, H
		case strings.HasSuffix(name, "mlp.c_proj.weight"):
			rows, cols = H, I
		default:
			out[name] = v
			continue
		}
		t := make([]float64, len(v))
		for r := 0; r < rows; r++ {
			for k := 0; k < cols; k++ {
				t[k*rows+r] = v[r*cols+k]
			}
		}
		out[name] = t
	}
	return out
}

// starcoderBase1B is bigcode/starcoderbase-1b's config.json (its sizes;
// the runner and training fields left out).
const starcoderBase1B = `{"activation_function": "gelu_pytorch_tanh", "architectures": ["GPTBigCodeForCausalLM"],
	"attention_softmax_in_fp32": true, "multi_query": true, "attn_pdrop": 0.1, "bos_token_id": 0, "embd_pdrop": 0.1,
	"eos_token_id": 0, "initializer_range": 0.02, "layer_norm_epsilon": 1e-05, "model_type": "gpt_bigcode", "n_embd": 2048,
	"n_head": 16, "n_inner": 8192, "n_layer": 24, "n_positions": 8192, "resid_pdrop": 0.1,
	"scale_attention_softmax_in_fp32": true, "scale_attn_weights": true, "torch_dtype": "float32", "use_cache": true,
	"vocab_size": 49152}`

// TestBigCodeConfig reads StarCoderBase-1B's config.json (1,137,207,296
// parameters, the tied head counted once: the "1.14B" of its model card):
// one key and value head, Linear matrices (none transposed), GPT-2's
// names.
func TestBigCodeConfig(t *testing.T) {
	m, err := lm.New(lmckpt.ParseConfig(t, starcoderBase1B))
	if err != nil {
		t.Fatal(err)
	}
	o := m.(*gpt2.Model).Options()
	s := m.Spec()
	if n := lmckpt.Params(m); n != 1_137_207_296 {
		t.Errorf("%d parameters, want 1,137,207,296", n)
	}
	if s.Hidden != 2048 || s.Layers != 24 || s.Heads != 16 || s.KVHeads != 1 || s.HeadDim != 128 || s.Intermediate != 8192 ||
		!o.FusedQKV || o.QKVPerHead || !o.QKVBias || !o.OBias || !o.MLPBias || !o.LayerNorm || !o.UngatedMLP ||
		o.Positions.Rows != 8192 || s.MaxPositions != 8192 || s.EOS[0] != 0 || !s.TieEmbeddings || s.VocabSize != 49152 {
		t.Errorf("spec %+v, options %+v", s, o)
	}
	for _, w := range m.LayerWeights(3) {
		if w.Transposed {
			t.Errorf("%s transposed", w.Name)
		}
	}
	if got := m.(lm.Renamer).RenameWeight("transformer.h.3.attn.c_attn.weight"); got != "model.layers.3.self_attn.qkv_proj.weight" {
		t.Errorf("c_attn read as %s", got)
	}
	// Without multi_query every head has its key and value, c_attn's rows
	// by head; the defaults are GPTBigCodeConfig's.
	mha, err := gpt2.ResolveBigCode(lmckpt.ParseConfig(t, `{"architectures": ["GPTBigCodeForCausalLM"], "multi_query": false, "n_layer": 2}`))
	if err != nil {
		t.Fatal(err)
	}
	if mha.Spec.KVHeads != 12 || !mha.QKVPerHead || mha.Spec.Hidden != 768 || mha.Spec.VocabSize != 50257 || mha.Spec.Intermediate != 3072 {
		t.Errorf("multi_query false: %+v", mha)
	}
	js := strings.Replace(starcoderBase1B, `"vocab_size": 49152}`, `"vocab_size": 49152, "add_cross_attention": true}`, 1)
	if _, err := gpt2.ResolveBigCode(lmckpt.ParseConfig(t, js)); err == nil || !strings.Contains(err.Error(), "add_cross_attention") {
		t.Errorf("add_cross_attention: %v", err)
	}
}
