// Package gpt2 implements GPT2LMHeadModel, following transformers'
// models/gpt2: OpenAI's GPT-2 (gpt2, gpt2-medium, -large, -xl),
// DistilGPT2, and the many models trained or fine-tuned on its layout
// (DialoGPT, the TinyStories models, CodeParrot); and
// GPTBigCodeForCausalLM (models/gpt_bigcode: BigCode's StarCoder,
// StarCoderBase and SantaCoder, WizardCoder, SQLCoder, Granite's 20B and
// 34B code models), GPT-2's block with multi-query attention.
//
// A GPT-2 layer is Llama's (pipeline/llama) with LayerNorms that have a
// bias (ln_1 before the attention, ln_2 before the MLP), no rotary
// embedding and an ungated MLP, c_proj(act(c_fc(x))) with biases, gelu_new
// by default (activation_function). The attention's query, key and value
// are one projection, c_attn, split in that order, with a bias
// (llama.Options.FusedQKV); c_proj has a bias too. The positions are a
// learned table, wpe, whose row for each position is added to the token
// embeddings (llama.Options.Positions). transformer.ln_f is the final
// LayerNorm; lm_head is tied to wte.
//
// GPT-2's projections are transformers' Conv1D modules, whose weights are
// stored [in, out], the transpose of a Linear's: every matrix of a block
// is declared lm.WeightSpec.Transposed and turned at load. The
// checkpoints' names are read as Llama's (lm.Renamer), with or without
// the transformer. prefix (GPT2Model's own uploads, openai-community/gpt2
// among them, have none); the causal-mask buffers they hold (attn.bias,
// attn.masked_bias) are skipped.
//
// GPTBigCode's block is GPT-2's with nn.Linear projections (stored [out,
// in], as the decoder reads them) and, with multi_query (the default), one
// key and value head for all the query heads: c_attn's rows are the
// queries, then the key, then the value. Without multi_query each head's
// query, key and value rows lie together ([heads, 3, head_dim]:
// llama.Options.QKVPerHead).
package gpt2

import (
	"regexp"
	"strings"

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/llama"
	"github.com/tputool/tputool/pipeline/lm"
)

// Architecture is the class this package registers.
const Architecture = "GPT2LMHeadModel"

func init() { lm.Register(Architecture, New) }

// Config is a GPT2LMHeadModel config.json: GPT2Config's names (n_embd,
// n_layer, n_head...) besides the fields Llama's config shares.
type Config struct {
	llama.Config
	llama.GPT2Names
	// ScaleAttnWeights divides the attention's scores by the square
	// root of the head size (true when absent).
	ScaleAttnWeights *bool `json:"scale_attn_weights"`
	// ScaleAttnByInverseLayerIdx divides layer i's scores by i + 1 as
	// well (Stanford CRFM's Mistral GPT-2s): refused.
	ScaleAttnByInverseLayerIdx bool `json:"scale_attn_by_inverse_layer_idx"`
	// AddCrossAttention gives each block a cross-attention over an
	// encoder's states (GPT-2 as a decoder of an encoder-decoder):
	// refused.
	AddCrossAttention bool `json:"add_cross_attention"`
}

// Defaults are GPT2Config's (gpt2's sizes); intermediate_size is n_inner,
// 4 × n_embd when null.
var Defaults = llama.Defaults{
	VocabSize: 50257, Hidden: 768, Layers: 12, Heads: 12, MaxPositions: 1024,
	Eps: 1e-5, RopeTheta: 10000, Tie: true, Act: "gelu_new",
	BOS: []int{50256}, EOS: []int{50256},
}

// BigCodeArchitecture is GPTBigCode's class, which this package registers
// too.
const BigCodeArchitecture = "GPTBigCodeForCausalLM"

func init() { lm.Register(BigCodeArchitecture, NewBigCode) }

// BigCodeDefaults are GPTBigCodeConfig's: GPT-2's, with gelu_pytorch_tanh.
var BigCodeDefaults = func() llama.Defaults {
	d := Defaults
	d.Act = "gelu_pytorch_tanh"
	return d
}()

// BigCodeConfig is a GPTBigCodeForCausalLM config.json: GPT-2's fields and
// multi_query.
type BigCodeConfig struct {
	Config
	// MultiQuery gives all the query heads one key and value head
	// (true when absent).
	MultiQuery *bool `json:"multi_query"`
}

// Resolve reads a GPT2LMHeadModel config.json into the options of
// pipeline/llama's decoder. GPT2Config's names and defaults only: Llama's
// names where the config writes both (attribute_map's, set last), and
// neither intermediate_size, rms_norm_eps, hidden_act, num_key_value_heads,
// head_dim nor any rope field.
func Resolve(cfg *config.File) (llama.Options, error) {
	var c Config
	if err := cfg.Decode(&c); err != nil {
		return llama.Options{}, err
	}
	return c.resolve(cfg, Defaults)
}

