package compile

import (
	"fmt"
	"slices"
	"sync"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/pipeline/lm"
)

// Drafting with the model's multi-token-prediction head (lm.MTPModel).
//
// The head's slot i holds position i of the text: the model's final
// hidden state there with the embedding of the token at i+1, and its
// logits predict the token at i+2. So the head runs one step behind the
// model: a State with an MTP records the final hidden states of the
// positions its steps feed (capture programs: the step's logits and
// those hidden states in one output), and the head is fed a position
// once the token after it is known, which for the text's newest token
// (sampled, not yet fed to the model) is when a draft begins (MTP.Draft).
// A draft then chains: each drafted token is fed at the next slot with
// the head's own output as its hidden state (MTP.Chain). The chained
// slots are overwritten from the model's hidden states at the next
// draft, as vLLM's proposer does, once the model has run those tokens.
// The head's weights are the runner's: it loads them with the model's
// (a Runner of an lm.MTPModel) and shares the embedding and the output
// projection.

// mtpRun is a runner's MTP head: its weights' names (the head's, the
// embedding's and the head's projection), its programs and the capture
// programs of the model's steps, made at first use.
type mtpRun struct {
	model   lm.MTPModel
	weights []string
	own     []string       // the head's own weights (not the model's too)
	specs   []lm.StateSpec // the head layer's held state at cache length mtpProbe
	once    sync.Once
	err     error
	head    *Program // the head's step
	grow    *Program // its cache's next bucket
	// The model's steps with their final hidden states: every position's
	// logits (DecodeMany's, Decode's) or the last one's (a prefill).
	many, prefill *Program
}

// mtpProbe is the cache length specs are declared at (as declareState's).
const mtpProbe = 64

// setupMTP takes an lm.MTPModel's head weights out of the model's
// steps' inputs and keeps them for the head's programs.
func (r *Runner) setupMTP() {
	mm, ok := r.model.(lm.MTPModel)
	if !ok {
		return
	}
	own := r.withScales(weightNames(r.heldSpecs(mm.MTPWeights())))
	isHead := map[string]bool{}
	for _, n := range own {
		isHead[n] = true
	}
	r.all = slices.DeleteFunc(r.all, func(n string) bool { return isHead[n] })
	seen := map[string]bool{}
	var names []string
	for _, n := range slices.Concat(r.embedW, own, r.headW) {
		if !seen[n] {
			seen[n] = true
			names = append(names, n)
		}
	}
	r.mtp = &mtpRun{model: mm, weights: names, own: own, specs: lm.HeldSpecs(mm.MTPState(1, mtpProbe), r.opts.KVDType)}
}

// dropUnusableMTP lets go of the head's own weights where the runner
// cannot draft with it (HasMTP: eager mode, --tp, host-routed experts,
// a backend that does not write cache slots in place, or for recurrent
// layers one not computing in host memory), once its programs are made.
func (r *Runner) dropUnusableMTP() {
	if r.mtp == nil || r.HasMTP() {
		return
	}
	for _, n := range r.mtp.own {
		if t, ok := r.weights[n]; ok {
			t.FinalizeAll()
			delete(r.weights, n)
		}
	}
	r.mtp, r.mtpDropped = nil, true
}

// HasMTP reports whether the runner loaded a multi-token-prediction head
// (its model is an lm.MTPModel) and can draft with it: in compiled mode
// (the capture programs are whole steps) on a runner that Speculates
// (State.DecodeMany), which for a model with recurrent layers (Qwen3.5)
// is compiled mode on a backend computing in host memory anyway.
func (r *Runner) HasMTP() bool { return r.mtp != nil && r.opts.Mode == Compiled && r.Speculates() }

// programs makes the MTP programs once.
func (m *mtpRun) programs(r *Runner) error {
	m.once.Do(func() {
		mk := func(name string, fn func([]*graph.Node) []*graph.Node) *Program {
			if m.err != nil {
				return nil
			}
			var p *Program
			if p, m.err = r.newProgram(name, fn); m.err == nil {
				p.unboundedCache() // step lengths up to a draft's, at each cache bucket
			}
			return p
		}
		m.head = mk("mtp", r.mtpGraph)
		m.grow = mk("mtp-grow", m.growGraph)
		m.many = mk("decode-many-final", func(in []*graph.Node) []*graph.Node {
			x, w, out := r.stepLayers(0, in)
			out[0] = r.captureOut(w, x, true)
			return out
		})
		m.prefill = mk("prefill-final", func(in []*graph.Node) []*graph.Node {
			x, w, out := r.stepLayers(0, in)
			out[0] = r.captureOut(w, x, false)
			return out
		})
	})
	return m.err
}

