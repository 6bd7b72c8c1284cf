package compile

import (
	"fmt"
	"slices"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"

	"github.com/tputool/tputool/internal/errs"
)

// Continuous batching over fixed shapes (the server's engine).
//
// A Batch decodes many independent sequences in one batch whose rows are
// sequence slots. Every row shares one write position, the shared clock
// `next`: a decode step writes every row's new token at cache slot next,
// as a generation's decode does, so the model's graphs, the KV cache
// update (one DynamicUpdateSlice) and the compiled executables are those
// of `generate`. Rows differ only by their left padding: row b's sequence
// occupies slots [pads[b], next), its positions are slot - pads[b], and
// attention masks everything below pads[b] (lm.Step).
//
// A new sequence is prefilled on its own, in a batch of one whose cache is
// just long enough for the prompt (a power of two), in pieces the caller
// interleaves with decode steps. Insert then copies its state into a free
// row so that the prompt ends at the shared clock: its L tokens land in
// slots [next-L, next) and the row's pad becomes next-L. Recurrent state
// (Qwen3.5's DeltaNet) is copied whole.
//
// The batch keeps two shapes small, so that attention and memory follow
// the load rather than the limits: the number of rows is a power of two
// (a batch bucket) that grows when a sequence needs a row and shrinks when
// few are left, and the cache length is a bucket of what the longest
// running sequence holds. When the clock reaches the end of the cache, or
// an insert needs more rows or more slots behind the clock, a relayout
// gathers the running rows to the front and shifts every row's slots left
// by the free space below the lowest pad (or right, for a prompt longer
// than the clock), in one executable. Each decode executable is compiled
// once per (batch bucket, cache bucket): Warmup compiles them all up
// front, so no compile happens under load.

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
}

// DefaultServePrefillChunk is BatchOptions.PrefillChunk's default.
const DefaultServePrefillChunk = 64

// minSlots is the smallest cache bucket of a Batch.
const minSlots = 32

// Batch runs sequences in slots by continuous batching (see above). It
// owns its LM: nothing else may run on it.
type Batch struct {
	r *LM
	o BatchOptions

	dec    genState // the decode batch: dec.batch rows, dec.cacheLen slots
	rows   []int    // per row: the sequence handle, -1 when free
	seqRow map[int]int
	nextID int

	slotAxes [][]int // per layer and state: the axis of cache slots, -1 for none
	insert   *Program
	relayout *Program
}

// NewBatch prepares continuous batching on r, which it then owns.
func NewBatch(r *LM, o BatchOptions) (*Batch, error) {
	if r.tp != nil {
		return nil, errs.Unsupportedf("serving with --tp/--dp above 1 is not supported yet: run one device per server")
	}
	if o.MaxBatch < 1 || o.MaxBatch > 1024 {
		return nil, errs.Usagef("--max-batch %d: want 1 to 1024 sequence slots", o.MaxBatch)
	}
	if o.MaxContext == 0 {
		o.MaxContext = r.spec.MaxPositions
	}
	if o.MaxContext < 2 || o.MaxContext > r.spec.MaxPositions {
		return nil, errs.Usagef("--max-context %d: want 2 to the model's %d positions (max_position_embeddings)", o.MaxContext, r.spec.MaxPositions)
	}
	if o.PrefillChunk == 0 {
		o.PrefillChunk = DefaultServePrefillChunk
	}
	if o.PrefillChunk < 1 {
		return nil, errs.Usagef("--prefill-chunk %d: want a positive number of tokens", o.PrefillChunk)
	}
	o.PrefillChunk = pow2(o.PrefillChunk)
	b := &Batch{r: r, o: o, seqRow: map[int]int{}}
	for i := 0; i < r.spec.Layers; i++ {
		a := r.model.LayerState(i, 1, 64)
		c := r.model.LayerState(i, 1, 128)
		axes := make([]int, len(a))
		for k := range a {
			axes[k] = -1
			for d := range a[k].Shape {
				if a[k].Shape[d] != c[k].Shape[d] {
					axes[k] = d
				}
			}
		}
		b.slotAxes = append(b.slotAxes, axes)
	}
	var err error
	if b.insert, err = r.newProgram("serve-insert", b.insertGraph); err != nil {
		return nil, err
	}
	if b.relayout, err = r.newProgram("serve-relayout", b.relayoutGraph); err != nil {
		return nil, err
	}
	b.reset()
	return b, nil
}

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

