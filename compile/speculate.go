package compile

import (
	"fmt"
	"sync"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/pipeline/lm"
)

// Speculative decoding's steps: several tokens of one row fed at once
// with the logits after each (DecodeMany), and the cache taken back over
// the ones the model did not confirm (Rewind). A KV cache is addressed by
// slot and every query sees only the slots at or before its own
// (nn.AttentionBias), so slots past the position a State rewinds to are
// never read before the next steps write them again, where the backend
// writes a cache slot in place (lm.Step.DynamicUpdateSlice: without it a
// slot is written by adding into its zeros, and a stale slot would be
// added to). State without slots (a recurrent layer's: Qwen3.5's linear
// attention) holds no position to go back to: DecodeMany keeps a copy of
// it from before the step (a replay), and Rewind restores the copy and
// feeds the step's tokens that are kept again, so such a model takes
// back only its last step's tokens (Speculates, not Rewindable), at the
// cost of a second step where some are kept and some not.

// manyProgs are DecodeMany's programs, made at its first call: the whole
// step with every position's logits (compiled mode) or the head that
// gives them (eager mode).
type manyProgs struct {
	once sync.Once
	prog *Program
	err  error
}

// Rewindable reports whether a State of r can be taken back (State.Rewind)
// and fed several tokens at once with every position's logits
// (State.DecodeMany): a model whose every state is addressed by cache
// slot (no recurrent layer), with its experts in the graph, on one
// device whose backend writes cache slots in place (not GoMLX's go
// backend).
func (r *Runner) Rewindable() bool {
	ok, recurrent := r.rewindability()
	return ok && !recurrent
}

// Speculates reports whether a State of r can decode speculatively: fed
// several tokens in one step with their logits (State.DecodeMany) and
// taken back over the last of them (State.Rewind). A Rewindable model
// can, and so can a model with recurrent state that otherwise would be,
// in compiled mode on a backend computing in host memory, taking back
// only the tokens of its last DecodeMany (by replaying the kept ones).
// On a device the copy of the recurrent state would go through the host
// and every replay length compile; in eager mode every step is padded to
// one length (FixedSteps), so nearly every step would replay: there it
// does not.
func (r *Runner) Speculates() bool {
	ok, recurrent := r.rewindability()
	return ok && (!recurrent || !r.FixedSteps())
}

// rewindability: ok where r is on one device, with its experts in the
// graph, on a backend writing cache slots in place; recurrent where some
// layer's own state has no slots.
func (r *Runner) rewindability() (ok, recurrent bool) {
	if r.tp != nil || r.moe != nil || !r.spec.Generates() || !r.dus {
		return false, false
	}
	for i, axes := range r.slotAxes {
		if r.stateSrc[i] != i {
			continue
		}
		for _, a := range axes {
			recurrent = recurrent || a == lm.NoSlots
		}
	}
	return true, recurrent
}

// replay is what a State of a model with recurrent state keeps of its
// last DecodeMany: the position and recurrent state before it (copies;
// nil where a state has slots) and the tokens it fed.
type replay struct {
	next   int
	states [][]*tensors.Tensor
	tokens []int
}

func (p *replay) free() {
	for _, layer := range p.states {
		for _, x := range layer {
			if x != nil {
				x.FinalizeAll()
			}
		}
	}
}

// snapshot copies st's recurrent state (the states without slots) as
// they are now.
func (st *State) snapshot(tokens []int) (*replay, error) {
	r := st.r
	p := &replay{next: st.next, tokens: append([]int(nil), tokens...), states: make([][]*tensors.Tensor, len(st.tensors))}
	for i, layer := range st.tensors {
		if r.stateSrc[i] != i {
			continue
		}
		p.states[i] = make([]*tensors.Tensor, len(layer))
		for k, x := range layer {
			if r.slotAxes[i][k] != lm.NoSlots {
				continue
			}
			c, err := x.Clone()
			if err != nil {
				p.free()
				return nil, fmt.Errorf("copying the recurrent state: %w", err)
			}
			p.states[i][k] = c
		}
	}
	return p, nil
}

// dropReplay forgets the last DecodeMany's replay: another step ran.
func (st *State) dropReplay() {
	if st.replay != nil {
		st.replay.free()
		st.replay = nil
	}
}

