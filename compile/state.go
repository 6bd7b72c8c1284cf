package compile

import (
	"fmt"
	"reflect"
	"slices"
	"time"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/sample"
)

// State is one batch's generation state on a Runner, as llama2.c's RunState
// is to its TransformerWeights: the layer tensors (KV caches, recurrent
// state; on the Runner's device, donated to each step and replaced by its
// outputs), and where the batch stands.
//
// Layout. Rows are left-padded: row b's sequence starts at cache slot
// pads[b], every row writes its next token at the shared slot next (the
// clock), and slot s of row b holds position s - pads[b]. The cache holds
// cacheLen slots along each state's lm.StateSpec.SlotAxis and may grow up
// to maxCacheLen (grow.go). pending holds prompt tokens queued by Begin or
// Extend and not run yet (one equal-length list per row).
//
// tensors[i] are layer i's state tensors in the order of the model's
// LayerState. Every step donates them and keeps the step's outputs in
// their place, so after a failed step nothing valid is left (Release).
// maxCacheLen bounds growCache; the states a Batch makes have
// maxCacheLen == cacheLen and never grow (its decode batch changes length
// by relayout instead).
//
// A State belongs to one Runner and is used from one goroutine. Its methods
// are the generation interface pipeline/generate drives (Begin,
// PrefillChunk, Decode, Extend); they step the state through its Runner.
// Release frees its tensors; a failed step releases them too.
type State struct {
	r *Runner

	batch, cacheLen, next int
	maxCacheLen           int
	pads                  []int32
	pending               [][]int32
	padsT                 *tensors.Tensor // pads as a [B] int32 input, made when pads change
	tensors               [][]*tensors.Tensor
	// reuseLogits: run copies the logits into logits, one host buffer
	// reused step after step (rows valid until the next step), instead of
	// a fresh [batch, vocab] slice each time (14 MB at 23 rows of Qwen3's
	// vocabulary). Batch's decode state sets it, and ReuseLogits; other
	// callers get slices of their own.
	reuseLogits bool
	logits      []float32
	// replay is what a model with recurrent state keeps of its last
	// DecodeMany to take it back (speculate.go); nil otherwise.
	replay *replay
	// mtp is the multi-token-prediction head drafting beside the
	// generation (State.MTP, mtp.go): the steps record their final
	// hidden states for it. Nil otherwise.
	mtp *MTP
}

// NewState returns an empty State on r: Begin starts its generation.
func (r *Runner) NewState() *State { return &State{r: r} }

// newState returns a State of b rows and cacheLen slots (fixed: no
// growth) with zero-filled tensors and the given pads.
func (r *Runner) newState(b, cacheLen int, pads []int32) *State {
	return &State{r: r, batch: b, cacheLen: cacheLen, maxCacheLen: cacheLen, pads: pads,
		padsT:   tensors.FromFlatDataAndDimensions(slices.Clone(pads), b),
		tensors: r.allocState(b, cacheLen)}
}

// allocState allocates zero-filled layer tensors for b rows of cacheLen
// slots.
func (r *Runner) allocState(b, cacheLen int) [][]*tensors.Tensor {
	out := make([][]*tensors.Tensor, r.spec.Layers)
	for i := range out {
		for _, s := range lm.HeldState(r.model, i, b, cacheLen, r.opts.KVDType) {
			out[i] = append(out[i], r.zeros(shapes.Make(r.stateDType(s), s.Shape...)))
		}
	}
	return out
}

// zeroBufferer is a backend that hands out buffers of zeros on a device
// without a host tensor to copy from (the CPU engine: its memory comes
// zeroed from the Go runtime).
type zeroBufferer interface {
	NewZeroBuffer(deviceNum backends.DeviceNum, shape shapes.Shape) (backends.Buffer, error)
}

