// Package hunyuan implements Tencent's HunYuan decoders, following
// transformers' models/hunyuan_v1_dense (HunYuanDenseV1ForCausalLM:
// Hunyuan-0.5B to 7B) and models/hunyuan_v1_moe (HunYuanMoEV1ForCausalLM:
// Hunyuan-A13B, 80B parameters of which 13B are active).
//
// Both are Llama's decoder (pipeline/llama) with an RMSNorm over each
// query and key head taken after the rotary embedding
// (self_attn.query_layernorm, self_attn.key_layernorm:
// llama.Options.QKNormAfterRope), the rotary's base raised by the NTK
// alpha of rope_scaling {"type": "dynamic", "alpha": A} to
// rope_theta · A^(d/(d−2)) (nn.NewRope), and MLPs without biases
// whatever mlp_bias says. attention_bias puts biases on q, k, v and o.
//
// HunYuanMoEV1's every layer is sparse: the router mlp.gate.wg, made in
// float32 and run on the hidden state cast to float32, whose softmax's
// top moe_topk experts are renormalized to sum to one, each expert a
// SwiGLU of intermediate_size (mlp.experts.E.{gate,up,down}_proj), beside
// an unrouted shared SwiGLU of the same width (mlp.shared_mlp). It runs on
// pipeline/qwen3moe's decoder, with its in-graph, host-routed and dense
// formulations, quantized and held forms. transformers' class builds the
// shared MLP whatever use_mixed_mlp_moe says and sizes experts and shared
// MLP by intermediate_size, so a config whose moe_intermediate_size or
// num_shared_expert say otherwise is refused by name, as is cross-layer
// attention (use_cla), which the class does not implement.
//
// The tokenizer is HYTokenizer's hy.tiktoken, which loader/tokenizer
// reads (docs/tokenizers.md).
package hunyuan

import (
	"encoding/json"
	"fmt"

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/llama"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/qwen3moe"
)

func init() {
	lm.Register("HunYuanDenseV1ForCausalLM", NewDense)
	lm.Register("HunYuanMoEV1ForCausalLM", NewMoE)
}

// Config is a HunYuan config.json: the Llama fields plus HunYuan's.
type Config struct {
	llama.Config
	// NumExperts and MoETopK are an int or a list a layer.
	NumExperts json.RawMessage `json:"num_experts"`
	MoETopK    json.RawMessage `json:"moe_topk"`
	// MoEIntermediateSize and NumSharedExpert are the remote code's
	// (an int or a list a layer), which transformers' class does not
	// read: checked against it.
	MoEIntermediateSize json.RawMessage `json:"moe_intermediate_size"`
	NumSharedExpert     json.RawMessage `json:"num_shared_expert"`
	UseCLA              *bool           `json:"use_cla"`
}

// Defaults are HunYuanDenseV1Config's and HunYuanMoEV1Config's defaults:
// a vocabulary of 290943, hidden 4096, MLP 11008, 32 layers of 32 heads,
// rms_norm_eps 1e-5, rope_theta 10000, untied, bos 1 and eos 2.
var Defaults = llama.Defaults{
	VocabSize: 290943, Hidden: 4096, Intermediate: 11008, Layers: 32, Heads: 32,
	MaxPositions: 2048, Eps: 1e-5, RopeTheta: 10000, Tie: false, Act: "silu",
	BOS: []int{1}, EOS: []int{2},
}

// Layout is HunYuanMoEV1's sparse block: mlp, the router mlp.gate.wg in
// float32, the experts' gate_proj, up_proj and down_proj, and the shared
// mlp.shared_mlp.
var Layout = qwen3moe.Layout{Block: "mlp", Experts: lm.QwenExperts, Router: "gate.wg.weight", RouterF32: true, SharedMLP: "shared_mlp"}

// ResolveDense reads a HunYuanDenseV1ForCausalLM config.json into the
// options of pipeline/llama's decoder.
func ResolveDense(cfg *config.File) (llama.Options, error) {
	var c Config
	if err := cfg.Decode(&c); err != nil {
		return llama.Options{}, err
	}
	return c.resolve(cfg)
}

