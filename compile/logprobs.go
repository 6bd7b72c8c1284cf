package compile

import (
	"container/heap"
	"fmt"
	"math"
	"slices"
	"sync"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/sample"
)

// MaxTopLogprobs is the most alternatives PromptLogprobs gives a token.
const MaxTopLogprobs = 20

// logprobProgs are PromptLogprobs' programs, made at its first call:
// the layers with their last hidden states for output (compiled mode) or
// the head that passes them on (eager mode), and the head that scores
// positions, with (top) or without the logits for output.
type logprobProgs struct {
	once       sync.Once
	hidden     *Program
	score, top *Program
	err        error

	mu       sync.Mutex
	graphTop map[int]*Program // by k: the alternatives picked in the graph (topInGraph)
}

// logprobGraphTop makes the alternatives be picked in the graph on every
// backend (a variable for tests: they are picked on the host where the
// backend computes in host memory).
var logprobGraphTop = false

// topInGraph says whether the scoring head picks a position's
// alternatives itself: on a device (TPU, GPU), where moving each call's
// logits to the host would cost more than k passes over them; on the
// CPU, one pass on the host over logits already in host memory is the
// cheaper.
func (r *Runner) topInGraph() bool { return logprobGraphTop || !r.opts.Caps.HostMemory }

// graphTopProgram is the scoring head that picks k alternatives in the
// graph, made at its first use.
func (r *Runner) graphTopProgram(k int) (*Program, error) {
	p := &r.lp
	p.mu.Lock()
	defer p.mu.Unlock()
	if prog := p.graphTop[k]; prog != nil {
		return prog, nil
	}
	prog, err := r.newProgram(fmt.Sprintf("logprob-head-top%d", k), func(in []*graph.Node) []*graph.Node { return r.logprobTopGraph(in, k) })
	if err != nil {
		return nil, err
	}
	if p.graphTop == nil {
		p.graphTop = map[int]*Program{}
	}
	p.graphTop[k] = prog
	return prog, nil
}

// logprobHeadBytes bounds the logits one call of the scoring head holds
// ([rows, vocab] f32): its rows are at most this over the vocabulary's
// bytes a row (a variable for tests).
var logprobHeadBytes = 32 << 20

// PromptLogprobsBytes is the most memory one of PromptLogprobs' steps
// holds beyond the weights and the KV caches, for up to rows prompts of
// at most longest tokens: the attention scores (EmbedScoreBytes), the
// step's hidden states in f32 (twice: the step's output and the rows
// copied out of it; the carried width, lm.Spec.Carried, where a model
// carries more than Hidden) and three of the scoring head's pieces of
// logits (the logits and two passes over them).
func PromptLogprobsBytes(s *lm.Spec, rows, longest int) int64 {
	positions := rows * embedPositions(s, longest)
	hidden := int64(positions) * int64(max(s.Hidden, s.Carried)) * 4
	head := int64(logprobRowBucket(positions, logprobHeadRows(s.VocabSize))) * int64(s.VocabSize) * 4
	return EmbedScoreBytes(s, rows, longest) + 2*hidden + 3*head
}

// logprobHeadRows is the most positions one call of the scoring head
// takes: 512 for a vocabulary of up to 16,384 tokens, 256 for 32,000,
// 48 for Qwen's 151,936; 8 at least, a multiple of 8.
func logprobHeadRows(vocab int) int {
	rows := logprobHeadBytes / max(vocab*4, 1)
	return max(8, min(512, rows/8*8))
}

// logprobRowBucket is the rows of a scoring call of n positions: the
// next power of two from 8, so that calls repeat a few shapes.
func logprobRowBucket(n, most int) int {
	b := 8
	for b < n {
		b *= 2
	}
	return min(b, most)
}

// PromptLogprobs runs prompts through the model together, in steps as
// Embed runs them, and returns, for each prompt, the log-probability the
// model gives each of its tokens after the first given the tokens before
// it: out[i][j] is prompt i's token j+1 (len(prompts[i])−1 entries),
// with its rank and, for topK above 0, its topK likeliest alternatives
// (at most MaxTopLogprobs). This is what perplexity averages and what
// an echoed completion's prompt log-probabilities are. The logits of
// every position are computed in pieces of at most logprobHeadRows
// positions; only the figures come back to the host (and, for topK on a
// backend computing in host memory, one piece's logits at a time, which
// the host picks the alternatives from; elsewhere the graph picks them:
// topInGraph). Nothing of it stays in any State. Models
// without a language-model head (encoders, classifiers), with
// host-routed experts or sharded over several devices are refused
// (errs.ErrUnsupported).
func (r *Runner) PromptLogprobs(prompts [][]int, topK int) ([][]sample.TokenLogprob, error) {
	return r.PromptLogprobsFrom(prompts, nil, topK)
}

