package safetensors

import (
	"encoding/binary"
	"fmt"
	"math"
	"unsafe"
)

// DType is a safetensors element type, spelled as in the file header.
type DType string

// The dtypes tputool reads. Others (F8_E8M0, U16, C64, ...) are rejected with
// a clear error when a header names them.
const (
	F64    DType = "F64"
	F32    DType = "F32"
	F16    DType = "F16"
	BF16   DType = "BF16"
	F8E4M3 DType = "F8_E4M3"
	F8E5M2 DType = "F8_E5M2"
	I64    DType = "I64"
	I32    DType = "I32"
	I16    DType = "I16"
	I8     DType = "I8"
	U8     DType = "U8"
	BOOL   DType = "BOOL"
)

var dtypeSizes = map[DType]int{
	F64: 8, F32: 4, F16: 2, BF16: 2, F8E4M3: 1, F8E5M2: 1,
	I64: 8, I32: 4, I16: 2, I8: 1, U8: 1, BOOL: 1,
}

// Size returns the size of one element in bytes, or 0 for an unknown dtype.
func (d DType) Size() int { return dtypeSizes[d] }

// Valid reports whether tputool knows the dtype.
func (d DType) Valid() bool { return d.Size() > 0 }

// IsFloat reports whether the dtype is a floating-point type.
func (d DType) IsFloat() bool {
	switch d {
	case F64, F32, F16, BF16, F8E4M3, F8E5M2:
		return true
	}
	return false
}

// checkRaw checks that raw holds whole elements of a known dtype d.
func checkRaw(d DType, raw []byte) error {
	size := d.Size()
	if size == 0 {
		return fmt.Errorf("dtype %q: unsupported", d)
	}
	if len(raw)%size != 0 {
		return fmt.Errorf("dtype %s: %d bytes is not a multiple of the element size %d", d, len(raw), size)
	}
	return nil
}

// hostLittleEndian reports whether little-endian F32 bytes can be copied
// into a []float32 as they are.
var hostLittleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// HostLittleEndian reports whether the host stores numbers as the
// safetensors format does (little-endian), so that stored elements can
// be used in place.
func HostLittleEndian() bool { return hostLittleEndian }

// DecodeFloat32 converts the little-endian elements of raw (dtype d, a
// known one: see Valid) into out[:len(raw)/d.Size()]. Integer and bool
// types convert by value. On a little-endian host F32 is copied.
func DecodeFloat32(out []float32, d DType, raw []byte) {
	n := len(raw) / d.Size()
	out = out[:n]
	le := binary.LittleEndian
	switch d {
	case F32:
		if hostLittleEndian && n > 0 {
			copy(unsafe.Slice((*byte)(unsafe.Pointer(&out[0])), 4*n), raw)
			return
		}
		for i := range out {
			out[i] = math.Float32frombits(le.Uint32(raw[4*i:]))
		}
	case F64:
		for i := range out {
			out[i] = float32(math.Float64frombits(le.Uint64(raw[8*i:])))
		}
	case F16:
		for i := range out {
			out[i] = HalfToFloat32(le.Uint16(raw[2*i:]))
		}
	case BF16:
		for i := range out {
			out[i] = math.Float32frombits(uint32(le.Uint16(raw[2*i:])) << 16)
		}
	case F8E4M3:
		for i, b := range raw {
			out[i] = F8E4M3ToFloat32(b)
		}
	case F8E5M2:
		for i, b := range raw {
			// E5M2 is the top byte of an IEEE half.
			out[i] = HalfToFloat32(uint16(b) << 8)
		}
	case I64:
		for i := range out {
			out[i] = float32(int64(le.Uint64(raw[8*i:])))
		}
	case I32:
		for i := range out {
			out[i] = float32(int32(le.Uint32(raw[4*i:])))
		}
	case I16:
		for i := range out {
			out[i] = float32(int16(le.Uint16(raw[2*i:])))
		}
	case I8:
		for i, b := range raw {
			out[i] = float32(int8(b))
		}
	case U8, BOOL:
		for i, b := range raw {
			out[i] = float32(b)
		}
	}
}

