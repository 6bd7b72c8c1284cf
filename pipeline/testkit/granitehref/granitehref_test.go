package granitehref

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

func flavours() []Hybrid { return []Hybrid{TinyHybrid(), TinyHybridDense(), TinyMicro()} }

// load writes c's checkpoint into a temporary directory and reads it back.
func load(t *testing.T, c Hybrid) (string, *Model) {
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

func hasType(c Hybrid, typ string) bool { return slices.Contains(c.layerTypes(), typ) }

// firstMamba is the index of c's first mamba layer, -1 if none.
func firstMamba(c Hybrid) int { return slices.Index(c.layerTypes(), "mamba") }

// ----------------------------------------------------------------------------
// Checkpoint and config

// wantTensors lists the names and shapes of the tiny checkpoints, written
// out by hand independently of Tensors.
func wantTensors(c Hybrid) map[string][]int {
	want := map[string][]int{"model.embed_tokens.weight": {96, 32}, "model.norm.weight": {32}}
	if !c.Tied {
		want["lm_head.weight"] = []int{96, 32}
	}
	for l, typ := range c.LayerTypes {
		p := "model.layers." + string(rune('0'+l)) + "."
		want[p+"input_layernorm.weight"] = []int{32}
		want[p+"post_attention_layernorm.weight"] = []int{32}
		want[p+"shared_mlp.input_linear.weight"] = []int{2 * c.SharedIntermediate, 32}
		want[p+"shared_mlp.output_linear.weight"] = []int{32, c.SharedIntermediate}
		if c.Experts > 0 {
			want[p+"block_sparse_moe.router.layer.weight"] = []int{4, 32}
			want[p+"block_sparse_moe.input_linear.weight"] = []int{4, 32, 32}
			want[p+"block_sparse_moe.output_linear.weight"] = []int{4, 32, 16}
		}
		if typ == "attention" {
			want[p+"self_attn.q_proj.weight"] = []int{32, 32}
			want[p+"self_attn.k_proj.weight"] = []int{8 * c.KVHeads, 32}
			want[p+"self_attn.v_proj.weight"] = []int{8 * c.KVHeads, 32}
			want[p+"self_attn.o_proj.weight"] = []int{32, 32}
			continue
		}
		// intermediate 64; conv_dim 64 + 2·G·N: 96 for (1, 16), 96 for (2, 8).
		want[p+"mamba.in_proj.weight"] = []int{64 + 96 + 8, 32}
		want[p+"mamba.conv1d.weight"] = []int{96, 1, 4}
		want[p+"mamba.conv1d.bias"] = []int{96}
		want[p+"mamba.dt_bias"] = []int{8}
		want[p+"mamba.A_log"] = []int{8}
		want[p+"mamba.D"] = []int{8}
		want[p+"mamba.norm.weight"] = []int{64}
		want[p+"mamba.out_proj.weight"] = []int{32, 64}
		if c.ProjBias {
			want[p+"mamba.in_proj.bias"] = []int{168}
			want[p+"mamba.out_proj.bias"] = []int{32}
		}
	}
	return want
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

// TestCheckpoint: the tiny checkpoints hold exactly the releases' tensor
// names with their shapes in float32; config.json has exactly
// GraniteMoeHybridConfig's fields with the description's values;
// generation_config.json has bos, eos and pad 0.
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
		pos, dHead := "nope", any(float64(c.MambaHeadDim))
		if c.Rope {
			pos = "rope"
		}
		if c.MambaHeadDim == 0 {
			dHead = "auto"
		}
		wantCfg := map[string]any{
			"model_type": "granitemoehybrid", "vocab_size": 96.0, "hidden_size": 32.0,
			"intermediate_size": 16.0, "num_hidden_layers": float64(c.Layers),
			"num_attention_heads": 4.0, "num_key_value_heads": float64(c.KVHeads), "hidden_act": "silu",
			"max_position_embeddings": 256.0, "rms_norm_eps": c.Eps, "rope_theta": 10000.0, "rope_scaling": nil,
			"tie_word_embeddings": c.Tied, "attention_bias": false, "attention_dropout": 0.0,
			"embedding_multiplier": c.EmbeddingMultiplier, "logits_scaling": c.LogitsScaling,
			"residual_multiplier": c.ResidualMultiplier, "attention_multiplier": c.AttentionMultiplier,
			"num_local_experts": float64(c.Experts), "num_experts_per_tok": float64(c.TopK),
			"output_router_logits": false, "router_aux_loss_coef": 0.0,
			"shared_intermediate_size": float64(c.SharedIntermediate), "position_embedding_type": pos,
			"mamba_n_heads": 8.0, "mamba_n_groups": float64(c.MambaGroups), "mamba_d_state": float64(c.MambaState),
			"mamba_d_head": dHead, "mamba_d_conv": 4.0, "mamba_expand": 2.0, "mamba_chunk_size": 4.0,
			"mamba_conv_bias": c.ConvBias, "mamba_proj_bias": c.ProjBias,
			"initializer_range": 0.02, "use_cache": true,
			"bos_token_id": 0.0, "eos_token_id": 0.0, "pad_token_id": 0.0, "torch_dtype": "float32",
		}
		for key, want := range wantCfg {
			if v, ok := cfg[key]; !ok || v != want {
				t.Errorf("seed %d: config %s = %v (present %v), want %v", c.Seed, key, v, ok, want)
			}
		}
		if archs, _ := cfg["architectures"].([]any); len(archs) != 1 || archs[0] != "GraniteMoeHybridForCausalLM" {
			t.Errorf("architectures %v", cfg["architectures"])
		}
		var types []string
		for _, v := range cfg["layer_types"].([]any) {
			types = append(types, v.(string))
		}
		if !slices.Equal(types, c.LayerTypes) {
			t.Errorf("seed %d: layer_types %v, want %v", c.Seed, types, c.LayerTypes)
		}
		for key := range cfg {
			if _, ok := wantCfg[key]; !ok && key != "architectures" && key != "layer_types" {
				t.Errorf("seed %d: config has %s = %v", c.Seed, key, cfg[key])
			}
		}
		gen := readJSON(t, filepath.Join(dir, "generation_config.json"))
		if !maps.Equal(gen, map[string]any{"bos_token_id": 0.0, "eos_token_id": 0.0, "pad_token_id": 0.0}) {
			t.Errorf("generation_config %v", gen)
		}
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

// fromConfig reads a config.json the way GraniteMoeHybridConfig does:
// mamba_d_head "auto" is 0 here, position_embedding_type "rope" is Rope,
// absent layer_types all "mamba".
func fromConfig(t *testing.T, cfg map[string]any) Hybrid {
	t.Helper()
	num := func(k string) int {
		v, ok := cfg[k].(float64)
		if !ok {
			t.Fatalf("config %s = %v", k, cfg[k])
		}
		return int(v)
	}
	f := func(k string) float64 { return cfg[k].(float64) }
	c := Hybrid{
		Vocab: num("vocab_size"), Hidden: num("hidden_size"), Intermediate: num("intermediate_size"),
		Layers: num("num_hidden_layers"), Heads: num("num_attention_heads"), KVHeads: num("num_key_value_heads"),
		Experts: num("num_local_experts"), TopK: num("num_experts_per_tok"),
		SharedIntermediate: num("shared_intermediate_size"),
		MambaHeads:         num("mamba_n_heads"), MambaState: num("mamba_d_state"), MambaGroups: num("mamba_n_groups"),
		MambaConv: num("mamba_d_conv"), MambaExpand: num("mamba_expand"), MambaChunk: num("mamba_chunk_size"),
		ConvBias: cfg["mamba_conv_bias"].(bool), ProjBias: cfg["mamba_proj_bias"].(bool),
		Rope:                cfg["position_embedding_type"] == "rope",
		EmbeddingMultiplier: f("embedding_multiplier"), AttentionMultiplier: f("attention_multiplier"),
		ResidualMultiplier: f("residual_multiplier"), LogitsScaling: f("logits_scaling"),
		Theta: f("rope_theta"), Eps: f("rms_norm_eps"), Tied: cfg["tie_word_embeddings"].(bool),
	}
	if d := cfg["mamba_d_head"]; d != "auto" {
		c.MambaHeadDim = num("mamba_d_head")
	}
	if lt, ok := cfg["layer_types"].([]any); ok {
		for _, v := range lt {
			c.LayerTypes = append(c.LayerTypes, v.(string))
		}
	}
	return c
}

// TestConfigRoundTrip: reading config.json back gives the description
// (less the seed), and the model built from it computes the same logits.
func TestConfigRoundTrip(t *testing.T) {
	for _, c := range flavours() {
		dir, m := load(t, c)
		got := fromConfig(t, readJSON(t, filepath.Join(dir, "config.json")))
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
		c      func() Hybrid
		from   uint64
		expect string
	}{
		{"tied checkpoint untied", func() Hybrid { c := TinyHybrid(); c.Tied = false; return c }, TinyHybrid().Seed, "lm_head"},
		{"without projection biases", func() Hybrid { c := TinyHybrid(); c.ProjBias = true; return c }, TinyHybrid().Seed, "in_proj.bias"},
		{"dense as MoE", func() Hybrid { c := TinyHybridDense(); c.Experts, c.TopK = 4, 2; return c }, TinyHybridDense().Seed, "router"},
		{"attention layer as mamba", func() Hybrid { c := TinyHybrid(); c.LayerTypes = nil; return c }, TinyHybrid().Seed, "model.layers.1.mamba"},
	} {
		if _, err := tc.c().Load(dirs[tc.from]); err == nil || !strings.Contains(err.Error(), tc.expect) {
			t.Errorf("%s: %v, want an error naming %s", tc.what, err, tc.expect)
		}
	}
}

// TestTinyParameters pins the tiny models' descriptions.
func TestTinyParameters(t *testing.T) {
	h, d, m := TinyHybrid(), TinyHybridDense(), TinyMicro()
	if !h.MoE() || h.Rope || !h.Tied || h.MambaP() != 8 || h.MambaGroups != 1 || h.ProjBias || !h.ConvBias ||
		!slices.Equal(h.LayerTypes, []string{"mamba", "attention", "mamba", "mamba"}) {
		t.Errorf("TinyHybrid %+v", h)
	}
	if d.MoE() || !d.Rope || d.Tied || d.MambaHeadDim != 0 || d.MambaP() != 8 || d.MambaGroups != 2 || !d.ProjBias {
		t.Errorf("TinyHybridDense %+v", d)
	}
	if m.MoE() || !m.Rope || hasType(m, "mamba") {
		t.Errorf("TinyMicro %+v", m)
	}
	for _, c := range flavours() {
		if err := c.check(); err != nil {
			t.Error(err)
		}
		for _, v := range []float64{c.EmbeddingMultiplier, c.AttentionMultiplier, c.ResidualMultiplier, c.LogitsScaling} {
			if v == 1 {
				t.Errorf("seed %d: a multiplier is 1", c.Seed)
			}
		}
	}
	all := TinyHybrid()
	all.LayerTypes = nil
	if !slices.Equal(all.layerTypes(), []string{"mamba", "mamba", "mamba", "mamba"}) {
		t.Errorf("layer_types null: %v", all.layerTypes())
	}
	bad := TinyHybrid()
	bad.MambaHeadDim = 16
	if bad.check() == nil {
		t.Error("8 mamba heads of 16 accepted for an intermediate of 64")
	}
}

// ----------------------------------------------------------------------------
// The Mamba2 mixer's readings

// normed is layer l's input_layernorm applied to the embeddings times
// embedding_multiplier (exactly layer 0's mixer input).
func normed(m *Model, l int, tokens []int) [][]float64 {
	H := m.C.Hidden
	out := make([][]float64, len(tokens))
	for t, id := range tokens {
		x := slices.Clone(m.W["model.embed_tokens.weight"][id*H : (id+1)*H])
		for i := range x {
			x[i] *= m.C.EmbeddingMultiplier
		}
		out[t] = lmckpt.RMSNorm64(x, m.W["model.layers."+string(rune('0'+l))+".input_layernorm.weight"], m.C.Eps)
	}
	return out
}

// TestDecayRange: on the tiny models' first mixer the per-token decays
// exp(dt·A) reach below 0.5 and above 0.95, and softplus(dt + dt_bias)
// spans small and moderate steps, so a 12-token prompt exercises both a
// short and a long memory (a spread within the one on which mamba2ref's
// tests check the recurrence against the chunked SSD form).
func TestDecayRange(t *testing.T) {
	for _, c := range []Hybrid{TinyHybrid(), TinyHybridDense()} {
		_, m := load(t, c)
		in := m.Mixer(firstMamba(c)).Inputs(normed(m, firstMamba(c), testTokens))
		lo, hi, dlo, dhi := 1.0, 0.0, math.Inf(1), 0.0
		for t := range in.Dt {
			for h, dt := range in.Dt[t] {
				d := math.Exp(dt * in.A[h])
				lo, hi = math.Min(lo, d), math.Max(hi, d)
				dlo, dhi = math.Min(dlo, dt), math.Max(dhi, dt)
			}
		}
		t.Logf("seed %d: decay in [%.3f, %.4f], dt in [%.3f, %.3f]", c.Seed, lo, hi, dlo, dhi)
		if lo > 0.5 || hi < 0.95 || dlo > 0.05 || dhi < 0.3 {
			t.Errorf("seed %d: decay in [%g, %g], dt in [%g, %g]", c.Seed, lo, hi, dlo, dhi)
		}
	}
}

// TestMixerReadings: Granite's mixer leaves dt unclamped and takes the
// gated norm's mean over the whole width even with 2 groups
// (TinyHybridDense), with every bias the config names; GroupedNorm takes
// it per group, NormBeforeGate passes through and NoConvBias drops the
// conv1d bias. (mamba2ref's tests work the norm out by hand.)
func TestMixerReadings(t *testing.T) {
	_, m := load(t, TinyHybridDense())
	l := firstMamba(m.C)
	if mx := m.Mixer(l); mx.DtMin != 0 || mx.NormGroups != 1 || mx.Groups != 2 || mx.NormBeforeGate || mx.Eps != m.C.Eps ||
		mx.InBias == nil || mx.ConvBias == nil || mx.OutBias == nil || mx.DtBias == nil || mx.D == nil {
		t.Errorf("mixer: DtMin %g, %d norm groups of %d groups, NormBeforeGate %v, eps %g, biases %v %v %v %v, D %v",
			mx.DtMin, mx.NormGroups, mx.Groups, mx.NormBeforeGate, mx.Eps, mx.InBias != nil, mx.ConvBias != nil, mx.OutBias != nil, mx.DtBias != nil, mx.D != nil)
	}
	mk := &Model{C: m.C, W: m.W, Mistakes: Mistakes{GroupedNorm: true, NormBeforeGate: true, NoConvBias: true}}
	if mx := mk.Mixer(l); mx.NormGroups != 2 || !mx.NormBeforeGate || mx.ConvBias != nil {
		t.Errorf("with the mistakes: %d norm groups, NormBeforeGate %v, conv bias %v", mx.NormGroups, mx.NormBeforeGate, mx.ConvBias != nil)
	}
}

// TestSplitOrder: in_proj's output is [gate | xBC | dt]. With in_proj the
// identity on a one-token input (hidden 1, I + conv_dim + heads = 12
// rows), the gate is the first I entries and dt the last heads entries
// (through softplus with dt_bias, unclamped: softplus(-8) = 3.4e-4 stays
// under NemotronH's time_step_min); GateLast reads xBC first, dt right
// after it and the gate last; NoDtBias and NoD drop dt_bias and D.
func TestSplitOrder(t *testing.T) {
	c := Hybrid{Hidden: 1, MambaExpand: 4, MambaHeads: 2, MambaGroups: 1, MambaState: 1, MambaConv: 1}
	inW := make([]float64, 12)
	h := [][]float64{{1}}
	for i := range inW {
		inW[i] = float64(i + 1)
	}
	w := map[string][]float64{
		"model.layers.0.mamba.in_proj.weight":  inW,
		"model.layers.0.mamba.conv1d.weight":   {1, 1, 1, 1, 1, 1},
		"model.layers.0.mamba.dt_bias":         {-10, -20},
		"model.layers.0.mamba.A_log":           {0, math.Log(2)},
		"model.layers.0.mamba.D":               {0.5, 0.25},
		"model.layers.0.mamba.norm.weight":     {1, 1, 1, 1},
		"model.layers.0.mamba.out_proj.weight": {1, 1, 1, 1},
	}
	s, sp := lmckpt.SiLU64, mamba2ref.Softplus
	m := &Model{C: c, W: w}
	in := m.Mixer(0).Inputs(h)
	nearAll(t, "gate", in.Gate[0], []float64{1, 2, 3, 4}, 0)
	nearAll(t, "x", in.X[0], []float64{s(5), s(6), s(7), s(8)}, 1e-15)
	nearAll(t, "B, C", append(slices.Clone(in.B[0]), in.C[0]...), []float64{s(9), s(10)}, 1e-15)
	nearAll(t, "dt", in.Dt[0], []float64{sp(11 - 10), sp(12 - 20)}, 1e-15)
	nearAll(t, "A, D", append(slices.Clone(in.A), in.D...), []float64{-1, -2, 0.5, 0.25}, 1e-15)
	m.Mistakes = Mistakes{GateLast: true}
	in = m.Mixer(0).Inputs(h)
	nearAll(t, "gate last", in.Gate[0], []float64{9, 10, 11, 12}, 0)
	nearAll(t, "x first", in.X[0], []float64{s(1), s(2), s(3), s(4)}, 1e-15)
	nearAll(t, "dt after xBC", in.Dt[0], []float64{sp(7 - 10), sp(8 - 20)}, 1e-15)
	m.Mistakes = Mistakes{NoDtBias: true, NoD: true}
	in = m.Mixer(0).Inputs(h)
	nearAll(t, "dt without bias", in.Dt[0], []float64{sp(11), sp(12)}, 1e-15)
	nearAll(t, "no D", in.D, []float64{0, 0}, 0)
}

// ----------------------------------------------------------------------------
// Attention, routing

// TestRopeOnlyWhenRope: without the rotary ("nope") the attention is
// blind to the order of the earlier tokens, so swapping the first two
// inputs leaves the third position's output unchanged (to rounding); with
// "rope", or the RopeOnNoPE mistake, it changes.
func TestRopeOnlyWhenRope(t *testing.T) {
	_, m := load(t, TinyHybrid())
	l := slices.Index(m.C.LayerTypes, "attention")
	h := normed(m, 0, testTokens[:3])
	sw := [][]float64{h[1], h[0], h[2]}
	check := func(what string, m *Model, same bool) {
		t.Helper()
		d := maxAbsDiff(m.Attention(l, h, 0)[2:], m.Attention(l, sw, 0)[2:])
		if same && d > 1e-12 || !same && d < 1e-4 {
			t.Errorf("%s: swapping the first two tokens moves position 2 by %g", what, d)
		}
	}
	check("nope", m, true)
	check("nope with RopeOnNoPE", &Model{C: m.C, W: m.W, Mistakes: Mistakes{RopeOnNoPE: true}}, false)
	rope := &Model{C: m.C, W: m.W}
	rope.C.Rope = true
	check("rope", rope, false)
}

// TestRouteHandWorked: on router logits (1, 3, 2, 0.5) the top 2 are
// experts 1 and 2 weighed by softmax(3, 2).
func TestRouteHandWorked(t *testing.T) {
	ids, w := Hybrid{Experts: 4, TopK: 2}.Route([]float64{1, 3, 2, 0.5})
	if !slices.Equal(ids, []int{1, 2}) {
		t.Fatalf("experts %v", ids)
	}
	nearAll(t, "weights", w, []float64{math.E / (1 + math.E), 1 / (1 + math.E)}, 1e-15)
}

// TestMoEAndSharedMLP: one layer's block_sparse_moe of 2 experts of width
// 1 on hidden 2 (top 2, router the identity) plus shared_mlp of width 1:
// the gate is the FIRST half of each input_linear's output.
func TestMoEAndSharedMLP(t *testing.T) {
	c := Hybrid{Hidden: 2, Intermediate: 1, Experts: 2, TopK: 2}
	w := map[string][]float64{
		"model.layers.0.block_sparse_moe.router.layer.weight":  {1, 0, 0, 1},
		"model.layers.0.block_sparse_moe.input_linear.weight":  {1, 0, 0, 1, 0, 1, 1, 1},
		"model.layers.0.block_sparse_moe.output_linear.weight": {1, 0, 0, 2},
		"model.layers.0.shared_mlp.input_linear.weight":        {1, 1, 0, -1},
		"model.layers.0.shared_mlp.output_linear.weight":       {1, 3},
	}
	m := &Model{C: c, W: w}
	h := []float64{0.5, 1.5}
	sig := 1 / (1 + math.Exp(-1))
	nearAll(t, "moe", m.MoE(0, h), []float64{(1 - sig) * lmckpt.SiLU64(0.5) * 1.5, sig * 2 * lmckpt.SiLU64(1.5) * 2}, 1e-15)
	s := lmckpt.SiLU64(2) * -1.5
	nearAll(t, "shared", m.SharedMLP(0, h), []float64{s, 3 * s}, 1e-15)
}

// TestRoutingVaries: on the tiny hybrid's real activations the router
// does not send every token to the same pair of experts.
func TestRoutingVaries(t *testing.T) {
	_, m := load(t, TinyHybrid())
	pairs := map[[2]int]bool{}
	for _, h := range normed(m, 0, testTokens) {
		ids, _ := m.Experts(0, lmckpt.RMSNorm64(h, m.W["model.layers.0.post_attention_layernorm.weight"], m.C.Eps))
		pairs[[2]int{ids[0], ids[1]}] = true
	}
	if len(pairs) < 3 {
		t.Errorf("%d tokens reach only %d expert pairs", len(testTokens), len(pairs))
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

// TestMemory: another first token moves the first mixer's output at the
// last of 12 positions, 11 tokens later, by more than 1e-4: beyond the
// conv's reach of 4 tokens only the state carries it.
func TestMemory(t *testing.T) {
	_, m := load(t, TinyHybrid())
	other := slices.Clone(testTokens)
	other[0] = 50
	l := firstMamba(m.C)
	a := m.Mamba(l, normed(m, l, testTokens))
	b := m.Mamba(l, normed(m, l, other))
	last := len(testTokens) - 1
	if d := maxAbsDiff(a[last:], b[last:]); d < 1e-4 {
		t.Errorf("the first token moves the mixer's output at position %d by %g only", last, d)
	} else {
		t.Logf("the first token moves the mixer's output at position %d by %.3g", last, d)
	}
}

// TestShiftInvariance: the rotary enters q·k through the distance alone,
// and the mixers have no position, so starting at position 37 leaves the
// logits unchanged to rounding.
func TestShiftInvariance(t *testing.T) {
	for _, c := range flavours() {
		_, m := load(t, c)
		if d := maxAbsDiff(m.logits(testTokens, 37), m.Logits(testTokens)); d > 1e-9 {
			t.Errorf("seed %d: shifting the positions moves the logits by %g", c.Seed, d)
		}
	}
}

// TestMistakesMatter: every Mistake that applies to a tiny model moves the
// last position's logits by more than 1e-3, and one that does not apply
// (GroupedNorm with one group, RopeOnNoPE with "rope", the mixer's
// mistakes without mamba layers, NoConvBias without conv bias) moves
// nothing.
func TestMistakesMatter(t *testing.T) {
	for _, c := range flavours() {
		_, m := load(t, c)
		want := m.Logits(testTokens)
		last := len(testTokens) - 1
		mamba := hasType(c, "mamba")
		for _, tc := range []struct {
			name    string
			mk      Mistakes
			applies bool
		}{
			{"NormBeforeGate", Mistakes{NormBeforeGate: true}, mamba},
			{"GroupedNorm", Mistakes{GroupedNorm: true}, mamba && c.MambaGroups > 1},
			{"NoD", Mistakes{NoD: true}, mamba},
			{"NoDtBias", Mistakes{NoDtBias: true}, mamba},
			{"NoConvBias", Mistakes{NoConvBias: true}, mamba && c.ConvBias},
			{"GateLast", Mistakes{GateLast: true}, mamba},
			{"NoResidualMultiplier", Mistakes{NoResidualMultiplier: true}, true},
			{"RopeOnNoPE", Mistakes{RopeOnNoPE: true}, hasType(c, "attention") && !c.Rope},
			{"NoSharedMLP", Mistakes{NoSharedMLP: true}, true},
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