// zeros returns a tensor of zeros of shape on the runner's device. A
// host tensor would be zeroed, then copied into the device's buffer at
// the first step that reads it: for a batch's caches (gigabytes for a
// server of 32 sequences of 2048 positions) twice the memory traffic, and
// the host copy's allocation is garbage at once. A backend whose buffers
// are host memory makes the buffer in place (zeroBufferer, or a shared
// buffer cleared here); any other gets the host tensor, uploaded at its
// first use as before.
func (r *Runner) zeros(shape shapes.Shape) *tensors.Tensor {
	var buf backends.Buffer
	var err error
	switch z, ok := r.backend.(zeroBufferer); {
	case ok:
		buf, err = z.NewZeroBuffer(0, shape)
	case r.backend.HasSharedBuffers():
		var flat any
		if buf, flat, err = r.backend.NewSharedBuffer(0, shape); err == nil {
			reflect.ValueOf(flat).Clear() // shared buffers may be reused memory
		}
	default:
		return tensors.FromShape(shape)
	}
	if err == nil {
		if t, err := tensors.FromBuffer(r.backend, buf); err == nil {
			return t
		}
		_ = r.backend.BufferFinalize(buf)
	}
	return tensors.FromShape(shape) // the backend refused: the host path reports it at the step
}

// stateDType is the dtype a state tensor is held in.
func (r *Runner) stateDType(s lm.StateSpec) dtypes.DType {
	return s.HeldIn(r.opts.DType, r.opts.KVDType)
}

// Prefill starts a generation: it allocates fresh layer state for the
// batch, left-pads the prompts to a common bucketed length and runs them,
// returning each row's logits at its last prompt token ([B][V]).
// maxNew is the number of tokens Decode will be asked for afterwards;
// with Options.CacheLen 0 it sizes the cache. It is Begin followed by
// PrefillChunk over every pending token.
func (st *State) Prefill(prompts [][]int, maxNew int) ([][]float32, error) {
	n, err := st.Begin(prompts, maxNew)
	if err != nil {
		return nil, err
	}
	return st.PrefillChunk(n)
}

// Begin starts a generation without running anything: it frees what the
// state held, allocates fresh layer state for the batch and left-pads the
// prompts to a common bucketed length T, which become the pending tokens.
// It returns T. PrefillChunk then runs the pending tokens in pieces over
// the same cache (so a caller can check for cancellation and report
// progress between pieces); the logits of the last piece are those
// Prefill returns.
func (st *State) Begin(prompts [][]int, maxNew int) (int, error) {
	r := st.r
	if len(prompts) == 0 {
		return 0, errs.Usagef("no prompts")
	}
	longest := 0
	for i, p := range prompts {
		if len(p) == 0 {
			return 0, errs.Usagef("prompt %d is empty (no tokens)", i)
		}
		if err := r.checkIDs(fmt.Sprintf("prompt %d", i), p); err != nil {
			return 0, err
		}
		longest = max(longest, len(p))
	}
	if longest+maxNew > r.spec.MaxPositions {
		return 0, errs.Usagef("prompt of %d tokens plus %d new tokens exceeds the model's %d positions (max_position_embeddings)",
			longest, maxNew, r.spec.MaxPositions)
	}
	t := PromptBucket(longest)
	cacheLen := r.opts.CacheLen
	maxCacheLen := cacheLen
	if cacheLen == 0 {
		maxCacheLen = CacheBucket(t + maxNew)
		cacheLen = initialCacheLen(t, maxCacheLen)
	} else if t+maxNew > cacheLen {
		return 0, errs.Usagef("prompt bucket %d plus %d new tokens exceeds the fixed cache length %d", t, maxNew, cacheLen)
	}
	if r.tp != nil {
		cacheLen = maxCacheLen // sharded caches do not grow
	}
	st.Release()
	b := len(prompts)
	pads := make([]int32, b)
	tokens := make([][]int32, b)
	for i, p := range prompts {
		pad := t - len(p)
		pads[i] = int32(pad)
		tokens[i] = make([]int32, t)
		for j, id := range p {
			tokens[i][pad+j] = int32(id)
		}
	}
	var layers [][]*tensors.Tensor
	if r.tp != nil {
		var err error
		if layers, err = r.allocShardedState(b, cacheLen); err != nil {
			return 0, err
		}
	} else {
		layers = r.allocState(b, cacheLen)
	}
	*st = State{r: r, batch: b, cacheLen: cacheLen, maxCacheLen: maxCacheLen, pads: pads, pending: tokens,
		padsT: tensors.FromFlatDataAndDimensions(slices.Clone(pads), b), tensors: layers, reuseLogits: st.reuseLogits, logits: st.logits,
		mtp: st.mtp}
	return t, nil
}

