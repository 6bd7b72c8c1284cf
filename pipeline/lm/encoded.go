package lm

import (
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/gomlx/gomlx/pkg/core/dtypes/bfloat16"
	"github.com/x448/float16"

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/loader/quant"
	"github.com/tputool/tputool/loader/safetensors"
)

// Weights a checkpoint stores in another form than their held one
// (WeightSpec.Transposed, WeightSpec.MXFP4) are decoded here, into the
// held layout [..., out, in], in pieces: the process never holds more
// than one piece of float32 (about 16 MiB, or one matrix of a transposed
// stack) beside the destination, and the pages of the mapping are
// released piece by piece as for plain weights.

// encodedPiece is the number of values decodeEncoded converts at a time.
const encodedPiece = 4 << 20

// emitDequantized hands fn the matrix [out, in] whose value at (o, i) is
// value(o, i), in blocks of encodedPiece values (whole rows), counting
// its non-finite values into nf: the loop of the checkpoint formats that
// dequantise value by value (packed.go, compressed.go).
func emitDequantized(nf *safetensors.NonFiniteTensor, out, in int, value func(o, i int) float32, fn func(at int, vals []float32)) {
	step := max(1, encodedPiece/in)
	buf := make([]float32, min(step, out)*in)
	for row := 0; row < out; row += step {
		n := min(step, out-row)
		for r := range n {
			o := row + r
			dst := buf[r*in : (r+1)*in]
			for i := range dst {
				v := value(o, i)
				if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
					if nf.Count == 0 {
						nf.First = int64(o*in + i)
					}
					nf.Count++
				}
				dst[i] = v
			}
		}
		fn(row*in, buf[:n*in])
	}
}

// specOrPart is the WeightSpec of name, a model weight or a part of an
// assembled one.
func (l *Loaded) specOrPart(name string) (WeightSpec, bool) {
	if w, ok := l.spec(name); ok {
		return w, true
	}
	if _, part := l.partOf[name]; part { // (spec built the index)
		return l.partSpec(name), true
	}
	return WeightSpec{}, false
}

// encoding is how the checkpoint stores weight name (a model weight or a
// part of one) when it stores it encoded: "mxfp4", "fp8", "packed",
// "compressed", "bitnet", "transposed", "normalized" (a float matrix
// whose rows are read scaled to unit length, WeightSpec.RowNormalized),
// or "" (plain, or not a model weight).
func (l *Loaded) encoding(name string) (WeightSpec, string) {
	// A part of an assembled stack (an expert a checkpoint stores on its
	// own) may be encoded as a weight of its own is.
	w, ok := l.specOrPart(name)
	if !ok || len(w.Shape) < 2 {
		return w, ""
	}
	switch {
	case w.mxfp4(l.ckpt.Has):
		return w, "mxfp4"
	case w.fp8(l.Model.Spec(), l.ckpt.Has):
		return w, "fp8"
	case w.packed(l.Model.Spec(), l.ckpt.Has):
		return w, "packed"
	case w.compressed(l.Model.Spec(), l.ckpt.Has):
		return w, "compressed"
	case w.bitnet(l.Model.Spec(), l.ckpt.Has):
		return w, "bitnet"
	case w.Transposed && l.ckpt.Has(w.Name):
		return w, "transposed"
	case w.RowNormalized && l.ckpt.Has(w.Name) && len(w.Shape) == 2:
		return w, "normalized"
	}
	return w, ""
}

// StoredMXFP4 reports whether the checkpoint stores weight name in MXFP4
// (WeightSpec.MXFP4).
func (l *Loaded) StoredMXFP4(name string) bool {
	_, how := l.encoding(name)
	return how == "mxfp4"
}

// MXFP4Into copies the blocks and scales of a weight the checkpoint
// stores in MXFP4 (StoredMXFP4) into blocks [..., out, in/2] and scales
// [..., out, in/32] as stored, releasing the mapping's pages as it goes.
func (l *Loaded) MXFP4Into(name string, blocks, scales []byte) error {
	w, how := l.encoding(name)
	if how != "mxfp4" {
		return fmt.Errorf("tensor %q: the checkpoint does not store it in MXFP4", name)
	}
	n := int64(elements(w.Shape))
	if int64(len(blocks)) != n/2 || int64(len(scales)) != n/quant.MXFP4Block {
		return fmt.Errorf("tensor %q: %d values need %d bytes of blocks and %d scales, got %d and %d", name, n, n/2, n/quant.MXFP4Block, len(blocks), len(scales))
	}
	if err := l.copyReleasing(name+MXFP4Blocks, safetensors.U8, blocks); err != nil {
		return err
	}
	return l.copyReleasing(name+MXFP4Scales, safetensors.U8, scales)
}

