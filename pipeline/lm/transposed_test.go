package lm

import (
	"math"
	"path/filepath"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes/bfloat16"

	"github.com/tputool/tputool/loader/safetensors"
)

// TestTransposedInto: a weight stored transposed, [2 matrices of in=3,
// out=5], is moved straight into a destination of its stored dtype
// (bf16 into bfloat16, f32 into float32), each matrix transposed, and its
// NaN reported at its place in the transposed stack; a destination of
// another dtype is left to the converting path (not done).
func TestTransposedInto(t *testing.T) {
	vals := make([]float32, 2*3*5)
	for i := range vals {
		vals[i] = float32(i)
	}
	vals[1*15+2*5+4] = float32(math.NaN()) // matrix 1, stored row 2 (in), column 4 (out)
	for _, dt := range []safetensors.DType{safetensors.BF16, safetensors.F32} {
		path := filepath.Join(t.TempDir(), "model.safetensors")
		w, err := safetensors.Float32Tensor("w", dt, []int{2, 3, 5}, vals)
		if err != nil {
			t.Fatal(err)
		}
		if err := safetensors.WriteFile(path, []safetensors.Tensor{w}, nil); err != nil {
			t.Fatal(err)
		}
		ck, err := safetensors.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		var got []safetensors.NonFiniteTensor
		l := &Loaded{ckpt: ck, OnNonFinite: func(nf safetensors.NonFiniteTensor) { got = append(got, nf) }}
		spec := WeightSpec{Name: "w", Shape: []int{2, 5, 3}, Transposed: true}
		var flat any = make([]bfloat16.BFloat16, 30)
		other := any(make([]float32, 30))
		if dt == safetensors.F32 {
			flat, other = make([]float32, 30), make([]bfloat16.BFloat16, 30)
		}
		if done, err := l.transposedInto(spec, other); done || err != nil {
			t.Errorf("%s into %T: done %v, %v; want the converting path", dt, other, done, err)
		}
		done, err := l.transposedInto(spec, flat)
		if !done || err != nil {
			t.Fatalf("%s into %T: done %v, %v", dt, flat, done, err)
		}
		for m := range 2 {
			for o := range 5 {
				for i := range 3 {
					want := vals[m*15+i*5+o]
					var g float32
					switch f := flat.(type) {
					case []bfloat16.BFloat16:
						g = f[m*15+o*3+i].Float32()
					case []float32:
						g = f[m*15+o*3+i]
					}
					if g != want && !(math.IsNaN(float64(g)) && math.IsNaN(float64(want))) {
						t.Fatalf("%s: [%d][%d][%d] = %g, want %g", dt, m, o, i, g, want)
					}
				}
			}
		}
		want := safetensors.NonFiniteTensor{Name: "w", DType: dt, Count: 1, Elements: 30, First: 1*15 + 4*3 + 2}
		if len(got) != 1 || got[0] != want {
			t.Errorf("%s: reported %+v, want %+v", dt, got, want)
		}
		ck.Close()
	}
}
