package lfm2_test

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/pipeline/lfm2"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/nn"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
)

func realModel(t *testing.T, name string) *lfm2.Model {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "testdata", "configs", name, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	m, err := lm.New(lmckpt.ParseConfig(t, string(raw)))
	if err != nil {
		t.Fatal(err)
	}
	return m.(*lfm2.Model)
}

// params counts a model's parameters, and those a token uses (each
// layer's experts by TopK of Num).
func params(m *lfm2.Model) (all, active int64) {
	o := m.Options()
	for _, w := range lm.Weights(m) {
		k := int64(1)
		for _, d := range w.Shape {
			k *= int64(d)
		}
		all += k
		if strings.Contains(w.Name, ".experts.") {
			k = k * int64(o.TopK) / int64(o.Experts)
		}
		active += k
	}
	return all, active
}

// attending lists the layers of kind lm.KindFull.
func attending(o lfm2.Options) []int {
	var out []int
	for i, k := range o.Spec.LayerKinds {
		if k == lm.KindFull {
			out = append(out, i)
		}
	}
	return out
}

// TestLFM2Config reads LFM2-1.2B's config.json (full_attn_idxs, the MLP
// from block_ff_dim 12288 adjusted to 8192, tie_embedding absent so
// tied, eos 7): 1.17B parameters, as published.
func TestLFM2Config(t *testing.T) {
	m := realModel(t, "lfm2_1_2b")
	o := m.Options()
	if o.MoE || o.Spec.Intermediate != 8192 || o.Kernel != 3 || o.ConvBias || !o.Spec.TieEmbeddings || o.Spec.HeadDim != 64 || o.Spec.KVHeads != 8 {
		t.Errorf("options %+v", o)
	}
	if got := attending(o); len(got) != 6 || got[0] != 2 || got[5] != 14 {
		t.Errorf("attention layers %v, want [2 5 8 10 12 14]", got)
	}
	if o.Spec.BOS != 1 || len(o.Spec.EOS) != 1 || o.Spec.EOS[0] != 7 {
		t.Errorf("bos %d, eos %v", o.Spec.BOS, o.Spec.EOS)
	}
	all, _ := params(m)
	if b := float64(all) / 1e9; b < 1.16 || b > 1.18 {
		t.Errorf("%.4gB parameters, want 1.17B", b)
	}
	st := m.LayerState(0, 2, 4096)
	if len(st) != 1 || st[0].Shape[0] != 2 || st[0].Shape[1] != 2 || st[0].Shape[2] != 2048 || st[0].SlotAxis != lm.NoSlots {
		t.Errorf("a conv layer's state %+v", st)
	}
}

// TestLFM2MoEConfig reads LFM2-8B-A1B's config.json: 18 short
// convolutions and 6 attention layers, 2 dense MLPs of 7168, then 32
// experts of 1792 (top 4, with the expert bias): 8.3B parameters, 1.5B
// active, as published.
func TestLFM2MoEConfig(t *testing.T) {
	m := realModel(t, "lfm2_8b_a1b")
	o := m.Options()
	if !o.MoE || o.Dense != 2 || o.Experts != 32 || o.TopK != 4 || o.MoEIntermediate != 1792 || o.Spec.Intermediate != 7168 || !o.ExpertBias || !o.NormTopK || o.Scale != 1 {
		t.Errorf("options %+v", o)
	}
	if got := attending(o); len(got) != 6 || got[0] != 2 || got[5] != 21 {
		t.Errorf("attention layers %v", got)
	}
	if m.Experts(1) != nil || m.Experts(2) == nil || m.Experts(2).Num != 32 {
		t.Errorf("experts: layer 1 %v, layer 2 %v; want none, then 32", m.Experts(1), m.Experts(2))
	}
	all, active := params(m)
	if b := float64(all) / 1e9; b < 8.2 || b > 8.4 {
		t.Errorf("%.4gB parameters, want about 8.3B", b)
	}
	if b := float64(active) / 1e9; b < 1.45 || b > 1.6 {
		t.Errorf("%.4gB active, want about 1.5B", b)
	}
	t.Logf("%.4gB parameters, %.4gB active", float64(all)/1e9, float64(active)/1e9)
}

