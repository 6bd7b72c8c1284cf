package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// Benchmarks (never timed tests). scripts/bench-kernels.sh runs them against
// the machine's streaming bandwidth and torch's sgemm. GEMV weights are
// cycled through copies totalling at least coldBytes, four times the L3 of
// the reference machine, so each call streams its weights from memory as a
// decode step does.

const coldBytes = 128 << 20

// gemvShapes are the 110M Llama (dim 768, hidden 2048, vocab 32000) matmuls
// as [out, in], and one decode step's attention over a cache of 1024 for
// one head of 64: scores (keys [1024, 64]) and values (transposed,
// [64, 1024]).
var gemvShapes = [][2]int{{768, 768}, {2048, 768}, {768, 2048}, {32000, 768}, {1024, 64}, {64, 1024}}

func BenchmarkGEMV(b *testing.B) {
	for _, dt := range []string{"f32", "bf16", "f16", "int8", "fp8"} {
		for _, sh := range gemvShapes {
			n, k := sh[0], sh[1]
			b.Run(fmt.Sprintf("%s/%dx%d", dt, n, k), func(b *testing.B) {
				benchGEMV(b, dt, n, k)
			})
		}
	}
}

func benchGEMV(b *testing.B, dt string, n, k int) {
	r := rand.New(rand.NewPCG(1, 1))
	elem := map[string]int{"f32": 4, "bf16": 2, "f16": 2, "int8": 1, "fp8": 1}[dt]
	bytes := n * k * elem
	copies := max(1, coldBytes/bytes)
	a := randMat(r, 1, k, k)
	c := make([]float32, n)
	calls := make([]func(), copies)
	for i := range calls {
		switch dt {
		case "f32":
			w := randMat(r, n, k, k)
			calls[i] = func() { GemmF32NT(1, n, k, a, k, w, k, c, n) }
		case "bf16", "f16":
			w := make([]uint16, n*k)
			for j := range w {
				w[j] = uint16(0x3c00 + r.IntN(0x400))
			}
			if dt == "bf16" {
				calls[i] = func() { GemmBF16NT(1, n, k, a, k, w, k, c, n) }
			} else {
				calls[i] = func() { GemmF16NT(1, n, k, a, k, w, k, c, n) }
			}
		case "int8":
			w := make([]int8, n*k)
			for j := range w {
				w[j] = int8(r.IntN(255) - 127)
			}
			sc := make([]float32, n)
			for j := range sc {
				sc[j] = 0.01
			}
			calls[i] = func() { GemmInt8NT(1, n, k, a, k, w, k, sc, k, c, n) }
		case "fp8":
			w, sc, _ := fp8Case(r, n, k, k, 128, 128)
			calls[i] = func() { GemmFP8NT(1, n, k, a, k, w, k, sc, 128, 128, c, n) }
		}
	}
	b.SetBytes(int64(bytes))
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		calls[i%copies]()
	}
	b.ReportMetric(2*float64(n)*float64(k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
}

// gemmShapes are prefill matmuls of a 128-token prompt on the 110M Llama:
// m×n×k with the weight [n, k].
var gemmShapes = [][3]int{{128, 768, 768}, {128, 2048, 768}, {128, 768, 2048}, {128, 32000, 768}, {128, 512, 64}, {32, 512, 64}, {16, 256, 64}, {128, 512, 128}, {128, 512, 256}}

// nnShapes are activation products: a UNet 3x3 convolution as im2col
// (out channels 320, 32x32 outputs, 320·9 patch values) and attention
// values (128 queries, head dim 64, 128 keys).
var nnShapes = [][3]int{{320, 1024, 2880}, {128, 64, 128}}

func BenchmarkGEMM(b *testing.B) {
	for _, dt := range []string{"f32", "f32-packed", "bf16", "bf16-bf16act", "int8", "int8-bf16act", "NN"} {
		shapes := gemmShapes
		if dt == "NN" {
			shapes = append(shapes[:3:3], nnShapes...)
		}
		for _, sh := range shapes {
			m, n, k := sh[0], sh[1], sh[2]
			if sh[1] == 32000 && dt != "f32" {
				continue
			}
			b.Run(fmt.Sprintf("%s/%dx%dx%d", dt, m, n, k), func(b *testing.B) {
				r := rand.New(rand.NewPCG(2, 2))
				a := randMat(r, m, k, k)
				c := make([]float32, m*n)
				var call func()
				switch dt {
				case "f32":
					w := randMat(r, n, k, k)
					call = func() { GemmF32NT(m, n, k, a, k, w, k, c, n) }
				case "f32-packed": // the packed driver on NT weights, where GemmF32NT takes it or not (shortNTMaxK)
					w := randMat(r, n, k, k)
					call = func() { gemmPacked(m, n, k, a, k, packerF32NT(w, k), c, n) }
				case "NN":
					w := randMat(r, k, n, n)
					call = func() { GemmF32NN(m, n, k, a, k, w, n, c, n) }
				case "bf16", "bf16-bf16act":
					w := make([]uint16, n*k)
					for j := range w {
						w[j] = uint16(0x3c00 + r.IntN(0x400))
					}
					call = func() { GemmBF16NT(m, n, k, a, k, w, k, c, n) }
					if dt == "bf16-bf16act" {
						call = func() { GemmBF16DotNT(m, n, k, a, k, w, k, c, n) }
					}
				case "int8", "int8-bf16act":
					q, sc := QuantizeInt8(randMat(r, n, k, k), n, k, k)
					call = func() { GemmInt8NT(m, n, k, a, k, q, k, sc, k, c, n) }
					if dt == "int8-bf16act" {
						call = func() { GemmInt8DotNT(m, n, k, a, k, q, k, sc, k, c, n) }
					}
				}
				b.ResetTimer()
				for b.Loop() {
					call()
				}
				b.ReportMetric(2*float64(m)*float64(n)*float64(k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
		}
	}
}

// BenchmarkStreamRead measures the machine's streaming read bandwidth: the
// pool's threads sum disjoint parts of a 256 MiB buffer of uint64 with eight
// independent accumulators each. Its MB/s is the roofline GEMV is compared
// against.
func BenchmarkStreamRead(b *testing.B) {
	buf := make([]uint64, (256<<20)/8)
	for i := range buf {
		buf[i] = uint64(i)
	}
	sums := make([]uint64, 1024)
	b.SetBytes(int64(len(buf) * 8))
	b.ResetTimer()
	for b.Loop() {
		Parallel(len(buf)/1024, 1, func(lo, hi int) {
			for blk := lo; blk < hi; blk++ {
				sums[blk%len(sums)] += sum8(buf[blk*1024 : blk*1024+1024])
			}
		})
	}
	_ = sums
}

func sum8(x []uint64) uint64 {
	var s0, s1, s2, s3, s4, s5, s6, s7 uint64
	for i := 0; i+8 <= len(x); i += 8 {
		s0 += x[i]
		s1 += x[i+1]
		s2 += x[i+2]
		s3 += x[i+3]
		s4 += x[i+4]
		s5 += x[i+5]
		s6 += x[i+6]
		s7 += x[i+7]
	}
	return s0 + s1 + s2 + s3 + s4 + s5 + s6 + s7
}

func BenchmarkRows(b *testing.B) {
	const rows, cols = 128, 768
	r := rand.New(rand.NewPCG(3, 3))
	x := randMat(r, rows, cols, cols)
	w := randMat(r, 1, cols, cols)
	dst := make([]float32, rows*cols)
	b.Run("RMSNorm/128x768", func(b *testing.B) {
		b.SetBytes(rows * cols * 8)
		for b.Loop() {
			RMSNorm(dst, x, w, rows, cols, 1e-5, false)
		}
	})
	b.Run("SoftmaxRows/128x768", func(b *testing.B) {
		b.SetBytes(rows * cols * 8)
		for b.Loop() {
			copy(dst, x)
			SoftmaxRows(dst, rows, cols)
		}
	})
	up := randMat(r, rows, cols, cols)
	b.Run("SiLUMul/98304", func(b *testing.B) {
		b.SetBytes(rows * cols * 12)
		for b.Loop() {
			SiLUMul(dst, x, up)
		}
	})
	b.Run("AddInPlace/98304", func(b *testing.B) {
		b.SetBytes(rows * cols * 12)
		for b.Loop() {
			AddInPlace(dst, x)
		}
	})
	_ = math.Pi
}

// BenchmarkQuantizeInt8 is the load-time cost of --quantize int8 on the
// 110M Llama's classifier [32000, 768], per channel.
func BenchmarkQuantizeInt8(b *testing.B) {
	r := rand.New(rand.NewPCG(4, 4))
	n, k := 32000, 768
	w := randMat(r, n, k, k)
	b.SetBytes(int64(n * k * 4))
	for b.Loop() {
		QuantizeInt8(w, n, k, k)
	}
}

// BenchmarkDecodeRows measures the NT product of a few rows of A (the
// sequences of a decode batch) with a weight larger than the caches (the
// 110M model's 32000x768 head): the weight streams from memory once per
// call, so GB/s against BenchmarkStreamRead says how well m rows share it.
func BenchmarkDecodeRows(b *testing.B) {
	const n, k = 32000, 768
	r := rand.New(rand.NewPCG(3, 3))
	w := randMat(r, n, k, k)
	for _, m := range []int{1, 2, 4, 8, 16, 32} {
		b.Run(fmt.Sprintf("m=%d", m), func(b *testing.B) {
			a := randMat(r, m, k, k)
			c := make([]float32, m*n)
			for b.Loop() {
				GemmF32NT(m, n, k, a, k, w, k, c, n)
			}
			s := b.Elapsed().Seconds() / float64(b.N)
			b.ReportMetric(float64(n*k*4)/s/1e9, "GB/s")
			b.ReportMetric(2*float64(m*n*k)/s/1e9, "GFLOP/s")
		})
	}
}

// BenchmarkGEMMSmallM compares the two ways a bf16 weight meets a few rows
// of activations (the decode of a few sequences, or the tokens routed to one
// expert): "small", the small-m path (B read once and widened in registers,
// four B rows against every four A rows), and "blocked", the blocked GEMM
// that first widens B into f32 panels. Weights are cycled through coldBytes
// of copies, so both stream B from memory as a decode step does. The
// crossover sets smallM16Max.
func BenchmarkGEMMSmallM(b *testing.B) {
	// [out, in]: an expert's fused gate_up and its down projection of the
	// docs/moe.md benchmark model (hidden 1024, expert 512), and a dense
	// MLP's 3072x1024.
	shapes := [][2]int{{1024, 1024}, {1024, 512}, {3072, 1024}}
	for _, sh := range shapes {
		n, k := sh[0], sh[1]
		for _, m := range []int{2, 4, 8, 16, 32, 64, 96} {
			for _, path := range []string{"small", "blocked", "bf16act"} {
				b.Run(fmt.Sprintf("%dx%d/m=%d/%s", n, k, m, path), func(b *testing.B) {
					r := rand.New(rand.NewPCG(3, 3))
					a := randMat(r, m, k, k)
					c := make([]float32, m*n)
					copies := max(1, coldBytes/(2*n*k))
					ws := make([][]uint16, copies)
					for i := range ws {
						ws[i] = make([]uint16, n*k)
						for j := range ws[i] {
							ws[i][j] = uint16(0x3c00 + r.IntN(0x400))
						}
					}
					i := 0
					b.ResetTimer()
					for b.Loop() {
						w := ws[i%copies]
						i++
						switch path {
						case "small":
							if !smallMBF16(m, n, k, a, k, w, k, c, n) {
								b.Skip("no small-m kernel at this level")
							}
						case "bf16act":
							GemmBF16DotNT(m, n, k, a, k, w, k, c, n)
						default:
							gemmNT(m, n, k, a, k, nil, 0, convBF16(w, k), c, n)
						}
					}
					b.ReportMetric(2*float64(m)*float64(n)*float64(k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
					b.ReportMetric(float64(2*n*k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
				})
			}
		}
	}
}

// BenchmarkGEMMSmallMBytes: products of a few rows with one-byte weights,
// int8 in groups of 64 (--quantize int8) and FP8 in blocks of 128x128,
// the 110M Llama's MLP shapes ([out, in]); weights cycled through
// coldBytes, as a decode step meets them.
func BenchmarkGEMMSmallMBytes(b *testing.B) {
	for _, sh := range [][2]int{{2048, 768}, {768, 2048}} {
		n, k := sh[0], sh[1]
		for _, m := range []int{2, 4, 8, 16} {
			for _, dt := range []string{"int8", "fp8"} {
				b.Run(fmt.Sprintf("%s/%dx%d/m=%d", dt, n, k, m), func(b *testing.B) {
					r := rand.New(rand.NewPCG(5, 5))
					a := randMat(r, m, k, k)
					c := make([]float32, m*n)
					copies := max(1, coldBytes/(n*k))
					calls := make([]func(), copies)
					for i := range calls {
						if dt == "int8" {
							q, sc := QuantizeInt8(randMat(r, n, k, k), n, k, 64)
							calls[i] = func() { GemmInt8NT(m, n, k, a, k, q, k, sc, 64, c, n) }
						} else {
							w, sc, _ := fp8Case(r, n, k, k, 128, 128)
							calls[i] = func() { GemmFP8NT(m, n, k, a, k, w, k, sc, 128, 128, c, n) }
						}
					}
					i := 0
					for b.Loop() {
						calls[i%copies]()
						i++
					}
					b.ReportMetric(2*float64(m)*float64(n)*float64(k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
				})
			}
		}
	}
}

// BenchmarkGemvMulti: the routed experts of one token at decode (8 of a
// stack of 64 [1024, 1024] bf16 matrices, the docs/moe.md model's fused
// gate_up), one GemvMulti against one GemmBF16NT per expert; weights
// cycled through coldBytes.
func BenchmarkGemvMulti(b *testing.B) {
	const e, n, k, active = 64, 1024, 1024, 8
	r := rand.New(rand.NewPCG(4, 4))
	copies := max(1, coldBytes/(2*e*n*k))
	stacks := make([][]uint16, copies)
	for i := range stacks {
		stacks[i] = make([]uint16, e*n*k)
		for j := range stacks[i] {
			stacks[i][j] = uint16(0x3c00 + r.IntN(0x400))
		}
	}
	a := randMat(r, 1, k, k)
	c := make([]float32, active*n)
	for _, mode := range []string{"multi", "each"} {
		b.Run(mode, func(b *testing.B) {
			it := 0
			for b.Loop() {
				s := stacks[it%copies]
				it++
				ps := make([]Gemv, active)
				for x := range ps {
					ex := (x*7 + it) % e
					w := s[ex*n*k : (ex+1)*n*k]
					if mode == "each" {
						GemmBF16NT(1, n, k, a, k, w, k, c[x*n:], n)
						continue
					}
					ps[x] = Gemv{A: a, C: c[x*n : (x+1)*n], N: n, BF16: w, LDB: k}
				}
				if mode == "multi" {
					GemvMulti(k, ps)
				}
			}
			b.ReportMetric(float64(2*active*n*k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
		})
	}
}

// BenchmarkInt4Levels: int4 products at each instruction set this CPU
// has (the AVX2 kernels are what machines without AVX-512 run): a GEMV
// (decode) and a 128-row GEMM (prefill) of a 2048x2048 weight.
func BenchmarkInt4Levels(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 1))
	n, k := 2048, 2048
	w := randMat(r, n, k, k)
	lo, hi := Int4Range(w, n, k)
	table := Int4Table(lo, hi)
	packed, codes := QuantizeInt4(w, n, k, table)
	for _, l := range levels() {
		for _, m := range []int{1, 128} {
			b.Run(fmt.Sprintf("%s/m=%d", l, m), func(b *testing.B) {
				old := setLevel(l)
				defer setLevel(old)
				a := randMat(r, m, k, k)
				c := make([]float32, m*n)
				b.SetBytes(int64(len(packed) + len(codes)))
				for b.Loop() {
					GemmInt4NT(m, n, k, a, k, packed, codes, table, c, n)
				}
				b.ReportMetric(2*float64(m*n*k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
		}
	}
}

// BenchmarkGEMMLongM is a prefill's products (512 rows, the 1024-wide
// Llama's attention and MLP shapes) over every way a weight is held, 16-bit
// and compact, with f32 and bf16 activations: the compact ones decode B
// block by block, so what they cost over bf16 is the decoding.
func BenchmarkGEMMLongM(b *testing.B) {
	for _, sh := range [][3]int{{512, 1024, 1024}, {512, 2816, 1024}, {512, 1024, 2816}} {
		m, n, k := sh[0], sh[1], sh[2]
		r := rand.New(rand.NewPCG(3, 3))
		a := randMat(r, m, k, k)
		c := make([]float32, m*n)
		w16 := make([]uint16, n*k)
		for j := range w16 {
			w16[j] = uint16(0x3c00 + r.IntN(0x400))
		}
		q, sc := QuantizeInt8(randMat(r, n, k, k), n, k, 64)
		f8, f8s, _ := fp8Case(r, n, k, k, 128, 128)
		g4, g4s, g4m, _ := int4GroupsCase(r, n, k, 128, true)
		for _, v := range []struct {
			name string
			call func()
		}{
			{"bf16", func() { GemmBF16NT(m, n, k, a, k, w16, k, c, n) }},
			{"bf16-bf16act", func() { GemmBF16DotNT(m, n, k, a, k, w16, k, c, n) }},
			{"int8", func() { GemmInt8NT(m, n, k, a, k, q, k, sc, 64, c, n) }},
			{"int8-bf16act", func() { GemmInt8DotNT(m, n, k, a, k, q, k, sc, 64, c, n) }},
			{"fp8", func() { GemmFP8NT(m, n, k, a, k, f8, k, f8s, 128, 128, c, n) }},
			{"fp8-bf16act", func() { GemmFP8DotNT(m, n, k, a, k, f8, k, f8s, 128, 128, c, n) }},
			{"int4g", func() { GemmInt4GroupsNT(m, n, k, a, k, g4, g4s, g4m, 128, c, n) }},
			{"int4g-bf16act", func() { GemmInt4GroupsDotNT(m, n, k, a, k, g4, g4s, g4m, 128, c, n) }},
		} {
			b.Run(fmt.Sprintf("%s/%dx%dx%d", v.name, m, n, k), func(b *testing.B) {
				for b.Loop() {
					v.call()
				}
				b.ReportMetric(2*float64(m)*float64(n)*float64(k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
		}
	}
}
