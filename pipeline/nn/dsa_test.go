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
// scores (all of them kept: the ties of the k-th); 6 rows (the 16-way
// search) and 600 (bisection) of each.
func TestTopKMask(t *testing.T) {
	be := dnBackend(t)
	r := rand.New(rand.NewPCG(7, 8))
	for _, rows := range []int{6, 600} {
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
			out := MustExecOnce(be, func(x, vis *Node) *Node { return TopKMask(x, vis, k, bits) },
				tensors.FromFlatDataAndDimensions(scores, rows, s), tensors.FromFlatDataAndDimensions(visible, rows, s))
			got, err := tensors.CopyFlatData[bool](out)
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
				}
			}
		}
	}
}

// TestSparseLatentAttention checks the gathered attention against
// LatentAttention under KeepBias of the same keys: rows keeping k keys,
// fewer (a query early in its sequence), none past the first, and more
// than k (ties: the first k by position, as the masked form then sees),
// over a float32 and an int8 cache.
func TestSparseLatentAttention(t *testing.T) {
	be := dnBackend(t)
	r := rand.New(rand.NewPCG(9, 10))
	const b, tt, h, s, d, dv, k = 2, 3, 2, 11, 6, 4, 4
	_, qT := dnRand(r, 1, 0, b, tt, h, d)
	_, cT := dnRand(r, 1, 0, b, 1, s, d)
	keep := make([]bool, b*tt*s)
	first := make([]bool, b*tt*s) // keep cut to its first k keys a row
	for row := 0; row < b*tt; row++ {
		n := []int{k, 2, 1, k + 3, k, 3}[row]
		perm := r.Perm(s)[:n]
		for _, j := range perm {
			keep[row*s+j] = true
		}
		seen := 0
		for j := 0; j < s; j++ {
			if keep[row*s+j] && seen < k {
				first[row*s+j] = true
				seen++
			}
		}
	}
	keepT := tensors.FromFlatDataAndDimensions(keep, b, tt, s)
	firstT := tensors.FromFlatDataAndDimensions(first, b, tt, s)
	for _, int8Cache := range []bool{false, true} {
		outs := MustExecOnceN(be, func(in []*Node) []*Node {
			c := Latent{Cache: in[1]}
			if int8Cache {
				c.Cache, c.Scales = quantizeKV(in[1], 3)
			}
			sparse := SparseLatentAttention(in[0], c, in[2], k, 0.7, dv)
			masked := LatentAttention(in[0], c, KeepBias(in[3]), 0.7, dv)
			return []*Node{sparse, masked}
		}, qT, cT, keepT, firstT)
		got, want := dnFlat(t, outs[0]), dnFlat(t, outs[1])
		if e := dnMaxRel(got, want); e > 1e-6 {
			t.Errorf("int8 cache %v: gathered and masked attention differ by %.3g", int8Cache, e)
		}
	}
}
