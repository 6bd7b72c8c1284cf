package kernels

import (
	"fmt"
	"math"
)

// checkMat panics with a clear message when s cannot hold a rows×cols matrix
// with row stride ld. Kernels call it before touching memory, so the assembly
// paths never read or write out of bounds.
func checkMat(name string, rows, cols int, ld, length int) {
	if rows < 0 || cols < 0 {
		panic(fmt.Sprintf("kernels: %s: negative shape %dx%d", name, rows, cols))
	}
	if rows == 0 || cols == 0 {
		return
	}
	if ld < cols {
		panic(fmt.Sprintf("kernels: %s: row stride %d < width %d", name, ld, cols))
	}
	if rows > 1 && ld > (math.MaxInt-cols)/(rows-1) {
		panic(fmt.Sprintf("kernels: %s: shape %dx%d with stride %d overflows", name, rows, cols, ld))
	}
	need := (rows-1)*ld + cols
	if length < need {
		panic(fmt.Sprintf("kernels: %s: %d elements, need %d for %dx%d with stride %d", name, length, need, rows, cols, ld))
	}
}
