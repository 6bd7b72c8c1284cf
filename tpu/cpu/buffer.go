package cpu

import (
	"fmt"
	"reflect"
	"sync"
	"unsafe"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/dtypes/bfloat16"
	"github.com/gomlx/gomlx/pkg/core/shapes"

	"github.com/x448/float16"
)

// Buffer is a tensor in host memory: a shape and a flat slice of the
// dtype's Go type (shape.DType.GoType()), row-major and dense.
//
// mu guards data, which BufferFinalize and a donating Execute may clear
// while other goroutines read it. Readers take the slice itself, not a
// copy, and use it after unlocking: clearing data only drops the handle,
// and the memory lives on as long as a slice refers to it (a donated
// buffer's memory may by then hold the execution's values: exec.go).
type Buffer struct {
	mu    sync.Mutex
	shape shapes.Shape
	data  any // nil once finalized or donated
	// output marks an execution's output, whose memory nothing else
	// holds (not a host tensor's, as NewSharedBuffer's is): Recycle may
	// take it back.
	output bool
}

var _ backends.DataInterface = (*Backend)(nil)

// makeFlat allocates a zeroed flat slice of n elements of dt, without
// reflection for the common dtypes; one of at least hugeMin bytes is
// placed for huge pages (hostmem.go).
func makeFlat(dt dtypes.DType, n int) any {
	if hugePages && placeable(dt) && n*dt.Size() >= hugeMin {
		size := n * dt.Size()
		return viewFlat(dt, hugeRegion(size)[:size:size], n)
	}
	switch dt {
	case dtypes.Float32:
		return make([]float32, n)
	case dtypes.Float64:
		return make([]float64, n)
	case dtypes.BFloat16:
		return make([]bfloat16.BFloat16, n)
	case dtypes.Float16:
		return make([]float16.Float16, n)
	case dtypes.Int32:
		return make([]int32, n)
	case dtypes.Int64:
		return make([]int64, n)
	case dtypes.Bool:
		return make([]bool, n)
	case dtypes.Uint8:
		return make([]uint8, n)
	case dtypes.Int8:
		return make([]int8, n)
	}
	return reflect.MakeSlice(reflect.SliceOf(dt.GoType()), n, n).Interface()
}

// flatLen is the length of a flat slice.
func flatLen(flat any) int { return reflect.ValueOf(flat).Len() }

// cloneFlat copies a flat slice.
func cloneFlat(flat any) any {
	v := reflect.ValueOf(flat)
	c := reflect.MakeSlice(v.Type(), v.Len(), v.Len())
	reflect.Copy(c, v)
	return c.Interface()
}

// copyFlat copies src into dst (same type); returns the count copied.
func copyFlat(dst, src any) int { return reflect.Copy(reflect.ValueOf(dst), reflect.ValueOf(src)) }

// bytesOf views a flat slice as bytes, without copying: writes through
// the view change flat.
func bytesOf(flat any) []byte {
	v := reflect.ValueOf(flat)
	n := v.Len()
	if n == 0 {
		return nil
	}
	size := int(v.Type().Elem().Size())
	return unsafe.Slice((*byte)(v.UnsafePointer()), n*size)
}

// u16 views a bf16 or f16 slice as its raw uint16 bits.
func u16(flat any) []uint16 {
	switch f := flat.(type) {
	case []bfloat16.BFloat16:
		return unsafe.Slice((*uint16)(unsafe.SliceData(f)), len(f))
	case []float16.Float16:
		return unsafe.Slice((*uint16)(unsafe.SliceData(f)), len(f))
	case []uint16:
		return f
	}
	panic("u16: not a 16-bit slice")
}

func (b *Backend) buffer(x backends.Buffer) (*Buffer, error) {
	buf, ok := x.(*Buffer)
	if !ok || buf == nil {
		return nil, fmt.Errorf("cpu backend: buffer is %T, not a cpu backend buffer", x)
	}
	return buf, nil
}

// BufferFinalize implements backends.DataInterface.
func (b *Backend) BufferFinalize(x backends.Buffer) error {
	buf, err := b.buffer(x)
	if err != nil {
		return err
	}
	buf.mu.Lock()
	buf.data = nil
	buf.mu.Unlock()
	return nil
}

// Recycle finalizes an execution's output whose reader is done with it
// (a step's logits, copied out) and keeps its memory, when large, in the
// spares for the next executions' values (spares.go), where
// BufferFinalize leaves it to the collector: a decode step of 32 rows
// returns 4 MB of logits, which would otherwise be fresh heap every step.
// The caller must hold no view of the memory (BufferData's, or one taken
// inside a tensor's ConstFlatData callback) after the call. Other buffers
// are only finalized.
func (b *Backend) Recycle(x backends.Buffer) error {
	buf, err := b.buffer(x)
	if err != nil {
		return err
	}
	buf.mu.Lock()
	data, output := buf.data, buf.output
	buf.data = nil
	buf.mu.Unlock()
	if output && data != nil {
		if r := spareRegion(data); r != nil {
			b.spares.give(r)
		}
	}
	return nil
}

