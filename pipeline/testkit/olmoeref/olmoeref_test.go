package olmoeref

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
func load(t *testing.T, c Olmoe) (string, *Model) {
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

func flavours() []Olmoe { return []Olmoe{TinyOlmoe(), TinyOlmoeGQA()} }

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

// handModel is a hand-built attention layer: hidden 4, two heads of two
// dims (inverse frequency 1 at rope_theta 1e4), eps 0. On h = (1, 7, 0, 0)
// q_proj copies h0 into head 0 and h1 into head 1, so q = (1, 1, 7, 7);
// k_proj the other way round, k = (7, 7, 1, 1); v_proj gives
// v = (0.5, -3, 0.875, -7). With kvHeads 1, k_proj gives k = (7, 1).
func handModel(kvHeads int, clip float64) *Model {
	c := Olmoe{Hidden: 4, Heads: 2, KVHeads: kvHeads, Theta: 10000, ClipQKV: clip}
	p := "model.layers.0."
	w := map[string][]float64{
		p + "self_attn.q_proj.weight": {1, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0},
		p + "self_attn.q_norm.weight": {1, 2, 0.5, 1},
	}
	if kvHeads == 2 {
		w[p+"self_attn.k_proj.weight"] = []float64{0, 1, 0, 0, 0, 1, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0}
		w[p+"self_attn.v_proj.weight"] = []float64{0.5, 0, 0, 0, -3, 0, 0, 0, 0, 0.125, 0, 0, 0, -1, 0, 0}
		w[p+"self_attn.k_norm.weight"] = []float64{0.5, 1, 1, 2}
	} else {
		w[p+"self_attn.k_proj.weight"] = []float64{0, 1, 0, 0, 1, 0, 0, 0}
		w[p+"self_attn.v_proj.weight"] = []float64{0.5, 0, 0, 0, -3, 0, 0, 0}
		w[p+"self_attn.k_norm.weight"] = []float64{0.5, 2}
	}
	return &Model{C: c, W: w}
}

var handH = []float64{1, 7, 0, 0}

// turn is the rotary on one pair at angle 1 rad (position 1, inverse
// frequency 1).
func turn(a, b float64) []float64 {
	cs, sn := math.Cos(1), math.Sin(1)
	return []float64{a*cs - b*sn, b*cs + a*sn}
}

// TestQKNormHandWorked: on handModel, q = (1, 1, 7, 7) has RMS
// sqrt((1+1+49+49)/4) = 5 over the whole projection, and q_norm
// (1, 2, 0.5, 1) gives (0.2, 0.4, 0.7, 1.4); norming per head would give
// (1, 2, 0.5, 1) (each head's RMS is its own entry). k = (7, 7, 1, 1) the
// same way with k_norm (0.5, 1, 1, 2): (0.7, 1.4, 0.2, 0.4), per head
// (0.5, 1, 1, 2). v is v_proj's output, not normed. At position 1 each
// normed head turns by 1 rad; norming after the rotary (which keeps the
// RMS 5) scales the turned pair by the norm's weights instead, which
// differ within the pair. With one key/value head, k = (7, 1) has RMS 5
// and k_norm is KVHeads·HeadDim = 2 wide: (1.4, 0.2)·(0.5, 2).
func TestQKNormHandWorked(t *testing.T) {
	m := handModel(2, 0)
	p := "model.layers.0."
	inv := m.C.RopeFreqs()
	if !slices.Equal(inv, []float64{1}) {
		t.Fatalf("inv_freq %v, want [1]", inv)
	}
	q, k, v := m.project(p, handH, 0, inv)
	nearAll(t, "q", slices.Concat(q...), []float64{0.2, 0.4, 0.7, 1.4}, 1e-15)
	nearAll(t, "k", slices.Concat(k...), []float64{0.7, 1.4, 0.2, 0.4}, 1e-15)
	nearAll(t, "v", slices.Concat(v...), []float64{0.5, -3, 0.875, -7}, 0)

	m.perHeadNorm = true
	q, k, _ = m.project(p, handH, 0, inv)
	nearAll(t, "per-head q (the mistake)", slices.Concat(q...), []float64{1, 2, 0.5, 1}, 1e-15)
	nearAll(t, "per-head k (the mistake)", slices.Concat(k...), []float64{0.5, 1, 1, 2}, 1e-15)
	m.perHeadNorm = false

	q, k, _ = m.project(p, handH, 1, inv)
	nearAll(t, "q at position 1", slices.Concat(q...), slices.Concat(turn(0.2, 0.4), turn(0.7, 1.4)), 1e-15)
	nearAll(t, "k at position 1", slices.Concat(k...), slices.Concat(turn(0.7, 1.4), turn(0.2, 0.4)), 1e-15)
	after := turn(1, 1)
	after[0], after[1] = after[0]/5*1, after[1]/5*2
	if d := maxAbsDiff([][]float64{after}, [][]float64{q[0]}); d < 0.1 {
		t.Errorf("norming after the rotary moves query head 0 by %g only", d)
	}

	g := handModel(1, 0)
	q, k, v = g.project(p, handH, 0, inv)
	nearAll(t, "GQA q", slices.Concat(q...), []float64{0.2, 0.4, 0.7, 1.4}, 1e-15)
	nearAll(t, "GQA k", slices.Concat(k...), []float64{0.7, 0.4}, 1e-15)
	nearAll(t, "GQA v", slices.Concat(v...), []float64{0.5, -3}, 0)
}

// TestClipHandWorked: clip_qkv 1 on handModel clamps the normed q
// (0.2, 0.4, 0.7, 1.4) to (0.2, 0.4, 0.7, 1), the normed k
// (0.7, 1.4, 0.2, 0.4) to (0.7, 1, 0.2, 0.4) and v (0.5, -3, 0.875, -7) to
// (0.5, -1, 0.875, -1). Clamping the raw projections before the norms
// (AllenAI's training code) would norm (1, 1, 1, 1) into q_norm's weights
// (1, 2, 0.5, 1), beyond the clip. The clamp comes before the rotary: at
// position 1 query head 1 is the turned (0.7, 1), whose second entry
// cos 1 + 0.7 sin 1 ≈ 1.13 exceeds the clip.
func TestClipHandWorked(t *testing.T) {
	m := handModel(2, 1)
	p := "model.layers.0."
	inv := m.C.RopeFreqs()
	q, k, v := m.project(p, handH, 0, inv)
	nearAll(t, "clipped q", slices.Concat(q...), []float64{0.2, 0.4, 0.7, 1}, 1e-15)
	nearAll(t, "clipped k", slices.Concat(k...), []float64{0.7, 1, 0.2, 0.4}, 1e-15)
	nearAll(t, "clipped v", slices.Concat(v...), []float64{0.5, -1, 0.875, -1}, 0)

	m.clipBeforeNorm = true
	q, k, v = m.project(p, handH, 0, inv)
	nearAll(t, "q clipped before the norm (the mistake)", slices.Concat(q...), []float64{1, 2, 0.5, 1}, 1e-15)
	nearAll(t, "k clipped before the norm (the mistake)", slices.Concat(k...), []float64{0.5, 1, 1, 2}, 1e-15)
	nearAll(t, "v clipped before the norm (the mistake)", slices.Concat(v...), []float64{0.5, -1, 0.875, -1}, 0)
	m.clipBeforeNorm = false

	q, _, _ = m.project(p, handH, 1, inv)
	nearAll(t, "clipped q at position 1", slices.Concat(q...), slices.Concat(turn(0.2, 0.4), turn(0.7, 1)), 1e-15)
	if q[1][1] < 1.1 {
		t.Errorf("query head 1 at position 1: %v, want the turned clamp (%v)", q[1], turn(0.7, 1))
	}
}

// TestRouteHandWorked: OlmoeSparseMoeBlock's routing on logits
// ln(2, 4, 1, 3): the softmax over all four is (0.2, 0.4, 0.1, 0.3); the
// top 2 are experts 1 and 3 with weights 0.4 and 0.3 as they are
// (norm_topk_prob false), or 4/7 and 3/7 renormalised. The top 3 add
// expert 0 at 0.2 (sum 0.9). A constant added to every logit changes
// nothing. On a tie the lower index wins.
func TestRouteHandWorked(t *testing.T) {
	logits := []float64{math.Log(2), math.Log(4), math.Log(1), math.Log(3)}
	check := func(what string, c Olmoe, shift float64, wantIDs []int, wantW []float64) {
		t.Helper()
		l := slices.Clone(logits)
		for i := range l {
			l[i] += shift
		}
		ids, w := c.Route(l)
		if !slices.Equal(ids, wantIDs) {
			t.Errorf("%s: experts %v, want %v", what, ids, wantIDs)
			return
		}
		nearAll(t, what, w, wantW, 1e-15)
	}
	c := Olmoe{Experts: 4, TopK: 2}
	check("top 2", c, 0, []int{1, 3}, []float64{0.4, 0.3})
	check("top 2, shifted", c, 7.5, []int{1, 3}, []float64{0.4, 0.3})
	c.NormTopK = true
	check("top 2, renormalised", c, 0, []int{1, 3}, []float64{4.0 / 7, 3.0 / 7})
	c.TopK = 3
	check("top 3, renormalised", c, 0, []int{1, 3, 0}, []float64{0.4 / 0.9, 0.3 / 0.9, 0.2 / 0.9})
	c.NormTopK = false
	check("top 3", c, 0, []int{1, 3, 0}, []float64{0.4, 0.3, 0.2})
	c.TopK = 1
	check("top 1", c, 0, []int{1}, []float64{0.4})
	e2 := math.E * math.E
	tie := []float64{0, 2, 2}
	ids, w := Olmoe{Experts: 3, TopK: 1}.Route(tie)
	if !slices.Equal(ids, []int{1}) {
		t.Errorf("tie: experts %v, want [1] (the lower index)", ids)
	}
	nearAll(t, "tie", w, []float64{e2 / (1 + 2*e2)}, 1e-15)
}

// TestMoEBlockHandWorked: OlmoeSparseMoeBlock on a hand-built block of 4
// experts of width 1: router logits (h0, h1, -h0, -h1); expert e computes
// (d_e·silu(g_e·h0)·(h0+h1), 0) (gate_proj (g_e, 0), up_proj (1, 1),
// down_proj (d_e, 0)). On h = (0.8, 0.3) experts 0 and 1 win with their
// softmax probabilities p0 and p1 over all four logits; renormalised
// (norm_topk_prob) they become p0/(p0+p1) and p1/(p0+p1).
func TestMoEBlockHandWorked(t *testing.T) {
	c := Olmoe{Hidden: 2, Intermediate: 1, Layers: 1, Experts: 4, TopK: 2}
	p := "model.layers.0.mlp."
	w := map[string][]float64{p + "gate.weight": {1, 0, 0, 1, -1, 0, 0, -1}}
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
	p0, p1 := math.Exp(0.8)/z, math.Exp(0.3)/z
	y0, y1 := d[0]*silu(g[0]*0.8)*1.1, d[1]*silu(g[1]*0.8)*1.1
	nearAll(t, "moe", m.moe(0, h), []float64{p0*y0 + p1*y1, 0}, 1e-15)
	if ids := m.Experts(0, h); !slices.Equal(ids, []int{0, 1}) {
		t.Errorf("experts %v, want [0 1]", ids)
	}
	m.C.NormTopK = true
	nearAll(t, "moe, renormalised", m.moe(0, h), []float64{(p0*y0 + p1*y1) / (p0 + p1), 0}, 1e-15)
}

// wantTensors is the tensor list of an OLMoE checkpoint as the Hub
// release names it, written out for the tiny models' shapes (k_norm
// KVHeads·8 wide).
func wantTensors(kvHeads int, tied bool) map[string][]int {
	w := map[string][]int{
		"model.embed_tokens.weight": {96, 32},
		"model.norm.weight":         {32},
	}
	if !tied {
		w["lm_head.weight"] = []int{96, 32}
	}
	for l := 0; l < 2; l++ {
		p := fmt.Sprintf("model.layers.%d.", l)
		w[p+"input_layernorm.weight"] = []int{32}
		w[p+"post_attention_layernorm.weight"] = []int{32}
		w[p+"self_attn.q_proj.weight"] = []int{32, 32}
		w[p+"self_attn.k_proj.weight"] = []int{kvHeads * 8, 32}
		w[p+"self_attn.v_proj.weight"] = []int{kvHeads * 8, 32}
		w[p+"self_attn.o_proj.weight"] = []int{32, 32}
		w[p+"self_attn.q_norm.weight"] = []int{32}
		w[p+"self_attn.k_norm.weight"] = []int{kvHeads * 8}
		w[p+"mlp.gate.weight"] = []int{8, 32}
		for e := 0; e < 8; e++ {
			q := fmt.Sprintf("%smlp.experts.%d.", p, e)
			w[q+"gate_proj.weight"] = []int{16, 32}
			w[q+"up_proj.weight"] = []int{16, 32}
			w[q+"down_proj.weight"] = []int{32, 16}
		}
	}
	return w
}

// TestCheckpoint: the written model.safetensors holds exactly the
// tensors of the OLMoE release (q_norm as wide as q_proj's output, k_norm
// as k_proj's, one gate/up/down per expert, the router mlp.gate, lm_head
// iff untied), in float32; config.json holds exactly OlmoeConfig's keys
// with their values (clip_qkv null or the number), and
// generation_config.json bos 0, eos 1, pad 1.
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
		want := wantTensors(c.KVHeads, c.Tied)
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
		var clip any
		if c.ClipQKV != 0 {
			clip = c.ClipQKV
		}
		wantCfg := map[string]any{
			"model_type": "olmoe", "vocab_size": 96.0, "hidden_size": 32.0, "intermediate_size": 16.0,
			"num_hidden_layers": 2.0, "num_attention_heads": 4.0, "num_key_value_heads": float64(c.KVHeads),
			"max_position_embeddings": 256.0, "rope_theta": 10000.0, "rope_scaling": nil, "rms_norm_eps": 1e-5,
			"num_experts": 8.0, "num_experts_per_tok": 2.0, "norm_topk_prob": c.NormTopK, "clip_qkv": clip,
			"attention_bias": false, "attention_dropout": 0.0, "tie_word_embeddings": c.Tied, "hidden_act": "silu",
			"initializer_range": 0.02, "router_aux_loss_coef": 0.01, "output_router_logits": false, "use_cache": true,
			"bos_token_id": 0.0, "eos_token_id": 1.0, "pad_token_id": 1.0, "torch_dtype": "float32",
		}
		for key, want := range wantCfg {
			if v, ok := cfg[key]; !ok || v != want {
				t.Errorf("seed %d: config %s = %v (present %v), want %v", c.Seed, key, v, ok, want)
			}
		}
		if archs, _ := cfg["architectures"].([]any); len(archs) != 1 || archs[0] != "OlmoeForCausalLM" {
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
		if err != nil || len(gen) != 3 || gen["bos_token_id"] != 0.0 || gen["eos_token_id"] != 1.0 || gen["pad_token_id"] != 1.0 {
			t.Errorf("generation_config.json %s (%v)", b, err)
		}
	}
	for _, bad := range []func(*Olmoe){
		func(c *Olmoe) { c.KVHeads = 3 },
		func(c *Olmoe) { c.Heads = 5 },
		func(c *Olmoe) { c.Heads, c.KVHeads = 8, 8 }, // head dim 4: fine
		func(c *Olmoe) { c.TopK = 9 },
		func(c *Olmoe) { c.ClipQKV = -1 },
	} {
		c := TinyOlmoe()
		bad(&c)
		err := c.Write(t.TempDir())
		if ok := c.Heads == 8; ok != (err == nil) {
			t.Errorf("%+v: Write error %v", c, err)
		}
	}
}

