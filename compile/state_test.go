package compile

import (
	"fmt"
	"slices"
	"testing"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
)

// TestStateZeros: a new state's tensors are made on the device, not as
// host tensors copied in at the first step, and hold zeros even where the
// backend hands out reused memory (the go backend's buffer pool, dirtied
// here first).
func TestStateZeros(t *testing.T) {
	l := loadDir(t, "../testdata/stories260K-hf")
	for _, be := range []func(testing.TB) backends.Backend{cpuBackend, goBackend} {
		for _, kv := range []dtypes.DType{dtypes.InvalidDType, dtypes.Int8} {
			backend := be(t)
			r, err := NewRunner(backend, l, Options{KVDType: kv})
			if err != nil {
				t.Fatal(err)
			}
			const b, slots = 2, 32
			// Dirty buffers of every state shape, then free them.
			for _, layer := range r.allocState(b, slots) {
				for _, st := range layer {
					buf, flat, err := backend.NewSharedBuffer(0, st.Shape())
					if err != nil {
						t.Fatal(err)
					}
					fill(flat)
					if err := backend.BufferFinalize(buf); err != nil {
						t.Fatal(err)
					}
				}
			}
			for i, layer := range r.allocState(b, slots) {
				for j, st := range layer {
					name := backend.Name() + ", KV cache " + kv.String() // InvalidDType: the compute dtype
					if st.IsLocal() || !st.IsOnDevice(0) {
						t.Errorf("%s: layer %d state %d %s: local %v, on the device %v; want made on the device", name, i, j, st.Shape(), st.IsLocal(), st.IsOnDevice(0))
					}
					if !allZero(t, st) {
						t.Errorf("%s: layer %d state %d %s: not all zeros", name, i, j, st.Shape())
					}
					st.MustFinalizeAll()
				}
			}
			r.Close()
		}
	}
}

// fill writes ones (or 0x7f) over a flat slice of any state dtype.
func fill(flat any) {
	switch f := flat.(type) {
	case []float32:
		for i := range f {
			f[i] = 1
		}
	case []int8:
		for i := range f {
			f[i] = 0x7f
		}
	default:
		panic(fmt.Sprintf("fill: %T", flat))
	}
}

// allZero reports whether a float32 or int8 tensor holds only zeros.
func allZero(t *testing.T, st *tensors.Tensor) bool {
	t.Helper()
	var err error
	nonzero := true
	switch st.DType() {
	case dtypes.Float32:
		err = tensors.ConstFlatData(st, func(f []float32) { nonzero = slices.ContainsFunc(f, func(v float32) bool { return v != 0 }) })
	case dtypes.Int8:
		err = tensors.ConstFlatData(st, func(f []int8) { nonzero = slices.ContainsFunc(f, func(v int8) bool { return v != 0 }) })
	default:
		t.Fatalf("allZero: %s", st.DType())
	}
	if err != nil {
		t.Fatal(err)
	}
	return !nonzero
}