// Extend continues the current generation with more prompt tokens (one
// equal-length list per row) after everything already in the cache,
// without re-running what is there: a conversation whose next prompt
// extends the previous prompt and answer prefills only the new tokens.
// The cache is the one of the last Begin, holding its prompt and every
// token fed to Decode since. maxNew is the number of tokens Decode will be
// asked for afterwards. It returns the number of pending tokens, which
// PrefillChunk runs.
func (st *State) Extend(tokens [][]int, maxNew int) (int, error) {
	r := st.r
	if st.tensors == nil {
		return 0, fmt.Errorf("extend before begin")
	}
	if len(tokens) != st.batch {
		return 0, fmt.Errorf("extend: %d rows for a batch of %d", len(tokens), st.batch)
	}
	n := len(tokens[0])
	if n == 0 {
		return 0, errs.Usagef("extend: no new tokens")
	}
	pending := make([][]int32, st.batch)
	for i, p := range tokens {
		if len(p) != n {
			return 0, fmt.Errorf("extend: row %d has %d tokens, row 0 has %d", i, len(p), n)
		}
		if err := r.checkIDs(fmt.Sprintf("extend: row %d", i), p); err != nil {
			return 0, err
		}
		pending[i] = make([]int32, n)
		for j, id := range p {
			pending[i][j] = int32(id)
		}
	}
	// The longest row holds next − minPad tokens; with the new and
	// generated ones they must fit in the model's positions.
	minPad := int(slices.Min(st.pads))
	if used := st.next - minPad + n + maxNew; used > r.spec.MaxPositions {
		return 0, errs.Usagef("%d tokens in the cache plus %d new and %d to generate exceed the model's %d positions (max_position_embeddings)",
			st.next-minPad, n, maxNew, r.spec.MaxPositions)
	}
	need := st.next + n + maxNew
	switch {
	case r.tp != nil || r.opts.CacheLen != 0:
		if need > st.cacheLen {
			return 0, errs.Usagef("%d cache slots in use plus %d new and %d to generate exceed the fixed cache length %d", st.next, n, maxNew, st.cacheLen)
		}
	default:
		st.maxCacheLen = max(st.maxCacheLen, CacheBucket(need))
	}
	st.dropReplay() // the last DecodeMany is no longer the last thing fed
	st.pending = pending
	return n, nil
}

// Pending returns the number of tokens per row that Begin or Extend queued
// and PrefillChunk has not run yet.
func (st *State) Pending() int {
	if len(st.pending) == 0 {
		return 0
	}
	return len(st.pending[0])
}

// Position returns the cache slot the next token goes to (the padded
// length of everything run so far).
func (st *State) Position() int { return st.next }

// PrefillChunk runs the next n pending tokens of every row into the cache
// (growing it if needed) and returns each row's logits after the last of
// them ([B][V]); once no tokens are pending these are the logits that
// follow the prompts. Pieces of any size give the same tokens as one
// Prefill, up to floating-point rounding. For a LongRoPE model it may run
// more than n tokens (throughSwitch); Pending says what is left.
func (st *State) PrefillChunk(n int) ([][]float32, error) {
	r := st.r
	if st.tensors == nil {
		return nil, fmt.Errorf("prefill before begin")
	}
	if n <= 0 || n > st.Pending() {
		return nil, fmt.Errorf("prefill: %d tokens asked, %d pending", n, st.Pending())
	}
	n = st.throughSwitch(n)
	if st.mtp.active() {
		return st.prefillCapture(n)
	}
	for st.next+n > st.cacheLen {
		if err := r.growCache(st); err != nil {
			return nil, err
		}
	}
	// A one-token piece has decode's shapes, so it runs on the decode
	// program and shares its executables instead of compiling the same
	// graph again under prefill.
	prog := r.decode
	if n > 1 {
		var err error
		if prog, err = r.prefillProgram(st.next+n, st.cacheLen); err != nil {
			return nil, err
		}
	}
	return r.run(st, prog, st.takePending(n), st.next)
}

