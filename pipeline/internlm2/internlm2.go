// Package internlm2 implements InternLM2ForCausalLM, the class of
// Shanghai AI Laboratory's InternLM 2 and InternLM 2.5 (1.8B, 7B, 20B, and
// their chat, math and 1M-context models) and of the language model
// inside InternVL 2's larger releases, following the modeling_internlm2.py
// and configuration_internlm2.py their repositories ship (remote code).
//
// An InternLM2 block is Llama's (pipeline/llama) under its own names:
// attention_norm and ffn_norm are RMSNorms; attention.wqkv is the query,
// key and value projections in one matrix whose rows go by key/value
// group, each group's num_attention_heads / num_key_value_heads query
// heads, then its key head and its value head
// (llama.Options.QKVPerHead); attention.wo is the output projection;
// bias (true unless the config says otherwise, as InternLM2Config's
// default is) puts biases on wqkv and wo; feed_forward's w1, w3 and w2
// are the gated MLP's gate, up and down projections. The rotary turns
// halves of heads hidden_size / num_attention_heads wide, rope_scaling
// linear or dynamic (dynamic NTK changes nothing below
// max_position_embeddings, where tputool stops). model.tok_embeddings is
// the embedding, model.norm the final norm, output the head (untied by
// default).
package internlm2

import (
	"fmt"
	"strings"

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/llama"
	"github.com/tputool/tputool/pipeline/lm"
)

// Architecture is the class this package registers.
const Architecture = "InternLM2ForCausalLM"

func init() { lm.Register(Architecture, New) }

// Config is an InternLM2ForCausalLM config.json: InternLM2Config's bias
// besides the fields Llama's config shares.
type Config struct {
	llama.Config
	Bias *bool `json:"bias"`
}

// Defaults are InternLM2Config's.
var Defaults = llama.Defaults{
	VocabSize: 103168, Hidden: 4096, Intermediate: 11008, Layers: 32, Heads: 32, MaxPositions: 2048,
	Eps: 1e-6, RopeTheta: 10000, Tie: false, Act: "silu",
	BOS: []int{1}, EOS: []int{2},
}

// Resolve reads an InternLM2ForCausalLM config.json into the options of
// pipeline/llama's decoder.
func Resolve(cfg *config.File) (llama.Options, error) {
	var c Config
	if err := cfg.Decode(&c); err != nil {
		return llama.Options{}, err
	}
	where := lm.ConfigName(cfg)
	// InternLM2Attention's heads are hidden_size // num_attention_heads
	// wide and it reads no head_dim: one that disagrees is refused.
	hd := c.HeadDim
	c.HeadDim, c.LayerTypes = nil, nil
	c.AttentionBias, c.MLPBias = false, false
	o, err := c.Config.Resolve(cfg, Defaults)
	if err != nil {
		return llama.Options{}, err
	}
	if hd != nil && *hd != o.Spec.HeadDim {
		return llama.Options{}, fmt.Errorf("%s: head_dim %d differs from hidden_size / num_attention_heads %d", where, *hd, o.Spec.HeadDim)
	}
	if t := o.Rope.Type; t != "default" && t != "linear" && t != "dynamic" {
		return llama.Options{}, errs.Unsupportedf("%s: rope_scaling type %q; InternLM2's rotary classes are linear and dynamic", where, t)
	}
	bias := c.Bias == nil || *c.Bias
	o.QKVBias, o.OBias = bias, bias
	o.FusedQKV, o.QKVPerHead = true, true
	return o, nil
}

// New builds an InternLM2ForCausalLM from its config.json.
func New(cfg *config.File) (lm.Model, error) {
	o, err := Resolve(cfg)
	if err != nil {
		return nil, err
	}
	return &Model{llama.NewModel(o)}, nil
}

// Model is InternLM2's decoder in its checkpoints' names. It implements
// lm.Renamer.
type Model struct{ *llama.Model }

var _ lm.Renamer = (*Model)(nil)

// blocks maps the modules of an InternLM2 block to Llama's.
var blocks = strings.NewReplacer(
	".attention_norm.", ".input_layernorm.",
	".ffn_norm.", ".post_attention_layernorm.",
	".attention.wqkv.", ".self_attn.qkv_proj.",
	".attention.wo.", ".self_attn.o_proj.",
	".feed_forward.w1.", ".mlp.gate_proj.",
	".feed_forward.w3.", ".mlp.up_proj.",
	".feed_forward.w2.", ".mlp.down_proj.",
)

// RenameWeight implements lm.Renamer: model.tok_embeddings is
// model.embed_tokens, output lm_head, and in model.layers attention_norm
// input_layernorm, ffn_norm post_attention_layernorm, attention's wqkv
// and wo self_attn's qkv_proj and o_proj, feed_forward's w1, w3 and w2
// the MLP's gate_proj, up_proj and down_proj.
func (m *Model) RenameWeight(stored string) string {
	switch {
	case stored == "model.tok_embeddings.weight":
		return "model.embed_tokens.weight"
	case stored == "output.weight":
		return "lm_head.weight"
	case strings.HasPrefix(stored, "model.layers."):
		return blocks.Replace(stored)
	}
	return stored
}