// Room is how many more tokens a row of st may be fed before its cache
// or the model's positions run out: DecodeMany's bound.
func (st *State) Room() int {
	if st.tensors == nil {
		return 0
	}
	minPad := st.next
	for _, p := range st.pads {
		minPad = min(minPad, int(p))
	}
	end := min(st.maxCacheLen, st.r.spec.MaxPositions+minPad)
	return max(0, end-st.next)
}

// DecodeMany feeds tokens to the one row of st (a State of batch 1) in
// one step, at the next cache slots, and returns the logits after each
// of them, [len(tokens)][V]: what len(tokens) Decode calls would return,
// up to floating-point rounding, for the cost of one step over the
// weights. At most Room tokens; a model that is not Rewindable is
// refused (errs.ErrUnsupported).
func (st *State) DecodeMany(tokens []int) ([][]float32, error) {
	r := st.r
	switch {
	case !r.Speculates():
		return nil, fmt.Errorf("%s on %s: several tokens a step with their logits need a model on one device with its experts in the graph, on a backend that writes cache slots in place: %w", r.spec.Architecture, r.backend.Name(), errs.ErrUnsupported)
	case st.tensors == nil:
		return nil, fmt.Errorf("decode before prefill")
	case st.Pending() > 0:
		return nil, fmt.Errorf("decode with %d prompt tokens still pending", st.Pending())
	case st.batch != 1:
		return nil, fmt.Errorf("decode of several tokens: a batch of %d rows, want 1", st.batch)
	case len(tokens) == 0 || len(tokens) > st.Room():
		return nil, fmt.Errorf("decode of %d tokens with room for %d", len(tokens), st.Room())
	}
	if err := r.checkIDs("decode", tokens); err != nil {
		return nil, err
	}
	n := len(tokens)
	for st.next+n > st.cacheLen {
		if err := r.growCache(st); err != nil {
			return nil, err
		}
	}
	prog, err := r.manyProgram()
	if err != nil {
		return nil, err
	}
	ids := make([]int32, n)
	for i, id := range tokens {
		ids[i] = int32(id)
	}
	var rp *replay
	if !r.Rewindable() {
		if rp, err = st.snapshot(tokens); err != nil {
			return nil, err
		}
	}
	if st.mtp.active() { // the head reads the step's final hidden states
		rows, err := st.captureStep(r.mtp.many, ids, true)
		if err != nil {
			if rp != nil {
				rp.free()
			}
			return nil, err
		}
		st.replay = rp
		return rows, nil
	}
	out, err := r.runStep(st, prog, prog, tensors.FromFlatDataAndDimensions(ids, 1, n), st.next)
	if err != nil {
		if rp != nil {
			rp.free()
		}
		return nil, err
	}
	st.replay = rp
	defer out.FinalizeAll()
	v := r.spec.VocabSize
	rows := make([][]float32, n)
	err = tensors.ConstFlatData(out, func(flat []float32) { // [n, V]
		for i := range rows {
			rows[i] = append([]float32(nil), flat[i*v:(i+1)*v]...)
		}
	})
	return rows, err
}

// manyProgram is DecodeMany's program, made at its first use. Its
// shapes are bounded (a step's length up to the largest draft, at each
// cache bucket) but may number more than MaxExecutables.
func (r *Runner) manyProgram() (*Program, error) {
	r.many.once.Do(func() {
		if r.opts.Mode == Compiled {
			r.many.prog, r.many.err = r.newProgram("decode-many", r.manyGraph)
		} else {
			r.many.prog, r.many.err = r.newProgram("head-many", r.manyHeadGraph)
		}
		if r.many.err == nil {
			r.many.prog.unboundedCache()
		}
	})
	return r.many.prog, r.many.err
}

// Rewind takes the cache of st back by n slots: the last n tokens fed
// are forgotten, and the next step writes where the first of them was.
// n may not reach into the prompt's pending or padding slots; a model
// that does not Speculate is refused, and one with recurrent state (not
// Rewindable) takes back only tokens of its last DecodeMany: it restores
// the state from before that step and feeds the step's first tokens
// again, all but the last n.
func (st *State) Rewind(n int) error {
	err := st.rewind(n)
	if err == nil && st.mtp.active() {
		st.mtp.rewound()
	}
	return err
}

