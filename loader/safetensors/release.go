package safetensors

import (
	"encoding/binary"
	"math"
	"os"
	"unsafe"
)

// Release tells the kernel that the process no longer needs the pages of
// tensor name's bytes: they leave the process's resident set (the file
// stays in the page cache), so a weight read once and uploaded does not
// stay counted twice. A later Raw or Convert reads the bytes again from
// the file, so Release never changes what is read. Pages shared with a
// neighbouring tensor are released too (they are simply read again). It
// is a no-op where the platform has no madvise.
func (c *Checkpoint) Release(name string) { c.ReleaseRange(name, 0, math.MaxInt64) }

// ReleaseRange is Release for the bytes [begin, end) of tensor name (end
// is clamped to its size): a large tensor read piece by piece gives each
// piece back as soon as it is converted.
func (c *Checkpoint) ReleaseRange(name string, begin, end int64) {
	f, info, ok := c.locate(name)
	if !ok || f.data == nil {
		return
	}
	end = min(end, info.End-info.Begin)
	if begin < 0 || begin >= end {
		return
	}
	page := int64(os.Getpagesize())
	off := f.Header.DataOffset + info.Begin
	lo := (off + begin) / page * page
	hi := min((off+end+page-1)/page*page, int64(len(f.data)))
	if lo >= hi {
		return
	}
	dropPages(f.data[lo:hi])
}

// DecodeFloat16 converts the little-endian elements of raw (dtype F32,
// F16 or BF16) into IEEE half bit patterns at out[:len(raw)/d.Size()],
// rounding to nearest even (F16 is copied). T is any uint16 type, such as
// float16.Float16. Other dtypes leave out unchanged.
func DecodeFloat16[T ~uint16](out []T, d DType, raw []byte) {
	le := binary.LittleEndian
	n := len(raw) / d.Size()
	out = out[:n]
	switch d {
	case F16:
		if hostLittleEndian && n > 0 {
			copy(unsafe.Slice((*byte)(unsafe.Pointer(&out[0])), 2*n), raw)
			return
		}
		for i := range out {
			out[i] = T(le.Uint16(raw[2*i:]))
		}
	case F32:
		for i := range out {
			out[i] = T(Float32ToHalf(math.Float32frombits(le.Uint32(raw[4*i:]))))
		}
	case BF16:
		for i := range out {
			out[i] = T(Float32ToHalf(math.Float32frombits(uint32(le.Uint16(raw[2*i:])) << 16)))
		}
	}
}
