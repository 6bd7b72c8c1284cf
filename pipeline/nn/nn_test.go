package nn

import (
	"math"
	"testing"

	"github.com/gomlx/gomlx/backends"
	_ "github.com/gomlx/gomlx/backends/simplego"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/dtypes/bfloat16"
	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive
	"github.com/gomlx/gomlx/pkg/core/tensors"
)

func testBackend(t *testing.T) backends.Backend {
	t.Helper()
	be, err := backends.NewWithConfig("go:ops_sequential") // as tpu.Open does
	if err != nil {
		t.Fatal(err)
	}
	return be
}

func values(n int, scale float32) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32((i*37)%23-11) * scale
	}
	return v
}

func execGraph(t *testing.T, fn func([]*Node) []*Node, args ...any) [][]float32 {
	t.Helper()
	e, err := NewExec(testBackend(t), fn)
	if err != nil {
		t.Fatal(err)
	}
	outs, err := e.Exec(args...)
	if err != nil {
		t.Fatal(err)
	}
	var res [][]float32
	for _, o := range outs {
		res = append(res, tensors.MustCopyFlatData[float32](o))
	}
	return res
}

// blocked returns w [out, in] in the layout [J, P, out/P, C].
func blocked(w []float32, out, in, j, p int) *tensors.Tensor {
	rows, c := out/p, in/j
	b := make([]float32, 0, len(w))
	for jj := 0; jj < j; jj++ {
		for r := 0; r < out; r++ {
			b = append(b, w[r*in+jj*c:r*in+jj*c+c]...)
		}
	}
	return tensors.FromFlatDataAndDimensions(b, j, p, rows, c)
}

func TestLinearBlockedMatchesPlain(t *testing.T) {
	w := values(12*8, 0.05)
	bv := values(12, 0.3)
	// A decode-sized input (6 rows, multiplied directly) and a
	// prefill-sized one (2x9 = 18 rows, the weight re-laid out first).
	for _, lead := range [][]int{{2, 3}, {2, 9}} {
		n := lead[0] * lead[1]
		xv := values(n*8, 0.1)
		x := tensors.FromFlatDataAndDimensions(xv, lead[0], lead[1], 8)
		b := tensors.FromFlatDataAndDimensions(bv, 12)
		plain := tensors.FromFlatDataAndDimensions(w, 12, 8)
		out := execGraph(t, func(in []*Node) []*Node {
			return []*Node{Linear(in[0], in[1], in[5]), Linear(in[0], in[2], in[5]), Linear(in[0], in[3], in[5]), Linear(in[0], in[4], in[5])}
		}, x, plain, blocked(w, 12, 8, 1, 3), blocked(w, 12, 8, 2, 1), blocked(w, 12, 8, 4, 2), b)
		for r := 0; r < n; r++ {
			for o := 0; o < 12; o++ {
				want := bv[o]
				for i := 0; i < 8; i++ {
					want += xv[r*8+i] * w[o*8+i]
				}
				for k := range out {
					if got := out[k][r*12+o]; math.Abs(float64(got-want)) > 1e-5 {
						t.Fatalf("rows %d, layout %d: [%d,%d] = %v, want %v", n, k, r, o, got, want)
					}
				}
			}
		}
	}
}

func TestEmbeddingBlocked(t *testing.T) {
	w := values(10*4, 1)
	ids := tensors.FromFlatDataAndDimensions([]int32{0, 9, 4, 5}, 2, 2)
	out := execGraph(t, func(in []*Node) []*Node {
		return []*Node{Embedding(in[0], in[2]), Embedding(in[1], in[2])}
	}, tensors.FromFlatDataAndDimensions(w, 10, 4), blocked(w, 10, 4, 2, 5), ids)
	for i, id := range []int{0, 9, 4, 5} {
		for j := 0; j < 4; j++ {
			if out[0][i*4+j] != w[id*4+j] || out[1][i*4+j] != w[id*4+j] {
				t.Fatalf("row %d: %v / %v, want %v", id, out[0][i*4:i*4+4], out[1][i*4:i*4+4], w[id*4:id*4+4])
			}
		}
	}
}

func TestRMSNorm(t *testing.T) {
	x := []float32{1, 2, 3, 4}
	w := []float32{0.5, 1, 1.5, 2}
	out := execGraph(t, func(in []*Node) []*Node {
		return []*Node{RMSNorm(in[0], in[1], 1e-6, false), RMSNorm(in[0], in[1], 1e-6, true)}
	}, tensors.FromFlatDataAndDimensions(x, 1, 4), tensors.FromFlatDataAndDimensions(w, 4))
	inv := 1 / math.Sqrt((1+4+9+16)/4.0+1e-6)
	for i := range x {
		llama := float64(x[i]) * inv * float64(w[i])
		gemma := float64(x[i]) * inv * (1 + float64(w[i]))
		if math.Abs(float64(out[0][i])-llama) > 1e-6 || math.Abs(float64(out[1][i])-gemma) > 1e-6 {
			t.Fatalf("dim %d: %v %v, want %v %v", i, out[0][i], out[1][i], llama, gemma)
		}
	}
}

