package lm

import "testing"

// TestTranspose checks the banded transpose of stacks stored transposed
// against the definition, on sizes that are not multiples of its band.
func TestTranspose(t *testing.T) {
	for _, d := range [][2]int{{1, 1}, {3, 70}, {37, 5}, {64, 33}, {100, 129}} {
		rows, cols := d[0], d[1]
		src := make([]float32, rows*cols)
		for i := range src {
			src[i] = float32(i)
		}
		dst := make([]float32, rows*cols)
		transpose(dst, src, rows, cols)
		for r := 0; r < rows; r++ {
			for c := 0; c < cols; c++ {
				if dst[c*rows+r] != src[r*cols+c] {
					t.Fatalf("%dx%d: dst[%d][%d] = %g, want %g", rows, cols, c, r, dst[c*rows+r], src[r*cols+c])
				}
			}
		}
	}
}
