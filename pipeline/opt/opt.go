// Package opt implements OPTForCausalLM, following transformers'
// models/opt: Meta's OPT (125M to 66B, and OPT-IML) and the models trained
// or fine-tuned on its layout (Galactica's are OPT's too).
//
// An OPT layer is Llama's (pipeline/llama) with LayerNorms that have a
// bias (self_attn_layer_norm before the attention, final_layer_norm
// before the MLP), biased q_proj, k_proj, v_proj and out_proj, no rotary
// embedding, and an ungated MLP, fc2(act(fc1(x))), with biases, relu by
// default (activation_function). The positions are a learned table,
// embed_positions, whose row for position p is p + 2
// (OPTLearnedPositionalEmbedding's offset; llama.Options.Positions),
// added to the token embeddings; the decoder's final_layer_norm is the
// final LayerNorm, and the head is tied to embed_tokens. The checkpoints'
// names are read as Llama's (lm.Renamer), under model.decoder. or the
// first uploads' decoder.
//
// OPT-350M differs in two ways, both read: do_layer_norm_before false
// norms after each residual add, and the decoder then has no final
// LayerNorm (llama.Options.PostLN, NoFinalNorm; _remove_final_layer_norm
// leaves it out too); word_embed_proj_dim narrower than the decoder
// projects the embeddings in (project_in) and the decoder's output out
// (project_out) before the tied head (llama.Options.EmbedProj).
package opt

import (
	"fmt"
	"strings"

	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/llama"
	"github.com/tputool/tputool/pipeline/lm"
)

// Architecture is the class this package registers.
const Architecture = "OPTForCausalLM"

func init() { lm.Register(Architecture, New) }

// Config is an OPTForCausalLM config.json: OPTConfig's fields besides the
// ones Llama's config shares.
type Config struct {
	llama.Config
	FFNDim            *int   `json:"ffn_dim"`
	ActivationFunc    string `json:"activation_function"`
	DoLayerNormBefore *bool  `json:"do_layer_norm_before"`
	RemoveFinalNorm   bool   `json:"_remove_final_layer_norm"`
	WordEmbedProjDim  *int   `json:"word_embed_proj_dim"`
	EnableBias        *bool  `json:"enable_bias"`
	// ElementwiseAffine false gives every LayerNorm neither weight nor
	// bias.
	ElementwiseAffine *bool `json:"layer_norm_elementwise_affine"`
}

// Defaults are OPTConfig's (OPT-125M's sizes).
var Defaults = llama.Defaults{
	VocabSize: 50272, Hidden: 768, Intermediate: 3072, Layers: 12, Heads: 12, MaxPositions: 2048,
	Eps: 1e-5, RopeTheta: 10000, Tie: true, Act: "relu",
	BOS: []int{2}, EOS: []int{2},
}

// positionOffset is OPTLearnedPositionalEmbedding's offset: position p
// reads row p + 2.
const positionOffset = 2

// Resolve reads an OPTForCausalLM config.json into the options of
// pipeline/llama's decoder.
func Resolve(cfg *config.File) (llama.Options, error) {
	where := lm.ConfigName(cfg)
	var c Config
	if err := cfg.Decode(&c); err != nil {
		return llama.Options{}, err
	}
	hidden := lm.Or(c.HiddenSize, Defaults.Hidden)
	if c.WordEmbedProjDim != nil && *c.WordEmbedProjDim <= 0 {
		return llama.Options{}, fmt.Errorf("%s: word_embed_proj_dim must be positive, got %d", where, *c.WordEmbedProjDim)
	}
	c.IntermediateSize = c.FFNDim // OPTConfig reads ffn_dim, not intermediate_size
	c.HiddenAct = c.ActivationFunc
	c.RMSNormEps = nil // OPT's LayerNorms take torch's default eps, 1e-5
	c.NumKeyValueHeads, c.HeadDim, c.LayerTypes = nil, nil, nil
	c.AttentionBias, c.MLPBias = false, false
	o, err := c.Config.Resolve(cfg.Without(config.RopeFields...), Defaults)
	if err != nil {
		return llama.Options{}, err
	}
	o.NoRotary()
	o.Positions = llama.Positions{Rows: o.Spec.MaxPositions + positionOffset, Offset: positionOffset}
	bias := lm.Or(c.EnableBias, true)
	o.QKVBias, o.OBias, o.MLPBias = bias, bias, bias
	o.LayerNorm, o.UngatedMLP = true, true
	o.NormNoParams = !lm.Or(c.ElementwiseAffine, true)
	o.Norms = llama.Norms{PreAttn: "self_attn_layer_norm", PreMLP: "final_layer_norm"}
	// OPTDecoderLayer with do_layer_norm_before false norms after each
	// residual add; OPTDecoder then builds no final_layer_norm, as with
	// _remove_final_layer_norm.
	before := lm.Or(c.DoLayerNormBefore, true)
	o.PostLN, o.NoFinalNorm = !before, !before || c.RemoveFinalNorm
	if e := lm.Or(c.WordEmbedProjDim, hidden); e != hidden { // project_in and project_out around the decoder
		o.EmbedProj = e
	}
	return o, nil
}

// New builds an OPTForCausalLM from its config.json.
func New(cfg *config.File) (lm.Model, error) {
	o, err := Resolve(cfg)
	if err != nil {
		return nil, err
	}
	return &Model{llama.NewModel(o)}, nil
}

// Model is OPT's decoder in its checkpoints' names. It implements
// lm.Renamer.
type Model struct{ *llama.Model }

var _ lm.Renamer = (*Model)(nil)

// renamed maps the modules of an OPT layer to Llama's (its LayerNorms keep
// their names: llama.Options.Norms names them).
var renamed = strings.NewReplacer(
	".self_attn.out_proj.", ".self_attn.o_proj.",
	".fc1.", ".mlp.up_proj.",
	".fc2.", ".mlp.down_proj.",
)

// RenameWeight implements lm.Renamer: [model.]decoder.embed_tokens is
// model.embed_tokens, decoder.embed_positions model.embed_positions,
// decoder.layers model.layers (out_proj o_proj, fc1 and fc2 the MLP's
// up_proj and down_proj), decoder.final_layer_norm model.norm.
func (m *Model) RenameWeight(stored string) string {
	name, ok := strings.CutPrefix(strings.TrimPrefix(stored, "model."), "decoder.")
	if !ok {
		return stored
	}
	switch {
	case name == "embed_tokens.weight":
		return "model.embed_tokens.weight"
	case name == "embed_positions.weight":
		return llama.PositionsWeight
	case name == "project_in.weight", name == "project_out.weight":
		return "model." + name
	case strings.HasPrefix(name, "final_layer_norm."):
		return "model.norm." + strings.TrimPrefix(name, "final_layer_norm.")
	case strings.HasPrefix(name, "layers."):
		return renamed.Replace("model." + name)
	}
	return stored
}
