package compile

import (
	"fmt"
	"runtime/debug"
	"slices"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/sample"
)

// Continuous batching over fixed shapes (the server's engine).
//
// A Batch decodes many independent sequences in one batch whose rows are
// sequence slots. Which sequence a row holds, how many rows the batch has
// and which finished prompts are kept are its caller's (serve.Slots): the
// Batch knows only which rows are used. Every row shares one write
// position, the shared clock `next`: a decode step writes every row's new
// token at cache slot next, as a generation's decode does, so the model's
// graphs, the KV cache update (one DynamicUpdateSlice) and the compiled
// executables are those of `generate`. Rows differ only by their left
// padding: row b's sequence occupies slots [pads[b], next), its positions
// are slot - pads[b], and attention masks everything below pads[b]
// (lm.Step).
//
// New prompts are prefilled in a batch of their own (up to MaxPrefill
// rows, left-padded to the longest) whose cache is just long enough for
// them (a power of two), in pieces the caller interleaves with decode
// steps. Insert then copies each prompt's row into a free row so that the
// prompt ends at the shared clock: its L tokens land in slots [next-L,
// next) and the row's pad becomes next-L. Recurrent state (Qwen3.5's
// DeltaNet) is copied whole. A finished prompt's cache can be kept (Keep)
// for later prompts that share its prefix (StartPrefillFrom).
//
// The batch keeps two shapes small, so that attention and memory follow
// the load rather than the limits: the number of rows is a batch bucket (a
// power of two, capped at MaxBatch) that the caller grows and shrinks
// (Relayout), and the cache length is a slot bucket that grows when the
// clock reaches the end of the cache and shrinks when the running
// sequences hold little. Changing them is a relayout, made of steps that
// each change one shape by one bucket: a rows step takes the caller's rows
// in the caller's order (the rows-gather program), a slots step shifts
// every row's slots left by the free space below the lowest pad, or right
// for a prompt longer than the clock, and resizes the cache (the slots
// program). An insert places the prefill's prompt into a row of slots (the
// place program) and writes that row into the batch (the write-row
// program).
//
// So the shapes of every executable come from a bounded set: decode and
// write-row per (batch bucket, slot bucket), rows-gather per slot bucket
// and pair of neighbouring batch buckets, slots per batch bucket and slot
// bucket to itself or a neighbour, prefill and place per prefill rows and
// prompt bucket (and slot bucket). Warmup compiles them all up front, so
// no compile happens under load.
//
// Invariants, between calls:
//   - len(used) == dec.batch; used[r] says whether row r holds a
//     sequence.
//   - dec.next < dec.cacheLen after fit: the next decode step has a slot
//     to write. A running row's sequence holds slots [pads[r], next).
//   - Relayout keeps every row's positions: a slots step moves slots and
//     pads by the same shift, and a rows step moves whole rows, so keys
//     already rotated for their positions (RoPE) stay valid.
//   - A free row's contents are junk nobody reads: Decode gives it the
//     clock as its pad, so it attends only to its own slot, and Insert
//     overwrites the whole row.
//   - A kept prompt's cache is a State of one row, its prompt ending at
//     its last slot.
//   - Slots from the clock on are zero in every row (a slots step and
//     place write zeros there, a rows step moves whole rows, and a step
//     fills slots from the clock and moves the clock past them), as
//     nn.UpdateCache's scatter-add needs on backends without
//     DynamicUpdateSlice; except after a speculative step taken back
//     (Rewind), which leaves its tokens' slots past the clock: only on a
//     backend that writes slots in place (Runner.Rewindable), where no
//     query sees a slot past its own and the next steps write them
//     again.
//
// A failed execution may have consumed the donated state, so the Batch
// then drops every sequence (fail) and starts again empty, with one free
// row; its error then reports StateLost (serve.Lost).

// BatchOptions configure a Batch.
type BatchOptions struct {
	// MaxBatch is the number of sequence slots.
	MaxBatch int
	// MaxContext is the longest sequence, prompt plus generated tokens;
	// 0 means the model's max positions.
	MaxContext int
	// PrefillChunk is the number of prompt tokens per prefill piece,
	// rounded up to a power of two; 0 means 64.
	PrefillChunk int
	// Prefixes allows keeping finished prompts' caches for later prompts
	// sharing a prefix with them (a chat's system prompt; Keep): Warmup
	// then also compiles the copies they need. Models with recurrent
	// state, and backends without DynamicUpdateSlice, keep none.
	Prefixes bool
	// Pooling is how Embed pools a prompt's final hidden states.
	Pooling Pooling
	// Speculate is the most tokens a speculative step proposes
	// (DecodeMany feeds up to 1+Speculate; on a backend not computing in
	// host memory, every such step feeds 1+Speculate, as serve's
	// scheduler pads them): Warmup then compiles those steps too.
	Speculate int
	// MTP readies the batch for drafting with the runner's
	// multi-token-prediction head (Batch.MTP, where the runner has one it
	// can draft with): a prefill of one prompt keeps its hidden states
	// for the head, which follows the sequence from its prompt when it
	// runs alone, and Warmup compiles those prefill pieces too.
	MTP bool
}

// MaxSlots bounds BatchOptions.MaxBatch.
const MaxSlots = 1024

// DefaultServePrefillChunk is BatchOptions.PrefillChunk's default.
const DefaultServePrefillChunk = 64

// minSlots is the smallest cache bucket of a Batch.
const minSlots = 32

