package nn

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/stretchr/testify/require"

	"github.com/tputool/tputool/pipeline/testkit/refcheck"
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
	backend := refcheck.GoBackend(t)
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

func TestGroupNormMultiHeadAttentionUpsample(t *testing.T) {
	backend := refcheck.GoBackend(t)
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
	out, err = ExecOnce(backend, func(q, k, v *Node) *Node { return MultiHeadAttention(q, k, v, 1, true) },
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

// TestActivations: every name a transformers or diffusers config uses maps
// to its function (the union of what the text and diffusion models
// accepted), GELU and QuickGELU match their formulas, and an unknown name
// is nil for Activation, false for KnownActivation and a panic naming it
// for Activate.
func TestActivations(t *testing.T) {
	xs := []float32{-3, -1, -0.1, 0, 0.5, 2}
	names := []string{"silu", "swish", "gelu", "gelu_pytorch_tanh", "gelu_tanh", "gelu_new", "gelu_fast", "gelu_accurate", "quick_gelu",
		"relu", "relu2", "sigmoid", "tanh", "mish"}
	require.Equal(t, []string{"gelu", "gelu_accurate", "gelu_fast", "gelu_new", "gelu_pytorch_tanh", "gelu_tanh", "mish", "quick_gelu",
		"relu", "relu2", "sigmoid", "silu", "swish", "tanh"}, ActivationNames())
	out := MustExecOnceN(refcheck.GoBackend(t), func(in []*Node) []*Node {
		var outs []*Node
		for _, n := range names {
			outs = append(outs, Activate(n, in[0]))
		}
		return append(outs, GELUTanh(in[0]), SiLU(in[0]))
	}, tensors.FromFlatDataAndDimensions(xs, len(xs)))
	got := func(i int) []float32 { return tensors.MustCopyFlatData[float32](out[i]) }
	silu, tanh := got(len(names)+1), got(len(names))
	for i, n := range names {
		require.True(t, KnownActivation(n), n)
		require.NotNil(t, Activation(n), n)
		for j, x := range xs {
			xf := float64(x)
			var want float64
			switch n {
			case "silu", "swish":
				want = float64(silu[j])
			case "gelu":
				want = 0.5 * xf * (1 + math.Erf(xf/math.Sqrt2))
			case "quick_gelu":
				want = xf / (1 + math.Exp(-1.702*xf))
			case "relu":
				want = math.Max(xf, 0)
			case "relu2":
				want = math.Max(xf, 0) * math.Max(xf, 0)
			case "sigmoid":
				want = 1 / (1 + math.Exp(-xf))
			case "tanh":
				want = math.Tanh(xf)
			case "mish":
				want = xf * math.Tanh(math.Log1p(math.Exp(xf)))
			default:
				want = float64(tanh[j])
			}
			require.InDelta(t, want, got(i)[j], 1e-6, "%s(%v)", n, x)
		}
	}
	require.False(t, KnownActivation("relu6"))
	require.Nil(t, Activation("relu6"))
	require.PanicsWithError(t, `unsupported activation "relu6"`, func() {
		g := NewGraph(refcheck.GoBackend(t), "act")
		Activate("relu6", Parameter(g, "x", shapes.Make(dtypes.Float32, 2)))
	})
}
