package graniteref

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
func load(t *testing.T, c Granite) (string, *Model) {
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

func flavours() []Granite { return []Granite{TinyGranite(), TinyGraniteMoe()} }

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

// tiny2 is a hand-built description of hidden 2 with one head of
// head_dim 2 (inverse frequency 1 whatever rope_theta), every multiplier
// 1 unless a test sets it.
func tiny2() Granite {
	return Granite{
		Vocab: 2, Hidden: 2, Intermediate: 1, Layers: 0, Heads: 1, KVHeads: 1,
		EmbeddingMultiplier: 1, AttentionMultiplier: 1, ResidualMultiplier: 1, LogitsScaling: 1,
		Theta: 10000,
	}
}

// TestEmbeddingAndLogitsScaling: with no layers, tied embeddings
// E = ((0.5, 0.5), (1, -0.5)), norm weights 1 and eps 0.5, token 0 times
// embedding_multiplier 2 is (1, 1), mean square 1, normed
// (1, 1)/sqrt(1.5), so the logits are (1, 0.5)/sqrt(1.5) divided by
// logits_scaling 4. Without the multiplier the stream is (0.5, 0.5),
// mean square 0.25, normed (0.5, 0.5)/sqrt(0.75): logits
// (0.5, 0.25)/sqrt(0.75)/4 (eps makes RMSNorm see the scale). Without the
// scaling the logits are 4 times larger.
func TestEmbeddingAndLogitsScaling(t *testing.T) {
	c := tiny2()
	c.EmbeddingMultiplier, c.LogitsScaling, c.Eps, c.Tied = 2, 4, 0.5, true
	w := map[string][]float64{
		"model.embed_tokens.weight": {0.5, 0.5, 1, -0.5},
		"model.norm.weight":         {1, 1},
	}
	m := &Model{C: c, W: w}
	s15, s75 := math.Sqrt(1.5), math.Sqrt(0.75)
	nearAll(t, "granite", m.Logits([]int{0})[0], []float64{1 / s15 / 4, 0.5 / s15 / 4}, 1e-15)
	m.Mistakes = Mistakes{NoEmbeddingMultiplier: true}
	nearAll(t, "no embedding multiplier", m.Logits([]int{0})[0], []float64{0.5 / s75 / 4, 0.25 / s75 / 4}, 1e-15)
	m.Mistakes = Mistakes{NoLogitsScaling: true}
	nearAll(t, "no logits scaling", m.Logits([]int{0})[0], []float64{1 / s15, 0.5 / s15}, 1e-15)
}

// TestResidualMultiplier: one layer on one token (its attention weight
// is 1 whatever the scores), eps 0, norm weights 1, v_proj the identity,
// o_proj the swap of the two entries, the MLP (gate_proj (1, 0), up_proj
// (0, 1), down_proj (1, 0)ᵀ) giving (silu(z0)·z1, 0) on its input z, and
// lm_head the identity. On the embedding x = (3, 1):
// h1 = x + r·swap(x/rms(x)), h2 = h1 + r·mlp(h1/rms(h1)), logits
// h2/rms(h2). residual_multiplier r = 0.5 scales both sublayers;
// NoResidualMultiplier is r = 1.
func TestResidualMultiplier(t *testing.T) {
	c := tiny2()
	c.Layers, c.ResidualMultiplier = 1, 0.5
	w := map[string][]float64{
		"model.embed_tokens.weight":                      {3, 1, 0, 0},
		"model.layers.0.input_layernorm.weight":          {1, 1},
		"model.layers.0.self_attn.q_proj.weight":         {0.3, -0.2, 0.7, 0.1},
		"model.layers.0.self_attn.k_proj.weight":         {-0.4, 0.5, 0.2, 0.9},
		"model.layers.0.self_attn.v_proj.weight":         {1, 0, 0, 1},
		"model.layers.0.self_attn.o_proj.weight":         {0, 1, 1, 0},
		"model.layers.0.post_attention_layernorm.weight": {1, 1},
		"model.layers.0.mlp.gate_proj.weight":            {1, 0},
		"model.layers.0.mlp.up_proj.weight":              {0, 1},
		"model.layers.0.mlp.down_proj.weight":            {1, 0},
		"model.norm.weight":                              {1, 1},
		"lm_head.weight":                                 {1, 0, 0, 1},
	}
	rms := func(v []float64) float64 { return math.Sqrt((v[0]*v[0] + v[1]*v[1]) / 2) }
	want := func(r float64) []float64 {
		x := []float64{3, 1}
		n := rms(x)
		h1 := []float64{x[0] + r*x[1]/n, x[1] + r*x[0]/n}
		n1 := rms(h1)
		z0, z1 := h1[0]/n1, h1[1]/n1
		h2 := []float64{h1[0] + r*lmckpt.SiLU64(z0)*z1, h1[1]}
		n2 := rms(h2)
		return []float64{h2[0] / n2, h2[1] / n2}
	}
	m := &Model{C: c, W: w}
	nearAll(t, "residual_multiplier 0.5", m.Logits([]int{0})[0], want(0.5), 1e-14)
	m.Mistakes = Mistakes{NoResidualMultiplier: true}
	nearAll(t, "no residual multiplier", m.Logits([]int{0})[0], want(1), 1e-14)
	if d := maxAbsDiff([][]float64{want(0.5)}, [][]float64{want(1)}); d < 0.05 {
		t.Errorf("the two answers differ by %g only", d)
	}
}

// TestAttentionMultiplier: one head of head_dim 2 (inverse frequency 1),
// q, k and v the identity, eps 0, on x0 = (1, 1) and x1 = (1, -1) (both
// of mean square 1, so the norm leaves them alone). At position 1 the
// query q1 = x1 turned by 1 rad = (cos 1 + sin 1, sin 1 - cos 1); its
// dot with k1 (also turned by 1 rad) is |x1|² = 2 and with k0 = x0 it is
// 2·sin 1. With scale a the weights differ by w1 - w0 = tanh(a(1 - sin 1)),
// so the output is w0·x0 + w1·x1 = (1, -tanh(a(1 - sin 1))); position 0
// sees only itself, (1, 1). a is attention_multiplier 0.03, or 2^-0.5
// with DefaultAttentionScale. Starting at position 5 changes nothing.
func TestAttentionMultiplier(t *testing.T) {
	c := tiny2()
	c.AttentionMultiplier = 0.03
	w := map[string][]float64{
		"input_layernorm.weight":  {1, 1},
		"self_attn.q_proj.weight": {1, 0, 0, 1},
		"self_attn.k_proj.weight": {1, 0, 0, 1},
		"self_attn.v_proj.weight": {1, 0, 0, 1},
	}
	x := [][]float64{{1, 1}, {1, -1}}
	for _, tc := range []struct {
		what  string
		m     Mistakes
		scale float64
	}{{"attention_multiplier", Mistakes{}, 0.03}, {"head_dim^-0.5", Mistakes{DefaultAttentionScale: true}, 1 / math.Sqrt2}} {
		m := &Model{C: c, W: w, Mistakes: tc.m}
		for _, start := range []int{0, 5} {
			out := m.attention("", x, start)
			nearAll(t, tc.what+", position 0", out[0], []float64{1, 1}, 1e-15)
			nearAll(t, tc.what+", position 1", out[1], []float64{1, -math.Tanh(tc.scale * (1 - math.Sin(1)))}, 1e-15)
		}
	}
}

// TestRotary: head_dim 4 at rope_theta 1e4 has inverse frequencies 1 and
// 0.01; at position 1, (1, 2, 3, 4) turns the pairs (1, 3) by 1 rad and
// (2, 4) by 0.01 rad (Llama's rotate_half: entry j with entry j+2).
func TestRotary(t *testing.T) {
	c := Granite{Hidden: 8, Heads: 2, Theta: 10000}
	inv := c.RopeFreqs()
	nearAll(t, "inv_freq", inv, []float64{1, 0.01}, 1e-15)
	c1, s1, c2, s2 := math.Cos(1), math.Sin(1), math.Cos(0.01), math.Sin(0.01)
	want := []float64{1*c1 - 3*s1, 2*c2 - 4*s2, 3*c1 + 1*s1, 4*c2 + 2*s2}
	nearAll(t, "position 1", rotateHalf([]float64{1, 2, 3, 4}, 1, inv), want, 1e-15)
	nearAll(t, "position 0", rotateHalf([]float64{1, 2, 3, 4}, 0, inv), []float64{1, 2, 3, 4}, 0)
}

// TestRouteHandWorked: on router logits (1, 3, 2, 0.5) the top 2 are
// experts 1 and 2, weighed by the softmax of (3, 2) alone: e/(1+e) and
// 1/(1+e) (a softmax over all four logits would give about 0.63 and
// 0.23, not summing to 1). A constant added to every logit changes
// nothing; the top 3 add expert 0 with softmax(3, 2, 1); the top 1 has
// weight 1; on a tie the lower index wins.
func TestRouteHandWorked(t *testing.T) {
	logits := []float64{1, 3, 2, 0.5}
	e := math.E
	check := func(what string, k int, shift float64, wantIDs []int, wantW []float64) {
		t.Helper()
		l := slices.Clone(logits)
		for i := range l {
			l[i] += shift
		}
		ids, w := Granite{Experts: 4, TopK: k}.Route(l)
		if !slices.Equal(ids, wantIDs) {
			t.Errorf("%s: experts %v, want %v", what, ids, wantIDs)
			return
		}
		nearAll(t, what, w, wantW, 1e-15)
	}
	check("top 2", 2, 0, []int{1, 2}, []float64{e / (1 + e), 1 / (1 + e)})
	check("top 2, shifted", 2, -7.25, []int{1, 2}, []float64{e / (1 + e), 1 / (1 + e)})
	z := e*e + e + 1
	check("top 3", 3, 0, []int{1, 2, 0}, []float64{e * e / z, e / z, 1 / z})
	check("top 1", 1, 0, []int{1}, []float64{1})
	if ids, _ := (Granite{Experts: 3, TopK: 1}).Route([]float64{0, 2, 2}); !slices.Equal(ids, []int{1}) {
		t.Errorf("tie: experts %v, want [1]", ids)
	}
}

// TestMoEChunkOrder: block_sparse_moe of 2 experts of width 1 on hidden 2,
// top 2, router the identity (logits = h). Expert 0's input_linear rows
// are (1, 0) then (0, 1), its output_linear (1, 0)ᵀ; expert 1's rows
// (0, 1) then (1, 1), its output_linear (0, 2)ᵀ. On h = (0.5, 1.5) the
// router picks 1 then 0 with weights σ(1) and 1-σ(1); expert 0 takes
// gate 0.5 (the FIRST row) and up 1.5: (silu(0.5)·1.5, 0); expert 1
// gate 1.5 and up 2: (0, 2·silu(1.5)·2). With UpFirst the halves swap:
// (silu(1.5)·0.5, 0) and (0, 2·silu(2)·1.5).
func TestMoEChunkOrder(t *testing.T) {
	c := tiny2()
	c.Experts, c.TopK = 2, 2
	w := map[string][]float64{
		"model.layers.0.block_sparse_moe.router.layer.weight":  {1, 0, 0, 1},
		"model.layers.0.block_sparse_moe.input_linear.weight":  {1, 0, 0, 1, 0, 1, 1, 1},
		"model.layers.0.block_sparse_moe.output_linear.weight": {1, 0, 0, 2},
	}
	h := []float64{0.5, 1.5}
	sig := 1 / (1 + math.Exp(-1))
	m := &Model{C: c, W: w}
	ids, ws := m.Experts(0, h)
	if !slices.Equal(ids, []int{1, 0}) {
		t.Fatalf("experts %v, want [1 0]", ids)
	}
	nearAll(t, "weights", ws, []float64{sig, 1 - sig}, 1e-15)
	nearAll(t, "gate first", m.moe(0, h), []float64{(1 - sig) * lmckpt.SiLU64(0.5) * 1.5, sig * 2 * lmckpt.SiLU64(1.5) * 2}, 1e-15)
	m.Mistakes = Mistakes{UpFirst: true}
	nearAll(t, "up first (the mistake)", m.moe(0, h), []float64{(1 - sig) * lmckpt.SiLU64(1.5) * 0.5, sig * 2 * lmckpt.SiLU64(2) * 1.5}, 1e-15)
}

// wantTensors lists the names and shapes of c's checkpoint, written out
// independently of Tensors.
func wantTensors(c Granite) map[string][]int {
	want := map[string][]int{"model.embed_tokens.weight": {96, 32}, "model.norm.weight": {32}}
	if !c.Tied {
		want["lm_head.weight"] = []int{96, 32}
	}
	for _, l := range []string{"0", "1"} {
		p := "model.layers." + l + "."
		want[p+"input_layernorm.weight"] = []int{32}
		want[p+"post_attention_layernorm.weight"] = []int{32}
		want[p+"self_attn.q_proj.weight"] = []int{32, 32}
		want[p+"self_attn.k_proj.weight"] = []int{16, 32}
		want[p+"self_attn.v_proj.weight"] = []int{16, 32}
		want[p+"self_attn.o_proj.weight"] = []int{32, 32}
		if c.MoE() {
			want[p+"block_sparse_moe.router.layer.weight"] = []int{8, 32}
			want[p+"block_sparse_moe.input_linear.weight"] = []int{8, 32, 32}
			want[p+"block_sparse_moe.output_linear.weight"] = []int{8, 32, 16}
		} else {
			want[p+"mlp.gate_proj.weight"] = []int{48, 32}
			want[p+"mlp.up_proj.weight"] = []int{48, 32}
			want[p+"mlp.down_proj.weight"] = []int{32, 48}
		}
	}
	return want
}

// TestCheckpoint: the tiny checkpoints hold exactly the release's tensor
// names with their shapes in float32, config.json exactly the fields of
// the granite-3.1 instruct configs with the description's values, and
// generation_config.json bos, eos and pad 0.
func TestCheckpoint(t *testing.T) {
	for _, c := range flavours() {
		dir := t.TempDir()
		if err := c.Write(dir); err != nil {
			t.Fatal(err)
		}
		ck, err := safetensors.Open(filepath.Join(dir, "model.safetensors"))
		if err != nil {
			t.Fatal(err)
		}
		want := wantTensors(c)
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
			"vocab_size": 96.0, "hidden_size": 32.0, "intermediate_size": float64(c.Intermediate),
			"num_hidden_layers": 2.0, "num_attention_heads": 4.0, "num_key_value_heads": 2.0,
			"max_position_embeddings": 256.0, "embedding_multiplier": c.EmbeddingMultiplier,
			"attention_multiplier": c.AttentionMultiplier, "residual_multiplier": c.ResidualMultiplier,
			"logits_scaling": c.LogitsScaling, "rope_theta": 10000.0, "rope_scaling": nil, "rms_norm_eps": c.Eps,
			"attention_bias": false, "attention_dropout": 0.0, "tie_word_embeddings": c.Tied,
			"hidden_act": "silu", "initializer_range": 0.02, "use_cache": true,
			"bos_token_id": 0.0, "eos_token_id": 0.0, "pad_token_id": 0.0, "torch_dtype": "float32",
		}
		arch := "GraniteForCausalLM"
		if c.MoE() {
			arch = "GraniteMoeForCausalLM"
			wantCfg["model_type"] = "granitemoe"
			wantCfg["num_local_experts"] = 8.0
			wantCfg["num_experts_per_tok"] = 2.0
			wantCfg["output_router_logits"] = false
			wantCfg["router_aux_loss_coef"] = 0.0
		} else {
			wantCfg["model_type"] = "granite"
			wantCfg["mlp_bias"] = false
		}
		for key, want := range wantCfg {
			if v, ok := cfg[key]; !ok || v != want {
				t.Errorf("seed %d: config %s = %v (present %v), want %v", c.Seed, key, v, ok, want)
			}
		}
		if archs, _ := cfg["architectures"].([]any); len(archs) != 1 || archs[0] != arch {
			t.Errorf("architectures %v, want [%s]", cfg["architectures"], arch)
		}
		for key := range cfg {
			if _, ok := wantCfg[key]; !ok && key != "architectures" {
				t.Errorf("seed %d: config has %s = %v", c.Seed, key, cfg[key])
			}
		}
		var gen map[string]any
		b, err = os.ReadFile(filepath.Join(dir, "generation_config.json"))
		if err == nil {
			err = json.Unmarshal(b, &gen)
		}
		if err != nil {
			t.Fatal(err)
		}
		if !maps.Equal(gen, map[string]any{"bos_token_id": 0.0, "eos_token_id": 0.0, "pad_token_id": 0.0}) {
			t.Errorf("generation_config %v", gen)
		}
	}
}

