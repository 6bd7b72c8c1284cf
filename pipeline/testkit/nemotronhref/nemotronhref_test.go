package nemotronhref

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/tputool/tputool/loader/safetensors"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
	"github.com/tputool/tputool/pipeline/testkit/mamba2ref"
	"github.com/tputool/tputool/pipeline/testkit/refcheck"
)

var testTokens = []int{1, 9, 14, 60, 3, 5, 41, 27, 88, 2, 17, 33}

// tinyTied is TinyH with tied embeddings (no lm_head.weight).
func tinyTied() NemotronH {
	c := TinyH()
	c.Tied = true
	c.Seed = 5003
	return c
}

func flavours() []NemotronH { return []NemotronH{TinyNano(), TinyH(), TinyLatent(), tinyTied()} }

// load writes c's checkpoint into a temporary directory and reads it back.
func load(t *testing.T, c NemotronH) (string, *Model) {
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

func readJSON(t *testing.T, path string) map[string]any {
	t.Helper()
	var v map[string]any
	b, err := os.ReadFile(path)
	if err == nil {
		err = json.Unmarshal(b, &v)
	}
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// blockInput is layer l's block norm applied to the residual stream after
// the first l layers: exactly layer l's mixer input.
func blockInput(m *Model, l int, tokens []int) [][]float64 {
	x := m.Hidden(tokens, l)
	norm := m.W[fmt.Sprintf("backbone.layers.%d.norm.weight", l)]
	for t := range x {
		x[t] = lmckpt.RMSNorm64(x[t], norm, m.C.Eps)
	}
	return x
}

// ----------------------------------------------------------------------------
// Checkpoint and config

// wantTensors lists the names and shapes of the tiny checkpoints, written
// out by hand independently of Tensors.
func wantTensors(c NemotronH) map[string][]int {
	want := map[string][]int{"backbone.embeddings.weight": {96, 32}, "backbone.norm_f.weight": {32}}
	if !c.Tied {
		want["lm_head.weight"] = []int{96, 32}
	}
	for l, typ := range c.Layers {
		p := fmt.Sprintf("backbone.layers.%d.", l)
		want[p+"norm.weight"] = []int{32}
		p += "mixer."
		switch typ {
		case Mamba:
			if c.Seed == TinyNano().Seed || c.Seed == TinyLatent().Seed {
				// I 8·8 = 64, conv_dim 64 + 2·4·8 = 128, 8 heads.
				want[p+"in_proj.weight"] = []int{64 + 128 + 8, 32}
				want[p+"conv1d.weight"] = []int{128, 1, 4}
				want[p+"conv1d.bias"] = []int{128}
				want[p+"norm.weight"] = []int{64}
				want[p+"out_proj.weight"] = []int{32, 64}
			} else {
				// I 8·6 = 48, conv_dim 48 + 2·2·8 = 80, 8 heads, biases.
				want[p+"in_proj.weight"] = []int{48 + 80 + 8, 32}
				want[p+"in_proj.bias"] = []int{136}
				want[p+"conv1d.weight"] = []int{80, 1, 4}
				want[p+"conv1d.bias"] = []int{80}
				want[p+"norm.weight"] = []int{48}
				want[p+"out_proj.weight"] = []int{32, 48}
				want[p+"out_proj.bias"] = []int{32}
			}
			want[p+"dt_bias"] = []int{8}
			want[p+"A_log"] = []int{8}
			want[p+"D"] = []int{8}
		case Attention:
			D := c.HeadDim
			want[p+"q_proj.weight"] = []int{4 * D, 32}
			want[p+"k_proj.weight"] = []int{c.KVHeads * D, 32}
			want[p+"v_proj.weight"] = []int{c.KVHeads * D, 32}
			want[p+"o_proj.weight"] = []int{32, 4 * D}
		case MLP:
			want[p+"up_proj.weight"] = []int{48, 32}
			want[p+"down_proj.weight"] = []int{32, 48}
		case MoE:
			in := 32
			if c.Latent > 0 {
				in = 16
				want[p+"fc1_latent_proj.weight"] = []int{16, 32}
				want[p+"fc2_latent_proj.weight"] = []int{32, 16}
			}
			want[p+"gate.weight"] = []int{8, 32}
			want[p+"gate.e_score_correction_bias"] = []int{8}
			for e := 0; e < 8; e++ {
				want[fmt.Sprintf("%sexperts.%d.up_proj.weight", p, e)] = []int{16, in}
				want[fmt.Sprintf("%sexperts.%d.down_proj.weight", p, e)] = []int{in, 16}
			}
			want[p+"shared_experts.up_proj.weight"] = []int{24, 32}
			want[p+"shared_experts.down_proj.weight"] = []int{32, 24}
		}
	}
	return want
}

// TestCheckpoint: the tiny checkpoints hold exactly the releases' tensor
// names with their shapes, all float32 (e_score_correction_bias included);
// config.json has exactly the expected NemotronHConfig fields, with
// hybrid_override_pattern or layers_block_type (new names) but not both;
// generation_config.json has bos 1, eos 2, pad 0.
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

		cfg := readJSON(t, filepath.Join(dir, "config.json"))
		var latent any
		if c.Latent > 0 {
			latent = float64(c.Latent)
		}
		wantCfg := map[string]any{
			"model_type": "nemotron_h", "vocab_size": 96.0, "hidden_size": 32.0,
			"num_hidden_layers": float64(len(c.Layers)), "num_attention_heads": 4.0,
			"num_key_value_heads": float64(c.KVHeads), "head_dim": float64(c.HeadDim),
			"attention_bias": false, "attention_dropout": 0.0, "max_position_embeddings": 256.0,
			"intermediate_size": float64(c.Intermediate), "mlp_hidden_act": "relu2", "mlp_bias": false,
			"mamba_num_heads": 8.0, "mamba_head_dim": float64(c.MambaHeadDim), "ssm_state_size": 8.0,
			"n_groups": float64(c.Groups), "conv_kernel": 4.0, "chunk_size": 4.0, "expand": 2.0,
			"use_conv_bias": true, "use_bias": c.UseBias, "mamba_hidden_act": "silu",
			"time_step_min": 0.001, "time_step_max": 0.1,
			"n_routed_experts": float64(c.Experts), "num_experts_per_tok": float64(c.TopK),
			"moe_intermediate_size":               float64(c.MoEIntermediate),
			"moe_shared_expert_intermediate_size": float64(c.SharedIntermediate), "n_shared_experts": 1.0,
			"moe_latent_size": latent, "routed_scaling_factor": c.RoutedScale,
			"n_group": float64(c.NGroup), "topk_group": float64(c.TopKGroup), "norm_topk_prob": c.NormTopK,
			"layer_norm_epsilon": c.Eps, "tie_word_embeddings": c.Tied, "use_cache": true,
			"bos_token_id": 1.0, "eos_token_id": 2.0, "pad_token_id": 0.0, "torch_dtype": "float32",
		}
		for key, want := range wantCfg {
			if v, ok := cfg[key]; !ok || v != want {
				t.Errorf("seed %d: config %s = %v (present %v), want %v", c.Seed, key, v, ok, want)
			}
		}
		if archs, _ := cfg["architectures"].([]any); len(archs) != 1 || archs[0] != "NemotronHForCausalLM" {
			t.Errorf("architectures %v", cfg["architectures"])
		}
		layersKey := "layers_block_type"
		if c.Pattern {
			layersKey = "hybrid_override_pattern"
		}
		for key := range cfg {
			if _, ok := wantCfg[key]; !ok && key != "architectures" && key != layersKey {
				t.Errorf("seed %d: config has %s = %v", c.Seed, key, cfg[key])
			}
		}
		gen := readJSON(t, filepath.Join(dir, "generation_config.json"))
		if !maps.Equal(gen, map[string]any{"bos_token_id": 1.0, "eos_token_id": 2.0, "pad_token_id": 0.0}) {
			t.Errorf("generation_config %v", gen)
		}
	}
	// The layers in both forms, as written out by hand.
	nano := TinyNano().ConfigJSON()
	if nano["hybrid_override_pattern"] != "ME*ME" {
		t.Errorf("TinyNano pattern %v", nano["hybrid_override_pattern"])
	}
	h := TinyH().ConfigJSON()
	if got := h["layers_block_type"]; !reflect.DeepEqual(got, []string{"linear_attention", "mlp", "linear_attention", "full_attention", "mlp", "linear_attention"}) {
		t.Errorf("TinyH layers_block_type %v", got)
	}
	flipped := TinyH()
	flipped.Pattern = true
	if got := flipped.ConfigJSON()["hybrid_override_pattern"]; got != "M-M*-M" {
		t.Errorf("TinyH as a pattern: %v", got)
	}
}