// batchBucket is the number of rows for k sequences: a power of two,
// capped at MaxBatch.
func (b *Batch) batchBucket(k int) int { return min(pow2(max(k, 1)), b.o.MaxBatch) }

// slotBuckets are the cache lengths of the decode batch: powers of two
// from minSlots below MaxContext, then MaxContext rounded up to a multiple
// of 8 (a running sequence holds at most MaxContext-1 tokens and writes
// one more).
func (b *Batch) slotBuckets() []int {
	var out []int
	for s := minSlots; s < b.o.MaxContext; s *= 2 {
		out = append(out, s)
	}
	return append(out, roundUp(b.o.MaxContext, 8))
}

// slotBucket is the smallest cache bucket of at least n slots.
func (b *Batch) slotBucket(n int) (int, error) {
	for _, s := range b.slotBuckets() {
		if s >= n {
			return s, nil
		}
	}
	return 0, fmt.Errorf("serve: %d cache slots needed, above --max-context %d", n, b.o.MaxContext)
}

// reset frees every sequence and starts an empty decode batch of one row.
func (b *Batch) reset() {
	b.swapIn(&b.dec, func() { b.r.release() })
	s := b.slotBuckets()[0]
	b.dec = genState{batch: 1, cacheLen: s, maxCacheLen: s, pads: []int32{0}, state: b.r.newState(1, s)}
	b.rows = []int{-1}
	clear(b.seqRow)
}

// swapIn runs f with st as the LM's generation state.
func (b *Batch) swapIn(st *genState, f func()) {
	saved := b.r.genState
	b.r.genState = *st
	defer func() {
		*st = b.r.genState
		b.r.genState = saved
	}()
	f()
}

// BatchPrefill is one prompt's prefill, on its own batch of one.
type BatchPrefill struct {
	b     *Batch
	st    genState
	n     int // prompt tokens
	chunk int
}

// StartPrefill begins prefilling prompt into a cache of its own, a power
// of two of at least 8 slots with the prompt at its end; pieces entirely
// made of left padding are skipped (they change nothing: padding is
// masked).
func (b *Batch) StartPrefill(prompt []int) (*BatchPrefill, error) {
	n := len(prompt)
	if n == 0 {
		return nil, errs.Usagef("empty prompt")
	}
	if n >= b.o.MaxContext {
		return nil, errs.Usagef("prompt of %d tokens leaves no room below --max-context %d", n, b.o.MaxContext)
	}
	if err := b.r.checkIDs("prompt", prompt); err != nil {
		return nil, err
	}
	t := pow2(max(n, 8))
	chunk := min(b.o.PrefillChunk, t)
	pad := t - n
	from := pad / chunk * chunk // the first piece that holds a prompt token
	tokens := make([]int32, t-from)
	for j, id := range prompt {
		tokens[pad-from+j] = int32(id)
	}
	pads := []int32{int32(pad)}
	p := &BatchPrefill{b: b, n: n, chunk: chunk, st: genState{
		batch: 1, cacheLen: t, maxCacheLen: t, next: from, pads: pads,
		pending: [][]int32{tokens}, padsT: tensors.FromFlatDataAndDimensions(slices.Clone(pads), 1),
		state: b.r.newState(1, t),
	}}
	return p, nil
}

// Step runs the next piece of the prompt; after the last one it returns
// the logits that follow the prompt and done.
func (p *BatchPrefill) Step() (logits []float32, done bool, err error) {
	if p.st.state == nil {
		return nil, false, fmt.Errorf("prefill: closed")
	}
	var rows [][]float32
	p.b.swapIn(&p.st, func() {
		rows, err = p.b.r.PrefillChunk(min(p.chunk, p.b.r.Pending()))
	})
	if err != nil {
		return nil, false, err
	}
	if len(p.st.pending[0]) > 0 {
		return nil, false, nil
	}
	return rows[0], true, nil
}

