// Package falconh1 implements TII's Falcon-H1 (FalconH1ForCausalLM:
// Falcon-H1 0.5B to 34B, Base and Instruct), following transformers'
// models/falcon_h1/modular_falcon_h1.py.
//
// Every decoder layer runs two token mixers side by side on its
// input_layernorm's output h: Llama's attention on h times
// attention_in_multiplier, its keys times key_multiplier, its output
// times attention_out_multiplier; and a Mamba-2 mixer (nn.Mamba2With) on
// h times ssm_in_multiplier, in_proj's output multiplied part by part by
// ssm_multipliers (the gate, x, B, C and dt: the model's mup_vector), its
// output gated by silu(gate) with a grouped RMSNorm before the gate
// (mamba_norm_before_gate), after it, or none (mamba_rms_norm false), times
// ssm_out_multiplier. Their sum joins the residual; then pre_ff_layernorm
// and the SwiGLU feed_forward, whose gate is multiplied by
// mlp_multipliers[0] before the activation and whose output by
// mlp_multipliers[1]. The embeddings are multiplied by
// embedding_multiplier, the logits by lm_head_multiplier, and the final
// norm is model.final_layernorm.
//
// A layer holds both a KV cache and the Mamba-2 state: LayerState lists
// the caches and then nn.Mamba2State's conv and ssm (with int8 caches the
// scales follow, lm.HeldState).
package falconh1

import (
	"encoding/json"
	"fmt"
	"math"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/llama"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/nn"
)

func init() {
	lm.Register("FalconH1ForCausalLM", New)
}

// Config is a FalconH1ForCausalLM config.json: the Llama fields plus
// Falcon-H1's.
type Config struct {
	llama.Config
	MambaDSSM           *int            `json:"mamba_d_ssm"`
	MambaNHeads         *int            `json:"mamba_n_heads"`
	MambaDHead          json.RawMessage `json:"mamba_d_head"` // an int or "auto"
	MambaNGroups        *int            `json:"mamba_n_groups"`
	MambaDState         *int            `json:"mamba_d_state"`
	MambaDConv          *int            `json:"mamba_d_conv"`
	MambaExpand         *int            `json:"mamba_expand"`
	MambaChunkSize      *int            `json:"mamba_chunk_size"`
	MambaConvBias       *bool           `json:"mamba_conv_bias"`
	MambaProjBias       *bool           `json:"mamba_proj_bias"`
	MambaNormBeforeGate *bool           `json:"mamba_norm_before_gate"`
	MambaRMSNorm        *bool           `json:"mamba_rms_norm"`
	TimeStepLimit       []float64       `json:"time_step_limit"`
	ProjectorsBias      *bool           `json:"projectors_bias"`

	LMHeadMultiplier       *float64  `json:"lm_head_multiplier"`
	EmbeddingMultiplier    *float64  `json:"embedding_multiplier"`
	KeyMultiplier          *float64  `json:"key_multiplier"`
	AttentionInMultiplier  *float64  `json:"attention_in_multiplier"`
	AttentionOutMultiplier *float64  `json:"attention_out_multiplier"`
	SSMInMultiplier        *float64  `json:"ssm_in_multiplier"`
	SSMOutMultiplier       *float64  `json:"ssm_out_multiplier"`
	MLPMultipliers         []float64 `json:"mlp_multipliers"`
	SSMMultipliers         []float64 `json:"ssm_multipliers"`
}

// Defaults are FalconH1Config's: hidden 4096, MLP 14336, 32 layers of 32
// heads over 8 KV heads, a vocabulary of 128000, rms_norm_eps 1e-5,
// max_position_embeddings 8192, untied, bos 1 and eos 2.
var Defaults = llama.Defaults{
	VocabSize: 128000, Hidden: 4096, Intermediate: 14336, Layers: 32, Heads: 32,
	MaxPositions: 8192, Eps: 1e-5, RopeTheta: 10000, Tie: false, Act: "silu",
	KVHeads: 8, BOS: []int{1}, EOS: []int{2},
}

