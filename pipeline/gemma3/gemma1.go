package gemma3

import (
	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/llama"
	"github.com/tputool/tputool/pipeline/lm"
)

// Gemma1 is Gemma 1's class (gemma-2b, gemma-7b, Gemma 1.1, CodeGemma):
// models/gemma/modular_gemma.py. Its layer is Llama's (pipeline/llama:
// input_layernorm, then post_attention_layernorm before the MLP), with
// Gemma's RMSNorm (a (1 + w) scale in float32: llama.Options.NormPlusOne),
// the embeddings times sqrt(hidden_size) rounded to the compute dtype,
// a gated GELU MLP, head_dim 256 and tied embeddings by default.
//
// The MLP's activation is hidden_activation when the config sets it, else
// gelu_pytorch_tanh whatever hidden_act says: the first releases' configs
// name "gelu" in hidden_act, and transformers v4's GemmaMLP ran them with
// the tanh approximation the models were trained with (its v5 reads
// hidden_act).
const Gemma1 = "GemmaForCausalLM"

func init() {
	lm.Register(Gemma1, NewGemma1)
}

// Gemma1Defaults are GemmaConfig's (gemma-7b's sizes).
var Gemma1Defaults = llama.Defaults{
	VocabSize: 256000, Hidden: 3072, Intermediate: 24576, Layers: 28, Heads: 16,
	MaxPositions: 8192, Eps: 1e-6, RopeTheta: 10000, Tie: true, Act: "gelu_pytorch_tanh",
}

// GemmaConfig's defaults llama.Defaults does not carry.
const (
	gemma1HeadDim = 256
	gemma1BOS     = 2
	gemma1EOS     = 1
)

// ResolveGemma1 reads a GemmaForCausalLM config.json into the options of
// pipeline/llama's decoder.
func ResolveGemma1(cfg *config.File) (llama.Options, error) {
	var c struct {
		llama.Config
		HiddenActivation string `json:"hidden_activation"`
	}
	if err := cfg.Decode(&c); err != nil {
		return llama.Options{}, err
	}
	if c.HeadDim == nil && !cfg.Has("head_dim") {
		hd := gemma1HeadDim
		c.HeadDim = &hd
	}
	if c.NumKeyValueHeads == nil && !cfg.Has("num_key_value_heads") {
		kv := lm.Or(c.NumAttentionHeads, Gemma1Defaults.Heads)
		c.NumKeyValueHeads = &kv
	}
	c.HiddenAct = c.HiddenActivation // "" takes Gemma1Defaults.Act
	o, err := c.Resolve(cfg, Gemma1Defaults)
	if err != nil {
		return llama.Options{}, err
	}
	o.OBias, o.MLPBias = o.QKVBias, false // attention_bias: every projection
	o.NormPlusOne, o.EmbedSqrtHidden = true, true
	if !cfg.Has("bos_token_id") {
		o.Spec.BOS = gemma1BOS
	}
	if !cfg.Has("eos_token_id") {
		o.Spec.EOS = []int{gemma1EOS}
	}
	return o, nil
}

// NewGemma1 builds a GemmaForCausalLM from its config.json.
func NewGemma1(cfg *config.File) (lm.Model, error) {
	o, err := ResolveGemma1(cfg)
	if err != nil {
		return nil, err
	}
	return llama.NewModel(o), nil
}
