// Package bitnet implements Microsoft's BitNet b1.58 (BitNetForCausalLM:
// bitnet-b1.58-2B-4T), following transformers' models/bitnet and
// integrations/bitnet.py.
//
// BitNet is Llama's decoder (pipeline/llama) with two more RMSNorms
// (llama.Options.SubNorms): attn_sub_norm on the attention's output before
// o_proj, and ffn_sub_norm on the gated product act(gate_proj(x)) ·
// up_proj(x) before down_proj; hidden_act is relu2 (squared ReLU) by
// default. Its checkpoints are BitNet-quantized (quantization_config
// quant_method "bitnet"): every projection's weight ternary, packed four
// to a byte with one scale a matrix, which pipeline/lm decodes at load,
// and every projection's input rounded to int8 per token in the graph
// (nn.ActQuant8). The head stays float.
package bitnet

import (
	"fmt"

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/llama"
	"github.com/tputool/tputool/pipeline/lm"
)

func init() {
	lm.Register("BitNetForCausalLM", New)
}

// Defaults are BitNetConfig's (bitnet-b1.58-2B-4T's sizes): 5 KV heads
// when absent (an explicit null: the heads), relu2, untied, bos 128000
// and eos 128001.
var Defaults = llama.Defaults{
	VocabSize: 128256, Hidden: 2560, Intermediate: 6912, Layers: 30, Heads: 20,
	MaxPositions: 2048, Eps: 1e-5, RopeTheta: 500000, Tie: false, Act: "relu2",
	KVHeads: 5, BOS: []int{128000}, EOS: []int{128001},
}

// Resolve reads a BitNetForCausalLM config.json into the options of
// pipeline/llama's decoder.
func Resolve(cfg *config.File) (llama.Options, error) {
	where := lm.ConfigName(cfg)
	var c llama.Config
	if err := cfg.Decode(&c); err != nil {
		return llama.Options{}, err
	}
	c.MLPBias = false // GemmaMLP: no biases
	o, err := c.Resolve(cfg, Defaults)
	if err != nil {
		return llama.Options{}, err
	}
	s := &o.Spec
	for _, k := range s.LayerKinds {
		if k != lm.KindFull {
			return llama.Options{}, errs.Unsupportedf("%s: layer_types names %q layers; BitNet's layers all attend in full", where, k)
		}
	}
	if s.Heads*s.HeadDim != s.Hidden {
		return llama.Options{}, fmt.Errorf("%s: num_attention_heads %d × head_dim %d must be hidden_size %d (attn_sub_norm is hidden_size wide)", where, s.Heads, s.HeadDim, s.Hidden)
	}
	o.SubNorms = true
	return o, nil
}

// New builds a BitNetForCausalLM from its config.json.
func New(cfg *config.File) (lm.Model, error) {
	o, err := Resolve(cfg)
	if err != nil {
		return nil, err
	}
	return llama.NewModel(o), nil
}