// TestRoundTrip: Load reads back exactly the float32 values Write drew
// (fill over lmckpt.NewRand(Seed) in the order of Tensors), nothing more;
// the norms (q_norm and k_norm included) are not all 1; an untied
// description fails on a tied checkpoint's missing lm_head, and a
// multi-head description on a GQA checkpoint's narrower k_norm.
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
		for _, name := range []string{"self_attn.q_norm.weight", "self_attn.k_norm.weight", "input_layernorm.weight", "post_attention_layernorm.weight"} {
			if b := m.W["model.layers.1."+name]; slices.Max(b)-slices.Min(b) < 0.1 {
				t.Errorf("seed %d: %s %v", c.Seed, name, b)
			}
		}
	}
	gqa := TinyOlmoeGQA()
	untied := gqa
	untied.Tied = false
	if _, err := untied.Load(dirs[gqa.Seed]); err == nil || !strings.Contains(err.Error(), "lm_head") {
		t.Errorf("loading a tied checkpoint untied: %v", err)
	}
	mha := gqa
	mha.KVHeads = 4
	if _, err := mha.Load(dirs[gqa.Seed]); err == nil || !strings.Contains(err.Error(), "k_proj") {
		t.Errorf("loading a GQA checkpoint as multi-head: %v", err)
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

// projections returns layer p's raw q_proj, k_proj and v_proj outputs on
// the input_layernorm of token id's embedding.
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

// TestQKNormOnCheckpoint: in layer 1 of both tiny checkpoints the query
// heads at position 0 (no rotation) are q_proj's 32 outputs RMS-normed
// together (eps 1e-5), scaled by the 32 weights of q_norm and clamped to
// ±clip_qkv (TinyOlmoeGQA), the key heads k_proj's KVHeads·8 outputs with
// k_norm; v is v_proj's outputs clamped. Norming each head on its own
// would differ. At position 5 every query and key head is exactly the
// position-0 head turned by rotate-half over all 8 dims (so the norm and
// the clamp come before the rotary).
func TestQKNormOnCheckpoint(t *testing.T) {
	for _, c := range flavours() {
		_, m := load(t, c)
		p := "model.layers.1."
		h, rq, rk, rv := projections(m, p, 7)
		inv := c.RopeFreqs()
		q, k, v := m.project(p, h, 0, inv)
		for _, tc := range []struct {
			name  string
			raw   []float64
			heads [][]float64
		}{{"q", rq, q}, {"k", rk, k}} {
			norm := m.W[p+"self_attn."+tc.name+"_norm.weight"]
			if len(norm) != len(tc.raw) {
				t.Fatalf("%s_norm is %d wide, the projection %d", tc.name, len(norm), len(tc.raw))
			}
			ss := 0.0
			for _, x := range tc.raw {
				ss += x * x
			}
			want := make([]float64, len(tc.raw))
			for j, x := range tc.raw {
				want[j] = x / math.Sqrt(ss/float64(len(tc.raw))+1e-5) * norm[j]
				if c.ClipQKV > 0 {
					want[j] = math.Max(-c.ClipQKV, math.Min(c.ClipQKV, want[j]))
				}
			}
			got := slices.Concat(tc.heads...)
			nearAll(t, fmt.Sprintf("seed %d: %s at position 0", c.Seed, tc.name), got, want, 1e-12)
			per := *m
			per.perHeadNorm = true
			pq, pk, _ := per.project(p, h, 0, inv)
			perHead := map[string][][]float64{"q": pq, "k": pk}[tc.name]
			if d := maxAbsDiff([][]float64{slices.Concat(perHead...)}, [][]float64{got}); d < 1e-3 {
				t.Errorf("seed %d: %s normed per head moves by %g only", c.Seed, tc.name, d)
			}
		}
		wantV := slices.Clone(rv)
		if c.ClipQKV > 0 {
			wantV = clamp(rv, c.ClipQKV)
		}
		nearAll(t, fmt.Sprintf("seed %d: v", c.Seed), slices.Concat(v...), wantV, 1e-12)
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
					a, b := tc.at0[hd][j], tc.at0[hd][j+4]
					rot := complex(a, b) * complex(math.Cos(5*inv[j]), math.Sin(5*inv[j]))
					if math.Abs(tc.at5[hd][j]-real(rot)) > 1e-12 || math.Abs(tc.at5[hd][j+4]-imag(rot)) > 1e-12 {
						t.Errorf("seed %d: %s head %d, pair %d: (%g, %g), want (%g, %g)", c.Seed, tc.name, hd, j,
							tc.at5[hd][j], tc.at5[hd][j+4], real(rot), imag(rot))
					}
				}
			}
		}
	}
}