// TestTinyParameters pins the tiny models' descriptions.
func TestTinyParameters(t *testing.T) {
	d, m := TinyGranite(), TinyGraniteMoe()
	if d != (Granite{Vocab: 96, Hidden: 32, Intermediate: 48, Layers: 2, Heads: 4, KVHeads: 2,
		EmbeddingMultiplier: 12, AttentionMultiplier: 0.03, ResidualMultiplier: 0.22, LogitsScaling: 6,
		Theta: 10000, Eps: 1e-5, Tied: true, Seed: 3100}) || d.MoE() {
		t.Errorf("TinyGranite %+v", d)
	}
	if !m.MoE() || m.Experts != 8 || m.TopK != 2 || m.Intermediate != 16 || m.Tied ||
		m.EmbeddingMultiplier == d.EmbeddingMultiplier || m.AttentionMultiplier == d.AttentionMultiplier ||
		m.ResidualMultiplier == d.ResidualMultiplier || m.LogitsScaling == d.LogitsScaling {
		t.Errorf("TinyGraniteMoe %+v", m)
	}
}

// TestRoundTrip: Load returns exactly the float32 values Write drew;
// loading a tied checkpoint untied fails on lm_head, the dense one as
// MoE on the router, the MoE one as dense on mlp.gate_proj.
func TestRoundTrip(t *testing.T) {
	dirs := map[bool]string{}
	for _, c := range flavours() {
		dir, m := load(t, c)
		dirs[c.MoE()] = dir
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
	}
	untied := TinyGranite()
	untied.Tied = false
	if _, err := untied.Load(dirs[false]); err == nil || !strings.Contains(err.Error(), "lm_head") {
		t.Errorf("loading a tied checkpoint untied: %v", err)
	}
	moe := TinyGranite()
	moe.Experts, moe.TopK = 8, 2
	if _, err := moe.Load(dirs[false]); err == nil || !strings.Contains(err.Error(), "router") {
		t.Errorf("loading the dense checkpoint as MoE: %v", err)
	}
	dense := TinyGraniteMoe()
	dense.Experts = 0
	if _, err := dense.Load(dirs[true]); err == nil || !strings.Contains(err.Error(), "mlp.gate_proj") {
		t.Errorf("loading the MoE checkpoint as dense: %v", err)
	}
}

