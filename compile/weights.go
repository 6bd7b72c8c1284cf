package compile

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/nn"
	"github.com/tputool/tputool/tpu"
	"github.com/tputool/tputool/tpu/cpu/kernels"
)

// How weights are held (docs/cpu-engine.md, "Weights"):
//
//   - Every weight is decoded from the checkpoint's mapping straight into
//     the memory the backend computes from: a shared buffer where the
//     backend has them (the CPU backends), else a host tensor uploaded and
//     dropped one weight at a time. The mapping's pages of each weight are
//     released once it is decoded. The process holds each weight once.
//   - Matmul weights stay in their checkpoint dtype (bf16/f16) when the
//     backend multiplies them directly (tpu.Capabilities.NarrowWeights)
//     and the compute dtype is f32; the graph converts them where they are
//     used (params), which the backend fuses into its GEMM/GEMV. Other
//     weights, and every weight elsewhere, are converted to the compute
//     dtype on the host.
//   - With Options.Quantize "int8", the Matmul weights (the embedding
//     table and head included) are held as int8
//     [out, in/G, G] plus f32 scales [out, in/G, 1] (symmetric, per group
//     of lm.QuantGroup input columns, per channel when in is no multiple of
//     it), quantised from the checkpoint at load; the graph dequantises
//     them (nn.DequantizeInt8), which tputool's cpu backend fuses into its
//     int8 GEMM/GEMV and other backends compute as written; nn.Embedding
//     gathers the int8 rows and their scales before dequantising.
//   - With Options.Quantize "int4", the Matmul matrices and expert stacks
//     whose inputs are a multiple of 32 (the embedding table and head
//     included) are held as int4: packed values u8 [..., out, in/32, 16],
//     a scale code u8 per block of 32 [..., out, in/32] and the weight's
//     table of 256 f32 scales [256, 1] (kernels.QuantizeInt4, at load);
//     the others as int8 above. The graph dequantises them
//     (nn.DequantizeInt4), which tputool's cpu backend fuses into its int4
//     GEMM/GEMV (the weight stays at 17/32 of a byte) and other backends,
//     XLA's included, compute as written.
//   - Weights the checkpoint stores as FP8 E4M3 with scales by block (fp8),
//     row (fbgemm_fp8, compressed-tensors by channel), group or tensor,
//     without Options.Quantize, in f32 or bf16 compute, on a backend that
//     multiplies them (tpu.Capabilities.FP8) on one device, are held as
//     stored: the bytes u8 [out, in] and the block scales f32 (holdFP8);
//     the graph decodes them (nn.DequantizeFP8), which tputool's cpu
//     backend fuses into its FP8 GEMM/GEMV.
//   - Weights GPTQ, AWQ and compressed-tensors checkpoints store as 4-bit
//     integers in groups of input columns (lm.Loaded.StoredInt4Groups),
//     in f32 or bf16 compute on a backend that multiplies them
//     (tpu.Capabilities.Int4Groups) on one device, whatever
//     Options.Quantize says (it applies to the other weights: quantising
//     4-bit weights again only loses), are held at their stored width as
//     grouped int4: packed values u8 [out, in/32, 16], an f32 scale per
//     group [out, in/G], where a zero point is not 8, mins [in/G, out],
//     and, in activation order, the columns sorted by group with each
//     one's place (holdInt4Groups); an expert stack whose parts are all so
//     is held as one grouped int4 stack [E, ...] the same way. The graph
//     decodes them (nn.DequantizeInt4Groups), which tputool's cpu backend
//     fuses into its int4 GEMM/GEMV and its grouped expert node. Their
//     symmetric 8-bit weights (every zero point 128) are held as
//     --quantize int8 holds its own (holdInt8Groups), unless
//     Options.Quantize is int4.
//   - Matrices a compressed-tensors NVFP4 checkpoint stores with E4M3
//     scales (lm.Loaded.StoredNVFP4), in f32 or bf16 compute on a
//     backend that multiplies them (tpu.Capabilities.NVFP4) on one
//     device, whatever Options.Quantize says, are held as stored: the
//     packed E2M1 codes u8 [out, in/32, 16], the scale bytes u8 [out,
//     in/16] and a table of 256 f32 half-scales (holdNVFP4). The graph
//     decodes them (nn.DequantizeNVFP4), which tputool's cpu backend
//     fuses into its NVFP4 GEMM/GEMV. An expert stack whose parts are all so (each
//     expert's projection with its own global scale) is held as stored
//     with a table per part, f32 [E, parts, 256] (holdNVFP4Stack,
//     lm.Loaded.StoredNVFP4Stack; nn.DequantizeNVFP4Tables, which the
//     grouped expert node multiplies in place); one whose parts' scales
//     are not E4M3, or not equal parts, is held as grouped FP4: the codes
//     as stored and each group's half-scale f32 (holdInt4Groups,
//     lm.Int4GroupsLayout.FP4; nn.DequantizeFP4Groups). Other NVFP4
//     weights are held as the 4-bit ones grouped int4 does not take
//     (holdInt8Groups).