// captureOut is a capture step's output from the last layer's hidden
// states x [B, T, H]: the logits of every position [B·T, V] (all) or of
// the last [B, V], then the final hidden states [B, T, H], float32,
// flattened into one vector.
func (r *Runner) captureOut(w *lm.Params, x *graph.Node, all bool) *graph.Node {
	var logits *graph.Node
	if all {
		logits = r.allLogits(w, x)
	} else {
		logits = graph.ConvertDType(r.model.Head(w, lastPosition(x)), dtypes.Float32)
	}
	final := graph.ConvertDType(r.model.(lm.Finisher).Final(w, x), dtypes.Float32)
	return graph.Concatenate([]*graph.Node{graph.Reshape(logits, -1), graph.Reshape(final, -1)}, 0)
}

// mtpGraph: [tokens [1, T], hidden [1, T, H] float32, pads [1], start,
// head state..., head weights...] -> [the last position's logits [V] and
// output [H], float32, as one vector; head state...].
func (r *Runner) mtpGraph(in []*graph.Node) []*graph.Node {
	m := r.mtp
	tokens, hidden, pads, start := in[0], in[1], in[2], in[3]
	n := len(m.specs)
	states := in[4 : 4+n]
	w := r.params(m.weights, in[4+n:])
	cacheLen := 0
	for k, s := range m.specs {
		if s.SlotAxis != lm.NoSlots {
			cacheLen = states[k].Shape().Dimensions[s.SlotAxis]
			break
		}
	}
	step := r.step(tokens.Shape(), pads, start, cacheLen)
	out, newStates := m.model.MTP(w, tokens, graph.ConvertDType(hidden, r.opts.DType), states, step)
	last := lastPosition(out) // [1, H]
	logits := graph.ConvertDType(m.model.MTPHead(w, last), dtypes.Float32)
	res := graph.Concatenate([]*graph.Node{graph.Reshape(logits, -1), graph.Reshape(graph.ConvertDType(last, dtypes.Float32), -1)}, 0)
	return append([]*graph.Node{res}, newStates...)
}

// growGraph appends zero slots to the head's state up to the next cache
// bucket, as the model's growGraph does.
func (m *mtpRun) growGraph(in []*graph.Node) []*graph.Node {
	out := make([]*graph.Node, len(in))
	for k, s := range m.specs {
		x := in[k]
		if s.SlotAxis == lm.NoSlots {
			out[k] = x
			continue
		}
		dims := slices.Clone(x.Shape().Dimensions)
		dims[s.SlotAxis] = CacheBucket(dims[s.SlotAxis]+1) - dims[s.SlotAxis]
		out[k] = graph.Concatenate([]*graph.Node{x, graph.Zeros(x.Graph(), shapes.Make(x.DType(), dims...))}, s.SlotAxis)
	}
	return out
}

// MTP is a State's multi-token-prediction head (State.MTP): its KV
// cache, one row whose slot i holds position i, and the positions the
// State's steps fed that it has not run yet, with their tokens and the
// model's final hidden states. Its methods are the draft's
// (generate.MTPDrafter); the State feeds it.
type MTP struct {
	st    *State
	state []*tensors.Tensor
	// cacheLen is the slots state holds; next the slot the next token
	// goes to (base plus the chained draft's slots).
	cacheLen, next int
	// base is the first position not in the cache with the model's
	// hidden state: toks and hid hold the positions from base on that
	// the State has fed (toks[j] the token at base+j, hid its hidden
	// state, H each), up to the State's clock.
	base int
	toks []int32
	hid  []float32
	// out is the head's output at its last slot, which a chained step
	// reads as its hidden state.
	out []float32
	// lost: a Rewind went below base, whose hidden states are gone, a
	// step fed what the head did not expect, or its own step failed (err,
	// reported by the next Draft): no drafts until the next Begin.
	lost bool
	err  error
	// drafted is the token the last Draft began after, which the State's
	// next step must feed first (-1: none pending).
	drafted int32
	// origin is the position the head's cache begins at (0, or a cold
	// start's: coldAt): slot s holds position origin+s.
	origin int
}

// mtpPiece is the most prompt tokens a prefill with an MTP runs a step,
// and the most recorded positions the head is left behind by (their
// hidden states are held on the host until it runs them).
const mtpPiece = 512