// RopeSwitch is the model's lm.Spec.RopeSwitch: the length past which
// LongRoPE turns a sequence at its long frequencies (0: none).
// generate.Run prefills a sequence again when it crosses it
// (generate.RopeSwitcher).
func (st *State) RopeSwitch() int { return st.r.spec.RopeSwitch }

// throughSwitch is a prefill piece of n tokens extended, for a model
// whose rotary embedding switches to LongRoPE's long frequencies past
// lm.Spec.RopeSwitch positions, so that every row whose pending prompt
// runs past the switch has its piece end at or past position RopeSwitch:
// the row then turns every key of its prompt at the long frequencies, as
// transformers' one forward over the prompt does, instead of its first
// pieces at the short ones. The extended piece is a multiple of n tokens
// (or all that is pending), so that the piece lengths a device compiles
// for stay few. A model with a multi-token-prediction head captures its
// prefill in pieces of its own (prefillCapture), which this does not
// reach; no such model has LongRoPE.
func (st *State) throughSwitch(n int) int {
	sw := st.r.spec.RopeSwitch
	if sw == 0 {
		return n
	}
	end := st.next + st.Pending() // the slot after the last pending token
	want := n
	for _, p := range st.pads {
		pad := int(p)
		if end-1-pad >= sw && st.next+n-1-pad < sw {
			want = max(want, sw+pad+1-st.next)
		}
	}
	return min((want+n-1)/n*n, st.Pending())
}

// DevicePrefillPiece is the prefill piece, in prompt tokens, of a
// generation on a backend that does not compute in host memory (an XLA
// device), where every new piece length compiles an executable for
// seconds: see PrefillPiece.
const DevicePrefillPiece = 512

// PrefillPiece is the piece a caller that does not fix its own should
// prefill in (generate.FixedPieces): 0 on a backend computing in host
// memory, whose new shapes compile in milliseconds, so that pieces can
// follow the clock; DevicePrefillPiece elsewhere, so that a prompt's
// pieces, and the executables they need, are the same on every run.
func (st *State) PrefillPiece() int {
	if st.r.opts.Caps.HostMemory {
		return 0
	}
	return DevicePrefillPiece
}

// takePending removes the next n pending tokens of every row and returns
// them as a step's token input [B, n].
func (st *State) takePending(n int) *tensors.Tensor {
	tokens := make([]int32, st.batch*n)
	for i, p := range st.pending {
		copy(tokens[i*n:], p[:n])
		st.pending[i] = p[n:]
	}
	return tensors.FromFlatDataAndDimensions(tokens, st.batch, n)
}

// ReuseLogits makes Prefill, PrefillChunk and Decode return their logits
// in one host buffer that each call overwrites, where they otherwise
// return a fresh [B][V] each: for a caller that reads a step's logits
// before its next step (generate.Run, bench), which then allocates
// nothing for them.
func (st *State) ReuseLogits() { st.reuseLogits = true }

// Decode feeds one token per row (next[b] for row b) and returns the
// logits that follow it ([B][V]).
func (st *State) Decode(next []int) ([][]float32, error) {
	if st.mtp.active() { // the step keeps its hidden states for the head
		ids, err := st.decodeIDs(next)
		if err != nil {
			return nil, err
		}
		return st.captureStep(st.r.mtp.many, ids, true)
	}
	tokens, err := st.decodeTokens(next)
	if err != nil {
		return nil, err
	}
	return st.r.run(st, st.r.decode, tokens, st.next)
}

