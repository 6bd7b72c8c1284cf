package nn

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/gomlx/gomlx/backends"
	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive
	"github.com/gomlx/gomlx/pkg/core/tensors"
)

// TestTopKMask checks the search's mask against a sort of each row's
// visible scores: rows of 1 to 40 keys with a random prefix visible, k
// from 1 to past the visible count (every visible key then), scores
// spread over six orders of magnitude of both signs, and a row of equal
// scores (all of them kept: the ties of the k-th; none of them sure);
// 6 rows (the 16-way search) and 4000 (bisection, but for the rows of
// one key) of each. sure must hold the kept scores above the k-th (all
// of them when fewer than k are visible).
func TestTopKMask(t *testing.T) {
	be := dnBackend(t)
	r := rand.New(rand.NewPCG(7, 8))
	for _, rows := range []int{6, 4000} {
		testTopKMask(t, be, r, rows, topKBits)
	}
}

func testTopKMask(t *testing.T, be backends.Backend, r *rand.Rand, rows, bits int) {
	for _, s := range []int{1, 5, 17, 40} {
		for _, k := range []int{1, 3, 16, 50} {
			scores := make([]float32, rows*s)
			visible := make([]bool, rows*s)
			nvis := make([]int, rows)
			for i := 0; i < rows; i++ {
				nvis[i] = 1 + r.IntN(s)
				for j := 0; j < s; j++ {
					v := float32((r.Float64()*2 - 1) * float64(int(1)<<r.IntN(20)) / 1000)
					if i == rows-1 {
						v = 0.25 // a row of ties
					}
					scores[i*s+j] = v
					visible[i*s+j] = j < nvis[i]
				}
			}
			outs := MustExecOnceN(be, func(x, vis *Node) (*Node, *Node) { return TopKMask(x, vis, k, bits) },
				tensors.FromFlatDataAndDimensions(scores, rows, s), tensors.FromFlatDataAndDimensions(visible, rows, s))
			got, err := tensors.CopyFlatData[bool](outs[0])
			if err != nil {
				t.Fatal(err)
			}
			sure, err := tensors.CopyFlatData[bool](outs[1])
			if err != nil {
				t.Fatal(err)
			}
			for i := 0; i < rows; i++ {
				vis := slices.Clone(scores[i*s : i*s+nvis[i]])
				slices.Sort(vis)
				slices.Reverse(vis)
				kth := vis[min(k, len(vis))-1]
				for j := 0; j < s; j++ {
					want := j < nvis[i] && scores[i*s+j] >= kth
					if got[i*s+j] != want {
						t.Fatalf("%d rows of S %d, k %d, row %d (%d visible), key %d (score %g, k-th %g): got %v, want %v",
							rows, s, k, i, nvis[i], j, scores[i*s+j], kth, got[i*s+j], want)
					}
					wantSure := j < nvis[i] && (scores[i*s+j] > kth || nvis[i] < k)
					if sure[i*s+j] != wantSure {
						t.Fatalf("%d rows of S %d, k %d, row %d (%d visible), key %d (score %g, k-th %g): sure %v, want %v",
							rows, s, k, i, nvis[i], j, scores[i*s+j], kth, sure[i*s+j], wantSure)
					}
				}
			}
		}
	}
}

// TestSparseLatentAttention checks the gathered attention against
// LatentAttention under KeepBias of the keys it should read: rows keeping
// k keys, fewer (a query early in its sequence), one, and more than k
// (ties with the k-th: the sure keys, here the last two by position,
// then the tied ones first by position), over a float32 and an int8
// cache.
func TestSparseLatentAttention(t *testing.T) {
	be := dnBackend(t)
	r := rand.New(rand.NewPCG(9, 10))
	const b, tt, h, s, d, dv, k = 2, 3, 2, 11, 6, 4, 4
	_, qT := dnRand(r, 1, 0, b, tt, h, d)
	_, cT := dnRand(r, 1, 0, b, 1, s, d)
	keep := make([]bool, b*tt*s)
	sure := make([]bool, b*tt*s)
	read := make([]bool, b*tt*s) // what the gather must attend to
	for row := 0; row < b*tt; row++ {
		n := []int{k, 2, 1, k + 3, k, 3}[row]
		var kept []int
		for _, j := range r.Perm(s)[:n] {
			keep[row*s+j] = true
		}
		for j := 0; j < s; j++ {
			if keep[row*s+j] {
				kept = append(kept, j)
			}
		}
		if n <= k {
			for _, j := range kept {
				sure[row*s+j], read[row*s+j] = true, true
			}
			continue
		}
		for _, j := range kept[n-2:] {
			sure[row*s+j], read[row*s+j] = true, true
		}
		for _, j := range kept[:k-2] {
			read[row*s+j] = true
		}
	}
	mk := func(v []bool) *tensors.Tensor { return tensors.FromFlatDataAndDimensions(v, b, tt, s) }
	for _, int8Cache := range []bool{false, true} {
		outs := MustExecOnceN(be, func(in []*Node) []*Node {
			c := Latent{Cache: in[1]}
			if int8Cache {
				c.Cache, c.Scales = quantizeKV(in[1], 3)
			}
			sparse := SparseLatentAttention(in[0], c, in[2], in[3], k, 0.7, dv)
			masked := LatentAttention(in[0], c, KeepBias(in[4]), 0.7, dv)
			return []*Node{sparse, masked}
		}, qT, cT, mk(keep), mk(sure), mk(read))
		got, want := dnFlat(t, outs[0]), dnFlat(t, outs[1])
		if e := dnMaxRel(got, want); e > 1e-6 {
			t.Errorf("int8 cache %v: gathered and masked attention differ by %.3g", int8Cache, e)
		}
	}
}
