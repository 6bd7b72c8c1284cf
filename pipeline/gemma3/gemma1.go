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
// name "gelu" in hidden_act, and transformers' GemmaMLP from v4.38 to
// v4.47 ran them with the tanh approximation the models were trained
// with; later versions read hidden_act (the exact GELU there, about 1e-4
// from the tanh one on these activations).
const Gemma1 = "GemmaForCausalLM"

func init() {
	lm.Register(Gemma1, NewGemma1)
}

// Gemma1Defaults are GemmaConfig's (gemma-7b's sizes).
var Gemma1Defaults = llama.Defaults{
	VocabSize: 256000, Hidden: 3072, Intermediate: 24576, Layers: 28, Heads: 16,
	MaxPositions: 8192, Eps: 1e-6, RopeTheta: 10000, Tie: true, Act: "gelu_pytorch_tanh",
	KVHeads: 16, HeadDim: 256, BOS: []int{2}, EOS: []int{1},
}

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
	c.HiddenAct = c.HiddenActivation // "" takes Gemma1Defaults.Act
	o, err := c.Resolve(cfg, Gemma1Defaults)
	if err != nil {
		return llama.Options{}, err
	}
	o.OBias, o.MLPBias = o.QKVBias, false // attention_bias: every projection
	o.NormPlusOne, o.EmbedSqrtHidden = true, true
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
