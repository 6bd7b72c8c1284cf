// Package exaone implements ExaoneForCausalLM, the class of LG AI
// Research's EXAONE 3.0 (7.8B) and EXAONE 3.5 (2.4B, 7.8B, 32B) and the
// EXAONE Deep reasoning models, following the modeling_exaone.py and
// configuration_exaone.py their repositories ship (remote code; EXAONE
// 4.0 is pipeline/exaone4).
//
// An EXAONE block is Llama's (pipeline/llama) under GPT-2-style names:
// ln_1 and ln_2 are RMSNorms, attn.attention's q_proj, k_proj, v_proj and
// out_proj have no biases and the rotary turns halves (rope_theta,
// rope_scaling: llama3 in 3.5), with num_key_value_heads key/value
// heads; the MLP is c_proj(act(c_fc_0(x)) · c_fc_1(x)), c_fc_0 the gate.
// transformer.wte is the embedding, transformer.ln_f the final norm, and
// lm_head the head (tied by default, as 3.5's 2.4B ties it).
// ExaoneConfig's names are read: num_layers, activation_function,
// layer_norm_epsilon; a head is hidden_size / num_attention_heads wide,
// as ExaoneSelfAttention computes it (a head_dim that differs is
// refused).
package exaone

import (
	"fmt"
	"strings"

	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/llama"
	"github.com/tputool/tputool/pipeline/lm"
)

// Architecture is the class this package registers.
const Architecture = "ExaoneForCausalLM"

func init() { lm.Register(Architecture, New) }

// Config is an ExaoneForCausalLM config.json: ExaoneConfig's names
// besides the fields Llama's config shares.
type Config struct {
	llama.Config
	NumLayers        *int     `json:"num_layers"`
	LayerNormEpsilon *float64 `json:"layer_norm_epsilon"`
	ActivationFunc   string   `json:"activation_function"`
}

// Defaults are ExaoneConfig's; intermediate_size null is 4 × hidden_size
// and the head is tied (PretrainedConfig's default).
var Defaults = llama.Defaults{
	VocabSize: 102400, Hidden: 2048, Layers: 32, Heads: 32, MaxPositions: 2048,
	Eps: 1e-5, RopeTheta: 10000, Tie: true, Act: "silu",
	BOS: []int{0}, EOS: []int{2},
}

// Resolve reads an ExaoneForCausalLM config.json into the options of
// pipeline/llama's decoder.
func Resolve(cfg *config.File) (llama.Options, error) {
	var c Config
	if err := cfg.Decode(&c); err != nil {
		return llama.Options{}, err
	}
	if c.NumHiddenLayers == nil { // attribute_map: num_hidden_layers is num_layers
		c.NumHiddenLayers = c.NumLayers
	}
	c.RMSNormEps = c.LayerNormEpsilon
	c.HiddenAct = c.ActivationFunc
	if c.IntermediateSize == nil || *c.IntermediateSize <= 0 {
		inner := 4 * lm.Or(c.HiddenSize, Defaults.Hidden)
		c.IntermediateSize = &inner
	}
	// ExaoneSelfAttention's heads are embed_dim // num_heads wide; its
	// rotary reads head_dim, so a config whose head_dim disagrees runs
	// in neither: refused.
	hd := c.HeadDim
	c.HeadDim, c.LayerTypes = nil, nil
	c.AttentionBias, c.MLPBias = false, false
	o, err := c.Config.Resolve(cfg, Defaults)
	if err != nil {
		return llama.Options{}, err
	}
	if hd != nil && *hd != o.Spec.HeadDim {
		return llama.Options{}, fmt.Errorf("%s: head_dim %d differs from hidden_size / num_attention_heads %d", lm.ConfigName(cfg), *hd, o.Spec.HeadDim)
	}
	return o, nil
}

// New builds an ExaoneForCausalLM from its config.json.
func New(cfg *config.File) (lm.Model, error) {
	o, err := Resolve(cfg)
	if err != nil {
		return nil, err
	}
	return &Model{llama.NewModel(o)}, nil
}

// Model is EXAONE's decoder in its checkpoints' names. It implements
// lm.Renamer.
type Model struct{ *llama.Model }

var _ lm.Renamer = (*Model)(nil)

// renamed maps the modules of an EXAONE block to Llama's.
var renamed = strings.NewReplacer(
	".ln_1.", ".input_layernorm.",
	".ln_2.", ".post_attention_layernorm.",
	".attn.attention.q_proj.", ".self_attn.q_proj.",
	".attn.attention.k_proj.", ".self_attn.k_proj.",
	".attn.attention.v_proj.", ".self_attn.v_proj.",
	".attn.attention.out_proj.", ".self_attn.o_proj.",
	".mlp.c_fc_0.", ".mlp.gate_proj.",
	".mlp.c_fc_1.", ".mlp.up_proj.",
	".mlp.c_proj.", ".mlp.down_proj.",
)

// RenameWeight implements lm.Renamer: transformer.wte is
// model.embed_tokens, transformer.h model.layers (ln_1 input_layernorm,
// ln_2 post_attention_layernorm, attn.attention's projections
// self_attn's, out_proj o_proj, the MLP's c_fc_0, c_fc_1 and c_proj
// gate_proj, up_proj and down_proj), transformer.ln_f model.norm.
func (m *Model) RenameWeight(stored string) string { return names.Rename(stored) }

var names = llama.TransformerNames{
	Top:    [][2]string{{"wte.weight", "model.embed_tokens.weight"}, {"ln_f.", "model.norm."}},
	Blocks: renamed,
}
