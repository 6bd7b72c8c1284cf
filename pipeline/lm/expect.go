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
// misshapen and unused tensors.
func Expect(m Model, src safetensors.Shapes) *safetensors.Strict {
	s := safetensors.NewStrict(src)
	has := func(name string) bool { _, ok := src.Shape(name); return ok }
	spec := m.Spec()
	expectEncoded := func(enc []packedTensor) {
		for _, p := range enc {
			s.Expect(p.name, p.shape...)
			s.RequireDType(p.name, p.dtypes...)
		}
	}
	for _, w := range Weights(m) {
		if enc := w.encodedSources(spec, has); enc != nil {
			expectEncoded(enc)
			continue
		}
		for _, p := range w.Sources(has) {
			if p.Name != w.Name { // a part (an expert stored on its own), which may be quantized
				if enc := p.encodedSources(spec, has); enc != nil {
					expectEncoded(enc)
					continue
				}
				if p.fp8(spec, has) {
					s.Expect(p.Name, p.Shape...)
					s.RequireDType(p.Name, fp8DTypes...)
					s.Expect(p.Name+fp8ScaleSuffix, p.fp8ScaleShape(spec)...)
					continue
				}
			}
			s.Expect(p.Name, p.Shape...)
			if p.Name != w.Name && w.mxfp4(has) {
				s.RequireDType(p.Name, safetensors.U8)
			}
		}
		if w.fp8(spec, has) {
			s.RequireDType(w.Name, fp8DTypes...)
			s.Expect(w.Name+fp8ScaleSuffix, w.fp8ScaleShape(spec)...)
		}
	}
	s.RequireDTypes(weightDTypes...)
	if spec.Compressed != nil {
		// Static activation scales (W8A8, FBGEMM's upper bound): the
		// weights run with float activations, so they are not read.
		s.IgnoreIf(func(name string) bool {
			return strings.HasSuffix(name, ".input_scale") || strings.HasSuffix(name, ".input_scale_ub") || strings.HasSuffix(name, ".input_zero_point")
		})
	}
	s.IgnoreIf(ignoredBuffer)
	s.IgnoreIf(func(name string) bool { _, skip := SkipReason(m, name); return skip })
	if spec := m.Spec(); spec.TieEmbeddings {
		s.Ignore(tiedHead, spec.VocabSize, spec.Hidden)
	}
	return s
}

// tiedHead is the head a checkpoint with tied embeddings may still hold.
const tiedHead = "lm_head.weight"

// encodedSources are the tensors of w when the checkpoint stores it
// packed (GPTQ, AWQ) or compressed (compressed-tensors), nil otherwise.
func (w WeightSpec) encodedSources(spec *Spec, has func(string) bool) []packedTensor {
	switch {
	case w.packed(spec, has):
		return w.packedSources(spec.Packed, has)
	case w.compressed(spec, has):
		return w.compressedSources(spec.Compressed, has)
	}
	return nil
}
