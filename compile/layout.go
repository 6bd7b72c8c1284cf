package compile

import (
	"fmt"
	"runtime"

	"github.com/gomlx/gomlx/pkg/core/dtypes/bfloat16"
	"github.com/x448/float16"

	"github.com/tputool/tputool/pipeline/nn"
)

// Blocked layout of Matmul weights on the pure-Go backend (nn.Blocked:
// [J, P, rows, C], element (j, p, r, c) = W[p·rows + r, j·C + c]).
// simplego's small-matrix DotGeneral parallelises only over batch axes and
// walks the contracting axis in blocks of 64, so on a plain [out, in]
// weight a matrix-vector product reads 64 interleaved row streams and
// stalls on memory; with 64-column blocks each (j, p) block is one
// contiguous stream and all blocks run in parallel. Per CPU second,
// 2048x768 went from 0.76 to 1.57 GMAC and the 32000x768 head from 0.68
// to 1.31. Other backends keep [out, in].
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
func (r *Runner) isGoBackend() bool { return r.opts.Caps.BlockedMatmul }

// layout picks the layout of a Matmul weight [out, in]: nil keeps [out,
// in]. On the pure-Go backend the input axis is cut into blocks of
// BlockCols (64) columns and the rows into the fewest parts that keep each
// part at most goBlockRows rows and give every core a block.
// SplitMatmul and BlockCols override; SplitMatmul 1 keeps [out, in]. A
// negative BlockCols, or one that does not divide in, keeps whole rows
// (C = in, J = 1).
func (r *Runner) layout(out, in int) *nn.Blocked {
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
	// P parts: enough that no part exceeds goBlockRows rows and that the
	// J·P blocks give every core one, rounded up to a divisor of out so
	// that all parts have the same rows.
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

// blockCopy writes dst in its own order, j then p·rows + r, one run of C
// contiguous source elements at a time.
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