// Close frees the prefill's state.
func (p *BatchPrefill) Close() {
	p.b.swapIn(&p.st, func() { p.b.r.release() })
}

// Insert moves a finished prefill into a free row (making room first)
// and returns the new sequence's handle; the prefill is closed.
func (b *Batch) Insert(p *BatchPrefill) (int, error) {
	defer p.Close()
	if p.st.state == nil || len(p.st.pending[0]) > 0 {
		return -1, fmt.Errorf("insert: the prefill is not finished")
	}
	if b.active() >= b.o.MaxBatch {
		return -1, fmt.Errorf("insert: all %d slots are in use", b.o.MaxBatch)
	}
	if err := b.fit(1, p.n); err != nil {
		return -1, err
	}
	row := slices.Index(b.rows, -1)
	next, s, t := b.dec.next, b.dec.cacheLen, p.st.cacheLen
	// Slot j of the row takes slot j - next + t of the prefill (the prompt
	// ends at both clocks); slots outside the prompt become zero.
	idx := make([]int32, s)
	valid := make([]int32, s)
	for j := range idx {
		src := j - next + t
		if j >= next-p.n && j < next {
			idx[j], valid[j] = int32(src), 1
		}
	}
	args := []Arg{
		{T: tensors.FromScalar(int32(row))},
		{T: tensors.FromFlatDataAndDimensions(idx, s)},
		{T: tensors.FromFlatDataAndDimensions(valid, s)},
	}
	for _, st := range b.dec.state {
		for _, x := range st {
			args = append(args, Arg{T: x, Donate: true})
		}
	}
	for _, st := range p.st.state {
		for _, x := range st {
			args = append(args, Arg{T: x})
		}
	}
	outs, err := b.insert.Call(args...)
	if err != nil {
		b.fail()
		return -1, err
	}
	b.setState(outs)
	id := b.nextID
	b.nextID++
	b.rows[row] = id
	b.seqRow[id] = row
	b.dec.pads[row] = int32(next - p.n)
	return id, nil
}

// Decode feeds tokens[i] to sequence seqs[i] and returns the logits that
// follow each. Rows of no sequence decode a placeholder token, masked.
func (b *Batch) Decode(seqs, tokens []int) ([][]float32, error) {
	if len(seqs) != len(tokens) {
		return nil, fmt.Errorf("decode: %d sequences, %d tokens", len(seqs), len(tokens))
	}
	for _, h := range seqs {
		if _, ok := b.seqRow[h]; !ok {
			return nil, fmt.Errorf("decode: no sequence %d", h)
		}
	}
	if err := b.fit(0, 0); err != nil {
		return nil, err
	}
	B := b.dec.batch
	ids := make([]int32, B)
	for i, h := range seqs {
		id := tokens[i]
		if id < 0 || id >= b.r.spec.VocabSize {
			return nil, fmt.Errorf("decode: token id %d is outside the vocabulary [0, %d)", id, b.r.spec.VocabSize)
		}
		ids[b.seqRow[h]] = int32(id)
	}
	for row, h := range b.rows {
		if h < 0 {
			b.dec.pads[row] = int32(b.dec.next) // sees only its own slot
		}
	}
	if b.dec.padsT != nil {
		b.dec.padsT.FinalizeAll()
	}
	b.dec.padsT = tensors.FromFlatDataAndDimensions(slices.Clone(b.dec.pads), B)
	var rows [][]float32
	var err error
	b.swapIn(&b.dec, func() {
		rows, err = b.r.run(b.r.decode, tensors.FromFlatDataAndDimensions(ids, B, 1), b.dec.next)
	})
	if err != nil {
		b.fail()
		return nil, err
	}
	out := make([][]float32, len(seqs))
	for i, h := range seqs {
		out[i] = rows[b.seqRow[h]]
	}
	return out, nil
}

// Free releases a sequence's row.
func (b *Batch) Free(seq int) {
	if row, ok := b.seqRow[seq]; ok {
		b.rows[row] = -1
		delete(b.seqRow, seq)
	}
}

// fail drops every sequence after a failed execution (whose state the LM
// released).
func (b *Batch) fail() { b.reset() }