// scalesSuffix names the scales input of a quantised weight,
// mxfp4Suffix the scales input of a weight held in MXFP4 (whose blocks
// are the weight's own input), and int4CodesSuffix and int4TableSuffix
// the block codes and scale table of an int4 weight (whose packed values
// are its own input).
const (
	scalesSuffix    = "#scales"
	mxfp4Suffix     = "#e8m0"
	int4CodesSuffix = "#i4codes"
	int4TableSuffix = "#i4table"
	fp8ScaleSuffix  = "#fp8scales"
	int4GScales     = "#i4gscales"
	int4GMins       = "#i4gmins"
	int4GInv        = "#i4ginv"
	nvfp4Codes      = "#nvcodes"
	nvfp4Half       = "#nvhalf"
	fp4GHalf        = "#fp4ghalf"
)

// auxSuffixes are the suffixes of a held weight's companion inputs, in the
// order they follow it.
var auxSuffixes = []string{scalesSuffix, mxfp4Suffix, int4CodesSuffix, int4TableSuffix, fp8ScaleSuffix, int4GScales, int4GMins, int4GInv, nvfp4Codes, nvfp4Half, fp4GHalf}

// isAux reports whether input name is a quantised weight's companion
// (scales, codes, table) rather than a weight.
func isAux(name string) bool {
	for _, suffix := range auxSuffixes {
		if strings.HasSuffix(name, suffix) {
			return true
		}
	}
	return false
}

// HoldingOf is how NewRunner holds a model's weights on a backend with caps
// under o: the one statement of that policy, which cmd's memory checks
// and reports read too (an unset DType is NewRunner's default, float32).
func HoldingOf(caps tpu.Capabilities, o Options) lm.Holding {
	if o.DType == dtypes.InvalidDType {
		o.DType = dtypes.Float32
	}
	// MXFP4 stacks stay MXFP4 on one device of a backend that multiplies
	// them; split over devices (TP/DP), they are split as floats.
	one := max(o.TP, 1)*max(o.DP, 1) == 1
	// FP8, grouped int4 and NVFP4 weights stay as stored in f32 compute
	// and in bf16 compute, whose products read them so too (the graph
	// dequantises them to f32 and rounds that to bf16; tputool's cpu
	// backend multiplies the weight as held, tpu/cpu's wide16 products).
	held := one && (o.DType == dtypes.Float32 || o.DType == dtypes.BFloat16)
	return lm.Holding{Compute: o.DType, Narrow: caps.NarrowWeights, Quantize: o.Quantize, MXFP4: caps.MXFP4 && one,
		FP8: caps.FP8 && held, Int4Groups: caps.Int4Groups && held, NVFP4: caps.NVFP4 && held,
		ExpertsApart: o.Experts != ExpertsInGraph}
}

// holding is how this Runner holds its weights.
func (r *Runner) holding() lm.Holding {
	var caps tpu.Capabilities // none known: nothing held narrow
	if r.opts.Caps != nil {
		caps = *r.opts.Caps
	}
	return HoldingOf(caps, r.opts)
}