// rewind is Rewind but for the MTP's records.
func (st *State) rewind(n int) error {
	r := st.r
	if r.Speculates() && !r.Rewindable() {
		return st.replayRewind(n)
	}
	switch {
	case !r.Rewindable():
		return fmt.Errorf("%s: its state cannot be taken back: %w", st.r.spec.Architecture, errs.ErrUnsupported)
	case st.Pending() > 0:
		return fmt.Errorf("rewind with %d prompt tokens still pending", st.Pending())
	case n < 0 || n > st.next:
		return fmt.Errorf("rewind of %d slots from slot %d", n, st.next)
	}
	for _, p := range st.pads {
		if st.next-n < int(p)+1 {
			return fmt.Errorf("rewind of %d slots from slot %d: past the prompt's first token", n, st.next)
		}
	}
	st.next -= n
	return nil
}

// replayRewind is Rewind on a model with recurrent state: the last n
// tokens of the last DecodeMany are forgotten by restoring the state from
// before it and feeding the others again.
func (st *State) replayRewind(n int) error {
	rp := st.replay
	switch {
	case st.Pending() > 0:
		return fmt.Errorf("rewind with %d prompt tokens still pending", st.Pending())
	case rp == nil || n < 0 || n > len(rp.tokens):
		have := 0
		if rp != nil {
			have = len(rp.tokens)
		}
		return fmt.Errorf("%s: its recurrent state takes back only the tokens of its last several-token step (%d), not %d: %w", st.r.spec.Architecture, have, n, errs.ErrUnsupported)
	case n == 0:
		return nil // the replay stays for a later Rewind of that step
	}
	st.replay = nil
	defer rp.free()
	for i, layer := range rp.states {
		for k, x := range layer {
			if x != nil {
				st.tensors[i][k].FinalizeAll()
				st.tensors[i][k] = x
				layer[k] = nil // now the state's: not freed with the replay
			}
		}
	}
	st.next = rp.next
	keep := rp.tokens[:len(rp.tokens)-n]
	if len(keep) == 0 {
		return nil
	}
	// The kept tokens again, their logits not read, on DecodeMany's
	// program (compiled mode: Speculates), whose executables are not
	// capped and are those its steps compiled.
	r := st.r
	prog, err := r.manyProgram()
	if err != nil {
		return err
	}
	ids := make([]int32, len(keep))
	for i, id := range keep {
		ids[i] = int32(id)
	}
	out, err := r.runStep(st, prog, prog, tensors.FromFlatDataAndDimensions(ids, 1, len(keep)), st.next)
	if err != nil {
		return err
	}
	out.FinalizeAll()
	return nil
}

// manyGraph is stepGraph with the logits of every position, [B·T, V]
// float32, in place of the last one's.
func (r *Runner) manyGraph(in []*graph.Node) []*graph.Node {
	x, w, out := r.stepLayers(0, in)
	out[0] = r.allLogits(w, x)
	return out
}

// manyHeadGraph: [hidden [B, T, H], head weights...] -> [logits [B·T,
// V] float32], eager mode's head for DecodeMany.
func (r *Runner) manyHeadGraph(in []*graph.Node) []*graph.Node {
	return []*graph.Node{r.allLogits(r.params(r.headW, in[1:]), in[0])}
}

// allLogits is the model's head over every position of x [B, T, H]:
// [B·T, V] float32.
func (r *Runner) allLogits(w *lm.Params, x *graph.Node) *graph.Node {
	d := x.Shape().Dimensions
	return graph.ConvertDType(r.model.Head(w, graph.Reshape(x, d[0]*d[1], d[2])), dtypes.Float32)
}

// FixedSteps reports whether each several-token step length costs an
// executable kept for good (Runner.FixedSteps): generate.FixedSteps.
func (st *State) FixedSteps() bool { return st.r.FixedSteps() }

// FixedSteps reports whether speculative steps should all have one
// length: on a backend not computing in host memory (an XLA device),
// where each new length compiles for seconds, and in eager mode, whose
// layer programs keep at most MaxExecutables (each length at each cache
// size is one; a long generation would reach the cap).
func (r *Runner) FixedSteps() bool { return !r.opts.Caps.HostMemory || r.opts.Mode != Compiled }

