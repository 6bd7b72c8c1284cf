package kernels

// Portable Go kernels. They are the whole implementation on non-amd64
// architectures and under the purego tag, the fallback on x86 without
// AVX2+FMA, and the tails (k mod 16) of the assembly paths.

// dotF32 returns Σ a[i]·b[i] over len(a) elements.
func dotF32(a, b []float32) float32 {
	b = b[:len(a)]
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+4 <= len(a); i += 4 {
		s0 += a[i] * b[i]
		s1 += a[i+1] * b[i+1]
		s2 += a[i+2] * b[i+2]
		s3 += a[i+3] * b[i+3]
	}
	for ; i < len(a); i++ {
		s0 += a[i] * b[i]
	}
	return (s0 + s1) + (s2 + s3)
}

func dotBF16(a []float32, b []uint16) float32 {
	b = b[:len(a)]
	var s0, s1 float32
	i := 0
	for ; i+2 <= len(a); i += 2 {
		s0 += a[i] * bf16ToF32(b[i])
		s1 += a[i+1] * bf16ToF32(b[i+1])
	}
	for ; i < len(a); i++ {
		s0 += a[i] * bf16ToF32(b[i])
	}
	return s0 + s1
}

func dotF16(a []float32, b []uint16) float32 {
	b = b[:len(a)]
	t := f16Lookup()
	var s0, s1 float32
	i := 0
	for ; i+2 <= len(a); i += 2 {
		s0 += a[i] * t[b[i]]
		s1 += a[i+1] * t[b[i+1]]
	}
	for ; i < len(a); i++ {
		s0 += a[i] * t[b[i]]
	}
	return s0 + s1
}

func dotI8(a []float32, b []int8) float32 {
	b = b[:len(a)]
	var s0, s1 float32
	i := 0
	for ; i+2 <= len(a); i += 2 {
		s0 += a[i] * float32(b[i])
		s1 += a[i+1] * float32(b[i+1])
	}
	for ; i < len(a); i++ {
		s0 += a[i] * float32(b[i])
	}
	return s0 + s1
}

// Generic GEMV row kernels: c[j] = a · row j of b, for j < len(c).

func gemvRowsF32Generic(a, b []float32, ldb int, c []float32) {
	for j := range c {
		c[j] = dotF32(a, b[j*ldb:])
	}
}

func gemvRowsBF16Generic(a []float32, b []uint16, ldb int, c []float32) {
	for j := range c {
		c[j] = dotBF16(a, b[j*ldb:])
	}
}

func gemvRowsF16Generic(a []float32, b []uint16, ldb int, c []float32) {
	for j := range c {
		c[j] = dotF16(a, b[j*ldb:])
	}
}

// gemvRowsI8Generic: scales holds ng scales per row (row stride ng), groups of
// g input columns each.
func gemvRowsI8Generic(a []float32, b []int8, ldb int, scales []float32, ng, g int, c []float32) {
	k := len(a)
	for j := range c {
		row := b[j*ldb:]
		sc := scales[j*ng:]
		var s float32
		for q := 0; q < ng; q++ {
			lo := q * g
			hi := min(lo+g, k)
			s += sc[q] * dotI8(a[lo:hi], row[lo:hi])
		}
		c[j] = s
	}
}

// gemmKernelGeneric is the portable microkernel: an mr×nr tile of C from
// packed panels a (kc×mr, k-major) and b (kc×nr). If acc, it adds to C.
func gemmKernelGeneric(mr, nr, kc int, a, b, c []float32, ldc int, acc bool) {
	var t [genericMR * genericNR]float32
	for p := 0; p < kc; p++ {
		ap := a[p*mr : p*mr+mr]
		bp := b[p*nr : p*nr+nr]
		for i, av := range ap {
			ti := t[i*nr : i*nr+nr]
			for j, bv := range bp {
				ti[j] += av * bv
			}
		}
	}
	for i := 0; i < mr; i++ {
		ci := c[i*ldc : i*ldc+nr]
		ti := t[i*nr : i*nr+nr]
		if acc {
			for j := range ci {
				ci[j] += ti[j]
			}
		} else {
			copy(ci, ti)
		}
	}
}

const (
	genericMR = 4
	genericNR = 16
)

// axpyF32 does y += alpha·x.
func axpyF32(alpha float32, x, y []float32) {
	x = x[:len(y)]
	for i := range y {
		y[i] += alpha * x[i]
	}
}