// TestClipOnCheckpoint: in TinyOlmoeGQA clip_qkv 0.5 clamps a fair share
// (neither none nor all) of the normed q and k and of v on real inputs,
// leaves the values inside ±0.5 exactly alone, and TinyOlmoe's null
// clip_qkv clamps nothing (some of its values lie beyond 0.5).
func TestClipOnCheckpoint(t *testing.T) {
	_, m := load(t, TinyOlmoeGQA())
	c := m.C
	free := *m
	free.C.ClipQKV = 0
	inv := c.RopeFreqs()
	var n, beyond int
	for l := 0; l < c.Layers; l++ {
		p := fmt.Sprintf("model.layers.%d.", l)
		for _, id := range testTokens {
			h, _, _, _ := projections(m, p, id)
			q, k, v := m.project(p, h, 0, inv)
			fq, fk, fv := free.project(p, h, 0, inv)
			for _, pair := range [][2][][]float64{{q, fq}, {k, fk}, {v, fv}} {
				got, raw := slices.Concat(pair[0]...), slices.Concat(pair[1]...)
				for i, x := range raw {
					n++
					switch {
					case math.Abs(x) > c.ClipQKV:
						beyond++
						if got[i] != math.Copysign(c.ClipQKV, x) {
							t.Fatalf("%s: %g clamps to %g", p, x, got[i])
						}
					case got[i] != x:
						t.Fatalf("%s: %g inside the clip becomes %g", p, x, got[i])
					}
				}
			}
		}
	}
	if beyond == 0 || beyond > n*3/4 {
		t.Errorf("clip_qkv clamps %d of %d values", beyond, n)
	}
	t.Logf("clip_qkv 0.5 clamps %d of %d q/k/v values at position 0", beyond, n)

	_, plain := load(t, TinyOlmoe())
	h, _, _, rv := projections(plain, "model.layers.0.", 7)
	_, _, v := plain.project("model.layers.0.", h, 0, inv)
	if !slices.Equal(slices.Concat(v...), rv) || slices.Max(rv) < 0.5 {
		t.Errorf("TinyOlmoe: v %v from v_proj %v", v, rv)
	}
}

