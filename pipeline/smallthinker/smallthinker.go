// Package smallthinker implements SmallThinkerForCausalLM, PowerInfer's
// SmallThinker (SmallThinker-4BA0.6B, SmallThinker-21BA3B: mixtures of
// experts designed to run on local devices), following the modeling code
// the checkpoints ship (modeling_smallthinker.py, trust_remote_code;
// transformers has no class of its own for it) and its configuration
// class, SmallThinkerConfig.
//
// Each decoder layer is Llama's grouped-query attention (no biases;
// explicit head_dim) and a sparse block in place of the MLP, on every
// layer:
//   - the router, block_sparse_moe.primary_router [experts, hidden], reads
//     the layer's input — the residual stream before input_layernorm —,
//     not the MLP's normed input, so a runtime can know the experts a
//     layer needs before its attention runs (Layout.RouterOnInput);
//   - the moe_num_active_primary_experts largest logits choose, weighed by
//     the softmax over the chosen (moe_primary_router_apply_softmax: the
//     softmax over all, renormalized over the chosen, is the same) or by
//     their sigmoids over the sigmoids' sum;
//   - each expert is a ReGLU MLP of moe_ffn_hidden_size:
//     down(relu(gate(x)) · up(x)), named experts.E.{gate,up,down}.
//
// rope_layout turns the rotary off on the layers it marks 0 (NoPE), and
// sliding_window_layout makes the layers it marks 1 attend within
// sliding_window_size.
package smallthinker

import (
	"fmt"

	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/llama"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/nn"
	"github.com/tputool/tputool/pipeline/qwen3moe"
)

// Architecture is the class this package registers.
const Architecture = "SmallThinkerForCausalLM"

func init() { lm.Register(Architecture, New) }

// Config is a SmallThinkerForCausalLM config.json.
type Config struct {
	llama.Config
	RopeLayout          []int `json:"rope_layout"`
	SlidingWindowLayout []int `json:"sliding_window_layout"`
	SlidingWindowSize   *int  `json:"sliding_window_size"`
	Experts             *int  `json:"moe_num_primary_experts"`
	ExpertWidth         *int  `json:"moe_ffn_hidden_size"`
	ApplySoftmax        *bool `json:"moe_primary_router_apply_softmax"`
	TopK                *int  `json:"moe_num_active_primary_experts"`
}

// Defaults are SmallThinkerConfig's (SmallThinker-4B's sizes).
var Defaults = llama.Defaults{
	VocabSize: 151936, Hidden: 1536, Layers: 32, Heads: 12, KVHeads: 2, HeadDim: 128,
	MaxPositions: 4096 * 32, Eps: 1e-6, RopeTheta: 1e6, Tie: true, Act: "relu",
	BOS: []int{151643}, EOS: []int{151643, 151645},
}

// The configuration class's other defaults.
const (
	defaultExperts = 32
	defaultWidth   = 768
	defaultTopK    = 4
	defaultWindow  = 4096
)

// Layout names SmallThinker's sparse blocks: block_sparse_moe.
// primary_router, experts.E.{gate,up,down}, the router on the layer's
// input.
var Layout = qwen3moe.Layout{
	Block:         "block_sparse_moe",
	Router:        "primary_router.weight",
	Experts:       lm.ExpertNames{Gate: "gate.weight", Up: "up.weight", Down: "down.weight"},
	RouterOnInput: true,
}

