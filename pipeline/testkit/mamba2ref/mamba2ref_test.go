package mamba2ref

import (
	"math"
	"slices"
	"testing"

	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
)

// nearAll fails unless got and want agree to tol everywhere.
func nearAll(t *testing.T, what string, got, want []float64, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	for i := range want {
		if math.Abs(got[i]-want[i]) > tol {
			t.Fatalf("%s: %v, want %v", what, got, want)
		}
	}
}

// maxAbsDiff is the largest |a-b| over two tables of the same shape.
func maxAbsDiff(a, b [][]float64) float64 {
	d := 0.0
	for i := range a {
		for j := range a[i] {
			d = math.Max(d, math.Abs(a[i][j]-b[i][j]))
		}
	}
	return d
}

// randSeq is T rows of n values uniform in [-1, 1).
func randSeq(r *lmckpt.Rand, T, n int) [][]float64 {
	out := make([][]float64, T)
	for t := range out {
		out[t] = make([]float64, n)
		for i := range out[t] {
			out[t][i] = r.Uniform()
		}
	}
	return out
}

func zeros(P, N int) [][]float64 {
	out := make([][]float64, P)
	for i := range out {
		out[i] = make([]float64, N)
	}
	return out
}

// TestSoftplus: torch's softplus is log1p(exp(x)) up to 20 and x above.
func TestSoftplus(t *testing.T) {
	nearAll(t, "softplus", []float64{Softplus(0), Softplus(-3), Softplus(2), Softplus(20), Softplus(20.5), Softplus(50)},
		[]float64{math.Ln2, math.Log1p(math.Exp(-3)), math.Log1p(math.Exp(2)), math.Log1p(math.Exp(20)), 20.5, 50}, 1e-15)
}

// TestCausalConv: kernel 3 on two channels over 4 steps: out[t] =
// b + w0·x[t-2] + w1·x[t-1] + w2·x[t] with zeros before the start (the
// LAST tap multiplies the current token).
func TestCausalConv(t *testing.T) {
	xs := [][]float64{{1, 10}, {2, 20}, {3, 30}, {4, 40}}
	w := []float64{0.5, -1, 2, 1, 0, -0.25}
	b := []float64{0.1, -0.2}
	got := CausalConv(xs, w, b, 3)
	want := [][]float64{
		{0.1 + 2*1, -0.2 - 0.25*10},
		{0.1 - 1*1 + 2*2, -0.2 + 0*10 - 0.25*20},
		{0.1 + 0.5*1 - 1*2 + 2*3, -0.2 + 1*10 + 0*20 - 0.25*30},
		{0.1 + 0.5*2 - 1*3 + 2*4, -0.2 + 1*20 + 0*30 - 0.25*40},
	}
	for i := range want {
		nearAll(t, "conv", got[i], want[i], 1e-14)
	}
	nearAll(t, "conv without bias", CausalConv(xs, w, nil, 3)[0], []float64{2, -2.5}, 1e-15)
}

// TestScanHandWorked: one head of P = N = 1: s_t = exp(dt_t·a)·s_{t-1} +
// dt_t·x_t·b_t, y_t = s_t·c_t + d·x_t.
func TestScanHandWorked(t *testing.T) {
	x := [][]float64{{1}, {-2}, {0.5}}
	B := [][]float64{{2}, {1}, {-1}}
	C := [][]float64{{0.5}, {3}, {2}}
	dt := [][]float64{{0.1}, {0.5}, {1}}
	a, d := -2.0, 0.7
	s1 := 0.1 * 1 * 2
	s2 := math.Exp(-1)*s1 + 0.5*(-2)*1
	s3 := math.Exp(-2)*s2 + 1*0.5*(-1)
	want := []float64{s1*0.5 + d*1, s2*3 + d*(-2), s3*2 + d*0.5}
	y := Scan(x, B, C, dt, []float64{a}, []float64{d}, 1)
	nearAll(t, "scan", []float64{y[0][0], y[1][0], y[2][0]}, want, 1e-15)
}

