package blocks

import (
	"math"
	"math/rand/v2"
	"testing"

	_ "github.com/gomlx/gomlx/backends/simplego"
	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/stretchr/testify/require"

	"github.com/tputool/tputool/pipeline/internal/reftest"
)

func randn(rng *rand.Rand, n int) []float32 {
	out := make([]float32, n)
	for i := range out {
		out[i] = float32(rng.NormFloat64())
	}
	return out
}

// directConv is a loop convolution in float64 (zero padding t, b, l, r).
func directConv(x []float32, B, C, H, W int, w []float32, O, k int, bias []float32, s, pt, pb, pl, pr int) ([]float64, []int) {
	Ho := (H+pt+pb-k)/s + 1
	Wo := (W+pl+pr-k)/s + 1
	y := make([]float64, B*O*Ho*Wo)
	for n := 0; n < B; n++ {
		for o := 0; o < O; o++ {
			for i := 0; i < Ho; i++ {
				for j := 0; j < Wo; j++ {
					acc := float64(bias[o])
					for c := 0; c < C; c++ {
						for di := 0; di < k; di++ {
							for dj := 0; dj < k; dj++ {
								yi, xj := i*s+di-pt, j*s+dj-pl
								if yi < 0 || yi >= H || xj < 0 || xj >= W {
									continue
								}
								acc += float64(x[((n*C+c)*H+yi)*W+xj]) * float64(w[((o*C+c)*k+di)*k+dj])
							}
						}
					}
					y[((n*O+o)*Ho+i)*Wo+j] = acc
				}
			}
		}
	}
	return y, []int{B, O, Ho, Wo}
}

func TestConv2DIm2colAndConvGeneral(t *testing.T) {
	backend := reftest.GoBackend(t)
	rng := rand.New(rand.NewPCG(1, 2))
	for _, c := range []struct {
		name    string
		k, s    int
		pads    [4]int
		H, W, C int
	}{
		{"3x3 same", 3, 1, [4]int{1, 1, 1, 1}, 7, 5, 3},
		{"3x3 stride 2 pad 1", 3, 2, [4]int{1, 1, 1, 1}, 8, 6, 2},
		{"3x3 stride 2 pad (0,1,0,1)", 3, 2, [4]int{0, 1, 0, 1}, 8, 8, 2},
		{"1x1", 1, 1, [4]int{}, 4, 6, 5},
		{"5x5 pad 2", 5, 1, [4]int{2, 2, 2, 2}, 6, 6, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			const B, O = 2, 4
			x := randn(rng, B*c.C*c.H*c.W)
			w := randn(rng, O*c.C*c.k*c.k)
			bias := randn(rng, O)
			want, dims := directConv(x, B, c.C, c.H, c.W, w, O, c.k, bias, c.s, c.pads[0], c.pads[1], c.pads[2], c.pads[3])
			for _, general := range []bool{false, true} {
				spec := ConvSpec{Stride: c.s, PadTop: c.pads[0], PadBottom: c.pads[1], PadLeft: c.pads[2], PadRight: c.pads[3], UseConvGeneral: general}
				out, err := ExecOnce(backend, func(x, w, b *Node) *Node { return Conv2D(x, w, b, spec) },
					tensors.FromFlatDataAndDimensions(x, B, c.C, c.H, c.W),
					tensors.FromFlatDataAndDimensions(w, O, c.C, c.k, c.k),
					tensors.FromFlatDataAndDimensions(bias, O))
				require.NoError(t, err)
				require.Equal(t, dims, out.Shape().Dimensions)
				got := tensors.MustCopyFlatData[float32](out)
				for i := range want {
					require.InDelta(t, want[i], got[i], 1e-4, "general=%v index %d", general, i)
				}
			}
		})
	}
}

