// Package gptneox implements GPTNeoXForCausalLM, following transformers'
// models/gpt_neox: EleutherAI's GPT-NeoX-20B and the Pythia suite (70M to
// 12B), and the other models of that class, where their repositories
// hold safetensors (tputool reads no pytorch_model.bin).
//
// A GPT-NeoX layer is Llama's (pipeline/llama) with:
//   - LayerNorms with biases (input_layernorm, post_attention_layernorm,
//     gpt_neox.final_layer_norm);
//   - the query, key and value projections in one matrix,
//     attention.query_key_value [3·hidden, hidden] with a bias, whose
//     rows go by head: each head's query, key and value in turn
//     (llama.Options.QKVPerHead); attention.dense with a bias;
//     attention_bias false drops both biases;
//   - the rotary over the first rotary_pct of each head (0.25), in the
//     rotate-half convention, base rotary_emb_base (10000): GPTNeoXConfig
//     takes these two over a config's rope_theta and
//     partial_rotary_factor, and transformers v5 writes them into
//     rope_parameters, which win;
//   - an ungated MLP, dense_4h_to_h(act(dense_h_to_4h(x))), with biases
//     (hidden_act "gelu": erf GELU);
//   - with use_parallel_residual (the default), the attention and the MLP
//     side by side on two LayerNorms of the layer's input:
//     x + attn(ln1(x)) + mlp(ln2(x)); without, in sequence;
//   - gpt_neox.embed_in, and the embed_out head (embed_in with
//     tie_word_embeddings).
//
// num_key_value_heads and head_dim are not read, as GPTNeoXAttention reads
// neither: every head has its key and value, hidden_size /
// num_attention_heads wide.
//
// The checkpoints' names are read as Llama's (lm.Renamer). The causal-mask
// and rotary buffers old checkpoints hold (attention.bias,
// attention.masked_bias, attention.rotary_emb.inv_freq) are skipped, as
// transformers ignores them.
package gptneox

import (
	"encoding/json"
	"regexp"
	"strings"

	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/llama"
	"github.com/tputool/tputool/pipeline/lm"
)

// Architecture is the class this package registers.
const Architecture = "GPTNeoXForCausalLM"

func init() { lm.Register(Architecture, New) }

// Defaults are GPTNeoXConfig's (GPT-NeoX-20B's sizes).
var Defaults = llama.Defaults{
	VocabSize: 50432, Hidden: 6144, Intermediate: 24576, Layers: 44, Heads: 64,
	MaxPositions: 2048, Eps: 1e-5, RopeTheta: 10000, Tie: false, Act: "gelu",
	BOS: []int{0}, EOS: []int{2},
}

// defaultRotaryPct is GPTNeoXConfig's rotary_pct.
const defaultRotaryPct = 0.25

// Config is a GPTNeoXForCausalLM config.json: Llama's fields and
// GPT-NeoX's own.
type Config struct {
	llama.Config
	LayerNormEps        *float64 `json:"layer_norm_eps"`
	RotaryPct           *float64 `json:"rotary_pct"`
	RotaryEmbBase       *float64 `json:"rotary_emb_base"`
	UseParallelResidual *bool    `json:"use_parallel_residual"`
	AttentionBiasNeoX   *bool    `json:"attention_bias"`
}