// TestFirstPositionAttention: the first position attends to itself
// alone, so query head h outputs value head h/(Heads/KVHeads): rows
// (h/group)·8 … +8 of v_proj applied to the normed input, clamped.
func TestFirstPositionAttention(t *testing.T) {
	for _, c := range flavours() {
		_, m := load(t, c)
		p := "model.layers.1."
		x := m.W["model.embed_tokens.weight"][5*c.Hidden : 6*c.Hidden]
		got := m.attention(p, [][]float64{x}, 0)[0]
		_, _, _, rv := projections(m, p, 5)
		rv = clamp(rv, c.ClipQKV)
		group := c.Heads / c.KVHeads
		for hd := 0; hd < c.Heads; hd++ {
			nearAll(t, fmt.Sprintf("seed %d, head %d", c.Seed, hd), got[hd*8:(hd+1)*8], rv[(hd/group)*8:(hd/group+1)*8], 1e-12)
		}
	}
}

// TestSecondPositionAttention: at position 1 query head h weighs the
// value heads of positions 0 and 1 of its KV head h/group by the softmax
// of q·k/sqrt(8) (head_dim^-0.5), with the heads as project gives them.
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
		group := c.Heads / c.KVHeads
		for hd := 0; hd < c.Heads; hd++ {
			var s [2]float64
			for pos := range s {
				for i := range 8 {
					s[pos] += q[1][hd][i] * k[pos][hd/group][i] / math.Sqrt(8)
				}
			}
			p0 := 1 / (1 + math.Exp(s[1]-s[0]))
			for i := range 8 {
				want := p0*v[0][hd/group][i] + (1-p0)*v[1][hd/group][i]
				if g := got[hd*8+i]; math.Abs(g-want) > 1e-12 {
					t.Fatalf("seed %d, head %d, dim %d: %g, want %g", c.Seed, hd, i, g, want)
				}
			}
		}
	}
}

