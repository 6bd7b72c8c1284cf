package nn

import (
	"math/rand/v2"
	"testing"

	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive
	"github.com/gomlx/gomlx/pkg/core/tensors"

	"github.com/tputool/tputool/pipeline/lm"
)

// shortConv64 is Lfm2ShortConv in float64 on one row x [T][H] from the
// state (the last K-1 inputs B·x, [K-1][H]): the outputs [T][H] and the
// new state.
func shortConv64(x, inW, inB, conv, convB, outW, outB []float32, state []float64, t, h, k int) (y []float64, next []float64) {
	lin := func(v []float64, w, b []float32, rows int) []float64 {
		out := make([]float64, rows)
		for r := range out {
			s := 0.0
			if b != nil {
				s = float64(b[r])
			}
			for c, xv := range v {
				s += float64(w[r*len(v)+c]) * xv
			}
			out[r] = s
		}
		return out
	}
	hist := append([]float64(nil), state...) // [(K-1+T)·H] inputs B·x, oldest first
	var gates [][]float64
	for i := 0; i < t; i++ {
		row := make([]float64, h)
		for j := range row {
			row[j] = float64(x[i*h+j])
		}
		bcx := lin(row, inW, inB, 3*h)
		u := make([]float64, h)
		for j := range u {
			u[j] = bcx[j] * bcx[2*h+j]
		}
		hist = append(hist, u...)
		gates = append(gates, bcx[h:2*h])
	}
	for i := 0; i < t; i++ {
		g := make([]float64, h)
		for j := 0; j < h; j++ {
			s := 0.0
			if convB != nil {
				s = float64(convB[j])
			}
			for tap := 0; tap < k; tap++ {
				s += float64(conv[j*k+tap]) * hist[(i+tap)*h+j]
			}
			g[j] = gates[i][j] * s
		}
		y = append(y, lin(g, outW, outB, h)...)
	}
	return y, hist[len(hist)-(k-1)*h:]
}

// TestShortConv checks ShortConv against a float64 loop: a whole
// sequence from a state, the same sequence in two steps carrying the
// state, and a row left-padded by two slots, whose real tokens give the
// unpadded row's outputs and state.
func TestShortConv(t *testing.T) {
	be := dnBackend(t)
	r := rand.New(rand.NewPCG(5, 6))
	const h, k, tt = 6, 3, 7
	inW, inWT := dnRand(r, 0.5, 0, 3*h, h)
	inB, inBT := dnRand(r, 0.2, 0, 3*h)
	conv, convT := dnRand(r, 1, 0, h, 1, k)
	convB, convBT := dnRand(r, 0.2, 0, h)
	outW, outWT := dnRand(r, 0.5, 0, h, h)
	outB, outBT := dnRand(r, 0.2, 0, h)
	x, _ := dnRand(r, 1, 0, tt, h)
	s0, _ := dnRand(r, 1, 0, k-1, h)
	s064 := make([]float64, len(s0))
	for i, v := range s0 {
		s064[i] = float64(v)
	}
	want, wantS := shortConv64(x, inW, inB, conv, convB, outW, outB, s064, tt, h, k)

	// run is ShortConv on rows xs [B, T, H] at positions [B, T] from
	// states [B, K-1, H].
	run := func(xs []float32, pos []int32, st []float32, b, n int) (y, s []float32) {
		outs := MustExecOnceN(be, func(in []*Node) []*Node {
			w := ShortConvParams{InProj: in[3], InProjBias: in[4], Conv: in[5], ConvBias: in[6], OutProj: in[7], OutProjBias: in[8]}
			y, s := ShortConv(w, in[0], in[2], &lm.Step{Positions: in[1]})
			return []*Node{y, s}
		}, tensors.FromFlatDataAndDimensions(xs, b, n, h), tensors.FromFlatDataAndDimensions(pos, b, n),
			tensors.FromFlatDataAndDimensions(st, b, k-1, h), inWT, inBT, convT, convBT, outWT, outBT)
		return dnFlat(t, outs[0]), dnFlat(t, outs[1])
	}
	positions := func(from, n, pad int) []int32 {
		p := make([]int32, n)
		for i := range p {
			p[i] = int32(from + i - pad)
		}
		return p
	}

	y, s := run(x, positions(0, tt, 0), s0, 1, tt)
	if e := dnRel64(y, want); e > 1e-5 {
		t.Errorf("whole: output relative error %.3g", e)
	}
	if e := dnRel64(s, wantS); e > 1e-5 {
		t.Errorf("whole: state relative error %.3g", e)
	}
	y1, s1 := run(x[:3*h], positions(0, 3, 0), s0, 1, 3)
	y2, s2 := run(x[3*h:], positions(3, tt-3, 0), s1, 1, tt-3)
	if e := dnRel64(append(y1, y2...), want); e > 1e-5 {
		t.Errorf("two steps: output relative error %.3g", e)
	}
	if e := dnRel64(s2, wantS); e > 1e-5 {
		t.Errorf("two steps: state relative error %.3g", e)
	}

	// Left padding: two slots of noise before the row, from a zero state.
	zero := make([]float32, (k-1)*h)
	want0, wantS0 := shortConv64(x, inW, inB, conv, convB, outW, outB, make([]float64, (k-1)*h), tt, h, k)
	noise, _ := dnRand(r, 3, 0, 2, h)
	yp, sp := run(append(noise, x...), positions(0, tt+2, 2), zero, 1, tt+2)
	if e := dnRel64(yp[2*h:], want0); e > 1e-5 {
		t.Errorf("padded: output relative error %.3g", e)
	}
	if e := dnRel64(sp, wantS0); e > 1e-5 {
		t.Errorf("padded: state relative error %.3g", e)
	}
}
