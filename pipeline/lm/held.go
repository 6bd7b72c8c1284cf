package lm

import (
	"github.com/gomlx/gomlx/pkg/core/dtypes"
)

// How executors hold weights (compile/weights.go; docs/cpu-engine.md,
// "Weights"), as figures that memory estimates share with them.

// QuantGroup is the number of consecutive input columns of a Matmul
// weight that share one int8 scale under --quantize int8.
const QuantGroup = 64

// QuantGroupOf is the group size a [out, in] weight is quantised with:
// QuantGroup when it divides in, else in (one scale per output channel).
func QuantGroupOf(in int) int {
	if in%QuantGroup == 0 {
		return QuantGroup
	}
	return max(in, 1)
}

// HeldDType is the dtype a Matmul weight stored as stored is held in for
// compute dtype compute: the stored 16-bit dtype when the backend
// multiplies it directly (narrow, tpu.Capabilities.NarrowWeights) and
// compute is f32, or when stored equals compute; the compute dtype
// otherwise. Other weights are held in the compute dtype.
func HeldDType(stored, compute dtypes.DType, narrow bool) dtypes.DType {
	if stored == compute || (narrow && compute == dtypes.Float32 && (stored == dtypes.BFloat16 || stored == dtypes.Float16)) {
		return stored
	}
	return compute
}

// Holding says how an executor holds a model's weights.
type Holding struct {
	// Compute is the compute dtype.
	Compute dtypes.DType
	// Narrow: the backend multiplies bf16/f16 weights directly.
	Narrow bool
	// Quantize is "", "int8" or "int4".
	Quantize string
	// MXFP4: weights the checkpoint stores in MXFP4 are held so (blocks
	// and scales, 17/32 of a byte a weight), never decoded or quantised.
	MXFP4 bool
	// FP8: weights the checkpoint stores as FP8 E4M3 with scales by block,
	// row, group or tensor (Loaded.StoredFP8) are held so (a byte a weight and an f32 scale a
	// block) when nothing is quantised, never decoded. (One with NaN bytes
	// is decoded at load: HeldBytes then counts it short.)
	FP8 bool
	// Int4Groups: 4-bit weights of GPTQ, AWQ and compressed-tensors
	// checkpoints that Loaded.StoredInt4Groups takes are held as grouped
	// int4 (half a byte a weight and an f32 scale, and a min, a group),
	// never decoded nor quantised again: Quantize applies to the others.
	// Their symmetric 8-bit weights, and 4-bit ones in groups grouped int4
	// does not take (Loaded.StoredInt8Groups), are held as int8 with a
	// scale a group, unless Quantize is int4.
	Int4Groups bool
	// NVFP4: matrices a compressed-tensors NVFP4 checkpoint stores with
	// E4M3 scales (Loaded.StoredNVFP4), and expert stacks of such parts
	// (Loaded.StoredNVFP4Stack, a table per part), are held as stored
	// (half a byte a weight and a byte of scale per 16), never decoded
	// nor quantised: Quantize applies to the others.
	NVFP4 bool
	// ExpertsApart: weights assembled from parts (expert stacks of a
	// checkpoint that stores each expert apart, WeightSpec.Parts) are held
	// as their parts, each quantised on its own (the executor runs the
	// experts one by one).
	ExpertsApart bool
}

// Quantized reports whether weight w is held as int8 under h: under
// int8, every Matmul matrix (nn.Linear multiplies it, nn.Embedding gathers
// its int8 rows and scales) and every stack of them (routed experts [E,
// out, in], whose chosen matrices nn.PairDot gathers with their scales);
// under int4, those that int4 does not take (Int4). Routers (Router) are
// not quantized.
func (h Holding) Quantized(w WeightSpec) bool {
	switch h.Quantize {
	case "int8":
		return w.Matmul && !w.Router && len(w.Shape) >= 2
	case "int4":
		return w.Matmul && !w.Router && len(w.Shape) >= 2 && !h.Int4(w)
	}
	return false
}

// Int4 reports whether weight w is held as int4 under h: every Matmul
// matrix whose inputs come in whole blocks of Int4Block (the embedding
// table and head included), and every stack of them (routed experts [E,
// out, in], one scale table for the stack, whose chosen matrices
// nn.PairDot gathers with their codes). Weights of other widths are held
// as int8 (Quantized); routers (Router) as they are.
func (h Holding) Int4(w WeightSpec) bool {
	r := len(w.Shape)
	return h.Quantize == "int4" && w.Matmul && !w.Router && r >= 2 && w.Shape[r-1] > 0 && w.Shape[r-1]%Int4Block == 0
}

// Int4Block is the number of input columns that share one int4 scale
// code (kernels.Int4Block).
const Int4Block = 32

// Int4Bytes is the memory an int4 matrix takes: half a byte a value, a
// byte of scale code per 32 and the 1 KiB scale table.
func Int4Bytes(w WeightSpec) int64 {
	n := int64(1)
	for _, d := range w.Shape {
		n *= int64(d)
	}
	return n/2 + n/Int4Block + 256*4
}