// TestScanGroups: with 4 heads in 2 groups, heads 0-1 read the first N
// entries of B and C and heads 2-3 the second: zeroing group 1's B leaves
// heads 0-1 alone and leaves heads 2-3 only the D term.
func TestScanGroups(t *testing.T) {
	r := lmckpt.NewRand(7)
	T, heads, P, G, N := 5, 4, 3, 2, 2
	x, B, C, dt := randSeq(r, T, heads*P), randSeq(r, T, G*N), randSeq(r, T, G*N), randSeq(r, T, heads)
	for t := range dt {
		for i := range dt[t] {
			dt[t][i] = Softplus(dt[t][i])
		}
	}
	A, D := []float64{-1, -0.5, -2, -0.3}, []float64{1, 0.9, 1.1, 0.8}
	y := Scan(x, B, C, dt, A, D, G)
	B2 := make([][]float64, T)
	for t := range B {
		B2[t] = slices.Clone(B[t])
		B2[t][2], B2[t][3] = 0, 0
	}
	y2 := Scan(x, B2, C, dt, A, D, G)
	for i := range y {
		nearAll(t, "group 0 heads", y2[i][:2*P], y[i][:2*P], 0)
		for j := 2 * P; j < heads*P; j++ {
			if want := D[j/P] * x[i][j]; y2[i][j] != want {
				t.Fatalf("token %d, channel %d: %g, want the D term %g", i, j, y2[i][j], want)
			}
		}
	}
	if maxAbsDiff(y2, y) == 0 {
		t.Error("zeroing group 1's B changes nothing")
	}
}

// segsum is transformers' segment_sum on v [L]: out[i][j] = Σ_{j<k<=i} v[k]
// for j <= i and -Inf above the diagonal, computed as torch does: v
// repeated along a new last axis, zeroed where i <= j, summed cumulatively
// over i, then -Inf where i < j.
func segsum(v []float64) [][]float64 {
	L := len(v)
	out := make([][]float64, L)
	for i := range out {
		out[i] = make([]float64, L)
		for j := range out[i] {
			term := 0.0
			if i > j {
				term = v[i]
			}
			if i > 0 {
				term += out[i-1][j]
			}
			out[i][j] = term
		}
	}
	for i := range out {
		for j := i + 1; j < L; j++ {
			out[i][j] = math.Inf(-1)
		}
	}
	return out
}

// chunkedSSD is the no-cache SSD half of torch_forward, head by head: x
// discretized by dt and A·dt, both zero-padded to chunks of L; per chunk c
// the diagonal block Y_diag[l] = Σ_{s<=l} (C_l·B_s)·exp(segsum(A_c)[l][s])·
// x_s, the chunk's own final state Σ_s exp(Acum[L-1] - Acum[s])·x_s ⊗ B_s;
// the states entering every chunk from the segment sums of the chunk
// totals with a zero initial state in front (decay_chunk); Y_off[l] =
// exp(Acum[l])·C_l·state_in; then D·x added and the padding cut off.
func chunkedSSD(x, B, C, dt [][]float64, A, D []float64, G, L int) [][]float64 {
	T, heads := len(x), len(A)
	P, N := len(x[0])/heads, len(B[0])/G
	per := heads / G
	pad := (L - T%L) % L
	nc := (T + pad) / L
	y := make([][]float64, T+pad)
	for t := range y {
		y[t] = make([]float64, heads*P)
	}
	for h := 0; h < heads; h++ {
		g := h / per
		xd, bh, ch := zeros(T+pad, P), zeros(T+pad, N), zeros(T+pad, N)
		a := make([]float64, T+pad)
		for t := 0; t < T; t++ {
			for p := 0; p < P; p++ {
				xd[t][p] = x[t][h*P+p] * dt[t][h]
			}
			copy(bh[t], B[t][g*N:(g+1)*N])
			copy(ch[t], C[t][g*N:(g+1)*N])
			a[t] = A[h] * dt[t][h]
		}
		acum := make([][]float64, nc)
		own := make([][][]float64, nc+1) // own[0]: the zero initial state
		own[0] = zeros(P, N)
		totals := make([]float64, nc+1)
		for c := 0; c < nc; c++ {
			seg := a[c*L : (c+1)*L]
			acum[c] = make([]float64, L)
			run := 0.0
			for l, v := range seg {
				run += v
				acum[c][l] = run
			}
			totals[c+1] = run
			Lm := segsum(seg)
			for l := 0; l < L; l++ {
				for s := 0; s <= l; s++ {
					cb := 0.0
					for n := 0; n < N; n++ {
						cb += ch[c*L+l][n] * bh[c*L+s][n]
					}
					w := cb * math.Exp(Lm[l][s])
					for p := 0; p < P; p++ {
						y[c*L+l][h*P+p] += w * xd[c*L+s][p]
					}
				}
			}
			st := zeros(P, N)
			for s := 0; s < L; s++ {
				decay := math.Exp(run - acum[c][s])
				for p := 0; p < P; p++ {
					for n := 0; n < N; n++ {
						st[p][n] += decay * bh[c*L+s][n] * xd[c*L+s][p]
					}
				}
			}
			own[c+1] = st
		}
		decayChunk := segsum(totals)
		for c := 0; c < nc; c++ {
			in := zeros(P, N)
			for k := 0; k <= c; k++ {
				w := math.Exp(decayChunk[c][k])
				for p := 0; p < P; p++ {
					for n := 0; n < N; n++ {
						in[p][n] += w * own[k][p][n]
					}
				}
			}
			for l := 0; l < L; l++ {
				out := math.Exp(acum[c][l])
				for p := 0; p < P; p++ {
					s := 0.0
					for n := 0; n < N; n++ {
						s += ch[c*L+l][n] * in[p][n]
					}
					y[c*L+l][h*P+p] += s * out
				}
			}
		}
		for t := 0; t < T; t++ {
			for p := 0; p < P; p++ {
				y[t][h*P+p] += D[h] * x[t][h*P+p]
			}
		}
	}
	return y[:T]
}

