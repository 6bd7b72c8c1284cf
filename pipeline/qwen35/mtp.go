package qwen35

import (
	"strings"

	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/nn"
)

// Qwen3.5's multi-token-prediction head (mtp.*), as vLLM runs it for
// speculative decoding (models/qwen3_5_mtp.py, Qwen3_5MultiTokenPredictor;
// transformers does not read it): the embedding of the next token and the
// model's final hidden state, each (1+w)-RMSNormed (pre_fc_norm_embedding,
// pre_fc_norm_hidden), concatenated in that order and projected back to
// the hidden size by fc, then one gated-attention decoder layer with the
// model's MLP (dense, or the sparse block in Qwen3.5-MoE) and KV cache of
// its own, and the (1+w) norm (mtp.norm), whose output the model's
// lm_head projects and a chained draft step reads as its hidden state.
// Qwen3-Next's head (vLLM's qwen3_next_mtp.py) is the same module under
// the same names.

var _ lm.MultiToken = (*Model)(nil)

// MTPLayers implements lm.MultiToken: mtp_num_hidden_layers (Qwen3-Next:
// num_nextn_predict_layers as vLLM reads it, else mtp_num_hidden_layers,
// else 1).
func (m *Model) MTPLayers() int { return m.o.MTPLayers }

// WithMTP implements lm.MultiToken: the model reading its MTP head too.
// A head of several layers (vLLM runs layer k at draft step k) is
// refused: every release has one.
func (m *Model) WithMTP() (lm.MTPModel, error) {
	if m.o.MTPLayers != 1 {
		return nil, errs.Unsupportedf("a multi-token-prediction head of %d layers (%s): tputool runs a head of one layer, as every Qwen3.5 and Qwen3-Next release has", m.o.MTPLayers, m.mtpField())
	}
	return &MTP{Model: m}, nil
}

// mtpField is the config field that declares the head's layers.
func (m *Model) mtpField() string {
	if m.o.Fused {
		return "num_nextn_predict_layers or mtp_num_hidden_layers"
	}
	return "mtp_num_hidden_layers"
}

// MTP is the Qwen3.5 model with its multi-token-prediction head: it
// implements lm.MTPModel, and skips only the vision tower.
type MTP struct{ *Model }

var _ lm.MTPModel = (*MTP)(nil)

// mtpPrefix is the head's tensor prefix, at the checkpoint's top level
// in both layouts.
const mtpPrefix = "mtp."

// SkipWeight implements lm.Skipper: the vision tower alone.
func (m *MTP) SkipWeight(name string) (string, bool) {
	if strings.HasPrefix(name, mtpPrefix) {
		return "", false
	}
	return m.Model.SkipWeight(name)
}

// MTPWeights implements lm.MTPModel.
func (m *MTP) MTPWeights() []lm.WeightSpec {
	h := m.o.Spec.Hidden
	ws := []lm.WeightSpec{
		{Name: mtpPrefix + "pre_fc_norm_embedding.weight", Shape: []int{h}},
		{Name: mtpPrefix + "pre_fc_norm_hidden.weight", Shape: []int{h}},
		{Name: mtpPrefix + "fc.weight", Shape: []int{h, 2 * h}, Matmul: true},
	}
	ws = append(ws, m.layerWeights(mtpPrefix+"layers.0.", lm.KindFull, m.sparse(0))...)
	return append(ws, lm.WeightSpec{Name: mtpPrefix + "norm.weight", Shape: []int{h}})
}

// MTPState implements lm.MTPModel: the layer's KV cache.
func (m *MTP) MTPState(batch, cacheLen int) []lm.StateSpec {
	s := &m.o.Spec
	return nn.KVCacheState(batch, s.KVHeads, cacheLen, s.HeadDim)
}

// MTP implements lm.MTPModel.
func (m *MTP) MTP(w *lm.Params, tokens, hidden *Node, state []*Node, step *lm.Step) (*Node, []*Node) {
	p := w.Scope("mtp")
	e := nn.RMSNorm(m.Embed(w, tokens), p.Get("pre_fc_norm_embedding.weight"), m.o.Eps, true)
	h := nn.RMSNorm(hidden, p.Get("pre_fc_norm_hidden.weight"), m.o.Eps, true)
	x := nn.Linear(Concatenate([]*Node{e, h}, -1), p.Get("fc.weight"), nil) // [B, T, H]
	x, out := m.layer(p.Scope("layers.0"), lm.KindFull, m.sparse(0), x, state, step)
	return nn.RMSNorm(x, p.Get("norm.weight"), m.o.Eps, true), out
}

// MTPHead implements lm.MTPModel: lm_head (or the tied embedding).
func (m *MTP) MTPHead(w *lm.Params, x *Node) *Node {
	return nn.Linear(x, w.Get(m.headName()), nil)
}