// WeightBytes is the memory the Runner's weights take as held (on the device,
// or in the backend's shared buffers), all devices together.
func (r *Runner) WeightBytes() int64 {
	var n int64
	for _, t := range r.weights {
		n += int64(t.Memory())
	}
	if r.tp != nil {
		for _, ts := range r.tp.weights {
			for _, t := range ts {
				n += int64(t.Memory())
			}
		}
	}
	return n
}

// checkQuantize validates Options.Quantize for this Runner.
func (r *Runner) checkQuantize() error {
	q := r.opts.Quantize
	switch q {
	case "":
		return nil
	case "int8", "int4":
	default:
		return &OptionError{Owner: "Options", Option: "Quantize", Value: strconv.Quote(q), Want: "int8, int4 (or nothing)"}
	}
	if r.tp != nil {
		return &OptionError{Owner: "Options", Option: "Quantize", Value: q, Kind: errs.ErrUnsupported,
			Reason: "not supported with {TP}/{DP} (weights are split on the host as floats)"}
	}
	return nil
}

// loadWeights decodes, converts or quantises and uploads every weight
// once, and lists the graph inputs of each program.
func (r *Runner) loadWeights(l *lm.Loaded) error {
	if err := r.checkQuantize(); err != nil {
		return err
	}
	for _, w := range r.heldSpecs(l.Weights()) {
		if err := r.loadWeight(l, w); err != nil {
			return fmt.Errorf("weight %s: %w", w.Name, err)
		}
		r.all = append(r.all, w.Name)
	}
	r.embedW = weightNames(r.model.EmbedWeights())
	r.headW = weightNames(r.model.HeadWeights())
	r.layerW = make([][]string, r.spec.Layers)
	for i := range r.layerW {
		r.layerW[i] = weightNames(r.heldSpecs(r.model.LayerWeights(i)))
	}
	r.all = r.withScales(r.all)
	r.embedW = r.withScales(r.embedW)
	r.headW = r.withScales(r.headW)
	for i := range r.layerW {
		r.layerW[i] = r.withScales(r.layerW[i])
	}
	return nil
}

// withScales inserts the scales input after each quantised or MXFP4
// weight.
func (r *Runner) withScales(names []string) []string {
	out := make([]string, 0, len(names))
	for _, n := range names {
		out = append(out, n)
		for _, suffix := range auxSuffixes {
			if _, ok := r.weights[n+suffix]; ok {
				out = append(out, n+suffix)
			}
		}
	}
	return out
}

// loadWeight holds one weight as the comment at the top of this file says.
func (r *Runner) loadWeight(l *lm.Loaded, w lm.WeightSpec) error {
	h := r.holding()
	if r.sharedUpload() {
		switch l.HeldForm(h, w.Name) {
		case lm.FormMXFP4:
			return r.holdMXFP4(l, w)
		case lm.FormFP8:
			lay, _ := l.StoredFP8(w.Name)
			err := r.holdFP8(l, w, lay)
			if !lm.IsFP8NaN(err) {
				return err
			}
			// NaN bytes: decoded below, where they are reported as non-finite.
		case lm.FormInt4Groups:
			lay, _ := l.StoredInt4Groups(w.Name)
			err := r.holdInt4Groups(l, w, lay)
			if !lm.IsFP8NaN(err) {
				return err
			}
			// NVFP4 experts' NaN scales: decoded below, as FP8's NaN bytes.
		case lm.FormInt8Groups:
			group, _ := l.StoredInt8Groups(w.Name)
			return r.holdInt8Groups(l, w, group)
		case lm.FormNVFP4:
			err := r.holdNVFP4(l, w)
			if !lm.IsFP8NaN(err) {
				return err
			}
			// NaN scale bytes: decoded below, as FP8's NaN bytes.
		}
	}
	if h.Quantized(w) {
		return r.quantizeWeight(l, w)
	}
	if h.Int4(w) {
		return r.quantizeInt4(l, w)
	}
	matrix := w.Matmul && len(w.Shape) == 2
	held := r.opts.DType
	switch {
	case w.Matmul:
		held = lm.HeldDType(l.StoredDType(w.Name), h.Compute, h.Narrow)
	case w.F32:
		held = dtypes.Float32
		if r.keepF32 == nil {
			r.keepF32 = map[string]bool{}
		}
		r.keepF32[w.Name] = true
	}
	if matrix {
		if b := r.layout(w.Shape[0], w.Shape[1]); b != nil {
			plain, err := l.Tensor(w.Name, held)
			if err != nil {
				return err
			}
			defer plain.FinalizeAll()
			t, err := r.upload(shapes.Make(held, b.J, b.P, b.Rows, b.C), func(flat any) error {
				plain.MustConstFlatData(func(src any) { blockInto(flat, src, b) })
				return nil
			})
			r.weights[w.Name] = t
			return err
		}
	}
	t, err := r.upload(shapes.Make(held, w.Shape...), func(flat any) error { return l.DecodeInto(w.Name, flat) })
	r.weights[w.Name] = t
	return err
}