// TestWriteDeterministic: writing the same description twice gives the
// same bytes; another seed gives other weights.
func TestWriteDeterministic(t *testing.T) {
	for _, c := range flavours() {
		a, b := t.TempDir(), t.TempDir()
		if err := c.Write(a); err != nil {
			t.Fatal(err)
		}
		if err := c.Write(b); err != nil {
			t.Fatal(err)
		}
		for _, f := range []string{"config.json", "generation_config.json", "model.safetensors"} {
			x, err1 := os.ReadFile(filepath.Join(a, f))
			y, err2 := os.ReadFile(filepath.Join(b, f))
			if err1 != nil || err2 != nil {
				t.Fatal(err1, err2)
			}
			if !bytes.Equal(x, y) {
				t.Errorf("seed %d: %s differs between two writes", c.Seed, f)
			}
		}
		other := c
		other.Seed++
		d := t.TempDir()
		if err := other.Write(d); err != nil {
			t.Fatal(err)
		}
		x, _ := os.ReadFile(filepath.Join(a, "model.safetensors"))
		y, _ := os.ReadFile(filepath.Join(d, "model.safetensors"))
		if bytes.Equal(x, y) {
			t.Errorf("seed %d and %d write the same weights", c.Seed, other.Seed)
		}
	}
}

