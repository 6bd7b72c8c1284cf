package deepseek_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"

	"github.com/tputool/tputool/compile"
	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/loader/safetensors"
	"github.com/tputool/tputool/pipeline/deepseek"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/testkit/dsref"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
	"github.com/tputool/tputool/pipeline/testkit/moecheck"
	"github.com/tputool/tputool/pipeline/testkit/refcheck"
	"github.com/tputool/tputool/tpu"
)

var prompts = [][]int{{1, 7, 21, 33, 4}, {1, 9, 14, 60, 3, 5, 41, 27, 11, 19, 50}}

// odd is TinyDeepSeek with every size its own (so that swapping the nope
// and rope parts, or scaling by the latent's width, shows), rms_norm_eps
// 1e-5 (the latent norms keep 1e-6), two shared experts, the top k not
// renormalized and a tied head.
func odd() dsref.DeepSeek {
	c := dsref.TinyDeepSeek()
	c.QKNope, c.QKRope, c.KVLoraRank, c.VHead, c.QLoraRank = 12, 4, 20, 10, 28
	c.Eps, c.Shared, c.NormTopK, c.Tied, c.Seed = 1e-5, 2, false, true, 42
	return c
}

// TestLogitsMatchReference runs tiny DeepSeek-V3s (q LoRA, interleaved
// rotary, grouped routing; without q LoRA, one group, rotate-half rotary
// and YaRN with mscale_all_dim; and odd's sizes and switches), the first
// as GLM-4.7-Flash, and tiny DeepSeek-V2s (group_limited_greedy over
// softmax scores without q LoRA and with V2-Lite's YaRN; greedy with q
// LoRA) on a left-padded batch of two
// prompts plus decode steps, with each experts formulation, compiled and
// eager, on the go backend and on tputool's cpu backend, and compares
// every row's logits with dsref's float64 forward, which expands kv_b_proj
// into every head's keys and values as transformers does (the model
// absorbs it into the query and the output and caches the latent).
func TestLogitsMatchReference(t *testing.T) {
	const steps = 6
	const tol = 1e-4
	for _, c := range []struct {
		name string
		ds   dsref.DeepSeek
		glm  bool
	}{{"v3", dsref.TinyDeepSeek(), false}, {"lite-yarn", dsref.TinyDeepSeekLite(), false}, {"odd", odd(), false},
		{"glm-4.7-flash", dsref.TinyDeepSeek(), true},
		{"v2-grouped-yarn", dsref.TinyDeepSeekV2(), false}, {"v2-greedy", dsref.TinyDeepSeekV2Greedy(), false},
		{"v3.2", dsref.TinyDeepSeekV32(), false}, {"v3.2-masked", dsref.TinyDeepSeekV32(), false}, {"glm-5", dsref.TinyGLM5(), false},
		{"a.x-k1", dsref.TinyAXK1(), false}} {
		t.Run(c.name, func(t *testing.T) {
			write := c.ds.Write
			if c.glm {
				write = func(dir string) error { return writeGLM(c.ds, dir) }
			}
			dir, l := lmckpt.WriteLoad(t, write)
			if strings.HasSuffix(c.name, "-masked") { // every step scores all visible rows and masks the others
				o := l.Model.(*deepseek.Model).Options()
				o.SparseRows = 0
				l.Model = deepseek.NewModel(o)
			}
			rm, err := c.ds.Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			moecheck.Run(t, "", l, rm, prompts, refcheck.GreedySequences(rm, prompts, steps), steps, tol)
		})
	}
}

// writeGLM writes c as a Glm4MoeLiteForCausalLM (GLM-4.7-Flash): the same
// tensors, the config under that class with mlp_layer_types placing the
// dense layers and no first_k_dense_replace (which that class does not
// read).
func writeGLM(c dsref.DeepSeek, dir string) error {
	if err := c.Write(dir); err != nil {
		return err
	}
	cfg, err := lmckpt.ReadConfig(dir)
	if err != nil {
		return err
	}
	cfg["architectures"], cfg["model_type"] = []string{"Glm4MoeLiteForCausalLM"}, "glm4_moe_lite"
	types := make([]string, c.Layers)
	for i := range types {
		types[i] = "sparse"
		if c.Dense(i) {
			types[i] = "dense"
		}
	}
	cfg["mlp_layer_types"] = types
	delete(cfg, "first_k_dense_replace")
	delete(cfg, "topk_method")
	delete(cfg, "scoring_func")
	b, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "config.json"), b, 0o644)
}

