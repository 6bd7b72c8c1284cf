// Package falcon implements FalconForCausalLM, following transformers'
// models/falcon: TII's Falcon-7B, Falcon-40B, Falcon-180B and Falcon 2
// 11B (Falcon 3 is Llama's layout, Falcon-H1 pipeline/falconh1).
//
// A Falcon layer is Llama's (pipeline/llama) with LayerNorms (with
// biases), the query, key and value projections in one matrix,
// self_attention.query_key_value, an ungated MLP (dense_h_to_4h,
// dense_4h_to_h; activation "gelu", erf's) and, with bias, biases on
// every projection. Three layouts:
//   - new_decoder_architecture (40B, 180B, Falcon 2): num_kv_heads
//     key/value heads; the fused rows by key/value group, each group's
//     query heads then its key and value (llama.Options.QKVPerHead); the
//     attention and the MLP in parallel, on two LayerNorms of the layer's
//     input (ln_attn, ln_mlp) or with num_ln_in_parallel_attn 1 on one
//     (input_layernorm);
//   - multi_query (7B): one key/value head, the fused rows every query
//     head's then the key's and the value's (llama.Options.FusedQKV);
//   - neither: a key/value head per head, the fused rows by head.
//
// Without the new architecture, parallel_attn runs the attention and the
// MLP in parallel on input_layernorm, else in sequence with
// post_attention_layernorm before the MLP. The rotary turns whole heads;
// with alibi (Falcon-RW) there is none, and BLOOM's linear biases join
// the scores before they are scaled (llama.Options.ALiBiScaled). The head
// is tied to the embedding by default. The checkpoints' names are read as Llama's (lm.Renamer).
package falcon

import (
	"fmt"

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/llama"
	"github.com/tputool/tputool/pipeline/lm"
)

// Architecture is the class this package registers.
const Architecture = "FalconForCausalLM"

func init() { lm.Register(Architecture, New) }

// Config is a FalconForCausalLM config.json: Llama's fields and
// FalconConfig's.
type Config struct {
	llama.Config
	NEmbed                 *int     `json:"n_embed"`
	NumKVHeads             *int     `json:"num_kv_heads"`
	NumLnInParallelAttn    *int     `json:"num_ln_in_parallel_attn"`
	LayerNormEpsilon       *float64 `json:"layer_norm_epsilon"`
	Alibi                  bool     `json:"alibi"`
	NewDecoderArchitecture bool     `json:"new_decoder_architecture"`
	MultiQuery             *bool    `json:"multi_query"`
	ParallelAttn           *bool    `json:"parallel_attn"`
	Bias                   bool     `json:"bias"`
	FFNHiddenSize          *int     `json:"ffn_hidden_size"`
	Activation             string   `json:"activation"`
}

// Defaults are FalconConfig's (Falcon-7B's sizes; the head tied, as
// PretrainedConfig's default).
var Defaults = llama.Defaults{
	VocabSize: 65024, Hidden: 4544, Layers: 32, Heads: 71, MaxPositions: 2048,
	Eps: 1e-5, RopeTheta: 10000, Tie: true, Act: "gelu",
	BOS: []int{11}, EOS: []int{11},
}