// holdMXFP4 holds a weight the checkpoint stores in MXFP4 as stored:
// its blocks u8 [..., out, in/32, 16] under its name and its scales u8
// [..., out, in/32] under name+mxfp4Suffix; the graph decodes them
// (nn.DequantizeMXFP4), which the backend multiplies in place.
func (r *Runner) holdMXFP4(l *lm.Loaded, w lm.WeightSpec) error {
	rk := len(w.Shape)
	lead, in := w.Shape[:rk-1], w.Shape[rk-1]
	bShape := shapes.Make(dtypes.Uint8, append(slices.Clone(lead), in/32, 16)...)
	sShape := shapes.Make(dtypes.Uint8, append(slices.Clone(lead), in/32)...)
	return r.sharedPair(w.Name, mxfp4Suffix, bShape, sShape, func(blocks, scales any) error {
		return l.MXFP4Into(w.Name, blocks.([]uint8), scales.([]uint8))
	})
}

// holdFP8 holds a weight the checkpoint stores as FP8 E4M3 as stored: its
// bytes u8 [out, in] under its name and its scales f32 [⌈out/b0⌉,
// ⌈in/b1⌉] (lay) under name+fp8ScaleSuffix; the graph decodes them
// (nn.DequantizeFP8 with the weight's block, kept in fp8Blocks), which the
// backend multiplies in place.
func (r *Runner) holdFP8(l *lm.Loaded, w lm.WeightSpec, lay lm.FP8Layout) error {
	err := r.sharedPair(w.Name, fp8ScaleSuffix, shapes.Make(dtypes.Uint8, w.Shape...), shapes.Make(dtypes.Float32, lay.Scales...),
		func(bytes, scales any) error { return l.FP8Into(w.Name, bytes.([]uint8), scales.([]float32)) })
	if err == nil {
		if r.fp8Blocks == nil {
			r.fp8Blocks = map[string][2]int{}
		}
		r.fp8Blocks[w.Name] = [2]int{lay.B0, lay.B1}
	}
	return err
}

