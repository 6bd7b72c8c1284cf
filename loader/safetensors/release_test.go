package safetensors

import (
	"bytes"
	"math"
	"path/filepath"
	"testing"
)

// A released tensor reads back the same bytes: Release and ReleaseRange only drop
// resident pages of the read-only mapping.
func TestReleaseKeepsBytes(t *testing.T) {
	vals := make([]float32, 5000) // several pages
	for i := range vals {
		vals[i] = float32(i) * 0.25
	}
	a, err := Float32Tensor("a", F32, []int{50, 100}, vals)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Float32Tensor("b", BF16, []int{5000}, vals)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "model.safetensors")
	if err := WriteFile(path, []Tensor{a, b}, nil); err != nil {
		t.Fatal(err)
	}
	c, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, name := range []string{"a", "b"} {
		raw, err := c.Raw(name)
		if err != nil {
			t.Fatal(err)
		}
		before := bytes.Clone(raw)
		c.ReleaseRange(name, 100, 9000)
		c.ReleaseRange(name, 9000, 100) // empty
		c.Release(name)
		c.Release("missing") // ignored
		if !bytes.Equal(raw, before) {
			t.Fatalf("%s: bytes changed after Release", name)
		}
	}
}

// DecodeFloat16 copies F16 and rounds F32 and BF16 as Float32ToHalf does.
func TestDecodeFloat16(t *testing.T) {
	vals := []float32{0, 1, -2.5, 65504, 1e-7, float32(math.Inf(-1)), 3.14159, 70000}
	for _, d := range []DType{F32, BF16, F16} {
		tn, err := Float32Tensor("x", d, []int{len(vals)}, vals)
		if err != nil {
			t.Fatal(err)
		}
		wide, err := ToFloat32(d, tn.Data)
		if err != nil {
			t.Fatal(err)
		}
		out := make([]uint16, len(vals))
		DecodeFloat16(out, d, tn.Data)
		for i, w := range wide {
			if want := Float32ToHalf(w); out[i] != want {
				t.Errorf("%s element %d (%g): got %#04x, want %#04x", d, i, w, out[i], want)
			}
		}
	}
}
