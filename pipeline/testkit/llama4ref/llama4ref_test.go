package llama4ref

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

// testTokens is the 11-token prompt: it crosses the chunk boundaries of
// both tiny models (4 and 8 for TinyScout, 6 for TinyMaverick) and the
// temperature steps (positions 3 and 7 at floor_scale 4, 2, 5 and 8 at
// floor_scale 3).
var testTokens = []int{1, 9, 14, 60, 3, 5, 41, 27, 88, 2, 17}

// load writes c's checkpoint into a temporary directory and reads it back.
func load(t *testing.T, c Llama4) (string, *Model) {
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

func flavours() []Llama4 { return []Llama4{TinyScout(), TinyMaverick()} }

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

func sigmoid(v float64) float64 { return 1 / (1 + math.Exp(-v)) }

// TestRouteHandWorked: Llama4Router on logits (0.5, 2, -1, 1.2): the top 1
// is expert 1 with score sigmoid(2) ≈ 0.8808; the top 2 add expert 3 with
// sigmoid(1.2) ≈ 0.7685 (scores need not sum to 1, and are not
// renormalised). The softmax mistake scores the same experts by
// e^2/Σ and e^1.2/Σ over all four logits. On a tie the lower index wins.
func TestRouteHandWorked(t *testing.T) {
	logits := []float64{0.5, 2, -1, 1.2}
	c := Llama4{Experts: 4, TopK: 1}
	ids, s := c.Route(logits)
	if !slices.Equal(ids, []int{1}) {
		t.Fatalf("top 1: %v", ids)
	}
	nearAll(t, "top 1", s, []float64{sigmoid(2)}, 1e-15)
	if math.Abs(s[0]-0.8807970779778823) > 1e-15 {
		t.Errorf("sigmoid(2) = %v", s[0])
	}
	c.TopK = 2
	ids, s = c.Route(logits)
	if !slices.Equal(ids, []int{1, 3}) {
		t.Fatalf("top 2: %v", ids)
	}
	nearAll(t, "top 2", s, []float64{sigmoid(2), sigmoid(1.2)}, 1e-15)
	if math.Abs(s[1]-0.7685247834990175) > 1e-15 {
		t.Errorf("sigmoid(1.2) = %v", s[1])
	}
	c.Mistakes.SoftmaxRouter = true
	ids, s = c.Route(logits)
	z := math.Exp(0.5) + math.Exp(2) + math.Exp(-1) + math.Exp(1.2)
	if !slices.Equal(ids, []int{1, 3}) {
		t.Fatalf("softmax top 2: %v", ids)
	}
	nearAll(t, "softmax top 2 (the mistake)", s, []float64{math.Exp(2) / z, math.Exp(1.2) / z}, 1e-15)

	ids, s = Llama4{Experts: 3, TopK: 1}.Route([]float64{0, 2, 2})
	if !slices.Equal(ids, []int{1}) {
		t.Errorf("tie: experts %v, want [1] (the lower index)", ids)
	}
	nearAll(t, "tie", s, []float64{sigmoid(2)}, 1e-15)
}

// TestMoEHandWorked: Llama4TextMoe on a hand-built block of hidden 2,
// width 1 and 3 experts of which 2 are chosen. Router rows (1, 0),
// (0, 1), (-1, -1): on h = (0.8, 0.3) the logits are (0.8, 0.3, -1.1), so
// experts 0 and 1 win with scores s0 = sigmoid(0.8), s1 = sigmoid(0.3).
// gate_up_proj[e] = [[g_e, 1], [0, 1]] (x @ it: gate g_e·x0, up x0+x1)
// and down_proj[e] = [[d_e, 0]], so expert e computes
// (d_e·silu(g_e·x0)·(x0+x1), 0). Each chosen expert reads s_e·h:
// out0 = Σ d_e·silu(g_e·s_e·0.8)·s_e·1.1. The shared expert (gate (1, 0),
// up (0, 1), down (0, 2)) adds (0, 2·silu(0.8)·0.3) on the unscaled h.
// Scaling the outputs instead (the mistake) gives
// Σ s_e·d_e·silu(g_e·0.8)·1.1, a different number as silu is not linear.
func TestMoEHandWorked(t *testing.T) {
	c := Llama4{Hidden: 2, Intermediate: 1, Layers: 1, Experts: 3, TopK: 2, InterleaveMoE: 1, NoRopeInterval: 4}
	p := "model.layers.0.feed_forward."
	g, d := []float64{0.5, -1, 2}, []float64{1, 2, 3}
	var gu, down []float64
	for e := range 3 {
		gu = append(gu, g[e], 1, 0, 1)
		down = append(down, d[e], 0)
	}
	w := map[string][]float64{
		p + "router.weight":                  {1, 0, 0, 1, -1, -1},
		p + "experts.gate_up_proj":           gu,
		p + "experts.down_proj":              down,
		p + "shared_expert.gate_proj.weight": {1, 0},
		p + "shared_expert.up_proj.weight":   {0, 1},
		p + "shared_expert.down_proj.weight": {0, 2},
	}
	m := &Model{C: c, W: w}
	h := []float64{0.8, 0.3}
	s := []float64{sigmoid(0.8), sigmoid(0.3)}
	shared := 2 * lmckpt.SiLU64(0.8) * 0.3
	want := 0.0
	after := 0.0
	for e := range 2 {
		want += d[e] * lmckpt.SiLU64(g[e]*s[e]*0.8) * s[e] * 1.1
		after += s[e] * d[e] * lmckpt.SiLU64(g[e]*0.8) * 1.1
	}
	nearAll(t, "moe", m.moe(0, h), []float64{want, shared}, 1e-15)
	if ids := m.Experts(0, h); !slices.Equal(ids, []int{0, 1}) {
		t.Errorf("experts %v, want [0 1]", ids)
	}
	m.C.Mistakes.WeightAfter = true
	nearAll(t, "moe weighting the outputs (the mistake)", m.moe(0, h), []float64{after, shared}, 1e-15)
	if math.Abs(after-want) < 0.01 {
		t.Errorf("weighting inputs %g and outputs %g hardly differ", want, after)
	}
	m.C.Mistakes = Mistakes{SoftmaxRouter: true}
	z := math.Exp(0.8) + math.Exp(0.3) + math.Exp(-1.1)
	sm := []float64{math.Exp(0.8) / z, math.Exp(0.3) / z}
	soft := 0.0
	for e := range 2 {
		soft += d[e] * lmckpt.SiLU64(g[e]*sm[e]*0.8) * sm[e] * 1.1
	}
	nearAll(t, "moe with softmax scores (the mistake)", m.moe(0, h), []float64{soft, shared}, 1e-15)
}

// TestScheduleHandWorked: the default layer schedule. TinyScout (interval
// 4, interleave 1): layers 0-2 RoPE and chunked, layer 3 NoPE and full,
// all sparse. TinyMaverick (interleave 2): moe_layers range(1, 4, 2) =
// {1, 3}, layers 0 and 2 dense. Interleave 3 over 8 layers: {2, 5}.
// Interval 2 over 4 layers: NoPE layers 1 and 3. ChunkSize 0 chunks
// nothing.
func TestScheduleHandWorked(t *testing.T) {
	check := func(what string, got []bool, want []bool) {
		t.Helper()
		if !slices.Equal(got, want) {
			t.Errorf("%s: %v, want %v", what, got, want)
		}
	}
	per := func(c Llama4, f func(Llama4, int) bool) []bool {
		out := make([]bool, c.Layers)
		for i := range out {
			out[i] = f(c, i)
		}
		return out
	}
	s, mv := TinyScout(), TinyMaverick()
	check("scout rope", per(s, Llama4.UsesRope), []bool{true, true, true, false})
	check("scout chunked", per(s, Llama4.Chunked), []bool{true, true, true, false})
	check("scout moe", per(s, Llama4.MoE), []bool{true, true, true, true})
	check("maverick rope", per(mv, Llama4.UsesRope), []bool{true, true, true, false})
	check("maverick moe", per(mv, Llama4.MoE), []bool{false, true, false, true})
	c := s
	c.Layers, c.InterleaveMoE = 8, 3
	check("interleave 3", per(c, Llama4.MoE), []bool{false, false, true, false, false, true, false, false})
	c = s
	c.NoRopeInterval = 2
	check("interval 2", per(c, Llama4.UsesRope), []bool{true, false, true, false})
	c = s
	c.ChunkSize = 0
	check("chunk size 0", per(c, Llama4.Chunked), []bool{false, false, false, false})
}

// TestMaskHandWorked: chunks of 4 in TinyScout's layer 0: query 5 sees
// keys 4 and 5 but not 3 or 6; query 3 sees 0…3; query 8 starts a chunk
// and sees only itself. Layer 3 (NoPE, full) lets query 10 see key 0 but
// never a later key. NoChunk lets query 5 see key 3. Chunks of 6 in
// TinyMaverick: query 6 does not see 5, query 5 sees 0. ChunkSize 0:
// query 10 sees key 0 in layer 0.
func TestMaskHandWorked(t *testing.T) {
	c := TinyScout()
	for _, tc := range []struct {
		l, q, k int
		want    bool
	}{
		{0, 5, 4, true}, {0, 5, 5, true}, {0, 5, 3, false}, {0, 5, 6, false},
		{0, 3, 0, true}, {0, 8, 8, true}, {0, 8, 7, false}, {2, 7, 4, true}, {2, 7, 3, false},
		{3, 10, 0, true}, {3, 2, 3, false}, {3, 4, 3, true},
	} {
		if got := c.Attends(tc.l, tc.q, tc.k); got != tc.want {
			t.Errorf("scout layer %d: query %d sees key %d: %v", tc.l, tc.q, tc.k, got)
		}
	}
	nc := c
	nc.Mistakes.NoChunk = true
	if !nc.Attends(0, 5, 3) || nc.Attends(0, 5, 6) {
		t.Errorf("NoChunk: chunked layers should be plain causal")
	}
	mv := TinyMaverick()
	if mv.Attends(0, 6, 5) || !mv.Attends(0, 5, 0) || !mv.Attends(0, 10, 6) {
		t.Errorf("maverick chunks of 6")
	}
	c.ChunkSize = 0
	if !c.Attends(0, 10, 0) {
		t.Errorf("chunk size 0 still chunks")
	}
}

// TestTemperatureHandWorked: floor_scale 4, attn_scale 0.1: positions 0…2
// get factor 1 (floor((pos+1)/4) = 0), 3…6 get 1 + 0.1·ln 2, 7…10
// 1 + 0.1·ln 3. The release's floor_scale 8192 keeps factor 1 up to
// position 8190 and steps at 8191.
func TestTemperatureHandWorked(t *testing.T) {
	c := TinyScout()
	for _, tc := range []struct {
		pos  int
		want float64
	}{
		{0, 1}, {2, 1}, {3, 1 + 0.1*math.Ln2}, {6, 1 + 0.1*math.Ln2}, {7, 1 + 0.1*math.Log(3)}, {10, 1 + 0.1*math.Log(3)},
	} {
		if got := c.AttnTemperature(tc.pos); math.Abs(got-tc.want) > 1e-15 {
			t.Errorf("position %d: %v, want %v", tc.pos, got, tc.want)
		}
	}
	if got := c.AttnTemperature(3); math.Abs(got-1.0693147180559945) > 1e-15 {
		t.Errorf("position 3: %v", got)
	}
	c.FloorScale = 8192
	if c.AttnTemperature(8190) != 1 || math.Abs(c.AttnTemperature(8191)-(1+0.1*math.Ln2)) > 1e-15 {
		t.Errorf("floor_scale 8192: %v, %v", c.AttnTemperature(8190), c.AttnTemperature(8191))
	}
}

// TestRopeHandWorked: head dim 4 at rope_theta 100 has inverse
// frequencies 1 and 0.1. At position 1 the adjacent pairs (1, 2) and
// (3, 4) turn by 1 and 0.1 rad: (cos 1 - 2 sin 1, sin 1 + 2 cos 1,
// 3 cos .1 - 4 sin .1, 3 sin .1 + 4 cos .1). rotate_half (the mistake)
// pairs (1, 3) and (2, 4) instead.
func TestRopeHandWorked(t *testing.T) {
	c := Llama4{HeadDim: 4, Theta: 100}
	inv := c.RopeFreqs()
	nearAll(t, "inv_freq", inv, []float64{1, 0.1}, 1e-15)
	x := []float64{1, 2, 3, 4}
	c1, s1, c2, s2 := math.Cos(1), math.Sin(1), math.Cos(0.1), math.Sin(0.1)
	nearAll(t, "adjacent pairs", rotatePairs(x, 1, inv), []float64{c1 - 2*s1, s1 + 2*c1, 3*c2 - 4*s2, 3*s2 + 4*c2}, 1e-15)
	nearAll(t, "halves (the mistake)", rotateHalves(x, 1, inv), []float64{c1 - 3*s1, 2*c2 - 4*s2, s1 + 3*c1, 2*s2 + 4*c2}, 1e-15)
	nearAll(t, "position 0", rotatePairs(x, 0, inv), x, 0)
}

// TestLlama3FreqsHandWorked: head dim 8 at rope_theta 1e4 has inverse
// frequencies 1, 0.1, 0.01, 0.001 (wavelengths 2π, 20π, 200π, 2000π).
// With factor 8, low 1, high 4 and original 64 the bands are
// wavelength < 16 (kept), > 64 (divided by 8) and between (smoothed):
// 1 stays; 0.1 (wavelength 62.8) is smoothed with
// s = (64/(20π) - 1)/3 ≈ 0.0062 into (1-s)·0.1/8 + s·0.1; 0.01 and
// 0.001 become 0.00125 and 0.000125. TinyScout's (rope_theta 5e5, original
// 16: bands 4 and 16) smooths its first frequency 1 (wavelength 2π) with
// s = (16/(2π) - 1)/3 and divides the other three by 8.
func TestLlama3FreqsHandWorked(t *testing.T) {
	c := Llama4{HeadDim: 8, Theta: 10000, Llama3: &Llama3Scaling{Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMax: 64}}
	s := (64/(20*math.Pi) - 1) / 3
	if s < 0.006 || s > 0.0063 {
		t.Fatalf("s = %v", s)
	}
	nearAll(t, "llama3 inv_freq", c.RopeFreqs(), []float64{1, (1-s)*0.1/8 + s*0.1, 0.00125, 0.000125}, 1e-15)
	c.Llama3 = nil
	nearAll(t, "default inv_freq", c.RopeFreqs(), []float64{1, 0.1, 0.01, 0.001}, 1e-15)

	sc := TinyScout()
	s0 := (16/(2*math.Pi) - 1) / 3
	f := func(j int) float64 { return math.Pow(500000, -float64(j)/4) }
	nearAll(t, "TinyScout inv_freq", sc.RopeFreqs(), []float64{(1-s0)/8 + s0, f(1) / 8, f(2) / 8, f(3) / 8}, 1e-15)
	nearAll(t, "TinyMaverick inv_freq", TinyMaverick().RopeFreqs(), []float64{1, f(1), f(2), f(3)}, 1e-15)

	// Meta's later Scout scaling: factor 16, low = high = 1, original 8192.
	// Both bands meet at wavelength 8192: TinyScout's first three
	// frequencies (wavelengths 2π, 167, 4443) stay, the last (118 000) is
	// divided by 16.
	sc.Llama3 = &Llama3Scaling{Factor: 16, LowFreqFactor: 1, HighFreqFactor: 1, OriginalMax: 8192}
	if err := sc.check(); err != nil {
		t.Fatal(err)
	}
	nearAll(t, "low = high inv_freq", sc.RopeFreqs(), []float64{1, f(1), f(2), f(3) / 16}, 1e-15)
}

// wantTensors is the tensor list of c's checkpoint as the releases name
// it, written out for the tiny models' shapes.
func wantTensors(c Llama4) map[string][]int {
	p := ""
	if c.Multimodal {
		p = "language_model."
	}
	w := map[string][]int{
		p + "model.embed_tokens.weight": {96, 32},
		p + "model.norm.weight":         {32},
	}
	if !c.Tied {
		w[p+"lm_head.weight"] = []int{96, 32}
	}
	for l := range 4 {
		q := fmt.Sprintf("%smodel.layers.%d.", p, l)
		w[q+"input_layernorm.weight"] = []int{32}
		w[q+"post_attention_layernorm.weight"] = []int{32}
		w[q+"self_attn.q_proj.weight"] = []int{32, 32}
		w[q+"self_attn.k_proj.weight"] = []int{16, 32}
		w[q+"self_attn.v_proj.weight"] = []int{16, 32}
		w[q+"self_attn.o_proj.weight"] = []int{32, 32}
		if c.InterleaveMoE == 2 && l%2 == 0 {
			w[q+"feed_forward.gate_proj.weight"] = []int{24, 32}
			w[q+"feed_forward.up_proj.weight"] = []int{24, 32}
			w[q+"feed_forward.down_proj.weight"] = []int{32, 24}
			continue
		}
		w[q+"feed_forward.router.weight"] = []int{4, 32}
		w[q+"feed_forward.experts.gate_up_proj"] = []int{4, 32, 32}
		w[q+"feed_forward.experts.down_proj"] = []int{4, 16, 32}
		w[q+"feed_forward.shared_expert.gate_proj.weight"] = []int{16, 32}
		w[q+"feed_forward.shared_expert.up_proj.weight"] = []int{16, 32}
		w[q+"feed_forward.shared_expert.down_proj.weight"] = []int{32, 16}
	}
	if c.Multimodal {
		w["vision_model.class_embedding"] = []int{16}
		w["vision_model.patch_embedding.linear.weight"] = []int{16, 588}
		w["vision_model.layernorm_pre.weight"] = []int{16}
		w["vision_model.layernorm_pre.bias"] = []int{16}
		w["multi_modal_projector.linear_1.weight"] = []int{32, 16}
	}
	return w
}

// TestCheckpoint: the written model.safetensors holds exactly the release's
// tensor names (language_model.* plus a few vision tensors for TinyScout,
// model.* for TinyMaverick; the stacked expert shapes [E, H, 2I] and
// [E, I, H]; dense layers' feed_forward.*_proj of width 24; lm_head iff
// untied) in float32; config.json has the release's layout and values;
// generation_config.json bos 0, eos 1, pad 1; bad descriptions are
// refused.
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
		if got, names := slices.Sorted(slices.Values(ck.Names())), slices.Sorted(maps.Keys(want)); !slices.Equal(got, names) {
			t.Errorf("seed %d: tensors:\n%s\nwant:\n%s", c.Seed, strings.Join(got, "\n"), strings.Join(names, "\n"))
		}
		for name, shape := range want {
			info, ok := ck.Info(name)
			if !ok || !slices.Equal(info.Shape, shape) || info.DType != safetensors.F32 {
				t.Errorf("%s: %v %s %v, want F32 %v", name, ok, info.DType, info.Shape, shape)
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
		text := cfg
		arch := "Llama4ForCausalLM"
		if c.Multimodal {
			arch = "Llama4ForConditionalGeneration"
			text, _ = cfg["text_config"].(map[string]any)
			vision, _ := cfg["vision_config"].(map[string]any)
			if cfg["model_type"] != "llama4" || text == nil || vision == nil || vision["model_type"] != "llama4_vision_model" ||
				cfg["tie_word_embeddings"] != c.Tied || vision["vision_output_dim"] != 16.0 || vision["hidden_size"] != 16.0 {
				t.Fatalf("multimodal config.json: %s", b)
			}
		}
		if archs, _ := cfg["architectures"].([]any); len(archs) != 1 || archs[0] != arch {
			t.Errorf("architectures %v, want [%s]", cfg["architectures"], arch)
		}
		var chunk any = float64(c.ChunkSize)
		var scaling any
		if c.Llama3 != nil {
			scaling = map[string]any{"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 16.0}
		}
		wantText := map[string]any{
			"model_type": "llama4_text", "vocab_size": 96.0, "hidden_size": 32.0, "num_hidden_layers": 4.0,
			"num_attention_heads": 4.0, "num_key_value_heads": 2.0, "head_dim": 8.0, "intermediate_size": 16.0,
			"intermediate_size_mlp": 24.0, "num_local_experts": 4.0, "num_experts_per_tok": float64(c.TopK),
			"interleave_moe_layer_step": float64(c.InterleaveMoE), "use_qk_norm": c.UseQKNorm,
			"attn_temperature_tuning": 4.0, "floor_scale": c.FloorScale, "attn_scale": 0.1, "attention_chunk_size": chunk,
			"rope_theta": 500000.0, "rms_norm_eps": 1e-5, "max_position_embeddings": 256.0, "tie_word_embeddings": c.Tied,
			"bos_token_id": 0.0, "eos_token_id": 1.0, "pad_token_id": 1.0, "torch_dtype": "float32", "attention_bias": false,
			"hidden_act": "silu",
		}
		for key, w := range wantText {
			if v, ok := text[key]; !ok || v != w {
				t.Errorf("seed %d: config %s = %v (present %v), want %v", c.Seed, key, v, ok, w)
			}
		}
		if got, _ := json.Marshal(text["rope_scaling"]); string(got) != string(must(json.Marshal(scaling))) {
			t.Errorf("seed %d: rope_scaling %s", c.Seed, got)
		}
		if l, ok := text["no_rope_layers"].([]any); !ok || len(l) != 0 {
			t.Errorf("seed %d: no_rope_layers %v, want [] as the release", c.Seed, text["no_rope_layers"])
		}
		for _, key := range []string{"moe_layers", "layer_types", "no_rope_layer_interval", "rope_parameters"} {
			if v, ok := text[key]; ok {
				t.Errorf("seed %d: config has %s = %v", c.Seed, key, v)
			}
		}
		b, err = os.ReadFile(filepath.Join(dir, "generation_config.json"))
		var gen map[string]any
		if err == nil {
			err = json.Unmarshal(b, &gen)
		}
		if err != nil || len(gen) != 3 || gen["bos_token_id"] != 0.0 || gen["eos_token_id"] != 1.0 || gen["pad_token_id"] != 1.0 {
			t.Errorf("generation_config.json %s (%v)", b, err)
		}
	}

	c := TinyMaverick()
	c.ChunkSize, c.TempTuning, c.NoRopeInterval = 0, false, 3
	text := c.ConfigJSON()
	if v, ok := text["attention_chunk_size"]; !ok || v != nil || text["attn_temperature_tuning"] != false || text["no_rope_layer_interval"] != 3 {
		t.Errorf("chunk 0, no tuning, interval 3: %v, %v, %v", text["attention_chunk_size"], text["attn_temperature_tuning"], text["no_rope_layer_interval"])
	}

	for _, bad := range []func(*Llama4){
		func(c *Llama4) { c.KVHeads = 3 },
		func(c *Llama4) { c.HeadDim = 7 },
		func(c *Llama4) { c.TopK = 5 },
		func(c *Llama4) { c.InterleaveMoE = 0 },
		func(c *Llama4) { c.NoRopeInterval = 0 },
		func(c *Llama4) { c.ChunkSize = -1 },
		func(c *Llama4) { c.FloorScale = 0 },
		func(c *Llama4) {
			c.Llama3 = &Llama3Scaling{Factor: 8, LowFreqFactor: 4, HighFreqFactor: 1, OriginalMax: 16}
		},
	} {
		c := TinyScout()
		bad(&c)
		if err := c.Write(t.TempDir()); err == nil {
			t.Errorf("%+v: Write accepted it", c)
		}
	}
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}

// TestRoundTrip: Load reads back exactly the float32 values Write drew
// (fill over lmckpt.NewRand(Seed) in the order of Tensors), nothing more;
// the norms are not all 1; a ForCausalLM description fails on the
// multimodal checkpoint's language_model.* names, an untied one on a tied
// checkpoint's missing lm_head.
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
		if b := m.get("model.layers.1.input_layernorm.weight"); slices.Max(b)-slices.Min(b) < 0.1 {
			t.Errorf("seed %d: input_layernorm %v", c.Seed, b)
		}
	}
	flat := TinyScout()
	flat.Multimodal = false
	if _, err := flat.Load(dirs[TinyScout().Seed]); err == nil || !strings.Contains(err.Error(), `"model.embed_tokens.weight"`) {
		t.Errorf("loading a multimodal checkpoint as ForCausalLM: %v", err)
	}
	untied := TinyMaverick()
	untied.Tied = false
	if _, err := untied.Load(dirs[TinyMaverick().Seed]); err == nil || !strings.Contains(err.Error(), "lm_head") {
		t.Errorf("loading a tied checkpoint untied: %v", err)
	}
}

