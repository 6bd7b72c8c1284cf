package lm

import (
	"encoding/binary"
	"fmt"
	"strings"

	"github.com/tputool/tputool/loader/safetensors"
)

// GPTQ and AWQ checkpoints store each quantized Linear's weight W [out, in]
// as integers packed into int32 words, with a scale and a zero point per
// group of input columns, in place of NAME (".weight"):
//
//   - GPTQ (AutoGPTQ, GPTQModel, optimum): PREFIX.qweight I32 [in·bits/32,
//     out], packed along the input (value i of a column at bits·(i mod
//     32/bits)); PREFIX.qzeros I32 [groups, out·bits/32], packed along the
//     output the same way; PREFIX.scales [groups, out]; PREFIX.g_idx I32
//     [in], each input column's group (desc_act reorders them; without
//     g_idx the group is i / group_size). W[o, i] = scales[g, o] ·
//     (q[i, o] − zeros[g, o]) with g = g_idx[i]. checkpoint_format
//     "gptq_v2" stores the zero points as they are; "gptq" (v1) stores
//     each qzeros word minus 0x11111111 (8 bits: 0x01010101), the borrow
//     running from one value into the next, and is read as GPTQModel
//     (which transformers uses) converts v1 to v2: each word plus that
//     constant, wrapping in 32 bits, then the values extracted
//     (v1ZeroWord). That is each value plus one wherever no zero point of
//     the word is 0; a true 0 is stored as 15 (255) and borrows one from
//     the next value, which per-value +1 would misread.
//   - AWQ (AutoAWQ, version "gemm"): PREFIX.qweight I32 [in, out/8] and
//     PREFIX.qzeros I32 [groups, out/8], packed along the output in AWQ's
//     interleaved order (value j of 8 at nibble awqNibble[j]);
//     PREFIX.scales [groups, out]; W[o, i] = scales[g, o] · (q[i, o] −
//     zeros[g, o]) with g = i / group_size.
//
// The loader decodes them to floats at load (decodeEncoded), like FP8, so
// they run on every backend in the compute dtype (or held as int8 with
// --quantize int8): the checkpoint's 4-bit size is not kept in memory.

// PackedQuant is a GPTQ or AWQ checkpoint's quantization (Spec.Packed).
type PackedQuant struct {
	Method string // "gptq" or "awq"
	Bits   int    // 4 or 8 (AWQ: 4)
	Group  int    // input columns per scale; 0: one group over the whole row
	// V1 is GPTQ's checkpoint_format "gptq": qzeros words are read as
	// v1ZeroWord gives them.
	V1 bool
	// Rules are GPTQ's dynamic per-module rules, in the config's order
	// (dynamic.go); For applies them.
	Rules []PackedRule
}

// Suffixes of a packed weight's tensors, after the Linear's prefix.
const (
	packedQWeight = ".qweight"
	packedQZeros  = ".qzeros"
	packedScales  = ".scales"
	packedGIdx    = ".g_idx"
)

// awqNibble is where AWQ packs value j of 8 (its interleaved order
// 0, 2, 4, 6, 1, 3, 5, 7 inverted).
var awqNibble = [8]int{0, 4, 1, 5, 2, 6, 3, 7}

// packedPrefix is the Linear's name of weight NAME: NAME less ".weight".
func packedPrefix(name string) (string, bool) {
	return strings.CutSuffix(name, ".weight")
}

// packed reports a weight the checkpoint stores packed (GPTQ, AWQ): a
// Matmul matrix whose PREFIX.qweight is there in place of NAME; a module
// left unquantized (modules_to_not_convert) keeps its plain NAME.
// A module a dynamic rule leaves unquantized is plain too.
func (w WeightSpec) packed(spec *Spec, has func(string) bool) bool {
	if spec.Packed == nil || !w.stored() || len(w.Shape) != 2 || has(w.Name) {
		return false
	}
	p, ok := packedPrefix(w.Name)
	if !ok {
		return false
	}
	if _, quantized := spec.Packed.For(p); !quantized {
		return false
	}
	return has(p + packedQWeight)
}

// packedGroups is the number of scale groups of w.
func (q *PackedQuant) groups(in int) int {
	if q.Group <= 0 {
		return 1
	}
	return (in + q.Group - 1) / q.Group
}

