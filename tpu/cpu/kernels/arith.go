package kernels

// Arith is an elementwise f32 operation ArithF32 runs.
type Arith int

// The operations of ArithF32: dst = a op c.
const (
	ArithAdd Arith = iota
	ArithSub
	ArithMul
	ArithDiv
)

// arithScalar is dst = a op c in Go, with a or c one value when its
// length is 1: the tails of the vector loops and the portable path.
func arithScalar(op Arith, dst, a, c []float32) {
	switch {
	case len(a) == 1 && len(c) == 1:
		x, y := a[0], c[0]
		for i := range dst {
			dst[i] = arith1(op, x, y)
		}
	case len(c) == 1:
		y := c[0]
		for i, x := range a[:len(dst)] {
			dst[i] = arith1(op, x, y)
		}
	case len(a) == 1:
		x := a[0]
		for i, y := range c[:len(dst)] {
			dst[i] = arith1(op, x, y)
		}
	default:
		a, c = a[:len(dst)], c[:len(dst)]
		for i := range dst {
			dst[i] = arith1(op, a[i], c[i])
		}
	}
}

func arith1(op Arith, x, y float32) float32 {
	switch op {
	case ArithAdd:
		return x + y
	case ArithSub:
		return x - y
	case ArithMul:
		return x * y
	}
	return x / y
}