// PromptLogprobsFrom is PromptLogprobs scoring only prompt i's tokens
// from from[i] on (nil: all but the first): the entries of the tokens
// before are left zero, and the scoring head never runs over their
// positions (perplexity's windows score only their last tokens, the
// rest being context).
func (r *Runner) PromptLogprobsFrom(prompts [][]int, from []int, topK int) ([][]sample.TokenLogprob, error) {
	if from != nil && len(from) != len(prompts) {
		return nil, fmt.Errorf("prompt log-probabilities: %d starts for %d prompts", len(from), len(prompts))
	}
	if err := GenerateError(r.spec); err != nil {
		return nil, err
	}
	if r.tp != nil || r.moe != nil {
		return nil, fmt.Errorf("prompt log-probabilities run on one device with the experts in the graph: %w", errs.ErrUnsupported)
	}
	if topK < 0 || topK > MaxTopLogprobs {
		return nil, errs.Usagef("%d top log-probabilities asked: want 0 to %d", topK, MaxTopLogprobs)
	}
	p := &r.lp
	p.once.Do(func() {
		if r.opts.Mode == Compiled {
			p.hidden, p.err = r.newProgram("logprob-layers", r.hiddenGraph)
		} else {
			p.hidden, p.err = r.newProgram("logprob-pass", r.hiddenPassGraph)
		}
		if p.err == nil {
			p.score, p.err = r.newProgram("logprob-head", func(in []*graph.Node) []*graph.Node { return r.logprobGraph(in, false) })
		}
		if p.err == nil {
			p.top, p.err = r.newProgram("logprob-head-top", func(in []*graph.Node) []*graph.Node { return r.logprobGraph(in, true) })
		}
	})
	if p.err != nil {
		return nil, p.err
	}
	st := r.NewState()
	defer st.Release()
	if err := st.beginPass(prompts); err != nil {
		return nil, err
	}
	out := make([][]sample.TokenLogprob, len(prompts))
	for i, pr := range prompts {
		out[i] = make([]sample.TokenLogprob, len(pr)-1)
	}
	most := logprobHeadRows(r.spec.VocabSize)
	for st.Pending() > 0 {
		n := st.throughSwitch(min(embedPiece, st.Pending()))
		start := st.next
		hid, err := st.hiddenChunk(n)
		if err != nil {
			return nil, err
		}
		// The positions of this piece that have a next token to score:
		// row i's slot start+t is its token j = start+t−pads[i], whose
		// successor j+1 is scored there.
		scored := func(i, j int) bool {
			return j >= 0 && j+1 < len(prompts[i]) && (from == nil || j+1 >= from[i])
		}
		type pos struct{ row, tok int }
		var at []pos
		for i := range prompts {
			for t := range n {
				if j := start + t - int(st.pads[i]); scored(i, j) {
					at = append(at, pos{i, j + 1})
				}
			}
		}
		// The layers' output is [B, n, W]: W is Hidden, or wider where the
		// model carries more than the residual stream from layer to layer
		// (Gemma 3n's streams, the per-layer inputs); Head reads W.
		h := hid.Shape().Dimensions[2]
		var flat []float32
		err = tensors.ConstFlatData(hid, func(v []float32) { // [B, n, W]
			flat = make([]float32, len(at)*h)
			k := 0
			for i := range prompts {
				for t := range n {
					if j := start + t - int(st.pads[i]); scored(i, j) {
						copy(flat[k*h:(k+1)*h], v[(i*n+t)*h:(i*n+t+1)*h])
						k++
					}
				}
			}
		})
		hid.FinalizeAll()
		if err != nil {
			return nil, err
		}
		for lo := 0; lo < len(at); lo += most {
			hi := min(lo+most, len(at))
			targets := make([]int32, hi-lo)
			for k := range targets {
				a := at[lo+k]
				targets[k] = int32(prompts[a.row][a.tok])
			}
			res, err := r.scorePositions(flat[lo*h:hi*h], h, targets, most, topK)
			if err != nil {
				return nil, err
			}
			for k, tl := range res {
				a := at[lo+k]
				out[a.row][a.tok-1] = tl
			}
		}
	}
	return out, nil
}

