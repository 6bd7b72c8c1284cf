package modernbertref

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"testing"

	"github.com/tputool/tputool/loader/safetensors"
	"github.com/tputool/tputool/loader/tokenizer"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
)

// tiny has three layers (0 global, 1 and 2 local), head dim 8 and a window
// of 4 (half window 2), so short inputs already exercise the mask.
var tiny = Config{
	Vocab: 64, Hidden: 32, Intermediate: 24, Layers: 3, Heads: 4,
	MaxPositions: 64, LocalAttention: 4, GlobalEvery: 3,
	PadID: 3, CLSID: 1, SepID: 2,
}

var ids6 = []int{1, 17, 40, 9, 33, 2}

func mustWrite(t *testing.T, c Config, seed uint64) string {
	t.Helper()
	dir := t.TempDir()
	if err := Write(dir, c, seed); err != nil {
		t.Fatal(err)
	}
	return dir
}

func mustRead(t *testing.T, dir string) map[string][]float64 {
	t.Helper()
	w, err := lmckpt.ReadFloat64(dir)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func mustForward(t *testing.T, m map[string][]float64, c Config, ids []int) [][]float64 {
	t.Helper()
	h, err := forward(m, c, ids)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// maxDiff is the largest absolute difference between two [T][H] outputs.
func maxDiff(a, b [][]float64) float64 {
	d := 0.0
	for t := range a {
		for i := range a[t] {
			d = math.Max(d, math.Abs(a[t][i]-b[t][i]))
		}
	}
	return d
}

func gelu(x float64) float64 { return 0.5 * x * (1 + math.Erf(x/math.Sqrt2)) }

// ln2 is LayerNorm (no bias) of a 2-vector with weight g: with δ = (a−b)/2
// the centred vector is [δ, −δ] and its variance δ², so the result is
// [g0·δ, −g1·δ] / sqrt(δ² + eps).
func ln2(v [2]float64, g [2]float64, eps float64) [2]float64 {
	delta := (v[0] - v[1]) / 2
	s := 1 / math.Sqrt(delta*delta+eps)
	return [2]float64{g[0] * delta * s, -g[1] * delta * s}
}

// TestHandComputed checks a one-layer, one-head, Hidden 2 model with
// hand-chosen weights against a closed form derived by hand.
//
// Weights (eps = 1e-12): tok[0] = [2, 0], tok[1] = [0, 2], embeddings.norm
// weight [1, 1]; Wqkv = [I; I; 2I] (q = h, k = h, v = 2h); attn.Wo =
// [[1, 0.5], [0, 1]]; mlp_norm weight [1, 1]; Wi = [[1, 0], [0, −2]] (in =
// m0, gate = −2·m1); mlp.Wo = [[1], [2]]; final_norm weight [1.5, 0.5].
// Input ids [0, 1].
//
//   - Embeddings: both rows have δ = ±1, so h0 = r[1, −1], h1 = r[−1, 1],
//     r = 1/sqrt(1+eps). Layer 0 has no attn_norm.
//   - RoPE with head dim 2: one pair, inv_freq = θ⁰ = 1 (θ does not
//     matter); position 0 is unrotated, position 1 turns by 1 rad:
//     k1 = r[−cos1 − sin1, cos1 − sin1] (and q1 = k1).
//   - Scores ·2^−½: s00 = s11 = √2·r², s01 = s10 = −√2·r²·cos1, so
//     p00 = p11 = a = 1/(1 + exp(−√2·r²·(1+cos1))).
//   - Context (v = 2h): c0 = 2r(2a−1)[1, −1] = −c1; Wo gives
//     o0 = κ[0.5, −1] = −o1 with κ = 2r(2a−1).
//   - Residual: x0 = [r + 0.5κ, −r − κ] = −x1.
//   - mlp_norm: δ = D = r + 0.75κ, m0 = ρ[1, −1] = −m1, ρ = D/sqrt(D²+eps).
//   - MLP: token 0 in = ρ, gate = 2ρ, z0 = gelu(ρ)·2ρ; token 1 in = −ρ,
//     gate = −2ρ, z1 = gelu(−ρ)·(−2ρ); y = [z, 2z].
//   - Before final_norm: x0 = [r + 0.5κ + z0, −r − κ + 2z0],
//     x1 = [−r − 0.5κ + z1, r + κ + 2z1]; then LayerNorm with [1.5, 0.5].
//
// The scorer (cls pooling, head.dense = I, gelu, head.norm weight [1, 1],
// classifier [[1, −1]] + 0.25) gives n = ln2(gelu(out0)), logit n0 − n1 + 0.25.
// Numerically a ≈ 0.8983, κ ≈ 1.5931, ρ ≈ 1, z0 ≈ 1.6827, z1 ≈ 0.3173.
func TestHandComputed(t *testing.T) {
	const eps = 1e-12
	c := Config{Vocab: 2, Hidden: 2, Intermediate: 1, Layers: 1, Heads: 1, NormEps: eps,
		Scorer: true, Labels: 1, ClassifierPooling: "cls"}
	m := map[string][]float64{
		"model.embeddings.tok_embeddings.weight": {2, 0, 0, 2},
		"model.embeddings.norm.weight":           {1, 1},
		"model.layers.0.attn.Wqkv.weight":        {1, 0, 0, 1, 1, 0, 0, 1, 2, 0, 0, 2},
		"model.layers.0.attn.Wo.weight":          {1, 0.5, 0, 1},
		"model.layers.0.mlp_norm.weight":         {1, 1},
		"model.layers.0.mlp.Wi.weight":           {1, 0, 0, -2},
		"model.layers.0.mlp.Wo.weight":           {1, 2},
		"model.final_norm.weight":                {1.5, 0.5},
		"head.dense.weight":                      {1, 0, 0, 1},
		"head.norm.weight":                       {1, 1},
		"classifier.weight":                      {1, -1},
		"classifier.bias":                        {0.25},
	}
	r := 1 / math.Sqrt(1+eps)
	a := 1 / (1 + math.Exp(-math.Sqrt2*r*r*(1+math.Cos(1))))
	kappa := 2 * r * (2*a - 1)
	D := r + 0.75*kappa
	rho := D / math.Sqrt(D*D+eps)
	z0 := gelu(rho) * 2 * rho
	z1 := gelu(-rho) * (-2 * rho)
	pre := [2][2]float64{
		{r + 0.5*kappa + z0, -r - kappa + 2*z0},
		{-r - 0.5*kappa + z1, r + kappa + 2*z1},
	}
	if math.Abs(a-0.8983) > 1e-4 || math.Abs(kappa-1.5931) > 1e-4 || math.Abs(z0-1.6827) > 1e-4 || math.Abs(z1-0.3173) > 1e-4 {
		t.Fatalf("hand numbers drifted: a %v κ %v z0 %v z1 %v", a, kappa, z0, z1)
	}

	x, err := encoder(m, c, []int{0, 1})
	if err != nil {
		t.Fatal(err)
	}
	for tk := range pre {
		for i := range pre[tk] {
			if math.Abs(x[tk][i]-pre[tk][i]) > 1e-12 {
				t.Errorf("pre-final-norm [%d][%d] = %.15g, hand %.15g", tk, i, x[tk][i], pre[tk][i])
			}
		}
	}
	h := mustForward(t, m, c, []int{0, 1})
	for tk := range pre {
		want := ln2(pre[tk], [2]float64{1.5, 0.5}, eps)
		for i := range want {
			if math.Abs(h[tk][i]-want[i]) > 1e-12 {
				t.Errorf("last_hidden_state [%d][%d] = %.15g, hand %.15g", tk, i, h[tk][i], want[i])
			}
		}
	}
	out0 := ln2(pre[0], [2]float64{1.5, 0.5}, eps)
	n := ln2([2]float64{gelu(out0[0]), gelu(out0[1])}, [2]float64{1, 1}, eps)
	logits, err := score(m, c, []int{0, 1})
	if err != nil {
		t.Fatal(err)
	}
	if want := n[0] - n[1] + 0.25; len(logits) != 1 || math.Abs(logits[0]-want) > 1e-12 {
		t.Errorf("logits %v, hand %.15g", logits, want)
	}
}

func TestRope(t *testing.T) {
	// Head dim 4, θ = 100: inv_freq = [1, 100^(−1/2)] = [1, 0.1]; at
	// position 3 the pairs (0, 2) and (1, 3) turn by 3 and 0.3 rad.
	x := []float64{1, 2, 3, 4}
	Rope(x, 3, 100)
	want := []float64{
		1*math.Cos(3) - 3*math.Sin(3),
		2*math.Cos(0.3) - 4*math.Sin(0.3),
		3*math.Cos(3) + 1*math.Sin(3),
		4*math.Cos(0.3) + 2*math.Sin(0.3),
	}
	for i := range want {
		if math.Abs(x[i]-want[i]) > 1e-14 {
			t.Errorf("rope[%d] = %v, want %v", i, x[i], want[i])
		}
	}
	y := []float64{1, 2, 3, 4}
	Rope(y, 0, 100)
	if !reflect.DeepEqual(y, []float64{1, 2, 3, 4}) {
		t.Errorf("position 0 rotated: %v", y)
	}
}

func TestActivations(t *testing.T) {
	for _, tc := range []struct {
		name string
		x    float64
		want float64
	}{
		{"gelu", 1, 0.8413447460685429},
		{"gelu", -1, -0.15865525393145707},
		{"gelu_pytorch_tanh", 1, 0.8411919906082768},
		{"gelu_new", 1, 0.8411919906082768},
		{"silu", 1, 0.7310585786300049},
		{"relu", -2, 0},
	} {
		if got := Activation(tc.name, tc.x); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("%s(%v) = %.16g, want %.16g", tc.name, tc.x, got, tc.want)
		}
	}
}

// TestWindow: the local layers' mask changes the output exactly when some
// distance exceeds LocalAttention/2 and there is a local layer.
func TestWindow(t *testing.T) {
	m := mustRead(t, mustWrite(t, tiny, 7))
	with := func(la, every, layers int) Config {
		c := tiny
		c.LocalAttention, c.GlobalEvery, c.Layers = la, every, layers
		return c
	}
	wide := mustForward(t, m, with(100, 3, 3), ids6)
	if d := maxDiff(mustForward(t, m, with(4, 3, 3), ids6), wide); d < 1e-3 {
		t.Errorf("window 4 vs 100 on 6 tokens: max diff %g, want a visible change", d)
	}
	if d := maxDiff(mustForward(t, m, with(4, 3, 3), ids6), mustForward(t, m, with(6, 3, 3), ids6)); d < 1e-3 {
		t.Errorf("window 4 vs 6 on 6 tokens: max diff %g, want a visible change", d)
	}
	// local_attention // 2: 4 and 5 are the same window.
	if d := maxDiff(mustForward(t, m, with(4, 3, 3), ids6), mustForward(t, m, with(5, 3, 3), ids6)); d != 0 {
		t.Errorf("window 4 vs 5: max diff %g, want 0", d)
	}
	// T = LocalAttention/2 + 1: every distance is inside the window.
	ids3 := ids6[:3]
	if d := maxDiff(mustForward(t, m, with(4, 3, 3), ids3), mustForward(t, m, with(100, 3, 3), ids3)); d != 0 {
		t.Errorf("3 tokens, window 4 vs 100: max diff %g, want 0", d)
	}
	if d := maxDiff(mustForward(t, m, with(4, 3, 3), ids6[:4]), mustForward(t, m, with(100, 3, 3), ids6[:4])); d < 1e-4 {
		t.Errorf("4 tokens, window 4 vs 100: max diff %g, want a change", d)
	}
	// No local layer: one layer (layer 0 is global), or every layer global.
	if d := maxDiff(mustForward(t, m, with(4, 3, 1), ids6), mustForward(t, m, with(100, 3, 1), ids6)); d != 0 {
		t.Errorf("global-only layer: window changed the output by %g", d)
	}
	if d := maxDiff(mustForward(t, m, with(4, 1, 3), ids6), mustForward(t, m, with(100, 1, 3), ids6)); d != 0 {
		t.Errorf("all layers global: window changed the output by %g", d)
	}
	// The layer pattern and the per-layer window and bases.
	c := with(4, 3, 7)
	if got := c.LayerTypes(); !reflect.DeepEqual(got, []string{"full_attention", "sliding_attention", "sliding_attention",
		"full_attention", "sliding_attention", "sliding_attention", "full_attention"}) {
		t.Errorf("layer types %v", got)
	}
	if c.Window() != 2 || c.Theta(0) != DefaultGlobalTheta || c.Theta(1) != DefaultLocalTheta {
		t.Errorf("window %d, thetas %v %v", c.Window(), c.Theta(0), c.Theta(1))
	}
}

// TestWindowMaskDirect checks the mask on a model whose only mixing is one
// local layer: with layer 0's attention and MLP zeroed, layer 1 (local,
// window 2) is the first place tokens mix, so token 0's output must not
// move when token 3 or later changes, and must move when token 2 changes.
func TestWindowMaskDirect(t *testing.T) {
	c := tiny
	c.Layers = 2
	m := mustRead(t, mustWrite(t, c, 11))
	for _, name := range []string{"layers.0.attn.Wo.weight", "layers.0.mlp.Wo.weight"} {
		for i := range m[name] {
			m[name][i] = 0
		}
	}
	base := mustForward(t, m, c, []int{1, 17, 40, 9, 33, 2})
	far := mustForward(t, m, c, []int{1, 17, 40, 50, 20, 5})
	near := mustForward(t, m, c, []int{1, 17, 41, 9, 33, 2})
	if d := maxDiff(base[:1], far[:1]); d != 0 {
		t.Errorf("token 0 moved by %g when only tokens 3.. changed", d)
	}
	if d := maxDiff(base[:1], near[:1]); d < 1e-4 {
		t.Errorf("token 0 moved by %g when token 2 changed, want a change", d)
	}
}

func TestTheta(t *testing.T) {
	m := mustRead(t, mustWrite(t, tiny, 5))
	base := mustForward(t, m, tiny, ids6)
	c := tiny
	c.LocalTheta = 50
	if d := maxDiff(mustForward(t, m, c, ids6), base); d < 1e-4 {
		t.Errorf("local theta 50: max diff %g, want a change", d)
	}
	c = tiny
	c.GlobalTheta = 50
	if d := maxDiff(mustForward(t, m, c, ids6), base); d < 1e-4 {
		t.Errorf("global theta 50: max diff %g, want a change", d)
	}
	one := tiny
	one.Layers = 1
	c = one
	c.LocalTheta = 50
	if d := maxDiff(mustForward(t, m, c, ids6), mustForward(t, m, one, ids6)); d != 0 {
		t.Errorf("no local layer, local theta changed the output by %g", d)
	}
	// A null local_rope_theta means the global base (transformers 4.x).
	null, same := tiny, tiny
	null.LocalThetaNull, null.LocalTheta = true, 77
	same.LocalTheta = DefaultGlobalTheta
	if d := maxDiff(mustForward(t, m, null, ids6), mustForward(t, m, same, ids6)); d != 0 {
		t.Errorf("null local theta differs from the global base by %g", d)
	}
}

func TestScore(t *testing.T) {
	c := tiny
	c.Scorer, c.Labels, c.ClassifierBias, c.NormBias = true, 3, true, true
	dir := mustWrite(t, c, 9)
	cls, err := Score(dir, c, ids6)
	if err != nil {
		t.Fatal(err)
	}
	mc := c
	mc.ClassifierPooling = "mean"
	mean, err := Score(dir, mc, ids6)
	if err != nil {
		t.Fatal(err)
	}
	if len(cls) != 3 || len(mean) != 3 {
		t.Fatalf("logits %v %v", cls, mean)
	}
	diff := 0.0
	for i := range cls {
		diff = math.Max(diff, math.Abs(cls[i]-mean[i]))
	}
	if diff < 1e-3 {
		t.Errorf("cls %v and mean %v pooling agree", cls, mean)
	}
	// The head order dense → act → norm → classifier, spelled out on
	// Forward's output.
	m := mustRead(t, dir)
	h := mustForward(t, m, c, ids6)
	H := c.Hidden
	for _, tc := range []struct {
		pool   string
		logits []float64
	}{{"cls", cls}, {"mean", mean}} {
		pooled := make([]float64, H)
		for i := range pooled {
			if tc.pool == "cls" {
				pooled[i] = h[0][i]
				continue
			}
			for _, row := range h {
				pooled[i] += row[i] / float64(len(h))
			}
		}
		y := make([]float64, H)
		for o := range y {
			s := m["head.dense.bias"][o]
			for i := range pooled {
				s += m["head.dense.weight"][o*H+i] * pooled[i]
			}
			y[o] = gelu(s)
		}
		mu, va := 0.0, 0.0
		for _, v := range y {
			mu += v / float64(H)
		}
		for _, v := range y {
			va += (v - mu) * (v - mu) / float64(H)
		}
		for i := range y {
			y[i] = (y[i]-mu)/math.Sqrt(va+DefaultNormEps)*m["head.norm.weight"][i] + m["head.norm.bias"][i]
		}
		for l := 0; l < 3; l++ {
			s := m["classifier.bias"][l]
			for i := range y {
				s += m["classifier.weight"][l*H+i] * y[i]
			}
			if math.Abs(s-tc.logits[l]) > 1e-12 {
				t.Errorf("%s logit %d = %v, spelled out %v", tc.pool, l, tc.logits[l], s)
			}
		}
	}
	if _, err := Score(mustWrite(t, tiny, 9), tiny, ids6); err == nil {
		t.Error("Score without a scorer config succeeded")
	}
}

// shapes reads model.safetensors' header: name → shape, and the dtypes seen.
func shapes(t *testing.T, dir string) (map[string][]int, map[safetensors.DType]bool) {
	t.Helper()
	ck, err := safetensors.Open(filepath.Join(dir, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	out, dts := map[string][]int{}, map[safetensors.DType]bool{}
	for _, n := range ck.Names() {
		info, _ := ck.Info(n)
		out[n] = info.Shape
		dts[info.DType] = true
	}
	return out, dts
}

func TestTensorNames(t *testing.T) {
	const V, H, I = 64, 32, 24
	// ModernBertModel, two layers, no biases (ModernBERT-base's flags).
	base := map[string][]int{
		"embeddings.tok_embeddings.weight": {V, H},
		"embeddings.norm.weight":           {H},
		"layers.0.attn.Wqkv.weight":        {3 * H, H},
		"layers.0.attn.Wo.weight":          {H, H},
		"layers.0.mlp_norm.weight":         {H},
		"layers.0.mlp.Wi.weight":           {2 * I, H},
		"layers.0.mlp.Wo.weight":           {H, I},
		"layers.1.attn_norm.weight":        {H},
		"layers.1.attn.Wqkv.weight":        {3 * H, H},
		"layers.1.attn.Wo.weight":          {H, H},
		"layers.1.mlp_norm.weight":         {H},
		"layers.1.mlp.Wi.weight":           {2 * I, H},
		"layers.1.mlp.Wo.weight":           {H, I},
		"final_norm.weight":                {H},
	}
	c := tiny
	c.Layers = 2
	got, dts := shapes(t, mustWrite(t, c, 1))
	if !reflect.DeepEqual(got, base) {
		t.Errorf("base tensors:\n got %v\nwant %v", got, base)
	}
	if !reflect.DeepEqual(dts, map[safetensors.DType]bool{safetensors.F32: true}) {
		t.Errorf("dtypes %v", dts)
	}

	// Every bias, the "model." prefix, and the classifier.
	all := map[string][]int{}
	for n, s := range base {
		all["model."+n] = s
	}
	for _, n := range []string{"embeddings.norm.bias", "layers.0.mlp_norm.bias", "layers.1.attn_norm.bias",
		"layers.1.mlp_norm.bias", "final_norm.bias", "layers.0.attn.Wo.bias", "layers.1.attn.Wo.bias",
		"layers.0.mlp.Wo.bias", "layers.1.mlp.Wo.bias"} {
		all["model."+n] = []int{H}
	}
	all["model.layers.0.attn.Wqkv.bias"] = []int{3 * H}
	all["model.layers.1.attn.Wqkv.bias"] = []int{3 * H}
	all["model.layers.0.mlp.Wi.bias"] = []int{2 * I}
	all["model.layers.1.mlp.Wi.bias"] = []int{2 * I}
	all["head.dense.weight"] = []int{H, H}
	all["head.dense.bias"] = []int{H}
	all["head.norm.weight"] = []int{H}
	all["head.norm.bias"] = []int{H}
	all["classifier.weight"] = []int{5, H}
	all["classifier.bias"] = []int{5}
	sc := c
	sc.NormBias, sc.AttentionBias, sc.MLPBias, sc.ClassifierBias = true, true, true, true
	sc.Scorer, sc.Labels = true, 5
	if got, _ := shapes(t, mustWrite(t, sc, 1)); !reflect.DeepEqual(got, all) {
		t.Errorf("scorer tensors:\n got %v\nwant %v", got, all)
	}

	// Masked LM: the prefixed encoder plus head.dense, head.norm and
	// decoder.bias (decoder.weight is tied).
	mlm := map[string][]int{}
	for n, s := range base {
		mlm["model."+n] = s
	}
	mlm["head.dense.weight"] = []int{H, H}
	mlm["head.norm.weight"] = []int{H}
	mlm["decoder.bias"] = []int{V}
	mc := c
	mc.MaskedLM = true
	if got, _ := shapes(t, mustWrite(t, mc, 1)); !reflect.DeepEqual(got, mlm) {
		t.Errorf("masked LM tensors:\n got %v\nwant %v", got, mlm)
	}

	// Prefix alone: the same tensors as the base, under "model.".
	pc := c
	pc.Prefix = true
	pre := map[string][]int{}
	for n, s := range base {
		pre["model."+n] = s
	}
	if got, _ := shapes(t, mustWrite(t, pc, 1)); !reflect.DeepEqual(got, pre) {
		t.Errorf("prefixed tensors:\n got %v\nwant %v", got, pre)
	}
}

// TestHeadsKeepEncoder: the heads are drawn after the encoder, so the
// prefixed, masked-LM and scorer checkpoints of one seed share the encoder
// and its output.
func TestHeadsKeepEncoder(t *testing.T) {
	pc, mc, sc := tiny, tiny, tiny
	pc.Prefix, mc.MaskedLM, sc.Scorer, sc.Labels = true, true, true, 2
	want, err := Forward(mustWrite(t, tiny, 3), tiny, ids6)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []Config{pc, mc, sc} {
		got, err := Forward(mustWrite(t, c, 3), c, ids6)
		if err != nil {
			t.Fatal(err)
		}
		if d := maxDiff(got, want); d != 0 {
			t.Errorf("%s: encoder output differs by %g", c.Arch(), d)
		}
	}
}

func readConfig(t *testing.T, dir string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var j map[string]any
	if err := json.Unmarshal(b, &j); err != nil {
		t.Fatal(err)
	}
	return j
}

func TestConfigJSON(t *testing.T) {
	c := tiny
	c.Layers = 4
	old := readConfig(t, mustWrite(t, c, 1))
	for k, want := range map[string]any{
		"model_type": "modernbert", "hidden_size": 32.0, "intermediate_size": 24.0, "num_hidden_layers": 4.0,
		"num_attention_heads": 4.0, "vocab_size": 64.0, "max_position_embeddings": 64.0,
		"local_attention": 4.0, "global_attn_every_n_layers": 3.0, "global_rope_theta": 160000.0,
		"local_rope_theta": 10000.0, "norm_eps": 1e-5, "norm_bias": false, "attention_bias": false,
		"mlp_bias": false, "hidden_activation": "gelu", "classifier_pooling": "cls",
		"classifier_activation": "gelu", "classifier_bias": false, "pad_token_id": 3.0,
		"cls_token_id": 1.0, "sep_token_id": 2.0, "bos_token_id": 1.0, "eos_token_id": 2.0,
		"torch_dtype": "float32",
	} {
		if !reflect.DeepEqual(old[k], want) {
			t.Errorf("old-style %s = %v, want %v", k, old[k], want)
		}
	}
	if a := old["architectures"].([]any); len(a) != 1 || a[0] != "ModernBertModel" {
		t.Errorf("architectures %v", a)
	}
	for _, k := range []string{"layer_types", "rope_parameters", "id2label", "num_labels"} {
		if _, ok := old[k]; ok {
			t.Errorf("old-style config has %s", k)
		}
	}

	c.NewStyleConfig, c.GlobalTheta, c.LocalTheta = true, 1234, 56
	c.Scorer, c.Labels, c.ClassifierPooling = true, 2, "mean"
	nj := readConfig(t, mustWrite(t, c, 1))
	for _, k := range []string{"global_rope_theta", "local_rope_theta", "torch_dtype"} {
		if _, ok := nj[k]; ok {
			t.Errorf("new-style config has %s", k)
		}
	}
	wantTypes := []any{"full_attention", "sliding_attention", "sliding_attention", "full_attention"}
	if !reflect.DeepEqual(nj["layer_types"], wantTypes) {
		t.Errorf("layer_types %v", nj["layer_types"])
	}
	wantRope := map[string]any{
		"full_attention":    map[string]any{"rope_type": "default", "rope_theta": 1234.0},
		"sliding_attention": map[string]any{"rope_type": "default", "rope_theta": 56.0},
	}
	if !reflect.DeepEqual(nj["rope_parameters"], wantRope) {
		t.Errorf("rope_parameters %v", nj["rope_parameters"])
	}
	if nj["classifier_pooling"] != "mean" || nj["num_labels"] != 2.0 || nj["dtype"] != "float32" {
		t.Errorf("pooling %v num_labels %v dtype %v", nj["classifier_pooling"], nj["num_labels"], nj["dtype"])
	}
	if !reflect.DeepEqual(nj["id2label"], map[string]any{"0": "LABEL_0", "1": "LABEL_1"}) {
		t.Errorf("id2label %v", nj["id2label"])
	}
	if a := nj["architectures"].([]any); a[0] != "ModernBertForSequenceClassification" {
		t.Errorf("architectures %v", a)
	}

	nc := tiny
	nc.LocalThetaNull, nc.MaskedLM = true, true
	nullJ := readConfig(t, mustWrite(t, nc, 1))
	if v, ok := nullJ["local_rope_theta"]; !ok || v != nil {
		t.Errorf("local_rope_theta %v (present %v), want null", v, ok)
	}
	if a := nullJ["architectures"].([]any); a[0] != "ModernBertForMaskedLM" {
		t.Errorf("architectures %v", a)
	}
	nc.NewStyleConfig = true
	if err := Write(t.TempDir(), nc, 1); err == nil {
		t.Error("new-style config with a null local theta was written")
	}
}

func TestWeightsAndDeterminism(t *testing.T) {
	c := tiny
	c.NormBias, c.AttentionBias = true, true
	a, b, other := mustWrite(t, c, 42), mustWrite(t, c, 42), mustWrite(t, c, 43)
	read := func(dir string) []byte {
		data, err := os.ReadFile(filepath.Join(dir, "model.safetensors"))
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	if !bytes.Equal(read(a), read(b)) {
		t.Error("same seed, different checkpoints")
	}
	if bytes.Equal(read(a), read(other)) {
		t.Error("different seeds, same checkpoint")
	}
	m := mustRead(t, a)
	std := func(v []float64) (mean, sd float64) {
		for _, x := range v {
			mean += x / float64(len(v))
		}
		for _, x := range v {
			sd += (x - mean) * (x - mean) / float64(len(v))
		}
		return mean, math.Sqrt(sd)
	}
	if _, sd := std(m["layers.1.attn.Wqkv.weight"]); sd < 0.05 || sd > 0.3 {
		t.Errorf("Wqkv std %g", sd)
	}
	if mean, sd := std(m["layers.1.attn_norm.weight"]); math.Abs(mean-1) > 0.1 || sd < 0.05 {
		t.Errorf("attn_norm weight mean %g std %g", mean, sd)
	}
	if _, sd := std(m["layers.1.attn.Wqkv.bias"]); sd < 0.02 {
		t.Errorf("Wqkv bias std %g", sd)
	}
	if _, sd := std(m["final_norm.bias"]); sd < 0.02 {
		t.Errorf("final_norm bias std %g", sd)
	}
}

func TestBF16(t *testing.T) {
	c := tiny
	c.DType = "BF16"
	dir := mustWrite(t, c, 8)
	if _, dts := shapes(t, dir); !reflect.DeepEqual(dts, map[safetensors.DType]bool{safetensors.BF16: true}) {
		t.Errorf("dtypes %v", dts)
	}
	if j := readConfig(t, dir); j["torch_dtype"] != "bfloat16" {
		t.Errorf("torch_dtype %v", j["torch_dtype"])
	}
	got, err := Forward(dir, c, ids6)
	if err != nil {
		t.Fatal(err)
	}
	want, err := Forward(mustWrite(t, tiny, 8), tiny, ids6)
	if err != nil {
		t.Fatal(err)
	}
	if d := maxDiff(got, want); d == 0 || d > 0.1 {
		t.Errorf("bf16 vs f32 output: max diff %g, want small but not 0", d)
	}
}

func TestErrors(t *testing.T) {
	bad := []Config{
		{Vocab: 8, Hidden: 6, Intermediate: 4, Layers: 1, Heads: 4},           // 6 % 4
		{Vocab: 8, Hidden: 6, Intermediate: 4, Layers: 1, Heads: 2},           // odd head dim
		{Vocab: 8, Hidden: 8, Intermediate: 4, Layers: 1, Heads: 2, Act: "x"}, // activation
		{Vocab: 8, Hidden: 8, Intermediate: 4, Layers: 1, Heads: 2, Scorer: true},
		{Vocab: 8, Hidden: 8, Intermediate: 4, Layers: 1, Heads: 2, Scorer: true, Labels: 2, MaskedLM: true},
		{Vocab: 8, Hidden: 8, Intermediate: 4, Layers: 1, Heads: 2, ClassifierPooling: "max"},
		{Vocab: 8, Hidden: 8, Intermediate: 4, Layers: 1, Heads: 2, PadID: 8},
		{Vocab: 8, Hidden: 8, Intermediate: 4, Layers: 1, Heads: 2, DType: "F8_E4M3"},
	}
	for i, c := range bad {
		if err := Write(t.TempDir(), c, 1); err == nil {
			t.Errorf("config %d (%+v) was written", i, c)
		}
	}
	dir := mustWrite(t, tiny, 1)
	if _, err := Forward(dir, tiny, []int{1, 64}); err == nil {
		t.Error("an id past the vocabulary was accepted")
	}
	if _, err := Forward(dir, tiny, nil); err == nil {
		t.Error("an empty input was accepted")
	}
	nb := tiny
	nb.NormBias = true
	if _, err := Forward(dir, nb, ids6); err == nil {
		t.Error("a missing bias tensor was not reported")
	}
}

func TestTokenizer(t *testing.T) {
	c := tiny
	c.Vocab, c.UnkID, c.CLSID, c.SepID, c.PadID, c.MaskID = 300, 295, 296, 297, 298, 299
	dir := t.TempDir()
	if err := WriteTokenizer(dir, c); err != nil {
		t.Fatal(err)
	}
	vocab, merges, err := TokenizerVocab(c)
	if err != nil {
		t.Fatal(err)
	}
	if len(vocab) != 300 || len(merges) == 0 || vocab[0] != "!" || vocab[296] != "[CLS]" || vocab[299] != "[MASK]" {
		t.Fatalf("vocab %d entries (%q .. %q), %d merges", len(vocab), vocab[0], vocab[len(vocab)-1], len(merges))
	}
	id := map[string]int{}
	for i, s := range vocab {
		id[s] = i
	}
	tk, err := tokenizer.LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	got, err := tk.Encode("hello world", true)
	if err != nil {
		t.Fatal(err)
	}
	if want := []int{296, id["hello"], id["Ġworld"], 297}; !reflect.DeepEqual(got, want) {
		t.Errorf("hello world: %v, want %v", got, want)
	}
	pair, types, err := tk.EncodePair("hello", "world", true)
	if err != nil {
		t.Fatal(err)
	}
	if want := []int{296, id["hello"], 297, id["w"], id["or"], id["l"], id["d"], 297}; !reflect.DeepEqual(pair, want) {
		t.Errorf("pair: %v, want %v", pair, want)
	}
	if want := []int{0, 0, 0, 1, 1, 1, 1, 1}; !reflect.DeepEqual(types, want) {
		t.Errorf("pair types: %v, want %v", types, want)
	}
	if got := tk.Decode([]int{id["hello"], id["Ġworld"]}, true); got != "hello world" {
		t.Errorf("decode %q", got)
	}
	bad := c
	bad.MaskID = bad.PadID
	if err := WriteTokenizer(t.TempDir(), bad); err == nil {
		t.Error("two special tokens on one id were accepted")
	}
	small := c
	small.Vocab = 100
	small.UnkID, small.CLSID, small.SepID, small.PadID, small.MaskID = 0, 1, 2, 3, 4
	if err := WriteTokenizer(t.TempDir(), small); err == nil {
		t.Error("a vocabulary without room for the byte symbols was accepted")
	}
	// Specials first also works: the byte symbols then start at id 5.
	first := c
	first.UnkID, first.CLSID, first.SepID, first.PadID, first.MaskID = 0, 1, 2, 3, 4
	v2, _, err := TokenizerVocab(first)
	if err != nil {
		t.Fatal(err)
	}
	if v2[5] != "!" || v2[0] != "[UNK]" {
		t.Errorf("specials-first vocab starts %q", v2[:6])
	}
	names := append([]string(nil), v2...)
	sort.Strings(names)
	for i := 1; i < len(names); i++ {
		if names[i] == names[i-1] {
			t.Fatalf("duplicate vocab entry %q", names[i])
		}
	}
}