// holdInt4Groups holds a weight a GPTQ, AWQ or compressed-tensors
// checkpoint stores as 4-bit integers (lm.Loaded.StoredInt4Groups) as
// grouped int4: its packed values u8 [..., out, in/32, 16] under its name,
// its scales f32 [..., out, in/group] under name+int4GScales, with mins f32
// [..., in/group, out] under name+int4GMins and, permuted (activation
// order, matrices only), each column's place int32 [in] under
// name+int4GInv; the graph decodes them (nn.DequantizeInt4Groups, then
// nn.GatherColumns where permuted), which the backend multiplies in place
// (an expert stack's chosen experts, gathered by nn.PairDot, in its
// grouped expert node).
func (r *Runner) holdInt4Groups(l *lm.Loaded, w lm.WeightSpec, lay lm.Int4GroupsLayout) error {
	rk := len(w.Shape)
	stack, out, in := w.Shape[:rk-2], w.Shape[rk-2], w.Shape[rk-1]
	dims := func(d ...int) []int { return append(slices.Clone(stack), d...) }
	scales := int4GScales
	if lay.FP4 {
		scales = fp4GHalf // NVFP4 experts' half-scales (nn.DequantizeFP4Groups)
	}
	parts := []sharedPart{
		{"", shapes.Make(dtypes.Uint8, dims(out, in/32, 16)...)},
		{scales, shapes.Make(dtypes.Float32, dims(out, in/lay.Group)...)},
	}
	if lay.Mins {
		parts = append(parts, sharedPart{int4GMins, shapes.Make(dtypes.Float32, dims(in/lay.Group, out)...)})
	}
	if lay.Permuted {
		parts = append(parts, sharedPart{int4GInv, shapes.Make(dtypes.Int32, in)})
	}
	return r.sharedParts(w.Name, parts, func(flat []any) error {
		var m []float32
		var inv []int32
		if lay.Mins {
			m = flat[2].([]float32)
		}
		if lay.Permuted {
			inv = flat[len(flat)-1].([]int32)
		}
		return l.Int4GroupsInto(w.Name, flat[0].([]uint8), flat[1].([]float32), m, inv)
	})
}

// holdInt8Groups holds a weight a checkpoint stores as symmetric 8-bit
// integers (lm.Loaded.StoredInt8Groups: a matrix, or an expert stack of
// such parts) as --quantize int8 holds its own: int8 [..., out, in/group,
// group] and f32 scales [..., out, in/group, 1] under name+scalesSuffix
// (nn.DequantizeInt8; nn.PairDot gathers a stack's chosen experts).
func (r *Runner) holdInt8Groups(l *lm.Loaded, w lm.WeightSpec, group int) error {
	rk := len(w.Shape)
	lead, in := w.Shape[:rk-1], w.Shape[rk-1]
	return r.sharedPair(w.Name, scalesSuffix, shapes.Make(dtypes.Int8, append(slices.Clone(lead), in/group, group)...),
		shapes.Make(dtypes.Float32, append(slices.Clone(lead), in/group, 1)...),
		func(q, scales any) error { return l.Int8GroupsInto(w.Name, q.([]int8), scales.([]float32)) })
}

// holdNVFP4 holds a matrix a compressed-tensors checkpoint stores as
// NVFP4 (lm.Loaded.StoredNVFP4) as stored: its packed codes u8 [out,
// in/32, 16] under its name, its E4M3 scale bytes u8 [out, in/16] under
// name+nvfp4Codes and its table of half-scales f32 [256, 1] under
// name+nvfp4Half; the graph decodes them (nn.DequantizeNVFP4), which the
// backend multiplies in place.
func (r *Runner) holdNVFP4(l *lm.Loaded, w lm.WeightSpec) error {
	if parts, ok := l.StoredNVFP4Stack(w.Name); ok {
		return r.holdNVFP4Stack(l, w, parts)
	}
	out, in := w.Shape[0], w.Shape[1]
	return r.sharedParts(w.Name, []sharedPart{
		{"", shapes.Make(dtypes.Uint8, out, in/32, 16)},
		{nvfp4Codes, shapes.Make(dtypes.Uint8, out, in/lm.NVFP4Group)},
		{nvfp4Half, shapes.Make(dtypes.Float32, 256, 1)},
	}, func(flat []any) error {
		return l.NVFP4Into(w.Name, flat[0].([]uint8), flat[1].([]uint8), flat[2].([]float32))
	})
}

// holdNVFP4Stack holds an expert stack [E, out, in] whose parts a
// compressed-tensors checkpoint stores as NVFP4 (lm.Loaded.StoredNVFP4Stack,
// parts a matrix) as they are stored: the packed codes u8 [E, out, in/32,
// 16] under its name, the scale bytes u8 [E, out, in/16] under
// name+nvfp4Codes and each part's table of half-scales f32 [E, parts,
// 256] under name+nvfp4Half; the graph decodes them
// (nn.DequantizeNVFP4Tables), and the backend multiplies the chosen
// experts' parts in place (nn.PairDot, its grouped expert node).
func (r *Runner) holdNVFP4Stack(l *lm.Loaded, w lm.WeightSpec, parts int) error {
	e, out, in := w.Shape[0], w.Shape[1], w.Shape[2]
	return r.sharedParts(w.Name, []sharedPart{
		{"", shapes.Make(dtypes.Uint8, e, out, in/32, 16)},
		{nvfp4Codes, shapes.Make(dtypes.Uint8, e, out, in/lm.NVFP4Group)},
		{nvfp4Half, shapes.Make(dtypes.Float32, e, parts, 256)},
	}, func(flat []any) error {
		return l.NVFP4StackInto(w.Name, flat[0].([]uint8), flat[1].([]uint8), flat[2].([]float32))
	})
}