// packedSources are the tensors of a packed weight, with their shapes and
// dtypes (g_idx only where the checkpoint has it).
func (w WeightSpec) packedSources(q *PackedQuant, has func(string) bool) []packedTensor {
	p, _ := packedPrefix(w.Name)
	q, _ = q.For(p)
	out, in := w.Shape[0], w.Shape[1]
	per := 32 / q.Bits
	g := q.groups(in)
	scaleDTypes := []safetensors.DType{safetensors.F16, safetensors.BF16, safetensors.F32}
	if q.Method == "awq" {
		return []packedTensor{
			{p + packedQWeight, []int{in, out / per}, []safetensors.DType{safetensors.I32}},
			{p + packedQZeros, []int{g, out / per}, []safetensors.DType{safetensors.I32}},
			{p + packedScales, []int{g, out}, scaleDTypes},
		}
	}
	ts := []packedTensor{
		{p + packedQWeight, []int{in / per, out}, []safetensors.DType{safetensors.I32}},
		{p + packedQZeros, []int{g, out / per}, []safetensors.DType{safetensors.I32}},
		{p + packedScales, []int{g, out}, scaleDTypes},
	}
	if has(p + packedGIdx) {
		ts = append(ts, packedTensor{p + packedGIdx, []int{in}, []safetensors.DType{safetensors.I32}})
	}
	return ts
}

type packedTensor struct {
	name   string
	shape  []int
	dtypes []safetensors.DType
}

// checkPackedShape refuses a weight whose sizes the packing cannot cover.
func (q *PackedQuant) checkShape(w WeightSpec) error {
	out, in := w.Shape[0], w.Shape[1]
	per := 32 / q.Bits
	if q.Method == "awq" && out%per != 0 || q.Method != "awq" && (in%per != 0 || out%per != 0) {
		return fmt.Errorf("tensor %q: [%d, %d] cannot be packed %d values to an int32 (%s)", w.Name, out, in, per, q.Method)
	}
	return nil
}

// intSource is a weight of integer codes as its checkpoint stores it,
// read in place: W[o, i] = scale[g, o] · (value(o, i) − zero[g, o]) with
// g = groupOf[i], zero points as integers (offsets applied). The formats
// that store one (GPTQ, AWQ, compressed-tensors' pack-quantized) each
// make one; it is decoded to floats (decodeInts) or, 4-bit in whole
// groups of 32, held as grouped int4 (int4groups.go).
type intSource struct {
	name     string
	out, in  int
	groups   int
	groupOf  []int32 // in entries
	value    func(o, i int) uint32
	scales   []float32 // [groups, out]
	zeros    []float32 // [groups, out]
	scaleDT  safetensors.DType
	release  func()
	sequence bool // groupOf[i] = i / group for one group size: groups in order, all the same size
}

// decodeInts hands fn the weight's values in rows of [out, in] (emitDequantized)
// and reports non-finite ones.
func (l *Loaded) decodeInts(src *intSource, fn func(at int, vals []float32)) {
	out := src.out
	nf := safetensors.NonFiniteTensor{Name: src.name, First: -1, DType: src.scaleDT, Elements: int64(out) * int64(src.in)}
	emitDequantized(&nf, out, src.in, func(o, i int) float32 {
		gi := int(src.groupOf[i])
		return src.scales[gi*out+o] * (float32(src.value(o, i)) - src.zeros[gi*out+o])
	}, fn)
	src.release()
	if nf.Count > 0 && l.OnNonFinite != nil {
		l.OnNonFinite(nf)
	}
}

// decodePacked decodes a packed weight into rows of [out, in], step rows
// at a time, calling fn with each piece.
func (l *Loaded) decodePacked(w WeightSpec, fn func(at int, vals []float32)) error {
	src, err := l.packedSource(w)
	if err != nil {
		return err
	}
	l.decodeInts(src, fn)
	return nil
}