// Batch runs sequences in slots by continuous batching (see above). It
// owns its Runner: nothing else may run on it. It is used from one goroutine
// (the server's engine loop).
type Batch struct {
	r *Runner
	o BatchOptions

	dec  *State // the decode batch: dec.batch rows, dec.cacheLen slots
	used []bool // per row: whether it holds a sequence

	place    *Program // prefill state -> one row of slots
	writeRow *Program // batch state, row -> batch state
	gather   *Program // batch state -> other rows (rows step)
	slots    *Program // batch state -> slots shifted and resized (slots step)
}

// oneDevice is nil for a Runner on one device, else the
// errs.ErrUnsupported OptionError naming the --tp or --dp that split it,
// with reason.
func (r *Runner) oneDevice(reason string) error {
	if r.tp == nil {
		return nil
	}
	field, v := "TP", r.opts.TP
	if v <= 1 {
		field, v = "DP", r.opts.DP
	}
	return &OptionError{Owner: "Options", Option: field, Value: v, Kind: errs.ErrUnsupported, Reason: reason}
}

// NewBatch prepares continuous batching on r, which it then owns.
func NewBatch(r *Runner, o BatchOptions) (*Batch, error) {
	if err := GenerateError(r.spec); err != nil {
		return nil, err
	}
	if err := r.oneDevice("serving on several devices is not supported yet: run one device per server"); err != nil {
		return nil, err
	}
	if o.MaxBatch < 1 || o.MaxBatch > MaxSlots {
		return nil, &OptionError{Owner: "BatchOptions", Option: "MaxBatch", Value: o.MaxBatch, Want: fmt.Sprintf("1 to %d sequence slots", MaxSlots)}
	}
	if o.MaxContext == 0 {
		o.MaxContext = r.spec.MaxPositions
	}
	if o.MaxContext < 2 || o.MaxContext > r.spec.MaxPositions {
		return nil, &OptionError{Owner: "BatchOptions", Option: "MaxContext", Value: o.MaxContext,
			Want: fmt.Sprintf("2 to the model's %d positions (max_position_embeddings)", r.spec.MaxPositions)}
	}
	if o.PrefillChunk == 0 {
		o.PrefillChunk = DefaultServePrefillChunk
	}
	if o.PrefillChunk < 1 {
		return nil, &OptionError{Owner: "BatchOptions", Option: "PrefillChunk", Value: o.PrefillChunk, Want: "a positive number of tokens"}
	}
	o.PrefillChunk = pow2(o.PrefillChunk)
	r.wholeCache = true // see window.go: a server's prefills read whole caches
	b := &Batch{r: r, o: o}
	for _, p := range []struct {
		to   **Program
		name string
		fn   func([]*graph.Node) []*graph.Node
	}{
		{&b.place, "serve-place", b.placeGraph},
		{&b.writeRow, "serve-write-row", b.writeRowGraph},
		{&b.gather, "serve-rows", b.rowsGraph},
		{&b.slots, "serve-slots", b.slotsGraph},
	} {
		var err error
		if *p.to, err = r.newProgram(p.name, p.fn); err != nil {
			return nil, err
		}
		// Their shapes come from the bounded set above, which may hold
		// more than MaxExecutables (place: prefill rows x prompt buckets
		// x slot and prompt buckets).
		(*p.to).unboundedCache()
	}
	b.reset()
	return b, nil
}

// PrefillCacheLen is the cache length of a prefill whose longest prompt
// has n tokens: a power of two, at least 8 (the prefix cache keeps one per
// prompt).
func PrefillCacheLen(n int) int { return pow2(max(n, 8)) }

// pow2 is the smallest power of two >= n (n >= 1).
func pow2(n int) int {
	p := 1
	for p < n {
		p *= 2
	}
	return p
}

// Slots is the number of sequence slots.
func (b *Batch) Slots() int { return b.o.MaxBatch }

// MaxContext is the longest sequence, prompt plus generated tokens.
func (b *Batch) MaxContext() int { return b.o.MaxContext }

// Rows is the number of rows of the decode batch now.
func (b *Batch) Rows() int { return b.dec.batch }

// RowBucket is the number of rows of a decode batch of at least k rows: a
// power of two, capped at MaxBatch.
func (b *Batch) RowBucket(k int) int { return min(pow2(max(k, 1)), b.o.MaxBatch) }

// slotBuckets are the cache lengths of the decode batch (slotLadder, with
// the midpoints on a backend computing in host memory). The last is
// MaxContext rounded up to a multiple of 8: a running sequence holds at
// most MaxContext-1 tokens and writes one more.
func (b *Batch) slotBuckets() []int {
	return slotLadder(b.o.MaxContext, b.r.opts.Caps.HostMemory)
}

// slotLadder is the cache lengths up to maxContext: powers of two from
// minSlots, then maxContext (rounded up to 8). With mid, also 1.5 times
// each power of two from 64 (96, 192, 384, ...): attention reads every
// slot of the cache, held or not, and the cache shrinks only to a bucket,
// so a window of 150 held slots reads 192 instead of 256. That takes
// about half as many executables again (decode and write-row per slot
// bucket), cheap to compile on a backend computing in host memory, not
// on an accelerator.
func slotLadder(maxContext int, mid bool) []int {
	var out []int
	for s := minSlots; s < maxContext; s *= 2 {
		out = append(out, s)
		if m := s * 3 / 2; mid && s >= 64 && m < maxContext {
			out = append(out, m)
		}
	}
	return append(out, roundUp(maxContext, 8))
}

// slotBucket is the smallest cache bucket of at least n slots.
func (b *Batch) slotBucket(n int) (int, error) {
	for _, s := range b.slotBuckets() {
		if s >= n {
			return s, nil
		}
	}
	return 0, fmt.Errorf("serve: %d cache slots needed, above the context of %d tokens", n, b.o.MaxContext)
}

