package nomicbertref

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/tputool/tputool/loader/safetensors"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
)

// tiny is nomic-embed-text-v1.5's layout scaled down: swiglu, no biases
// in the linears, head dim 8, MLP width 256.
var tiny = Config{Vocab: 50, Hidden: 32, Inner: 256, Layers: 2, Heads: 4}

var ids5 = []int{1, 17, 40, 9, 33}

func mustWrite(t *testing.T, c Config, seed uint64) string {
	t.Helper()
	dir := t.TempDir()
	if err := Write(dir, c, seed); err != nil {
		t.Fatal(err)
	}
	return dir
}

func mustForward(t *testing.T, m map[string][]float64, c Config, ids, types []int) [][]float64 {
	t.Helper()
	h, err := forward(m, c, ids, types)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func maxDiff(a, b [][]float64) float64 {
	d := 0.0
	for t := range a {
		for i := range a[t] {
			d = math.Max(d, math.Abs(a[t][i]-b[t][i]))
		}
	}
	return d
}

func TestRotary(t *testing.T) {
	x := []float64{0.3, -1.2, 0.7, 2.0, 0.5, -0.4}
	for _, il := range []bool{false, true} {
		y := append([]float64(nil), x...)
		Rotary(y, 0, 4, 1000, il)
		if !reflect.DeepEqual(x, y) {
			t.Errorf("interleaved=%v: position 0 changed %v to %v", il, x, y)
		}
		Rotary(y, 5, 4, 1000, il)
		if y[4] != x[4] || y[5] != x[5] {
			t.Errorf("interleaved=%v: dims past rotDim changed: %v", il, y)
		}
	}
	// Unit vectors show the pairing and the frequencies: inv_freq = [1, base^-0.5].
	unit := func(i int) []float64 { v := make([]float64, 6); v[i] = 1; return v }
	f1 := 3 / math.Sqrt(100)
	for _, tc := range []struct {
		il        bool
		in, a, b  int
		wantAngle float64
	}{
		{false, 0, 0, 2, 3}, {false, 1, 1, 3, f1}, {true, 0, 0, 1, 3}, {true, 2, 2, 3, f1},
	} {
		y := unit(tc.in)
		Rotary(y, 3, 4, 100, tc.il)
		want := make([]float64, 6)
		want[tc.a], want[tc.b] = math.Cos(tc.wantAngle), math.Sin(tc.wantAngle)
		for i := range y {
			if math.Abs(y[i]-want[i]) > 1e-15 {
				t.Errorf("%+v: got %v want %v", tc, y, want)
				break
			}
		}
	}
	// q·k after rotation depends on the position difference only.
	q, k := []float64{0.3, -1.2, 0.7, 2.0}, []float64{-0.8, 0.1, 1.5, 0.6}
	dot := func(p, s int, il bool) float64 {
		a, b := append([]float64(nil), q...), append([]float64(nil), k...)
		Rotary(a, p, 4, 1000, il)
		Rotary(b, s, 4, 1000, il)
		return a[0]*b[0] + a[1]*b[1] + a[2]*b[2] + a[3]*b[3]
	}
	for _, il := range []bool{false, true} {
		if d1, d2 := dot(7, 3, il), dot(12, 8, il); math.Abs(d1-d2) > 1e-12 {
			t.Errorf("interleaved=%v: relative property broken: %v vs %v", il, d1, d2)
		}
	}
}

// TestMLP checks the value/gate order of NomciBertGatedMLP on one unit:
// fc11 = 2 (value), fc12 = 3 (gate), fc2 = 1, x = 1.
func TestMLP(t *testing.T) {
	sig := func(z float64) float64 { return 1 / (1 + math.Exp(-z)) }
	for act, want := range map[string]float64{
		"swiglu": 2 * 3 * sig(3), "geglu": 2 * lmckpt.GELU64(3), "glu": 2 * sig(3), "gelu": lmckpt.GELU64(2), "gelu_new": lmckpt.GELU64(2),
	} {
		m := MLP{Act: act, Value: []float64{2}, Out: []float64{1}}
		if act != "gelu" && act != "gelu_new" {
			m.Gate = []float64{3}
		}
		if got := m.Apply([]float64{1})[0]; math.Abs(got-want) > 1e-15 {
			t.Errorf("%s: got %v want %v", act, got, want)
		}
	}
	m := MLP{Act: "swiglu", Value: []float64{1}, ValueB: []float64{1}, Gate: []float64{1}, GateB: []float64{0.5},
		Out: []float64{2}, OutB: []float64{0.5}}
	if got, want := m.Apply([]float64{1})[0], 0.5+2*2*1.5*sig(1.5); math.Abs(got-want) > 1e-15 {
		t.Errorf("biases: got %v want %v", got, want)
	}
}

// TestAttention: two heads of dim 4 (scale 1/2), two tokens; head 0 of
// token 0 scores [1, 0] (so key 1 is seen: bidirectional), head 1 [0, 0].
func TestAttention(t *testing.T) {
	q := [][]float64{{2, 0, 0, 0, 0, 0, 0, 0}, {0, 0, 0, 0, 0, 0, 0, 0}}
	k := [][]float64{{1, 0, 0, 0, 5, 0, 0, 0}, {0, 1, 0, 0, 0, 0, 0, 0}}
	v := [][]float64{{1, 0, 0, 0, 3, 0, 0, 0}, {0, 1, 0, 0, 0, 5, 0, 0}}
	e := math.E
	want := [][]float64{{e / (e + 1), 1 / (e + 1), 0, 0, 1.5, 2.5, 0, 0}, {0.5, 0.5, 0, 0, 1.5, 2.5, 0, 0}}
	if d := maxDiff(attention(q, k, v, 2), want); d > 1e-15 {
		t.Errorf("attention off by %g: %v", d, attention(q, k, v, 2))
	}
}

// TestOneToken computes a one-token, one-layer model by hand: attention
// over a single key is out_proj(v), v = rows [2H,3H) of Wqkv (rotary does
// not touch v), so the q/k/v split and the post-norm order show.
func TestOneToken(t *testing.T) {
	c := tiny
	c.Layers, c.QKVBias, c.FC1Bias, c.FC2Bias = 1, true, true, true
	m, err := lmckpt.ReadFloat64(mustWrite(t, c, 3))
	if err != nil {
		t.Fatal(err)
	}
	H, id := c.Hidden, 7
	e := add(m["embeddings.word_embeddings.weight"][id*H:(id+1)*H], m["embeddings.token_type_embeddings.weight"][:H])
	x := lmckpt.LayerNorm64(e, m["emb_ln.weight"], m["emb_ln.bias"], c.eps())
	p := "encoder.layers.0."
	v := lmckpt.Linear64(x, m[p+"attn.Wqkv.weight"][2*H*H:], m[p+"attn.Wqkv.bias"][2*H:])
	h := lmckpt.LayerNorm64(add(x, lmckpt.Linear64(v, m[p+"attn.out_proj.weight"], m[p+"attn.out_proj.bias"])),
		m[p+"norm1.weight"], m[p+"norm1.bias"], c.eps())
	mlp := MLP{Act: "swiglu", Value: m[p+"mlp.fc11.weight"], ValueB: m[p+"mlp.fc11.bias"],
		Gate: m[p+"mlp.fc12.weight"], GateB: m[p+"mlp.fc12.bias"], Out: m[p+"mlp.fc2.weight"], OutB: m[p+"mlp.fc2.bias"]}
	want := lmckpt.LayerNorm64(add(h, mlp.Apply(h)), m[p+"norm2.weight"], m[p+"norm2.bias"], c.eps())
	got := mustForward(t, m, c, []int{id}, nil)
	if d := maxDiff(got, [][]float64{want}); d > 1e-12 {
		t.Errorf("one token: max diff %g", d)
	}
}

func TestSensitivity(t *testing.T) {
	dir := mustWrite(t, tiny, 1)
	m, err := lmckpt.ReadFloat64(dir)
	if err != nil {
		t.Fatal(err)
	}
	base := mustForward(t, m, tiny, ids5, nil)
	for _, row := range base {
		for _, v := range row {
			if math.IsNaN(v) || math.Abs(v) > 10 {
				t.Fatalf("activation out of range: %v", v)
			}
		}
	}
	// Swapping fc11 and fc12 (value and gate) must change the output.
	sw := map[string][]float64{}
	for k, v := range m {
		sw[k] = v
	}
	p := "encoder.layers.1.mlp."
	sw[p+"fc11.weight"], sw[p+"fc12.weight"] = m[p+"fc12.weight"], m[p+"fc11.weight"]
	if d := maxDiff(base, mustForward(t, sw, tiny, ids5, nil)); d < 1e-3 {
		t.Errorf("swapping fc11/fc12 changed the output by only %g", d)
	}
	// Bidirectional: the last token changes the first token's output.
	other := append([]int(nil), ids5...)
	other[4] = 2
	if d := math.Abs(mustForward(t, m, tiny, other, nil)[0][0] - base[0][0]); d < 1e-6 {
		t.Errorf("first token ignores the last one (causal?): %g", d)
	}
	// Token type 1 differs from the default type 0; explicit zeros equal nil.
	if d := maxDiff(base, mustForward(t, m, tiny, ids5, make([]int, 5))); d != 0 {
		t.Errorf("explicit type 0 differs from nil types by %g", d)
	}
	if d := maxDiff(base, mustForward(t, m, tiny, ids5, []int{1, 1, 1, 1, 1})); d < 1e-3 {
		t.Errorf("token type 1 changed the output by only %g", d)
	}
	// Positions matter (rotary), in both layouts, and the layouts differ.
	il := tiny
	il.Interleaved = true
	ilOut := mustForward(t, m, il, ids5, nil)
	if d := maxDiff(base, ilOut); d < 1e-4 {
		t.Errorf("interleaved rotary changed the output by only %g", d)
	}
	half := tiny
	half.RotaryFraction = 0.5
	if d := maxDiff(base, mustForward(t, m, half, ids5, nil)); d < 1e-4 {
		t.Errorf("rotary fraction 0.5 changed the output by only %g", d)
	}
	// Forward (from disk) is deterministic and equals forward on the map.
	for range 2 {
		h, err := Forward(dir, tiny, ids5)
		if err != nil {
			t.Fatal(err)
		}
		if d := maxDiff(base, h); d != 0 {
			t.Errorf("Forward differs by %g", d)
		}
	}
	if d := maxDiff(base, mustForward(t, func() map[string][]float64 {
		m2, _ := lmckpt.ReadFloat64(mustWrite(t, tiny, 2))
		return m2
	}(), tiny, ids5, nil)); d < 1e-3 {
		t.Errorf("seed 2 gives nearly seed 1's output: %g", d)
	}
}

func TestTensorNames(t *testing.T) {
	c := Config{Vocab: 50, Hidden: 16, Inner: 40, Layers: 2, Heads: 2, QKVBias: true, FC1Bias: true,
		FC2Bias: true, Pooler: true}
	dir := mustWrite(t, c, 1)
	ck, err := safetensors.Open(filepath.Join(dir, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	want := map[string][]int{
		"embeddings.word_embeddings.weight": {50, 16}, "embeddings.token_type_embeddings.weight": {2, 16},
		"emb_ln.weight": {16}, "emb_ln.bias": {16}, "pooler.dense.weight": {16, 16}, "pooler.dense.bias": {16},
	}
	for i := range 2 {
		p := fmt.Sprintf("encoder.layers.%d.", i)
		for name, shape := range map[string][]int{
			"attn.Wqkv.weight": {48, 16}, "attn.Wqkv.bias": {48}, "attn.out_proj.weight": {16, 16},
			"attn.out_proj.bias": {16}, "mlp.fc11.weight": {256, 16}, "mlp.fc11.bias": {256},
			"mlp.fc12.weight": {256, 16}, "mlp.fc12.bias": {256}, "mlp.fc2.weight": {16, 256},
			"mlp.fc2.bias": {16}, "norm1.weight": {16}, "norm1.bias": {16}, "norm2.weight": {16},
			"norm2.bias": {16},
		} {
			want[p+name] = shape
		}
	}
	got := map[string][]int{}
	for _, n := range ck.Names() {
		got[n], _ = ck.Shape(n)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("tensors:\n got %v\nwant %v", got, want)
	}
	// Without biases, pooler or token types; plain gelu has fc1 of width Inner.
	c = Config{Vocab: 50, Hidden: 16, Inner: 40, Layers: 1, Heads: 2, TypeVocab: -1, Act: "gelu"}
	var names []string
	for _, ts := range c.Tensors() {
		names = append(names, ts.Name)
		if ts.Name == "encoder.layers.0.mlp.fc1.weight" && !reflect.DeepEqual(ts.Shape, []int{40, 16}) {
			t.Errorf("fc1 shape %v", ts.Shape)
		}
	}
	wantNames := []string{"embeddings.word_embeddings.weight", "emb_ln.weight", "emb_ln.bias",
		"encoder.layers.0.attn.Wqkv.weight", "encoder.layers.0.attn.out_proj.weight",
		"encoder.layers.0.mlp.fc1.weight", "encoder.layers.0.mlp.fc2.weight", "encoder.layers.0.norm1.weight",
		"encoder.layers.0.norm1.bias", "encoder.layers.0.norm2.weight", "encoder.layers.0.norm2.bias"}
	if !reflect.DeepEqual(names, wantNames) {
		t.Errorf("names %v", names)
	}
	if _, err := Forward(mustWrite(t, c, 1), c, ids5); err != nil {
		t.Errorf("plain gelu, no types: %v", err)
	}
}

func TestConfigJSON(t *testing.T) {
	dir := mustWrite(t, tiny, 1)
	b, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var j map[string]any
	if err := json.Unmarshal(b, &j); err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]any{
		"model_type": "nomic_bert", "n_embd": 32.0, "n_head": 4.0, "n_layer": 2.0, "n_inner": 256.0,
		"n_positions": 8192.0, "vocab_size": 50.0, "type_vocab_size": 2.0, "layer_norm_epsilon": 1e-12,
		"activation_function": "swiglu", "rotary_emb_fraction": 1.0, "rotary_emb_base": 1000.0,
		"rotary_emb_interleaved": false, "rotary_emb_scale_base": nil, "rotary_scaling_factor": nil,
		"max_trained_positions": 2048.0, "qkv_proj_bias": false, "mlp_fc1_bias": false,
		"mlp_fc2_bias": false, "prenorm": false, "causal": false, "pad_token_id": 0.0,
		"pad_vocab_size_multiple": 1.0, "torch_dtype": "float32", "use_flash_attn": true,
	} {
		if got, ok := j[k]; !ok || !reflect.DeepEqual(got, want) {
			t.Errorf("%s = %v (present %v), want %v", k, got, ok, want)
		}
	}
	if a, _ := j["architectures"].([]any); len(a) != 1 || a[0] != "NomicBertModel" {
		t.Errorf("architectures %v", j["architectures"])
	}
}

func TestBF16AndErrors(t *testing.T) {
	c := tiny
	c.DType = safetensors.BF16
	h16, err := Forward(mustWrite(t, c, 1), c, ids5)
	if err != nil {
		t.Fatal(err)
	}
	h32, err := Forward(mustWrite(t, tiny, 1), tiny, ids5)
	if err != nil {
		t.Fatal(err)
	}
	if d := maxDiff(h16, h32); d == 0 || d > 0.2 {
		t.Errorf("BF16 vs F32 max diff %g", d)
	}
	for _, bad := range []Config{
		{Vocab: 50, Hidden: 30, Inner: 256, Layers: 1, Heads: 4},
		{Vocab: 50, Hidden: 32, Inner: 256, Layers: 1, Heads: 4, RotaryFraction: 0.3},
		{Vocab: 50, Hidden: 32, Inner: 256, Layers: 1, Heads: 4, Act: "relu"},
		{Vocab: 50, Hidden: 32, Inner: 256, Layers: 1, Heads: 4, DType: "I8"},
	} {
		if err := Write(t.TempDir(), bad, 1); err == nil {
			t.Errorf("Write accepted %+v", bad)
		}
	}
	if _, err := Forward(mustWrite(t, tiny, 1), tiny, []int{50}); err == nil {
		t.Errorf("Forward accepted an id outside the vocabulary")
	}
}