// TestConfigRoundTrip: FromConfig of the written config.json gives the
// description back (less the seed), in the pattern form and in the list
// form alike, and the model built from it computes the same logits.
func TestConfigRoundTrip(t *testing.T) {
	var cases []NemotronH
	for _, c := range flavours() {
		flipped := c
		flipped.Pattern = !c.Pattern
		cases = append(cases, c, flipped)
	}
	for _, c := range cases {
		dir, m := load(t, c)
		cfg := readJSON(t, filepath.Join(dir, "config.json"))
		_, hasPattern := cfg["hybrid_override_pattern"]
		_, hasList := cfg["layers_block_type"]
		if hasPattern != c.Pattern || hasList == c.Pattern {
			t.Errorf("seed %d, pattern %v: config has the pattern %v, the list %v", c.Seed, c.Pattern, hasPattern, hasList)
		}
		got, err := FromConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		want := c
		want.Seed = 0
		if !reflect.DeepEqual(got, want) {
			t.Errorf("config round trip:\n got %+v\nwant %+v", got, want)
			continue
		}
		m2, err := got.Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		if d := maxAbsDiff(m2.Logits(testTokens[:5]), m.Logits(testTokens[:5])); d != 0 {
			t.Errorf("seed %d: the config's model differs by %g", c.Seed, d)
		}
	}
}

// TestFromConfigForms: the older forms a release's config.json may hold —
// layers_block_type with the legacy names "mamba" and "attention",
// attention_head_dim, the mamba_-prefixed names — and an absent head_dim
// read as hidden/heads.
func TestFromConfigForms(t *testing.T) {
	cfg := map[string]any{
		"vocab_size": 96.0, "hidden_size": 32.0, "num_attention_heads": 4.0, "num_key_value_heads": 2.0,
		"attention_head_dim": 16.0, "layers_block_type": []any{"mamba", "attention", "mlp", "moe"},
		"mamba_n_groups": 2.0, "mamba_d_conv": 3.0, "mamba_conv_bias": false, "mamba_chunk_size": 8.0,
		"hybrid_override_pattern": "MMMM", "moe_latent_size": nil,
	}
	c, err := FromConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(c.Layers, []string{Mamba, Attention, MLP, MoE}) || c.Pattern {
		t.Errorf("layers %v (pattern %v): layers_block_type comes first", c.Layers, c.Pattern)
	}
	if c.HeadDim != 16 || c.Groups != 2 || c.ConvKernel != 3 || c.ConvBias || c.Chunk != 8 || c.Latent != 0 {
		t.Errorf("legacy names: %+v", c)
	}
	if c.TimeStepMin != 0.001 || c.Eps != 1e-5 || !c.NormTopK || c.NGroup != 1 || c.TopKGroup != 1 {
		t.Errorf("defaults: %+v", c)
	}
	delete(cfg, "layers_block_type")
	delete(cfg, "attention_head_dim")
	c, err = FromConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(c.Layers, []string{Mamba, Mamba, Mamba, Mamba}) || !c.Pattern || c.HeadDim != 8 {
		t.Errorf("pattern form: %v, pattern %v, head_dim %d", c.Layers, c.Pattern, c.HeadDim)
	}
	for _, bad := range []map[string]any{
		{"hybrid_override_pattern": "M*X"},
		{"layers_block_type": []any{"mamba", "hybrid"}},
		{"hidden_size": "32"},
	} {
		if _, err := FromConfig(bad); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
}

// nanoRelease is an excerpt of NVIDIA-Nemotron-3-Nano-30B-A3B's config.json
// (transformers 4.55 era): no moe_latent_size, no time_step_limit, fields
// NemotronH does not use (expand, rope_theta, partial_rotary_factor).
const nanoRelease = `{
  "architectures": ["NemotronHForCausalLM"], "model_type": "nemotron_h",
  "chunk_size": 128, "conv_kernel": 4, "expand": 2, "head_dim": 128, "hidden_size": 2688,
  "hybrid_override_pattern": "MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME",
  "intermediate_size": 1856, "layer_norm_epsilon": 1e-05, "mamba_head_dim": 64,
  "mamba_num_heads": 64, "moe_intermediate_size": 1856, "moe_shared_expert_intermediate_size": 3712,
  "n_group": 1, "n_groups": 8, "n_routed_experts": 128, "n_shared_experts": 1, "norm_topk_prob": true,
  "num_attention_heads": 32, "num_experts_per_tok": 6, "num_hidden_layers": 52, "num_key_value_heads": 2,
  "partial_rotary_factor": 1.0, "rope_theta": 10000, "routed_scaling_factor": 2.5,
  "ssm_state_size": 128, "tie_word_embeddings": false, "time_step_min": 0.001, "topk_group": 1,
  "use_bias": false, "use_conv_bias": true, "vocab_size": 131072
}`

// TestFromConfigRelease: the Nano release's config reads as 52 layers (23
// Mamba, 23 MoE, 6 attention), a Mamba intermediate of 64·64 = 4096 (not
// expand·hidden = 5376), 128 experts in one group, no latent.
func TestFromConfigRelease(t *testing.T) {
	var cfg map[string]any
	if err := json.Unmarshal([]byte(nanoRelease), &cfg); err != nil {
		t.Fatal(err)
	}
	c, err := FromConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	for _, typ := range c.Layers {
		count[typ]++
	}
	if len(c.Layers) != 52 || count[Mamba] != 23 || count[MoE] != 23 || count[Attention] != 6 || !c.Pattern {
		t.Errorf("layers %v", count)
	}
	if c.MambaInner() != 4096 || c.ConvDim() != 4096+2*8*128 || c.HeadDim != 128 || c.KVHeads != 2 ||
		c.Experts != 128 || c.TopK != 6 || c.NGroup != 1 || c.Latent != 0 || c.RoutedScale != 2.5 || c.Eps != 1e-5 {
		t.Errorf("%+v", c)
	}
	if err := c.check(); err != nil {
		t.Error(err)
	}
}

// TestRoundTrip: Load returns exactly the float32 values Write drew, and
// refuses checkpoints that lack a tensor the description needs.
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
	}
	for _, tc := range []struct {
		what   string
		c      func() NemotronH
		from   uint64
		expect string
	}{
		{"tied checkpoint untied", func() NemotronH { c := tinyTied(); c.Tied = false; return c }, tinyTied().Seed, "lm_head"},
		{"without projection biases", func() NemotronH { c := TinyNano(); c.UseBias = true; return c }, TinyNano().Seed, "in_proj.bias"},
		{"without a latent", func() NemotronH { c := TinyNano(); c.Latent = 16; return c }, TinyNano().Seed, "fc1_latent_proj"},
		{"mlp as moe", func() NemotronH {
			c := TinyH()
			c.Layers = slices.Clone(c.Layers)
			c.Layers[1] = MoE
			c.Experts, c.TopK, c.MoEIntermediate, c.SharedIntermediate, c.NGroup, c.TopKGroup = 8, 2, 16, 24, 1, 1
			return c
		}, TinyH().Seed, "backbone.layers.1.mixer.gate"},
		{"I as expand·hidden", func() NemotronH { c := TinyH(); c.MambaHeadDim = 8; return c }, TinyH().Seed, "in_proj"},
	} {
		if _, err := tc.c().Load(dirs[tc.from]); err == nil || !strings.Contains(err.Error(), tc.expect) {
			t.Errorf("%s: %v, want an error naming %s", tc.what, err, tc.expect)
		}
	}
}