// copyReleasing copies tensor name, stored as dt, into dst as its bytes
// are, releasing the mapping's pages a piece at a time.
func (l *Loaded) copyReleasing(name string, dt safetensors.DType, dst []byte) error {
	raw, err := l.rawOf(name, dt, int64(len(dst)))
	if err != nil {
		return err
	}
	for off := 0; off < len(raw); off += releasePiece {
		end := min(off+releasePiece, len(raw))
		copy(dst[off:end], raw[off:end])
		l.ckpt.ReleaseRange(name, int64(off), int64(end))
	}
	return nil
}

// decodeEncoded converts an encoded weight to float32 in pieces of whole
// rows, in the held order, calling fn with each piece's first element
// index and its values (a buffer reused between calls).
func (l *Loaded) decodeEncoded(w WeightSpec, how string, fn func(at int, vals []float32)) error {
	r := len(w.Shape)
	out, in := w.Shape[r-2], w.Shape[r-1]
	rows := elements(w.Shape[:r-1]) // every matrix's rows, one after the other
	nf := safetensors.NonFiniteTensor{Name: w.Name, First: -1}
	defer func() {
		if nf.Count > 0 && l.OnNonFinite != nil {
			l.OnNonFinite(nf)
		}
	}()
	switch how {
	case "packed":
		return l.decodePacked(w, fn)
	case "compressed":
		return l.decodeCompressed(w, fn)
	case "bitnet":
		return l.decodeBitNet(w, fn)
	case "mxfp4":
		if in%quant.MXFP4Block != 0 {
			return fmt.Errorf("tensor %q: MXFP4 needs an input width that is a multiple of %d, got %d", w.Name, quant.MXFP4Block, in)
		}
		bName, sName := w.Name+MXFP4Blocks, w.Name+MXFP4Scales
		blocks, err := l.rawOf(bName, safetensors.U8, int64(rows)*int64(in/2))
		if err != nil {
			return err
		}
		scales, err := l.rawOf(sName, safetensors.U8, int64(rows)*int64(in/quant.MXFP4Block))
		if err != nil {
			return err
		}
		nf.DType, nf.Elements = safetensors.U8, int64(rows)*int64(in)
		step := max(1, encodedPiece/in)
		buf := make([]float32, min(step, rows)*in)
		sb := in / quant.MXFP4Block // scales per row
		for row := 0; row < rows; row += step {
			n := min(step, rows-row)
			s := scales[row*sb : (row+n)*sb]
			quant.DecodeMXFP4(buf[:n*in], blocks[row*in/2:(row+n)*in/2], s)
			if i := slices.Index(s, 255); i >= 0 { // 2^128: not finite in float32
				if nf.Count == 0 {
					nf.First = int64(row*in + i*quant.MXFP4Block)
				}
				for _, v := range s {
					if v == 255 {
						nf.Count += quant.MXFP4Block
					}
				}
			}
			fn(row*in, buf[:n*in])
			l.ckpt.ReleaseRange(bName, int64(row*in/2), int64((row+n)*in/2))
			l.ckpt.ReleaseRange(sName, int64(row*sb), int64((row+n)*sb))
		}
		return nil
	case "fp8":
		info, _ := l.ckpt.Info(w.Name)
		raw, err := l.rawOf(w.Name, info.DType, int64(rows)*int64(in))
		if err != nil {
			return err
		}
		spec := l.Model.Spec()
		sShape, _ := l.ckpt.Shape(w.Name + fp8ScaleSuffix)
		if err := checkFP8Scales(w.Name, sShape, w.fp8ScaleShape(spec)); err != nil {
			return err
		}
		scales, err := l.ckpt.Float32(w.Name + fp8ScaleSuffix)
		if err != nil {
			return err
		}
		b := w.fp8BlockOf(spec)
		b0, b1, sc := b[0], b[1], (in+b[1]-1)/b[1]
		nf.DType, nf.Elements = info.DType, int64(rows)*int64(in)
		step := max(1, encodedPiece/in)
		buf := make([]float32, min(step, rows)*in)
		for row := 0; row < rows; row += step {
			n := min(step, rows-row)
			piece := raw[row*in : (row+n)*in]
			count, first := safetensors.ConvertChecked(info.DType, piece, func(at int, p []byte) {
				safetensors.DecodeFloat32(buf[at:], info.DType, p)
			})
			if count > 0 {
				if nf.Count == 0 {
					nf.First = int64(row*in) + first
				}
				nf.Count += count
			}
			for r := 0; r < n; r++ {
				srow := scales[((row+r)/b0)*sc:]
				v := buf[r*in : (r+1)*in]
				for j := range v {
					v[j] *= srow[j/b1]
				}
			}
			fn(row*in, buf[:n*in])
			l.ckpt.ReleaseRange(w.Name, int64(row*in), int64((row+n)*in))
		}
		return nil
	case "normalized":
		info, _ := l.ckpt.Info(w.Name)
		if !info.DType.IsFloat() {
			return errs.Unsupportedf("tensor %q: stored as %s, not a float dtype", w.Name, info.DType)
		}
		raw, err := l.rawOf(w.Name, info.DType, int64(rows)*int64(in))
		if err != nil {
			return err
		}
		size := info.DType.Size()
		nf.DType, nf.Elements = info.DType, int64(rows)*int64(in)
		step := max(1, encodedPiece/in)
		buf := make([]float32, min(step, rows)*in)
		for row := 0; row < rows; row += step {
			n := min(step, rows-row)
			count, first := safetensors.ConvertChecked(info.DType, raw[row*in*size:(row+n)*in*size], func(at int, p []byte) {
				safetensors.DecodeFloat32(buf[at:], info.DType, p)
			})
			if count > 0 {
				if nf.Count == 0 {
					nf.First = int64(row*in) + first
				}
				nf.Count += count
			}
			for r := range n {
				normalizeRow(buf[r*in : (r+1)*in])
			}
			fn(row*in, buf[:n*in])
			l.ckpt.ReleaseRange(w.Name, int64(row*in*size), int64((row+n)*in*size))
		}
		return nil
	case "transposed":
		info, _ := l.ckpt.Info(w.Name)
		if !info.DType.IsFloat() {
			return errs.Unsupportedf("tensor %q: stored as %s, not a float dtype", w.Name, info.DType)
		}
		size := info.DType.Size()
		raw, err := l.rawOf(w.Name, info.DType, int64(rows)*int64(in))
		if err != nil {
			return err
		}
		nf.DType, nf.Elements = info.DType, int64(rows)*int64(in)
		stored := make([]float32, out*in) // one matrix [in, out]
		buf := make([]float32, out*in)
		for m := 0; m < rows/out; m++ {
			lo := m * out * in * size
			piece := raw[lo : lo+out*in*size]
			count, first := safetensors.ConvertChecked(info.DType, piece, func(at int, p []byte) {
				safetensors.DecodeFloat32(stored[at:], info.DType, p)
			})
			if count > 0 {
				if nf.Count == 0 {
					f := int(first) // index in the stored [in, out] matrix
					nf.First = int64(m*out*in + (f%out)*in + f/out)
				}
				nf.Count += count
			}
			transpose(buf, stored, in, out)
			fn(m*out*in, buf)
			l.ckpt.ReleaseRange(w.Name, int64(lo), int64(lo+out*in*size))
		}
		return nil
	}
	return fmt.Errorf("tensor %q: unknown encoding %q", w.Name, how)
}