// BufferShape implements backends.DataInterface.
func (b *Backend) BufferShape(x backends.Buffer) (shapes.Shape, error) {
	buf, err := b.buffer(x)
	if err != nil {
		return shapes.Invalid(), err
	}
	return buf.shape, nil
}

// BufferDeviceNum implements backends.DataInterface.
func (b *Backend) BufferDeviceNum(x backends.Buffer) (backends.DeviceNum, error) {
	if _, err := b.buffer(x); err != nil {
		return 0, err
	}
	return 0, nil
}

// flatOf returns the data of a live buffer.
func (buf *Buffer) flatOf() (any, error) {
	buf.mu.Lock()
	defer buf.mu.Unlock()
	if buf.data == nil {
		return nil, fmt.Errorf("cpu backend: buffer %s was finalized or donated", buf.shape)
	}
	return buf.data, nil
}

// BufferToFlatData implements backends.DataInterface.
func (b *Backend) BufferToFlatData(x backends.Buffer, flat any) error {
	buf, err := b.buffer(x)
	if err != nil {
		return err
	}
	src, err := buf.flatOf()
	if err != nil {
		return err
	}
	if reflect.TypeOf(flat) != reflect.TypeOf(src) {
		return fmt.Errorf("cpu backend: BufferToFlatData: buffer %s holds %T, given %T", buf.shape, src, flat)
	}
	if flatLen(flat) != flatLen(src) {
		return fmt.Errorf("cpu backend: BufferToFlatData: buffer %s has %d elements, given %d", buf.shape, flatLen(src), flatLen(flat))
	}
	copyFlat(flat, src)
	return nil
}

// BufferFromFlatData implements backends.DataInterface: the data is copied.
func (b *Backend) BufferFromFlatData(deviceNum backends.DeviceNum, flat any, shape shapes.Shape) (backends.Buffer, error) {
	if err := b.checkDevice(deviceNum); err != nil {
		return nil, err
	}
	if err := checkShape(shape); err != nil {
		return nil, err
	}
	if reflect.TypeOf(flat) != reflect.SliceOf(shape.DType.GoType()) {
		return nil, fmt.Errorf("cpu backend: BufferFromFlatData: shape %s wants []%s, given %T", shape, shape.DType.GoType(), flat)
	}
	if flatLen(flat) != shape.Size() {
		return nil, fmt.Errorf("cpu backend: BufferFromFlatData: shape %s has %d elements, given %d", shape, shape.Size(), flatLen(flat))
	}
	return &Buffer{shape: shape.Clone(), data: cloneFlat(flat)}, nil
}

// HasSharedBuffers implements backends.DataInterface: buffers live in host
// memory and can be shared with the caller.
func (b *Backend) HasSharedBuffers() bool { return true }

// NewSharedBuffer implements backends.DataInterface: the flat slice it
// returns is the buffer's memory, so the caller fills the buffer by
// writing it, without a copy.
func (b *Backend) NewSharedBuffer(deviceNum backends.DeviceNum, shape shapes.Shape) (backends.Buffer, any, error) {
	if err := b.checkDevice(deviceNum); err != nil {
		return nil, nil, err
	}
	if err := checkShape(shape); err != nil {
		return nil, nil, err
	}
	flat := makeFlat(shape.DType, shape.Size())
	return &Buffer{shape: shape.Clone(), data: flat}, flat, nil
}

// NewZeroBuffer returns a buffer of zeros: NewSharedBuffer's memory, which
// the Go runtime hands out zeroed (the huge-page regions too), so no host
// tensor is zeroed and copied in (a state's caches; compile's Runner.zeros).
func (b *Backend) NewZeroBuffer(deviceNum backends.DeviceNum, shape shapes.Shape) (backends.Buffer, error) {
	buf, _, err := b.NewSharedBuffer(deviceNum, shape)
	return buf, err
}

// NewWeightBuffer is NewSharedBuffer for a weight, memory that lives
// about as long as the model: it is packed with the other weights for
// huge pages (hostmem.go). A buffer of a few bytes that comes and goes
// (a step's inputs) belongs in NewSharedBuffer, since it would keep a
// whole chunk alive.
func (b *Backend) NewWeightBuffer(deviceNum backends.DeviceNum, shape shapes.Shape) (backends.Buffer, any, error) {
	if err := b.checkDevice(deviceNum); err != nil {
		return nil, nil, err
	}
	if err := checkShape(shape); err != nil {
		return nil, nil, err
	}
	flat := b.makeWeight(shape.DType, shape.Size())
	return &Buffer{shape: shape.Clone(), data: flat}, flat, nil
}

// BufferData implements backends.DataInterface: the buffer's own memory,
// not a copy (an execution the buffer is later donated to may overwrite
// it).
func (b *Backend) BufferData(x backends.Buffer) (any, error) {
	buf, err := b.buffer(x)
	if err != nil {
		return nil, err
	}
	return buf.flatOf()
}

// BufferCopyToDevice implements backends.DataInterface: there is only one
// device.
func (b *Backend) BufferCopyToDevice(x backends.Buffer, deviceNum backends.DeviceNum) (backends.Buffer, error) {
	return nil, fmt.Errorf("cpu backend: one device only, cannot copy a buffer to device %d", deviceNum)
}