// reset frees every sequence and starts an empty decode batch of one row
// and the smallest slot bucket, its clock at 0.
func (b *Batch) reset() {
	if b.dec != nil {
		b.dec.Release()
	}
	b.dec = b.r.newState(1, b.slotBuckets()[0], []int32{0})
	b.dec.reuseLogits = true // Decode's rows are read before the next step
	b.used = []bool{false}
}

// BatchPrefill is the prefill of one or more prompts, together in a
// batch of their own: st has prefillRows(len(prompts)) rows (rows past the
// prompts are all padding) and PrefillCacheLen(longest) slots, every
// prompt ending at the last slot; chunk is the tokens per row of a piece.
type BatchPrefill struct {
	b       *Batch
	st      *State
	prompts [][]int
	chunk   int
}

// maxPrefillRows is the most prompts prefilled together.
const maxPrefillRows = 8

// MaxPrefill is the most prompts StartPrefill takes at once.
func (b *Batch) MaxPrefill() int { return min(maxPrefillRows, b.o.MaxBatch) }

// prefillRows is the batch bucket of k prompts prefilled together.
func (b *Batch) prefillRows(k int) int { return min(pow2(k), b.MaxPrefill()) }

// prefillPiece is the tokens per row of a prefill piece of rows rows and
// t slots: PrefillChunk tokens in all, a power of two per row, at most t.
func (b *Batch) prefillPiece(rows, t int) int {
	c := 1
	for c*2*rows <= b.o.PrefillChunk {
		c *= 2
	}
	return min(c, t)
}

// Kept is a finished prompt's cache kept for later prompts sharing its
// prefix (Keep): a State of one row, the prompt ending at its last slot.
type Kept struct {
	prompt []int
	st     *State
}

// Release frees the kept cache.
func (k *Kept) Release() {
	if k.st != nil {
		k.st.Release()
		k.st = nil
	}
}

// StartPrefill begins prefilling prompts (1 to MaxPrefill) together into
// a cache of their own, a power of two of at least 8 slots with every
// prompt left-padded to end at its end. A piece runs about PrefillChunk
// tokens in all (fewer per row with more rows); pieces made only of left
// padding are skipped (they change nothing: padding is masked).
func (b *Batch) StartPrefill(prompts [][]int) (*BatchPrefill, error) {
	p, err := b.newPrefill(prompts)
	if err != nil {
		return nil, err
	}
	p.st.tensors = b.r.allocState(p.st.batch, p.st.cacheLen)
	return p, nil
}

// newPrefill checks prompts and lays out their prefill, without its
// tensors.
func (b *Batch) newPrefill(prompts [][]int) (*BatchPrefill, error) {
	k := len(prompts)
	if k == 0 || k > b.MaxPrefill() {
		return nil, fmt.Errorf("prefill: %d prompts, want 1 to %d", k, b.MaxPrefill())
	}
	longest := 0
	for i, p := range prompts {
		if len(p) == 0 {
			return nil, errs.Usagef("prompt %d is empty", i)
		}
		if len(p) >= b.o.MaxContext {
			return nil, errs.Usagef("prompt of %d tokens leaves no room below the context of %d tokens", len(p), b.o.MaxContext)
		}
		if err := b.r.checkIDs("prompt", p); err != nil {
			return nil, err
		}
		longest = max(longest, len(p))
	}
	// from is the first piece boundary at or below the lowest pad: the
	// state starts there (next = from), and pending holds the tokens of
	// slots [from, t), padding as token 0.
	rows := b.prefillRows(k)
	t := PrefillCacheLen(longest)
	chunk := b.prefillPiece(rows, t)
	pads := make([]int32, rows)
	from := t
	for i := range pads {
		pads[i] = int32(t)
		if i < k {
			pads[i] = int32(t - len(prompts[i]))
			from = min(from, int(pads[i])/chunk*chunk) // the first piece that holds a prompt token
		}
	}
	tokens := make([][]int32, rows)
	for i := range tokens {
		tokens[i] = make([]int32, t-from)
		if i < k {
			for j, id := range prompts[i] {
				tokens[i][int(pads[i])-from+j] = int32(id)
			}
		}
	}
	p := &BatchPrefill{b: b, chunk: chunk, st: &State{
		r: b.r, batch: rows, cacheLen: t, maxCacheLen: t, next: from, pads: pads,
		pending: tokens, padsT: tensors.FromFlatDataAndDimensions(slices.Clone(pads), rows),
	}}
	if k == 1 && !slices.Contains(b.used, true) && b.mtpReady() && b.r.mtp.programs(b.r) == nil {
		// The head may follow this prompt's sequence: it will run alone
		// unless another enters first (Insert hands it over).
		p.st.mtp = &MTP{st: p.st, drafted: -1}
	}
	for _, q := range prompts {
		p.prompts = append(p.prompts, slices.Clone(q))
	}
	return p, nil
}

// reuseStart is the slot at which the prefill of an n-token prompt
// starts computing when its first shared tokens are taken from a kept
// cache: the piece boundary at or below the end of the shared tokens, the
// last prompt token excluded (it is recomputed for its logits); pad is the
// prompt's first slot.
func (b *Batch) reuseStart(n, shared int) (start, pad int) {
	shared = max(0, min(shared, n-1))
	t := PrefillCacheLen(n)
	chunk := b.prefillPiece(1, t)
	pad = t - n
	return (pad + shared) / chunk * chunk, pad
}