// embedded returns the embeddings of tokens: the residual stream that
// layer 0's attention reads.
func embedded(m *Model, tokens []int) [][]float64 {
	H := m.C.Hidden
	emb := m.get("model.embed_tokens.weight")
	x := make([][]float64, len(tokens))
	for t, id := range tokens {
		x[t] = emb[id*H : (id+1)*H]
	}
	return x
}

// rawHeads is layer l's q_proj (or k_proj) output on h cut into heads.
func rawHeads(m *Model, l int, name string, h []float64) [][]float64 {
	all := lmckpt.Linear64(h, m.get(fmt.Sprintf("model.layers.%d.self_attn.%s.weight", l, name)), nil)
	var out [][]float64
	for i := 0; i < len(all); i += m.C.HeadDim {
		out = append(out, all[i:i+m.C.HeadDim])
	}
	return out
}

// TestProjectOnCheckpoint: in TinyScout's RoPE layer 0 at position 5 each
// query and key head is the raw projection head turned by adjacent pairs
// and then divided by its RMS (eps 1e-5): its mean square is 1 up to eps.
// In the NoPE layer 3 at position 7 the query heads are the raw ones
// times 1 + 0.1·ln 3 (no rotary, no norm) and the key heads the raw ones;
// without tuning (the mistake) the queries are raw too, and with the
// norm on NoPE layers (the mistake) they are normed then scaled. In
// TinyMaverick (no qk_norm) layer 0's heads are only turned.
func TestProjectOnCheckpoint(t *testing.T) {
	_, m := load(t, TinyScout())
	c := m.C
	inv := c.RopeFreqs()
	h := lmckpt.RMSNorm64(embedded(m, []int{7})[0], m.get("model.layers.0.input_layernorm.weight"), c.Eps)
	q, k, v := m.project(0, h, 5, inv)
	for name, got := range map[string][][]float64{"q_proj": q, "k_proj": k} {
		for i, raw := range rawHeads(m, 0, name, h) {
			want := lmckpt.RMSNorm64(rotatePairs(raw, 5, inv), nil, c.Eps)
			nearAll(t, fmt.Sprintf("layer 0 %s head %d", name, i), got[i], want, 1e-12)
			ms := 0.0
			for _, x := range got[i] {
				ms += x * x / float64(c.HeadDim)
			}
			if math.Abs(ms-1) > 1e-3 {
				t.Errorf("%s head %d: mean square %g", name, i, ms)
			}
		}
	}
	for i, raw := range rawHeads(m, 0, "v_proj", h) {
		nearAll(t, fmt.Sprintf("v head %d", i), v[i], raw, 0)
	}

	h3 := lmckpt.RMSNorm64(embedded(m, []int{7})[0], m.get("model.layers.3.input_layernorm.weight"), c.Eps)
	temp := 1 + 0.1*math.Log(3)
	check := func(what string, mm *Model, norm bool, scale float64) {
		t.Helper()
		q, k, _ := mm.project(3, h3, 7, inv)
		for i, raw := range rawHeads(m, 3, "q_proj", h3) {
			want := raw
			if norm {
				want = lmckpt.RMSNorm64(raw, nil, c.Eps)
			}
			want = slices.Clone(want)
			for j := range want {
				want[j] *= scale
			}
			nearAll(t, fmt.Sprintf("%s: q head %d", what, i), q[i], want, 1e-12)
		}
		for i, raw := range rawHeads(m, 3, "k_proj", h3) {
			want := raw
			if norm {
				want = lmckpt.RMSNorm64(raw, nil, c.Eps)
			}
			nearAll(t, fmt.Sprintf("%s: k head %d", what, i), k[i], want, 1e-12)
		}
	}
	check("NoPE layer", m, false, temp)
	check("NoPE layer without tuning (the mistake)", &Model{C: withMistakes(c, Mistakes{NoTempTuning: true}), W: m.W}, false, 1)
	check("NoPE layer with the qk norm (the mistake)", &Model{C: withMistakes(c, Mistakes{QKNormOnNoPE: true}), W: m.W}, true, temp)

	_, mv := load(t, TinyMaverick())
	h = lmckpt.RMSNorm64(embedded(mv, []int{7})[0], mv.get("model.layers.0.input_layernorm.weight"), mv.C.Eps)
	q, _, _ = mv.project(0, h, 5, mv.C.RopeFreqs())
	for i, raw := range rawHeads(mv, 0, "q_proj", h) {
		nearAll(t, fmt.Sprintf("maverick q head %d", i), q[i], rotatePairs(raw, 5, mv.C.RopeFreqs()), 1e-12)
	}
}