// Speculates reports whether st's runner can be fed several tokens a
// step and taken back over the last of them (Runner.Speculates):
// generate.Speculator.
func (st *State) Speculates() bool { return st.r.Speculates() }

// Rewindable reports whether st's runner can be taken back to any
// earlier token (Runner.Rewindable): generate.DraftStepper.
func (st *State) Rewindable() bool { return st.r.Rewindable() }

// SpeculateRoom is how many tokens the decode batch's one sequence may
// be fed in one step (DecodeMany): the slots its cache has left before
// the next relayout would be needed, when the batch has one row holding
// a sequence on a runner that Speculates; else 0 (decode one token a
// step).
func (b *Batch) SpeculateRoom() int {
	if b.dec.batch != 1 || !b.used[0] || !b.r.Speculates() {
		return 0
	}
	return b.dec.Room()
}

// DecodeMany feeds tokens to the sequence of row (the batch's one row)
// in one step and returns the logits after each (State.DecodeMany): at
// most SpeculateRoom tokens. A failed execution drops every sequence,
// as Decode's does.
func (b *Batch) DecodeMany(row int, tokens []int) ([][]float32, error) {
	switch room := b.SpeculateRoom(); {
	case row != 0 || room == 0:
		return nil, fmt.Errorf("decode of several tokens: row %d of a batch of %d rows (one row holding a sequence wanted)", row, b.dec.batch)
	case len(tokens) == 0 || len(tokens) > room:
		return nil, fmt.Errorf("decode of %d tokens with room for %d", len(tokens), room)
	}
	if err := b.r.checkIDs("decode", tokens); err != nil {
		return nil, err
	}
	b.dec.setPads(b.dec.pads) // as Decode: an Insert or relayout changed them
	before := b.dec.next
	rows, err := b.dec.DecodeMany(tokens)
	if err != nil && (b.dec.tensors == nil || b.dec.next != before) {
		// An execution failed (the state is gone), or its output could
		// not be read after it ran: the sequences cannot go on.
		return nil, b.fail(err)
	}
	return rows, err
}

// warmMany compiles the speculative steps of the batch's one row over s
// slots: of 1+o.Speculate tokens where every step feeds that many
// (FixedSteps), else of 2 to 1+o.Speculate,
// and of 1 where a recurrent state replays its kept tokens on the same
// program. With a multi-token-prediction head (BatchOptions.MTP) the steps that
// keep their hidden states for it too, of 1 to 1+o.Speculate tokens (a
// lone sequence's every step); the head's own steps compile at first
// use.
func (b *Batch) warmMany(s int) error {
	if !b.r.Speculates() || b.o.Speculate <= 0 && !b.mtpReady() {
		return nil
	}
	prog, err := b.r.manyProgram()
	if err != nil {
		return err
	}
	lo := 2
	switch {
	case b.r.FixedSteps():
		lo = 1 + b.o.Speculate
	case !b.r.Rewindable():
		lo = 1 // a recurrent state's replay of the one token before a refused draft
	}
	warm := func(p *Program, lo int) error {
		for n := lo; n <= min(1+b.o.Speculate, s); n++ {
			st := b.r.newState(1, s, []int32{0})
			out, err := b.r.runStep(st, p, p, tensors.FromFlatDataAndDimensions(make([]int32, n), 1, n), 0)
			st.Release()
			if err != nil {
				return err
			}
			out.FinalizeAll()
		}
		return nil
	}
	if b.o.Speculate > 0 {
		if err := warm(prog, lo); err != nil {
			return err
		}
	}
	if !b.mtpReady() {
		return nil
	}
	if err := b.r.mtp.programs(b.r); err != nil {
		return err
	}
	return warm(b.r.mtp.many, 1)
}

// Rewind takes the decode batch's clock back by n slots, forgetting the
// last n tokens DecodeMany fed its one sequence (a model with recurrent
// state replays the others: a failed execution then drops every
// sequence, as Decode's does).
func (b *Batch) Rewind(n int) error {
	if b.dec.batch != 1 {
		return fmt.Errorf("rewind of a batch of %d rows", b.dec.batch)
	}
	err := b.dec.Rewind(n)
	if err != nil && b.dec.tensors == nil { // a replay's execution failed: the state is gone
		return b.fail(err)
	}
	return err
}