// MTP makes st draft with its runner's multi-token-prediction head
// (Runner.HasMTP): from its next Begin on, its steps keep the final
// hidden states the head reads, and the head follows the text. A runner
// without a head, or one that cannot draft with it (HasMTP: it let go of
// the head), is refused (errs.ErrUnsupported).
func (st *State) MTP() (*MTP, error) {
	r := st.r
	switch {
	case r.mtpDropped:
		return nil, fmt.Errorf("%s on %s: drafting with its multi-token-prediction head needs compiled mode, a model on one device with its experts in the graph, on a backend that writes cache slots in place, and for recurrent layers a backend computing in host memory (the CPU): %w",
			r.spec.Architecture, r.backend.Name(), errs.ErrUnsupported)
	case r.mtp == nil:
		return nil, fmt.Errorf("%s: the runner did not load a multi-token-prediction head: %w", r.spec.Architecture, errs.ErrUnsupported)
	}
	if err := r.mtp.programs(r); err != nil {
		return nil, err
	}
	if st.mtp == nil {
		st.mtp = &MTP{st: st, drafted: -1}
	}
	return st.mtp, nil
}

// active reports whether the head follows st's current generation: one
// row, nothing lost.
func (m *MTP) active() bool { return m != nil && !m.lost && m.st.batch == 1 }

// reset forgets the head's cache and records (a Begin or Release).
func (m *MTP) reset() {
	for _, x := range m.state {
		x.FinalizeAll()
	}
	m.state, m.cacheLen, m.next, m.base = nil, 0, 0, 0
	m.toks, m.hid, m.out, m.lost, m.err, m.drafted, m.origin = m.toks[:0], m.hid[:0], nil, false, nil, -1, 0
}

// coldAt makes m follow the text from position pos on, with nothing in
// its cache before it (the positions before were run without it: a
// sequence beginning to run alone in a decode batch): its cache begins
// at pos (origin), and its steps number positions from there (rotary
// embeddings depend only on the positions' differences, so the head is
// one whose text begins at pos, and its cache and steps cost what the
// text since pos holds).
func (m *MTP) coldAt(pos int) {
	m.reset()
	m.base, m.next, m.origin = pos, pos, pos
}

// hidden is the model's hidden size.
func (m *MTP) hidden() int { return m.st.r.spec.Hidden }

// record keeps the final hidden states hid ([T, H]) of the tokens a step
// of st fed at slots from start (row 0), past the row's padding, and
// runs the head over what it can once it lags by more than mtpPiece. The
// model's step has run: a failure of the head's loses it (the next Draft
// reports the error), not the step.
func (m *MTP) record(start int, tokens []int32, hid []float32) {
	pad := int(m.st.pads[0])
	h := m.hidden()
	for j, id := range tokens {
		pos := start + j - pad
		if pos < 0 {
			continue
		}
		if pos != m.base+len(m.toks) || (pos == m.base && m.drafted >= 0 && id != m.drafted) {
			// Not where the records end (a step this head did not see),
			// or not the token its last draft began after.
			m.lost = true
			return
		}
		m.drafted = -1
		m.toks = append(m.toks, id)
		m.hid = append(m.hid, hid[j*h:(j+1)*h]...)
	}
	if len(m.toks) > mtpPiece {
		if _, err := m.feed(m.toks[1:], len(m.toks)-1); err != nil {
			m.err = err
		}
	}
}

// rewound drops the records of the positions a Rewind took back (those
// at or past the State's new clock).
func (m *MTP) rewound() {
	end := m.st.next - int(m.st.pads[0])
	switch {
	case end < m.base:
		m.lost = true
	case end < m.base+len(m.toks):
		m.toks = m.toks[:end-m.base]
		m.hid = m.hid[:(end-m.base)*m.hidden()]
	}
}

// feed runs the head over the recorded positions base..base+n-1 with
// the tokens after them, next (n of them: toks[1:n+1], and the text's
// newest token where the records end), taking back any chained slots
// first, and drops those n records (the last position's stays where n
// is one short of them). It returns the logits after the last.
func (m *MTP) feed(next []int32, n int) ([]float32, error) {
	h := m.hidden()
	// In steps of powers of two (the largest that fits, then the next):
	// a backlog of any length (a prompt's, a draft after steps sat out)
	// runs on a few step lengths, each compiled once per cache bucket.
	var logits []float32
	for i := 0; i < n; {
		k := 1
		for k*2 <= n-i {
			k *= 2
		}
		var err error
		if logits, err = m.run(next[i:i+k], m.hid[i*h:(i+k)*h], m.base+i); err != nil {
			return nil, err
		}
		i += k
	}
	m.base += n
	m.toks = append(m.toks[:0], m.toks[n:]...)
	m.hid = append(m.hid[:0], m.hid[n*h:]...)
	return logits, nil
}

