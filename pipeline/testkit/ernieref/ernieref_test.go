package ernieref

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tputool/tputool/loader/safetensors"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
	"github.com/tputool/tputool/pipeline/testkit/refcheck"
)

var testTokens = []int{1, 9, 14, 60, 3, 5, 41, 27, 88, 2, 17, 33}

// load writes c's checkpoint into a temporary directory and reads it back.
func load(t *testing.T, c Ernie) (string, *Model) {
	t.Helper()
	dir := t.TempDir()
	if err := c.Write(dir); err != nil {
		t.Fatal(err)
	}
	m, err := c.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	return dir, m
}

func flavours() []Ernie { return []Ernie{TinyErnie(), TinyErnieSparse()} }

// nearAll fails unless got and want agree to tol everywhere.
func nearAll(t *testing.T, what string, got, want []float64, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	for i := range want {
		if math.Abs(got[i]-want[i]) > tol {
			t.Fatalf("%s: %v, want %v", what, got, want)
		}
	}
}

// maxAbsDiff is the largest |a-b| over two tables of the same shape.
func maxAbsDiff(a, b [][]float64) float64 {
	d := 0.0
	for i := range a {
		for j := range a[i] {
			d = math.Max(d, math.Abs(a[i][j]-b[i][j]))
		}
	}
	return d
}

// TestRotaryHandWorked: head_dim 4 at rope_theta 1e4 has inverse
// frequencies 1 and 1e4^(-2/4) = 0.01. At position 1, x = (1, 2, 3, 4)
// turns its ADJACENT pairs: (1, 2) by 1 rad and (3, 4) by 0.01 rad, each
// as the complex number x[2j] + i·x[2j+1]. Llama's rotate-half would
// pair (1, 3) by 1 rad and (2, 4) by 0.01 rad, a different answer. At
// position 0 nothing moves.
func TestRotaryHandWorked(t *testing.T) {
	c := Ernie{Hidden: 8, Heads: 2, HeadDim: 4, Theta: 10000}
	inv := c.RopeFreqs()
	nearAll(t, "inv_freq", inv, []float64{1, 0.01}, 1e-15)
	x := []float64{1, 2, 3, 4}
	c1, s1, c2, s2 := math.Cos(1), math.Sin(1), math.Cos(0.01), math.Sin(0.01)
	pairs := []float64{1*c1 - 2*s1, 2*c1 + 1*s1, 3*c2 - 4*s2, 4*c2 + 3*s2}
	nearAll(t, "adjacent pairs", rotatePairs(x, 1, inv), pairs, 1e-15)
	half := []float64{1*c1 - 3*s1, 2*c2 - 4*s2, 3*c1 + 1*s1, 4*c2 + 2*s2}
	nearAll(t, "rotate-half (the mistake)", rotateHalf(x, 1, inv), half, 1e-15)
	if d := maxAbsDiff([][]float64{pairs}, [][]float64{half}); d < 0.5 {
		t.Errorf("rotate-half differs from the pairs by %g only", d)
	}
	nearAll(t, "position 0", rotatePairs(x, 0, inv), x, 0)
	// A lone x0 = 1 at position 2 becomes (cos 2, sin 2) in dims 0 and 1
	// (rotate-half would put sin 2 into dim 2).
	e0 := []float64{1, 0, 0, 0}
	nearAll(t, "unit at position 2", rotatePairs(e0, 2, inv), []float64{math.Cos(2), math.Sin(2), 0, 0}, 1e-15)
}

// TestRotaryTransformersFormula transcribes apply_rotary_pos_emb step by
// step, independently of rotatePairs: emb = cat(freqs, freqs); cos and
// sin keep emb's first half and repeat-interleave it; rotate_half(x) is
// stack((-x[1::2], x[0::2]), -1).flatten(-1); q·cos + rotate_half(q)·sin.
// On head_dim 12 at rope_theta 500000 and several positions it must
// equal rotatePairs.
func TestRotaryTransformersFormula(t *testing.T) {
	c := TinyErnie()
	D := c.headDim()
	if D != 12 {
		t.Fatalf("head dim %d", D)
	}
	inv := c.RopeFreqs()
	for i, f := range inv {
		if want := math.Pow(500000, -float64(2*i)/12); math.Abs(f-want) > 1e-18 {
			t.Fatalf("inv_freq[%d] = %g, want %g", i, f, want)
		}
	}
	r := lmckpt.NewRand(3)
	for _, pos := range []int{0, 1, 7, 100} {
		x := make([]float64, D)
		for i := range x {
			x[i] = r.Uniform()
		}
		emb := make([]float64, 0, D)
		for range 2 {
			for _, f := range inv {
				emb = append(emb, float64(pos)*f)
			}
		}
		var cos, sin []float64
		for _, a := range emb[:D/2] {
			cos = append(cos, math.Cos(a), math.Cos(a))
			sin = append(sin, math.Sin(a), math.Sin(a))
		}
		var rh []float64
		for j := 0; j < D/2; j++ {
			rh = append(rh, -x[2*j+1], x[2*j])
		}
		want := make([]float64, D)
		for i := range want {
			want[i] = x[i]*cos[i] + rh[i]*sin[i]
		}
		nearAll(t, fmt.Sprintf("position %d", pos), rotatePairs(x, pos, inv), want, 1e-15)
	}
}

