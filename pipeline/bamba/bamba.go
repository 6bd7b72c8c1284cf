// Package bamba implements IBM's Bamba (BambaForCausalLM: Bamba-9B v1
// and v2), following transformers' models/bamba/modular_bamba.py.
//
// Bamba's layers are Mamba-2 mixers (transformers' BambaMixer:
// Mamba2Mixer's, its gated RMSNorm over the whole width) except those
// attn_layer_indices names, which are Llama's attention with the rotary
// over the first half of each head (BambaConfig hard-codes
// partial_rotary_factor 0.5). Every layer is input_layernorm, its mixer
// and the residual, then pre_ff_layernorm, the SwiGLU feed_forward and
// the residual; the final norm is model.final_layernorm. It is Granite
// 4.0-H's decoder before IBM's multipliers and experts, with Bamba's
// names.
package bamba

import (
	"encoding/json"
	"fmt"
	"maps"

	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/llama"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/nn"
)

func init() {
	lm.Register("BambaForCausalLM", New)
}

// Config is a BambaForCausalLM config.json.
type Config struct {
	llama.Config
	AttnLayerIndices []int           `json:"attn_layer_indices"`
	MambaNHeads      *int            `json:"mamba_n_heads"`
	MambaDHead       json.RawMessage `json:"mamba_d_head"` // an int or "auto"
	MambaNGroups     *int            `json:"mamba_n_groups"`
	MambaDState      *int            `json:"mamba_d_state"`
	MambaDConv       *int            `json:"mamba_d_conv"`
	MambaExpand      *int            `json:"mamba_expand"`
	MambaChunkSize   *int            `json:"mamba_chunk_size"`
	MambaConvBias    *bool           `json:"mamba_conv_bias"`
	MambaProjBias    *bool           `json:"mamba_proj_bias"`
}

// Defaults are BambaConfig's: a vocabulary of 128000, hidden 4096, MLP
// 14336, 32 layers of 32 heads over 8 KV heads, rms_norm_eps 1e-5,
// 262144 positions, untied, bos 1 and eos 2.
var Defaults = llama.Defaults{
	VocabSize: 128000, Hidden: 4096, Intermediate: 14336, Layers: 32, Heads: 32,
	MaxPositions: 262144, Eps: 1e-5, RopeTheta: 10000, Tie: false, Act: "silu",
	KVHeads: 8, BOS: []int{1}, EOS: []int{2},
}

// Options are the resolved hyperparameters.
type Options struct {
	llama.Options
	Mamba              nn.Mamba2Dims
	ConvBias, ProjBias bool
	Chunk              int
}

// Resolve reads a BambaForCausalLM config.json.
func Resolve(cfg *config.File) (Options, error) {
	where := lm.ConfigName(cfg)
	var c Config
	if err := cfg.Decode(&c); err != nil {
		return Options{}, err
	}
	// BambaConfig sets partial_rotary_factor to 0.5 whatever config.json
	// says; the rotary is built from a copy of the config that says so,
	// at the top level and in rope_parameters.
	raw := maps.Clone(cfg.Raw)
	raw["partial_rotary_factor"] = json.RawMessage("0.5")
	if rp, ok := raw["rope_parameters"]; ok && string(rp) != "null" {
		var params map[string]json.RawMessage
		if err := json.Unmarshal(rp, &params); err != nil {
			return Options{}, fmt.Errorf("%s: rope_parameters: expected an object: %w", where, err)
		}
		params["partial_rotary_factor"] = json.RawMessage("0.5")
		b, err := json.Marshal(params)
		if err != nil {
			return Options{}, err
		}
		raw["rope_parameters"] = b
	}
	half := *cfg
	half.Raw = raw
	base, err := c.Resolve(&half, Defaults)
	if err != nil {
		return Options{}, err
	}
	s := &base.Spec
	o := Options{Options: base}
	o.MLPBias = false // BambaMLP: LlamaMLP with mlp_bias false
	o.Norms = llama.Norms{PreAttn: "input_layernorm", PreMLP: "pre_ff_layernorm"}
	o.FinalNorm = "model.final_layernorm"
	for i := range s.LayerKinds {
		s.LayerKinds[i] = nn.KindMamba
	}
	for _, i := range c.AttnLayerIndices {
		if i < 0 || i >= s.Layers {
			return Options{}, fmt.Errorf("%s: attn_layer_indices holds %d, outside the %d layers", where, i, s.Layers)
		}
		s.LayerKinds[i] = lm.KindFull
	}
	inner := lm.Or(c.MambaExpand, 2) * s.Hidden
	d := nn.Mamba2Dims{Heads: lm.Or(c.MambaNHeads, 128), State: lm.Or(c.MambaDState, 256), Groups: lm.Or(c.MambaNGroups, 1), ConvKernel: lm.Or(c.MambaDConv, 4)}
	var head int
	switch err := json.Unmarshal(c.MambaDHead, &head); {
	case len(c.MambaDHead) == 0 || string(c.MambaDHead) == `"auto"` || string(c.MambaDHead) == "null":
		if d.Heads > 0 && inner%d.Heads != 0 {
			return Options{}, fmt.Errorf("%s: mamba_n_heads %d must divide mamba_expand × hidden_size %d", where, d.Heads, inner)
		}
		if d.Heads > 0 {
			d.HeadDim = inner / d.Heads
		}
	case err != nil:
		return Options{}, fmt.Errorf("%s: mamba_d_head: expected an integer or \"auto\": %w", where, err)
	default:
		d.HeadDim = head
	}
	if err := d.Validate(where, nn.Mamba2Names{Heads: "mamba_n_heads", HeadDim: "mamba_d_head", State: "mamba_d_state", Groups: "mamba_n_groups", ConvKernel: "mamba_d_conv"}); err != nil {
		return Options{}, err
	}
	if d.Inner() != inner {
		return Options{}, fmt.Errorf("%s: mamba_n_heads %d × mamba_d_head %d must be mamba_expand × hidden_size %d", where, d.Heads, d.HeadDim, inner)
	}
	if act := c.HiddenAct; act != "" && act != "silu" && act != "swish" {
		return Options{}, errs.Unsupportedf("%s: hidden_act %q; the Mamba-2 mixer's convolution runs SiLU", where, act)
	}
	o.Mamba, o.Chunk = d, lm.Or(c.MambaChunkSize, 256)
	o.ConvBias, o.ProjBias = lm.Or(c.MambaConvBias, true), lm.Or(c.MambaProjBias, false)
	if o.Chunk <= 0 {
		return Options{}, fmt.Errorf("%s: mamba_chunk_size must be positive, got %d", where, o.Chunk)
	}
	return o, nil
}

