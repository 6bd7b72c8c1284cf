package nn

import (
	"math"
	"math/rand/v2"
	"testing"

	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive
	"github.com/gomlx/gomlx/pkg/core/tensors"
)

// ssd64 is Mamba-2's recurrence in float64, token by token: x [B, T, H,
// P], dt [B, T, H], a [H], b and c [B, T, G, N], s0 [B, H, P, N] -> y
// [B, T, H, P] (without the D skip) and the final state.
func ssd64(x, dt, a, b, c, s0 []float32, bs, t, h, p, g, n int) (y, state []float64) {
	state = make([]float64, len(s0))
	for i, v := range s0 {
		state[i] = float64(v)
	}
	y = make([]float64, len(x))
	r := h / g
	for bi := 0; bi < bs; bi++ {
		for ti := 0; ti < t; ti++ {
			for hi := 0; hi < h; hi++ {
				gi := hi / r
				d := float64(dt[(bi*t+ti)*h+hi])
				decay := math.Exp(d * float64(a[hi]))
				for pi := 0; pi < p; pi++ {
					xv := float64(x[((bi*t+ti)*h+hi)*p+pi])
					sum := 0.0
					for ni := 0; ni < n; ni++ {
						si := ((bi*h+hi)*p+pi)*n + ni
						bv := float64(b[((bi*t+ti)*g+gi)*n+ni])
						cv := float64(c[((bi*t+ti)*g+gi)*n+ni])
						state[si] = decay*state[si] + d*xv*bv
						sum += state[si] * cv
					}
					y[((bi*t+ti)*h+hi)*p+pi] = sum
				}
			}
		}
	}
	return y, state
}

// TestSSDChunkedMatchesRecurrent checks the chunked form (several chunks,
// a padded last chunk, a carried-in state, two groups of heads) and the
// token-by-token form against a float64 loop, with decays from 0.05 to
// nearly 1 a token.
func TestSSDChunkedMatchesRecurrent(t *testing.T) {
	be := dnBackend(t)
	r := rand.New(rand.NewPCG(3, 4))
	const bs, tt, h, p, g, n = 2, 13, 4, 3, 2, 5
	x, xT := dnRand(r, 1, 0, bs, tt, h, p)
	dt, dtT := dnRand(r, 0.4, 0.45, bs, tt, h) // steps in [0.05, 0.85]
	a, aT := dnRand(r, 1.5, -2, h)             // decays a in [-3.5, -0.5]
	b, bT := dnRand(r, 1, 0, bs, tt, g, n)
	c, cT := dnRand(r, 1, 0, bs, tt, g, n)
	s0, sT := dnRand(r, 0.5, 0, bs, h, p, n)
	want, wantS := ssd64(x, dt, a, b, c, s0, bs, tt, h, p, g, n)
	check := func(name string, outs []*tensors.Tensor) {
		t.Helper()
		if e := dnRel64(dnFlat(t, outs[0]), want); e > 1e-5 {
			t.Errorf("%s: output relative error %.3g", name, e)
		}
		if e := dnRel64(dnFlat(t, outs[1]), wantS); e > 1e-5 {
			t.Errorf("%s: state relative error %.3g", name, e)
		}
	}
	for _, chunk := range []int{1, 4, 64} {
		check("chunked", MustExecOnceN(be, func(in []*Node) []*Node {
			y, s := ChunkSSD(in[0], in[1], in[2], in[3], in[4], in[5], chunk)
			return []*Node{y, s}
		}, xT, dtT, aT, bT, cT, sT))
	}
	check("recurrent", MustExecOnceN(be, func(in []*Node) []*Node {
		y, s := RecurrentSSD(in[0], in[1], in[2], in[3], in[4], in[5])
		return []*Node{y, s}
	}, xT, dtT, aT, bT, cT, sT))
}

// TestGatedRMSNormFirst checks the gate-then-normalize order and the
// groups against a float64 loop.
func TestGatedRMSNormFirst(t *testing.T) {
	be := dnBackend(t)
	r := rand.New(rand.NewPCG(5, 6))
	const rows, d = 3, 8
	x, xT := dnRand(r, 1, 0, rows, d)
	gate, gT := dnRand(r, 2, 0, rows, d)
	w, wT := dnRand(r, 0.5, 1, d)
	for _, groups := range []int{1, 2} {
		got := dnFlat(t, MustExecOnce(be, func(x, g, w *Node) *Node { return GatedRMSNormFirst(x, g, w, 1e-6, groups) }, xT, gT, wT))
		want := make([]float64, len(x))
		gs := d / groups
		for i := 0; i < rows; i++ {
			for k := 0; k < groups; k++ {
				z := make([]float64, gs)
				ms := 0.0
				for j := range z {
					at := i*d + k*gs + j
					gv := float64(gate[at])
					z[j] = float64(x[at]) * gv / (1 + math.Exp(-gv))
					ms += z[j] * z[j] / float64(gs)
				}
				for j := range z {
					want[i*d+k*gs+j] = z[j] / math.Sqrt(ms+1e-6) * float64(w[k*gs+j])
				}
			}
		}
		if e := dnRel64(got, want); e > 1e-6 {
			t.Errorf("groups %d: relative error %.3g", groups, e)
		}
	}
}

// TestChunkDecays checks the scan's cumulative sums and the decays
// between positions against float64 loops, on chunks of 5 and 64.
func TestChunkDecays(t *testing.T) {
	be := dnBackend(t)
	r := rand.New(rand.NewPCG(7, 8))
	for _, cs := range []int{5, 64} {
		g, gT := dnRand(r, 1, -1.2, 2, 3, cs)
		outs := MustExecOnceN(be, func(g *Node) (*Node, *Node) { return chunkDecays(g) }, gT)
		cum, decay := dnFlat(t, outs[0]), dnFlat(t, outs[1])
		for row := 0; row < 6; row++ {
			sums := make([]float64, cs)
			acc := 0.0
			for i := 0; i < cs; i++ {
				acc += float64(g[row*cs+i])
				sums[i] = acc
				if d := math.Abs(float64(cum[row*cs+i]) - acc); d > 1e-4 {
					t.Fatalf("chunk %d, row %d: γ_%d %g, want %g", cs, row, i, cum[row*cs+i], acc)
				}
			}
			for i := 0; i < cs; i++ {
				for j := 0; j < cs; j++ {
					want := 0.0
					if j <= i {
						want = math.Exp(sums[i] - sums[j])
					}
					if d := math.Abs(float64(decay[(row*cs+i)*cs+j]) - want); d > 1e-5 {
						t.Fatalf("chunk %d, row %d: Γ_%d,%d %g, want %g", cs, row, i, j, decay[(row*cs+i)*cs+j], want)
					}
				}
			}
		}
	}
}