// TestRoutingOnActivations: every layer is sparse; Experts is what Route
// chooses (TopK experts) from the layer's mlp.gate on the real MoE
// inputs; the routing is not degenerate (at least 5 of the 8 experts
// chosen in each layer, no token's top probability above 0.9, and the
// TopK-th and next probabilities never within 1e-6), and the chosen
// probabilities sum to well below 1, so renormalising matters.
func TestRoutingOnActivations(t *testing.T) {
	for _, c := range flavours() {
		_, m := load(t, c)
		used := make([]map[int]bool, c.Layers)
		var n int
		var sum, top float64
		m.moeInput = func(l int, h []float64) {
			n++
			p := fmt.Sprintf("model.layers.%d.mlp.gate.weight", l)
			logits := make([]float64, c.Experts)
			for e := range logits {
				for i, v := range h {
					logits[e] += m.W[p][e*c.Hidden+i] * v
				}
			}
			ids, _ := c.Route(logits)
			if got := m.Experts(l, h); !slices.Equal(got, ids) || len(got) != c.TopK {
				t.Fatalf("seed %d: Experts %v, Route %v, top %d", c.Seed, got, ids, c.TopK)
			}
			if used[l] == nil {
				used[l] = map[int]bool{}
			}
			probs := lmckpt.Softmax64(logits)
			sorted := slices.Clone(probs)
			slices.Sort(sorted)
			slices.Reverse(sorted)
			if sorted[c.TopK-1]-sorted[c.TopK] < 1e-6 {
				t.Errorf("seed %d, layer %d: a near tie at the top-%d edge %v", c.Seed, l, c.TopK, sorted)
			}
			top = math.Max(top, sorted[0])
			for j, e := range ids {
				used[l][e] = true
				if probs[e] != sorted[j] {
					t.Errorf("seed %d: expert %d is not the %d-th most probable", c.Seed, e, j)
				}
				sum += probs[e]
			}
		}
		m.Logits(testTokens)
		if want := len(testTokens) * c.Layers; n != want {
			t.Errorf("%d MoE inputs, want %d", n, want)
		}
		for l, u := range used {
			if len(u) < 5 {
				t.Errorf("seed %d, layer %d: only experts %v chosen", c.Seed, l, slices.Sorted(maps.Keys(u)))
			}
		}
		mean := sum / float64(n)
		if top > 0.9 || mean > 0.85 || mean < 0.3 {
			t.Errorf("seed %d: top probability %g, chosen probabilities sum to %g on average", c.Seed, top, mean)
		}
		t.Logf("seed %d: experts chosen per layer %d, %d; largest probability %.3f; mean top-%d sum %.3f",
			c.Seed, len(used[0]), len(used[1]), top, c.TopK, mean)
	}
}