// active counts the rows in use.
func (b *Batch) active() int { return len(b.seqRow) }

// setState takes a program's outputs as the decode batch's state.
func (b *Batch) setState(outs []*tensors.Tensor) {
	off := 0
	for i := range b.dec.state {
		copy(b.dec.state[i], outs[off:off+len(b.dec.state[i])])
		off += len(b.dec.state[i])
	}
}

// fit makes room, by a relayout when needed, for `extra` more sequences
// and for a step that writes slot next: rows for every sequence (growing
// the batch bucket, or shrinking it when at most a quarter is used), at
// least needBack slots below the clock (an inserted prompt's length), and
// a free slot at the clock.
func (b *Batch) fit(extra, needBack int) error {
	k := b.active() + extra
	rowsNow := b.dec.batch
	rowsNew := rowsNow
	if k > rowsNow {
		rowsNew = b.batchBucket(k)
	} else if rowsNow > 1 && k <= rowsNow/4 {
		rowsNew = b.batchBucket(k)
	}
	next, s := b.dec.next, b.dec.cacheLen
	free := extra == 0 || slices.Index(b.rows, -1) >= 0
	if rowsNew == rowsNow && next >= needBack && next < s && free {
		return nil
	}
	low := next // the lowest pad of a running sequence
	for row, h := range b.rows {
		if h >= 0 {
			low = min(low, int(b.dec.pads[row]))
		}
	}
	nextNew := max(next-low, needBack)
	shift := next - nextNew // old slot = new slot + shift
	sNew, err := b.slotBucket(nextNew + 1)
	if err != nil {
		return err
	}
	rowIdx := make([]int32, rowsNew)
	rows := slices.Repeat([]int{-1}, rowsNew)
	pads := make([]int32, rowsNew)
	j := 0
	for row, h := range b.rows {
		if h < 0 {
			continue
		}
		rowIdx[j], rows[j], pads[j] = int32(row), h, b.dec.pads[row]-int32(shift)
		b.seqRow[h] = j
		j++
	}
	for ; j < rowsNew; j++ {
		pads[j] = int32(nextNew)
	}
	idx := make([]int32, sNew)
	valid := make([]int32, sNew)
	for j := range idx {
		if src := j + shift; src >= 0 && src < next && j < nextNew {
			idx[j], valid[j] = int32(src), 1
		}
	}
	args := []Arg{
		{T: tensors.FromFlatDataAndDimensions(rowIdx, rowsNew)},
		{T: tensors.FromFlatDataAndDimensions(idx, sNew)},
		{T: tensors.FromFlatDataAndDimensions(valid, sNew)},
	}
	for _, st := range b.dec.state {
		for _, x := range st {
			args = append(args, Arg{T: x, Donate: true})
		}
	}
	outs, err := b.relayout.Call(args...)
	if err != nil {
		b.fail()
		return err
	}
	b.setState(outs)
	b.dec.batch, b.dec.cacheLen, b.dec.maxCacheLen, b.dec.next = rowsNew, sNew, sNew, nextNew
	b.dec.pads = pads
	b.rows = rows
	return nil
}

// remapSlots returns x with its slot axis rebuilt from idx [S'] and valid
// [S'] (int32): new slot j is x's slot idx[j] where valid[j] != 0, else
// zero.
func remapSlots(x *graph.Node, axis int, idx, valid *graph.Node) *graph.Node {
	rank := x.Rank()
	perm := []int{axis}
	for a := 0; a < rank; a++ {
		if a != axis {
			perm = append(perm, a)
		}
	}
	n := idx.Shape().Dimensions[0]
	xt := graph.TransposeAllAxes(x, perm...)                                    // slots first
	got := graph.Gather(xt, graph.Reshape(idx, n, 1))                           // [S', rest...]
	keep := graph.GreaterThan(valid, graph.ScalarZero(x.Graph(), dtypes.Int32)) // [S']
	keep = alongFirstAxis(keep, got.Shape().Dimensions)
	got = graph.Where(keep, got, graph.ZerosLike(got))
	inv := make([]int, rank)
	for i, a := range perm {
		inv[a] = i
	}
	return graph.TransposeAllAxes(got, inv...)
}