// TestSolarOpen runs a tiny Solar Open (GLM-4.5's MoE on every layer
// after Llama's attention, the whole head turning, q/k/v biases) against
// dsref, under every experts formulation, and reads SolarOpenConfig's
// defaults (48 layers of 64 heads of 128, 128 experts of 1280 of which
// 8, one shared, rope_theta 1e6; 102.6B parameters, the published
// 100B), ignoring the GLM fields it removes.
func TestSolarOpen(t *testing.T) {
	c := dsref.TinySolar()
	dir, l := lmckpt.WriteLoad(t, c.Write)
	rm, err := c.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	moecheck.Run(t, "", l, rm, prompts, refcheck.GreedySequences(rm, prompts, 6), 6, 1e-4)

	m, err := lm.New(lmckpt.ParseConfig(t, `{"architectures": ["SolarOpenForCausalLM"], "first_k_dense_replace": 3, "use_qk_norm": true}`))
	if err != nil {
		t.Fatal(err)
	}
	o := m.(*deepseek.Model).Options()
	if s := m.Spec(); !o.GQA || o.QKNorm || !o.Sparse[0] || s.Layers != 48 || s.Heads != 64 || s.HeadDim != 128 || s.KVHeads != 8 ||
		o.Experts != 128 || o.TopK != 8 || o.MoEIntermediate != 1280 || o.Rope.RotaryDim != 128 || s.VocabSize != 196608 {
		t.Errorf("spec %+v, options %+v", s, o)
	}
	if n := float64(lmckpt.Params(m)) / 1e9; n < 102.6 || n > 102.7 {
		t.Errorf("SolarOpenConfig's defaults: %.2fB parameters, want 102.65B (the published 100B)", n)
	}
}