// Options are the resolved hyperparameters.
type Options struct {
	llama.Options
	Mamba  nn.Mamba2Dims
	Layout nn.Mamba2Layout
	// MambaOpts are the mixer's norm, multipliers, chunk and dt clamp.
	MambaOpts nn.Mamba2Options
	// AttnIn, AttnOut, SSMIn and SSMOut multiply the mixers' input and
	// output; Gate and Down the feed-forward's gate and output; Key the
	// keys (as AttnScale's factor over 1/sqrt(head_dim)).
	AttnIn, AttnOut, SSMIn, SSMOut, Gate, Down, Key float64
}

// Resolve reads a FalconH1ForCausalLM config.json.
func Resolve(cfg *config.File) (Options, error) {
	where := lm.ConfigName(cfg)
	var c Config
	if err := cfg.Decode(&c); err != nil {
		return Options{}, err
	}
	base, err := c.Resolve(cfg, Defaults)
	if err != nil {
		return Options{}, err
	}
	s := &base.Spec
	for _, k := range s.LayerKinds {
		if k != lm.KindFull {
			return Options{}, errs.Unsupportedf("%s: layer_types names %q layers; Falcon-H1's layers all attend in full", where, k)
		}
	}
	if base.Rope.RotaryDim != s.HeadDim {
		return Options{}, errs.Unsupportedf("%s: a partial rotary embedding (%d of %d dims) is not supported; Falcon-H1 rotates whole heads", where, base.Rope.RotaryDim, s.HeadDim)
	}
	o := Options{Options: base}
	o.Norms = llama.Norms{PreAttn: "input_layernorm", PreMLP: "pre_ff_layernorm"}
	o.FinalNorm = "model.final_layernorm"
	o.EmbedScale = lm.Or(c.EmbeddingMultiplier, 1.0)
	o.LogitScale = lm.Or(c.LMHeadMultiplier, 1.0)
	// key_multiplier scales the keys before the rotary, which is linear:
	// the scores, and so the softmax's scale, grow by it.
	o.Key = lm.Or(c.KeyMultiplier, 1.0)
	o.AttnScale = o.Key / math.Sqrt(float64(s.HeadDim))
	o.AttnIn, o.AttnOut = lm.Or(c.AttentionInMultiplier, 1.0), lm.Or(c.AttentionOutMultiplier, 1.0)
	o.SSMIn, o.SSMOut = lm.Or(c.SSMInMultiplier, 1.0), lm.Or(c.SSMOutMultiplier, 1.0)
	o.Gate, o.Down = 1, 1
	if c.MLPMultipliers != nil {
		if len(c.MLPMultipliers) != 2 {
			return Options{}, fmt.Errorf("%s: mlp_multipliers has %d values, want 2 (the gate's and down_proj's)", where, len(c.MLPMultipliers))
		}
		o.Gate, o.Down = c.MLPMultipliers[0], c.MLPMultipliers[1]
	}
	for _, m := range []struct {
		name string
		v    float64
	}{{"embedding_multiplier", o.EmbedScale}, {"lm_head_multiplier", o.LogitScale}, {"key_multiplier", o.Key},
		{"attention_in_multiplier", o.AttnIn}, {"attention_out_multiplier", o.AttnOut}, {"ssm_in_multiplier", o.SSMIn},
		{"ssm_out_multiplier", o.SSMOut}, {"mlp_multipliers", o.Gate}, {"mlp_multipliers", o.Down}} {
		if !(m.v > 0) {
			return Options{}, fmt.Errorf("%s: %s must be positive, got %v", where, m.name, m.v)
		}
	}
	if act := c.HiddenAct; act != "" && act != "silu" && act != "swish" {
		return Options{}, errs.Unsupportedf("%s: hidden_act %q; the Mamba-2 mixer's convolution runs SiLU (FalconH1Mixer applies hidden_act there too)", where, act)
	}

	// The Mamba-2 mixer.
	inner := lm.Or(c.MambaExpand, 2) * s.Hidden
	if c.MambaDSSM != nil {
		inner = *c.MambaDSSM
	} else if !cfg.Has("mamba_d_ssm") {
		inner = 1024 // FalconH1Config's mamba_d_ssm
	}
	d := nn.Mamba2Dims{Heads: lm.Or(c.MambaNHeads, 128), State: lm.Or(c.MambaDState, 256), Groups: lm.Or(c.MambaNGroups, 1), ConvKernel: lm.Or(c.MambaDConv, 4)}
	var head int
	switch err := json.Unmarshal(c.MambaDHead, &head); {
	case len(c.MambaDHead) == 0 || string(c.MambaDHead) == `"auto"` || string(c.MambaDHead) == "null":
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
		return Options{}, fmt.Errorf("%s: mamba_n_heads %d × mamba_d_head %d must be the mixer's width %d (mamba_d_ssm, or mamba_expand × hidden_size)", where, d.Heads, d.HeadDim, inner)
	}
	o.Mamba = d
	rmsNorm := c.MambaRMSNorm != nil && *c.MambaRMSNorm
	o.Layout = nn.Mamba2Layout{ConvBias: lm.Or(c.MambaConvBias, true), InBias: lm.Or(c.MambaProjBias, false), OutBias: lm.Or(c.ProjectorsBias, false), NoNorm: !rmsNorm}
	mo := nn.Mamba2Options{Eps: o.Eps, NormGroups: d.Groups, Chunk: lm.Or(c.MambaChunkSize, 256), Norm: nn.Mamba2NoNorm}
	if rmsNorm {
		mo.Norm = nn.Mamba2NormFirst
		if c.MambaNormBeforeGate != nil && !*c.MambaNormBeforeGate {
			mo.Norm = nn.Mamba2GateFirst
		}
	}
	if c.SSMMultipliers != nil {
		if len(c.SSMMultipliers) != 5 {
			return Options{}, fmt.Errorf("%s: ssm_multipliers has %d values, want 5 (the gate's, x's, B's, C's and dt's)", where, len(c.SSMMultipliers))
		}
		for i, v := range c.SSMMultipliers {
			if !(v > 0) {
				return Options{}, fmt.Errorf("%s: ssm_multipliers[%d] must be positive, got %v", where, i, v)
			}
		}
		mo.Mup = c.SSMMultipliers
	}
	if l := c.TimeStepLimit; l != nil {
		if len(l) != 2 || l[0] < 0 || l[1] < l[0] || l[1] <= 0 {
			return Options{}, fmt.Errorf("%s: time_step_limit %v: want [low, high] with 0 <= low <= high, high > 0", where, l)
		}
		mo.DtMin = l[0]
		if l[1] < math.MaxFloat64 {
			mo.DtMax = l[1]
		}
	}
	if mo.Chunk <= 0 {
		return Options{}, fmt.Errorf("%s: mamba_chunk_size must be positive, got %d", where, mo.Chunk)
	}
	o.MambaOpts = mo
	return o, nil
}