// Saving is the number of prompt tokens that the prefill of an n-token
// prompt skips by starting from a kept cache sharing its first shared
// tokens (StartPrefillFrom).
func (b *Batch) Saving(n, shared int) int {
	start, pad := b.reuseStart(n, shared)
	return max(0, start-pad)
}

// StartPrefillFrom begins the prefill of one prompt from a kept cache:
// the tokens it shares with the kept prompt have keys and values that
// depend only on the tokens before them and their positions, so they are
// copied to the prefill's slots for the same positions (the place
// program), and its pieces start at the piece boundary at or below the
// end of what was copied (recomputing the few tokens between, in place):
// Saving tokens are not computed.
func (b *Batch) StartPrefillFrom(prompt []int, from *Kept) (*BatchPrefill, error) {
	if from == nil || from.st == nil {
		return nil, fmt.Errorf("prefill: the kept cache was released")
	}
	if from.st.r != b.r {
		return nil, fmt.Errorf("prefill: the kept cache is another model's")
	}
	if !b.KeepsPrefixes() {
		return nil, fmt.Errorf("prefill: this batch keeps no prefixes")
	}
	p, err := b.newPrefill([][]int{prompt})
	if err != nil {
		return nil, err
	}
	k := 0
	for k < len(from.prompt) && k < len(prompt) && from.prompt[k] == prompt[k] {
		k++
	}
	start, pad := b.reuseStart(len(prompt), k)
	if start <= pad {
		p.st.tensors = b.r.allocState(p.st.batch, p.st.cacheLen)
		return p, nil
	}
	// Slot j < start of p takes the kept slot of the same position.
	args := append([]Arg{{T: tensors.FromScalar(int32(0))}}, slotMap(p.st.cacheLen, pad, start, int(from.st.pads[0])-pad)...)
	outs, err := b.place.Call(append(args, from.st.args(false)...)...)
	if err != nil {
		return nil, err
	}
	p.st.tensors = b.splitState(outs)
	p.st.pending[0] = p.st.pending[0][start-p.st.next:]
	p.st.next = start
	if p.st.mtp != nil { // the prompt's first positions are not run: no head follows it
		p.st.mtp.reset()
		p.st.mtp = nil
	}
	return p, nil
}

// PrefillGroup says which prompts prefill well together with prompt: those
// of the same prompt bucket (rows of one padded length waste nothing),
// as many as fit in one prefill piece of PrefillChunk tokens (a group
// then costs each of its prompts one piece of waiting, as a prompt
// prefilled alone does, in one call instead of several), at most
// MaxPrefill. Grouping mixed lengths pads every row to the longest: at 8
// streams it tripled the median time to first token (305 to 959 ms), and
// so did groups larger than one piece.
func (b *Batch) PrefillGroup(prompt []int) (key, most int) {
	t := PrefillCacheLen(len(prompt))
	return t, max(1, min(b.o.PrefillChunk/t, b.MaxPrefill()))
}

// RopeSwitch is the model's lm.Spec.RopeSwitch (0: none): serve's prefix
// cache serves a prompt only from one on the same side of it.
func (b *Batch) RopeSwitch() int { return b.r.spec.RopeSwitch }

// KeepsPrefixes reports whether finished prompts' caches can be kept for
// reuse: with BatchOptions.Prefixes, on a backend that updates caches in
// place (a recomputed token's slot is overwritten, not added to), for a
// model whose every state is a cache of slots (recurrent state would
// absorb a recomputed token twice).
func (b *Batch) KeepsPrefixes() bool {
	if !b.o.Prefixes || !b.r.dus {
		return false
	}
	for _, axes := range b.r.slotAxes {
		for _, a := range axes {
			if a == lm.NoSlots {
				return false
			}
		}
	}
	return true
}

// Keep keeps prompt i's cache of a finished prefill for later prompts that
// share its prefix (StartPrefillFrom); the caller releases it. The only
// prompt of a one-row prefill takes the prefill's state (Close then frees
// nothing); otherwise its row is copied (the place program).
func (b *Batch) Keep(p *BatchPrefill, i int) (*Kept, error) {
	if !b.KeepsPrefixes() {
		return nil, fmt.Errorf("keep: this batch keeps no prefixes")
	}
	if p.st.tensors == nil || p.st.Pending() > 0 {
		return nil, fmt.Errorf("keep: the prefill is not finished")
	}
	if i < 0 || i >= len(p.prompts) {
		return nil, fmt.Errorf("keep: prompt %d of %d", i, len(p.prompts))
	}
	if p.st.batch == 1 {
		if p.st.mtp != nil { // a kept cache keeps no head's records
			p.st.mtp.reset()
			p.st.mtp = nil
		}
		k := &Kept{prompt: p.prompts[0], st: p.st}
		p.st = b.r.NewState()
		return k, nil
	}
	t := p.st.cacheLen
	args := append([]Arg{{T: tensors.FromScalar(int32(i))}}, slotMap(t, 0, t, 0)...)
	outs, err := b.place.Call(append(args, p.st.args(false)...)...)
	if err != nil {
		return nil, err
	}
	st := &State{r: b.r, batch: 1, cacheLen: t, maxCacheLen: t, pads: []int32{p.st.pads[i]}, tensors: b.splitState(outs)}
	return &Kept{prompt: p.prompts[i], st: st}, nil
}

// splitState groups a program's flat state outputs by layer.
func (b *Batch) splitState(outs []*tensors.Tensor) [][]*tensors.Tensor {
	state := make([][]*tensors.Tensor, len(b.r.slotAxes))
	k := 0
	for i, axes := range b.r.slotAxes {
		state[i] = outs[k : k+len(axes) : k+len(axes)]
		k += len(axes)
	}
	return state
}