// run feeds the head tokens with hidden states hid at positions from
// start and returns the logits after the last (its output kept in out).
func (m *MTP) run(tokens []int32, hid []float32, start int) ([]float32, error) {
	r := m.st.r
	mr := r.mtp
	n := len(tokens)
	slot := start - m.origin
	if err := m.fit(slot + n); err != nil {
		return nil, err
	}
	args := []Arg{
		{T: tensors.FromFlatDataAndDimensions(slices.Clone(tokens), 1, n)},
		{T: tensors.FromFlatDataAndDimensions(slices.Clone(hid), 1, n, m.hidden())},
		{T: tensors.FromFlatDataAndDimensions([]int32{0}, 1)},
		{T: tensors.FromScalar(int32(slot))},
	}
	for _, x := range m.state {
		args = append(args, Arg{T: x, Donate: true})
	}
	outs, err := mr.head.Call(r.weightArgs(args, mr.weights)...)
	if err != nil {
		m.dropState()
		return nil, err
	}
	copy(m.state, outs[1:])
	m.next = start + n
	defer outs[0].FinalizeAll()
	v := r.spec.VocabSize
	var logits []float32
	err = tensors.ConstFlatData(outs[0], func(flat []float32) {
		logits = slices.Clone(flat[:v])
		m.out = append(m.out[:0], flat[v:]...)
	})
	return logits, err
}

// dropState forgets the head's cache after a failed step (its tensors
// were donated): the records stay, and lost makes it draft no more until
// the next Begin.
func (m *MTP) dropState() {
	m.state, m.cacheLen, m.lost = nil, 0, true
}

// fit allocates or grows the head's cache to hold slots [0, need)
// (positions from origin).
func (m *MTP) fit(need int) error {
	r := m.st.r
	if m.state == nil {
		m.cacheLen = CacheBucket(need)
		for _, s := range lm.HeldSpecs(r.mtp.model.MTPState(1, m.cacheLen), r.opts.KVDType) {
			m.state = append(m.state, r.zeros(shapes.Make(r.stateDType(s), s.Shape...)))
		}
		return nil
	}
	for m.cacheLen < need {
		args := make([]Arg, len(m.state))
		for k, x := range m.state {
			args[k] = Arg{T: x, Donate: true}
		}
		outs, err := r.mtp.grow.Call(args...)
		if err != nil {
			m.dropState()
			return err
		}
		copy(m.state, outs)
		m.cacheLen = CacheBucket(m.cacheLen + 1)
	}
	return nil
}

// Draft begins a draft after next, the text's newest token (sampled
// after the State's last step, not fed to it yet): the head runs over
// the positions the State fed since its last draft, next after the
// last, and returns its logits for the token after next. Nil where it
// cannot draft (no position recorded, the records lost, no room).
func (m *MTP) Draft(next int) ([]float32, error) {
	if err := m.err; err != nil {
		m.err = nil
		return nil, err
	}
	if !m.active() || len(m.toks) == 0 || m.Room() < 1 {
		return nil, nil
	}
	tokens := append(slices.Clone(m.toks[1:]), int32(next))
	logits, err := m.feed(tokens, len(m.toks))
	if err != nil {
		return nil, err
	}
	m.drafted = int32(next)
	return logits, nil
}

// Chain feeds a drafted token at the next slot, with the head's last
// output as its hidden state, and returns the logits for the token
// after it.
func (m *MTP) Chain(id int) ([]float32, error) {
	if !m.active() || m.out == nil {
		return nil, fmt.Errorf("mtp: a chained step without a draft begun")
	}
	return m.run([]int32{int32(id)}, slices.Clone(m.out), m.next)
}

// Room is how many more tokens the head may be fed: up to the model's
// positions.
func (m *MTP) Room() int {
	return max(0, m.st.r.spec.MaxPositions-m.next-1)
}

// prefillCapture is PrefillChunk with an MTP: the n pending tokens (of
// the one row) in steps of at most mtpPiece, each keeping its final
// hidden states for the head.
func (st *State) prefillCapture(n int) ([][]float32, error) {
	r := st.r
	var rows [][]float32
	for n > 0 {
		k := min(n, mtpPiece)
		for st.next+k > st.cacheLen {
			if err := r.growCache(st); err != nil {
				return nil, err
			}
		}
		tokens := slices.Clone(st.pending[0][:k])
		st.pending[0] = st.pending[0][k:]
		var err error
		if rows, err = st.captureStep(r.mtp.prefill, tokens, false); err != nil {
			return nil, err
		}
		n -= k
	}
	return rows, nil
}