// alongFirstAxis broadcasts v [dims[0]] to dims along the first axis.
func alongFirstAxis(v *graph.Node, dims []int) *graph.Node {
	r := make([]int, len(dims))
	for i := range r {
		r[i] = 1
	}
	r[0] = dims[0]
	return graph.BroadcastToDims(graph.Reshape(v, r...), dims...)
}

// insertGraph: [row, idx [S], valid [S], batch state..., prefill state...]
// -> [batch state...]: the prefill's state, its slots remapped, replaces
// row `row` of each batch state tensor.
func (b *Batch) insertGraph(in []*graph.Node) []*graph.Node {
	row, idx, valid := in[0], in[1], in[2]
	n := (len(in) - 3) / 2
	big, small := in[3:3+n], in[3+n:]
	out := make([]*graph.Node, n)
	k := 0
	for _, axes := range b.slotAxes {
		for _, axis := range axes {
			x, p := big[k], small[k]
			if axis >= 0 {
				p = remapSlots(p, axis, idx, valid)
			}
			if b.r.dus {
				starts := make([]*graph.Node, x.Rank())
				starts[0] = row
				for a := 1; a < x.Rank(); a++ {
					starts[a] = graph.ScalarZero(x.Graph(), dtypes.Int32)
				}
				out[k] = graph.DynamicUpdateSlice(x, p, starts)
			} else {
				rows := graph.Iota(x.Graph(), shapes.Make(dtypes.Int32, x.Shape().Dimensions[0]), 0)
				mask := alongFirstAxis(graph.Equal(rows, row), x.Shape().Dimensions)
				out[k] = graph.Where(mask, graph.BroadcastToShape(p, x.Shape()), x)
			}
			k++
		}
	}
	return out
}

// relayoutGraph: [rows [B'], idx [S'], valid [S'], state...] -> [state...]
// with B' rows gathered from `rows` and slots remapped (remapSlots).
func (b *Batch) relayoutGraph(in []*graph.Node) []*graph.Node {
	rowIdx, idx, valid := in[0], in[1], in[2]
	states := in[3:]
	nb := rowIdx.Shape().Dimensions[0]
	out := make([]*graph.Node, len(states))
	k := 0
	for _, axes := range b.slotAxes {
		for _, axis := range axes {
			x := graph.Gather(states[k], graph.Reshape(rowIdx, nb, 1))
			if axis >= 0 {
				x = remapSlots(x, axis, idx, valid)
			}
			out[k] = x
			k++
		}
	}
	return out
}

// Warmup compiles up front every executable that serving runs at load:
// the decode step for each batch bucket and cache bucket, and the prefill
// piece for each prompt bucket.
func (b *Batch) Warmup() error {
	var err error
	for rows := 1; ; rows = min(rows*2, b.o.MaxBatch) {
		for _, s := range b.slotBuckets() {
			st := genState{batch: rows, cacheLen: s, maxCacheLen: s, pads: make([]int32, rows), state: b.r.newState(rows, s)}
			st.padsT = tensors.FromFlatDataAndDimensions(slices.Clone(st.pads), rows)
			b.swapIn(&st, func() {
				_, err = b.r.run(b.r.decode, tensors.FromFlatDataAndDimensions(make([]int32, rows), rows, 1), 0)
				b.r.release()
			})
			if err != nil {
				b.reset()
				return err
			}
		}
		if rows == b.o.MaxBatch {
			break
		}
	}
	for t := 8; ; t *= 2 { // prompts of up to MaxContext-1 tokens
		chunk := min(b.o.PrefillChunk, t)
		st := genState{batch: 1, cacheLen: t, maxCacheLen: t, pads: []int32{0}, pending: [][]int32{make([]int32, chunk)}, state: b.r.newState(1, t)}
		st.padsT = tensors.FromFlatDataAndDimensions([]int32{0}, 1)
		b.swapIn(&st, func() {
			_, err = b.r.PrefillChunk(chunk)
			b.r.release()
		})
		if err != nil {
			return err
		}
		if t >= b.o.MaxContext-1 {
			return nil
		}
	}
}
