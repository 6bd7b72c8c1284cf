package lm

import (
	"fmt"
	"math"
	"strings"

	"github.com/gomlx/gomlx/pkg/core/dtypes"

	"github.com/tputool/tputool/loader/safetensors"
)

// BitNet b1.58 checkpoints (quantization_config quant_method "bitnet",
// transformers' integrations/bitnet.py: microsoft/bitnet-b1.58-2B-4T, and
// the Llama-architecture 1.58-bit releases) store each quantized Linear's
// weight W [out, in] as ternary values {-1, 0, 1}, four to a byte:
//
//   - NAME U8 [ceil(out/4), in]: output row r = s·P + j (P the stored
//     rows) is bits 2s..2s+1 of stored row j, minus one (pack_weights and
//     unpack_weights pack along the output axis in blocks of P rows).
//   - PREFIX.weight_scale: one float for the whole matrix. AutoBitLinear
//     (linear_class "autobitlinear", the 2B-4T release's) multiplies the
//     product by it; BitLinear ("bitlinear", the class's default) divides
//     by it. Either way W·scale (or W/scale) is the matrix the loader
//     decodes, at load, to float, as it decodes FP8 and GPTQ.
//
// Both classes also quantize each Linear's input to int8 per token
// (absmax over the last axis, scaled to 127, rounded), which the
// architecture does in its graph (Spec.BitNet, nn.ActQuant8). The head
// (modules_to_not_convert, lm_head by default) stays float. Every other
// projection must be stored packed (bitnetProjection): its input is
// quantized whatever its storage, so a float one would run as no
// transformers class runs it; modules_to_not_convert naming a projection
// is refused (applyQuantization).

// BitNetQuant is a BitNet checkpoint's quantization (Spec.BitNet).
type BitNetQuant struct {
	// Divide is BitLinear's weight_scale: the product divided by it;
	// AutoBitLinear's multiplies.
	Divide bool
}

// bitnetScale is the suffix of a BitNet weight's scale, after the
// Linear's prefix.
const bitnetScale = ".weight_scale"

// bitnetGroup is the columns of one group of a BitNet weight held as
// int8 (bitnetInts): --quantize int8's group.
const bitnetGroup = 64

// bitnetRows is the stored rows of an out-row ternary matrix: four a byte.
func bitnetRows(out int) int { return (out + 3) / 4 }

// bitnet reports a weight the checkpoint stores BitNet-packed: a Matmul
// matrix whose PREFIX.weight_scale is beside it, in a BitNet checkpoint.
func (w WeightSpec) bitnet(spec *Spec, has func(string) bool) bool {
	if !w.bitnetProjection(spec) || !has(w.Name) {
		return false
	}
	p, _ := packedPrefix(w.Name)
	return has(p + bitnetScale)
}

// bitnetProjection reports a weight a BitNet checkpoint must store
// packed: a layer's Matmul matrix (not the embedding, not the head).
func (w WeightSpec) bitnetProjection(spec *Spec) bool {
	if spec.BitNet == nil || !w.stored() || len(w.Shape) != 2 || !strings.Contains(w.Name, ".layers.") {
		return false
	}
	_, ok := packedPrefix(w.Name)
	return ok
}

// bitnetModules are the module names of the projections of a model of
// layers layers, as transformers' replace_with_bitnet_linear matches
// modules_to_not_convert against them (a substring of the dotted name).
func bitnetModules(layers int) []string {
	var ms []string
	for i := range layers {
		for _, p := range []string{"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"} {
			ms = append(ms, fmt.Sprintf("model.layers.%d.%s", i, p))
		}
	}
	return ms
}

// bitnetSources are a BitNet weight's tensors: the packed bytes and the
// scale (any float dtype, one element).
func (w WeightSpec) bitnetSources() []packedTensor {
	p, _ := packedPrefix(w.Name)
	return []packedTensor{
		{w.Name, []int{bitnetRows(w.Shape[0]), w.Shape[1]}, []safetensors.DType{safetensors.U8}},
		{p + bitnetScale, []int{1}, []safetensors.DType{safetensors.F32, safetensors.BF16, safetensors.F16}},
	}
}

// bitnetDType is the dtype that holds BitNet weight name exactly: ±scale
// is exact in the scale's own dtype (bf16 in the releases) when
// AutoBitLinear multiplies by it; BitLinear's ±1/scale needs float32.
func (l *Loaded) bitnetDType(name string) dtypes.DType {
	p, _ := packedPrefix(name)
	info, ok := l.ckpt.Info(p + bitnetScale)
	if !ok || l.Model.Spec().BitNet.Divide {
		return dtypes.Float32
	}
	switch info.DType {
	case safetensors.BF16:
		return dtypes.BFloat16
	case safetensors.F16:
		return dtypes.Float16
	}
	return dtypes.Float32
}

