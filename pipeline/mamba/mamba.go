// Package mamba implements the Mamba-1 language models, following
// transformers' models/mamba (MambaForCausalLM: state-spaces/mamba-130m-hf
// to mamba-2.8b-hf) and models/falcon_mamba (FalconMambaForCausalLM:
// tiiuae/falcon-mamba-7b and its Instruct build), and the Mamba-2 one
// (models/mamba2, Mamba2ForCausalLM: mamba2.go).
//
// Every layer is a MambaBlock: an RMSNorm (norm) and the selective state
// space mixer (nn.Mamba1: in_proj, the causal convolution, x_proj,
// dt_proj, the scan, the D skip, the gate, out_proj), added to the
// residual; the final norm is backbone.norm_f and the head lm_head (tied
// to backbone.embeddings by default). FalconMamba normalizes dt's
// low-rank input, B and C by their RMS without weights (mixer_rms_eps).
// There is no attention and no position: a layer's state is the
// convolution's window and the scan's state, of fixed size, and the
// context is not bounded by the model.
//
// transformers keeps the residual stream in float32 (residual_in_fp32,
// true by default); tputool keeps it in the compute dtype, which differs
// in bf16 compute only.
package mamba

import (
	"encoding/json"
	"fmt"
	"math"

	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/nn"
)

func init() {
	lm.Register("MambaForCausalLM", New)
	lm.Register("FalconMambaForCausalLM", New)
}

// Config is a MambaConfig or FalconMambaConfig config.json.
type Config struct {
	VocabSize         *int            `json:"vocab_size"`
	HiddenSize        *int            `json:"hidden_size"`
	StateSize         *int            `json:"state_size"`
	NumHiddenLayers   *int            `json:"num_hidden_layers"`
	LayerNormEpsilon  *float64        `json:"layer_norm_epsilon"`
	Expand            *int            `json:"expand"`
	IntermediateSize  *int            `json:"intermediate_size"`
	ConvKernel        *int            `json:"conv_kernel"`
	UseBias           *bool           `json:"use_bias"`
	UseConvBias       *bool           `json:"use_conv_bias"`
	HiddenAct         string          `json:"hidden_act"`
	TimeStepRank      json.RawMessage `json:"time_step_rank"` // an int or "auto"
	MixerRMSEps       *float64        `json:"mixer_rms_eps"`
	TieWordEmbeddings *bool           `json:"tie_word_embeddings"`
	BOSTokenID        config.IDList   `json:"bos_token_id"`
	EOSTokenID        config.IDList   `json:"eos_token_id"`
}

// Options are the resolved hyperparameters.
type Options struct {
	Spec               lm.Spec
	Mamba              nn.Mamba1Dims
	Eps                float64
	ConvBias, ProjBias bool
	Act                func(*Node) *Node
	// RMSEps > 0 is FalconMamba's norm of dt's input, B and C.
	RMSEps float64
	// Chunk is the scan's chunk.
	Chunk int
}

// unbounded is Spec.MaxPositions of a model without positions.
const unbounded = 1 << 20