// transpose writes src [rows, cols] transposed into dst [cols, rows]: in
// bands of 32 source rows, each column's 32 values written contiguously.
// A band touches 32 source pages and one destination row at a time, so
// it stays within the TLB, where a row-by-row copy touches a page per
// element written (on this machine, 5120x16384 f32: 0.9 s row by row or
// in 64x64 tiles, 0.34 s in bands of 32).
func transpose[T any](dst, src []T, rows, cols int) {
	const band = 32
	for r0 := 0; r0 < rows; r0 += band {
		r1 := min(r0+band, rows)
		for c := 0; c < cols; c++ {
			d := dst[c*rows+r0 : c*rows+r1]
			for r := range d {
				d[r] = src[(r0+r)*cols+c]
			}
		}
	}
}

// rawOf is the bytes of checkpoint tensor name, which must be stored as
// dtype and hold n elements.
func (l *Loaded) rawOf(name string, dtype safetensors.DType, n int64) ([]byte, error) {
	info, ok := l.ckpt.Info(name)
	if !ok {
		return nil, fmt.Errorf("checkpoint %s has no tensor %q", l.Dir, name)
	}
	if info.DType != dtype || info.NumElements() != n {
		return nil, fmt.Errorf("tensor %q: %s with %d elements, want %s with %d", name, info.DType, info.NumElements(), dtype, n)
	}
	raw, err := l.ckpt.Raw(name)
	if err != nil {
		return nil, err
	}
	if int64(len(raw)) != n*int64(dtype.Size()) {
		return nil, fmt.Errorf("tensor %q: %d bytes do not hold %d %s elements", name, len(raw), n, dtype)
	}
	return raw, nil
}

