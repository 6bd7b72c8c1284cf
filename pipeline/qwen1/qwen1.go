// Package qwen1 implements QWenLMHeadModel, the class of Alibaba's Qwen 1
// (Qwen-1.8B, Qwen-7B, Qwen-14B, Qwen-72B and their chat models, and the
// models fine-tuned on them), following the modeling_qwen.py and
// configuration_qwen.py their repositories ship (remote code; Qwen 1.5
// and later are Qwen2ForCausalLM, pipeline/qwen2).
//
// A Qwen block is Llama's (pipeline/llama) under GPT-2-style names:
// ln_1 and ln_2 are RMSNorms (layer_norm_epsilon); attn.c_attn is the
// query, key and value projections in one matrix, split in that order,
// always with a bias; attn.c_proj the output projection; the MLP is
// c_proj(w1(x) · silu(w2(x))), so w2 is the gate and w1 the up
// projection, each intermediate_size / 2 wide (QWenMLP's ff_dim_in); the
// output projections carry biases unless no_bias (the releases' true).
// Every head has its key and value, kv_channels wide; the rotary turns
// halves of the first rotary_pct of each head, base rotary_emb_base.
// transformer.wte is the embedding, transformer.ln_f the final norm,
// lm_head the head (untied).
//
// use_dynamic_ntk and use_logn_attn (the releases' true) change nothing
// below seq_length: the NTK alpha is 1 for a prompt that fits, and the
// log-n factor 1 for the positions below it. Past it the code keeps the
// alpha of the prompt for the steps after it, so tputool bounds the
// context at seq_length.
package qwen1

import (
	"encoding/json"
	"regexp"
	"strings"

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/llama"
	"github.com/tputool/tputool/pipeline/lm"
)

// Architecture is the class this package registers.
const Architecture = "QWenLMHeadModel"

func init() { lm.Register(Architecture, New) }

// Config is a QWenLMHeadModel config.json: QWenConfig's names besides the
// fields Llama's config shares.
type Config struct {
	llama.Config
	LayerNormEpsilon *float64 `json:"layer_norm_epsilon"`
	KVChannels       *int     `json:"kv_channels"`
	RotaryPct        *float64 `json:"rotary_pct"`
	RotaryEmbBase    *float64 `json:"rotary_emb_base"`
	UseDynamicNTK    *bool    `json:"use_dynamic_ntk"`
	UseLognAttn      *bool    `json:"use_logn_attn"`
	SeqLength        *int     `json:"seq_length"`
	NoBias           *bool    `json:"no_bias"`
}

// defaultKVChannels is QWenConfig's kv_channels.
const defaultKVChannels = 128

// Defaults are QWenConfig's.
var Defaults = llama.Defaults{
	VocabSize: 151936, Hidden: 4096, Intermediate: 22016, Layers: 32, Heads: 32, MaxPositions: 8192,
	Eps: 1e-6, RopeTheta: 10000, Tie: false, Act: "silu",
}