// DecodeArgmax is Decode for greedy decoding without logits processors:
// it returns each row's argmax of the logits that follow next, taken
// where the logits are (on an accelerator, by a small program on the
// device), so that B ids come back to the host instead of [B][V] logits.
// Ties go to the smallest id and a NaN wins, as in torch.argmax and
// sample.Argmax.
func (st *State) DecodeArgmax(next []int) ([]int, error) {
	r := st.r
	if st.mtp.active() { // the step keeps its hidden states: its logits come back
		rows, err := st.Decode(next)
		if err != nil {
			return nil, err
		}
		return []int{sample.Argmax(rows[0])}, nil
	}
	tokens, err := st.decodeTokens(next)
	if err != nil {
		return nil, err
	}
	if r.tp != nil { // split over devices: the logits are read back and searched here
		rows, err := r.run(st, r.decode, tokens, st.next)
		if err != nil {
			return nil, err
		}
		ids := make([]int, len(rows))
		for i, row := range rows {
			ids[i] = sample.Argmax(row)
		}
		return ids, nil
	}
	logits, err := r.runStep(st, r.decode, r.head, tokens, st.next)
	if err != nil {
		return nil, err
	}
	outs, err := r.argmax.Call(Arg{T: logits})
	recycle(logits)
	if err != nil {
		st.Release()
		return nil, err
	}
	defer outs[0].FinalizeAll()
	ids := make([]int, st.batch)
	var bad error
	outs[0].MustConstFlatData(func(flat any) {
		v := flat.([]int32)
		if len(v) != len(ids) {
			bad = fmt.Errorf("argmax: %d ids for a batch of %d", len(v), len(ids))
			return
		}
		for i, id := range v {
			ids[i] = int(id)
		}
	})
	return ids, bad
}

// argmaxGraph: [logits [..., V]] -> [ids [B] int32], the argmax of each
// of the B rows of V logits.
func argmaxGraph(in []*graph.Node) []*graph.Node {
	logits := in[0]
	return []*graph.Node{graph.ArgMax(graph.Reshape(logits, -1, logits.Shape().Dimensions[logits.Rank()-1]), 1, dtypes.Int32)}
}

// decodeTokens is decodeIDs as the step's input [B, 1].
func (st *State) decodeTokens(next []int) (*tensors.Tensor, error) {
	ids, err := st.decodeIDs(next)
	if err != nil {
		return nil, err
	}
	return tensors.FromFlatDataAndDimensions(ids, st.batch, 1), nil
}

// decodeIDs checks a Decode's tokens (one a row, after the prompt, in
// the vocabulary), grows the cache when it is full, and returns them as
// int32.
func (st *State) decodeIDs(next []int) ([]int32, error) {
	r := st.r
	if st.tensors == nil {
		return nil, fmt.Errorf("decode before prefill")
	}
	if st.Pending() > 0 {
		return nil, fmt.Errorf("decode with %d prompt tokens still pending", st.Pending())
	}
	if len(next) != st.batch {
		return nil, fmt.Errorf("decode: %d tokens for a batch of %d", len(next), st.batch)
	}
	if st.next >= st.cacheLen {
		if err := r.growCache(st); err != nil {
			return nil, err
		}
	}
	if err := r.checkIDs("decode", next); err != nil {
		return nil, err
	}
	ids := make([]int32, st.batch)
	for i, id := range next {
		ids[i] = int32(id)
	}
	return ids, nil
}

// CompileDuration is the Runner's total compile time so far (generate
// subtracts it from the evaluation durations).
func (st *State) CompileDuration() time.Duration { return st.r.CompileDuration() }

// checkIDs checks that ids are in the vocabulary, each of an encoder's
// token types (id + type·VocabSize: lm.Spec.TokenTypes).
func (r *Runner) checkIDs(what string, ids []int) error {
	end := r.spec.VocabSize * max(1, r.spec.TokenTypes)
	for _, id := range ids {
		if id < 0 || id >= end {
			if end > r.spec.VocabSize {
				return fmt.Errorf("%s: token id %d is outside the vocabulary [0, %d) of each of %d token types", what, id, r.spec.VocabSize, r.spec.TokenTypes)
			}
			return fmt.Errorf("%s: token id %d is outside the vocabulary [0, %d)", what, id, r.spec.VocabSize)
		}
	}
	return nil
}

