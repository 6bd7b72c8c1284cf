package lm

import (
	"fmt"

	"github.com/gomlx/gomlx/pkg/core/graph"

	"github.com/tputool/tputool/internal/errs"
)

// A multi-token-prediction (MTP) head is a small module trained with a
// model to predict the token after next (DeepSeek-V3's MTP, Qwen3-Next's
// and Qwen3.5's mtp.*): at position i it reads the model's final hidden
// state there and the embedding of the token at i+1, and its logits
// predict the token at i+2. Released checkpoints carry it for
// speculative decoding (vLLM's "mtp" method): the head drafts the next
// tokens, one cheap step each, feeding its own output back as the hidden
// state for the token after, and the model confirms them in one step.
//
// A model whose checkpoint may hold one implements MultiToken; WithMTP
// gives the model that reads the head too (MTPModel), which is what a
// runner loads when it drafts with the head. The head has layers of its
// own, with their own KV caches over positions, apart from the model's.

// MultiToken is a model whose checkpoint may carry an MTP head.
type MultiToken interface {
	// MTPLayers is the number of the head's decoder layers the config
	// declares (mtp_num_hidden_layers; 0: none).
	MTPLayers() int
	// WithMTP returns the model reading its MTP head too.
	WithMTP() (MTPModel, error)
}

// MTPModel is a Model read with its MTP head: Weights lists the head's
// tensors after the model's, and the checkpoint's MTP tensors are no
// longer skipped.
type MTPModel interface {
	Model
	// MTPWeights lists the tensors MTP reads besides EmbedWeights and
	// HeadWeights (which it shares with the model: the embedding and
	// lm_head).
	MTPWeights() []WeightSpec
	// MTPState lists the state of the head's one layer (a KV cache) for
	// a batch and a cache length, as LayerState does a model layer's.
	MTPState(batch, cacheLen int) []StateSpec
	// MTP runs the head for the step: tokens [B, T] (int32) are the
	// tokens at the positions after the step's (Positions + 1), hidden
	// [B, T, Hidden] (compute dtype) the final hidden states (Finisher's)
	// at the step's positions, from the model, or from the head's own
	// output where it chains its drafts. It returns its output [B, T,
	// Hidden] (normed: what MTPHead projects and what a chained step
	// reads as hidden) and its layer's new state.
	MTP(w *Params, tokens, hidden *graph.Node, state []*graph.Node, step *Step) (*graph.Node, []*graph.Node)
	// MTPHead maps MTP's output [B, Hidden] to logits [B, VocabSize]:
	// the model's lm_head, without its final norm.
	MTPHead(w *Params, x *graph.Node) *graph.Node
}

// WithMTP makes l read its model's MTP head too, from the same
// checkpoint: the checkpoint must hold every tensor of the head. A model
// without one, or whose config declares none, is refused
// (errs.ErrUnsupported).
func (l *Loaded) WithMTP() error {
	if _, ok := l.Model.(MTPModel); ok {
		return nil
	}
	arch := l.Model.Spec().Architecture
	mt, ok := l.Model.(MultiToken)
	if !ok {
		return errs.Unsupportedf("%s (%s) has no multi-token-prediction head tputool reads (Qwen3.5, Qwen3.5-MoE, Qwen3-Next, DeepSeek-V3, GLM-4.5 and Ling 2.0 have one)", arch, l.Dir)
	}
	if mt.MTPLayers() == 0 {
		return errs.Unsupportedf("%s: its config (%s) declares no multi-token-prediction head (Qwen3.5's mtp_num_hidden_layers, or Qwen3-Next's, DeepSeek-V3's, GLM-4.5's and Ling 2.0's num_nextn_predict_layers, is 0 or absent)", l.Dir, l.Config.Path)
	}
	m, err := mt.WithMTP()
	if err != nil {
		return fmt.Errorf("%s: %w", l.Dir, err)
	}
	w := &Loaded{Dir: l.Dir, Config: l.Config, Model: m, weights: Weights(m), ckpt: l.ckpt}
	if err := w.check(); err != nil {
		return fmt.Errorf("%w (reading its multi-token-prediction head)", err)
	}
	l.Model, l.weights = m, w.weights
	l.byName, l.partOf = nil, nil // index again, with the head's weights
	return nil
}