// TestRouteHandWorked: on router logits ln(4, 3, 2, 1) the scores are
// (0.4, 0.3, 0.2, 0.1). With correction bias (0, -0.15, 0.15, 0) the
// biased scores are (0.4, 0.15, 0.35, 0.1): the top 2 are experts 0 and
// 2 (without the bias they would be 0 and 1), weighed by their UNBIASED
// scores 0.4 and 0.2 over their sum 0.6: 2/3 and 1/3 (the biased scores
// would give 0.4/0.75 and 0.35/0.75; no renormalisation 0.4 and 0.2). The
// top 3 add expert 1: (0.4, 0.2, 0.3)/0.9. A bias of 0.5 on expert 3
// puts it first (0.6) with weight 0.1/0.5. moe_norm_min 0.9 clamps the
// top-2 sum 0.6 up to 0.9; 0.6 and 0.5 leave it. A constant added to
// every logit changes nothing; on a tie the lower index wins.
func TestRouteHandWorked(t *testing.T) {
	logits := []float64{math.Log(4), math.Log(3), math.Log(2), math.Log(1)}
	bias := []float64{0, -0.15, 0.15, 0}
	check := func(what string, c Ernie, shift float64, bias []float64, wantIDs []int, wantW []float64) {
		t.Helper()
		l := slices.Clone(logits)
		for i := range l {
			l[i] += shift
		}
		ids, w := c.Route(l, bias)
		if !slices.Equal(ids, wantIDs) {
			t.Errorf("%s: experts %v, want %v", what, ids, wantIDs)
			return
		}
		nearAll(t, what, w, wantW, 1e-15)
	}
	c := Ernie{Experts: 4, TopK: 2, NormMin: 1e-12}
	check("top 2", c, 0, bias, []int{0, 2}, []float64{2.0 / 3, 1.0 / 3})
	check("top 2, shifted logits", c, 7.5, bias, []int{0, 2}, []float64{2.0 / 3, 1.0 / 3})
	check("top 2, no bias", c, 0, nil, []int{0, 1}, []float64{4.0 / 7, 3.0 / 7})
	check("top 2, zero bias", c, 0, make([]float64, 4), []int{0, 1}, []float64{4.0 / 7, 3.0 / 7})
	check("top 2, bias on expert 3", c, 0, []float64{0, 0, 0, 0.5}, []int{3, 0}, []float64{0.2, 0.8})
	c.TopK = 3
	check("top 3", c, 0, bias, []int{0, 2, 1}, []float64{0.4 / 0.9, 0.2 / 0.9, 0.3 / 0.9})
	c.TopK = 2
	c.NormMin = 0.9
	check("norm_min 0.9 clamps", c, 0, bias, []int{0, 2}, []float64{0.4 / 0.9, 0.2 / 0.9})
	c.NormMin = 0.6
	check("norm_min 0.6", c, 0, bias, []int{0, 2}, []float64{2.0 / 3, 1.0 / 3})
	c.NormMin = 0.5
	check("norm_min 0.5", c, 0, bias, []int{0, 2}, []float64{2.0 / 3, 1.0 / 3})
	c.TopK, c.NormMin = 1, 1e-12
	check("top 1", c, 0, bias, []int{0}, []float64{1})

	c.TopK = 2
	ids, w := c.route(logits, bias, true, false)
	if !slices.Equal(ids, []int{0, 2}) {
		t.Fatalf("biased weights: experts %v", ids)
	}
	nearAll(t, "biased weights (the mistake)", w, []float64{0.4 / 0.75, 0.35 / 0.75}, 1e-15)
	_, w = c.route(logits, bias, false, true)
	nearAll(t, "no renormalisation (the mistake)", w, []float64{0.4, 0.2}, 1e-15)

	ids, _ = Ernie{Experts: 3, TopK: 1}.Route([]float64{0, 2, 2}, nil)
	if !slices.Equal(ids, []int{1}) {
		t.Errorf("tie: experts %v, want [1] (the lower index)", ids)
	}
}