// captureStep runs tokens (the one row's) at st's clock on a capture
// program, records their final hidden states for the head and returns
// the logits after each token (all) or after the last.
func (st *State) captureStep(prog *Program, tokens []int32, all bool) ([][]float32, error) {
	r := st.r
	n, start := len(tokens), st.next
	out, err := r.runStep(st, prog, prog, tensors.FromFlatDataAndDimensions(tokens, 1, n), start)
	if err != nil {
		return nil, err
	}
	defer out.FinalizeAll()
	v, h := r.spec.VocabSize, r.spec.Hidden
	nRows := 1
	if all {
		nRows = n
	}
	rows := make([][]float32, nRows)
	var hid []float32
	err = tensors.ConstFlatData(out, func(flat []float32) {
		if len(flat) != nRows*v+n*h {
			err = fmt.Errorf("mtp: a capture step of %d tokens gave %d values, want %d", n, len(flat), nRows*v+n*h)
			return
		}
		for i := range rows {
			rows[i] = slices.Clone(flat[i*v : (i+1)*v])
		}
		hid = slices.Clone(flat[nRows*v:])
	})
	if err != nil {
		return nil, err
	}
	st.mtp.record(start, tokens, hid)
	return rows, nil
}

// BatchMTP drafts with the model's multi-token-prediction head for the
// sequence running alone in a decode batch (serve's lone sequence:
// Batch.SpeculateRoom). A sequence whose prompt was prefilled alone and
// entered an empty batch brings the head that followed its prefill
// (handOverMTP), which goes on from the prompt. Otherwise, and after the
// batch held other sequences, the head begins cold where the sequence
// is (MTP.coldAt): the positions before were run in steps that kept no
// hidden states, so its own attention sees the text from there on (the
// model's hidden states it reads carry the whole text). Its methods are
// the draft's (generate.MTPDrafter).
type BatchMTP struct{ b *Batch }

// MTP returns the decode batch's head drafter; a runner that cannot
// draft with a head is refused (errs.ErrUnsupported), as State.MTP
// refuses it.
func (b *Batch) MTP() (*BatchMTP, error) {
	if _, err := b.r.NewState().MTP(); err != nil {
		return nil, err
	}
	if !b.o.MTP {
		return nil, fmt.Errorf("the decode batch was not made for a multi-token-prediction head (BatchOptions.MTP)")
	}
	return &BatchMTP{b: b}, nil
}

// head is the decode state's head, made where it has none.
func (h *BatchMTP) head() *MTP {
	dec := h.b.dec
	if dec.mtp == nil {
		dec.mtp = &MTP{st: dec, drafted: -1}
	}
	return dec.mtp
}

// mtpReady reports whether b drafts with its runner's head
// (BatchOptions.MTP, Runner.HasMTP).
func (b *Batch) mtpReady() bool { return b.o.MTP && b.r.HasMTP() }

// handOverMTP gives the decode state the head that followed p's prompt
// once the prompt has been inserted, where its sequence is the batch's
// only one: the head goes on from the prompt's records. Another
// sequence's insertion leaves the decode state's head out of step (it
// begins cold when a sequence next runs alone).
func (b *Batch) handOverMTP(p *BatchPrefill) {
	used := 0
	for _, u := range b.used {
		if u {
			used++
		}
	}
	m := p.st.mtp
	if used == 1 && len(p.prompts) == 1 && m.active() && m.err == nil {
		if b.dec.mtp != nil {
			b.dec.mtp.reset() // frees its cache
		}
		m.st, b.dec.mtp, p.st.mtp = b.dec, m, nil
		return
	}
	if b.dec.mtp != nil {
		b.dec.mtp.lost = true
	}
}

// Draft implements generate.MTPDrafter: MTP.Draft, where the batch's
// one sequence runs alone and the head has followed it since its last
// step; else none, the head beginning cold at the next position.
func (h *BatchMTP) Draft(next int) ([]float32, error) {
	b := h.b
	if b.SpeculateRoom() == 0 {
		return nil, nil
	}
	m := h.head()
	pos := b.dec.next - int(b.dec.pads[0]) // where next goes
	if m.err == nil && (m.lost || m.state == nil && len(m.toks) == 0 || m.base+len(m.toks) != pos) {
		// New, lost, or its records not ending where the sequence is
		// (steps it did not see): it begins at the next position.
		m.coldAt(pos)
		return nil, nil
	}
	return m.Draft(next)
}

// Chain implements generate.MTPDrafter (MTP.Chain).
func (h *BatchMTP) Chain(id int) ([]float32, error) { return h.head().Chain(id) }

// Room implements generate.MTPDrafter (MTP.Room).
func (h *BatchMTP) Room() int { return h.head().Room() }