func (c *Config) resolve(cfg *config.File) (llama.Options, error) {
	where := lm.ConfigName(cfg)
	if c.UseCLA != nil && *c.UseCLA {
		return llama.Options{}, errs.Unsupportedf("%s: use_cla is true; cross-layer attention (layers sharing keys and values) is not supported, as transformers' HunYuan classes do not implement it", where)
	}
	o, err := c.Resolve(cfg, Defaults)
	if err != nil {
		return llama.Options{}, err
	}
	s := &o.Spec
	for _, k := range s.LayerKinds {
		if k != lm.KindFull {
			return llama.Options{}, errs.Unsupportedf("%s: layer_types names %q layers; HunYuan's layers all attend in full", where, k)
		}
	}
	if o.Rope.RotaryDim != s.HeadDim {
		return llama.Options{}, errs.Unsupportedf("%s: a partial rotary embedding (%d of %d dims) is not supported; HunYuan rotates whole heads", where, o.Rope.RotaryDim, s.HeadDim)
	}
	o.MLPBias = false // HunYuan's MLPs have no biases whatever mlp_bias says
	o.QKNorm, o.QKNormAfterRope = true, true
	return o, nil
}

// NewDense builds a HunYuanDenseV1ForCausalLM from its config.json.
func NewDense(cfg *config.File) (lm.Model, error) {
	o, err := ResolveDense(cfg)
	if err != nil {
		return nil, err
	}
	return llama.NewModel(o), nil
}

// perLayer reads a field that is an int or a list of one int a layer,
// which must all be equal (tputool's layers share their expert counts);
// def when absent or null.
func perLayer(where, field string, raw json.RawMessage, layers, def int) (int, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return def, nil
	}
	var one int
	if json.Unmarshal(raw, &one) == nil {
		return one, nil
	}
	var list []int
	if err := json.Unmarshal(raw, &list); err != nil {
		return 0, fmt.Errorf("%s: %s: expected an integer or a list of one a layer: %w", where, field, err)
	}
	if len(list) != layers {
		return 0, fmt.Errorf("%s: %s has %d entries for %d layers", where, field, len(list), layers)
	}
	for i, v := range list {
		if v != list[0] {
			return 0, errs.Unsupportedf("%s: %s differs between layers (%d at layer 0, %d at layer %d); tputool's MoE layers share one", where, field, list[0], v, i)
		}
	}
	return list[0], nil
}

// ResolveMoE reads a HunYuanMoEV1ForCausalLM config.json into the options
// of pipeline/qwen3moe's decoder.
func ResolveMoE(cfg *config.File) (qwen3moe.Options, error) {
	where := lm.ConfigName(cfg)
	var c Config
	if err := cfg.Decode(&c); err != nil {
		return qwen3moe.Options{}, err
	}
	base, err := c.resolve(cfg)
	if err != nil {
		return qwen3moe.Options{}, err
	}
	s := base.Spec
	o := qwen3moe.Options{Options: base, MoEIntermediate: s.Intermediate, SharedIntermediate: s.Intermediate, NormTopK: true, Sparse: make([]bool, s.Layers)}
	if o.Experts, err = perLayer(where, "num_experts", c.NumExperts, s.Layers, 1); err != nil {
		return qwen3moe.Options{}, err
	}
	if o.TopK, err = perLayer(where, "moe_topk", c.MoETopK, s.Layers, 1); err != nil {
		return qwen3moe.Options{}, err
	}
	if o.Experts <= 0 || o.TopK <= 0 || o.TopK > o.Experts {
		return qwen3moe.Options{}, fmt.Errorf("%s: num_experts %d must be positive and moe_topk %d in [1, num_experts]", where, o.Experts, o.TopK)
	}
	if err := lm.CheckExperts(where, "num_experts", o.Experts, s.Layers); err != nil {
		return qwen3moe.Options{}, err
	}
	inter, err := perLayer(where, "moe_intermediate_size", c.MoEIntermediateSize, s.Layers, s.Intermediate)
	if err != nil {
		return qwen3moe.Options{}, err
	}
	if inter != s.Intermediate {
		return qwen3moe.Options{}, errs.Unsupportedf("%s: moe_intermediate_size %d differs from intermediate_size %d; transformers' HunYuanMoEV1 sizes its experts by intermediate_size", where, inter, s.Intermediate)
	}
	shared, err := perLayer(where, "num_shared_expert", c.NumSharedExpert, s.Layers, 1)
	if err != nil {
		return qwen3moe.Options{}, err
	}
	if shared != 1 {
		return qwen3moe.Options{}, errs.Unsupportedf("%s: num_shared_expert is %d; transformers' HunYuanMoEV1 has one shared MLP of intermediate_size", where, shared)
	}
	for i := range o.Sparse {
		o.Sparse[i] = true
	}
	return o, nil
}

// NewMoE builds a HunYuanMoEV1ForCausalLM from its config.json.
func NewMoE(cfg *config.File) (lm.Model, error) {
	o, err := ResolveMoE(cfg)
	if err != nil {
		return nil, err
	}
	return qwen3moe.NewModelIn(o, Layout), nil
}