func withMistakes(c Llama4, mk Mistakes) Llama4 {
	c.Mistakes = mk
	return c
}

// TestChunkedAttentionOnCheckpoint: the first query of a chunk sees only
// itself, so in TinyScout's chunked layer 0 the outputs at positions 0, 4
// and 8 are exactly the value heads of their own positions (query head h
// reading value head h/2), while in the full NoPE layer 3 position 4 mixes
// in earlier values. Without chunking (the mistake) position 4 of layer 0
// mixes too. TinyMaverick's chunk boundary is at 6.
func TestChunkedAttentionOnCheckpoint(t *testing.T) {
	for _, c := range flavours() {
		_, m := load(t, c)
		x := embedded(m, testTokens)
		starts := []int{0, c.ChunkSize, 2 * c.ChunkSize}
		valueAt := func(l, pos int) [][]float64 {
			h := lmckpt.RMSNorm64(x[pos], m.get(fmt.Sprintf("model.layers.%d.input_layernorm.weight", l)), c.Eps)
			return rawHeads(m, l, "v_proj", h)
		}
		att := m.attention(0, x)
		for _, pos := range starts {
			if pos >= len(x) {
				continue
			}
			v := valueAt(0, pos)
			for hd := 0; hd < c.Heads; hd++ {
				nearAll(t, fmt.Sprintf("seed %d, layer 0, position %d, head %d", c.Seed, pos, hd), att[pos][hd*8:(hd+1)*8], v[hd/2], 1e-12)
			}
		}
		full := m.attention(3, x)
		if d := maxAbsDiff([][]float64{full[c.ChunkSize][:8]}, [][]float64{valueAt(3, c.ChunkSize)[0]}); d < 1e-3 {
			t.Errorf("seed %d: NoPE layer position %d is its own value (moved by %g)", c.Seed, c.ChunkSize, d)
		}
		nc := &Model{C: withMistakes(c, Mistakes{NoChunk: true}), W: m.W}
		if d := maxAbsDiff([][]float64{nc.attention(0, x)[c.ChunkSize][:8]}, [][]float64{valueAt(0, c.ChunkSize)[0]}); d < 1e-3 {
			t.Errorf("seed %d: without chunks position %d is still its own value (moved by %g)", c.Seed, c.ChunkSize, d)
		}
	}
}