// New builds the model from its config.json.
func New(cfg *config.File) (lm.Model, error) {
	o, err := Resolve(cfg)
	if err != nil {
		return nil, err
	}
	return &Model{Model: llama.NewModel(o.Options), o: o}, nil
}

// Model is a Bamba decoder: llama's embedding, head and attention layers
// beside Mamba-2 layers.
type Model struct {
	*llama.Model
	o Options
}

// BambaOptions returns the resolved options.
func (m *Model) BambaOptions() Options { return m.o }

func (m *Model) mamba(i int) bool { return m.o.Spec.LayerKinds[i] == nn.KindMamba }

// LayerState implements lm.Model: a KV cache for an attention layer, the
// Mamba-2 state for a Mamba layer.
func (m *Model) LayerState(i int, batch, cacheLen int) []lm.StateSpec {
	if m.mamba(i) {
		return nn.Mamba2State(m.o.Mamba, batch)
	}
	return m.Model.LayerState(i, batch, cacheLen)
}

// LayerWeights implements lm.Model.
func (m *Model) LayerWeights(i int) []lm.WeightSpec {
	s := &m.o.Spec
	p := fmt.Sprintf("model.layers.%d.", i)
	var ws []lm.WeightSpec
	if m.mamba(i) {
		ws = append(ws, lm.WeightSpec{Name: p + "input_layernorm.weight", Shape: []int{s.Hidden}})
		ws = append(ws, nn.Mamba2Weights(p+"mamba.", m.o.Mamba, s.Hidden, m.o.ConvBias, m.o.ProjBias)...)
		ws = append(ws, lm.WeightSpec{Name: p + "pre_ff_layernorm.weight", Shape: []int{s.Hidden}})
	} else {
		ws = m.AttentionWeights(i)
	}
	f := p + "feed_forward."
	return append(ws,
		lm.WeightSpec{Name: f + "gate_proj.weight", Shape: []int{s.Intermediate, s.Hidden}, Matmul: true, TP: lm.Column},
		lm.WeightSpec{Name: f + "up_proj.weight", Shape: []int{s.Intermediate, s.Hidden}, Matmul: true, TP: lm.Column},
		lm.WeightSpec{Name: f + "down_proj.weight", Shape: []int{s.Hidden, s.Intermediate}, Matmul: true, TP: lm.Row})
}

// Layer implements lm.Model: BambaDecoderLayer.
func (m *Model) Layer(i int, w *lm.Params, x *Node, state []*Node, step *lm.Step) (*Node, []*Node) {
	o := &m.o
	p := w.Scope(fmt.Sprintf("model.layers.%d", i))
	var h *Node
	var out []*Node
	if m.mamba(i) {
		h = nn.RMSNorm(x, p.Get("input_layernorm.weight"), o.Eps, false)
		y, conv, ssm := nn.Mamba2(o.Mamba, nn.Mamba2ParamsOf(p.Scope("mamba"), o.ConvBias, o.ProjBias), h, state[0], state[1], step, o.Eps, 1, o.Chunk)
		x = Add(x, y)
		h, out = nn.RMSNorm(x, p.Get("pre_ff_layernorm.weight"), o.Eps, false), []*Node{conv, ssm}
	} else {
		x, h, out = m.Attend(i, w, x, state, step)
	}
	f := p.Scope("feed_forward")
	return Add(x, nn.GatedMLP(h, f.Get("gate_proj.weight"), nil, f.Get("up_proj.weight"), nil, f.Get("down_proj.weight"), nil, o.Act)), out
}

var _ lm.Model = (*Model)(nil)