// Step runs the next piece of the prompts; after the last one it returns
// the logits that follow each prompt and done.
func (p *BatchPrefill) Step() (logits [][]float32, done bool, err error) {
	if p.st.tensors == nil {
		return nil, false, fmt.Errorf("prefill: closed")
	}
	rows, err := p.st.PrefillChunk(min(p.chunk, p.st.Pending()))
	if err != nil {
		return nil, false, err
	}
	if p.st.Pending() > 0 {
		return nil, false, nil
	}
	return rows[:len(p.prompts)], true, nil
}

// Close frees the prefill's state (unless Keep took it).
func (p *BatchPrefill) Close() { p.st.Release() }

// Insert moves prompt i of a finished prefill into free row row (making
// room in the cache first). The caller closes the prefill after its
// inserts and keeps.
func (b *Batch) Insert(p *BatchPrefill, i, row int) error {
	if p.st.tensors == nil || p.st.Pending() > 0 {
		return fmt.Errorf("insert: the prefill is not finished")
	}
	if i < 0 || i >= len(p.prompts) {
		return fmt.Errorf("insert: prompt %d of %d", i, len(p.prompts))
	}
	if row < 0 || row >= b.dec.batch || b.used[row] {
		return fmt.Errorf("insert: row %d of %d is not free", row, b.dec.batch)
	}
	n := len(p.prompts[i])
	if err := b.fit(n); err != nil {
		return err
	}
	// place copies prompt i's row into a row of the batch's slots, the
	// prompt ending at the clock; write-row then swaps it into the free row
	// (both the batch state and the placed row are donated).
	next := b.dec.next
	args := append([]Arg{{T: tensors.FromScalar(int32(i))}}, b.placeArgs(b.dec.cacheLen, p.st.cacheLen, next, n)...)
	placed, err := b.place.Call(append(args, p.st.args(false)...)...)
	if err != nil {
		return err
	}
	args = append(b.dec.args(true), Arg{T: tensors.FromScalar(int32(row))})
	for _, x := range placed {
		args = append(args, Arg{T: x, Donate: true})
	}
	outs, err := b.writeRow.Call(args...)
	if err != nil {
		return b.fail(err)
	}
	b.dec.keepAll(outs)
	b.used[row] = true
	b.dec.pads[row] = int32(next - n)
	b.handOverMTP(p)
	return nil
}

// placeArgs are the slot maps of the place program for a row of s slots
// taking a prompt of n tokens that ends at slot t of the prefill and at
// the clock next of the row; slots outside the prompt become zero.
func (b *Batch) placeArgs(s, t, next, n int) []Arg {
	return slotMap(s, max(0, next-n), next, t-next)
}

// slotMap is remapSlots' map as arguments, for S' = s new slots: new
// slot j in [lo, hi) takes old slot j+shift, the others are zero. Every
// j+shift there must be an old slot.
func slotMap(s, lo, hi, shift int) []Arg {
	valid := make([]int32, s)
	for j := max(lo, 0); j < min(hi, s); j++ {
		valid[j] = 1
	}
	return []Arg{
		{T: tensors.FromScalar(int32(shift))},
		{T: tensors.FromFlatDataAndDimensions(valid, s)},
	}
}

// Decode feeds tokens[i] to the sequence in row rows[i] and returns the
// logits that follow each, valid until the next Decode. Rows not named
// decode a placeholder token, masked.
func (b *Batch) Decode(rows, tokens []int) ([][]float32, error) {
	if len(rows) != len(tokens) {
		return nil, fmt.Errorf("decode: %d rows, %d tokens", len(rows), len(tokens))
	}
	B := b.dec.batch
	named := make([]bool, B)
	for _, row := range rows {
		if row < 0 || row >= B || !b.used[row] || named[row] {
			return nil, fmt.Errorf("decode: row %d of %d holds no sequence, or is named twice", row, B)
		}
		named[row] = true
	}
	if err := b.fit(0); err != nil {
		return nil, err
	}
	if err := b.r.checkIDs("decode", tokens); err != nil {
		return nil, err
	}
	ids := make([]int32, B)
	for i, row := range rows {
		ids[row] = int32(tokens[i])
	}
	for row, used := range b.used {
		if !used {
			b.dec.pads[row] = int32(b.dec.next) // sees only its own slot
		}
	}
	b.dec.setPads(b.dec.pads)
	if B == 1 && b.dec.mtp.active() { // a lone sequence's head reads the step's final hidden states (BatchMTP)
		rows, err := b.dec.captureStep(b.r.mtp.many, ids, true)
		if err != nil && b.dec.tensors == nil {
			return nil, b.fail(err)
		}
		return rows, err
	}
	logits, err := b.r.run(b.dec, b.r.decode, tensors.FromFlatDataAndDimensions(ids, B, 1), b.dec.next)
	if err != nil {
		return nil, b.fail(err)
	}
	out := make([][]float32, len(rows))
	for i, row := range rows {
		out[i] = logits[row]
	}
	return out, nil
}

// Close frees the decode batch (not the Runner, nor kept caches).
func (b *Batch) Close() {
	b.dec.Release()
	b.used = nil
}

// Free empties a row.
func (b *Batch) Free(row int) {
	if row >= 0 && row < len(b.used) {
		b.used[row] = false
	}
}

// lostError is an execution's error after which the Batch dropped every
// sequence.
type lostError struct{ err error }