// TestMoEBlockHandWorked: Ernie4_5_MoeSparseMoeBlock on a hand-built
// block of 4 experts of width 1 and one shared expert: router logits
// (h0, h1, -h0, -h1), correction bias (0, 0, 0.5, 0); expert e computes
// (d_e·silu(g_e·h0)·(h0+h1), 0) and the shared expert
// (0, 2·silu(h1)·h0). On h = (0.8, 0.3) the scores rank 0, 1, 3, 2, but
// the bias lifts expert 2 to the top: experts 2 and 0 are chosen,
// weighed p2/(p0+p2) and p0/(p0+p2), and the shared output is added
// unweighted.
func TestMoEBlockHandWorked(t *testing.T) {
	c := Ernie{Hidden: 2, MoEIntermediate: 1, Layers: 1, Experts: 4, TopK: 2, Shared: 1,
		StartIndex: 0, EndIndex: -1, Interval: 1, NormMin: 1e-12}
	p := "model.layers.0.mlp."
	w := map[string][]float64{
		p + "gate.weight":                         {1, 0, 0, 1, -1, 0, 0, -1},
		p + "moe_statics.e_score_correction_bias": {0, 0, 0.5, 0},
		p + "shared_experts.gate_proj.weight":     {0, 1},
		p + "shared_experts.up_proj.weight":       {1, 0},
		p + "shared_experts.down_proj.weight":     {0, 2},
	}
	g, d := []float64{0.5, -1, 2, 1.5}, []float64{1, 2, 3, 4}
	for e := range 4 {
		q := fmt.Sprintf("%sexperts.%d.", p, e)
		w[q+"gate_proj.weight"] = []float64{g[e], 0}
		w[q+"up_proj.weight"] = []float64{1, 1}
		w[q+"down_proj.weight"] = []float64{d[e], 0}
	}
	m := &Model{C: c, W: w}
	h := []float64{0.8, 0.3}
	silu := func(v float64) float64 { return v / (1 + math.Exp(-v)) }
	z := math.Exp(0.8) + math.Exp(0.3) + math.Exp(-0.8) + math.Exp(-0.3)
	p0, p2 := math.Exp(0.8)/z, math.Exp(-0.8)/z
	y0, y2 := d[0]*silu(g[0]*0.8)*1.1, d[2]*silu(g[2]*0.8)*1.1
	shared := 2 * silu(0.3) * 0.8
	want := []float64{(p2*y2 + p0*y0) / (p0 + p2), shared}
	nearAll(t, "moe", m.moe(0, h), want, 1e-15)
	ids, ws := m.Experts(0, h)
	if !slices.Equal(ids, []int{2, 0}) {
		t.Errorf("experts %v, want [2 0]", ids)
	}
	nearAll(t, "weights", ws, []float64{p2 / (p0 + p2), p0 / (p0 + p2)}, 1e-15)
	m.Mistakes.NoShared = true
	nearAll(t, "moe without the shared expert (the mistake)", m.moe(0, h), []float64{want[0], 0}, 1e-15)
}

// TestSparsePlacement: Sparse follows Ernie4_5_MoeDecoderLayer's rule
// (i+1) % interval == 0 and start <= i <= end (-1: the last layer) on
// the tiny models, the 21B release (28 layers from index 1) and other
// combinations; an end index below -1 is not resolved, so no layer is
// sparse.
func TestSparsePlacement(t *testing.T) {
	for _, tc := range []struct {
		layers, start, end, interval int
		want                         []int
	}{
		{3, 1, -1, 1, []int{1, 2}},       // TinyErnie
		{4, 0, 2, 2, []int{1}},           // TinyErnieSparse: layer 3 is past the end
		{28, 1, -1, 1, rangeInts(1, 28)}, // ERNIE-4.5-21B-A3B
		{6, 0, -1, 2, []int{1, 3, 5}},
		{6, 2, 4, 3, []int{2}},  // 5 would fit the interval but is past the end
		{6, 3, -1, 3, []int{5}}, // 2 fits the interval but is before the start
		{5, 0, 3, 1, []int{0, 1, 2, 3}},
		{4, 0, 0, 1, []int{0}},
		{4, 0, -2, 1, nil},
		{4, 4, -1, 1, nil},
	} {
		c := Ernie{Layers: tc.layers, StartIndex: tc.start, EndIndex: tc.end, Interval: tc.interval}
		var got []int
		for i := 0; i < c.Layers; i++ {
			if c.Sparse(i) {
				got = append(got, i)
			}
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%d layers, start %d, end %d, interval %d: sparse %v, want %v",
				tc.layers, tc.start, tc.end, tc.interval, got, tc.want)
		}
	}
}