// TestCausal: the logits of a prefix are exactly the first rows of the
// whole sequence's, other tokens after position 5 leave rows 0…5 exactly
// as they were (and change the later ones), and every row is finite and
// not constant.
func TestCausal(t *testing.T) {
	for _, c := range flavours() {
		_, m := load(t, c)
		refcheck.Causal(t, fmt.Sprintf("seed %d", c.Seed), m.Logits, testTokens, c.Vocab, []int{1, 5, 9}, 0.05)
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

// TestRoutingVaries: on the tiny MoE's real activations the router does
// not send every token to the same pair of experts.
func TestRoutingVaries(t *testing.T) {
	_, m := load(t, TinyGraniteMoe())
	H := m.C.Hidden
	pairs := map[[2]int]bool{}
	for _, id := range testTokens {
		x := m.W["model.embed_tokens.weight"][id*H : (id+1)*H]
		ids, _ := m.Experts(0, lmckpt.RMSNorm64(x, m.W["model.layers.0.post_attention_layernorm.weight"], m.C.Eps))
		pairs[[2]int{ids[0], ids[1]}] = true
	}
	if len(pairs) < 3 {
		t.Errorf("%d token embeddings reach only %d expert pairs", len(testTokens), len(pairs))
	}
}

// TestSwitchesMatter: the tiny checkpoints are sensitive to each feature
// the reference computes: leaving out the embedding multiplier, the
// default attention scale, leaving out the residual multiplier, leaving
// the logits undivided, and (MoE) reading input_linear's halves as up
// then gate each move the logits.
func TestSwitchesMatter(t *testing.T) {
	for _, c := range flavours() {
		_, m := load(t, c)
		want := m.Logits(testTokens)
		check := func(what string, mk Mistakes) {
			t.Helper()
			d := maxAbsDiff((&Model{C: c, W: m.W, Mistakes: mk}).Logits(testTokens), want)
			if d < 1e-3 {
				t.Errorf("seed %d: %s moves the logits by %g only", c.Seed, what, d)
			}
			t.Logf("seed %d: %s moves the logits by %.3g", c.Seed, what, d)
		}
		check("no embedding multiplier", Mistakes{NoEmbeddingMultiplier: true})
		check("default attention scale", Mistakes{DefaultAttentionScale: true})
		check("no residual multiplier", Mistakes{NoResidualMultiplier: true})
		check("no logits scaling", Mistakes{NoLogitsScaling: true})
		if c.MoE() {
			check("up first", Mistakes{UpFirst: true})
		}
	}
}