// HeldBytes is the memory weight w (stored as stored) takes when held
// as h says: int8 plus one f32 scale per group, or int4 (Int4Bytes), when
// quantised, else its elements in the held dtype.
func (h Holding) HeldBytes(w WeightSpec, stored dtypes.DType) int64 {
	n := int64(1)
	for _, d := range w.Shape {
		n *= int64(d)
	}
	if h.Quantized(w) {
		return n + 4*n/int64(QuantGroupOf(w.Shape[len(w.Shape)-1]))
	}
	if h.Int4(w) {
		return Int4Bytes(w)
	}
	held := h.Compute
	switch {
	case w.Matmul:
		held = HeldDType(stored, h.Compute, h.Narrow)
	case w.F32:
		held = dtypes.Float32
	}
	return n * int64(held.Size())
}

// HeldBytes is the memory the model's weights take when an executor
// holds them as h says.
func (l *Loaded) HeldBytes(h Holding) int64 {
	var n int64
	for _, w := range l.weights {
		if h.ExpertsApart && len(w.Parts) > 0 && !(h.MXFP4 && l.StoredMXFP4(w.Name)) {
			for _, p := range w.Parts {
				n += l.heldBytesOf(h, p)
			}
			continue
		}
		n += l.heldBytesOf(h, w)
	}
	return n
}

// heldBytesOf is the memory weight w (or a part held apart) takes when
// held as h says, in the form HeldForm gives it.
func (l *Loaded) heldBytesOf(h Holding, w WeightSpec) int64 {
	switch l.HeldForm(h, w.Name) {
	case FormMXFP4:
		return MXFP4Bytes(w)
	case FormFP8:
		lay, _ := l.StoredFP8(w.Name)
		return int64(elements(w.Shape)) + 4*int64(elements(lay.Scales))
	case FormInt4Groups:
		lay, _ := l.StoredInt4Groups(w.Name)
		return Int4GroupsBytes(w, lay)
	case FormInt8Groups:
		group, _ := l.StoredInt8Groups(w.Name)
		e := int64(elements(w.Shape))
		return e + 4*e/int64(group)
	case FormNVFP4:
		if parts, ok := l.StoredNVFP4Stack(w.Name); ok {
			return NVFP4StackBytes(w, parts)
		}
		return NVFP4Bytes(w)
	}
	return h.HeldBytes(w, l.StoredDType(w.Name))
}

// A WeightForm is the form an executor holds a weight in.
type WeightForm int

const (
	// FormConverted: converted to the held dtype, or quantised as
	// Holding.Quantize asks (Holding.HeldBytes).
	FormConverted  WeightForm = iota
	FormMXFP4                 // as the checkpoint stores it: MXFP4 (MXFP4Into)
	FormFP8                   // FP8 with its scales (FP8Into)
	FormInt4Groups            // grouped int4 (Int4GroupsInto)
	FormInt8Groups            // int8 in groups: symmetric 8-bit, 4-bit grouped int4 does not take, NVFP4 otherwise (Int8GroupsInto)
	FormNVFP4                 // NVFP4 as stored (NVFP4Into; an expert stack with a table per part, NVFP4StackInto)
)

// HeldForm is the form an executor holding as h keeps weight name (a
// model weight, or an expert part held apart) in: as the checkpoint
// stores it where h multiplies that form (an FP8 weight only when
// nothing is quantised, an 8-bit one unless Quantize is int4), else
// converted. compile.Runner.loadWeight holds by it and HeldBytes counts
// by it.
func (l *Loaded) HeldForm(h Holding, name string) WeightForm {
	if w, ok := l.specOrPart(name); ok && w.Absorbed {
		return FormConverted // read whole by the graph
	}
	if h.MXFP4 && l.StoredMXFP4(name) {
		return FormMXFP4
	}
	if _, ok := l.StoredFP8(name); ok && h.FP8 && h.Quantize == "" {
		return FormFP8
	}
	if h.NVFP4 {
		if _, stack := l.StoredNVFP4Stack(name); stack || l.StoredNVFP4(name) {
			return FormNVFP4
		}
	}
	if h.Int4Groups {
		if lay, ok := l.StoredInt4Groups(name); ok && (!lay.FP4 || h.NVFP4) {
			return FormInt4Groups
		}
		if _, ok := l.StoredInt8Groups(name); ok && (h.Quantize == "" || h.Quantize == "int8") {
			return FormInt8Groups
		}
	}
	return FormConverted
}

// MXFP4Bytes is the memory an MXFP4 weight takes as stored: half a byte
// a value plus a byte of scale per 32.
func MXFP4Bytes(w WeightSpec) int64 {
	n := int64(1)
	for _, d := range w.Shape {
		n *= int64(d)
	}
	return n/2 + n/32
}

// Int4GroupsBytes is the memory a grouped int4 matrix takes: half a byte
// a value, an f32 scale a group, as many mins where it has them, and an
// int32 a column where it is permuted. (The kernels' block codes, a byte
// per 32 values, are kept once per shape of matrix, shared by all the
// layers': not counted.)
func Int4GroupsBytes(w WeightSpec, lay Int4GroupsLayout) int64 {
	n := int64(elements(w.Shape))
	per := int64(4)
	if lay.Mins {
		per = 8
	}
	b := n/2 + per*n/int64(lay.Group)
	if lay.Permuted {
		b += 4 * int64(w.Shape[len(w.Shape)-1])
	}
	return b
}