// sharedPair holds a weight of two parts in the backend's shared buffers
// (sharedParts): main under name, aux under name+suffix.
func (r *Runner) sharedPair(name, suffix string, main, aux shapes.Shape, fill func(main, aux any) error) error {
	return r.sharedParts(name, []sharedPart{{"", main}, {suffix, aux}}, func(flat []any) error { return fill(flat[0], flat[1]) })
}

// sharedPart is one part of a weight held in shared buffers: its input's
// name suffix ("" for the weight's own name) and shape.
type sharedPart struct {
	suffix string
	shape  shapes.Shape
}

// sharedParts holds a weight of several parts in the backend's shared
// buffers (sharedUpload), each under name+suffix, all filled by fill in
// the memory the backend computes from (flat data in the parts' order).
// On an error no part is kept.
func (r *Runner) sharedParts(name string, parts []sharedPart, fill func(flat []any) error) error {
	bufs := make([]backends.Buffer, 0, len(parts))
	flats := make([]any, 0, len(parts))
	ts := make([]*tensors.Tensor, 0, len(parts))
	fail := func(err error) error {
		for _, t := range ts {
			t.FinalizeAll()
		}
		for _, b := range bufs[len(ts):] {
			_ = r.backend.BufferFinalize(b)
		}
		return err
	}
	for _, p := range parts {
		b, flat, err := r.newWeightBuffer(p.shape)
		if err != nil {
			return fail(err)
		}
		bufs, flats = append(bufs, b), append(flats, flat)
	}
	if err := fill(flats); err != nil {
		return fail(err)
	}
	for _, b := range bufs {
		t, err := tensors.FromBuffer(r.backend, b)
		if err != nil {
			return fail(err)
		}
		ts = append(ts, t)
	}
	for i, p := range parts {
		r.weights[name+p.suffix] = ts[i]
	}
	return nil
}

// quantizeWeight holds a [..., out, in] weight (a matrix or a stack of
// them) as int8 [..., out, in/G, G] and its scales [..., out, in/G, 1],
// quantising blocks of rows as they are decoded (about 16 MiB of f32 at a
// time), so that no f32 copy of the whole weight is ever made.
func (r *Runner) quantizeWeight(l *lm.Loaded, w lm.WeightSpec) error {
	lead := w.Shape[:len(w.Shape)-1]
	in := w.Shape[len(w.Shape)-1]
	g := lm.QuantGroupOf(in)
	ng := in / g
	rows := max(1, quantBlock/max(in, 1))
	fill := func(q []int8, scales []float32) error {
		return l.DecodeBlocks(w.Name, rows*in, func(at int, vals []float32) {
			bq, bs := kernels.QuantizeInt8(vals, len(vals)/in, in, g)
			row := at / in
			copy(q[row*in:], bq)
			copy(scales[row*ng:], bs)
		})
	}
	qShape := shapes.Make(dtypes.Int8, append(slices.Clone(lead), ng, g)...)
	sShape := shapes.Make(dtypes.Float32, append(slices.Clone(lead), ng, 1)...)
	if !r.sharedUpload() {
		// Quantise into host slices, then upload them.
		q, scales := make([]int8, qShape.Size()), make([]float32, sShape.Size())
		if err := fill(q, scales); err != nil {
			return err
		}
		qt, err := r.upload(qShape, func(flat any) error { copy(flat.([]int8), q); return nil })
		if err != nil {
			return err
		}
		r.weights[w.Name] = qt
		st, err := r.upload(sShape, func(flat any) error { copy(flat.([]float32), scales); return nil })
		r.weights[w.Name+scalesSuffix] = st
		return err
	}
	return r.sharedPair(w.Name, scalesSuffix, qShape, sShape, func(q, scales any) error {
		return fill(q.([]int8), scales.([]float32))
	})
}

