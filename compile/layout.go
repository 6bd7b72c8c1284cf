package compile

import (
	"fmt"
	"runtime"

	"github.com/gomlx/gomlx/pkg/core/dtypes/bfloat16"
	"github.com/x448/float16"

	"github.com/tputool/tputool/pipeline/nn"
)

// Blocked layout of Matmul weights on the pure-Go backend (nn.Blocked).
const (
	// goBlockCols matches simplego's DotGeneral kernel, which walks the
	// contracting axis in blocks of 64.
	goBlockCols = 64
	// goBlockRows bounds the rows of a part so that a matrix-vector
	// product of up to 16 rows stays on simplego's small-matrix path
	// (rows x output rows <= 16384); larger matrices take its blocked path,
	// which copies the whole weight on every call.
	goBlockRows = 1024
)

// isGoBackend reports whether the backend wants the blocked layout
// (tpu.Capabilities.BlockedMatmul: GoMLX's pure-Go backend).
func (r *LM) isGoBackend() bool { return r.opts.Caps.BlockedMatmul }

// layout picks the layout of a Matmul weight [out, in]: nil keeps [out,
// in]. On the pure-Go backend the input axis is cut into blocks of
// BlockCols (64) columns and the rows into the fewest parts that keep each
// part at most goBlockRows rows and give every core a block.
// SplitMatmul and BlockCols override; SplitMatmul 1 keeps [out, in].
func (r *LM) layout(out, in int) *nn.Blocked {
	if r.opts.SplitMatmul == 1 || (!r.isGoBackend() && r.opts.SplitMatmul == 0 && r.opts.BlockCols == 0) {
		return nil
	}
	c := r.opts.BlockCols
	switch {
	case c < 0:
		c = in
	case c == 0:
		c = goBlockCols
	}
	if in%c != 0 || c > in {
		c = in
	}
	j := in / c
	p := r.opts.SplitMatmul
	if p == 0 {
		p = max((out+goBlockRows-1)/goBlockRows, (runtime.NumCPU()+j-1)/j)
	}
	p = divisorAtLeast(out, p)
	if p == 1 && j == 1 {
		return nil
	}
	return &nn.Blocked{J: j, P: p, Rows: out / p, C: c}
}

// divisorAtLeast returns the smallest divisor of n that is >= k (n when
// none is smaller).
func divisorAtLeast(n, k int) int {
	for d := max(k, 1); d < n; d++ {
		if n%d == 0 {
			return d
		}
	}
	return n
}

// blockInto copies a [out, in] flat slice src into dst, the blocked
// layout [J, P, rows, C] (both of the same type).
func blockInto(dst, src any, b *nn.Blocked) {
	switch s := src.(type) {
	case []float32:
		blockCopy(dst.([]float32), s, b)
	case []bfloat16.BFloat16:
		blockCopy(dst.([]bfloat16.BFloat16), s, b)
	case []float16.Float16:
		blockCopy(dst.([]float16.Float16), s, b)
	default:
		panic(fmt.Sprintf("blockInto: %T", src))
	}
}

func blockCopy[T any](dst, src []T, b *nn.Blocked) {
	in := b.J * b.C
	i := 0
	for j := 0; j < b.J; j++ {
		for row := 0; row < b.P*b.Rows; row++ { // p*rows + r, in order
			copy(dst[i:i+b.C], src[row*in+j*b.C:])
			i += b.C
		}
	}
}
