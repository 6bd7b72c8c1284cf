package main

import (
	"bufio"
	"fmt"
	"math"

	"github.com/gomlx/gomlx/pkg/core/dtypes"

	"github.com/tputool/tputool/pipeline/gemma3n"
	"github.com/tputool/tputool/pipeline/lm"
)

// runGemma3n writes a Gemma 3n text model (Gemma3nForConditionalGeneration
// or Gemma3nForCausalLM) as llama.cpp's "gemma3n", with the tensor names
// its converter writes: per_layer_token_embd, per_layer_model_proj,
// per_layer_proj_norm, altup_proj and altup_unembd_proj (each the three
// projections stacked), and a layer's attn_* and ffn_* tensors beside
// inp_gate, proj and post_norm (the per-layer input), altup_correct_coef,
// altup_correct_scale, altup_predict_coef, altup_router,
// altup_router_norm, laurel_l, laurel_r and laurel_post_norm; q and k as
// stored (llama.cpp's gemma3n turns NeoX halves, as transformers does);
// feed_forward_length one a layer.
//
// llama.cpp's gemma3n graph fixes what the releases have: four streams,
// LAuReL rank 64, per-layer inputs of 256, KV sharing from layer 20
// (sliding layers reading layer 18, full ones layer 19), 4 sliding layers
// to 1 full, the sliding rotary at θ 1e4, a soft-cap of 30, and the first
// 10 layers' MLPs sparse at 0.95 (the std of its Gaussian top-k is the
// sample's, transformers' the population's); it applies
// correct_output_scale always and clips no coefficient (the converter
// clips them on the way; a model whose coefficients exceed
// altup_coef_clip is refused here). Other models are refused, naming
// what differs. The k/v weights of the KV-sharing layers, which
// llama.cpp requires and never reads (tputool skips them), are written
// as zeros.
func runGemma3n(l *lm.Loaded, dir, out string, m *gemma3n.Model) error {
	o := m.Options()
	s := &o.Spec
	const first = 20 // llama.cpp's n_layer_kv_from_start
	switch {
	case o.Streams != 4 || o.Laurel != 64 || o.PLE != 256:
		return fmt.Errorf("%s: llama.cpp's gemma3n fixes altup_num_inputs 4, laurel_rank 64 and hidden_size_per_layer_input 256; got %d, %d, %d", dir, o.Streams, o.Laurel, o.PLE)
	case o.FinalSoftcap != 30 || !o.CorrectScale:
		return fmt.Errorf("%s: llama.cpp's gemma3n soft-caps at 30 and applies correct_output_scale always", dir)
	case o.PLEVocab != s.VocabSize:
		// The releases (262400 against 262144) are refused so: export-gguf
		// exists for random cross-check and benchmark models.
		return fmt.Errorf("%s: llama.cpp's gemma3n reads the per-layer table by the token id: vocab_size_per_layer_input %d must be vocab_size %d", dir, o.PLEVocab, s.VocabSize)
	case o.Clip && o.CoefClip == 0:
		return fmt.Errorf("%s: altup_coef_clip 0 zeroes the correction coefficients in transformers; llama.cpp reads them as stored", dir)
	case o.Rope[lm.KindFull].Type != "default" || o.Rope[lm.KindSliding].Type != "default":
		return fmt.Errorf("%s: export-gguf writes Gemma 3n without rope scaling", dir)
	case s.Layers <= first:
		return fmt.Errorf("%s: llama.cpp's gemma3n shares KV caches from layer 20 on: want more than 20 layers, got %d", dir, s.Layers)
	}
	for i, ly := range o.Layer {
		wantKind := lm.KindSliding
		if (i+1)%5 == 0 {
			wantKind = lm.KindFull
		}
		wantSparsity := 0.0
		if i < 10 {
			wantSparsity = 0.95
		}
		wantSource := -1
		if i >= first {
			wantSource = 19
			if wantKind == lm.KindSliding {
				wantSource = 18
			}
		}
		if ly.Kind != wantKind || ly.Sparsity != wantSparsity || ly.Source != wantSource {
			return fmt.Errorf("%s: layer %d is %s, sparsity %g, sharing layer %d; llama.cpp's gemma3n fixes %s, %g, %d (4 sliding to 1 full, the first 10 sparse at 0.95, sharing from layer 20)",
				dir, i, ly.Kind, ly.Sparsity, ly.Source, wantKind, wantSparsity, wantSource)
		}
	}
	if b := ropeBase(o.Rope[lm.KindSliding]); math.Abs(b-1e4) > 1e-3*1e4 {
		return fmt.Errorf("%s: llama.cpp's gemma3n fixes the sliding layers' rope_local_base_freq at 10000, got %g", dir, b)
	}
	ff := make([]int32, s.Layers)
	for i, ly := range o.Layer {
		ff[i] = int32(ly.Intermediate)
	}
	const a = "gemma3n."
	meta, err := header(l, dir, "gemma3n")
	if err != nil {
		return err
	}
	meta = append(meta, []kv{
		{a + "block_count", uint32(s.Layers)},
		{a + "context_length", uint32(min(s.MaxPositions, math.MaxInt32))},
		{a + "embedding_length", uint32(s.Hidden)},
		{a + "feed_forward_length", ff},
		{a + "attention.head_count", uint32(s.Heads)},
		{a + "attention.head_count_kv", uint32(s.KVHeads)},
		{a + "attention.key_length", uint32(s.HeadDim)},
		{a + "attention.value_length", uint32(s.HeadDim)},
		{a + "attention.layer_norm_rms_epsilon", float32(o.Eps)},
		{a + "attention.sliding_window", uint32(s.SlidingWindow)},
		{a + "rope.freq_base", float32(ropeBase(o.Rope[lm.KindFull]))},
		{a + "rope.dimension_count", uint32(s.HeadDim)},
		{a + "vocab_size", uint32(s.VocabSize)},
	}...)
	p := o.Prefix
	stacked := func(name string) []string {
		names := make([]string, o.Streams-1)
		for k := range names {
			names[k] = fmt.Sprintf("%s%s.%d.weight", p, name, k)
		}
		return names
	}
	g := &ggufTensors{l: l}
	g.add("token_embd.weight", false, p+"embed_tokens.weight")
	g.add("per_layer_token_embd.weight", false, p+"embed_tokens_per_layer.weight")
	g.add("altup_proj.weight", false, stacked("altup_projections")...)
	g.add("altup_unembd_proj.weight", false, stacked("altup_unembed_projections")...)
	g.add("per_layer_model_proj.weight", false, p+"per_layer_model_projection.weight")
	g.add("per_layer_proj_norm.weight", true, p+"per_layer_projection_norm.weight")
	for i, ly := range o.Layer {
		hf, b := fmt.Sprintf("%slayers.%d.", p, i), fmt.Sprintf("blk.%d.", i)
		pairs := []ggufPair{
			{"attn_norm.weight", hf + "input_layernorm.weight", true},
			{"attn_q.weight", hf + "self_attn.q_proj.weight", false},
			{"attn_q_norm.weight", hf + "self_attn.q_norm.weight", true},
			{"attn_output.weight", hf + "self_attn.o_proj.weight", false},
			{"post_attention_norm.weight", hf + "post_attention_layernorm.weight", true},
			{"ffn_norm.weight", hf + "pre_feedforward_layernorm.weight", true},
			{"ffn_gate.weight", hf + "mlp.gate_proj.weight", false},
			{"ffn_up.weight", hf + "mlp.up_proj.weight", false},
			{"ffn_down.weight", hf + "mlp.down_proj.weight", false},
			{"post_ffw_norm.weight", hf + "post_feedforward_layernorm.weight", true},
			{"inp_gate.weight", hf + "per_layer_input_gate.weight", false},
			{"proj.weight", hf + "per_layer_projection.weight", false},
			{"post_norm.weight", hf + "post_per_layer_input_norm.weight", true},
			{"altup_correct_coef.weight", hf + "altup.correction_coefs.weight", true},
			{"altup_correct_scale.weight", hf + "altup.correct_output_scale", true},
			{"altup_predict_coef.weight", hf + "altup.prediction_coefs.weight", true},
			{"altup_router.weight", hf + "altup.modality_router.weight", false},
			{"altup_router_norm.weight", hf + "altup.router_norm.weight", true},
			{"laurel_l.weight", hf + "laurel.linear_left.weight", false},
			{"laurel_r.weight", hf + "laurel.linear_right.weight", false},
			{"laurel_post_norm.weight", hf + "laurel.post_laurel_norm.weight", true},
		}
		if ly.Source < 0 {
			pairs = append(pairs,
				ggufPair{"attn_k.weight", hf + "self_attn.k_proj.weight", false},
				ggufPair{"attn_v.weight", hf + "self_attn.v_proj.weight", false},
				ggufPair{"attn_k_norm.weight", hf + "self_attn.k_norm.weight", true})
		} else {
			kvDim := uint64(s.KVHeads * s.HeadDim)
			g.zeros(b+"attn_k.weight", uint64(s.Hidden), kvDim)
			g.zeros(b+"attn_v.weight", uint64(s.Hidden), kvDim)
			g.zeros(b+"attn_k_norm.weight", uint64(s.HeadDim))
		}
		for _, c := range []string{"altup.correction_coefs.weight", "altup.prediction_coefs.weight"} {
			if g.err == nil {
				clip := 0.0 // altup_coef_clip null: nothing clipped
				if o.Clip {
					clip = o.CoefClip
				}
				g.err = checkClip(l, hf+c, clip)
			}
		}
		g.pairs(b, pairs)
	}
	g.add("output_norm.weight", true, p+"norm.weight")
	if !s.TieEmbeddings {
		g.add("output.weight", false, "lm_head.weight")
	}
	if g.err != nil {
		return g.err
	}
	return write(out, meta, g.ts)
}

// zeros adds a float32 tensor of zeros with dimensions dims (innermost
// first).
func (g *ggufTensors) zeros(gguf string, dims ...uint64) {
	n := uint64(1)
	for _, d := range dims {
		n *= d
	}
	g.ts = append(g.ts, tensor{name: gguf, dims: dims, typ: ggmlF32, size: int64(4 * n), write: func(w *bufio.Writer) error {
		_, err := w.Write(make([]byte, 4*n))
		return err
	}})
}

// checkClip refuses a coefficient matrix with a value past ±clip (0:
// none), which transformers clips and llama.cpp reads as stored.
func checkClip(l *lm.Loaded, name string, clip float64) error {
	if clip <= 0 {
		return nil
	}
	x, err := l.Tensor(name, dtypes.Float32)
	if err != nil {
		return err
	}
	defer x.FinalizeAll()
	var bad error
	x.ConstFlatData(func(flat any) {
		for _, v := range flat.([]float32) {
			if math.Abs(float64(v)) > clip {
				bad = fmt.Errorf("%s holds %g, past altup_coef_clip %g: llama.cpp would not clip it", name, v, clip)
				return
			}
		}
	})
	return bad
}