func (e lostError) Error() string   { return e.err.Error() }
func (e lostError) Unwrap() error   { return e.err }
func (e lostError) StateLost() bool { return true }

// fail drops every sequence after a failed execution (whose state the
// Runner released) and returns err, marked as such.
func (b *Batch) fail(err error) error {
	b.reset()
	return lostError{err}
}

// fit makes room for a step that writes slot next, with at least needBack
// slots below the clock (an inserted prompt's length) and a free slot at
// the clock, by slots steps, each moving the cache length by one bucket.
func (b *Batch) fit(needBack int) error {
	for {
		next, s := b.dec.next, b.dec.cacheLen
		if next >= needBack && next < s {
			return nil
		}
		if err := b.slotsStep(needBack); err != nil {
			return err
		}
	}
}

// lowestPad is the lowest pad of a running sequence (the clock when none
// runs): slots below it hold nothing anyone reads.
func (b *Batch) lowestPad() int {
	low := b.dec.next
	for row, used := range b.used {
		if used {
			low = min(low, int(b.dec.pads[row]))
		}
	}
	return low
}

// Relayout rebuilds the decode batch with len(from) rows, a RowBucket:
// row j takes old row from[j], or is free where from[j] is -1. Every used
// row must be taken, once.
func (b *Batch) Relayout(from []int) error {
	n := len(from)
	if n < 1 || n > b.o.MaxBatch || b.RowBucket(n) != n {
		return fmt.Errorf("relayout: %d rows is not a batch bucket", n)
	}
	taken := make([]bool, b.dec.batch)
	rowIdx := make([]int32, n)
	used := make([]bool, n)
	pads := make([]int32, n)
	for j, row := range from {
		switch {
		case row == -1:
			pads[j] = int32(b.dec.next)
			continue
		case row < 0 || row >= b.dec.batch || taken[row]:
			return fmt.Errorf("relayout: row %d of %d taken twice or out of range", row, b.dec.batch)
		}
		taken[row] = true
		rowIdx[j], used[j], pads[j] = int32(row), b.used[row], b.dec.pads[row]
	}
	for row, u := range b.used {
		if u && !taken[row] {
			return fmt.Errorf("relayout: row %d holds a sequence and is not taken", row)
		}
	}
	args := append([]Arg{{T: tensors.FromFlatDataAndDimensions(rowIdx, n)}}, b.dec.args(true)...)
	outs, err := b.gather.Call(args...)
	if err != nil {
		return b.fail(err)
	}
	b.dec.keepAll(outs)
	b.dec.batch, b.used = n, used
	b.dec.setPads(pads)
	return nil
}

// slotsStep moves the clock to what the running sequences hold (or to
// needBack, for a longer prompt) by shifting every row's slots, and moves
// the cache length one bucket towards the smallest that holds the clock
// and the slot it writes next.
//
// held = next − lowestPad is the longest running sequence. The new clock
// is max(held, needBack), at most the new length − 1 (fit calls again
// while one bucket is not enough); new slot j takes old slot j + shift,
// shift = next − new clock, which is negative (slots move right) when a
// prompt needs more room below the clock than there is. Pads move by the
// same shift, so positions (slot − pad) do not change.
func (b *Batch) slotsStep(needBack int) error {
	buckets := b.slotBuckets()
	next, s := b.dec.next, b.dec.cacheLen
	at := slices.Index(buckets, s)
	held := next - b.lowestPad()
	want, err := b.slotBucket(max(held, needBack) + 1)
	if err != nil {
		return err
	}
	sNew := s
	switch {
	case want > s:
		sNew = buckets[at+1]
	case want < s:
		sNew = buckets[at-1]
	}
	nextNew := min(max(held, needBack), sNew-1)
	shift := next - nextNew // old slot = new slot + shift
	// New slot j < nextNew holds old slot j+shift < next; the old slots
	// before 0 (j < -shift) do not exist.
	args := append(slotMap(sNew, -shift, nextNew, shift), b.dec.args(true)...)
	outs, err := b.slots.Call(args...)
	if err != nil {
		return b.fail(err)
	}
	b.dec.keepAll(outs)
	for row := range b.dec.pads {
		b.dec.pads[row] -= int32(shift)
	}
	b.dec.cacheLen, b.dec.maxCacheLen, b.dec.next = sNew, sNew, nextNew
	return nil
}

// remapSlots returns x with its slot axis rebuilt into S' slots: new
// slot j is x's slot j+shift where valid[j] != 0 (valid [S'] int32,
// shift a scalar int32; j+shift is then one of x's slots), else zero.
// The slots move as whole rows of the innermost axes, with no transpose:
// x between S' zero slots on each side, the window of S' slots at
// S'+shift (in range for every shift a valid slot allows), the invalid
// slots zeroed.
func remapSlots(x *graph.Node, axis int, shift, valid *graph.Node) *graph.Node {
	g := x.Graph()
	dims := x.Shape().Dimensions
	n := valid.Shape().Dimensions[0]
	zdims := slices.Clone(dims)
	zdims[axis] = n
	zeros := graph.Zeros(g, shapes.Make(x.DType(), zdims...))
	padded := graph.Concatenate([]*graph.Node{zeros, x, zeros}, axis)
	window := graph.GatherSlices(padded, []int{axis}, graph.AddScalar(shift, n), []int{n}, true)
	keep := alongAxis(graph.GreaterThan(valid, graph.ScalarZero(g, dtypes.Int32)), axis, zdims)
	return graph.Where(keep, window, graph.ScalarZero(g, x.DType()))
}