// Resolve reads a SmallThinkerForCausalLM config.json into the options of
// pipeline/qwen3moe's decoder.
func Resolve(cfg *config.File) (qwen3moe.Options, error) {
	where := lm.ConfigName(cfg)
	var c Config
	if err := cfg.Decode(&c); err != nil {
		return qwen3moe.Options{}, err
	}
	width := lm.Or(c.ExpertWidth, defaultWidth)
	if width <= 0 {
		return qwen3moe.Options{}, fmt.Errorf("%s: moe_ffn_hidden_size must be positive, got %d", where, width)
	}
	if c.IntermediateSize == nil { // no dense MLP: Spec's intermediate is the experts'
		c.IntermediateSize = &width
	}
	// SmallThinkerConfig has no hidden_act, and the modeling code reads
	// none: the experts are ReGLU whatever a config says.
	c.HiddenAct = ""
	c.LayerTypes = nil // SmallThinker places its windows by sliding_window_layout
	base, err := c.Config.Resolve(cfg, Defaults)
	if err != nil {
		return qwen3moe.Options{}, err
	}
	s := &base.Spec
	base.QKVBias, base.OBias, base.MLPBias = false, false, false
	ropeLayout, err := layout(where, "rope_layout", c.RopeLayout, s.Layers, 1)
	if err != nil {
		return qwen3moe.Options{}, err
	}
	windows, err := layout(where, "sliding_window_layout", c.SlidingWindowLayout, s.Layers, 0)
	if err != nil {
		return qwen3moe.Options{}, err
	}
	base.NoRope = make([]bool, s.Layers)
	for i := range s.Layers {
		base.NoRope[i] = ropeLayout[i] == 0
		if windows[i] == 1 {
			s.LayerKinds[i] = lm.KindSliding
		}
	}
	if windows.any() {
		s.SlidingWindow = lm.Or(c.SlidingWindowSize, defaultWindow)
		if s.SlidingWindow <= 0 {
			return qwen3moe.Options{}, fmt.Errorf("%s: sliding_window_size must be positive where sliding_window_layout marks layers, got %d", where, s.SlidingWindow)
		}
	}
	o := qwen3moe.Options{Options: base, MoEIntermediate: width, NormTopK: true}
	o.Experts = lm.Or(c.Experts, defaultExperts)
	o.TopK = lm.Or(c.TopK, defaultTopK)
	o.SigmoidRouter = !lm.Or(c.ApplySoftmax, false)
	switch {
	case o.Experts <= 0:
		return qwen3moe.Options{}, fmt.Errorf("%s: moe_num_primary_experts must be positive, got %d", where, o.Experts)
	case o.TopK <= 0 || o.TopK > o.Experts:
		return qwen3moe.Options{}, fmt.Errorf("%s: moe_num_active_primary_experts %d must be in [1, moe_num_primary_experts %d]", where, o.TopK, o.Experts)
	}
	if err := lm.CheckExperts(where, "moe_num_primary_experts", o.Experts, s.Layers); err != nil {
		return qwen3moe.Options{}, err
	}
	o.Sparse = make([]bool, s.Layers)
	for i := range o.Sparse {
		o.Sparse[i] = true
	}
	o.Act = nn.Activation("relu")
	return o, nil
}

// flags is a per-layer list of 0s and 1s.
type flags []int

func (f flags) any() bool {
	for _, v := range f {
		if v == 1 {
			return true
		}
	}
	return false
}

// layout reads a per-layer list of 0s and 1s named field: one entry a
// layer (SmallThinkerConfig asserts the length), each 0 or 1; absent,
// every layer's entry is def.
func layout(where, field string, v []int, layers, def int) (flags, error) {
	if v == nil {
		f := make(flags, layers)
		for i := range f {
			f[i] = def
		}
		return f, nil
	}
	if len(v) != layers {
		return nil, fmt.Errorf("%s: %s has %d entries for %d layers", where, field, len(v), layers)
	}
	for i, x := range v {
		if x != 0 && x != 1 {
			return nil, fmt.Errorf("%s: %s[%d] is %d, want 0 or 1", where, field, i, x)
		}
	}
	return v, nil
}

// New builds a SmallThinkerForCausalLM from its config.json.
func New(cfg *config.File) (lm.Model, error) {
	o, err := Resolve(cfg)
	if err != nil {
		return nil, err
	}
	return qwen3moe.NewModelIn(o, Layout), nil
}