// run executes one step of tokens [B, T] written at cache slot start on
// st, and advances st's clock to start+T. A failed step releases st. With
// st.reuseLogits the logits it returns lie in st's reused host buffer,
// valid until st's next step. The step's form follows the Runner: sharded
// over devices, compiled in segments around host-routed experts, one
// compiled graph, or eager (one executable per layer kind).
func (r *Runner) run(st *State, compiled *Program, tokens *tensors.Tensor, start int) ([][]float32, error) {
	logits, err := r.runStep(st, compiled, r.head, tokens, start)
	if err != nil {
		return nil, err
	}
	n := logits.Shape().Size()
	var flat []float32
	if st.reuseLogits {
		if cap(st.logits) < n {
			st.logits = make([]float32, n)
		}
		flat = st.logits[:n]
	} else {
		flat = make([]float32, n)
	}
	err = readInto(logits, flat)
	recycle(logits)
	if err != nil {
		return nil, err
	}
	v := r.spec.VocabSize
	rows := make([][]float32, st.batch)
	for i := range rows {
		rows[i] = flat[i*v : (i+1)*v : (i+1)*v]
	}
	return rows, nil
}

// runStep is run without reading the output: the step's first output
// (the logits, or what head gives in eager mode and compiled gives in
// compiled mode: Embed's final hidden states), for the caller to
// finalize.
func (r *Runner) runStep(st *State, compiled, head *Program, tokens *tensors.Tensor, start int) (*tensors.Tensor, error) {
	if !r.spec.Generates() && (r.emb.prog == nil || head != r.emb.prog) {
		return nil, GenerateError(r.spec) // only Embed's steps run a model without a language-model head
	}
	st.dropReplay() // another step: the last DecodeMany's replay no longer applies
	startT := tensors.FromScalar(int32(start))
	var out *tensors.Tensor
	var err error
	switch {
	case r.tp != nil:
		out, err = r.runSharded(st, compiled, tokens, startT)
	case r.opts.Mode == Compiled && r.moe != nil:
		out, err = r.runSegments(st, tokens, startT, start)
	case r.opts.Mode == Compiled:
		out, err = r.runCompiled(st, compiled, tokens, startT)
	default:
		out, err = r.runEager(st, tokens, startT, start, head)
	}
	if err != nil {
		st.Release()
		return nil, err
	}
	st.next = start + tokens.Shape().Dimensions[1]
	return out, nil
}

// layerArgs are the state tensors layer i reads: its own, donated, or
// those of the layer it shares (lm.StateSharer), only read.
func (st *State) layerArgs(i int) []Arg {
	src := st.r.stateSrc[i]
	args := make([]Arg, len(st.tensors[src]))
	for k, x := range st.tensors[src] {
		args[k] = Arg{T: x, Donate: src == i} // a shared state is only read
	}
	return args
}

// args are every state tensor, layer by layer; donate hands them to the
// call (which replaces them: keepAll).
func (st *State) args(donate bool) []Arg {
	var args []Arg
	for _, layer := range st.tensors {
		for _, x := range layer {
			args = append(args, Arg{T: x, Donate: donate})
		}
	}
	return args
}

// keepAll takes outs (every state tensor, layer by layer) as the state.
func (st *State) keepAll(outs []*tensors.Tensor) {
	off := 0
	for i := range st.tensors {
		copy(st.tensors[i], outs[off:off+len(st.tensors[i])])
		off += len(st.tensors[i])
	}
}

// setPads replaces the rows' pads (and their graph input).
func (st *State) setPads(pads []int32) {
	st.pads = pads
	if st.padsT != nil {
		st.padsT.FinalizeAll()
	}
	st.padsT = tensors.FromFlatDataAndDimensions(slices.Clone(pads), len(pads))
}

// Release frees the state's tensors; the State can Begin again.
func (st *State) Release() {
	st.dropReplay()
	if st.mtp != nil {
		st.mtp.reset()
	}
	for _, layer := range st.tensors {
		for _, x := range layer {
			if x != nil {
				x.FinalizeAll()
			}
		}
	}
	st.tensors = nil
	st.pending = nil
	if st.padsT != nil {
		st.padsT.FinalizeAll()
		st.padsT = nil
	}
}