// TestTinyParameters pins the tiny models' descriptions.
func TestTinyParameters(t *testing.T) {
	n, h, l := TinyNano(), TinyH(), TinyLatent()
	if n.PatternString() != "ME*ME" || !n.Pattern || n.Tied || n.MambaInner() != 64 || n.Groups != 4 ||
		n.MambaInner()/n.Groups != 16 || n.NGroup != 2 || n.TopKGroup != 1 || n.TopK != 3 || n.RoutedScale != 2.5 ||
		!n.NormTopK || n.Latent != 0 || n.UseBias || !n.ConvBias || n.Has(MLP) {
		t.Errorf("TinyNano %+v", n)
	}
	// A Mamba layer after the attention one.
	if a := slices.Index(n.Layers, Attention); slices.Index(n.Layers[a:], Mamba) < 0 {
		t.Errorf("TinyNano has no Mamba layer after its attention: %v", n.Layers)
	}
	if h.PatternString() != "M-M*-M" || h.Pattern || h.Tied || h.MambaInner() != 48 || h.MambaInner() == 2*h.Hidden ||
		h.Groups != 2 || !h.UseBias || h.Intermediate != 48 || h.HeadDim*h.Heads == h.Hidden || h.Has(MoE) {
		t.Errorf("TinyH %+v", h)
	}
	if l.Latent != 16 || l.ExpertIn() != 16 || l.PatternString() != n.PatternString() {
		t.Errorf("TinyLatent %+v", l)
	}
	for _, c := range flavours() {
		if err := c.check(); err != nil {
			t.Error(err)
		}
	}
	for _, bad := range []func(*NemotronH){
		func(c *NemotronH) { c.Groups = 3 },
		func(c *NemotronH) { c.NGroup = 3 },
		func(c *NemotronH) { c.NGroup = 8 },
		func(c *NemotronH) { c.TopKGroup = 3 },
		func(c *NemotronH) { c.TopK = 5 },
		func(c *NemotronH) { c.KVHeads = 3 },
		func(c *NemotronH) { c.Layers = []string{Mamba, "hybrid"} },
	} {
		c := TinyNano()
		bad(&c)
		if c.check() == nil {
			t.Errorf("%+v accepted", c)
		}
	}
}

// ----------------------------------------------------------------------------
// Activations and the Mamba-2 mixer's readings

// TestActivations: relu2 is relu(x)²; sigmoid is 1/(1+exp(-x)).
func TestActivations(t *testing.T) {
	nearAll(t, "relu2", []float64{ReLU2(-2), ReLU2(0), ReLU2(0.5), ReLU2(3)}, []float64{0, 0, 0.25, 9}, 0)
	nearAll(t, "sigmoid", []float64{Sigmoid(0), Sigmoid(2)}, []float64{0.5, 1 / (1 + math.Exp(-2))}, 1e-16)
}