// scorePositions runs the scoring head over len(targets) positions' last
// layer outputs x ([len(targets), h] float32, h the width the layers
// carry), padded to a bucket of rows, and returns each target's
// log-probability, rank and, for topK, alternatives.
func (r *Runner) scorePositions(x []float32, h int, targets []int32, most, topK int) ([]sample.TokenLogprob, error) {
	n := len(targets)
	rows := logprobRowBucket(n, most)
	xs := make([]float32, rows*h)
	copy(xs, x)
	ts := make([]int32, rows)
	copy(ts, targets)
	prog := r.lp.score
	inGraph := topK > 0 && r.topInGraph()
	switch {
	case inGraph:
		var err error
		if prog, err = r.graphTopProgram(topK); err != nil {
			return nil, err
		}
	case topK > 0:
		prog = r.lp.top
	}
	args := []Arg{{T: tensors.FromFlatDataAndDimensions(xs, rows, h)}, {T: tensors.FromFlatDataAndDimensions(ts, rows)}}
	outs, err := prog.Call(r.weightArgs(args, r.headW)...)
	if err != nil {
		return nil, err
	}
	defer func() {
		for _, o := range outs {
			o.FinalizeAll()
		}
	}()
	res := make([]sample.TokenLogprob, n)
	err = tensors.ConstFlatData(outs[0], func(lp []float32) {
		for k := range res {
			res[k].Logprob = lp[k]
		}
	})
	if err == nil {
		err = tensors.ConstFlatData(outs[1], func(above []int32) {
			for k := range res {
				res[k].Rank = int(above[k]) + 1
			}
		})
	}
	if err != nil || topK == 0 {
		return res, err
	}
	if inGraph {
		var ids []int32
		if err := tensors.ConstFlatData(outs[2], func(v []int32) { ids = slices.Clone(v) }); err != nil { // [rows, k]
			return nil, err
		}
		err = tensors.ConstFlatData(outs[3], func(lps []float32) { // [rows, k]
			for k := range res {
				res[k].Top = make([]sample.TopLogprob, topK)
				for j := range topK {
					res[k].Top[j] = sample.TopLogprob{ID: int(ids[k*topK+j]), Logprob: lps[k*topK+j]}
				}
			}
		})
		return res, err
	}
	var lse []float32
	if err := tensors.ConstFlatData(outs[2], func(v []float32) { lse = slices.Clone(v) }); err != nil {
		return nil, err
	}
	err = tensors.ConstFlatData(outs[3], func(logits []float32) { // [rows, V]
		v := len(logits) / rows
		for k := range res {
			best := topLogits(logits[k*v:(k+1)*v], topK)
			res[k].Top = make([]sample.TopLogprob, len(best))
			for j, id := range best {
				res[k].Top[j] = sample.TopLogprob{ID: id, Logprob: logits[k*v+id] - lse[k]}
			}
		}
	})
	return res, err
}

// topLogits returns the ids of the k largest logits, largest first, equal
// logits in the order of their ids (NaNs never chosen).
func topLogits(logits []float32, k int) []int {
	h := &minLogits{v: logits}
	for id, x := range logits {
		if x != x { // NaN
			continue
		}
		if h.Len() < k {
			heap.Push(h, id)
			continue
		}
		if worst := h.ids[0]; x > logits[worst] {
			h.ids[0] = id
			heap.Fix(h, 0)
		}
	}
	out := make([]int, h.Len())
	for i := len(out) - 1; i >= 0; i-- {
		out[i] = heap.Pop(h).(int)
	}
	return out
}

// minLogits is a heap of token ids whose top is the worst kept: the
// smallest logit, the largest id among equals.
type minLogits struct {
	v   []float32
	ids []int
}