// ResolveBigCode reads a GPTBigCodeForCausalLM config.json as Resolve
// reads GPT-2's: the same fields and refusals, GPTBigCodeConfig's
// defaults, and multi_query's one key and value head or c_attn's rows by
// head.
func ResolveBigCode(cfg *config.File) (llama.Options, error) {
	var c BigCodeConfig
	if err := cfg.Decode(&c); err != nil {
		return llama.Options{}, err
	}
	o, err := c.resolve(cfg, BigCodeDefaults)
	if err != nil {
		return llama.Options{}, err
	}
	if lm.Or(c.MultiQuery, true) {
		o.Spec.KVHeads = 1
	} else {
		o.QKVPerHead = true
	}
	return o, nil
}

func (c *Config) resolve(cfg *config.File, d llama.Defaults) (llama.Options, error) {
	where := lm.ConfigName(cfg)
	switch {
	case c.AddCrossAttention:
		return llama.Options{}, errs.Unsupportedf("%s: add_cross_attention true (a decoder with cross-attention over an encoder's states) is not supported", where)
	}
	// GPT2Config's names (GPT2Block: n_inner, or 4 × n_embd;
	// GPT2Attention: a key and value a head).
	c.GPT2Names.Apply(&c.Config, d)
	// No rotary: the rope fields are not read (the decoder builds a table
	// nobody uses from the defaults).
	o, err := c.Config.Resolve(cfg.Without(config.RopeFields...), d)
	if err != nil {
		return llama.Options{}, err
	}
	o.NoRotary()
	o.Positions = llama.Positions{Rows: o.Spec.MaxPositions}
	if c.ScaleAttnWeights != nil && !*c.ScaleAttnWeights {
		o.AttnScale = 1
	}
	o.AttnScaleByLayer = c.ScaleAttnByInverseLayerIdx
	o.FusedQKV, o.QKVBias, o.OBias, o.MLPBias, o.HeadBias = true, true, true, true, false
	o.LayerNorm, o.UngatedMLP = true, true
	return o, nil
}

// New builds a GPT2LMHeadModel from its config.json.
func New(cfg *config.File) (lm.Model, error) {
	o, err := Resolve(cfg)
	if err != nil {
		return nil, err
	}
	return &Model{Model: llama.NewModel(o), conv1D: true}, nil
}

// NewBigCode builds a GPTBigCodeForCausalLM from its config.json.
func NewBigCode(cfg *config.File) (lm.Model, error) {
	o, err := ResolveBigCode(cfg)
	if err != nil {
		return nil, err
	}
	return &Model{Model: llama.NewModel(o)}, nil
}

// Model is GPT-2's (or GPTBigCode's) decoder in its checkpoints' names and
// layout. It implements lm.Renamer and lm.Skipper.
type Model struct {
	*llama.Model
	// conv1D: the block's matrices are stored [in, out] (GPT-2's Conv1D;
	// GPTBigCode's nn.Linear are not).
	conv1D bool
}

var (
	_ lm.Renamer = (*Model)(nil)
	_ lm.Skipper = (*Model)(nil)
)

// LayerWeights implements lm.Model: the decoder's, for GPT-2 each matrix
// stored transposed (Conv1D's [in, out]).
func (m *Model) LayerWeights(i int) []lm.WeightSpec {
	ws := m.Model.LayerWeights(i)
	for j := range ws {
		if ws[j].Matmul && m.conv1D {
			ws[j].Transposed = true
		}
	}
	return ws
}

// renamed maps the modules of a GPT-2 block to Llama's.
var renamed = strings.NewReplacer(
	".ln_1.", ".input_layernorm.",
	".ln_2.", ".post_attention_layernorm.",
	".attn.c_attn.", ".self_attn.qkv_proj.",
	".attn.c_proj.", ".self_attn.o_proj.",
	".mlp.c_fc.", ".mlp.up_proj.",
	".mlp.c_proj.", ".mlp.down_proj.",
)

// RenameWeight implements lm.Renamer: [transformer.]wte is
// model.embed_tokens, wpe model.embed_positions, h model.layers (ln_1
// input_layernorm, ln_2 post_attention_layernorm, attn.c_attn
// self_attn.qkv_proj, attn.c_proj self_attn.o_proj, mlp.c_fc and
// mlp.c_proj up_proj and down_proj), ln_f model.norm.
func (m *Model) RenameWeight(stored string) string { return names.Rename(stored) }

var names = llama.TransformerNames{
	Optional: true,
	Top:      [][2]string{{"wte.weight", "model.embed_tokens.weight"}, {"wpe.weight", llama.PositionsWeight}, {"ln_f.", "model.norm."}},
	Blocks:   renamed,
}

// buffers matches the causal-mask buffers checkpoints saved with the
// weights, as stored or as renamed (the loader asks after renaming).
var buffers = regexp.MustCompile(`^((transformer\.)?h|model\.layers)\.\d+\.(attn|self_attn)\.(bias|masked_bias)$`)

// SkipWeight implements lm.Skipper: the causal-mask buffers.
func (m *Model) SkipWeight(name string) (string, bool) {
	return lm.SkipMatched(name, lm.MaskBuffersReason, buffers)
}