// Resolve reads a QWenLMHeadModel config.json into the options of
// pipeline/llama's decoder.
func Resolve(cfg *config.File) (llama.Options, error) {
	var c Config
	if err := cfg.Decode(&c); err != nil {
		return llama.Options{}, err
	}
	where := lm.ConfigName(cfg)
	// scale_attn_weights is not read: QWenAttention sets it true itself.
	// The attention splits c_attn's output by hidden_size and its heads
	// by hidden_size / num_attention_heads, so kv_channels (QWenConfig's
	// default 128) must make them agree.
	hidden := lm.Or(c.HiddenSize, Defaults.Hidden)
	heads := lm.Or(c.NumAttentionHeads, Defaults.Heads)
	kv := lm.Or(c.KVChannels, defaultKVChannels)
	if kv*heads != hidden {
		return llama.Options{}, errs.Unsupportedf("%s: kv_channels %d × num_attention_heads %d is not hidden_size %d, which QWenAttention's split needs", where, kv, heads, hidden)
	}
	c.KVChannels = &kv
	inter := lm.Or(c.IntermediateSize, Defaults.Intermediate)
	if inter%2 != 0 {
		return llama.Options{}, errs.Unsupportedf("%s: intermediate_size %d is odd; QWenMLP's w1 and w2 are half of it each", where, inter)
	}
	half := inter / 2
	c.IntermediateSize = &half
	c.HeadDim, c.NumKeyValueHeads, c.LayerTypes = c.KVChannels, nil, nil
	c.RMSNormEps = c.LayerNormEpsilon
	c.AttentionBias, c.MLPBias = false, false
	if c.HiddenAct == "" {
		c.HiddenAct = "silu"
	}
	// rotary_emb_base and rotary_pct are the rope's base and its part of
	// each head; the code reads no rope_theta or rope_scaling.
	raw := map[string]json.RawMessage{}
	for k, v := range cfg.Raw {
		if k != "rope_scaling" && k != "rope_parameters" {
			raw[k] = v
		}
	}
	raw["rope_theta"], _ = json.Marshal(lm.Or(c.RotaryEmbBase, Defaults.RopeTheta))
	raw["partial_rotary_factor"], _ = json.Marshal(lm.Or(c.RotaryPct, 1.0))
	withRope := *cfg
	withRope.Raw = raw
	o, err := c.Config.Resolve(&withRope, Defaults)
	if err != nil {
		return llama.Options{}, err
	}
	if (lm.Or(c.UseDynamicNTK, true) || lm.Or(c.UseLognAttn, true)) && c.SeqLength != nil && *c.SeqLength > 0 {
		o.Spec.MaxPositions = min(o.Spec.MaxPositions, *c.SeqLength)
	}
	bias := !lm.Or(c.NoBias, true)
	o.FusedQKV, o.QKVBias = true, true
	o.OBias, o.MLPBias = bias, bias
	return o, nil
}

// New builds a QWenLMHeadModel from its config.json.
func New(cfg *config.File) (lm.Model, error) {
	o, err := Resolve(cfg)
	if err != nil {
		return nil, err
	}
	return &Model{llama.NewModel(o)}, nil
}

// Model is Qwen 1's decoder in its checkpoints' names. It implements
// lm.Renamer and lm.Skipper.
type Model struct{ *llama.Model }

var (
	_ lm.Renamer = (*Model)(nil)
	_ lm.Skipper = (*Model)(nil)
)

// RenameWeight implements lm.Renamer: transformer.wte is
// model.embed_tokens, transformer.h model.layers (ln_1 input_layernorm,
// ln_2 post_attention_layernorm, attn's c_attn and c_proj self_attn's
// qkv_proj and o_proj, the MLP's w2, w1 and c_proj gate_proj, up_proj
// and down_proj), transformer.ln_f model.norm.
func (m *Model) RenameWeight(stored string) string { return names.Rename(stored) }

var names = llama.TransformerNames{
	Top: [][2]string{{"wte.weight", "model.embed_tokens.weight"}, {"ln_f.", "model.norm."}},
	Blocks: strings.NewReplacer(
		".ln_1.", ".input_layernorm.",
		".ln_2.", ".post_attention_layernorm.",
		".attn.c_attn.", ".self_attn.qkv_proj.",
		".attn.c_proj.", ".self_attn.o_proj.",
		".mlp.w1.", ".mlp.up_proj.",
		".mlp.w2.", ".mlp.gate_proj.",
		".mlp.c_proj.", ".mlp.down_proj.",
	),
}

// buffers matches the buffers old checkpoints saved with the weights
// (QWenLMHeadModel's _keys_to_ignore_on_load_*), as stored or renamed.
var buffers = regexp.MustCompile(`^(transformer\.h|model\.layers)\.\d+\.(attn|self_attn)\.(masked_bias|rotary_emb\.inv_freq)$`)

// SkipWeight implements lm.Skipper: the attention's masked_bias and
// rotary buffers.
func (m *Model) SkipWeight(name string) (string, bool) {
	return lm.SkipMatched(name, "the attention's mask and rotary buffers, which the code recomputes", buffers)
}