// New builds the model from its config.json.
func New(cfg *config.File) (lm.Model, error) {
	o, err := Resolve(cfg)
	if err != nil {
		return nil, err
	}
	return NewModel(o), nil
}

// Model is a Falcon-H1 decoder: llama's embedding, head and attention
// with its own layer.
type Model struct {
	*llama.Model
	o Options
}

// NewModel returns the decoder for resolved options. The embedding and
// lm_head multipliers are Falcon-H1's own (Embed, Head), not llama's,
// which rounds a multiplier to the compute dtype first.
func NewModel(o Options) *Model {
	base := o.Options
	base.EmbedScale, base.LogitScale = 1, 1
	return &Model{Model: llama.NewModel(base), o: o}
}

// Embed implements lm.Model: embed_tokens times embedding_multiplier.
func (m *Model) Embed(w *lm.Params, tokens *Node) *Node {
	return scale(m.Model.Embed(w, tokens), m.o.EmbedScale)
}

// Head implements lm.Model: the final norm and lm_head, times
// lm_head_multiplier.
func (m *Model) Head(w *lm.Params, x *Node) *Node {
	return scale(m.Model.Head(w, x), m.o.LogitScale)
}

// FalconOptions returns the resolved options.
func (m *Model) FalconOptions() Options { return m.o }