// quantizeInt4 holds a [..., out, in] weight (a matrix or a stack of
// them) as int4 (kernels.QuantizeInt4): packed values u8 [..., out,
// in/32, 16] under its name, block codes u8 [..., out, in/32] and one
// scale table f32 [256, 1] for the whole weight under the suffixed names.
// The weight is decoded twice, a block of rows at a time (about 16 MiB of
// f32): once for the range of its blocks' magnitudes, which fixes the
// table, once to quantise, so that no f32 copy of the whole weight is
// ever made.
func (r *Runner) quantizeInt4(l *lm.Loaded, w lm.WeightSpec) error {
	lead, in := w.Shape[:len(w.Shape)-1], w.Shape[len(w.Shape)-1]
	rows := max(1, quantBlock/in)
	var lo, hi float32
	err := l.DecodeBlocks(w.Name, rows*in, func(_ int, vals []float32) {
		blo, bhi := kernels.Int4Range(vals, len(vals)/in, in)
		lo, hi = kernels.MergeInt4Range(lo, hi, blo, bhi)
	})
	if err != nil {
		return err
	}
	table := kernels.Int4Table(lo, hi)
	nb := in / kernels.Int4Block
	fill := func(packed, codes []uint8) error {
		return l.DecodeBlocks(w.Name, rows*in, func(at int, vals []float32) {
			bp, bc := kernels.QuantizeInt4(vals, len(vals)/in, in, table)
			row := at / in
			copy(packed[row*in/2:], bp)
			copy(codes[row*nb:], bc)
		})
	}
	pShape := shapes.Make(dtypes.Uint8, append(slices.Clone(lead), nb, 16)...)
	cShape := shapes.Make(dtypes.Uint8, append(slices.Clone(lead), nb)...)
	var packed, codes []uint8
	if !r.sharedUpload() {
		packed, codes = make([]uint8, pShape.Size()), make([]uint8, cShape.Size())
		if err := fill(packed, codes); err != nil {
			return err
		}
	}
	pt, err := r.upload(pShape, func(flat any) error {
		if packed == nil {
			packed = flat.([]uint8)
			codes = make([]uint8, cShape.Size())
			return fill(packed, codes)
		}
		copy(flat.([]uint8), packed)
		return nil
	})
	if err != nil {
		return err
	}
	r.weights[w.Name] = pt
	ct, err := r.upload(cShape, func(flat any) error { copy(flat.([]uint8), codes); return nil })
	if err != nil {
		return err
	}
	r.weights[w.Name+int4CodesSuffix] = ct
	tt, err := r.upload(shapes.Make(dtypes.Float32, 256, 1), func(flat any) error { copy(flat.([]float32), table); return nil })
	r.weights[w.Name+int4TableSuffix] = tt
	return err
}

// quantBlock is the number of weight elements quantizeWeight decodes to
// f32 at a time (16 MiB).
var quantBlock = 4 << 20

// sharedUpload reports whether upload hands out the backend's own memory.
func (r *Runner) sharedUpload() bool { return r.tp == nil && r.backend.HasSharedBuffers() }

// weightBufferer is a backend with shared buffers meant for weights
// (tpu/cpu's packs them for huge pages).
type weightBufferer interface {
	NewWeightBuffer(deviceNum backends.DeviceNum, shape shapes.Shape) (backends.Buffer, any, error)
}

// newWeightBuffer is the backend's shared buffer for a weight: its
// NewWeightBuffer where it has one, else NewSharedBuffer.
func (r *Runner) newWeightBuffer(shape shapes.Shape) (backends.Buffer, any, error) {
	if wb, ok := r.backend.(weightBufferer); ok {
		return wb.NewWeightBuffer(0, shape)
	}
	return r.backend.NewSharedBuffer(0, shape)
}

