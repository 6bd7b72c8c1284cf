// Package bloom implements BloomForCausalLM, following transformers'
// models/bloom: BigScience's BLOOM (560M to 176B) and BLOOMZ, and the
// models trained on that layout.
//
// A BLOOM layer is Llama's (pipeline/llama) with LayerNorms that have a
// bias (input_layernorm, post_attention_layernorm), no rotary embedding
// but attention with linear biases (ALiBi: llama.Options.ALiBi, slope h
// times the key's position added to head h's scaled scores), the query,
// key and value one projection whose rows lie by head ([heads, 3,
// head_dim]: llama.Options.QKVPerHead) with a bias, a biased dense
// output, and an ungated MLP, dense_4h_to_h(gelu(dense_h_to_4h(x))),
// 4 × hidden wide with biases (bloom_gelu, the tanh approximation).
// The token embeddings pass through a LayerNorm of their own,
// word_embeddings_layernorm, before the first layer; ln_f is the final
// LayerNorm and the head is tied to the embeddings. The checkpoints'
// names are read as Llama's (lm.Renamer), with or without the
// transformer. prefix.
//
// BLOOM has no table of positions, so no max_position_embeddings:
// tputool bounds the context at seq_length when the config sets it, else
// at 2048, the length BLOOM was trained on.
package bloom

import (
	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive // GoMLX's idiom for graph code

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/llama"
	"github.com/tputool/tputool/pipeline/lm"
)

// Architecture is the class this package registers.
const Architecture = "BloomForCausalLM"

func init() { lm.Register(Architecture, New) }

// Config is a BloomForCausalLM config.json: BloomConfig's names (n_layer,
// n_head, the older n_embed) besides the fields Llama's config shares.
type Config struct {
	llama.Config
	NEmbed           *int     `json:"n_embed"`
	NLayer           *int     `json:"n_layer"`
	NHead            *int     `json:"n_head"`
	SeqLength        *int     `json:"seq_length"`
	LayerNormEpsilon *float64 `json:"layer_norm_epsilon"`
	// ResidualPostLayerNorm takes each sublayer's residual after its
	// LayerNorm instead of before it: refused.
	ResidualPostLayerNorm bool `json:"apply_residual_connection_post_layernorm"`
	// PretrainingTP with SlowButExact makes transformers sum the
	// attention's and the MLP's output projections in pretraining_tp
	// slices of their input, without the projections' biases
	// (F.linear of each slice with the weight alone): refused. Without
	// slow_but_exact transformers runs them whole, biases included, as
	// tputool does (BLOOM-176B's pretraining_tp 4).
	PretrainingTP *int `json:"pretraining_tp"`
	SlowButExact  bool `json:"slow_but_exact"`
}

// Defaults are BloomConfig's (a tiny model's sizes, as transformers has
// them; every release's config sets its own).
var Defaults = llama.Defaults{
	VocabSize: 250880, Hidden: 64, Layers: 2, Heads: 8, MaxPositions: defaultContext,
	Eps: 1e-5, RopeTheta: 10000, Tie: true, Act: "gelu_new",
	BOS: []int{1}, EOS: []int{2},
}

// defaultContext bounds the context of a config without seq_length: the
// sequence length BLOOM was trained on.
const defaultContext = 2048

// Resolve reads a BloomForCausalLM config.json into the options of
// pipeline/llama's decoder.
func Resolve(cfg *config.File) (llama.Options, error) {
	where := lm.ConfigName(cfg)
	var c Config
	if err := cfg.Decode(&c); err != nil {
		return llama.Options{}, err
	}
	switch {
	case c.ResidualPostLayerNorm:
		return llama.Options{}, errs.Unsupportedf("%s: apply_residual_connection_post_layernorm true (the residual taken after each LayerNorm) is not supported", where)
	case c.SlowButExact && lm.Or(c.PretrainingTP, 1) > 1:
		return llama.Options{}, errs.Unsupportedf("%s: slow_but_exact true with pretraining_tp %d (the output projections summed in slices, without their biases) is not supported", where, *c.PretrainingTP)
	}
	// BloomConfig: n_embed, when given, is hidden_size; attribute_map
	// reads num_hidden_layers and num_attention_heads as n_layer and
	// n_head.
	if c.NEmbed != nil {
		c.HiddenSize = c.NEmbed
	}
	if c.NumHiddenLayers == nil {
		c.NumHiddenLayers = c.NLayer
	}
	if c.NumAttentionHeads == nil {
		c.NumAttentionHeads = c.NHead
	}
	c.MaxPositionEmbeddings = c.SeqLength
	c.RMSNormEps = c.LayerNormEpsilon
	c.HiddenAct = "" // BloomMLP's gelu is fixed: bloom_gelu, the tanh approximation
	hidden := lm.Or(c.HiddenSize, Defaults.Hidden)
	inner := 4 * hidden // BloomMLP: 4 × hidden_size, whatever n_inner says
	c.IntermediateSize = &inner
	c.NumKeyValueHeads, c.HeadDim, c.LayerTypes = nil, nil, nil
	c.AttentionBias, c.MLPBias = false, false
	o, err := c.Config.Resolve(cfg.Without(config.RopeFields...), Defaults)
	if err != nil {
		return llama.Options{}, err
	}
	o.NoRotary()
	o.ALiBi = true
	o.FusedQKV, o.QKVPerHead, o.QKVBias, o.OBias, o.MLPBias = true, true, true, true, true
	o.LayerNorm, o.UngatedMLP = true, true
	return o, nil
}

// New builds a BloomForCausalLM from its config.json.
func New(cfg *config.File) (lm.Model, error) {
	o, err := Resolve(cfg)
	if err != nil {
		return nil, err
	}
	return &Model{llama.NewModel(o)}, nil
}

// Model is BLOOM's decoder in its checkpoints' names. It implements
// lm.Renamer.
type Model struct{ *llama.Model }

var _ lm.Renamer = (*Model)(nil)

// EmbedNorm is the LayerNorm of the token embeddings (BLOOM's
// word_embeddings_layernorm).
const EmbedNorm = "model.embed_layernorm"

// EmbedWeights implements lm.Model: the embeddings and their LayerNorm.
func (m *Model) EmbedWeights() []lm.WeightSpec {
	return append(m.Model.EmbedWeights(), m.Model.NormWeights(EmbedNorm)...)
}

// Embed implements lm.Model: BloomModel's word_embeddings, then
// word_embeddings_layernorm.
func (m *Model) Embed(w *lm.Params, tokens *Node) *Node {
	return m.Model.Norm(w, EmbedNorm, m.Model.Embed(w, tokens))
}

// RenameWeight implements lm.Renamer: [transformer.]word_embeddings is
// model.embed_tokens, word_embeddings_layernorm model.embed_layernorm, h
// model.layers (self_attention.query_key_value self_attn.qkv_proj,
// self_attention.dense self_attn.o_proj, the MLP's dense_h_to_4h and
// dense_4h_to_h up_proj and down_proj), ln_f model.norm.
func (m *Model) RenameWeight(stored string) string { return names.Rename(stored) }

var names = llama.TransformerNames{
	Optional: true,
	Top: [][2]string{{"word_embeddings.weight", "model.embed_tokens.weight"}, {"word_embeddings_layernorm.", EmbedNorm + "."},
		{"ln_f.", "model.norm."}},
	Blocks: llama.FusedBlockNames,
}
