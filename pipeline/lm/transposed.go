package lm

import (
	"unsafe"

	"github.com/gomlx/gomlx/pkg/core/dtypes/bfloat16"
	"github.com/x448/float16"

	"github.com/tputool/tputool/loader/safetensors"
)

// transposedInto decodes weight w, which the checkpoint stores with its
// last two axes swapped (encoding "transposed"), into flat when flat holds
// the stored dtype itself (bf16 into bfloat16, f16 into float16, f32
// into float32): each matrix's elements moved once, neither widened nor
// rounded, no buffer between (a DBRX expert's w2 of 10752x6144 bf16 would
// otherwise pass through two float32 copies of 264 MB). It reports false,
// having done nothing, when flat is another dtype, the host is not
// little-endian or the stored bytes are not aligned for their elements:
// decodeEncoded then converts. NaN and infinite values go to OnNonFinite
// as decodeEncoded reports them.
func (l *Loaded) transposedInto(w WeightSpec, flat any) (bool, error) {
	info, ok := l.ckpt.Info(w.Name)
	if !ok || !safetensors.HostLittleEndian() {
		return false, nil
	}
	switch flat.(type) {
	case []bfloat16.BFloat16:
		ok = info.DType == safetensors.BF16
	case []float16.Float16:
		ok = info.DType == safetensors.F16
	case []float32:
		ok = info.DType == safetensors.F32
	default:
		ok = false
	}
	if !ok {
		return false, nil
	}
	r := len(w.Shape)
	out, in := w.Shape[r-2], w.Shape[r-1]
	n := elements(w.Shape)
	raw, err := l.rawOf(w.Name, info.DType, int64(n))
	if err != nil {
		return true, err
	}
	size := info.DType.Size()
	if n == 0 || uintptr(unsafe.Pointer(&raw[0]))%uintptr(size) != 0 {
		return false, nil
	}
	nf := safetensors.NonFiniteTensor{Name: w.Name, DType: info.DType, Elements: int64(n), First: -1}
	for m := 0; m < n/(out*in); m++ {
		lo, hi := m*out*in, (m+1)*out*in
		piece := raw[lo*size : hi*size]
		if count, first := safetensors.NonFinite(info.DType, piece); count > 0 {
			if nf.Count == 0 {
				f := int(first) // index in the stored [in, out] matrix
				nf.First = int64(lo + (f%out)*in + f/out)
			}
			nf.Count += count
		}
		switch dst := flat.(type) {
		case []bfloat16.BFloat16:
			transpose(dst[lo:hi], unsafe.Slice((*bfloat16.BFloat16)(unsafe.Pointer(&piece[0])), out*in), in, out)
		case []float16.Float16:
			transpose(dst[lo:hi], unsafe.Slice((*float16.Float16)(unsafe.Pointer(&piece[0])), out*in), in, out)
		case []float32:
			transpose(dst[lo:hi], unsafe.Slice((*float32)(unsafe.Pointer(&piece[0])), out*in), in, out)
		}
		l.ckpt.ReleaseRange(w.Name, int64(lo*size), int64(hi*size))
	}
	if nf.Count > 0 && l.OnNonFinite != nil {
		l.OnNonFinite(nf)
	}
	return true, nil
}
