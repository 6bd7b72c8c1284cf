// Package gptj implements GPTJForCausalLM, following transformers'
// models/gptj: EleutherAI's GPT-J-6B and the models trained from it or
// on its layout (GPT4All-J, Pygmalion 6B, CodeGen's successors'
// conversions).
//
// A GPT-J layer is Llama's (pipeline/llama) run in parallel, as Phi's:
// one LayerNorm with a bias (ln_1) feeds the attention and the MLP, both
// added to the residual (llama.Options.Parallel). The attention's
// q_proj, k_proj, v_proj and out_proj have no biases; the rotary turns
// the first rotary_dim dims of each head (with rotary_dim null, tputool
// turns the whole head, where transformers' tables span n_embd) as
// adjacent pairs (rotate_every_two: llama.Options.RopePairs),
// base 10000; the MLP is fc_out(act(fc_in(x))) with biases, gelu_new by
// default (activation_function); transformer.ln_f is the final
// LayerNorm, and lm_head has a bias. The checkpoints' names are read as
// Llama's (lm.Renamer); the causal-mask buffers old checkpoints hold
// (attn.bias, attn.masked_bias) are skipped.
package gptj

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/llama"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/nn"
)

// Architecture is the class this package registers.
const Architecture = "GPTJForCausalLM"

func init() { lm.Register(Architecture, New) }

// Config is a GPTJForCausalLM config.json: GPTJConfig's names (n_embd,
// n_layer, n_head...) besides the fields Llama's config shares.
type Config struct {
	llama.Config
	llama.GPT2Names
	RotaryDim *int `json:"rotary_dim"`
}

// Defaults are GPTJConfig's (GPT-J-6B's sizes); intermediate_size is
// n_inner, 4 × n_embd when null.
var Defaults = llama.Defaults{
	VocabSize: 50400, Hidden: 4096, Layers: 28, Heads: 16, MaxPositions: 2048,
	Eps: 1e-5, RopeTheta: 10000, Tie: false, Act: "gelu_new",
	BOS: []int{50256}, EOS: []int{50256},
}

// defaultRotaryDim is GPTJConfig's rotary_dim.
const defaultRotaryDim = 64

// Resolve reads a GPTJForCausalLM config.json into the options of
// pipeline/llama's decoder. GPTJConfig's names and defaults only: Llama's
// names where the config writes both (attribute_map's, set last), and
// neither intermediate_size, rms_norm_eps, hidden_act nor any rope field
// (GPTJAttention's rotary has a fixed base of 10000).
func Resolve(cfg *config.File) (llama.Options, error) {
	where := lm.ConfigName(cfg)
	var c Config
	if err := cfg.Decode(&c); err != nil {
		return llama.Options{}, err
	}
	// GPTJConfig's names (GPTJMLP: n_inner, or 4 × n_embd;
	// GPTJAttention: a key and value a head).
	c.GPT2Names.Apply(&c.Config, Defaults)
	// The rotary is GPT-J's own: base 10000 over rotary_dim dims (built
	// below); no rope field of the config is read.
	o, err := c.Config.Resolve(cfg.Without(config.RopeFields...), Defaults)
	if err != nil {
		return llama.Options{}, err
	}
	headDim := o.Spec.HeadDim
	rot := defaultRotaryDim
	switch {
	case c.RotaryDim != nil:
		rot = *c.RotaryDim
	case cfg.Has("rotary_dim"): // null: tputool turns the whole head (transformers' tables then span n_embd)
		rot = headDim
	}
	if rot <= 0 || rot > headDim || rot%2 != 0 {
		return llama.Options{}, fmt.Errorf("%s: rotary_dim %d must be even and in [2, head dim %d]", where, rot, headDim)
	}
	// A rotary over rot dims (the head's first): its tables are a head of
	// rot's, built from the integer itself, not from a factor rounded back.
	if o.Rope, err = nn.NewRope(nn.RopeParams{Theta: Defaults.RopeTheta, HeadDim: rot, MaxPositions: o.Spec.MaxPositions}); err != nil {
		return llama.Options{}, fmt.Errorf("%s: %w", where, err)
	}
	o.QKVBias, o.OBias, o.MLPBias, o.HeadBias = false, false, true, true
	o.LayerNorm, o.Parallel, o.UngatedMLP, o.RopePairs = true, true, true, true
	o.Norms = llama.Norms{PreAttn: "input_layernorm"}
	return o, nil
}

// New builds a GPTJForCausalLM from its config.json.
func New(cfg *config.File) (lm.Model, error) {
	o, err := Resolve(cfg)
	if err != nil {
		return nil, err
	}
	return &Model{llama.NewModel(o)}, nil
}

// Model is GPT-J's decoder in its checkpoints' names. It implements
// lm.Renamer and lm.Skipper.
type Model struct{ *llama.Model }

var (
	_ lm.Renamer = (*Model)(nil)
	_ lm.Skipper = (*Model)(nil)
)

// renamed maps the modules of a GPT-J block to Llama's.
var renamed = strings.NewReplacer(
	".ln_1.", ".input_layernorm.",
	".attn.q_proj.", ".self_attn.q_proj.",
	".attn.k_proj.", ".self_attn.k_proj.",
	".attn.v_proj.", ".self_attn.v_proj.",
	".attn.out_proj.", ".self_attn.o_proj.",
	".mlp.fc_in.", ".mlp.up_proj.",
	".mlp.fc_out.", ".mlp.down_proj.",
)

// RenameWeight implements lm.Renamer: transformer.wte is
// model.embed_tokens, transformer.h model.layers (ln_1 input_layernorm,
// attn self_attn with out_proj as o_proj, the MLP's fc_in and fc_out
// up_proj and down_proj), transformer.ln_f model.norm.
func (m *Model) RenameWeight(stored string) string { return names.Rename(stored) }

var names = llama.TransformerNames{
	Top:    [][2]string{{"wte.weight", "model.embed_tokens.weight"}, {"ln_f.", "model.norm."}},
	Blocks: renamed,
}

// buffers matches the causal-mask buffers old checkpoints saved with the
// weights, as stored or as renamed (the loader asks after renaming).
var buffers = regexp.MustCompile(`^(transformer\.h|model\.layers)\.\d+\.(attn|self_attn)\.(bias|masked_bias)$`)

// SkipWeight implements lm.Skipper: the causal-mask buffers.
func (m *Model) SkipWeight(name string) (string, bool) {
	return lm.SkipMatched(name, lm.MaskBuffersReason, buffers)
}