// TestDecayRange: on every mixer of the tiny models the per-token decays
// exp(dt·A) reach below 0.5 and above 0.95, softplus(dt + dt_bias) spans
// small and moderate steps (within the spread on which mamba2ref's tests
// check the recurrence against the chunked SSD form), and it stays above
// 4·time_step_min, so the clamp never binds (and readings with and without
// it agree).
func TestDecayRange(t *testing.T) {
	for _, c := range []NemotronH{TinyNano(), TinyH(), TinyLatent()} {
		_, m := load(t, c)
		for l, typ := range c.Layers {
			if typ != Mamba {
				continue
			}
			in := m.Mixer(l).Inputs(blockInput(m, l, testTokens))
			lo, hi, dlo, dhi := 1.0, 0.0, math.Inf(1), 0.0
			for t := range in.Dt {
				for h, dt := range in.Dt[t] {
					d := math.Exp(dt * in.A[h])
					lo, hi = math.Min(lo, d), math.Max(hi, d)
					dlo, dhi = math.Min(dlo, dt), math.Max(dhi, dt)
				}
			}
			t.Logf("seed %d, layer %d: decay in [%.3f, %.4f], dt in [%.4f, %.3f]", c.Seed, l, lo, hi, dlo, dhi)
			if lo > 0.5 || hi < 0.95 || dlo > 0.05 || dhi < 0.3 || dlo < 4*c.TimeStepMin {
				t.Errorf("seed %d, layer %d: decay in [%g, %g], dt in [%g, %g]", c.Seed, l, lo, hi, dlo, dhi)
			}
		}
	}
}

// TestMixerReadings: NemotronH's mixer takes the gated norm's mean per
// group (4 groups in TinyNano) and clamps dt at time_step_min, with the
// biases the config names; NormWhole takes one group and NormBeforeGate
// passes through. (mamba2ref's tests work the norm out by hand.)
func TestMixerReadings(t *testing.T) {
	_, m := load(t, TinyNano())
	if mx := m.Mixer(0); mx.DtMin != 0.001 || mx.NormGroups != 4 || mx.Groups != 4 || mx.NormBeforeGate || mx.Eps != m.C.Eps ||
		mx.InBias != nil || mx.ConvBias == nil || mx.OutBias != nil || mx.DtBias == nil || mx.D == nil {
		t.Errorf("mixer: DtMin %g, %d norm groups of %d groups, NormBeforeGate %v, eps %g, biases %v %v %v %v, D %v",
			mx.DtMin, mx.NormGroups, mx.Groups, mx.NormBeforeGate, mx.Eps, mx.InBias != nil, mx.ConvBias != nil, mx.OutBias != nil, mx.DtBias != nil, mx.D != nil)
	}
	mk := &Model{C: m.C, W: m.W, Mistakes: Mistakes{NormWhole: true, NormBeforeGate: true}}
	if mx := mk.Mixer(0); mx.NormGroups != 1 || !mx.NormBeforeGate {
		t.Errorf("with the mistakes: %d norm groups, NormBeforeGate %v", mx.NormGroups, mx.NormBeforeGate)
	}
}

// TestSplitOrder: the mixer's tensors by their names under mixer., on the
// identity in_proj with a bias of 0.5 on a one-token input (hidden 1, I 4,
// conv_dim 6, 2 heads): the gate is the first I entries plus the bias, dt
// the last heads entries through softplus with dt_bias, clamped from below
// at time_step_min (or not with a time_step_min of 0); NoD zeroes D.
func TestSplitOrder(t *testing.T) {
	c := NemotronH{Hidden: 1, MambaHeads: 2, MambaHeadDim: 2, Groups: 1, State: 1, ConvKernel: 1, UseBias: true, TimeStepMin: 0.001}
	inW, inB := make([]float64, 12), make([]float64, 12)
	for i := range inW {
		inW[i] = float64(i + 1)
		inB[i] = 0.5
	}
	w := map[string][]float64{
		"backbone.layers.0.mixer.in_proj.weight":  inW,
		"backbone.layers.0.mixer.in_proj.bias":    inB,
		"backbone.layers.0.mixer.conv1d.weight":   {1, 1, 1, 1, 1, 1},
		"backbone.layers.0.mixer.dt_bias":         {-10, -20},
		"backbone.layers.0.mixer.A_log":           {0, math.Log(2)},
		"backbone.layers.0.mixer.D":               {0.5, 0.25},
		"backbone.layers.0.mixer.norm.weight":     {1, 1, 1, 1},
		"backbone.layers.0.mixer.out_proj.weight": {1, 1, 1, 1},
		"backbone.layers.0.mixer.out_proj.bias":   {0},
	}
	h := [][]float64{{1}}
	m := &Model{C: c, W: w}
	in := m.Mixer(0).Inputs(h)
	nearAll(t, "gate", in.Gate[0], []float64{1.5, 2.5, 3.5, 4.5}, 0)
	// softplus(11.5 - 10) = 1.70; softplus(12.5 - 20) = 5.5e-4, clamped.
	nearAll(t, "dt", in.Dt[0], []float64{mamba2ref.Softplus(1.5), 0.001}, 1e-15)
	nearAll(t, "A, D", append(slices.Clone(in.A), in.D...), []float64{-1, -2, 0.5, 0.25}, 1e-15)
	m.C.TimeStepMin = 0
	nearAll(t, "dt unclamped", m.Mixer(0).Inputs(h).Dt[0], []float64{mamba2ref.Softplus(1.5), mamba2ref.Softplus(-7.5)}, 1e-15)
	m.Mistakes = Mistakes{NoD: true}
	nearAll(t, "no D", m.Mixer(0).Inputs(h).D, []float64{0, 0}, 0)
}

// ----------------------------------------------------------------------------
// Attention, MLP, routing