// TestRMSNormF32Scale: a bfloat16 x normed and scaled by a float32 w
// (AfmoeRMSNorm, GptOssRMSNorm: the weight applied in float32, one
// rounding to bfloat16 at the end) is the float64 result rounded once:
// within one bfloat16 step of it (the go backend's conversion truncates,
// as gomlx's bfloat16.FromFloat32 does, where torch rounds to nearest),
// where Llama's RMSNorm (the normed x rounded to bfloat16, then times w
// rounded to bfloat16: three roundings) is 1.5 steps or more off on some
// dims (2.75 measured).
func TestRMSNormF32Scale(t *testing.T) {
	const n = 64
	x, w := make([]float32, n), make([]float32, n)
	for i := range x {
		x[i] = bfloat16.FromFloat32(float32(math.Sin(float64(i)*1.7)) * 3).Float32()
		w[i] = float32(1 + 0.37*math.Cos(float64(i)*0.9))
	}
	out := execGraph(t, func(in []*Node) []*Node {
		xb := ConvertDType(in[0], dtypes.BFloat16)
		return []*Node{
			ConvertDType(RMSNormF32Scale(xb, in[1], 1e-5), dtypes.Float32),
			ConvertDType(RMSNorm(xb, ConvertDType(in[1], dtypes.BFloat16), 1e-5, false), dtypes.Float32),
		}
	}, tensors.FromFlatDataAndDimensions(x, 1, n), tensors.FromFlatDataAndDimensions(w, n))
	ss := 0.0
	for _, v := range x {
		ss += float64(v) * float64(v)
	}
	inv := 1 / math.Sqrt(ss/n+1e-5)
	worst := [2]float64{}
	for i := range x {
		want := float64(x[i]) * inv * float64(w[i])
		if want == 0 {
			continue
		}
		_, exp := math.Frexp(want)
		step := math.Ldexp(1, exp-8) // bfloat16's spacing at want (8 significant bits)
		for k := range worst {
			worst[k] = math.Max(worst[k], math.Abs(float64(out[k][i])-want)/step)
		}
	}
	if !(worst[0] <= 1) {
		t.Errorf("RMSNormF32Scale is %.3g bfloat16 steps off the float64 result rounded once, want at most one", worst[0])
	}
	if !(worst[1] >= 1.5) {
		t.Errorf("Llama's RMSNorm is only %.3g steps off: the test cannot tell the two apart", worst[1])
	}
	t.Logf("largest errors in bfloat16 steps: float32 scale %.3g, Llama's %.3g", worst[0], worst[1])
}

func TestUpdateCacheScatterAndDUS(t *testing.T) {
	// Cache [B=1, KV=2, S=5, D=2], update of T=2 slots at start 2.
	cache := make([]float32, 20)
	upd := []float32{1, 2, 3, 4, 5, 6, 7, 8} // [1, 2, 2, 2]
	out := execGraph(t, func(in []*Node) []*Node {
		return []*Node{UpdateCache(in[0], in[1], in[2], 2, false)}
	}, tensors.FromFlatDataAndDimensions(cache, 1, 2, 5, 2), tensors.FromFlatDataAndDimensions(upd, 1, 2, 2, 2), tensors.FromScalar(int32(2)))
	want := []float32{0, 0, 0, 0, 1, 2, 3, 4, 0, 0, 0, 0, 0, 0, 5, 6, 7, 8, 0, 0}
	for i := range want {
		if out[0][i] != want[i] {
			t.Fatalf("scatter update: %v, want %v", out[0], want)
		}
	}
}

func TestGeluTanh(t *testing.T) {
	xs := []float32{-3, -1, -0.1, 0, 0.5, 2}
	out := execGraph(t, func(in []*Node) []*Node { return []*Node{GELUTanh(in[0]), SiLU(in[0])} }, tensors.FromFlatDataAndDimensions(xs, 6))
	for i, x := range xs {
		xf := float64(x)
		g := 0.5 * xf * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(xf+0.044715*xf*xf*xf)))
		s := xf / (1 + math.Exp(-xf))
		if math.Abs(float64(out[0][i])-g) > 1e-6 || math.Abs(float64(out[1][i])-s) > 1e-6 {
			t.Errorf("x=%v: gelu %v (want %v) silu %v (want %v)", x, out[0][i], g, out[1][i], s)
		}
	}
}

func TestRoundTo(t *testing.T) {
	// sqrt(3072) = 55.4256 becomes 55.5 in bfloat16 (transformers' comment).
	if got := RoundTo(math.Sqrt(3072), dtypes.BFloat16); got != 55.5 {
		t.Errorf("bf16(sqrt(3072)) = %v", got)
	}
	if got := RoundTo(math.Sqrt(1152), dtypes.BFloat16); got != 34 {
		t.Errorf("bf16(sqrt(1152)) = %v", got)
	}
}

// TestLayerNormBF16: a bf16 LayerNorm is the f32 LayerNorm of the same
// bf16 values, rounded: its mean and variance are taken in f32, as torch
// takes them. Over 256 values of 64 and 64.5 a sum in bf16 (a step of 128
// past 16384) would lose the mean, and the norm with it.
func TestLayerNormBF16(t *testing.T) {
	const h = 256
	x := make([]float32, h)
	for i := range x {
		x[i] = 64 + float32(i%2)/2 // exact in bf16
	}
	out := execGraph(t, func(in []*Node) []*Node {
		f := LayerNorm(in[0], nil, nil, 1e-5)
		b := ConvertDType(LayerNorm(ConvertDType(in[0], dtypes.BFloat16), nil, nil, 1e-5), dtypes.Float32)
		return []*Node{f, b}
	}, tensors.FromFlatDataAndDimensions(x, 1, h))
	for i := range x {
		if d := math.Abs(float64(out[1][i] - out[0][i])); d > 0.01*math.Abs(float64(out[0][i])) {
			t.Fatalf("value %d: bf16 %v, f32 %v", i, out[1][i], out[0][i])
		}
	}
}