// TestSwitchesMatter: the tiny checkpoints are sensitive to each feature
// the reference computes: norming q and k per head instead of over the
// whole projection, flipping norm_topk_prob (renormalising in
// TinyOlmoe, not renormalising in TinyOlmoeGQA), and in TinyOlmoeGQA
// dropping clip_qkv or clamping before the q/k norms each move the
// logits.
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
		per := &Model{C: c, W: m.W, perHeadNorm: true}
		check("per-head q/k norm", per)
		flip := &Model{C: c, W: m.W}
		flip.C.NormTopK = !c.NormTopK
		check(fmt.Sprintf("norm_topk_prob %v", flip.C.NormTopK), flip)
		if c.ClipQKV > 0 {
			noClip := &Model{C: c, W: m.W}
			noClip.C.ClipQKV = 0
			check("no clip_qkv", noClip)
			check("clip before the q/k norms", &Model{C: c, W: m.W, clipBeforeNorm: true})
		}
	}
}

// TestRopeFreqs: head dim 8 at rope_theta 1e4 gives inverse frequencies
// 1, 0.1, 0.01, 0.001, and the rotary pairs dim j with dim j+4.
func TestRopeFreqs(t *testing.T) {
	c := TinyOlmoe()
	if c.HeadDim() != 8 {
		t.Fatalf("head dim %d", c.HeadDim())
	}
	nearAll(t, "inv_freq", c.RopeFreqs(), []float64{1, 0.1, 0.01, 0.001}, 1e-15)
	x := []float64{1, 0, 0, 0, 0, 0, 0, 0}
	nearAll(t, "rotary", rotateHalf(x, 2, c.RopeFreqs()), []float64{math.Cos(2), 0, 0, 0, math.Sin(2), 0, 0, 0}, 1e-15)
}