// alongAxis broadcasts v [dims[axis]] to dims along axis.
func alongAxis(v *graph.Node, axis int, dims []int) *graph.Node {
	r := make([]int, len(dims))
	for i := range r {
		r[i] = 1
	}
	r[axis] = dims[axis]
	return graph.BroadcastToDims(graph.Reshape(v, r...), dims...)
}

// placeGraph: [row, shift, valid [S], prefill state...] -> [row
// state...]: row `row` of the prefill's state with its slots remapped
// (remapSlots) into a row of S slots; state without slots as it is.
func (b *Batch) placeGraph(in []*graph.Node) []*graph.Node {
	row, shift, valid, small := in[0], in[1], in[2], in[3:]
	out := make([]*graph.Node, len(small))
	k := 0
	for _, axes := range b.r.slotAxes {
		for _, axis := range axes {
			x := graph.Gather(small[k], graph.Reshape(row, 1, 1)) // [1, ...]
			if axis != lm.NoSlots {
				x = remapSlots(x, axis, shift, valid)
			}
			out[k] = x
			k++
		}
	}
	return out
}

// writeRowGraph: [batch state..., row, row state...] -> [batch state...]
// with row `row` of each tensor replaced: a DynamicUpdateSlice where the
// backend has it (in place on the donated state, only the row's bytes
// move on tputool's cpu backend), else a Where over the whole tensor.
func (b *Batch) writeRowGraph(in []*graph.Node) []*graph.Node {
	n := (len(in) - 1) / 2
	big, row, small := in[:n], in[n], in[n+1:]
	out := make([]*graph.Node, n)
	for k, x := range big {
		p := small[k]
		if b.r.dus {
			starts := make([]*graph.Node, x.Rank())
			starts[0] = row
			for a := 1; a < x.Rank(); a++ {
				starts[a] = graph.ScalarZero(x.Graph(), dtypes.Int32)
			}
			out[k] = graph.DynamicUpdateSlice(x, p, starts)
			continue
		}
		rows := graph.Iota(x.Graph(), shapes.Make(dtypes.Int32, x.Shape().Dimensions[0]), 0)
		mask := alongAxis(graph.Equal(rows, row), 0, x.Shape().Dimensions)
		out[k] = graph.Where(mask, graph.BroadcastToShape(p, x.Shape()), x)
	}
	return out
}

// rowsGraph: [rows [B'], state...] -> [state...] with B' rows gathered
// from `rows`. Relayout gives free rows (from[j] == -1) index 0: they get
// a copy of row 0, junk nobody reads (see above).
func (b *Batch) rowsGraph(in []*graph.Node) []*graph.Node {
	rowIdx, states := in[0], in[1:]
	nb := rowIdx.Shape().Dimensions[0]
	out := make([]*graph.Node, len(states))
	for k, x := range states {
		out[k] = graph.Gather(x, graph.Reshape(rowIdx, nb, 1))
	}
	return out
}

// slotsGraph: [shift, valid [S'], state...] -> [state...] with slots
// remapped (remapSlots); state without slots as it is.
func (b *Batch) slotsGraph(in []*graph.Node) []*graph.Node {
	shift, valid, states := in[0], in[1], in[2:]
	out := make([]*graph.Node, len(states))
	k := 0
	for _, axes := range b.r.slotAxes {
		for _, axis := range axes {
			out[k] = states[k]
			if axis != lm.NoSlots {
				out[k] = remapSlots(states[k], axis, shift, valid)
			} else {
				out[k] = graph.Identity(states[k])
			}
			k++
		}
	}
	return out
}

// Warmup compiles up front every executable that serving runs, for every
// batch bucket, slot bucket and prompt bucket (see above), so that none
// compiles under load; except, for a LongRoPE model (lm.Spec.RopeSwitch),
// the longer first piece of a prompt past the switch (State.throughSwitch)
// and a crossing sequence's second prefill, which compile on first use.
// Recompile reports are off while it runs. The state
// it allocates (up to every slot at MaxContext) is returned to the
// operating system at the end, so an idle server holds only its weights
// (the 110M model at 32 slots: 594 MB RSS idle, 5.4 GB without it).
func (b *Batch) Warmup() error {
	defer func() {
		if sr, ok := b.r.backend.(spareReleaser); ok {
			sr.ReleaseSpares()
		}
		debug.FreeOSMemory()
	}()
	b.r.warming.Store(true)
	defer b.r.warming.Store(false)
	buckets := b.slotBuckets()
	var rowBuckets []int
	for rows := 1; ; rows = b.RowBucket(rows + 1) {
		rowBuckets = append(rowBuckets, rows)
		if rows == b.o.MaxBatch {
			break
		}
	}
	for ri, rows := range rowBuckets {
		for si, s := range buckets {
			if err := b.warmShape(rows, s, neighbours(rowBuckets, ri), neighbours(buckets, si)); err != nil {
				b.reset()
				return err
			}
		}
	}
	for _, s := range buckets {
		if err := b.warmMany(s); err != nil {
			b.reset()
			return err
		}
	}
	for t := 8; ; t *= 2 { // prompts of up to MaxContext-1 tokens
		if err := b.warmPrompt(t, buckets); err != nil {
			return err
		}
		if t >= b.o.MaxContext-1 {
			return nil
		}
	}
}

// spareReleaser is a backend that keeps memory freed by executions for
// the next ones (tpu/cpu's spares) and can let it go.
type spareReleaser interface{ ReleaseSpares() }

// neighbours are the buckets next to list[i].
func neighbours(list []int, i int) []int {
	var out []int
	if i > 0 {
		out = append(out, list[i-1])
	}
	if i+1 < len(list) {
		out = append(out, list[i+1])
	}
	return out
}