// TestAXK1 reads AXK1Config's defaults (A.X K1: DeepSeek-V3's design
// with 64 heads, 192 experts of which 8, one dense first layer) and
// checks that the comparison above can fail on its one change: a
// reference without the post_mlp_layernorm on the sparse layers' MoE
// output differs; the experts run in the graph only.
func TestAXK1(t *testing.T) {
	m, err := lm.New(lmckpt.ParseConfig(t, `{"architectures": ["AXK1ForCausalLM"]}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := m.(lm.InGraphExperts); !ok {
		t.Error("A.X K1's experts are not held to the graph")
	}
	o := m.(interface{ Options() deepseek.Options }).Options()
	if s := m.Spec(); !o.PostMoENorm || s.Heads != 64 || o.Experts != 192 || o.TopK != 8 || o.Sparse[0] || !o.Sparse[1] || s.VocabSize != 163840 ||
		s.BOS != 163691 || fmt.Sprint(s.EOS) != "[163691]" || s.MaxPositions != 32768 {
		t.Errorf("spec %+v, options %+v", s, o)
	}
	names := map[string]bool{}
	for _, w := range m.LayerWeights(1) {
		names[w.Name] = true
	}
	for _, w := range m.LayerWeights(0) {
		names[w.Name] = true
	}
	if !names["model.layers.1.post_mlp_layernorm.weight"] || names["model.layers.0.post_mlp_layernorm.weight"] {
		t.Errorf("post_mlp_layernorm on the sparse layers alone: %v", names)
	}
	if _, err := m.(lm.MultiToken).WithMTP(); err == nil {
		t.Error("A.X K1's MTP layer read")
	}

	c := dsref.TinyAXK1()
	dir, l := lmckpt.WriteLoad(t, c.Write)
	prompt := prompts[1]
	got := moecheck.Prefill(t, l, prompt)
	rm, err := c.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	plain := *rm
	plain.C.PostMoENorm = false
	refcheck.Discriminates(t, got[0], prompt, rm.Logits, 1e-3, refcheck.Mutant{Name: "no post_mlp_layernorm", Logits: plain.Logits})
}

// TestRoutingMatters checks that the comparison above can fail where
// DeepSeek-V3's router differs from its kin: a reference without the
// correction bias, without the group limit, or without the routed scale
// gives other logits than the model.
func TestRoutingMatters(t *testing.T) {
	c := dsref.TinyDeepSeek()
	dir, l := lmckpt.WriteLoad(t, c.Write)
	prompt := prompts[1]
	got := moecheck.Prefill(t, l, prompt)
	rm, err := c.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	var mutants []refcheck.Mutant
	for _, mutate := range []struct {
		name string
		f    func(c *dsref.DeepSeek, m *dsref.Model)
	}{
		{"no correction bias", func(_ *dsref.DeepSeek, m *dsref.Model) {
			for n, v := range m.W {
				if strings.HasSuffix(n, "e_score_correction_bias") {
					m.W[n] = make([]float64, len(v))
				}
			}
		}},
		{"all groups", func(c *dsref.DeepSeek, _ *dsref.Model) { c.TopKGroup = c.Groups }},
		{"no routed scale", func(c *dsref.DeepSeek, _ *dsref.Model) { c.RoutedScale = 1 }},
	} {
		mc := c
		mm, err := mc.Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		mutate.f(&mc, mm)
		mm.C = mc
		mutants = append(mutants, refcheck.Mutant{Name: mutate.name, Logits: mm.Logits})
	}
	refcheck.Discriminates(t, got[0], prompt, rm.Logits, 1e-3, mutants...)
}

// TestIndexerMatters checks that the comparison above can fail where
// DeepSeek-V3.2's sparse attention shows: a reference attending to every
// earlier token (no indexer), keeping the best 5 instead of 4, or turning
// the indexer's rope dims the other way (GLM-5's interleaved pairs for
// DeepSeek-V3.2's rotate-half, and back) gives other logits than the
// model on an 11-token prompt.
func TestIndexerMatters(t *testing.T) {
	for _, c := range []dsref.DeepSeek{dsref.TinyDeepSeekV32(), dsref.TinyGLM5()} {
		dir, l := lmckpt.WriteLoad(t, c.Write)
		prompt := prompts[1]
		got := moecheck.Prefill(t, l, prompt)
		rm, err := c.Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		var mutants []refcheck.Mutant
		for _, mutate := range []struct {
			name string
			f    func(c *dsref.DeepSeek)
		}{
			{"dense attention", func(c *dsref.DeepSeek) { c.IndexTopK = 1 << 20 }},
			{"the best 5", func(c *dsref.DeepSeek) { c.IndexTopK = 5 }},
			{"the other rope", func(c *dsref.DeepSeek) { c.IndexInterleave = !c.IndexInterleave }},
		} {
			mc := c
			mutate.f(&mc)
			mutants = append(mutants, refcheck.Mutant{Name: mutate.name, Logits: (&dsref.Model{C: mc, W: rm.W}).Logits})
		}
		refcheck.Discriminates(t, got[0], prompt, rm.Logits, 1e-3, mutants...)
	}
}

// TestRoutingMattersV2 checks the comparison can fail where DeepSeek-V2's
// router differs from its kin: a reference routing the same weights by
// V3's rule (sigmoid, groups ranked by their two best, no bias), without
// the group limit, or without the routed scale gives other logits than
// the model.
func TestRoutingMattersV2(t *testing.T) {
	c := dsref.TinyDeepSeekV2()
	dir, l := lmckpt.WriteLoad(t, c.Write)
	prompt := prompts[1]
	got := moecheck.Prefill(t, l, prompt)
	rm, err := c.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	var mutants []refcheck.Mutant
	for _, mutate := range []struct {
		name string
		f    func(c *dsref.DeepSeek, m *dsref.Model)
	}{
		{"V3's router", func(c *dsref.DeepSeek, m *dsref.Model) {
			c.V2 = false
			for l := c.FirstDense; l < c.Layers; l++ { // no correction bias
				m.W[fmt.Sprintf("model.layers.%d.mlp.gate.e_score_correction_bias", l)] = make([]float64, c.Experts)
			}
		}},
		{"greedy", func(c *dsref.DeepSeek, _ *dsref.Model) { c.TopKMethod = "greedy" }},
		{"no routed scale", func(c *dsref.DeepSeek, _ *dsref.Model) { c.RoutedScale = 1 }},
	} {
		mc := c
		mm, err := mc.Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		mutate.f(&mc, mm)
		mm.C = mc
		mutants = append(mutants, refcheck.Mutant{Name: mutate.name, Logits: mm.Logits})
	}
	refcheck.Discriminates(t, got[0], prompt, rm.Logits, 1e-3, mutants...)
}

// TestFP8 loads a block-FP8 copy of the tiny model, as DeepSeek's own
// releases are stored (every projection F8_E4M3 with weight_scale_inv,
// kv_b_proj included, which the model reads whole and so is decoded at
// load): on the cpu backend the projections stay as stored, and the
// logits are near the original weights' reference. The DeepSeek-V3.2
// copy holds its indexer as the V3.2 releases do: wq_b and wk in FP8,
// weights_proj unquantized (bf16 in the releases, the tiny model's f32
// here); its logits, held so, are the go backend's, which decodes the
// same values at load.
func TestFP8(t *testing.T) {
	for _, c := range []dsref.DeepSeek{dsref.TinyDeepSeek(), dsref.TinyDeepSeekV32()} {
		testFP8(t, c)
	}
}

func testFP8(t *testing.T, c dsref.DeepSeek) {
	src := t.TempDir()
	if err := c.Write(src); err != nil {
		t.Fatal(err)
	}
	rm, err := c.Load(src)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := lmckpt.WriteFP8Copy(src, dir, lmckpt.FP8Options{Block: 16}); err != nil { // kv_a_proj_with_mqa's 24 rows: a partial block

		t.Fatal(err)
	}
	ck, err := safetensors.OpenDir(dir, "")
	if err != nil {
		t.Fatal(err)
	}
	stored := []string{"kv_b_proj", "kv_a_proj_with_mqa", "q_a_proj"}
	if c.IndexTopK > 0 {
		stored = append(stored, "indexer.wq_b", "indexer.wk")
		if ck.Has("model.layers.1.self_attn.indexer.weights_proj.weight_scale_inv") {
			t.Fatal("the FP8 copy holds the indexer's weights_proj in FP8")
		}
	}
	for _, n := range stored {
		if !ck.Has("model.layers.1.self_attn." + n + ".weight_scale_inv") {
			t.Fatalf("the FP8 copy holds %s plain", n)
		}
	}
	ck.Close()
	l, err := lmckpt.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	be := refcheck.CPUBackend(t)
	r, err := compile.NewRunner(be, l, compile.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for _, n := range []string{"q_b_proj", "indexer.wq_b"} {
		if n == "indexer.wq_b" && c.IndexTopK == 0 {
			continue
		}
		if f := l.HeldForm(compile.HoldingOf(tpu.CapabilitiesOf(be), compile.Options{}), "model.layers.1.self_attn."+n+".weight"); f != lm.FormFP8 {
			t.Errorf("%s held as %v, want FP8 as stored", n, f)
		}
	}
	logits, err := r.NewState().Prefill(prompts, 2)
	if err != nil {
		t.Fatal(err)
	}
	if c.IndexTopK > 0 {
		// FP8's rounding moves the index scores past the tiny model's
		// margins, so the original weights choose other keys: compare
		// with the go backend, which decodes the same FP8 values at load.
		g, err := compile.NewRunner(refcheck.GoBackend(t), l, compile.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer g.Close()
		decoded, err := g.NewState().Prefill(prompts, 2)
		if err != nil {
			t.Fatal(err)
		}
		for b := range prompts {
			want := make([]float64, len(decoded[b]))
			for i, v := range decoded[b] {
				want[i] = float64(v)
			}
			if e := refcheck.RelErr(logits[b], want); e > 1e-4 {
				t.Errorf("row %d: FP8 held as stored and decoded at load differ by %.3g", b, e)
			}
		}
		return
	}
	for b, p := range prompts {
		e := refcheck.RelErr(logits[b], rm.Logits(p)[len(p)-1])
		t.Logf("row %d: %.3g from the original weights' reference", b, e)
		if e > 0.1 {
			t.Errorf("row %d: relative error %.3g against the original weights' reference", b, e)
		}
	}
}

// TestSkipsMTPLayer: a checkpoint that ships a multi-token-prediction
// layer past num_hidden_layers (DeepSeek-V3's model.layers.61) loads, the
// layer skipped, with the same logits.
func TestSkipsMTPLayer(t *testing.T) {
	c := dsref.TinyDeepSeek()
	src, l := lmckpt.WriteLoad(t, c.Write)
	want := prefill(t, l)
	ck, err := safetensors.OpenDir(src, "")
	if err != nil {
		t.Fatal(err)
	}
	var ts []safetensors.Tensor
	for _, n := range ck.Names() {
		info, _ := ck.Info(n)
		raw, err := ck.Raw(n)
		if err != nil {
			t.Fatal(err)
		}
		ts = append(ts, safetensors.Tensor{Name: n, DType: info.DType, Shape: info.Shape, Data: append([]byte(nil), raw...)})
		if rest, ok := strings.CutPrefix(n, "model.layers.2."); ok { // a copy of the last layer as layer 3
			ts = append(ts, safetensors.Tensor{Name: "model.layers.3." + rest, DType: info.DType, Shape: info.Shape, Data: append([]byte(nil), raw...)})
		}
	}
	ck.Close()
	ts = append(ts, safetensors.Tensor{Name: "model.layers.3.eh_proj.weight", DType: safetensors.F32, Shape: []int{1, 1}, Data: make([]byte, 4)})
	cfg, err := lmckpt.ReadConfig(src)
	if err != nil {
		t.Fatal(err)
	}
	cfg["num_nextn_predict_layers"] = 1
	dir := t.TempDir()
	if err := lmckpt.WriteCheckpoint(dir, cfg, ts); err != nil {
		t.Fatal(err)
	}
	l2, err := lmckpt.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	got := prefill(t, l2)
	for i := range want[0] {
		if got[0][i] != want[0][i] {
			t.Fatalf("logit %d: %g with the extra layer, %g without", i, got[0][i], want[0][i])
		}
	}
}

func prefill(t *testing.T, l *lm.Loaded) [][]float32 {
	t.Helper()
	r, err := compile.NewRunner(refcheck.GoBackend(t), l, compile.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	out, err := r.NewState().Prefill(prompts[:1], 1)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestConfig reads DeepSeek-V3's config.json (671B parameters without the
// MTP layer; the latent cache of 576 a token and layer; the YaRN softmax
// scale), DeepseekV3Config's defaults, and refuses bad values naming the
// field.
func TestConfig(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "testdata", "configs", "deepseek_v3", "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	m, err := lm.New(lmckpt.ParseConfig(t, string(raw)))
	if err != nil {
		t.Fatal(err)
	}
	o := m.(*deepseek.Model).Options()
	var n int64
	for _, w := range lm.Weights(m) {
		k := int64(1)
		for _, d := range w.Shape {
			k *= int64(d)
		}
		n += k
	}
	if n != 671_026_419_200 {
		t.Errorf("%d parameters, want 671,026,419,200", n)
	}
	// yarn_get_mscale(40, 1)² / sqrt(192).
	ms := 0.1*math.Log(40) + 1
	if s := m.Spec(); s.KVHeads != 1 || s.HeadDim != 576 || s.Heads != 128 || math.Abs(o.Scale-ms*ms/math.Sqrt(192)) > 1e-12 ||
		o.QLoraRank != 1536 || o.Groups != 8 || o.TopKGroup != 4 || o.Sparse[2] || !o.Sparse[3] || !o.Interleave {
		t.Errorf("spec %+v, options %+v", s, o)
	}
	if r, ok := m.(lm.Skipper).SkipWeight("model.layers.61.enorm.weight"); !ok || !strings.Contains(r, "multi-token") {
		t.Errorf("layer 61 not skipped: %q %v", r, ok)
	}
	if _, ok := m.(lm.Skipper).SkipWeight("model.layers.60.mlp.gate.weight"); ok {
		t.Error("layer 60 skipped")
	}

	// DeepSeek-V3.2: V3's config plus the indexer's 64 heads of 128 a
	// layer (wq_b from the q LoRA, wk, its LayerNorm, weights_proj).
	raw, err = os.ReadFile(filepath.Join("..", "..", "testdata", "configs", "deepseek_v32", "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	m32, err := lm.New(lmckpt.ParseConfig(t, string(raw)))
	if err != nil {
		t.Fatal(err)
	}
	o32 := m32.(*deepseek.Model).Options()
	if n32 := lmckpt.Params(m32); n32 != 671_026_419_200+61*(64*128*1536+128*7168+2*128+64*7168) {
		t.Errorf("DeepSeek-V3.2: %d parameters", n32)
	}
	if o32.IndexHeads != 64 || o32.IndexDim != 128 || o32.IndexTopK != 2048 || !o32.Interleave || o32.Sparse[2] || !o32.Sparse[3] {
		t.Errorf("DeepSeek-V3.2: options %+v", o32)
	}
	if st := m32.LayerState(0, 1, 64); len(st) != 2 || st[1].Name != "indexer" || fmt.Sprint(st[1].Shape) != "[1 1 64 128]" {
		t.Errorf("DeepSeek-V3.2: layer state %+v", st)
	}
	// GLM-5: GlmMoeDsaConfig's defaults (GLM-5's sizes: 743.9B
	// parameters, 39.9B active less the embedding and head, the card's
	// 744B and 40B), its indexer's pairs; layers sharing another's choice
	// refused by each of the three fields.
	g5, err := deepseek.Resolve(lmckpt.ParseConfig(t, `{"architectures": ["GlmMoeDsaForCausalLM"], "indexer_types": null}`))
	if err != nil {
		t.Fatal(err)
	}
	if n := lmckpt.Params(deepseek.NewModel(g5)); n != 743_911_218_432 {
		t.Errorf("GLM-5: %d parameters, want 743,911,218,432", n)
	}
	if g5.Spec.Hidden != 6144 || g5.Spec.Layers != 78 || g5.QLoraRank != 2048 || g5.VHead != 256 || g5.IndexHeads != 32 ||
		!g5.IndexInterleave || g5.Groups != 1 || g5.Eps != 1e-5 || g5.Sparse[2] || !g5.Sparse[3] {
		t.Errorf("GlmMoeDsaConfig's defaults: %+v", g5)
	}
	for _, bad := range []struct{ js, want string }{
		{`"num_hidden_layers": 3, "indexer_types": ["full", "shared", "full"]`, `indexer_types[1] is "shared"`},
		{`"index_topk_pattern": "FSSF"`, `index_topk_pattern "FSSF"`},
		{`"index_topk_pattern": ["full", "shared"]`, `index_topk_pattern[1] is "shared"`},
		{`"index_topk_freq": 4`, "index_topk_freq 4"},
	} {
		_, err := deepseek.Resolve(lmckpt.ParseConfig(t, `{"architectures": ["GlmMoeDsaForCausalLM"], `+bad.js+`}`))
		if err == nil || !strings.Contains(err.Error(), bad.want) || !errors.Is(err, errs.ErrUnsupported) {
			t.Errorf("%s: error %v, want %q", bad.js, err, bad.want)
		}
	}
	// indexer_types wins over the pattern and the frequency, as in
	// GlmMoeDsaConfig; it must have an entry a layer.
	if _, err := deepseek.Resolve(lmckpt.ParseConfig(t, `{"architectures": ["GlmMoeDsaForCausalLM"], "num_hidden_layers": 2,
		"indexer_types": ["full", "full"], "index_topk_pattern": "FS", "index_topk_freq": 2}`)); err != nil {
		t.Errorf("indexer_types all full over a sharing pattern: %v", err)
	}
	if _, err := deepseek.Resolve(lmckpt.ParseConfig(t, `{"architectures": ["GlmMoeDsaForCausalLM"], "num_hidden_layers": 3,
		"indexer_types": ["full"]}`)); err == nil || !strings.Contains(err.Error(), "indexer_types has 1 entries for 3 layers") {
		t.Errorf("a short indexer_types: %v", err)
	}
	for _, bad := range []struct{ js, want string }{
		{`"q_lora_rank": null`, "q_lora_rank is null"},
		{`"index_topk": 0`, "index_topk 0"},
		{`"index_head_dim": 32`, "index_head_dim 32"},
	} {
		_, err := deepseek.Resolve(lmckpt.ParseConfig(t, `{"architectures": ["DeepseekV32ForCausalLM"], `+bad.js+`}`))
		if err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%s: error %v, want %q", bad.js, err, bad.want)
		}
	}

	d, err := deepseek.Resolve(lmckpt.ParseConfig(t, `{"architectures": ["DeepseekV3ForCausalLM"], "q_lora_rank": null}`))
	if err != nil {
		t.Fatal(err)
	}
	if d.Spec.Hidden != 7168 || d.Experts != 256 || d.QLoraRank != 0 || d.RoutedScale != 2.5 || d.Spec.VocabSize != 129280 ||
		d.Spec.BOS != 0 || fmt.Sprint(d.Spec.EOS) != "[1]" ||
		math.Abs(d.Scale-1/math.Sqrt(192)) > 1e-12 {
		t.Errorf("defaults with q_lora_rank null: %+v", d)
	}
	g, err := deepseek.Resolve(lmckpt.ParseConfig(t, `{"architectures": ["Glm4MoeLiteForCausalLM"], "first_k_dense_replace": 3}`))
	if err != nil {
		t.Fatal(err)
	}
	if g.Spec.Hidden != 2048 || g.Spec.Heads != 20 || g.Experts != 64 || g.TopK != 4 || g.QLoraRank != 768 || g.VHead != 256 ||
		g.QKNope != 192 || g.RoutedScale != 1.8 || g.Eps != 1e-5 || g.Spec.Layers != 47 || g.Sparse[0] || !g.Sparse[1] ||
		math.Abs(g.Scale-1/math.Sqrt(256)) > 1e-12 {
		t.Errorf("Glm4MoeLiteConfig's defaults (first_k_dense_replace not read): %+v", g)
	}
	for _, bad := range []struct{ js, want string }{
		{`"num_hidden_layers": 2, "mlp_layer_types": ["dense"]`, "mlp_layer_types has 1 entries for 2 layers"},
		{`"num_hidden_layers": 2, "mlp_layer_types": ["dense", "moe"]`, `mlp_layer_types[1] is "moe"`},
	} {
		_, err := deepseek.Resolve(lmckpt.ParseConfig(t, `{"architectures": ["Glm4MoeLiteForCausalLM"], `+bad.js+`}`))
		if err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%s: error %v, want %q", bad.js, err, bad.want)
		}
	}
	base := `"architectures": ["DeepseekV3ForCausalLM"], "hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 2, "intermediate_size": 32, "vocab_size": 100, "moe_intermediate_size": 16, "n_routed_experts": 8, "num_experts_per_tok": 2, "n_group": 4, "topk_group": 2`
	for _, bad := range []struct{ js, want string }{
		{`"kv_lora_rank": 0`, "kv_lora_rank must be positive"},
		{`"n_group": 3`, "n_group 3 must divide n_routed_experts 8"},
		{`"topk_group": 5`, "topk_group 5"},
		{`"num_experts_per_tok": 9`, "num_experts_per_tok 9"},
		{`"n_group": 8, "topk_group": 1`, "groups of two or more"},
		{`"scoring_func": "softmax"`, "scoring_func \"softmax\" is not supported"},
		{`"topk_method": "greedy"`, "topk_method \"greedy\" is not supported"},
		{`"moe_layer_freq": 2`, "moe_layer_freq 2 is not supported"},
		{`"n_routed_experts": 100000, "n_group": 1, "topk_group": 1`, "expert MLPs"},
	} {
		_, err := deepseek.Resolve(lmckpt.ParseConfig(t, fmt.Sprintf("{%s, %s}", base, bad.js)))
		if err == nil || !strings.Contains(err.Error(), bad.want) || !strings.Contains(err.Error(), "config.json") {
			t.Errorf("%s: error %v, want one naming config.json and %q", bad.js, err, bad.want)
		}
	}
}

// TestLatentCache runs past the first cache bucket (so the one latent
// cache a layer grows mid-generation) in f32, within 1e-4 of the
// reference, and with the cache held as int8 with a scale a slot, within
// int8's rounding; the state is one tensor a layer (two with int8's
// scales) of kv_lora_rank + qk_rope_head_dim.
func TestLatentCache(t *testing.T) {
	c := odd()
	dir, l := lmckpt.WriteLoad(t, c.Write)
	rm, err := c.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	const steps = 26 // 11 + 26 slots: past the 32 of the first bucket
	seqs := refcheck.GreedySequences(rm, prompts, steps)
	for _, kv := range []struct {
		name string
		opts compile.Options
		tol  float64
	}{{"f32", compile.Options{}, 1e-4}, {"int8", compile.Options{KVDType: dtypes.Int8}, 0.01}} {
		t.Run(kv.name, func(t *testing.T) {
			st := lm.HeldState(l.Model, 1, 2, 64, kv.opts.KVDType)
			if want := map[string]int{"f32": 1, "int8": 2}[kv.name]; len(st) != want || st[0].Shape[3] != c.KVLoraRank+c.QKRope || st[0].Shape[1] != 1 {
				t.Fatalf("layer state %+v, want %d tensors of one latent of %d", st, want, c.KVLoraRank+c.QKRope)
			}
			r, err := compile.NewRunner(refcheck.CPUBackend(t), l, kv.opts)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			f := refcheck.TeacherForced(t, r.NewState(), rm, prompts, seqs, steps, kv.tol)
			t.Logf("max relative error %.3g", f.Worst)
			grown := 0
			for _, p := range r.Stats().Programs {
				if p.Name == "grow-cache" {
					grown = p.Calls
				}
			}
			if grown == 0 {
				t.Error("the cache never grew")
			}
		})
	}
}

// TestIndexerCache runs DeepSeek-V3.2 past the first cache bucket (the
// latent and the indexer's keys grow together mid-generation, and every
// query past the fourth attends to its chosen four) in f32 within 1e-4
// of the reference, and with the latent held as int8 for 6 steps within
// int8's rounding: the indexer's keys stay in the compute dtype, between
// the latent and its scales in the layer's state. (Further on, int8's
// rounding of the latent moves the next layers' index scores by more
// than the 0.0007 between a query's fourth and fifth best keys, and the
// reference keeps another key: a different but equally valid choice.)
func TestIndexerCache(t *testing.T) {
	c := dsref.TinyDeepSeekV32()
	dir, l := lmckpt.WriteLoad(t, c.Write)
	rm, err := c.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range []struct {
		name  string
		opts  compile.Options
		steps int
		tol   float64
	}{{"f32", compile.Options{}, 26, 1e-4}, {"int8", compile.Options{KVDType: dtypes.Int8}, 6, 0.02}} {
		t.Run(kv.name, func(t *testing.T) {
			st := lm.HeldState(l.Model, 1, 2, 64, kv.opts.KVDType)
			names := make([]string, len(st))
			for i, s := range st {
				names[i] = fmt.Sprintf("%s:%v:%s", s.Name, s.Shape, s.HeldIn(dtypes.Float32, kv.opts.KVDType))
			}
			want := map[string]string{
				"f32":  "[latent:[2 1 64 24]:Float32 indexer:[2 1 64 12]:Float32]",
				"int8": "[latent:[2 1 64 24]:Int8 indexer:[2 1 64 12]:Float32 latent_scale:[2 1 64]:Float32]",
			}[kv.name]
			if fmt.Sprint(names) != want {
				t.Fatalf("layer state %v, want %s", names, want)
			}
			r, err := compile.NewRunner(refcheck.CPUBackend(t), l, kv.opts)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			seqs := refcheck.GreedySequences(rm, prompts, kv.steps)
			f := refcheck.TeacherForced(t, r.NewState(), rm, prompts, seqs, kv.steps, kv.tol)
			t.Logf("max relative error %.3g", f.Worst)
			grown := 0
			for _, p := range r.Stats().Programs {
				if p.Name == "grow-cache" {
					grown = p.Calls
				}
			}
			if kv.steps > 21 && grown == 0 { // 11 + 22 slots: past the 32 of the first bucket
				t.Error("the cache never grew")
			}
		})
	}
}

// TestConfigV2 reads DeepSeek-V2-Lite's config.json (15.7B parameters,
// q_proj, greedy softmax routing, no correction bias, the YaRN softmax
// scale with mscale_all_dim 0.707) and DeepSeek-V2's sizes (236B,
// group_limited_greedy), DeepseekV2Config's defaults, and refuses what
// DeepSeek-V2's router cannot be.
func TestConfigV2(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "testdata", "configs", "deepseek_v2_lite", "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	m, err := lm.New(lmckpt.ParseConfig(t, string(raw)))
	if err != nil {
		t.Fatal(err)
	}
	o := m.(*deepseek.Model).Options()
	if n := lmckpt.Params(m); n != 15_706_484_224 {
		t.Errorf("%d parameters, want 15,706,484,224", n)
	}
	ms := 0.1*0.707*math.Log(40) + 1
	if s := m.Spec(); !o.V2 || s.HeadDim != 576 || s.Heads != 16 || o.QLoraRank != 0 || o.Groups != 1 || o.TopK != 6 || o.NormTopK ||
		math.Abs(o.Scale-ms*ms/math.Sqrt(192)) > 1e-12 || o.Sparse[0] || !o.Sparse[1] || !o.Interleave || o.MTPLayers != 0 ||
		s.BOS != 100000 || fmt.Sprint(s.EOS) != "[100001]" {
		t.Errorf("spec %+v, options %+v", s, o)
	}
	for _, w := range lm.Weights(m) {
		if strings.Contains(w.Name, "e_score_correction_bias") {
			t.Errorf("DeepSeek-V2 asks for %s", w.Name)
		}
	}

	// DeepSeek-V2 (and V2.5, Coder-V2): 236B, 8 groups of which 3 open.
	v2 := `{"architectures": ["DeepseekV2ForCausalLM"], "vocab_size": 102400, "hidden_size": 5120, "intermediate_size": 12288,
	"moe_intermediate_size": 1536, "num_hidden_layers": 60, "num_attention_heads": 128, "q_lora_rank": 1536, "n_routed_experts": 160,
	"n_shared_experts": 2, "num_experts_per_tok": 6, "n_group": 8, "topk_group": 3, "topk_method": "group_limited_greedy",
	"routed_scaling_factor": 16.0, "first_k_dense_replace": 1, "norm_topk_prob": false, "scoring_func": "softmax"}`
	big, err := lm.New(lmckpt.ParseConfig(t, v2))
	if err != nil {
		t.Fatal(err)
	}
	bo := big.(*deepseek.Model).Options()
	if n := lmckpt.Params(big); n/1e9 != 235 || bo.Groups != 8 || bo.TopKGroup != 3 || bo.RoutedScale != 16 {
		t.Errorf("DeepSeek-V2: %d parameters (want 235.7B), options %+v", n, bo)
	}

	d, err := deepseek.Resolve(lmckpt.ParseConfig(t, `{"architectures": ["DeepseekV2ForCausalLM"], "num_experts_per_tok": 6}`))
	if err != nil {
		t.Fatal(err)
	}
	if d.Spec.Hidden != 4096 || d.Spec.VocabSize != 32000 || d.Experts != 64 || d.Shared != 2 || d.MoEIntermediate != 1407 ||
		d.QLoraRank != 1536 || d.RoutedScale != 1 || d.Sparse[0] != true || d.Spec.BOS != 1 || fmt.Sprint(d.Spec.EOS) != "[2]" ||
		d.Groups != 1 || math.Abs(d.Scale-1/math.Sqrt(192)) > 1e-12 {
		t.Errorf("DeepseekV2Config's defaults: %+v", d)
	}
	base := `"architectures": ["DeepseekV2ForCausalLM"], "hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 2, "intermediate_size": 32, "vocab_size": 100, "moe_intermediate_size": 16, "n_routed_experts": 8`
	for _, bad := range []struct{ js, want string }{
		{`"scoring_func": "sigmoid", "num_experts_per_tok": 2`, `scoring_func "sigmoid" is not supported`},
		{`"topk_method": "noaux_tc", "num_experts_per_tok": 2`, `topk_method "noaux_tc" is not supported`},
		{`"norm_topk_prob": true, "num_experts_per_tok": 2`, "norm_topk_prob true is not supported"},
		{`"n_group": 4`, "num_experts_per_tok is missing"},
		{`"topk_method": "group_limited_greedy", "num_experts_per_tok": 2`, "needs n_group and topk_group"},
		{`"topk_method": "group_limited_greedy", "num_experts_per_tok": 2, "n_group": 3, "topk_group": 1`, "n_group 3 must divide n_routed_experts 8, topk_group"},
		{`"topk_method": "group_limited_greedy", "num_experts_per_tok": 3, "n_group": 4, "topk_group": 1`, "hold num_experts_per_tok 3"},
	} {
		_, err := deepseek.Resolve(lmckpt.ParseConfig(t, fmt.Sprintf("{%s, %s}", base, bad.js)))
		if err == nil || !strings.Contains(err.Error(), bad.want) || !strings.Contains(err.Error(), "config.json") {
			t.Errorf("%s: error %v, want one naming config.json and %q", bad.js, err, bad.want)
		}
	}
	// Eight groups of one expert each are fine for V2's max rule.
	if _, err := deepseek.Resolve(lmckpt.ParseConfig(t, fmt.Sprintf(`{%s, "topk_method": "group_limited_greedy", "num_experts_per_tok": 2, "n_group": 8, "topk_group": 2}`, base))); err != nil {
		t.Error(err)
	}
}