// TestConfigReadings checks the ways LFM2's configs spell what the model
// reads: the MLP's width under each block_* setting, layer_types over
// full_attn_idxs, every layer attending without either, tie_embedding
// over tie_word_embeddings, the rotary base under theta or under a
// rope_parameters keyed by layer type.
func TestConfigReadings(t *testing.T) {
	base := `"architectures": ["Lfm2ForCausalLM"], "model_type": "lfm2", "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 3, "vocab_size": 50`
	for _, c := range []struct {
		name, extra string
		inter       int
		attends     []int
		tied        bool
		theta       float64
	}{
		{"defaults", ``, 8192, []int{0, 1, 2}, true, 1e6},
		{"block_ff_dim over intermediate_size", `, "intermediate_size": 96, "block_ff_dim": 300, "block_multiple_of": 32`, 224, []int{0, 1, 2}, true, 1e6},
		{"a multiplier", `, "intermediate_size": 300, "block_ffn_dim_multiplier": 1.5, "block_multiple_of": 64`, 320, []int{0, 1, 2}, true, 1e6},
		{"a null multiplier: no rounding", `, "intermediate_size": 300, "block_ffn_dim_multiplier": null, "block_multiple_of": 64`, 200, []int{0, 1, 2}, true, 1e6},
		{"no adjustment", `, "intermediate_size": 300, "block_auto_adjust_ff_dim": false`, 300, []int{0, 1, 2}, true, 1e6},
		{"full_attn_idxs", `, "intermediate_size": 96, "full_attn_idxs": [1]`, 256, []int{1}, true, 1e6},
		{"layer_types over full_attn_idxs", `, "intermediate_size": 96, "full_attn_idxs": [1], "layer_types": ["full_attention", "conv", "conv"]`, 256, []int{0}, true, 1e6},
		{"tie_embedding first", `, "tie_embedding": false, "tie_word_embeddings": true`, 8192, []int{0, 1, 2}, false, 1e6},
		{"theta", `, "theta": 5e5`, 8192, []int{0, 1, 2}, true, 5e5},
		{"theta over rope_theta", `, "theta": 5e5, "rope_theta": 7e5`, 8192, []int{0, 1, 2}, true, 5e5},
		{"hidden_act unread", `, "hidden_act": "swishy"`, 8192, []int{0, 1, 2}, true, 1e6}, // Lfm2MLP is SiLU whatever it says
		{"rope_parameters by layer type", `, "rope_parameters": {"full_attention": {"rope_type": "default", "rope_theta": 2e6}, "conv": null}`, 8192, []int{0, 1, 2}, true, 2e6},
		{"rope_parameters", `, "rope_parameters": {"rope_type": "default", "rope_theta": 3e6}`, 8192, []int{0, 1, 2}, true, 3e6},
	} {
		t.Run(c.name, func(t *testing.T) {
			o, err := lfm2.Resolve(lmckpt.ParseConfig(t, "{"+base+c.extra+"}"))
			if err != nil {
				t.Fatal(err)
			}
			if o.Spec.Intermediate != c.inter {
				t.Errorf("MLP width %d, want %d", o.Spec.Intermediate, c.inter)
			}
			if got := attending(o); !slices.Equal(got, c.attends) {
				t.Errorf("attention layers %v, want %v", got, c.attends)
			}
			for i, k := range o.Spec.LayerKinds {
				if k != lm.KindFull && k != nn.KindConv {
					t.Errorf("layer %d kind %q", i, k)
				}
			}
			if o.Spec.HeadDim != 16 {
				t.Errorf("head_dim %d, want 16", o.Spec.HeadDim)
			}
			if o.Spec.TieEmbeddings != c.tied {
				t.Errorf("tied %v, want %v", o.Spec.TieEmbeddings, c.tied)
			}
			// InvFreq[1] is theta^(-2/rotary dim).
			if got := math.Pow(o.Rope.InvFreq[1], -float64(o.Rope.RotaryDim)/2); math.Abs(got/c.theta-1) > 1e-9 {
				t.Errorf("rope theta %g, want %g", got, c.theta)
			}
		})
	}
}

// TestConfigErrors checks that configs the model cannot run are refused
// with the field named: the errors that are the engine's limits wrap
// errs.ErrUnsupported.
func TestConfigErrors(t *testing.T) {
	dense := `"architectures": ["Lfm2ForCausalLM"], "model_type": "lfm2", "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 3, "vocab_size": 50`
	moe := `"architectures": ["Lfm2MoeForCausalLM"], "model_type": "lfm2_moe", "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 3, "vocab_size": 50`
	for _, c := range []struct {
		js, want    string
		unsupported bool
	}{
		{"{" + dense + `, "layer_types": ["conv", "mamba", "conv"]}`, `layer_types[1] is "mamba"`, true},
		{"{" + dense + `, "layer_types": ["conv"]}`, "layer_types has 1 entries for 3 layers", false},
		{"{" + dense + `, "full_attn_idxs": [3]}`, "full_attn_idxs holds 3", false},
		{"{" + dense + `, "conv_L_cache": 1}`, "conv_L_cache 1", false},
		{"{" + dense + `, "block_ffn_dim_multiplier": -1}`, "block_ffn_dim_multiplier is -1", false},
		{"{" + dense + `, "block_multiple_of": 0}`, "block_multiple_of 0", false},
		{"{" + dense + `, "num_attention_heads": 5}`, "not a multiple of num_attention_heads", false},
		{"{" + moe + `}`, "needs layer_types", false},
		{"{" + moe + `, "layer_types": ["conv", "conv", "full_attention"], "num_experts_per_tok": 40}`, "num_experts_per_tok 40", false},
		{"{" + moe + `, "layer_types": ["conv", "conv", "full_attention"], "num_dense_layers": 4}`, "num_dense_layers 4", false},
		{"{" + moe + `, "layer_types": ["conv", "conv", "full_attention"], "hidden_act": "swishy"}`, `hidden_act "swishy"`, true},
	} {
		_, err := lm.New(lmckpt.ParseConfig(t, c.js))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one containing %q", c.js, err, c.want)
			continue
		}
		if got := errors.Is(err, errs.ErrUnsupported); got != c.unsupported {
			t.Errorf("%s: unsupported %v, want %v (%v)", c.want, got, c.unsupported, err)
		}
	}
}

// TestHeadDim: a config's head_dim is the attention's, as Lfm2Attention
// reads it (getattr(config, "head_dim", hidden/heads)), even where it is
// not hidden/heads.
func TestHeadDim(t *testing.T) {
	o, err := lfm2.Resolve(lmckpt.ParseConfig(t, `{"architectures": ["Lfm2ForCausalLM"], "model_type": "lfm2", "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 24, "num_hidden_layers": 2, "vocab_size": 50}`))
	if err != nil {
		t.Fatal(err)
	}
	m := lfm2.NewModel(o)
	for _, w := range m.LayerWeights(0) {
		if strings.HasSuffix(w.Name, "q_proj.weight") && (w.Shape[0] != 96 || w.Shape[1] != 64) {
			t.Errorf("%s %v, want [96 64]", w.Name, w.Shape)
		}
		if strings.HasSuffix(w.Name, "q_layernorm.weight") && w.Shape[0] != 24 {
			t.Errorf("%s %v, want [24]", w.Name, w.Shape)
		}
	}
}