// bitnetInts is a BitNet weight as the integer source the CPU engine
// holds as int8 (int8Source): the ternary codes as 8-bit values with zero
// point 128 (the ternary value + 128, that is the stored code − 1 + 128:
// 127, 128, 129, and 130 for the unused code 3), in groups of
// bitnetGroup columns (a whole row when the width is not a multiple)
// whose scale is the matrix's (weight_scale, or its inverse under
// BitLinear). Held so, a weight is a byte a value, exactly.
func (l *Loaded) bitnetInts(w WeightSpec) (*intSource, error) {
	out, in := w.Shape[0], w.Shape[1]
	p, _ := packedPrefix(w.Name)
	rows := bitnetRows(out)
	raw, err := l.rawOf(w.Name, safetensors.U8, int64(rows)*int64(in))
	if err != nil {
		return nil, err
	}
	sc, err := l.ckpt.Float32(p + bitnetScale)
	if err != nil {
		return nil, err
	}
	if len(sc) != 1 {
		return nil, fmt.Errorf("tensor %q: %d values, want one scale for the matrix", p+bitnetScale, len(sc))
	}
	s64 := float64(sc[0]) // as decodeBitNet computes it, to the last bit
	if l.Model.Spec().BitNet.Divide {
		s64 = 1 / s64
	}
	scale := float32(s64)
	// Groups of bitnetGroup columns (--quantize int8's, whose kernels
	// they then run), each with the matrix's one scale; a row whole when
	// it is not a multiple of them.
	group := in
	if in%bitnetGroup == 0 {
		group = bitnetGroup
	}
	groups := in / group
	scales, zeros := make([]float32, groups*out), make([]float32, groups*out)
	for k := range scales {
		scales[k], zeros[k] = scale, 128
	}
	groupOf := make([]int32, in)
	for i := range groupOf {
		groupOf[i] = int32(i / group)
	}
	info, _ := l.ckpt.Info(p + bitnetScale)
	return &intSource{
		name: w.Name, out: out, in: in, groups: groups, groupOf: groupOf, sequence: true,
		value: func(o, i int) uint32 {
			s, j := o/rows, o%rows
			return uint32(raw[j*in+i]>>(2*s)&3) + 127 // code − 1 + 128
		},
		scales: scales, zeros: zeros, scaleDT: info.DType,
		release: func() { l.ckpt.ReleaseRange(w.Name, 0, int64(rows)*int64(in)) },
	}, nil
}

// decodeBitNet converts a BitNet weight to float32 in pieces of whole
// rows (decodeEncoded's contract).
func (l *Loaded) decodeBitNet(w WeightSpec, fn func(at int, vals []float32)) error {
	out, in := w.Shape[0], w.Shape[1]
	p, _ := packedPrefix(w.Name)
	rows := bitnetRows(out)
	raw, err := l.rawOf(w.Name, safetensors.U8, int64(rows)*int64(in))
	if err != nil {
		return err
	}
	sc, err := l.ckpt.Float32(p + bitnetScale)
	if err != nil {
		return err
	}
	if len(sc) != 1 {
		return fmt.Errorf("tensor %q: %d values, want one scale for the matrix", p+bitnetScale, len(sc))
	}
	scale := float64(sc[0])
	if l.Model.Spec().BitNet.Divide {
		scale = 1 / scale
	}
	if math.IsInf(scale, 0) || math.IsNaN(scale) || scale == 0 {
		return fmt.Errorf("tensor %q: scale %g gives no finite weights", p+bitnetScale, sc[0])
	}
	levels := [4]float32{-float32(scale), 0, float32(scale), float32(2 * scale)} // bits 0..2 are -1, 0, 1; 3 is never written (2 · scale, as unpack_weights reads it)
	step := max(1, encodedPiece/in)
	buf := make([]float32, min(step, out)*in)
	for o := 0; o < out; o += step {
		n := min(step, out-o)
		for r := 0; r < n; r++ {
			s, j := (o+r)/rows, (o+r)%rows
			src, dst := raw[j*in:(j+1)*in], buf[r*in:(r+1)*in]
			for c, b := range src {
				dst[c] = levels[(b>>(2*s))&3]
			}
		}
		fn(o*in, buf[:n*in])
	}
	l.ckpt.ReleaseRange(w.Name, 0, int64(rows)*int64(in))
	return nil
}