func rangeInts(lo, hi int) []int {
	var out []int
	for i := lo; i < hi; i++ {
		out = append(out, i)
	}
	return out
}

// wantTensors is the tensor list of an ERNIE-4.5 MoE checkpoint as the
// Hub release names it, written out for the tiny models' shapes (q_proj
// 4·12 = 48 wide, k_proj and v_proj 2·12 = 24): sparse lists the sparse
// layers.
func wantTensors(layers int, sparse []int, shared, tied bool) map[string][]int {
	w := map[string][]int{
		"model.embed_tokens.weight": {96, 32},
		"model.norm.weight":         {32},
	}
	if !tied {
		w["lm_head.weight"] = []int{96, 32}
	}
	for l := 0; l < layers; l++ {
		p := fmt.Sprintf("model.layers.%d.", l)
		w[p+"input_layernorm.weight"] = []int{32}
		w[p+"post_attention_layernorm.weight"] = []int{32}
		w[p+"self_attn.q_proj.weight"] = []int{48, 32}
		w[p+"self_attn.k_proj.weight"] = []int{24, 32}
		w[p+"self_attn.v_proj.weight"] = []int{24, 32}
		w[p+"self_attn.o_proj.weight"] = []int{32, 48}
		if !slices.Contains(sparse, l) {
			w[p+"mlp.gate_proj.weight"] = []int{48, 32}
			w[p+"mlp.up_proj.weight"] = []int{48, 32}
			w[p+"mlp.down_proj.weight"] = []int{32, 48}
			continue
		}
		w[p+"mlp.gate.weight"] = []int{8, 32}
		w[p+"mlp.moe_statics.e_score_correction_bias"] = []int{1, 8}
		qs := []string{}
		for e := 0; e < 8; e++ {
			qs = append(qs, fmt.Sprintf("%smlp.experts.%d.", p, e))
		}
		if shared {
			qs = append(qs, p+"mlp.shared_experts.")
		}
		for _, q := range qs {
			w[q+"gate_proj.weight"] = []int{16, 32}
			w[q+"up_proj.weight"] = []int{16, 32}
			w[q+"down_proj.weight"] = []int{32, 16}
		}
	}
	return w
}