// TestAttentionHasNoPosition: without a positional embedding the attention
// is blind to the order of the earlier tokens: swapping the first two
// inputs leaves the third position's output unchanged (to rounding) and
// changes the second's.
func TestAttentionHasNoPosition(t *testing.T) {
	for _, c := range []NemotronH{TinyNano(), TinyH()} {
		_, m := load(t, c)
		l := slices.Index(c.Layers, Attention)
		h := blockInput(m, l, testTokens[:3])
		sw := [][]float64{h[1], h[0], h[2]}
		a, b := m.Attention(l, h), m.Attention(l, sw)
		if d := maxAbsDiff(a[2:], b[2:]); d > 1e-12 {
			t.Errorf("seed %d: swapping the first two tokens moves position 2 by %g", c.Seed, d)
		}
		if d := maxAbsDiff(a[1:2], b[1:2]); d < 1e-4 {
			t.Errorf("seed %d: swapping the first two tokens moves position 1 by %g only", c.Seed, d)
		}
	}
}

// TestMLPHandWorked: hidden 2, width 2: down(relu2(up·h)) with one negative
// pre-activation (relu2 gives 0); SiLUMLP uses silu instead.
func TestMLPHandWorked(t *testing.T) {
	w := map[string][]float64{
		"backbone.layers.0.mixer.up_proj.weight":   {1, 1, 1, -1},
		"backbone.layers.0.mixer.down_proj.weight": {1, 2, -1, 0.5},
	}
	m := &Model{C: NemotronH{Hidden: 2, Intermediate: 2}, W: w}
	h := []float64{0.5, 1.5} // up·h = (2, -1)
	nearAll(t, "relu2", m.MLP(0, h), []float64{4, -4}, 1e-15)
	m.Mistakes = Mistakes{SiLUMLP: true}
	s0, s1 := lmckpt.SiLU64(2), lmckpt.SiLU64(-1)
	nearAll(t, "silu", m.MLP(0, h), []float64{s0 + 2*s1, -s0 + 0.5*s1}, 1e-15)
}

// The hand-worked router: 8 experts in 2 groups of 4, top 3 from 1 group,
// routed_scaling_factor 2.5, norm_topk_prob. The logits give scores of
// about (0.90, 0.20, 0.31, 0.40 | 0.80, 0.70, 0.60, 0.10): group 0 scores
// 0.90+0.40 = 1.30, group 1 0.80+0.70 = 1.50.
var (
	routeLogits = []float64{2.2, -1.4, -0.8, -0.4, 1.4, 0.85, 0.4, -2.2}
	routeConfig = NemotronH{Experts: 8, TopK: 3, NGroup: 2, TopKGroup: 1, RoutedScale: 2.5, NormTopK: true}
)

// TestRouteHandWorked: the group limit, the correction bias, the
// normalization and the scale, each by hand, and each Mistake.
func TestRouteHandWorked(t *testing.T) {
	s := make([]float64, 8)
	for e, v := range routeLogits {
		s[e] = Sigmoid(v)
	}
	route := func(c NemotronH, mk Mistakes, bias []float64) ([]int, []float64) {
		return (&Model{C: c, Mistakes: mk}).Route(routeLogits, bias)
	}
	check := func(what string, c NemotronH, mk Mistakes, bias []float64, ids []int, weights []float64) {
		t.Helper()
		gotIDs, gotW := route(c, mk, bias)
		if !slices.Equal(gotIDs, ids) {
			t.Fatalf("%s: experts %v, want %v", what, gotIDs, ids)
		}
		nearAll(t, what, gotW, weights, 1e-14)
	}
	zero := make([]float64, 8)
	norm := func(scale float64, v ...float64) []float64 {
		sum := 0.0
		for _, x := range v {
			sum += x
		}
		out := make([]float64, len(v))
		for i, x := range v {
			out[i] = x / (sum + 1e-20) * scale
		}
		return out
	}
	// No bias: group 1 wins although expert 0 scores highest.
	check("group limit", routeConfig, Mistakes{}, zero, []int{4, 5, 6}, norm(2.5, s[4], s[5], s[6]))
	check("no group limit", routeConfig, Mistakes{NoGroupLimit: true}, zero, []int{0, 4, 5}, norm(2.5, s[0], s[4], s[5]))
	one := routeConfig
	one.NGroup = 1
	check("one group", one, Mistakes{}, zero, []int{0, 4, 5}, norm(2.5, s[0], s[4], s[5]))

	// Expert 3's bias of 0.45 lifts group 0 to 0.90 + 0.85 = 1.75: the
	// choice (0, 3, 2) by the biased scores, weighed by the unbiased ones.
	bias := []float64{0, 0, 0, 0.45, 0, 0, 0, 0}
	check("correction bias", routeConfig, Mistakes{}, bias, []int{0, 3, 2}, norm(2.5, s[0], s[3], s[2]))
	check("no correction bias", routeConfig, Mistakes{NoCorrectionBias: true}, bias, []int{4, 5, 6}, norm(2.5, s[4], s[5], s[6]))
	check("biased weights", routeConfig, Mistakes{BiasedWeights: true}, bias, []int{0, 3, 2}, norm(2.5, s[0], s[3]+0.45, s[2]))
	check("no routed scale", routeConfig, Mistakes{NoRoutedScale: true}, bias, []int{0, 3, 2}, norm(1, s[0], s[3], s[2]))
	raw := routeConfig
	raw.NormTopK = false
	check("norm_topk_prob false", raw, Mistakes{}, bias, []int{0, 3, 2}, []float64{2.5 * s[0], 2.5 * s[3], 2.5 * s[2]})

	// The experts outside the kept group are -inf, not 0: experts 1 and 2
	// of the kept group 0, with negative choices, still come before them.
	neg := []float64{0, -0.5, -0.45, 0.45, 0, 0, 0, 0}
	check("negative choices", routeConfig, Mistakes{}, neg, []int{0, 3, 2}, norm(2.5, s[0], s[3], s[2]))
}