// LayerState implements lm.Model: the key and value caches, then the
// Mamba-2 mixer's conv and ssm states.
func (m *Model) LayerState(i int, batch, cacheLen int) []lm.StateSpec {
	return append(m.Model.LayerState(i, batch, cacheLen), nn.Mamba2State(m.o.Mamba, batch)...)
}

// LayerWeights implements lm.Model: the norms and attention
// (llama.Model.AttentionWeights), the mixer under mamba., the
// feed_forward's three projections.
func (m *Model) LayerWeights(i int) []lm.WeightSpec {
	s := &m.o.Spec
	p := fmt.Sprintf("model.layers.%d.", i)
	ws := m.AttentionWeights(i)
	ws = append(ws, m.o.Layout.Weights(p+"mamba.", m.o.Mamba, s.Hidden)...)
	add := func(name string, tp lm.TPSplit, shape ...int) {
		ws = append(ws, lm.WeightSpec{Name: p + "feed_forward." + name, Shape: shape, Matmul: true, TP: tp})
	}
	add("gate_proj.weight", lm.Column, s.Intermediate, s.Hidden)
	add("up_proj.weight", lm.Column, s.Intermediate, s.Hidden)
	add("down_proj.weight", lm.Row, s.Hidden, s.Intermediate)
	if m.o.MLPBias {
		ws = append(ws,
			lm.WeightSpec{Name: p + "feed_forward.gate_proj.bias", Shape: []int{s.Intermediate}, TP: lm.Column},
			lm.WeightSpec{Name: p + "feed_forward.up_proj.bias", Shape: []int{s.Intermediate}, TP: lm.Column},
			lm.WeightSpec{Name: p + "feed_forward.down_proj.bias", Shape: []int{s.Hidden}})
	}
	return ws
}

// scale is x times v, x itself for 1: in float32 and rounded once, as
// torch multiplies a bf16 tensor by a Python float (the multiplier kept
// in float32, not rounded to bf16 first).
func scale(x *Node, v float64) *Node {
	if v == 1 {
		return x
	}
	return ConvertDType(MulScalar(ConvertDType(x, dtypes.Float32), v), x.DType())
}

// Layer implements lm.Model: FalconH1DecoderLayer.
func (m *Model) Layer(i int, w *lm.Params, x *Node, state []*Node, step *lm.Step) (*Node, []*Node) {
	o := &m.o
	p := w.Scope(fmt.Sprintf("model.layers.%d", i))
	// The held state: k, v, conv, ssm, then the caches' int8 scales.
	kv := []*Node{state[0], state[1]}
	if len(state) > 4 {
		kv = append(kv, state[4], state[5])
	}
	h := nn.RMSNorm(x, p.Get("input_layernorm.weight"), o.Eps, false)
	ssm, conv, rec := nn.Mamba2With(o.Mamba, o.Layout.Params(p.Scope("mamba")), scale(h, o.SSMIn), state[2], state[3], step, o.MambaOpts)
	att, kv := m.SelfAttention(i, w, scale(h, o.AttnIn), kv, step)
	x = Add(x, Add(scale(ssm, o.SSMOut), scale(att, o.AttnOut)))

	f := p.Scope("feed_forward")
	h = nn.RMSNorm(x, p.Get("pre_ff_layernorm.weight"), o.Eps, false)
	bias := func(name string) *Node {
		if !o.MLPBias {
			return nil
		}
		return f.Get(name)
	}
	gate := scale(nn.Linear(h, f.Get("gate_proj.weight"), bias("gate_proj.bias")), o.Gate)
	up := nn.Linear(h, f.Get("up_proj.weight"), bias("up_proj.bias"))
	y := scale(nn.Linear(Mul(up, o.Act(gate)), f.Get("down_proj.weight"), bias("down_proj.bias")), o.Down)
	x = Add(x, y)

	out := []*Node{kv[0], kv[1], conv, rec}
	return x, append(out, kv[2:]...)
}

var _ lm.Model = (*Model)(nil)