// TestCheckpoint: the written model.safetensors holds exactly the
// tensors of the release layout (dense mlp.{gate,up,down}_proj in layer
// 0 of TinyErnie and layers 0, 2, 3 of TinyErnieSparse; router, [1, 8]
// correction bias, experts and shared experts in the sparse layers;
// lm_head iff untied), in float32; config.json holds exactly the fields
// of baidu/ERNIE-4.5-21B-A3B-PT's that this package writes, and
// generation_config.json bos 1, eos 2, pad 0. Two shared experts make
// shared_experts twice as wide; impossible descriptions are refused.
func TestCheckpoint(t *testing.T) {
	for _, tc := range []struct {
		c      Ernie
		sparse []int
	}{{TinyErnie(), []int{1, 2}}, {TinyErnieSparse(), []int{1}}} {
		c := tc.c
		dir := t.TempDir()
		if err := c.Write(dir); err != nil {
			t.Fatal(err)
		}
		ck, err := safetensors.Open(filepath.Join(dir, "model.safetensors"))
		if err != nil {
			t.Fatal(err)
		}
		want := wantTensors(c.Layers, tc.sparse, c.Shared > 0, c.Tied)
		if got, names := ck.Names(), slices.Sorted(maps.Keys(want)); !slices.Equal(got, names) {
			t.Errorf("seed %d: tensors:\n%s\nwant:\n%s", c.Seed, strings.Join(got, "\n"), strings.Join(names, "\n"))
		}
		for name, shape := range want {
			info, ok := ck.Info(name)
			if ok && (!slices.Equal(info.Shape, shape) || info.DType != safetensors.F32) {
				t.Errorf("%s: %s %v, want F32 %v", name, info.DType, info.Shape, shape)
			}
		}
		ck.Close()

		var cfg map[string]any
		b, err := os.ReadFile(filepath.Join(dir, "config.json"))
		if err == nil {
			err = json.Unmarshal(b, &cfg)
		}
		if err != nil {
			t.Fatal(err)
		}
		wantCfg := map[string]any{
			"model_type": "ernie4_5_moe", "vocab_size": 96.0, "hidden_size": 32.0, "intermediate_size": 48.0,
			"num_hidden_layers": float64(c.Layers), "num_attention_heads": 4.0, "num_key_value_heads": 2.0,
			"head_dim": 12.0, "max_position_embeddings": 256.0, "rope_theta": c.Theta, "rms_norm_eps": 1e-5,
			"tie_word_embeddings": c.Tied, "use_bias": false, "moe_num_experts": 8.0, "moe_k": float64(c.TopK),
			"moe_intermediate_size": 16.0, "moe_num_shared_experts": float64(c.Shared),
			"moe_layer_start_index": float64(c.StartIndex), "moe_layer_end_index": float64(c.EndIndex),
			"moe_layer_interval": float64(c.Interval), "moe_norm_min": 1e-12, "hidden_act": "silu",
			"bos_token_id": 1.0, "eos_token_id": 2.0, "pad_token_id": 0.0, "torch_dtype": "float32",
		}
		for key, want := range wantCfg {
			if v, ok := cfg[key]; !ok || v != want {
				t.Errorf("seed %d: config %s = %v (present %v), want %v", c.Seed, key, v, ok, want)
			}
		}
		if archs, _ := cfg["architectures"].([]any); len(archs) != 1 || archs[0] != "Ernie4_5_MoeForCausalLM" {
			t.Errorf("architectures %v", cfg["architectures"])
		}
		for key := range cfg {
			if _, ok := wantCfg[key]; !ok && key != "architectures" {
				t.Errorf("seed %d: config has %s = %v", c.Seed, key, cfg[key])
			}
		}
		b, err = os.ReadFile(filepath.Join(dir, "generation_config.json"))
		var gen map[string]any
		if err == nil {
			err = json.Unmarshal(b, &gen)
		}
		if err != nil || len(gen) != 3 || gen["bos_token_id"] != 1.0 || gen["eos_token_id"] != 2.0 || gen["pad_token_id"] != 0.0 {
			t.Errorf("generation_config.json %s (%v)", b, err)
		}
	}
	if c := TinyErnie(); c.ConfigJSON()["rope_theta"] != 500000.0 || TinyErnieSparse().ConfigJSON()["rope_theta"] != 10000.0 {
		t.Errorf("rope_theta %v, %v", c.ConfigJSON()["rope_theta"], TinyErnieSparse().ConfigJSON()["rope_theta"])
	}

	two := TinyErnie()
	two.Shared = 2
	for _, tn := range two.Tensors() {
		if tn.Name == "model.layers.1.mlp.shared_experts.down_proj.weight" && !slices.Equal(tn.Shape, []int{32, 32}) {
			t.Errorf("two shared experts: %s %v, want [32 32]", tn.Name, tn.Shape)
		}
	}
	noHeadDim := TinyErnie()
	noHeadDim.HeadDim = 0
	if got := noHeadDim.ConfigJSON()["head_dim"]; got != 8 {
		t.Errorf("head_dim 0 writes %v, want hidden/heads 8", got)
	}

	for _, tc := range []struct {
		bad func(*Ernie)
		ok  bool
	}{
		{func(c *Ernie) { c.KVHeads = 3 }, false},
		{func(c *Ernie) { c.Heads, c.HeadDim = 5, 0 }, false},
		{func(c *Ernie) { c.Heads, c.HeadDim = 5, 8 }, false}, // 5 heads on 2 KV heads
		{func(c *Ernie) { c.HeadDim = 7 }, false},
		{func(c *Ernie) { c.TopK = 9 }, false},
		{func(c *Ernie) { c.Interval = 0 }, false},
		{func(c *Ernie) { c.NormMin = -1 }, false},
		{func(c *Ernie) { c.Theta = 0 }, false},
		{func(c *Ernie) { c.Shared = -1 }, false},
		{func(c *Ernie) { c.HeadDim = 0 }, true},             // hidden/heads = 8
		{func(c *Ernie) { c.Heads, c.KVHeads = 8, 8 }, true}, // 8 heads of 12: q_proj 96 wide
	} {
		c := TinyErnie()
		tc.bad(&c)
		if err := c.Write(t.TempDir()); (err == nil) != tc.ok {
			t.Errorf("%+v: Write error %v", c, err)
		}
	}
}