// TestMoEHandWorked: hidden 2, 4 experts of width 1 in one group, top 2,
// routed_scaling_factor 2, norm_topk_prob, a shared expert of width 1, the
// router the identity on the first two experts: h = (0.5, 1.5) gives
// logits (0.5, 1.5, 0, -2) and picks experts 1 and 0. Expert 0's
// pre-activation is negative (relu2 gives 0, silu does not); the shared
// expert adds (3, 1). With moe_latent_size 1 the experts read
// fc1_latent_proj·h and their sum goes through fc2_latent_proj.
func TestMoEHandWorked(t *testing.T) {
	p := "backbone.layers.0.mixer."
	w := map[string][]float64{
		p + "gate.weight":                     {1, 0, 0, 1, 0, 0, -1, -1},
		p + "gate.e_score_correction_bias":    {0, 0, 0, 0},
		p + "experts.0.up_proj.weight":        {1, -1},
		p + "experts.0.down_proj.weight":      {1, 1},
		p + "experts.1.up_proj.weight":        {1, 1},
		p + "experts.1.down_proj.weight":      {0.5, -1},
		p + "experts.2.up_proj.weight":        {1, 1},
		p + "experts.2.down_proj.weight":      {9, 9},
		p + "experts.3.up_proj.weight":        {1, 1},
		p + "experts.3.down_proj.weight":      {9, 9},
		p + "shared_experts.up_proj.weight":   {0.2, 0.6},
		p + "shared_experts.down_proj.weight": {3, 1},
	}
	c := NemotronH{Hidden: 2, Experts: 4, TopK: 2, NGroup: 1, TopKGroup: 1, MoEIntermediate: 1, SharedIntermediate: 1, RoutedScale: 2, NormTopK: true}
	m := &Model{C: c, W: w}
	h := []float64{0.5, 1.5}
	s0, s1 := Sigmoid(0.5), Sigmoid(1.5)
	w0, w1 := 2*s0/(s0+s1+1e-20), 2*s1/(s0+s1+1e-20)
	ids, ws := m.Experts(0, h)
	if !slices.Equal(ids, []int{1, 0}) {
		t.Fatalf("experts %v", ids)
	}
	nearAll(t, "weights", ws, []float64{w1, w0}, 1e-15)
	// expert 1: relu2(0.5+1.5) = 4 → (2, -4); expert 0: relu2(-1) = 0.
	nearAll(t, "moe", m.MoE(0, h), []float64{2*w1 + 3, -4*w1 + 1}, 1e-14)
	m.Mistakes = Mistakes{NoSharedExpert: true}
	nearAll(t, "no shared expert", m.MoE(0, h), []float64{2 * w1, -4 * w1}, 1e-14)
	m.Mistakes = Mistakes{GatedExperts: true}
	e1, e0 := lmckpt.SiLU64(2), lmckpt.SiLU64(-1)
	nearAll(t, "silu experts", m.MoE(0, h), []float64{w1*0.5*e1 + w0*e0 + 3, -w1*e1 + w0*e0 + 1}, 1e-14)

	lat := c
	lat.Latent = 1
	wl := maps.Clone(w)
	wl[p+"fc1_latent_proj.weight"] = []float64{1, 1} // v = 2
	wl[p+"fc2_latent_proj.weight"] = []float64{1, -2}
	wl[p+"experts.0.up_proj.weight"] = []float64{-1} // relu2(-2) = 0
	wl[p+"experts.0.down_proj.weight"] = []float64{5}
	wl[p+"experts.1.up_proj.weight"] = []float64{0.5} // relu2(1) = 1
	wl[p+"experts.1.down_proj.weight"] = []float64{3}
	ml := &Model{C: lat, W: wl}
	nearAll(t, "latent", ml.MoE(0, h), []float64{3*w1 + 3, -6*w1 + 1}, 1e-14)
}