// packedSource reads a GPTQ or AWQ weight's tensors (intSource).
func (l *Loaded) packedSource(w WeightSpec) (*intSource, error) {
	q := l.Model.Spec().Packed.ForWeight(w.Name)
	if err := q.checkShape(w); err != nil {
		return nil, err
	}
	out, in := w.Shape[0], w.Shape[1]
	srcs := w.packedSources(q, l.ckpt.Has)
	raw, dtype, err := l.readSources(srcs)
	if err != nil {
		return nil, err
	}
	qw, qz := raw[srcs[0].name], raw[srcs[1].name]
	scaleDT := dtype[srcs[2].name]
	scales := make([]float32, elements(srcs[2].shape))
	safetensors.DecodeFloat32(scales, scaleDT, raw[srcs[2].name])
	groupOf := make([]int32, in)
	for i := range groupOf {
		if q.Group > 0 {
			groupOf[i] = int32(i / q.Group)
		}
	}
	g := q.groups(in)
	sequence := true
	if len(srcs) > 3 { // GPTQ's g_idx
		if sequence, err = readGIdx(srcs[3].name, raw[srcs[3].name], groupOf, g); err != nil {
			return nil, err
		}
	}
	per, mask := 32/q.Bits, uint32(1)<<q.Bits-1
	word := func(b []byte, i int) uint32 { return binary.LittleEndian.Uint32(b[4*i:]) }
	// value returns input i's code for output o and zero returns
	// zeros[g, o], as stored.
	var value func(o, i int) uint32
	var zero func(g, o int) uint32
	if q.Method == "awq" {
		value = func(o, i int) uint32 { return word(qw, i*(out/8)+o/8) >> (4 * awqNibble[o%8]) & mask }
		zero = func(g, o int) uint32 { return word(qz, g*(out/8)+o/8) >> (4 * awqNibble[o%8]) & mask }
	} else {
		zword := func(g, o int) uint32 { return word(qz, g*(out/per)+o/per) }
		if q.V1 {
			zword = func(g, o int) uint32 { return v1ZeroWord(word(qz, g*(out/per)+o/per), q.Bits) }
		}
		value = func(o, i int) uint32 { return word(qw, (i/per)*out+o) >> (q.Bits * (i % per)) & mask }
		zero = func(g, o int) uint32 { return zword(g, o) >> (q.Bits * (o % per)) & mask }
	}
	// Each group's zero point per output column, once.
	zeros := make([]float32, g*out)
	for gi := range g {
		for o := range out {
			zeros[gi*out+o] = float32(zero(gi, o))
		}
	}
	return &intSource{
		name: w.Name, out: out, in: in, groups: g, groupOf: groupOf, value: value,
		scales: scales, zeros: zeros, scaleDT: scaleDT, sequence: sequence,
		release: func() { l.releaseSources(raw) },
	}, nil
}

// v1ZeroWord is GPTQ v1's qzeros word w of bits-wide values as v2 stores
// it: w plus one in every value, added as one 32-bit word (0x11111111 for
// 4 bits, 0x01010101 for 8), the carry running from a value into the
// next and out of the top, as GPTQModel's convert_gptq_v1_to_v2_format
// adds it, the inverse of the subtraction that wrote v1.
func v1ZeroWord(w uint32, bits int) uint32 {
	var ones uint32
	for k := 0; k < 32; k += bits {
		ones |= 1 << k
	}
	return w + ones
}

// readSources reads the tensors of an encoded weight in place: each one's
// bytes and its dtype as stored, by name, checked against its shape.
func (l *Loaded) readSources(srcs []packedTensor) (raw map[string][]byte, dtype map[string]safetensors.DType, err error) {
	raw, dtype = map[string][]byte{}, map[string]safetensors.DType{}
	for _, s := range srcs {
		info, ok := l.ckpt.Info(s.name)
		if !ok {
			return nil, nil, fmt.Errorf("checkpoint %s has no tensor %q", l.Dir, s.name)
		}
		b, err := l.rawOf(s.name, info.DType, int64(elements(s.shape)))
		if err != nil {
			return nil, nil, err
		}
		raw[s.name], dtype[s.name] = b, info.DType
	}
	return raw, dtype, nil
}

// readGIdx reads an activation-order group index, the I32 tensor name
// [in] (GPTQ's g_idx, compressed-tensors' weight_g_idx), into groupOf,
// checking each entry names one of the groups; sequence reports whether
// it equalled groupOf's order before (input i in group i/G).
func readGIdx(name string, b []byte, groupOf []int32, groups int) (sequence bool, err error) {
	sequence = true
	for i := range groupOf {
		v := int32(binary.LittleEndian.Uint32(b[4*i:]))
		if v < 0 || int(v) >= groups {
			return false, fmt.Errorf("tensor %q: g_idx[%d] = %d, outside the %d groups", name, i, v, groups)
		}
		sequence = sequence && v == groupOf[i]
		groupOf[i] = v
	}
	return sequence, nil
}

// releaseSources releases the mapping's pages of tensors readSources read.
func (l *Loaded) releaseSources(raw map[string][]byte) {
	for name, b := range raw {
		l.ckpt.ReleaseRange(name, 0, int64(len(b)))
	}
}