func (h *minLogits) Len() int { return len(h.ids) }
func (h *minLogits) Less(i, j int) bool {
	a, b := h.ids[i], h.ids[j]
	if h.v[a] != h.v[b] {
		return h.v[a] < h.v[b]
	}
	return a > b
}
func (h *minLogits) Swap(i, j int) { h.ids[i], h.ids[j] = h.ids[j], h.ids[i] }
func (h *minLogits) Push(x any)    { h.ids = append(h.ids, x.(int)) }
func (h *minLogits) Pop() any {
	x := h.ids[len(h.ids)-1]
	h.ids = h.ids[:len(h.ids)-1]
	return x
}

// hiddenChunk runs the next n pending tokens of every row, as
// finalChunk does, and returns the last layer's output for each, [B, n,
// W] float32 (before the final norm; W is Hidden or what the model
// carries beside it), for the caller to finalize.
func (st *State) hiddenChunk(n int) (*tensors.Tensor, error) { return st.pendingOn(st.r.lp.hidden, n) }

// hiddenGraph is stepGraph with the last layer's hidden states of every
// position, [B, T, Hidden] float32, in place of the logits.
func (r *Runner) hiddenGraph(in []*graph.Node) []*graph.Node {
	x, _, out := r.stepLayers(0, in)
	out[0] = graph.ConvertDType(x, dtypes.Float32)
	return out
}

// hiddenPassGraph: [hidden [B, T, H], head weights...] -> [the same in
// float32]: eager mode's head for PromptLogprobs, which scores them in
// pieces (logprobGraph).
func (r *Runner) hiddenPassGraph(in []*graph.Node) []*graph.Node {
	return []*graph.Node{graph.ConvertDType(in[0], dtypes.Float32)}
}

// logprobTopGraph is logprobGraph whose outputs after the first two are
// the k likeliest tokens of each position, [ids [N, k] int32,
// log-probabilities [N, k] float32], best first: k rounds of an argmax
// (the lowest id among equals), each taking its pick out of the next.
func (r *Runner) logprobTopGraph(in []*graph.Node, k int) []*graph.Node {
	out := r.logprobGraph(in, true)
	lse, l := out[2], out[3]
	g := l.Graph()
	dims := l.Shape().Dimensions
	ids := graph.Iota(g, shapes.Make(dtypes.Int32, dims...), 1)
	gone := graph.BroadcastToDims(graph.Scalar(g, dtypes.Float32, math.Inf(-1)), dims...)
	var picks, lps []*graph.Node
	for range k {
		id := graph.ArgMax(l, 1, dtypes.Int32) // [N]
		picks = append(picks, graph.ExpandAxes(id, 1))
		lps = append(lps, graph.ExpandAxes(graph.Sub(graph.ReduceMax(l, 1), lse), 1))
		l = graph.Where(graph.Equal(ids, graph.BroadcastToDims(graph.ExpandAxes(id, 1), dims...)), gone, l)
	}
	return []*graph.Node{out[0], out[1], graph.Concatenate(picks, 1), graph.Concatenate(lps, 1)}
}

// logprobGraph: [last layer outputs [N, W] float32, targets [N] int32, head
// weights...] -> [the targets' log-probabilities [N] float32, the number
// of logits strictly above each target's [N] int32] and, with logits,
// [log-sum-exp [N] float32, logits [N, V] float32]. The head runs on all
// N positions at once (Head takes [B, Hidden] rows); a target outside
// the vocabulary is not asked for (padding rows target 0, their figures
// unread).
func (r *Runner) logprobGraph(in []*graph.Node, logits bool) []*graph.Node {
	x := graph.ConvertDType(in[0], r.opts.DType)
	l := graph.ConvertDType(r.model.Head(r.params(r.headW, in[2:]), x), dtypes.Float32) // [N, V]
	g := l.Graph()
	dims := l.Shape().Dimensions
	mx := graph.ReduceMax(l, 1)
	lse := graph.Add(graph.Log(graph.ReduceSum(graph.Exp(graph.Sub(l, graph.ExpandAxes(mx, 1))), 1)), mx)
	rows := graph.Iota(g, shapes.Make(dtypes.Int32, dims[0], 1), 0)
	target := graph.Gather(l, graph.Concatenate([]*graph.Node{rows, graph.ExpandAxes(in[1], 1)}, 1)) // [N]
	above := graph.ReduceSum(graph.ConvertDType(graph.GreaterThan(l, graph.ExpandAxes(target, 1)), dtypes.Int32), 1)
	out := []*graph.Node{graph.Sub(target, lse), above}
	if logits {
		out = append(out, lse, l)
	}
	return out
}
