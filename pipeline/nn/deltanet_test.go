package nn

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gomlx/gomlx/backends"
	_ "github.com/gomlx/gomlx/backends/simplego"
	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive
	"github.com/gomlx/gomlx/pkg/core/tensors"
)

// dnBackend returns the pure-Go backend with sequential op scheduling: its
// parallel scheduler can deadlock when 2×NumCPU matmul nodes are ready at
// once (each holds a worker while waiting for workers for its batch split).
func dnBackend(t testing.TB) backends.Backend {
	t.Helper()
	be, err := backends.NewWithConfig("go:ops_sequential")
	if err != nil {
		t.Fatal(err)
	}
	return be
}

func dnRand(r *rand.Rand, scale, offset float64, dims ...int) ([]float32, *tensors.Tensor) {
	n := 1
	for _, d := range dims {
		n *= d
	}
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(offset + scale*(2*r.Float64()-1))
	}
	return v, tensors.FromFlatDataAndDimensions(v, dims...)
}

func dnFlat(t *testing.T, x *tensors.Tensor) []float32 {
	t.Helper()
	v, err := tensors.CopyFlatData[float32](x)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func dnMaxRel(a, b []float32) float64 {
	num, den := 0.0, 0.0
	for i := range a {
		num = math.Max(num, math.Abs(float64(a[i])-float64(b[i])))
		den = math.Max(den, math.Abs(float64(b[i])))
	}
	return num / den
}

// dnDeltaRule64 is the gated delta rule in float64, token by token, on
// prepared inputs laid out [B, T, H, D] (beta [B, T, H]; g [B, T, H], or
// [B, T, H, Dk] a key channel each when g holds that many).
func dnDeltaRule64(q, k, v, g, beta, s0 []float32, b, t, h, dk, dv int) (out, state []float64) {
	perChannel := len(g) == b*t*h*dk && dk > 1
	state = make([]float64, len(s0))
	for i, x := range s0 {
		state[i] = float64(x)
	}
	out = make([]float64, b*t*h*dv)
	for bi := 0; bi < b; bi++ {
		for ti := 0; ti < t; ti++ {
			for hi := 0; hi < h; hi++ {
				S := state[((bi*h)+hi)*dk*dv : ((bi*h)+hi+1)*dk*dv]
				base := ((bi*t+ti)*h + hi)
				for i := range S {
					if perChannel {
						S[i] *= math.Exp(float64(g[base*dk+i/dv])) // row i/dv: key channel
					} else {
						S[i] *= math.Exp(float64(g[base]))
					}
				}
				kk := k[base*dk : (base+1)*dk]
				qq := q[base*dk : (base+1)*dk]
				vv := v[base*dv : (base+1)*dv]
				for j := 0; j < dv; j++ {
					mem := 0.0
					for i := 0; i < dk; i++ {
						mem += S[i*dv+j] * float64(kk[i])
					}
					delta := (float64(vv[j]) - mem) * float64(beta[base])
					for i := 0; i < dk; i++ {
						S[i*dv+j] += float64(kk[i]) * delta
					}
				}
				for j := 0; j < dv; j++ {
					o := 0.0
					for i := 0; i < dk; i++ {
						o += S[i*dv+j] * float64(qq[i])
					}
					out[base*dv+j] = o
				}
			}
		}
	}
	return out, state
}

func dnRel64(a []float32, b []float64) float64 {
	num, den := 0.0, 0.0
	for i := range b {
		num = math.Max(num, math.Abs(float64(a[i])-b[i]))
		den = math.Max(den, math.Abs(b[i]))
	}
	return num / den
}

// TestGatedDeltaRuleChunkedMatchesRecurrent checks the chunked form (with
// several chunks, a padded last chunk and a carried-in state) and the
// recurrent form against a float64 token-by-token loop.
func TestGatedDeltaRuleChunkedMatchesRecurrent(t *testing.T) {
	be := dnBackend(t)
	r := rand.New(rand.NewPCG(1, 2))
	const b, tt, hk, hv, dk, dv = 2, 13, 2, 4, 8, 6
	_, qT := dnRand(r, 1, 0, b, tt, hk, dk)
	_, kT := dnRand(r, 1, 0, b, tt, hk, dk)
	_, vT := dnRand(r, 1, 0, b, tt, hv, dv)
	_, gT := dnRand(r, 1.5, -1.6, b, tt, hv) // log-decays in [-3.1, -0.1]
	_, betaT := dnRand(r, 0.45, 0.5, b, tt, hv)
	_, sT := dnRand(r, 0.5, 0, b, hv, dk, dv)
	// Prepared q, k (l2-normalized, repeated, scaled) as the graph sees them.
	prep := MustExecOnceN(be, func(q, k *Node) (*Node, *Node) { return DeltaRuleInputs(q, k, hv) }, qT, kT)
	qp, kp := dnFlat(t, prep[0]), dnFlat(t, prep[1])
	want, wantS := dnDeltaRule64(qp, kp, dnFlat(t, vT), dnFlat(t, gT), dnFlat(t, betaT), dnFlat(t, sT), b, tt, hv, dk, dv)

	for _, chunk := range []int{4, 64} {
		outs := MustExecOnceN(be, func(in []*Node) []*Node {
			q, k := DeltaRuleInputs(in[0], in[1], hv)
			o, s := ChunkGatedDeltaRule(q, k, in[2], in[3], in[4], in[5], chunk)
			return []*Node{o, s}
		}, qT, kT, vT, gT, betaT, sT)
		e := dnRel64(dnFlat(t, outs[0]), want)
		t.Logf("chunk %d: output relative error %.3g", chunk, e)
		if e > 1e-5 {
			t.Errorf("chunk %d: output relative error %.3g", chunk, e)
		}
		if e := dnRel64(dnFlat(t, outs[1]), wantS); e > 1e-5 {
			t.Errorf("chunk %d: state relative error %.3g", chunk, e)
		}
	}
	outs := MustExecOnceN(be, func(in []*Node) []*Node {
		q, k := DeltaRuleInputs(in[0], in[1], hv)
		o, s := RecurrentGatedDeltaRule(q, k, in[2], in[3], in[4], in[5])
		return []*Node{o, s}
	}, qT, kT, vT, gT, betaT, sT)
	if e := dnRel64(dnFlat(t, outs[0]), want); e > 1e-5 {
		t.Errorf("recurrent: output relative error %.3g", e)
	}
	if e := dnRel64(dnFlat(t, outs[1]), wantS); e > 1e-5 {
		t.Errorf("recurrent: state relative error %.3g", e)
	}
}

// TestKDAChunkedMatchesRecurrent is the same check with a log-decay a
// key channel (Kimi Delta Attention): decays spread over three orders of
// magnitude between channels, one in 17 of −40, so that over the chunks
// of 32 (the 64 asked for, capped at the next power of two >= T) some
// channels' exp(−γ) would overflow float32 (past 88.7; the chunked form
// must not form it), and the result against the float64 loop.
func TestKDAChunkedMatchesRecurrent(t *testing.T) {
	be := dnBackend(t)
	r := rand.New(rand.NewPCG(5, 6))
	const b, tt, h, dk, dv = 2, 21, 3, 8, 6
	_, qT := dnRand(r, 1, 0, b, tt, h, dk)
	_, kT := dnRand(r, 1, 0, b, tt, h, dk)
	_, vT := dnRand(r, 1, 0, b, tt, h, dv)
	g := make([]float32, b*tt*h*dk)
	for i := range g {
		g[i] = -float32(math.Pow(10, 3*r.Float64()-2)) // in [-10, -0.01]
		if i%17 == 0 {
			g[i] = -40
		}
	}
	gT := tensors.FromFlatDataAndDimensions(g, b, tt, h, dk)
	_, betaT := dnRand(r, 0.45, 0.5, b, tt, h)
	_, sT := dnRand(r, 0.5, 0, b, h, dk, dv)
	prep := MustExecOnceN(be, func(q, k *Node) (*Node, *Node) { return DeltaRuleInputs(q, k, h) }, qT, kT)
	qp, kp := dnFlat(t, prep[0]), dnFlat(t, prep[1])
	want, wantS := dnDeltaRule64(qp, kp, dnFlat(t, vT), g, dnFlat(t, betaT), dnFlat(t, sT), b, tt, h, dk, dv)

	run := func(name string, rule func(q, k, v, g, beta, s *Node) (*Node, *Node)) {
		outs := MustExecOnceN(be, func(in []*Node) []*Node {
			q, k := DeltaRuleInputs(in[0], in[1], h)
			o, s := rule(q, k, in[2], in[3], in[4], in[5])
			return []*Node{o, s}
		}, qT, kT, vT, gT, betaT, sT)
		e := dnRel64(dnFlat(t, outs[0]), want)
		t.Logf("%s: output relative error %.3g", name, e)
		if e > 1e-5 || math.IsNaN(e) {
			t.Errorf("%s: output relative error %.3g", name, e)
		}
		if e := dnRel64(dnFlat(t, outs[1]), wantS); e > 1e-5 || math.IsNaN(e) {
			t.Errorf("%s: state relative error %.3g", name, e)
		}
	}
	for _, chunk := range []int{4, 16, 64} {
		run(fmt.Sprintf("chunk %d", chunk), func(q, k, v, g, beta, s *Node) (*Node, *Node) {
			return ChunkGatedDeltaRule(q, k, v, g, beta, s, chunk)
		})
	}
	run("recurrent", RecurrentGatedDeltaRule)

	// One decay a head (the channels' mean) is a different rule: the
	// check above can tell them apart.
	mean := make([]float32, b*tt*h)
	for i := range mean {
		for d := 0; d < dk; d++ {
			mean[i] += g[i*dk+d] / dk
		}
	}
	scalar, _ := dnDeltaRule64(qp, kp, dnFlat(t, vT), mean, dnFlat(t, betaT), dnFlat(t, sT), b, tt, h, dk, dv)
	if e := dnRel64(float32s(scalar), want); e < 1e-2 {
		t.Errorf("a decay a head gives the per-channel output within %.3g: the check cannot tell them apart", e)
	}
}

func float32s(x []float64) []float32 {
	out := make([]float32, len(x))
	for i, v := range x {
		out[i] = float32(v)
	}
	return out
}

// TestUnitLowerInverse checks (I+L)·inv = I for a strictly lower L with
// entries up to 1 (the size of β k·k for normalized keys).
func TestUnitLowerInverse(t *testing.T) {
	be := dnBackend(t)
	r := rand.New(rand.NewPCG(3, 4))
	for _, n := range []int{1, 2, 16, 64} {
		l := make([]float32, 3*n*n)
		for m := 0; m < 3; m++ {
			for i := 0; i < n; i++ {
				for j := 0; j < i; j++ {
					l[m*n*n+i*n+j] = float32(2*r.Float64() - 1)
				}
			}
		}
		inv := dnFlat(t, MustExecOnce(be, unitLowerInverse, tensors.FromFlatDataAndDimensions(l, 3, n, n)))
		worst := 0.0
		for m := 0; m < 3; m++ {
			for i := 0; i < n; i++ {
				for j := 0; j < n; j++ {
					s := float64(inv[m*n*n+i*n+j])
					for p := 0; p < i; p++ {
						s += float64(l[m*n*n+i*n+p]) * float64(inv[m*n*n+p*n+j])
					}
					want := 0.0
					if i == j {
						want = 1
					}
					worst = math.Max(worst, math.Abs(s-want))
				}
			}
		}
		t.Logf("n=%d: |(I+L)·inv - I| = %.3g", n, worst)
		if worst > 1e-3 {
			t.Errorf("n=%d: |(I+L)·inv - I| = %.3g", n, worst)
		}
	}
}

// TestCausalConv1DStreaming checks that a convolution run over a whole
// sequence equals the same convolution continued from its state in pieces,
// and a direct evaluation of the zero-padded sum.
func TestCausalConv1DStreaming(t *testing.T) {
	be := dnBackend(t)
	r := rand.New(rand.NewPCG(5, 6))
	const b, tt, c, k = 2, 7, 5, 4
	x, xT := dnRand(r, 1, 0, b, tt, c)
	w, wT := dnRand(r, 1, 0, c, 1, k)
	zero := tensors.FromFlatDataAndDimensions(make([]float32, b*(k-1)*c), b, k-1, c)
	fullOut := MustExecOnceN(be, func(x, s, w *Node) (*Node, *Node) { return CausalConv1D(x, s, w) }, xT, zero, wT)
	got := dnFlat(t, fullOut[0])
	for bi := 0; bi < b; bi++ {
		for ti := 0; ti < tt; ti++ {
			for ci := 0; ci < c; ci++ {
				want := 0.0
				for j := 0; j < k; j++ {
					src := ti + j - (k - 1)
					if src >= 0 {
						want += float64(w[ci*k+j]) * float64(x[(bi*tt+src)*c+ci])
					}
				}
				if g := float64(got[(bi*tt+ti)*c+ci]); math.Abs(g-want) > 1e-5 {
					t.Fatalf("out[%d,%d,%d] = %g, want %g", bi, ti, ci, g, want)
				}
			}
		}
	}
	// The same sequence as 4 + 1 + 2 tokens, carrying the state.
	state := zero
	var pieces [][]float32
	for _, span := range [][2]int{{0, 4}, {4, 5}, {5, 7}} {
		part := make([]float32, 0, b*(span[1]-span[0])*c)
		for bi := 0; bi < b; bi++ {
			part = append(part, x[(bi*tt+span[0])*c:(bi*tt+span[1])*c]...)
		}
		outs := MustExecOnceN(be, func(x, s, w *Node) (*Node, *Node) { return CausalConv1D(x, s, w) },
			tensors.FromFlatDataAndDimensions(part, b, span[1]-span[0], c), state, wT)
		pieces = append(pieces, dnFlat(t, outs[0]))
		state = outs[1]
	}
	for bi := 0; bi < b; bi++ {
		off := 0
		for pi, span := range [][2]int{{0, 4}, {4, 5}, {5, 7}} {
			n := span[1] - span[0]
			for ti := 0; ti < n; ti++ {
				for ci := 0; ci < c; ci++ {
					g := pieces[pi][(bi*n+ti)*c+ci]
					want := got[(bi*tt+span[0]+ti)*c+ci]
					if math.Abs(float64(g-want)) > 1e-5 {
						t.Fatalf("streamed out[%d,%d,%d] = %g, want %g", bi, span[0]+ti, ci, g, want)
					}
				}
			}
			off += n
		}
	}
	if e := dnMaxRel(dnFlat(t, state), dnFlat(t, fullOut[1])); e > 0 {
		t.Errorf("streamed final state differs from the whole-sequence state (%.3g)", e)
	}
}