// TestRoutingOnTinyModels: on the tiny Nano's real activations (both MoE
// layers) the tokens reach several expert sets, every biased choice is
// positive (so filling the dropped groups with -inf or 0 agrees), and both
// the correction bias and the group limit change the chosen set of some
// tokens.
func TestRoutingOnTinyModels(t *testing.T) {
	for _, c := range []NemotronH{TinyNano(), TinyLatent()} {
		_, m := load(t, c)
		for l, typ := range c.Layers {
			if typ != MoE {
				continue
			}
			p := mixer(l)
			sets := map[string]bool{}
			byBias, byGroup := 0, 0
			key := func(ids []int) string { return fmt.Sprint(slices.Sorted(slices.Values(ids))) }
			for _, h := range blockInput(m, l, testTokens) {
				logits := lmckpt.Linear64(h, m.W[p+"gate.weight"], nil)
				bias := m.W[p+"gate.e_score_correction_bias"]
				for e, v := range logits {
					if Sigmoid(v)+bias[e] <= 0 {
						t.Errorf("seed %d, layer %d: expert %d's choice %g", c.Seed, l, e, Sigmoid(v)+bias[e])
					}
				}
				ids, _ := m.Route(logits, bias)
				sets[key(ids)] = true
				raw, _ := (&Model{C: c, Mistakes: Mistakes{NoCorrectionBias: true}}).Route(logits, bias)
				all, _ := (&Model{C: c, Mistakes: Mistakes{NoGroupLimit: true}}).Route(logits, bias)
				if key(raw) != key(ids) {
					byBias++
				}
				if key(all) != key(ids) {
					byGroup++
				}
			}
			t.Logf("seed %d, layer %d: %d expert sets; the bias changes %d tokens' choice, the group limit %d", c.Seed, l, len(sets), byBias, byGroup)
			if len(sets) < 3 || byBias == 0 || byGroup == 0 {
				t.Errorf("seed %d, layer %d: %d expert sets, the bias changes %d tokens, the group limit %d", c.Seed, l, len(sets), byBias, byGroup)
			}
		}
	}
}

// ----------------------------------------------------------------------------
// The whole model

// TestCausal: the logits of a prefix are exactly the first rows of the
// whole sequence's; other tokens after position 5 leave rows 0…5 exactly
// as they were and change the later ones; every row is finite and not
// constant.
func TestCausal(t *testing.T) {
	for _, c := range flavours() {
		_, m := load(t, c)
		refcheck.Causal(t, fmt.Sprintf("seed %d", c.Seed), m.Logits, testTokens, c.Vocab, []int{1, 4, 5, 9}, 0.05)
	}
}

// TestTiedHead: with tied embeddings the logits are the final hidden
// state (norm_f applied) times the embeddings.
func TestTiedHead(t *testing.T) {
	_, m := load(t, tinyTied())
	x := m.Hidden(testTokens[:3], len(m.C.Layers))
	want := lmckpt.Linear64(lmckpt.RMSNorm64(x[2], m.W["backbone.norm_f.weight"], m.C.Eps), m.W["backbone.embeddings.weight"], nil)
	nearAll(t, "tied head", m.Logits(testTokens[:3])[2], want, 0)
}

// TestMemory: another first token moves the first mixer's output at the
// last of 12 positions, 11 tokens later, by more than 1e-4: beyond the
// conv's reach of 4 tokens only the state carries it.
func TestMemory(t *testing.T) {
	for _, c := range []NemotronH{TinyNano(), TinyH()} {
		_, m := load(t, c)
		other := slices.Clone(testTokens)
		other[0] = 50
		a := m.Mamba(0, blockInput(m, 0, testTokens))
		b := m.Mamba(0, blockInput(m, 0, other))
		last := len(testTokens) - 1
		if d := maxAbsDiff(a[last:], b[last:]); d < 1e-4 {
			t.Errorf("seed %d: the first token moves the mixer's output at position %d by %g only", c.Seed, last, d)
		} else {
			t.Logf("seed %d: the first token moves the mixer's output at position %d by %.3g", c.Seed, last, d)
		}
	}
}

// TestMistakesMatter: every Mistake that applies to a tiny model moves the
// last position's logits by more than 1e-3, and one that does not apply
// (the MoE's mistakes without MoE layers, SiLUMLP without MLP layers) moves
// nothing at all.
func TestMistakesMatter(t *testing.T) {
	for _, c := range flavours() {
		_, m := load(t, c)
		want := m.Logits(testTokens)
		last := len(testTokens) - 1
		mamba, moe := c.Has(Mamba), c.Has(MoE)
		for _, tc := range []struct {
			name    string
			mk      Mistakes
			applies bool
		}{
			{"NormWhole", Mistakes{NormWhole: true}, mamba && c.Groups > 1},
			{"NormBeforeGate", Mistakes{NormBeforeGate: true}, mamba},
			{"NoD", Mistakes{NoD: true}, mamba},
			{"GatedExperts", Mistakes{GatedExperts: true}, moe},
			{"NoCorrectionBias", Mistakes{NoCorrectionBias: true}, moe},
			{"BiasedWeights", Mistakes{BiasedWeights: true}, moe},
			{"NoGroupLimit", Mistakes{NoGroupLimit: true}, moe && c.NGroup > 1 && c.TopKGroup < c.NGroup},
			{"NoRoutedScale", Mistakes{NoRoutedScale: true}, moe && c.RoutedScale != 1},
			{"SiLUMLP", Mistakes{SiLUMLP: true}, c.Has(MLP)},
			{"NoSharedExpert", Mistakes{NoSharedExpert: true}, moe},
		} {
			got := (&Model{C: c, W: m.W, Mistakes: tc.mk}).Logits(testTokens)
			d := maxAbsDiff(got[last:], want[last:])
			switch {
			case tc.applies && d <= 1e-3:
				t.Errorf("seed %d: %s moves the last logits by %g only", c.Seed, tc.name, d)
			case !tc.applies && maxAbsDiff(got, want) != 0:
				t.Errorf("seed %d: %s should not apply but moves the logits by %g", c.Seed, tc.name, maxAbsDiff(got, want))
			case tc.applies:
				t.Logf("seed %d: %s moves the last logits by %.3g", c.Seed, tc.name, d)
			}
		}
	}
}
