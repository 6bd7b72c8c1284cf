package lm

import (
	"strings"

	"github.com/tputool/tputool/loader/safetensors"
)

// weightDTypes are the checkpoint dtypes the text models read.
var weightDTypes = []safetensors.DType{safetensors.F32, safetensors.F16, safetensors.BF16}

// Expect declares on a strict check of src what model m reads: every
// weight with the shape its config implies, the float dtypes it accepts,
// the tensors it deliberately skips (Skipper), the rotary buffers
// transformers never loads, and, when the embeddings are tied, an
// lm_head.weight of the embedding's shape that the checkpoint may still
// carry. src may be a memory-mapped checkpoint or the headers inspect
// reads, so that loading and `tputool inspect` name the same missing,
// misshapen and unused tensors. A model that splits tensors (Splitter)
// sees their pieces, and one that renames an older layout's tensors
// (Renamer) sees src's tensors under their new names.
func Expect(m Model, src safetensors.Shapes) *safetensors.Strict {
	src, refused := splitSource(m, src)
	src = renamedSource(m, src)
	s := safetensors.NewStrict(src)
	for _, r := range refused {
		s.Errorf("%s", r)
	}
	has := func(name string) bool { _, ok := src.Shape(name); return ok }
	spec := m.Spec()
	for _, w := range Weights(m) {
		for _, t := range w.storedTensors(spec, has) {
			s.Expect(t.name, t.shape...)
			if t.dtypes != nil {
				s.RequireDType(t.name, t.dtypes...)
			}
		}
	}
	s.RequireDTypes(weightDTypes...)
	if spec.Compressed != nil {
		// Static activation scales (W8A8, FBGEMM's upper bound, NVFP4's
		// global one): the weights run with float activations, so they
		// are not read.
		s.IgnoreIf(func(name string) bool {
			return strings.HasSuffix(name, ".input_scale") || strings.HasSuffix(name, ".input_scale_ub") ||
				strings.HasSuffix(name, ".input_zero_point") || strings.HasSuffix(name, ".input_global_scale")
		})
	}
	if suffixes := spec.UnreadScales; len(suffixes) > 0 {
		// Static activation scales (fp8's activation_scheme "static") and
		// KV-cache scales (compressed-tensors' kv_cache_scheme): the
		// activations and the KV cache stay float, so they are not read.
		s.IgnoreIf(func(name string) bool {
			for _, suf := range suffixes {
				if strings.HasSuffix(name, suf) {
					return true
				}
			}
			return false
		})
	}
	s.IgnoreIf(ignoredBuffer)
	s.IgnoreIf(func(name string) bool { _, skip := SkipReason(m, name); return skip })
	if spec := m.Spec(); spec.TieEmbeddings {
		// The tied embedding's shape: [vocab, hidden], or narrower where
		// the model projects it (OPT-350M's word_embed_proj_dim).
		shape := []int{spec.VocabSize, spec.Hidden}
		embed := tiedEmbedding(m)
		for _, w := range m.EmbedWeights() {
			if w.Name == embed && len(w.Shape) == 2 {
				shape = w.Shape
			}
		}
		s.Ignore(tiedHead, shape...)
	}
	return s
}

// tiedHead is the head a checkpoint with tied embeddings may still hold.
const tiedHead = "lm_head.weight"

// storedTensors lists the tensors the checkpoint stores weight w as, with
// their shapes and, where the storage fixes them, their dtypes (nil: any
// weight dtype): its encoded sources (GPTQ, AWQ, compressed-tensors); an
// FP8 weight and its block scales; else each of its Sources, a part (an
// expert stored on its own) encoded or FP8 as a weight would be, and
// MXFP4's blocks and scales bytes.
func (w WeightSpec) storedTensors(spec *Spec, has func(string) bool) []packedTensor {
	if enc := w.encodedSources(spec, has); enc != nil {
		return enc
	}
	var ts []packedTensor
	for _, p := range w.Sources(has) {
		if p.Name != w.Name {
			if enc := p.encodedSources(spec, has); enc != nil {
				ts = append(ts, enc...)
				continue
			}
			if p.fp8(spec, has) {
				ts = append(ts, packedTensor{p.Name, p.Shape, fp8DTypes}, packedTensor{p.Name + fp8ScaleSuffix, p.fp8ScaleShape(spec), nil})
				continue
			}
		}
		t := packedTensor{p.Name, p.Shape, nil}
		if p.Name != w.Name && p.Transposed && len(p.Shape) >= 2 { // a part stored transposed (WeightSpec.Sources swaps w's own)
			t.shape = p.Sources(has)[0].Shape
		}
		if p.Name != w.Name && w.mxfp4(has) {
			t.dtypes = []safetensors.DType{safetensors.U8}
		}
		ts = append(ts, t)
	}
	if w.fp8(spec, has) { // then Sources is w alone
		ts[0].dtypes = fp8DTypes
		ts = append(ts, packedTensor{w.Name + fp8ScaleSuffix, w.fp8ScaleShape(spec), nil})
	}
	return ts
}

// encodedSources are the tensors of w when the checkpoint stores it
// packed (GPTQ, AWQ), compressed (compressed-tensors) or BitNet-packed,
// nil otherwise.
func (w WeightSpec) encodedSources(spec *Spec, has func(string) bool) []packedTensor {
	switch {
	case w.packed(spec, has):
		return w.packedSources(spec.Packed, has)
	case w.compressed(spec, has):
		return w.compressedSources(spec.Compressed, has)
	case w.bitnetProjection(spec): // packed, or the strict load names what is missing
		return w.bitnetSources()
	}
	return nil
}