// DecodeBFloat16 converts the little-endian elements of raw (dtype F32,
// F16 or BF16) into bfloat16 bit patterns at out[:len(raw)/d.Size()],
// rounding to nearest even (BF16 is copied). T is any uint16 type, such as
// GoMLX's bfloat16.BFloat16. Other dtypes leave out unchanged.
func DecodeBFloat16[T ~uint16](out []T, d DType, raw []byte) {
	le := binary.LittleEndian
	n := len(raw) / d.Size()
	out = out[:n]
	switch d {
	case BF16:
		if hostLittleEndian && n > 0 {
			copy(unsafe.Slice((*byte)(unsafe.Pointer(&out[0])), 2*n), raw)
			return
		}
		for i := range out {
			out[i] = T(le.Uint16(raw[2*i:]))
		}
	case F32:
		for i := range out {
			out[i] = T(Float32ToBF16(math.Float32frombits(le.Uint32(raw[4*i:]))))
		}
	case F16:
		for i := range out {
			out[i] = T(Float32ToBF16(HalfToFloat32(le.Uint16(raw[2*i:]))))
		}
	}
}

// HalfToFloat32 converts an IEEE 754 binary16 value to float32 exactly.
func HalfToFloat32(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h) & 0x3ff
	switch {
	case exp == 0x1f: // Inf or NaN
		return math.Float32frombits(sign | 0x7f800000 | mant<<13)
	case exp != 0: // normal
		return math.Float32frombits(sign | (exp+127-15)<<23 | mant<<13)
	case mant == 0: // signed zero
		return math.Float32frombits(sign)
	default: // subnormal: mant * 2^-24
		f := float32(mant) * (1.0 / (1 << 24))
		if sign != 0 {
			f = -f
		}
		return f
	}
}

// Float32ToHalf converts a float32 to IEEE binary16 with round-to-nearest-even,
// overflowing to infinity and keeping NaN a NaN.
func Float32ToHalf(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int32(b>>23) & 0xff
	mant := b & 0x7fffff
	if exp == 0xff { // Inf/NaN
		if mant != 0 {
			return sign | 0x7e00
		}
		return sign | 0x7c00
	}
	e := exp - 127 + 15
	if e >= 0x1f {
		return sign | 0x7c00
	}
	if e <= 0 {
		if e < -10 {
			return sign // underflows to zero
		}
		mant |= 0x800000
		shift := uint32(14 - e)
		half := mant >> shift
		rem := mant & (1<<shift - 1)
		mid := uint32(1) << (shift - 1)
		if rem > mid || (rem == mid && half&1 == 1) {
			half++
		}
		return sign | uint16(half)
	}
	half := uint32(e)<<10 | mant>>13
	rem := mant & 0x1fff
	if rem > 0x1000 || (rem == 0x1000 && half&1 == 1) {
		half++ // may carry into the exponent, which is the correct rounding
	}
	return sign | uint16(half)
}

// Float32ToBF16 converts a float32 to bfloat16 with round-to-nearest-even.
func Float32ToBF16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 { // NaN: keep it quiet
		return uint16(b>>16) | 0x40
	}
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}

// F8E4M3ToFloat32 converts an OCP FP8 E4M3 ("fn": no infinities, S.1111.111
// is NaN) value to float32.
func F8E4M3ToFloat32(v byte) float32 {
	sign := float32(1)
	if v&0x80 != 0 {
		sign = -1
	}
	exp := int(v>>3) & 0xf
	mant := float32(v & 0x7)
	if exp == 0xf && v&0x7 == 0x7 {
		return float32(math.NaN())
	}
	if exp == 0 {
		return sign * mant / 8 * (1.0 / 64) // subnormal: m/8 * 2^-6
	}
	return sign * (1 + mant/8) * float32(math.Ldexp(1, exp-7))
}

// EncodeFloat32 encodes float32 values as little-endian bytes of dtype d
// (F32, F16 or BF16). It is used to write checkpoints in tests and scripts.
func EncodeFloat32(d DType, values []float32) ([]byte, error) {
	le := binary.LittleEndian
	switch d {
	case F32:
		out := make([]byte, 4*len(values))
		for i, v := range values {
			le.PutUint32(out[4*i:], math.Float32bits(v))
		}
		return out, nil
	case F16:
		out := make([]byte, 2*len(values))
		for i, v := range values {
			le.PutUint16(out[2*i:], Float32ToHalf(v))
		}
		return out, nil
	case BF16:
		out := make([]byte, 2*len(values))
		for i, v := range values {
			le.PutUint16(out[2*i:], Float32ToBF16(v))
		}
		return out, nil
	}
	return nil, fmt.Errorf("EncodeFloat32: dtype %q not supported (want F32, F16 or BF16)", d)
}