// TestRoundTrip: Load reads back exactly the float32 values Write drew
// (fill over lmckpt.NewRand(Seed) in the order of Tensors), nothing more;
// the norms are not all 1 and the correction biases span well over 0.1;
// an untied description fails on a tied checkpoint's missing lm_head, a
// description with another placement on the missing router, and one with
// head_dim hidden/heads on the wider q_proj.
func TestRoundTrip(t *testing.T) {
	dirs := map[uint64]string{}
	for _, c := range flavours() {
		dir, m := load(t, c)
		dirs[c.Seed] = dir
		r := lmckpt.NewRand(c.Seed)
		ts := c.Tensors()
		if len(m.W) != len(ts) {
			t.Errorf("seed %d: %d tensors read, %d written", c.Seed, len(m.W), len(ts))
		}
		for _, tn := range ts {
			want := fill(r, tn)
			got := m.W[tn.Name]
			if len(got) != len(want) {
				t.Fatalf("%s: %d values, want %d", tn.Name, len(got), len(want))
			}
			for i := range want {
				if got[i] != float64(want[i]) {
					t.Fatalf("%s[%d] = %g, written %g", tn.Name, i, got[i], want[i])
				}
			}
		}
		for _, name := range []string{"input_layernorm.weight", "post_attention_layernorm.weight"} {
			if b := m.W["model.layers.1."+name]; slices.Max(b)-slices.Min(b) < 0.1 {
				t.Errorf("seed %d: %s %v", c.Seed, name, b)
			}
		}
		if b := m.W["model.layers.1.mlp.moe_statics.e_score_correction_bias"]; slices.Max(b)-slices.Min(b) < 0.15 {
			t.Errorf("seed %d: correction bias %v", c.Seed, b)
		}
	}
	tied := TinyErnie()
	untied := tied
	untied.Tied = false
	if _, err := untied.Load(dirs[tied.Seed]); err == nil || !strings.Contains(err.Error(), "lm_head") {
		t.Errorf("loading a tied checkpoint untied: %v", err)
	}
	moved := tied
	moved.StartIndex = 0
	if _, err := moved.Load(dirs[tied.Seed]); err == nil || !strings.Contains(err.Error(), "layers.0.mlp.gate.weight") {
		t.Errorf("loading with layer 0 sparse: %v", err)
	}
	narrow := tied
	narrow.HeadDim = 0
	if _, err := narrow.Load(dirs[tied.Seed]); err == nil || !strings.Contains(err.Error(), "q_proj") {
		t.Errorf("loading head_dim 12 as hidden/heads: %v", err)
	}
}

// TestCausal: the logits of a prefix are exactly the first rows of the
// whole sequence's, other tokens after position 5 leave rows 0…5 exactly
// as they were (and change the later ones), and every row is finite,
// O(1) and not constant.
func TestCausal(t *testing.T) {
	for _, c := range flavours() {
		_, m := load(t, c)
		refcheck.Causal(t, fmt.Sprintf("seed %d", c.Seed), m.Logits, testTokens, c.Vocab, []int{1, 5, 9}, 0.1)
	}
}

// TestShiftInvariance: the rotary is the only position signal and enters
// q·k through the distance alone, so starting at position 37 leaves the
// logits unchanged to rounding.
func TestShiftInvariance(t *testing.T) {
	for _, c := range flavours() {
		_, m := load(t, c)
		if d := maxAbsDiff(m.logits(testTokens, 37), m.Logits(testTokens)); d > 1e-9 {
			t.Errorf("seed %d: shifting the positions moves the logits by %g", c.Seed, d)
		}
	}
}

// projections returns layer p's input_layernorm output on token id's
// embedding and its raw q_proj, k_proj and v_proj outputs.
func projections(m *Model, p string, id int) (h, q, k, v []float64) {
	H := m.C.Hidden
	h = lmckpt.RMSNorm64(m.W["model.embed_tokens.weight"][id*H:(id+1)*H], m.W[p+"input_layernorm.weight"], m.C.Eps)
	lin := func(name string) []float64 {
		w := m.W[p+"self_attn."+name+".weight"]
		out := make([]float64, len(w)/H)
		for j := range out {
			for i, x := range h {
				out[j] += w[j*H+i] * x
			}
		}
		return out
	}
	return h, lin("q_proj"), lin("k_proj"), lin("v_proj")
}