// upload makes a weight tensor of shape filled by fill, held once: in a
// shared buffer of the backend when it has them (fill writes the memory
// the backend computes from), else on the host, uploaded to the device
// and the host copy dropped. With several devices (Options.TP/DP) the
// tensor stays on the host: it is split there (shardWeights).
func (r *Runner) upload(shape shapes.Shape, fill func(flat any) error) (*tensors.Tensor, error) {
	if r.sharedUpload() {
		buf, flat, err := r.newWeightBuffer(shape)
		if err != nil {
			return nil, err
		}
		if err := fill(flat); err != nil {
			_ = r.backend.BufferFinalize(buf)
			return nil, err
		}
		return tensors.FromBuffer(r.backend, buf)
	}
	t := tensors.FromShape(shape)
	var err error
	t.MustMutableFlatData(func(flat any) { err = fill(flat) })
	if err != nil {
		t.FinalizeAll()
		return nil, err
	}
	if r.tp == nil {
		if err := t.MaterializeOnDevice(r.backend, false, 0); err != nil {
			t.FinalizeAll()
			return nil, err
		}
		t.FinalizeLocal()
	}
	return t, nil
}

// params maps weight names to the graph's parameter nodes, as the model
// reads them: a weight held narrower than the compute dtype is converted
// where it is read (the backend fuses the conversion into its matmul,
// nn.Embedding gathers first), a quantised one is dequantised with its
// scales (nn.DequantizeInt8).
func (r *Runner) params(names []string, nodes []*graph.Node) *lm.Params {
	m := make(map[string]*graph.Node, len(names))
	for i, n := range names {
		m[n] = nodes[i]
	}
	for i, n := range names {
		if isAux(n) {
			delete(m, n)
			continue
		}
		x := nodes[i]
		if s, ok := m[n+scalesSuffix]; ok {
			m[n] = nn.DequantizeInt8(x, s, r.opts.DType)
			continue
		}
		if c, ok := m[n+nvfp4Codes]; ok {
			if h := m[n+nvfp4Half]; h.Rank() == 3 { // an expert stack, a table per part
				m[n] = nn.DequantizeNVFP4Tables(x, c, h, r.opts.DType)
			} else {
				m[n] = nn.DequantizeNVFP4(x, c, h, r.opts.DType)
			}
			continue
		}
		if c, ok := m[n+int4CodesSuffix]; ok {
			m[n] = nn.DequantizeInt4(x, c, m[n+int4TableSuffix], r.opts.DType)
			continue
		}
		if s, ok := m[n+mxfp4Suffix]; ok {
			m[n] = nn.DequantizeMXFP4(x, s, r.opts.DType)
			continue
		}
		if s, ok := m[n+fp4GHalf]; ok {
			m[n] = nn.DequantizeFP4Groups(x, s, r.opts.DType)
			continue
		}
		if s, ok := m[n+int4GScales]; ok {
			inv, perm := m[n+int4GInv]
			if !perm {
				m[n] = nn.DequantizeInt4Groups(x, s, m[n+int4GMins], r.opts.DType)
				continue
			}
			// Columns gathered from the f32 form, then rounded: the
			// same values, in the form a backend can read as held in
			// any compute dtype (tpu/cpu's weightDot).
			m[n] = nn.GatherColumns(nn.DequantizeInt4Groups(x, s, m[n+int4GMins], dtypes.Float32), inv)
			if r.opts.DType != dtypes.Float32 {
				m[n] = graph.ConvertDType(m[n], r.opts.DType)
			}
			continue
		}
		if s, ok := m[n+fp8ScaleSuffix]; ok {
			b := r.fp8Blocks[n]
			m[n] = nn.DequantizeFP8(x, s, b[0], b[1], r.opts.DType)
			continue
		}
		if x.DType() != r.opts.DType && x.DType().IsFloat() && !r.keepF32[n] {
			m[n] = graph.ConvertDType(x, r.opts.DType)
		}
	}
	return lm.NewParams(m)
}
