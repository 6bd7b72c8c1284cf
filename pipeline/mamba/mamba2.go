package mamba

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"

	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/nn"
)

// Mamba2Architecture is the Mamba-2 language model's class
// (transformers' models/mamba2: Mistral's Mamba-Codestral-7B and the
// state-spaces Mamba-2 models converted to transformers).
const Mamba2Architecture = "Mamba2ForCausalLM"

func init() { lm.Register(Mamba2Architecture, NewMamba2) }

// Mamba2Config is a Mamba2Config config.json.
type Mamba2Config struct {
	VocabSize         *int            `json:"vocab_size"`
	HiddenSize        *int            `json:"hidden_size"`
	StateSize         *int            `json:"state_size"`
	NumHiddenLayers   *int            `json:"num_hidden_layers"`
	NumHeads          *int            `json:"num_heads"`
	HeadDim           *int            `json:"head_dim"`
	NGroups           *int            `json:"n_groups"`
	Expand            *float64        `json:"expand"`
	ConvKernel        *int            `json:"conv_kernel"`
	ChunkSize         *int            `json:"chunk_size"`
	LayerNormEpsilon  *float64        `json:"layer_norm_epsilon"`
	UseBias           *bool           `json:"use_bias"`
	UseConvBias       *bool           `json:"use_conv_bias"`
	HiddenAct         string          `json:"hidden_act"`
	TimeStepLimit     json.RawMessage `json:"time_step_limit"`
	TieWordEmbeddings *bool           `json:"tie_word_embeddings"`
	BOSTokenID        config.IDList   `json:"bos_token_id"`
	EOSTokenID        config.IDList   `json:"eos_token_id"`
}

// Mamba2Options are a Mamba2ForCausalLM's resolved hyperparameters.
type Mamba2Options struct {
	Spec               lm.Spec
	Mamba              nn.Mamba2Dims
	Mixer              nn.Mamba2Options
	Eps                float64
	ConvBias, ProjBias bool
}

// ResolveMamba2 reads a Mamba2ForCausalLM config.json (Mamba2Config's
// defaults: 128 heads of 64, hidden 4096, state 128, 64 layers, 8 groups,
// expand 2, conv 4, chunk 256, vocabulary 32768, eps 1e-5, silu, no
// biases but conv1d's, untied, bos 0 and eos 2). Mamba2Mixer views its
// inner width expand × hidden_size as num_heads × head_dim: a config
// where they differ is refused. The gated norm takes its mean over the
// whole inner width, as transformers' MambaRMSNormGated does
// (mamba_ssm's kernels and llama.cpp take it per group); time_step_limit
// clamps dt.
func ResolveMamba2(cfg *config.File) (Mamba2Options, error) {
	where := lm.ConfigName(cfg)
	var c Mamba2Config
	if err := cfg.Decode(&c); err != nil {
		return Mamba2Options{}, err
	}
	hidden := lm.Or(c.HiddenSize, 4096)
	d := nn.Mamba2Dims{Heads: lm.Or(c.NumHeads, 128), HeadDim: lm.Or(c.HeadDim, 64), State: lm.Or(c.StateSize, 128),
		Groups: lm.Or(c.NGroups, 8), ConvKernel: lm.Or(c.ConvKernel, 4)}
	if err := d.Validate(where, nn.Mamba2Names{Heads: "num_heads", HeadDim: "head_dim", State: "state_size", Groups: "n_groups", ConvKernel: "conv_kernel"}); err != nil {
		return Mamba2Options{}, err
	}
	if inner := lm.Or(c.Expand, 2) * float64(hidden); inner != float64(d.Inner()) {
		return Mamba2Options{}, fmt.Errorf("%s: expand × hidden_size (%g) must be num_heads × head_dim (%d), as Mamba2Mixer views it", where, inner, d.Inner())
	}
	if act := c.HiddenAct; act != "" && act != "silu" && act != "swish" {
		return Mamba2Options{}, errs.Unsupportedf("%s: hidden_act %q; the Mamba-2 mixer's convolution runs SiLU", where, act)
	}
	mo := nn.Mamba2Options{Eps: lm.Or(c.LayerNormEpsilon, 1e-5), NormGroups: 1, Chunk: lm.Or(c.ChunkSize, 256), Norm: nn.Mamba2GateFirst}
	if mo.Chunk <= 0 {
		return Mamba2Options{}, fmt.Errorf("%s: chunk_size must be positive, got %d", where, mo.Chunk)
	}
	if len(c.TimeStepLimit) > 0 && string(c.TimeStepLimit) != "null" {
		var l []float64
		if err := json.Unmarshal(c.TimeStepLimit, &l); err != nil || len(l) != 2 || l[0] < 0 || l[1] < l[0] || l[1] <= 0 {
			return Mamba2Options{}, fmt.Errorf("%s: time_step_limit %s: want [low, high] with 0 <= low <= high, high > 0", where, strings.TrimSpace(string(c.TimeStepLimit)))
		}
		mo.DtMin = l[0]
		if l[1] < math.MaxFloat64 { // Python's Infinity reads as the largest float64
			mo.DtMax = l[1]
		}
	}
	s := lm.Spec{
		Architecture: cfg.Architecture(), ModelType: cfg.ModelType,
		VocabSize: lm.Or(c.VocabSize, 32768), Hidden: hidden, Intermediate: d.Inner(), Layers: lm.Or(c.NumHiddenLayers, 64),
		Heads: 1, KVHeads: 1, HeadDim: hidden, MaxPositions: unbounded, // no attention: Mamba-1's reading
		TieEmbeddings: lm.Or(c.TieWordEmbeddings, false), EOS: c.EOSTokenID, BOS: -1,
	}
	if len(c.BOSTokenID) > 0 {
		s.BOS = c.BOSTokenID[0]
	} else if !cfg.Has("bos_token_id") {
		s.BOS = 0 // Mamba2Config's
	}
	if !cfg.Has("eos_token_id") {
		s.EOS = config.IDList{2} // Mamba2Config's
	}
	if err := s.CheckSizes(where); err != nil {
		return Mamba2Options{}, err
	}
	s.LayerKinds = make([]string, s.Layers)
	for i := range s.LayerKinds {
		s.LayerKinds[i] = nn.KindMamba
	}
	return Mamba2Options{Spec: s, Mamba: d, Mixer: mo, Eps: mo.Eps, ConvBias: lm.Or(c.UseConvBias, true), ProjBias: lm.Or(c.UseBias, false)}, nil
}