// TestScanMatchesChunked: the token-by-token recurrence and the chunked
// SSD form of torch_forward (chunks of 4 over 11 tokens: two full chunks
// and a padded one, and other chunk sizes) agree to 1e-9 on random inputs
// of 1, 2 and 4 groups, with moderate steps (dt from 0.08 to 0.97) and
// with a spread wider than the tiny models' mixers show (dt from 0.002 to
// 1.5, A from -1 on head 0 to -4 on the last: decays from 0.998 down to
// 0.0025; granitehref's and nemotronhref's TestDecayRange log theirs).
func TestScanMatchesChunked(t *testing.T) {
	r := lmckpt.NewRand(11)
	for _, wide := range []bool{false, true} {
		for _, G := range []int{1, 2, 4} {
			T, heads, P, N := 11, 8, 6, 16/G
			x, B, C, raw := randSeq(r, T, heads*P), randSeq(r, T, G*N), randSeq(r, T, G*N), randSeq(r, T, heads)
			dt := make([][]float64, T)
			for t := range raw {
				dt[t] = make([]float64, heads)
				for i, v := range raw[t] {
					if wide {
						dt[t][i] = 0.002 * math.Pow(750, (1+v)/2)
					} else {
						dt[t][i] = Softplus(1.5*v - 1)
					}
				}
			}
			A, D := make([]float64, heads), make([]float64, heads)
			for i := range A {
				A[i] = -math.Exp(r.Uniform())
				if wide {
					A[i] = -(1 + 3*float64(i)/float64(heads-1))
				}
				D[i] = 1 + 0.3*r.Uniform()
			}
			want := Scan(x, B, C, dt, A, D, G)
			for _, L := range []int{4, 1, 11, 16} {
				if d := maxAbsDiff(chunkedSSD(x, B, C, dt, A, D, G, L), want); d > 1e-9 {
					t.Errorf("wide %v, %d groups, chunk %d: chunked and recurrent scans differ by %g", wide, G, L, d)
				}
			}
		}
	}
}