// TestCausal: the logits of a prefix are exactly the first rows of the
// whole sequence's; other tokens after position 5 leave rows 0…5 exactly
// as they were (and change the later ones); every row is finite, O(1) and
// not constant.
func TestCausal(t *testing.T) {
	for _, c := range flavours() {
		_, m := load(t, c)
		refcheck.Causal(t, fmt.Sprintf("seed %d", c.Seed), m.Logits, testTokens, c.Vocab, []int{1, 5, 9}, 0.1)
	}
}

// TestRoutingOnActivations: on the real MoE inputs of the prompt,
// Experts is what Route chooses from the layer's router (TopK experts,
// nil on dense layers); the choice varies (at least 3 of the 4 experts
// over each sparse layer), the sigmoid scores of the chosen experts vary
// (spread above 0.2), and the TopK-th and next logits never tie.
func TestRoutingOnActivations(t *testing.T) {
	for _, c := range flavours() {
		_, m := load(t, c)
		used := map[int]map[int]bool{}
		lo, hi := 1.0, 0.0
		n := 0
		m.moeInput = func(l int, h []float64) {
			n++
			logits := lmckpt.Linear64(h, m.get(fmt.Sprintf("model.layers.%d.feed_forward.router.weight", l)), nil)
			ids, scores := c.Route(logits)
			if got := m.Experts(l, h); !slices.Equal(got, ids) || len(got) != c.TopK {
				t.Fatalf("seed %d: Experts %v, Route %v", c.Seed, got, ids)
			}
			sorted := slices.Clone(logits)
			slices.Sort(sorted)
			slices.Reverse(sorted)
			if sorted[c.TopK-1]-sorted[c.TopK] < 1e-6 {
				t.Errorf("seed %d, layer %d: a near tie at the top-%d edge %v", c.Seed, l, c.TopK, sorted)
			}
			if used[l] == nil {
				used[l] = map[int]bool{}
			}
			for j, e := range ids {
				used[l][e] = true
				lo, hi = math.Min(lo, scores[j]), math.Max(hi, scores[j])
			}
		}
		m.Logits(testTokens)
		sparse := 0
		for l := 0; l < c.Layers; l++ {
			if !c.MoE(l) {
				if m.Experts(l, make([]float64, c.Hidden)) != nil {
					t.Errorf("seed %d: dense layer %d has experts", c.Seed, l)
				}
				continue
			}
			sparse++
			if len(used[l]) < 3 {
				t.Errorf("seed %d, layer %d: only experts %v chosen", c.Seed, l, slices.Sorted(maps.Keys(used[l])))
			}
		}
		if n != sparse*len(testTokens) {
			t.Errorf("seed %d: %d MoE inputs, want %d", c.Seed, n, sparse*len(testTokens))
		}
		if hi-lo < 0.2 {
			t.Errorf("seed %d: chosen scores within [%g, %g]", c.Seed, lo, hi)
		}
		t.Logf("seed %d: chosen scores in [%.3f, %.3f]; experts used per sparse layer %v", c.Seed, lo, hi, func() []int {
			var k []int
			for _, l := range slices.Sorted(maps.Keys(used)) {
				k = append(k, len(used[l]))
			}
			return k
		}())
	}
}

// TestMistakesMatter: each Mistake moves the logits of the 11-token prompt
// by more than 1e-3 on every tiny model where it applies (QKNormOnNoPE
// only with use_qk_norm: TinyScout).
func TestMistakesMatter(t *testing.T) {
	for _, c := range flavours() {
		_, m := load(t, c)
		want := m.Logits(testTokens)
		for name, mk := range map[string]Mistakes{
			"RopeHalves":    {RopeHalves: true},
			"WeightAfter":   {WeightAfter: true},
			"NoChunk":       {NoChunk: true},
			"NoTempTuning":  {NoTempTuning: true},
			"QKNormOnNoPE":  {QKNormOnNoPE: true},
			"SoftmaxRouter": {SoftmaxRouter: true},
		} {
			if mk.QKNormOnNoPE && !c.UseQKNorm {
				continue
			}
			mm := &Model{C: withMistakes(c, mk), W: m.W}
			d := maxAbsDiff(mm.Logits(testTokens), want)
			if d < 1e-3 {
				t.Errorf("seed %d: %s moves the logits by %g only", c.Seed, name, d)
			}
			t.Logf("seed %d: %s moves the logits by %.3g", c.Seed, name, d)
		}
	}
}