func TestGroupNormAttentionUpsample(t *testing.T) {
	backend := reftest.GoBackend(t)
	// GroupNorm of a constant-per-group input is the bias.
	x := []float32{1, 1, 5, 5, 2, 2, 2, 2} // [1, 4, 2] with 2 groups of 2 channels: {1,1,5,5} {2,2,2,2}
	out, err := ExecOnce(backend, func(x, g, b *Node) *Node { return GroupNorm(x, g, b, 2, 1e-5) },
		tensors.FromFlatDataAndDimensions(x, 1, 4, 2),
		tensors.FromFlatDataAndDimensions([]float32{1, 1, 1, 1}, 4),
		tensors.FromFlatDataAndDimensions([]float32{0, 0, 0.5, 0.5}, 4))
	require.NoError(t, err)
	got := tensors.MustCopyFlatData[float32](out)
	want := []float32{-1, -1, 1, 1, 0.5, 0.5, 0.5, 0.5}
	for i := range want {
		require.InDelta(t, want[i], got[i], 1e-3)
	}

	// Causal attention: the first query only sees the first key, so its
	// output is the first value.
	q := []float32{1, 0, 0, 1, 1, 1}
	v := []float32{3, 4, 5, 6, 7, 8}
	out, err = ExecOnce(backend, func(q, k, v *Node) *Node { return Attention(q, k, v, 1, true) },
		tensors.FromFlatDataAndDimensions(q, 1, 3, 2), tensors.FromFlatDataAndDimensions(q, 1, 3, 2),
		tensors.FromFlatDataAndDimensions(v, 1, 3, 2))
	require.NoError(t, err)
	got = tensors.MustCopyFlatData[float32](out)
	require.InDelta(t, 3, got[0], 1e-6)
	require.InDelta(t, 4, got[1], 1e-6)
	// The second query sees keys 0 and 1 with scores 0 and 1/sqrt(2).
	p1 := 1 / (1 + math.Exp(-1/math.Sqrt2))
	require.InDelta(t, (1-p1)*3+p1*5, got[2], 1e-5)

	out, err = ExecOnce(backend, UpsampleNearest2x, tensors.FromFlatDataAndDimensions([]float32{1, 2, 3, 4}, 1, 1, 2, 2))
	require.NoError(t, err)
	require.Equal(t, []float32{1, 1, 2, 2, 1, 1, 2, 2, 3, 3, 4, 4, 3, 3, 4, 4}, tensors.MustCopyFlatData[float32](out))
}

func TestTimestepSinusoid(t *testing.T) {
	backend := reftest.GoBackend(t)
	for _, flip := range []bool{false, true} {
		out, err := ExecOnce(backend, func(t *Node) *Node { return TimestepSinusoid(t, 6, flip, 1) },
			tensors.FromFlatDataAndDimensions([]float32{0, 500}, 2))
		require.NoError(t, err)
		got := tensors.MustCopyFlatData[float32](out)
		for n, ts := range []float64{0, 500} {
			for i := 0; i < 3; i++ {
				f := math.Exp(-math.Log(10000) * float64(i) / (3 - 1))
				s, c := math.Sin(ts*f), math.Cos(ts*f)
				if flip {
					s, c = c, s
				}
				require.InDelta(t, s, got[n*6+i], 1e-4)
				require.InDelta(t, c, got[n*6+3+i], 1e-4)
			}
		}
	}
}

// mapSource is an in-memory Source.
type mapSource map[string][]int

func (m mapSource) Names() []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
func (m mapSource) Shape(name string) ([]int, bool) { s, ok := m[name]; return s, ok }
func (m mapSource) Float32(name string) ([]float32, error) {
	n := 1
	for _, d := range m[name] {
		n *= d
	}
	return make([]float32, n), nil
}

func TestLoaderStrictness(t *testing.T) {
	src := mapSource{"a.weight": {4, 3}, "a.bias": {4}, "attn.query.weight": {8, 8, 1, 1}, "buffer": {1, 7}}
	l := NewLoader("test", src)
	NewLinear(l, "a", 3, 4, true)
	l.Alias("attn.to_q.weight", "attn.query.weight")
	l.Take("attn.to_q.weight", 8, 8) // stored as a 1x1 convolution under its old name
	l.Ignore("buffer", 1, 7)
	w, err := l.Finish(nil)
	require.NoError(t, err)
	require.Len(t, w.Tensors, 3)
	require.Equal(t, int64(12+4+64), w.NumParameters())

	l = NewLoader("test", src)
	NewLinear(l, "a", 3, 5, true)
	l.Take("missing", 2)
	_, err = l.Finish(nil)
	require.Error(t, err)
	for _, want := range []string{`tensor "a.weight" has shape [4 3], want [5 3]`, `tensor "a.bias" has shape [4], want [5]`,
		`missing tensor "missing"`, `unused tensor "attn.query.weight"`, `unused tensor "buffer"`} {
		require.ErrorContains(t, err, want)
	}
}