// TestGatedNorm: y = (1, 2, 3, 4), gate (0, 1, 2, -1), weights (1, 2, 1,
// 0.5), eps 0.25: z = y·silu(gate) normed over all four entries with one
// group, (z0, z1) and (z2, z3) apart with two; beforeGate norms y (whole
// or per group) and then multiplies by silu(gate).
func TestGatedNorm(t *testing.T) {
	y, g, w := []float64{1, 2, 3, 4}, []float64{0, 1, 2, -1}, []float64{1, 2, 1, 0.5}
	z := make([]float64, 4)
	for i := range z {
		z[i] = y[i] * lmckpt.SiLU64(g[i])
	}
	rms := func(v []float64) float64 {
		s := 0.0
		for _, x := range v {
			s += x * x
		}
		return math.Sqrt(s/float64(len(v)) + 0.25)
	}
	r, r0, r1, ry, ry0, ry1 := rms(z), rms(z[:2]), rms(z[2:]), rms(y), rms(y[:2]), rms(y[2:])
	s := lmckpt.SiLU64
	nearAll(t, "whole", GatedNorm(y, g, w, 0.25, 1, false), []float64{z[0] / r, 2 * z[1] / r, z[2] / r, 0.5 * z[3] / r}, 1e-15)
	nearAll(t, "two groups", GatedNorm(y, g, w, 0.25, 2, false), []float64{z[0] / r0, 2 * z[1] / r0, z[2] / r1, 0.5 * z[3] / r1}, 1e-15)
	nearAll(t, "before the gate, whole", GatedNorm(y, g, w, 0.25, 1, true),
		[]float64{0, 2 * 2 / ry * s(1), 3 / ry * s(2), 0.5 * 4 / ry * s(-1)}, 1e-15)
	nearAll(t, "before the gate, two groups", GatedNorm(y, g, w, 0.25, 2, true),
		[]float64{0, 2 * 2 / ry0 * s(1), 3 / ry1 * s(2), 0.5 * 4 / ry1 * s(-1)}, 1e-15)
}

// TestInputs: in_proj's output is [gate | xBC | dt]. With in_proj the
// identity plus a bias of 0.5 on a one-token input (hidden 1, I 4,
// conv_dim 6, 2 heads) and a conv1d of kernel 1 and weights 1, the gate is
// the first 4 entries, x, B and C the next 6 through SiLU, and dt the last
// 2 through softplus with dt_bias, clamped from below at DtMin; A =
// -exp(A_log). Without dt_bias, D or the floor, each drops out.
func TestInputs(t *testing.T) {
	inW, inB := make([]float64, 12), make([]float64, 12)
	for i := range inW {
		inW[i] = float64(i + 1)
		inB[i] = 0.5
	}
	m := Mixer{
		Heads: 2, HeadDim: 2, Groups: 1, State: 1, Kernel: 1,
		InProj: inW, InBias: inB, Conv: []float64{1, 1, 1, 1, 1, 1},
		DtBias: []float64{-10, -20}, ALog: []float64{0, math.Log(2)}, D: []float64{0.5, 0.25},
		DtMin: 0.001,
	}
	h := [][]float64{{1}}
	in := m.Inputs(h)
	s := lmckpt.SiLU64
	nearAll(t, "gate", in.Gate[0], []float64{1.5, 2.5, 3.5, 4.5}, 0)
	nearAll(t, "x", in.X[0], []float64{s(5.5), s(6.5), s(7.5), s(8.5)}, 1e-15)
	nearAll(t, "B, C", append(slices.Clone(in.B[0]), in.C[0]...), []float64{s(9.5), s(10.5)}, 1e-15)
	// softplus(11.5 - 10) = 1.70; softplus(12.5 - 20) = 5.5e-4, clamped.
	nearAll(t, "dt", in.Dt[0], []float64{Softplus(1.5), 0.001}, 1e-15)
	nearAll(t, "A, D", append(slices.Clone(in.A), in.D...), []float64{-1, -2, 0.5, 0.25}, 1e-15)
	m.DtMin = 0
	nearAll(t, "dt unclamped", m.Inputs(h).Dt[0], []float64{Softplus(1.5), Softplus(-7.5)}, 1e-15)
	m.DtBias, m.D = nil, nil
	in = m.Inputs(h)
	nearAll(t, "dt without dt_bias", in.Dt[0], []float64{Softplus(11.5), Softplus(12.5)}, 1e-15)
	nearAll(t, "no D", in.D, []float64{0, 0}, 0)
}