// decodeEncodedInto decodes an encoded weight into flat (DecodeInto's
// destinations), rounding to bf16 and f16 to nearest even.
func (l *Loaded) decodeEncodedInto(w WeightSpec, how string, flat any) error {
	if n := flatLen(flat); n != elements(w.Shape) {
		if n == 0 {
			return errs.Unsupportedf("tensor %q: cannot decode into %T (want float32, bfloat16 or float16)", w.Name, flat)
		}
		return fmt.Errorf("tensor %q: %d elements, destination holds %d", w.Name, elements(w.Shape), n)
	}
	if how == "transposed" {
		if done, err := l.transposedInto(w, flat); done {
			return err
		}
	}
	return l.decodeEncoded(w, how, func(at int, vals []float32) {
		switch out := flat.(type) {
		case []float32:
			copy(out[at:], vals)
		case []bfloat16.BFloat16:
			for i, v := range vals {
				out[at+i] = bfloat16.BFloat16(safetensors.Float32ToBF16(v))
			}
		case []float16.Float16:
			for i, v := range vals {
				out[at+i] = float16.Float16(safetensors.Float32ToHalf(v))
			}
		}
	})
}

// FP8Layout is how an FP8 weight [out, in] is held as stored: its E4M3
// bytes and f32 scales [⌈out/B0⌉, ⌈in/B1⌉], one per block of B0 rows by
// B1 columns, so that W[o, i] = e4m3(byte) · scales[o/B0, i/B1].
type FP8Layout struct {
	B0, B1 int
	Scales []int
}

// StoredFP8 reports whether the checkpoint stores weight name as FP8 E4M3
// with scales an executor may hold it with, and how: block-wise fp8
// (quant_method "fp8", blocks of weight_block_size), fbgemm_fp8 and
// compressed-tensors float-quantized by tensor (one block), channel
// (blocks of one row), group (one row by group_size) or block, without
// activation order; a matrix that products read, not one the embedding
// gathers rows of (EmbedWeights; a tied head is one), or an expert stack
// whose parts are all so (storedFP8Stack). E5M2 weights are decoded.
func (l *Loaded) StoredFP8(name string) (FP8Layout, bool) {
	if lay, ok := l.storedFP8Stack(name); ok {
		return lay, true
	}
	w, how := l.encoding(name)
	var lay FP8Layout
	switch {
	case how == "fp8":
		b := w.fp8BlockOf(l.Model.Spec())
		lay = FP8Layout{B0: b[0], B1: b[1], Scales: []int{(w.Shape[0] + b[0] - 1) / b[0], (w.Shape[1] + b[1] - 1) / b[1]}}
	case how == "compressed" && l.Model.Spec().Compressed.ForWeight(name).Format == "float-quantized":
		p, _ := packedPrefix(name)
		if l.ckpt.Has(p + ctGIdx) {
			return FP8Layout{}, false
		}
		c := l.Model.Spec().Compressed.ForWeight(name)
		out, in := w.Shape[0], w.Shape[1]
		switch c.Strategy {
		case "tensor":
			lay = FP8Layout{B0: out, B1: in}
		case "channel":
			lay = FP8Layout{B0: 1, B1: in}
		case "group":
			lay = FP8Layout{B0: 1, B1: c.Group}
		case "block":
			lay = FP8Layout{B0: c.Block[0], B1: c.Block[1]}
		default:
			return FP8Layout{}, false
		}
		if lay.B0 <= 0 || lay.B1 <= 0 {
			return FP8Layout{}, false
		}
		lay.Scales = []int{(out + lay.B0 - 1) / lay.B0, (in + lay.B1 - 1) / lay.B1}
	default:
		return FP8Layout{}, false
	}
	if info, _ := l.ckpt.Info(name); info.DType != safetensors.F8E4M3 || l.gathered(name) {
		return FP8Layout{}, false
	}
	return lay, true
}

// errFP8NaN is FP8Into's refusal of a weight with NaN bytes.
var errFP8NaN = errors.New("NaN bytes")