// TestRotaryOnCheckpoint: in layer 1 of both tiny checkpoints the query
// and key heads at position 0 are q_proj's and k_proj's raw outputs cut
// into heads of 12 (no q/k norm, no rotation); v is v_proj's. At
// position 5 every query and key head is the position-0 head with each
// adjacent pair (2j, 2j+1) turned by 5·inv_j, v unmoved; rotate-half
// would differ.
func TestRotaryOnCheckpoint(t *testing.T) {
	for _, c := range flavours() {
		_, m := load(t, c)
		p := "model.layers.1."
		h, rq, rk, rv := projections(m, p, 7)
		inv := c.RopeFreqs()
		q, k, v := m.project(p, h, 0, inv)
		nearAll(t, "q at position 0", slices.Concat(q...), rq, 1e-12)
		nearAll(t, "k at position 0", slices.Concat(k...), rk, 1e-12)
		nearAll(t, "v", slices.Concat(v...), rv, 1e-12)
		q5, k5, v5 := m.project(p, h, 5, inv)
		if !slices.Equal(slices.Concat(v5...), slices.Concat(v...)) {
			t.Errorf("seed %d: the rotary moves v", c.Seed)
		}
		for _, tc := range []struct {
			name     string
			at0, at5 [][]float64
		}{{"q", q, q5}, {"k", k, k5}} {
			for hd := range tc.at0 {
				for j := range inv {
					a, b := tc.at0[hd][2*j], tc.at0[hd][2*j+1]
					rot := complex(a, b) * complex(math.Cos(5*inv[j]), math.Sin(5*inv[j]))
					if math.Abs(tc.at5[hd][2*j]-real(rot)) > 1e-12 || math.Abs(tc.at5[hd][2*j+1]-imag(rot)) > 1e-12 {
						t.Errorf("seed %d: %s head %d, pair %d: (%g, %g), want (%g, %g)", c.Seed, tc.name, hd, j,
							tc.at5[hd][2*j], tc.at5[hd][2*j+1], real(rot), imag(rot))
					}
				}
				if d := maxAbsDiff([][]float64{rotateHalf(tc.at0[hd], 5, inv)}, [][]float64{tc.at5[hd]}); d < 1e-3 {
					t.Errorf("seed %d: %s head %d: rotate-half differs by %g only", c.Seed, tc.name, hd, d)
				}
			}
		}
	}
}

// TestFirstPositionAttention: the first position attends to itself
// alone, so query head h outputs value head h/(Heads/KVHeads): rows
// (h/2)·12 … +12 of v_proj applied to the normed input.
func TestFirstPositionAttention(t *testing.T) {
	for _, c := range flavours() {
		_, m := load(t, c)
		p := "model.layers.1."
		x := m.W["model.embed_tokens.weight"][5*c.Hidden : 6*c.Hidden]
		got := m.attention(p, [][]float64{x}, 0)[0]
		if len(got) != 48 {
			t.Fatalf("attention output %d wide, want 4·12", len(got))
		}
		_, _, _, rv := projections(m, p, 5)
		for hd := 0; hd < c.Heads; hd++ {
			nearAll(t, fmt.Sprintf("seed %d, head %d", c.Seed, hd), got[hd*12:(hd+1)*12], rv[(hd/2)*12:(hd/2+1)*12], 1e-12)
		}
	}
}

// TestSecondPositionAttention: at position 1 query head h weighs the
// value heads of positions 0 and 1 of its KV head h/2 by the softmax of
// q·k/sqrt(12) (head_dim^-0.5 with head_dim 12, not hidden/heads 8), with
// the heads as project gives them.
func TestSecondPositionAttention(t *testing.T) {
	for _, c := range flavours() {
		_, m := load(t, c)
		emb := m.W["model.embed_tokens.weight"]
		x := [][]float64{emb[5*c.Hidden : 6*c.Hidden], emb[9*c.Hidden : 10*c.Hidden]}
		p := "model.layers.0."
		got := m.attention(p, x, 0)[1]
		var q, k, v [2][][]float64
		for pos := range x {
			h := lmckpt.RMSNorm64(x[pos], m.W[p+"input_layernorm.weight"], c.Eps)
			q[pos], k[pos], v[pos] = m.project(p, h, pos, c.RopeFreqs())
		}
		for hd := 0; hd < c.Heads; hd++ {
			var s [2]float64
			for pos := range s {
				for i := range 12 {
					s[pos] += q[1][hd][i] * k[pos][hd/2][i] / math.Sqrt(12)
				}
			}
			p0 := 1 / (1 + math.Exp(s[1]-s[0]))
			for i := range 12 {
				want := p0*v[0][hd/2][i] + (1-p0)*v[1][hd/2][i]
				if g := got[hd*12+i]; math.Abs(g-want) > 1e-12 {
					t.Fatalf("seed %d, head %d, dim %d: %g, want %g", c.Seed, hd, i, g, want)
				}
			}
		}
	}
}