// warmShape compiles the executables that run on a decode batch of rows
// x s: decode, write-row, the rows steps to the neighbouring batch
// buckets and the slots steps to s and its neighbours.
//
// Decode is compiled by running one step on a zero state, through the same
// Runner.run as serving (a step may be several executables: eager mode, host
// experts); the other programs are only precompiled.
func (b *Batch) warmShape(rows, s int, rowsTo, slotsTo []int) error {
	st := b.r.newState(rows, s, make([]int32, rows))
	if _, err := b.r.run(st, b.r.decode, tensors.FromFlatDataAndDimensions(make([]int32, rows), rows, 1), 0); err != nil {
		return err
	}
	defer st.Release()
	state := st.args(false)
	one := b.r.newState(1, s, []int32{0})
	defer one.Release()
	row := append([]Arg{{T: tensors.FromScalar(int32(0))}}, one.args(false)...)
	if _, err := b.writeRow.Precompile(append(slices.Clone(state), row...)...); err != nil {
		return err
	}
	for _, n := range rowsTo {
		idx := Arg{T: tensors.FromFlatDataAndDimensions(make([]int32, n), n)}
		if _, err := b.gather.Precompile(append([]Arg{idx}, state...)...); err != nil {
			return err
		}
	}
	for _, n := range append([]int{s}, slotsTo...) {
		if _, err := b.slots.Precompile(append(slotMap(n, 0, 0, 0), state...)...); err != nil {
			return err
		}
	}
	return nil
}

// warmPrompt compiles, for each number of rows prefilled together, the
// prefill piece of prompt bucket t and the place program from it to every
// slot bucket a prompt of that bucket fits in (and, for one row, to every
// prompt bucket: prefix reuse).
func (b *Batch) warmPrompt(t int, buckets []int) error {
	for rows := 1; ; rows = b.prefillRows(rows + 1) {
		if err := b.warmPrefill(rows, t, buckets); err != nil {
			return err
		}
		if rows == b.MaxPrefill() {
			return nil
		}
	}
}

// warmPrefill compiles, for rows prompts of bucket t, the prefill piece
// (by running one on a zero state) and the place programs from it to
// every slot bucket its prompts may be inserted in.
func (b *Batch) warmPrefill(rows, t int, buckets []int) error {
	chunk := b.prefillPiece(rows, t)
	pending := make([][]int32, rows)
	for i := range pending {
		pending[i] = make([]int32, chunk)
	}
	if rows == 1 && b.mtpReady() { // the piece that keeps its hidden states for the head
		if err := b.r.mtp.programs(b.r); err != nil {
			return err
		}
		st := b.r.newState(1, t, []int32{0})
		st.mtp = &MTP{st: st, drafted: -1}
		// One piece as prefillCapture cuts it: the chunk, at most
		// mtpPiece (a chunk is a power of two: all its pieces are one).
		_, err := st.captureStep(b.r.mtp.prefill, make([]int32, min(chunk, mtpPiece)), false)
		st.Release()
		if err != nil {
			return err
		}
	}
	st := b.r.newState(rows, t, make([]int32, rows))
	st.pending = pending
	if _, err := st.PrefillChunk(chunk); err != nil {
		return err
	}
	defer st.Release()
	small := append([]Arg{{T: tensors.FromScalar(int32(0))}}, st.args(false)...)
	// Targets: every slot bucket its prompts fit in (one prompt has more
	// than t/2 tokens; with several, only the longest must); with a prefix
	// cache, a row's copy (t slots) and, from a cached prompt, every
	// prompt bucket.
	targets := map[int]bool{}
	for _, s := range buckets {
		if t/2 < s || rows > 1 {
			targets[s] = true
		}
	}
	if b.KeepsPrefixes() {
		targets[t] = true
		for to := 8; rows == 1; to *= 2 {
			targets[to] = true
			if to >= b.o.MaxContext-1 {
				break
			}
		}
	}
	for s := range targets {
		args := append([]Arg{small[0]}, b.placeArgs(s, t, 0, 0)...)
		if _, err := b.place.Precompile(append(args, small[1:]...)...); err != nil {
			return err
		}
	}
	return nil
}

// Embed runs prompts through the model, together in a batch of their
// own, and returns each one's final hidden states pooled by
// BatchOptions.Pooling (Runner.Embed): serve's embeddings. The rows and
// the decode batch are untouched. Its executables compile at first use
// (Warmup does not compile them).
func (b *Batch) Embed(prompts [][]int) ([][]float32, error) {
	for i, p := range prompts {
		if len(p) > b.o.MaxContext {
			return nil, errs.Usagef("prompt %d of %d tokens is beyond the context of %d tokens", i, len(p), b.o.MaxContext)
		}
	}
	return b.r.Embed(prompts, b.o.Pooling)
}

// PromptLogprobs runs prompts through the model, together in a batch of
// their own as Embed does, and returns the log-probability of each
// prompt token after the first, with its rank and topK alternatives
// (Runner.PromptLogprobs): serve's echoed prompts. The rows and the
// decode batch are untouched.
func (b *Batch) PromptLogprobs(prompts [][]int, topK int) ([][]sample.TokenLogprob, error) {
	for i, p := range prompts {
		if len(p) > b.o.MaxContext {
			return nil, errs.Usagef("prompt %d of %d tokens is beyond the context of %d tokens", i, len(p), b.o.MaxContext)
		}
	}
	return b.r.PromptLogprobs(prompts, topK)
}