// Resolve reads a MambaForCausalLM or FalconMambaForCausalLM config.json
// (MambaConfig's defaults: hidden 768, state 16, 32 layers, expand 2,
// conv 4, vocabulary 50280, eps 1e-5, silu, time_step_rank
// ceil(hidden/16), use_bias true, tied, bos and eos 0;
// FalconMambaConfig's use_bias false and mixer_rms_eps 1e-6).
// intermediate_size, when written, wins over expand, as both classes
// read it.
func Resolve(cfg *config.File) (Options, error) {
	where := lm.ConfigName(cfg)
	var c Config
	if err := cfg.Decode(&c); err != nil {
		return Options{}, err
	}
	falcon := cfg.Architecture() == "FalconMambaForCausalLM"
	hidden := lm.Or(c.HiddenSize, 768)
	inner := lm.Or(c.Expand, 2) * hidden
	if c.IntermediateSize != nil {
		inner = *c.IntermediateSize
	}
	d := nn.Mamba1Dims{Inner: inner, State: lm.Or(c.StateSize, 16), ConvKernel: lm.Or(c.ConvKernel, 4), Rank: int(math.Ceil(float64(hidden) / 16))}
	var rank int
	switch err := json.Unmarshal(c.TimeStepRank, &rank); {
	case len(c.TimeStepRank) == 0 || string(c.TimeStepRank) == `"auto"` || string(c.TimeStepRank) == "null":
	case err != nil:
		return Options{}, fmt.Errorf("%s: time_step_rank: expected an integer or \"auto\": %w", where, err)
	default:
		d.Rank = rank
	}
	if d.Inner <= 0 || d.State <= 0 || d.Rank <= 0 || d.ConvKernel < 2 {
		return Options{}, fmt.Errorf("%s: intermediate_size %d, state_size %d and time_step_rank %d must be positive and conv_kernel %d at least 2", where, d.Inner, d.State, d.Rank, d.ConvKernel)
	}
	act := c.HiddenAct
	if act == "" {
		act = "silu"
	}
	actFn := nn.Activation(act)
	if actFn == nil {
		return Options{}, errs.Unsupportedf("%s: hidden_act %q (supported: %v)", where, act, nn.ActivationNames())
	}
	s := lm.Spec{
		Architecture: cfg.Architecture(), ModelType: cfg.ModelType,
		VocabSize: lm.Or(c.VocabSize, 50280), Hidden: hidden, Intermediate: d.Inner, Layers: lm.Or(c.NumHiddenLayers, 32),
		// No attention: one "head" the width of the hidden state keeps
		// the sizes other code checks meaningful; no layer declares a
		// KV cache.
		Heads: 1, KVHeads: 1, HeadDim: hidden, MaxPositions: unbounded,
		TieEmbeddings: lm.Or(c.TieWordEmbeddings, true), EOS: c.EOSTokenID, BOS: -1,
	}
	if len(c.BOSTokenID) > 0 {
		s.BOS = c.BOSTokenID[0]
	} else if !cfg.Has("bos_token_id") {
		s.BOS = 0 // MambaConfig's
	}
	if !cfg.Has("eos_token_id") {
		s.EOS = config.IDList{0} // MambaConfig's
	}
	if err := s.CheckSizes(where); err != nil {
		return Options{}, err
	}
	s.LayerKinds = make([]string, s.Layers)
	for i := range s.LayerKinds {
		s.LayerKinds[i] = nn.KindMamba1
	}
	// use_bias: MambaConfig's default is true, FalconMambaConfig's false
	// (the releases write it).
	o := Options{Spec: s, Mamba: d, Eps: lm.Or(c.LayerNormEpsilon, 1e-5), ConvBias: lm.Or(c.UseConvBias, true), ProjBias: lm.Or(c.UseBias, !falcon), Act: actFn, Chunk: nn.Mamba1Chunk}
	if falcon {
		o.RMSEps = lm.Or(c.MixerRMSEps, 1e-6)
	}
	return o, nil
}

// New builds the model from its config.json.
func New(cfg *config.File) (lm.Model, error) {
	o, err := Resolve(cfg)
	if err != nil {
		return nil, err
	}
	return &Model{o: o}, nil
}

// Model is a Mamba-1 language model.
type Model struct{ o Options }

// Options returns the resolved options.
func (m *Model) Options() Options { return m.o }

// Spec implements lm.Model.
func (m *Model) Spec() *lm.Spec { return &m.o.Spec }

// LayerKind implements lm.Model: every layer a Mamba-1 block.
func (m *Model) LayerKind(int) string { return nn.KindMamba1 }

// EmbedWeights implements lm.Model.
func (m *Model) EmbedWeights() []lm.WeightSpec {
	s := &m.o.Spec
	return []lm.WeightSpec{{Name: "backbone.embeddings.weight", Shape: []int{s.VocabSize, s.Hidden}, Matmul: true}}
}