// TestRoutingOnActivations: only the sparse layers route (tokens ×
// sparse layers inputs); Experts is what Route chooses from the layer's
// mlp.gate and correction bias on the real inputs, TopK experts weighed
// by unbiased scores summing to 1; the routing is not degenerate (at
// least 5 of the 8 experts chosen per sparse layer, no near tie of the
// biased scores at the top-k edge), and the correction bias changes the
// chosen set for some tokens but not for all.
func TestRoutingOnActivations(t *testing.T) {
	for _, c := range flavours() {
		_, m := load(t, c)
		used := map[int]map[int]bool{}
		var n, changed int
		m.moeInput = func(l int, h []float64) {
			n++
			if !c.Sparse(l) {
				t.Fatalf("dense layer %d routes", l)
			}
			p := fmt.Sprintf("model.layers.%d.mlp.", l)
			logits := make([]float64, c.Experts)
			for e := range logits {
				for i, v := range h {
					logits[e] += m.W[p+"gate.weight"][e*c.Hidden+i] * v
				}
			}
			bias := m.W[p+"moe_statics.e_score_correction_bias"]
			ids, ws := c.Route(logits, bias)
			got, gotW := m.Experts(l, h)
			if !slices.Equal(got, ids) || !slices.Equal(gotW, ws) || len(got) != c.TopK {
				t.Fatalf("seed %d: Experts %v %v, Route %v %v, top %d", c.Seed, got, gotW, ids, ws, c.TopK)
			}
			scores := lmckpt.Softmax64(logits)
			biased := make([]float64, len(scores))
			sum := 0.0
			for e := range scores {
				biased[e] = scores[e] + bias[e]
			}
			for _, e := range ids {
				sum += scores[e]
			}
			for j, e := range ids {
				if math.Abs(ws[j]-scores[e]/sum) > 1e-15 {
					t.Errorf("seed %d: weight %g of expert %d, want its score over the sum %g", c.Seed, ws[j], e, scores[e]/sum)
				}
			}
			sorted := slices.Clone(biased)
			slices.Sort(sorted)
			slices.Reverse(sorted)
			if sorted[c.TopK-1]-sorted[c.TopK] < 1e-6 {
				t.Errorf("seed %d, layer %d: a near tie at the top-%d edge %v", c.Seed, l, c.TopK, sorted)
			}
			plain, _ := c.Route(logits, nil)
			if !slices.Equal(slices.Sorted(slices.Values(plain)), slices.Sorted(slices.Values(ids))) {
				changed++
			}
			if used[l] == nil {
				used[l] = map[int]bool{}
			}
			for _, e := range ids {
				used[l][e] = true
			}
		}
		m.Logits(testTokens)
		sparse := 0
		for l := 0; l < c.Layers; l++ {
			if c.Sparse(l) {
				sparse++
				if len(used[l]) < 5 {
					t.Errorf("seed %d, layer %d: only experts %v chosen", c.Seed, l, slices.Sorted(maps.Keys(used[l])))
				}
			}
		}
		if want := len(testTokens) * sparse; n != want {
			t.Errorf("seed %d: %d MoE inputs, want %d", c.Seed, n, want)
		}
		if changed == 0 || changed == n {
			t.Errorf("seed %d: the correction bias changes the choice of %d of %d tokens", c.Seed, changed, n)
		}
		t.Logf("seed %d: the correction bias changes the chosen experts of %d of %d token-layers", c.Seed, changed, n)
	}
}

// TestSwitchesMatter: the tiny checkpoints are sensitive to each feature
// the reference computes: rotate-half instead of adjacent pairs,
// weighing the experts by their biased scores, choosing them without the
// correction bias, not renormalising, and (TinyErnie) leaving the shared
// expert out each move the logits.
func TestSwitchesMatter(t *testing.T) {
	for _, c := range flavours() {
		_, m := load(t, c)
		want := m.Logits(testTokens)
		check := func(what string, mm *Model) {
			t.Helper()
			d := maxAbsDiff(mm.Logits(testTokens), want)
			if d < 1e-3 {
				t.Errorf("seed %d: %s moves the logits by %g only", c.Seed, what, d)
			}
			t.Logf("seed %d: %s moves the logits by %.3g", c.Seed, what, d)
		}
		check("rotate-half", &Model{C: c, W: m.W, Mistakes: Mistakes{HalfRotary: true}})
		check("weights from biased scores", &Model{C: c, W: m.W, Mistakes: Mistakes{BiasedWeights: true}})
		check("choice without the bias", &Model{C: c, W: m.W, Mistakes: Mistakes{UnbiasedChoice: true}})
		check("no renormalisation", &Model{C: c, W: m.W, Mistakes: Mistakes{NoRenorm: true}})
		if c.Shared > 0 {
			check("no shared expert", &Model{C: c, W: m.W, Mistakes: Mistakes{NoShared: true}})
		}
	}
}
