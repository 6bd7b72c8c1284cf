package deepseek

import (
	"fmt"
	"strings"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/nn"
)

// DeepSeek-V3's and GLM-4.5's multi-token-prediction head, as vLLM runs it
// for speculative decoding (models/deepseek_mtp.py, glm4_moe_mtp.py;
// transformers does not read it): the checkpoint's layer N =
// num_hidden_layers. At a position it reads the embedding of the next
// token and the model's final hidden state, each RMSNormed (enorm,
// hnorm), concatenated in that order and projected back to the hidden
// size by eh_proj (the embedding at the text's position 0 zeroed, as
// vLLM does), then runs a decoder layer of the model's own kind (MLA
// or grouped-query attention, with a cache of its own, and the sparse
// block) with its residuals. Its output is what a chained draft step
// reads as its hidden state; shared_head.norm and the model's lm_head make
// it logits. The layer's embed_tokens and shared_head.head are the
// releases' copies of model.embed_tokens and lm_head, which the head reads
// instead.

var _ lm.MultiToken = (*Model)(nil)

// MTPLayers implements lm.MultiToken: num_nextn_predict_layers.
func (m *Model) MTPLayers() int { return m.o.MTPLayers }

// WithMTP implements lm.MultiToken: the model reading its head too. A
// head of several layers is refused: every release has one.
func (m *Model) WithMTP() (lm.MTPModel, error) {
	if m.o.MTPLayers != 1 {
		return nil, errs.Unsupportedf("a multi-token-prediction head of %d layers (num_nextn_predict_layers): tputool runs a head of one layer, as every DeepSeek-V3 and GLM-4.5 release has", m.o.MTPLayers)
	}
	return &MTP{Model: m}, nil
}

// MTP is the model with its multi-token-prediction head: it implements
// lm.MTPModel.
type MTP struct{ *Model }

var _ lm.MTPModel = (*MTP)(nil)

// prefix is the head's layer's tensor prefix, "model.layers.N.".
func (m *MTP) prefix() string { return fmt.Sprintf("model.layers.%d.", m.Spec().Layers) }

// SkipWeight implements lm.Skipper: the head's copies of the embedding
// and lm_head, and layers past it.
func (m *MTP) SkipWeight(name string) (string, bool) {
	if rest, ok := strings.CutPrefix(name, m.prefix()); ok {
		switch rest {
		case "embed_tokens.weight", "shared_head.head.weight":
			return "the multi-token-prediction layer's copy of the model's embedding or lm_head, which the head reads instead", true
		}
		return "", false
	}
	return m.Model.SkipWeight(name)
}

// MTPWeights implements lm.MTPModel.
func (m *MTP) MTPWeights() []lm.WeightSpec {
	p, h := m.prefix(), m.Spec().Hidden
	ws := []lm.WeightSpec{
		{Name: p + "enorm.weight", Shape: []int{h}},
		{Name: p + "hnorm.weight", Shape: []int{h}},
		{Name: p + "eh_proj.weight", Shape: []int{h, 2 * h}, Matmul: true},
	}
	ws = append(ws, m.LayerWeights(m.Spec().Layers)...)
	return append(ws, lm.WeightSpec{Name: p + "shared_head.norm.weight", Shape: []int{h}})
}

// MTPState implements lm.MTPModel: the head's layer's cache.
func (m *MTP) MTPState(batch, cacheLen int) []lm.StateSpec {
	return m.LayerState(m.Spec().Layers, batch, cacheLen)
}

// MTP implements lm.MTPModel.
func (m *MTP) MTP(w *lm.Params, tokens, hidden *Node, state []*Node, step *lm.Step) (*Node, []*Node) {
	n := m.Spec().Layers
	p := w.Scope(fmt.Sprintf("model.layers.%d", n))
	emb := m.Embed(w, tokens) // [B, T, H]
	// vLLM zeroes the embedding at position 0 (deepseek_mtp.py,
	// glm4_moe_mtp.py: "masking inputs at position 0, as not needed by
	// MTP"): the head's first slot reads the model's hidden state alone.
	keep := ConvertDType(NotEqual(step.Positions, ScalarZero(emb.Graph(), dtypes.Int32)), emb.DType()) // [B, T]
	emb = Mul(emb, InsertAxes(keep, -1))
	e := nn.RMSNorm(emb, p.Get("enorm.weight"), m.o.Eps, false)
	h := nn.RMSNorm(hidden, p.Get("hnorm.weight"), m.o.Eps, false)
	x := nn.Linear(Concatenate([]*Node{e, h}, -1), p.Get("eh_proj.weight"), nil) // [B, T, H]
	return m.Layer(n, w, x, state, step)
}

// MTPHead implements lm.MTPModel: shared_head.norm, then lm_head (or the
// tied embedding).
func (m *MTP) MTPHead(w *lm.Params, x *Node) *Node {
	x = nn.RMSNorm(x, w.Get(m.prefix()+"shared_head.norm.weight"), m.o.Eps, false)
	head := "lm_head.weight"
	if m.Spec().TieEmbeddings {
		head = "model.embed_tokens.weight"
	}
	return nn.Linear(x, w.Get(head), nil)
}