// NewMamba2 builds a Mamba2ForCausalLM from its config.json.
func NewMamba2(cfg *config.File) (lm.Model, error) {
	o, err := ResolveMamba2(cfg)
	if err != nil {
		return nil, err
	}
	return &Mamba2Model{o: o}, nil
}

// Mamba2Model is a Mamba-2 language model: every layer an RMSNorm (norm)
// and the Mamba-2 mixer (nn.Mamba2With) added to the residual; the final
// norm is backbone.norm_f, the head lm_head. transformers keeps the
// residual stream in float32 (residual_in_fp32); tputool keeps it in the
// compute dtype, which differs in bf16 compute only, as for Mamba-1.
type Mamba2Model struct{ o Mamba2Options }

// Options returns the resolved options.
func (m *Mamba2Model) Options() Mamba2Options { return m.o }

// Spec implements lm.Model.
func (m *Mamba2Model) Spec() *lm.Spec { return &m.o.Spec }

// LayerKind implements lm.Model: every layer a Mamba-2 block.
func (m *Mamba2Model) LayerKind(int) string { return nn.KindMamba }

// EmbedWeights implements lm.Model.
func (m *Mamba2Model) EmbedWeights() []lm.WeightSpec {
	s := &m.o.Spec
	return []lm.WeightSpec{{Name: "backbone.embeddings.weight", Shape: []int{s.VocabSize, s.Hidden}, Matmul: true}}
}

// LayerWeights implements lm.Model.
func (m *Mamba2Model) LayerWeights(i int) []lm.WeightSpec {
	p := fmt.Sprintf("backbone.layers.%d.", i)
	ws := []lm.WeightSpec{{Name: p + "norm.weight", Shape: []int{m.o.Spec.Hidden}}}
	return append(ws, nn.Mamba2Weights(p+"mixer.", m.o.Mamba, m.o.Spec.Hidden, m.o.ConvBias, m.o.ProjBias)...)
}

// FinalWeights implements lm.FinalWeighter: the final norm.
func (m *Mamba2Model) FinalWeights() []lm.WeightSpec {
	return []lm.WeightSpec{{Name: "backbone.norm_f.weight", Shape: []int{m.o.Spec.Hidden}}}
}

// HeadWeights implements lm.Model.
func (m *Mamba2Model) HeadWeights() []lm.WeightSpec {
	s := &m.o.Spec
	head, tp := "lm_head.weight", lm.Vocab
	if s.TieEmbeddings {
		head, tp = "backbone.embeddings.weight", lm.Replicated
	}
	return append(m.FinalWeights(), lm.WeightSpec{Name: head, Shape: []int{s.VocabSize, s.Hidden}, Matmul: true, TP: tp})
}

// LayerState implements lm.Model: the mixer's convolution window and
// scan state.
func (m *Mamba2Model) LayerState(_ int, batch, _ int) []lm.StateSpec {
	return nn.Mamba2State(m.o.Mamba, batch)
}

// Embed implements lm.Model.
func (m *Mamba2Model) Embed(w *lm.Params, tokens *Node) *Node {
	return nn.Embedding(w.Get("backbone.embeddings.weight"), tokens)
}

// Layer implements lm.Model: Mamba2Block.
func (m *Mamba2Model) Layer(i int, w *lm.Params, x *Node, state []*Node, step *lm.Step) (*Node, []*Node) {
	o := &m.o
	p := w.Scope(fmt.Sprintf("backbone.layers.%d", i))
	h := nn.RMSNorm(x, p.Get("norm.weight"), o.Eps, false)
	h, conv, ssm := nn.Mamba2With(o.Mamba, nn.Mamba2ParamsOf(p.Scope("mixer"), o.ConvBias, o.ProjBias), h, state[0], state[1], step, o.Mixer)
	return Add(x, h), []*Node{conv, ssm}
}

// Final implements lm.Finisher: backbone.norm_f.
func (m *Mamba2Model) Final(w *lm.Params, x *Node) *Node {
	return nn.RMSNorm(x, w.Get("backbone.norm_f.weight"), m.o.Eps, false)
}

// Head implements lm.Model: norm_f and lm_head.
func (m *Mamba2Model) Head(w *lm.Params, x *Node) *Node {
	name := "lm_head.weight"
	if m.o.Spec.TieEmbeddings {
		name = "backbone.embeddings.weight"
	}
	return nn.Linear(m.Final(w, x), w.Get(name), nil)
}

var (
	_ lm.Model         = (*Mamba2Model)(nil)
	_ lm.Finisher      = (*Mamba2Model)(nil)
	_ lm.FinalWeighter = (*Mamba2Model)(nil)
)