// Resolve reads a FalconForCausalLM config.json into the options of
// pipeline/llama's decoder.
func Resolve(cfg *config.File) (llama.Options, error) {
	where := lm.ConfigName(cfg)
	var c Config
	if err := cfg.Decode(&c); err != nil {
		return llama.Options{}, err
	}
	if c.ModelType == "RefinedWeb" || c.ModelType == "RefinedWebModel" {
		return llama.Options{}, errs.Unsupportedf("%s: model_type %q is Falcon's first remote-code layout; tputool reads transformers' FalconForCausalLM (model_type falcon)", where, c.ModelType)
	}
	// FalconConfig's one older name: n_embed for hidden_size; the
	// MLP's default width stays 4 × hidden_size as written, as the class
	// computes it before.
	ffnBase := lm.Or(c.HiddenSize, Defaults.Hidden)
	if c.NEmbed != nil {
		c.HiddenSize = c.NEmbed
	}
	heads := lm.Or(c.NumAttentionHeads, Defaults.Heads)
	kv := heads
	switch {
	case c.NewDecoderArchitecture:
		kv = lm.Or(c.NumKVHeads, heads)
	case lm.Or(c.MultiQuery, true):
		kv = 1
	}
	if kv <= 0 || heads%kv != 0 {
		return llama.Options{}, fmt.Errorf("%s: num_kv_heads %d must divide num_attention_heads %d", where, kv, heads)
	}
	c.NumKeyValueHeads, c.HeadDim, c.LayerTypes = &kv, nil, nil
	c.RMSNormEps = c.LayerNormEpsilon // FalconConfig reads neither rms_norm_eps nor hidden_act
	c.HiddenAct = c.Activation
	inner := 4 * ffnBase
	if c.FFNHiddenSize != nil && *c.FFNHiddenSize > 0 {
		inner = *c.FFNHiddenSize
	}
	c.IntermediateSize = &inner
	c.AttentionBias, c.MLPBias = false, false
	o, err := c.Config.Resolve(cfg, Defaults)
	if err != nil {
		return llama.Options{}, err
	}
	if c.Alibi { // Falcon-RW: no rotary; (q·k + alibi)/sqrt(head_dim), alibi BLOOM's
		o.NoRotary()
		o.ALiBi, o.ALiBiScaled = true, true
	}
	o.QKVBias, o.OBias, o.MLPBias = c.Bias, c.Bias, c.Bias
	o.FusedQKV, o.QKVPerHead = true, kv > 1
	o.LayerNorm, o.UngatedMLP = true, true
	parallel := lm.Or(c.ParallelAttn, true)
	switch {
	case c.NewDecoderArchitecture && !parallel:
		return llama.Options{}, errs.Unsupportedf("%s: new_decoder_architecture with parallel_attn false: FalconDecoderLayer's forward reads ln_attn, which it then does not build", where)
	case c.NewDecoderArchitecture && lm.Or(c.NumLnInParallelAttn, 2) == 2:
		o.Parallel, o.Norms = true, llama.Norms{PreAttn: "ln_attn", PreMLP: "ln_mlp"}
	case c.NewDecoderArchitecture && *c.NumLnInParallelAttn == 1:
		o.Parallel, o.Norms = true, llama.Norms{PreAttn: "input_layernorm"}
	case c.NewDecoderArchitecture:
		return llama.Options{}, fmt.Errorf("%s: num_ln_in_parallel_attn must be 1 or 2, got %d", where, *c.NumLnInParallelAttn)
	case parallel:
		o.Parallel, o.Norms = true, llama.Norms{PreAttn: "input_layernorm"}
	default:
		o.Norms = llama.LlamaNorms
	}
	return o, nil
}

// New builds a FalconForCausalLM from its config.json.
func New(cfg *config.File) (lm.Model, error) {
	o, err := Resolve(cfg)
	if err != nil {
		return nil, err
	}
	return &Model{llama.NewModel(o)}, nil
}

// Model is Falcon's decoder in its checkpoints' names. It implements
// lm.Renamer.
type Model struct{ *llama.Model }

var _ lm.Renamer = (*Model)(nil)

// RenameWeight implements lm.Renamer: transformer.word_embeddings is
// model.embed_tokens, transformer.h model.layers (self_attention's
// query_key_value and dense self_attn's qkv_proj and o_proj, the MLP's
// dense_h_to_4h and dense_4h_to_h up_proj and down_proj; the norms keep
// their names), transformer.ln_f model.norm.
func (m *Model) RenameWeight(stored string) string { return names.Rename(stored) }

var names = llama.TransformerNames{
	Top:    [][2]string{{"word_embeddings.weight", "model.embed_tokens.weight"}, {"ln_f.", "model.norm."}},
	Blocks: llama.FusedBlockNames,
}