// LayerWeights implements lm.Model.
func (m *Model) LayerWeights(i int) []lm.WeightSpec {
	p := fmt.Sprintf("backbone.layers.%d.", i)
	ws := []lm.WeightSpec{{Name: p + "norm.weight", Shape: []int{m.o.Spec.Hidden}}}
	return append(ws, nn.Mamba1Weights(p+"mixer.", m.o.Mamba, m.o.Spec.Hidden, m.o.ConvBias, m.o.ProjBias)...)
}

// FinalWeights implements lm.FinalWeighter: the final norm.
func (m *Model) FinalWeights() []lm.WeightSpec {
	return []lm.WeightSpec{{Name: "backbone.norm_f.weight", Shape: []int{m.o.Spec.Hidden}}}
}

// HeadWeights implements lm.Model.
func (m *Model) HeadWeights() []lm.WeightSpec {
	s := &m.o.Spec
	head, tp := "lm_head.weight", lm.Vocab
	if s.TieEmbeddings {
		head, tp = "backbone.embeddings.weight", lm.Replicated
	}
	return append(m.FinalWeights(), lm.WeightSpec{Name: head, Shape: []int{s.VocabSize, s.Hidden}, Matmul: true, TP: tp})
}

// LayerState implements lm.Model: the mixer's convolution window and
// scan state.
func (m *Model) LayerState(_ int, batch, _ int) []lm.StateSpec {
	return nn.Mamba1State(m.o.Mamba, batch)
}

// Embed implements lm.Model.
func (m *Model) Embed(w *lm.Params, tokens *Node) *Node {
	return nn.Embedding(w.Get("backbone.embeddings.weight"), tokens)
}

// Layer implements lm.Model: MambaBlock.
func (m *Model) Layer(i int, w *lm.Params, x *Node, state []*Node, step *lm.Step) (*Node, []*Node) {
	o := &m.o
	p := w.Scope(fmt.Sprintf("backbone.layers.%d", i))
	h := nn.RMSNorm(x, p.Get("norm.weight"), o.Eps, false)
	h, conv, ssm := nn.Mamba1(o.Mamba, nn.Mamba1ParamsOf(p.Scope("mixer"), o.ConvBias, o.ProjBias), h, state[0], state[1], step,
		nn.Mamba1Options{Act: o.Act, RMSEps: o.RMSEps, Chunk: o.Chunk})
	return Add(x, h), []*Node{conv, ssm}
}

// Final implements lm.Finisher: backbone.norm_f.
func (m *Model) Final(w *lm.Params, x *Node) *Node {
	return nn.RMSNorm(x, w.Get("backbone.norm_f.weight"), m.o.Eps, false)
}

// Head implements lm.Model: norm_f and lm_head.
func (m *Model) Head(w *lm.Params, x *Node) *Node {
	name := "lm_head.weight"
	if m.o.Spec.TieEmbeddings {
		name = "backbone.embeddings.weight"
	}
	return nn.Linear(m.Final(w, x), w.Get(name), nil)
}

var (
	_ lm.Model         = (*Model)(nil)
	_ lm.Finisher      = (*Model)(nil)
	_ lm.FinalWeighter = (*Model)(nil)
)

// renameEmbedding reads backbone.embedding.weight, as some conversions
// store it, as backbone.embeddings.weight (MambaModel's and
// Mamba2Model's load_hook rename "embedding." so).
func renameEmbedding(stored string) string {
	if stored == "backbone.embedding.weight" {
		return "backbone.embeddings.weight"
	}
	return stored
}

// RenameWeight implements lm.Renamer (renameEmbedding).
func (m *Model) RenameWeight(stored string) string { return renameEmbedding(stored) }

// RenameWeight implements lm.Renamer (renameEmbedding).
func (m *Mamba2Model) RenameWeight(stored string) string { return renameEmbedding(stored) }

var (
	_ lm.Renamer = (*Model)(nil)
	_ lm.Renamer = (*Mamba2Model)(nil)
)