// FP8Into copies the E4M3 bytes of a weight the checkpoint stores in FP8
// (StoredFP8) into w [out, in] as stored, releasing the mapping's pages as
// it goes, and its scales into scales (the layout's Scales, as f32). A
// weight holding NaN bytes (0x7F, 0xFF) is refused (IsFP8NaN): decoded, it
// is reported as non-finite instead.
func (l *Loaded) FP8Into(name string, w []byte, scales []float32) error {
	if _, ok := l.storedFP8Stack(name); ok {
		return l.fp8StackInto(name, w, scales)
	}
	lay, ok := l.StoredFP8(name)
	if !ok {
		return fmt.Errorf("tensor %q: the checkpoint does not store it in FP8 with scales tputool holds", name)
	}
	spec, how := l.encoding(name)
	if len(w) != elements(spec.Shape) {
		return fmt.Errorf("tensor %q: %d values, destination holds %d", name, elements(spec.Shape), len(w))
	}
	if len(scales) != lay.Scales[0]*lay.Scales[1] {
		return fmt.Errorf("tensor %q: %d scales, destination holds %d", name, lay.Scales[0]*lay.Scales[1], len(scales))
	}
	scaleName := name + fp8ScaleSuffix
	if how == "compressed" {
		p, _ := packedPrefix(name)
		scaleName = p + ctScale
	}
	sShape, _ := l.ckpt.Shape(scaleName)
	if elements(sShape) != len(scales) || how == "fp8" && checkFP8Scales(name, sShape, spec.fp8ScaleShape(l.Model.Spec())) != nil {
		return fmt.Errorf("tensor %q: scales %v, want %v", scaleName, sShape, lay.Scales)
	}
	if err := l.copyReleasing(name, safetensors.F8E4M3, w); err != nil {
		return err
	}
	if fp8NaNAt(w) >= 0 {
		return fmt.Errorf("tensor %q: %w", name, errFP8NaN)
	}
	s, err := l.ckpt.Float32(scaleName)
	if err != nil {
		return err
	}
	copy(scales, s)
	return nil
}

// storedFP8Stack is StoredFP8 of an expert stack [E, out, in] a
// checkpoint stores as one FP8 matrix per expert projection: every part
// held so, with one block whose rows each part fills whole (so that no
// block straddles two parts); the stack's scales are [E, ⌈out/B0⌉,
// ⌈in/B1⌉], its parts' one after the other.
func (l *Loaded) storedFP8Stack(name string) (FP8Layout, bool) {
	w, ok := l.assembledStack(name)
	if !ok {
		return FP8Layout{}, false
	}
	var lay FP8Layout
	for i, p := range w.Parts {
		pl, ok := l.StoredFP8(p.Name)
		if !ok || p.Shape[0]%pl.B0 != 0 || i > 0 && (pl.B0 != lay.B0 || pl.B1 != lay.B1) {
			return FP8Layout{}, false
		}
		lay.B0, lay.B1 = pl.B0, pl.B1
	}
	e, out, in := w.Shape[0], w.Shape[1], w.Shape[2]
	if out%lay.B0 != 0 {
		return FP8Layout{}, false
	}
	lay.Scales = []int{e, out / lay.B0, (in + lay.B1 - 1) / lay.B1}
	return lay, true
}

// fp8StackInto is FP8Into of an expert stack (storedFP8Stack): its parts'
// bytes and scales one after the other.
func (l *Loaded) fp8StackInto(name string, w []byte, scales []float32) error {
	spec, _ := l.spec(name)
	lay, _ := l.storedFP8Stack(name)
	if len(w) != elements(spec.Shape) || len(scales) != elements(lay.Scales) {
		return fmt.Errorf("tensor %q: %d values and %d scales, destination holds %d and %d", name, elements(spec.Shape), elements(lay.Scales), len(w), len(scales))
	}
	at, sat := 0, 0
	for _, p := range spec.Parts {
		pl, _ := l.StoredFP8(p.Name)
		n, ns := elements(p.Shape), elements(pl.Scales)
		if err := l.FP8Into(p.Name, w[at:at+n], scales[sat:sat+ns]); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		at, sat = at+n, sat+ns
	}
	return nil
}

// IsFP8NaN reports whether err is FP8Into's refusal of NaN bytes, or
// NVFP4Into's and Int4GroupsInto's of an NVFP4 weight's NaN scales.
func IsFP8NaN(err error) bool { return errors.Is(err, errFP8NaN) }

// fp8NaNAt is the index of the first E4M3 NaN byte of b (0x7f or 0xff),
// or -1.
func fp8NaNAt(b []byte) int {
	for i, c := range b {
		if c&0x7f == 0x7f {
			return i
		}
	}
	return -1
}

// normalizeRow scales v to unit L2 length as torch's F.normalize does,
// v / max(‖v‖, 1e-12), the sum of squares taken in float64.
func normalizeRow(v []float32) {
	ss := 0.0
	for _, x := range v {
		ss += float64(x) * float64(x)
	}
	d := max(math.Sqrt(ss), 1e-12)
	for i, x := range v {
		v[i] = float32(float64(x) / d)
	}
}