// Resolve reads a GPTNeoXForCausalLM config.json into the options of
// pipeline/llama's decoder.
func Resolve(cfg *config.File) (llama.Options, error) {
	var c Config
	if err := cfg.Decode(&c); err != nil {
		return llama.Options{}, err
	}
	c.NumKeyValueHeads, c.HeadDim = nil, nil // GPTNeoXAttention: every head, hidden_size / num_attention_heads wide
	c.RMSNormEps = c.LayerNormEps
	c.LayerTypes = nil
	// rotary_emb_base and rotary_pct over rope_theta and
	// partial_rotary_factor, as GPTNeoXConfig sets them; rope_parameters
	// (v5's) still overrides both (nn.ConfigRope).
	raw := withKey(cfg.Raw, "rope_theta", lm.Or(c.RotaryEmbBase, Defaults.RopeTheta))
	raw = withKey(raw, "partial_rotary_factor", lm.Or(c.RotaryPct, defaultRotaryPct))
	withRope := *cfg
	withRope.Raw = raw
	o, err := c.Config.Resolve(&withRope, Defaults)
	if err != nil {
		return llama.Options{}, err
	}
	bias := lm.Or(c.AttentionBiasNeoX, true)
	o.QKVBias, o.OBias, o.MLPBias = bias, bias, true
	o.FusedQKV, o.QKVPerHead = true, true
	o.LayerNorm, o.UngatedMLP = true, true
	o.Parallel = lm.Or(c.UseParallelResidual, true)
	o.Norms = llama.Norms{PreAttn: "input_layernorm", PreMLP: "post_attention_layernorm"}
	return o, nil
}

// withKey is raw with key set to v.
func withKey(raw map[string]json.RawMessage, key string, v float64) map[string]json.RawMessage {
	out := make(map[string]json.RawMessage, len(raw)+1)
	for k, x := range raw {
		out[k] = x
	}
	b, _ := json.Marshal(v)
	out[key] = b
	return out
}

// New builds a GPTNeoXForCausalLM from its config.json.
func New(cfg *config.File) (lm.Model, error) {
	o, err := Resolve(cfg)
	if err != nil {
		return nil, err
	}
	return &Model{llama.NewModel(o)}, nil
}

// Model is GPT-NeoX's decoder in its checkpoints' names. It implements
// lm.Renamer and lm.Skipper.
type Model struct{ *llama.Model }

var (
	_ lm.Renamer = (*Model)(nil)
	_ lm.Skipper = (*Model)(nil)
)

// renamed maps the modules of a GPT-NeoX layer to Llama's.
var renamed = strings.NewReplacer(
	".attention.query_key_value.", ".self_attn.qkv_proj.",
	".attention.dense.", ".self_attn.o_proj.",
	".mlp.dense_h_to_4h.", ".mlp.up_proj.",
	".mlp.dense_4h_to_h.", ".mlp.down_proj.",
)

// RenameWeight implements lm.Renamer: gpt_neox.embed_in is
// model.embed_tokens, gpt_neox.layers model.layers (attention's
// query_key_value and dense self_attn's qkv_proj and o_proj, the MLP's
// dense_h_to_4h and dense_4h_to_h up_proj and down_proj),
// gpt_neox.final_layer_norm model.norm, embed_out lm_head.
func (m *Model) RenameWeight(stored string) string {
	switch {
	case stored == "gpt_neox.embed_in.weight":
		return "model.embed_tokens.weight"
	case stored == "embed_out.weight":
		return "lm_head.weight"
	case strings.HasPrefix(stored, "gpt_neox.final_layer_norm."):
		return "model.norm." + strings.TrimPrefix(stored, "gpt_neox.final_layer_norm.")
	case strings.HasPrefix(stored, "gpt_neox.layers."):
		return renamed.Replace("model.layers." + strings.TrimPrefix(stored, "gpt_neox.layers."))
	}
	return stored
}

// buffers matches the buffers old checkpoints saved with the weights, as
// stored or as renamed (the loader asks after renaming).
var buffers = regexp.MustCompile(`^(gpt_neox|model)\.layers\.\d+\.attention\.(bias|masked_bias|rotary_emb\.inv_freq)$`)

// SkipWeight implements lm.Skipper: the causal-mask and rotary buffers
// (transformers' _keys_to_ignore_on_load_unexpected).
func (m *Model) SkipWeight(name string) (string, bool) {
	return lm.SkipMatched(name, "the attention's causal-mask and rotary buffers, which transformers recomputes", buffers)
}
