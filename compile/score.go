package compile

import (
	"fmt"
	"slices"
	"sync"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/pipeline/lm"
)

// scoreProgs is Score's program, made at its first call: the
// classification head over pooled hidden states.
type scoreProgs struct {
	once sync.Once
	prog *Program
	err  error
}

// Score runs inputs through a cross-encoder (lm.Scorer) together, as
// Embed runs them, and returns each one's scores: its classifier's
// logits on its final hidden states pooled as the model says (the first
// token's for BERT; the last token's for a causal classifier,
// lm.Spec.Classifier, which Embed's left padding makes each input's own
// last token), [len(inputs)][Labels] float32. An input is one text, or a
// pair in one sequence with the second text's ids carrying their token
// type (lm.Spec.Encoder; a decoder reads none). A model without a
// classification head is refused (errs.ErrUnsupported).
func (r *Runner) Score(inputs [][]int) ([][]float32, error) {
	sc, ok := r.model.(lm.Scorer)
	if !ok || sc.Labels() == 0 {
		return nil, fmt.Errorf("scores: %s has no classification head (a cross-encoder is a *ForSequenceClassification): %w", r.spec.Architecture, errs.ErrUnsupported)
	}
	pool, err := ParsePooling(sc.ScorePool())
	if err != nil {
		return nil, fmt.Errorf("scores: %s: %w", r.spec.Architecture, err)
	}
	if pt, ok := sc.(lm.PadTrimmer); ok && pt.TrailingPad() >= 0 {
		inputs = trimTrailing(inputs, pt.TrailingPad())
	}
	pooled, err := r.Embed(inputs, pool)
	if err != nil {
		return nil, err
	}
	r.score.once.Do(func() { r.score.prog, r.score.err = r.newProgram("score", r.scoreGraph) })
	if r.score.err != nil {
		return nil, r.score.err
	}
	h := r.spec.Hidden
	flat := make([]float32, 0, len(pooled)*h)
	for _, v := range pooled {
		flat = append(flat, v...)
	}
	outs, err := r.score.prog.Call(r.weightArgs([]Arg{{T: tensors.FromFlatDataAndDimensions(flat, len(pooled), h)}}, r.headW)...)
	if err != nil {
		return nil, err
	}
	defer outs[0].FinalizeAll()
	l := sc.Labels()
	scores := make([][]float32, len(pooled))
	err = tensors.ConstFlatData(outs[0], func(v []float32) { // [B, Labels]
		for i := range scores {
			scores[i] = append([]float32(nil), v[i*l:(i+1)*l]...)
		}
	})
	return scores, err
}

// scoreGraph: [pooled final hidden states [B, Hidden] float32, head
// weights...] -> [scores [B, Labels] float32].
func (r *Runner) scoreGraph(in []*graph.Node) []*graph.Node {
	return []*graph.Node{graph.ConvertDType(r.model.(lm.Scorer).Score(r.params(r.headW, in[1:]), in[0]), dtypes.Float32)}
}

// trimTrailing is inputs without the pad ids each ends in (the first
// token kept when every one is the pad), for a model that pools at each
// input's last token that is not its pad (lm.PadTrimmer); inputs
// unchanged share their slices.
func trimTrailing(inputs [][]int, pad int) [][]int {
	out, copied := inputs, false
	for i, in := range inputs {
		n := len(in)
		for n > 1 && in[n-1] == pad {
			n--
		}
		if n == len(in) {
			continue
		}
		if !copied {
			out, copied = slices.Clone(inputs), true
		}
		out[i] = in[:n]
	}
	return out
}
