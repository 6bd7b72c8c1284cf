package cpu

import (
	"fmt"
	"runtime/debug"
	"slices"
	"sync"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/shapes"
)

// How an Executable runs.
//
// Compile (newExecutable) turns the Builder's node list into a plan in
// three passes over the same nodes, which it edits in place:
//
//   - rewrite (dot.go) points DotGenerals at their weights as stored: the
//     bf16/f16 operand under a ConvertDType, the int8 and int4
//     dequantisation forms (quant.go), gathered expert stacks (grouped.go,
//     mxfp4.go). It runs first, while those forms are still op by op.
//   - rewriteGroupedSum (grouped.go) folds the routed experts' weighted
//     sum into the grouped product before it; rewriteRope (rope.go)
//     turns rotary embeddings' nine ops into one.
//   - fuse (fuse.go) turns softmax forms into one node, then trees of f32
//     elementwise ops into one node each.
//   - liveness: only what the outputs need is kept (and the parameters),
//     renumbered; lastUse and dying say when each value dies.
//
// A rewrite changes a node's op, inputs, fn and aux, and only ever points
// it at earlier nodes, so creation order stays a topological order. The
// nodes it bypasses (the ConvertDType, the dequantisation ops, absorbed
// elementwise ops) are dropped unless something else still reads them.
//
// Execute walks the nodes in that order on the calling goroutine, one
// at a time: parallelism is inside the ops (kernels.Parallel), never
// between nodes. Each value is held in a slot. After node i has run, the
// values dying at i are released; a slot this call owns whose last
// live value goes returns to a free list keyed by dtype and length, and
// later nodes take their output memory from it (alloc) or write over a
// dying input (reuse). A node's inputs are released only after it has
// run, so it never gets an input's memory from alloc, only through reuse.
//
// Ownership is the rule the rest rests on: memory that holds a value is
// written again only if its slot is owned and no other live value uses
// it. Owned are the slots this call allocated and the inputs the caller
// donated; constants (shared by every call, from any goroutine) and
// undonated inputs (the caller's memory) never are.

// Executable runs a compiled graph. It is immutable after Compile, except
// for its pool, so any number of goroutines may Execute it at once; each
// call has its own execState.
type Executable struct {
	backend *Backend
	name    string
	// nodes are the Builder's nodes that the outputs need, and the
	// parameters, rewritten and fused in place, in creation order (a
	// topological order); nodes[i].idx == i indexes lastUse, dyingAt
	// and execState.vals.
	nodes   []*node
	params  []*node
	outputs []*node
	// lastUse[i]: index of the last live node reading node i's value;
	// len(nodes) for outputs (never released), -1 when unused.
	lastUse []int
	// dying[dyingAt[i]:dyingAt[i+1]] are the nodes whose value is dead
	// once node i has run: one list cut at offsets, where a slice per
	// node made a few hundred thousand small objects for the collector
	// to mark across a server's executables.
	dying   []int32
	dyingAt []int32

	// pool is the memory the last execution freed, handed to the next
	// one, so that repeated calls (a decode step) allocate nothing big and
	// leave no garbage behind: with GOGC's default, garbage lets the heap
	// grow by as much as the live weights before a collection (RSS 771 MB
	// against 525 MB for the 110M model, docs/cpu-engine.md). At most
	// poolCap bytes are kept. A call takes the whole pool, so a call that
	// overlaps another starts with an empty free list and allocates; the
	// first to finish leaves its memory for the next.
	poolMu sync.Mutex
	pool   map[freeKey][]any
}

// poolCap bounds the memory an Executable keeps between calls.
const poolCap = 128 << 20

var _ backends.Executable = (*Executable)(nil)

// newExecutable plans the Builder's nodes (see above). The rewrites read
// the backend's activation setting as they run, so SetActivations applies
// only to executables compiled after it.
func newExecutable(b *Builder, outputs []*node) *Executable {
	e := &Executable{backend: b.backend, name: b.name, params: b.params, outputs: outputs}
	nodes := b.nodes
	rewrite(nodes, actKind(b.backend.act.Load()))
	rewriteGroupedSum(nodes, outputs)
	rewriteRope(nodes, outputs)
	fuse(nodes, outputs)
	// Keep what the outputs need, and every parameter (Execute binds
	// them all), renumbered in creation order, which stays topological.
	// The rest (the forms the rewrites bypassed, whatever nothing reads)
	// is dropped with the Builder, so a compiled program holds no more
	// than it runs.
	live := make([]bool, len(nodes))
	for _, o := range outputs {
		live[o.idx] = true
	}
	for _, p := range b.params {
		live[p.idx] = true
	}
	// One backward sweep suffices: every input comes before its reader.
	for i := len(nodes) - 1; i >= 0; i-- {
		if live[i] {
			for _, in := range nodes[i].inputs {
				live[in.idx] = true
			}
		}
	}
	for i, nd := range nodes {
		if live[i] {
			nd.idx = len(e.nodes)
			e.nodes = append(e.nodes, nd)
		}
	}
	n := len(e.nodes)
	e.lastUse = make([]int, n)
	for i := range e.lastUse {
		e.lastUse[i] = -1
	}
	for i, nd := range e.nodes {
		for _, in := range nd.inputs {
			e.lastUse[in.idx] = i
		}
	}
	for _, o := range outputs {
		e.lastUse[o.idx] = n
	}
	e.dyingAt = make([]int32, n+1)
	for _, last := range e.lastUse {
		if last >= 0 && last < n {
			e.dyingAt[last+1]++
		}
	}
	for i := range n {
		e.dyingAt[i+1] += e.dyingAt[i]
	}
	e.dying = make([]int32, e.dyingAt[n])
	fill := slices.Clone(e.dyingAt[:n])
	for i, last := range e.lastUse {
		if last >= 0 && last < n {
			e.dying[fill[last]] = int32(i)
			fill[last]++
		}
	}
	return e
}

// Finalize implements backends.Executable.
func (e *Executable) Finalize() {
	e.poolMu.Lock()
	e.pool = nil
	e.poolMu.Unlock()
}

// Inputs implements backends.Executable.
func (e *Executable) Inputs() ([]string, []shapes.Shape) {
	names := make([]string, len(e.params))
	ss := make([]shapes.Shape, len(e.params))
	for i, p := range e.params {
		names[i], ss[i] = p.paramName, p.shape
	}
	return names, ss
}

// Outputs implements backends.Executable.
func (e *Executable) Outputs() []shapes.Shape {
	ss := make([]shapes.Shape, len(e.outputs))
	for i, o := range e.outputs {
		ss[i] = o.shape
	}
	return ss
}

// slot is a piece of memory holding node values during one execution.
// Several nodes may share a slot (Reshape, Identity, same-dtype
// ConvertDType, ops done in place); refs counts the live values in it. An
// owned slot was allocated by this execution or donated by the caller, so
// it may be overwritten or reused once no live value is left in it. data
// is a flat slice of the dtype's Go type ([]float32, []bfloat16.BFloat16,
// ...), row-major, with no strides or offset: every op reads its inputs and
// writes its output as dense row-major arrays.
type slot struct {
	data  any
	refs  int
	owned bool
}

// freeKey keys free memory: a slice fits any value of the same dtype and
// element count, whatever its shape.
type freeKey struct {
	dt dtypes.DType
	n  int
}

// execState is one execution's values and free memory: vals[i] is node
// i's slot once it has run (nil before, and for dead nodes), free the
// owned memory no live value uses, by dtype and length.
type execState struct {
	e    *Executable
	vals []*slot
	free map[freeKey][]any
}

// alloc returns an owned slot for a value of this shape, recycled from a
// dead value when one of the same dtype and size exists, or for a large
// one from the backend's spares (spares.go). Its contents are not zeroed:
// every op writes its whole output.
func (st *execState) alloc(s shapes.Shape) *slot {
	k := freeKey{s.DType, s.Size()}
	if l := st.free[k]; len(l) > 0 {
		d := l[len(l)-1]
		st.free[k] = l[:len(l)-1]
		return &slot{data: d, owned: true}
	}
	if n := s.Size() * s.DType.Size(); n >= spareMin && placeable(s.DType) {
		if r := st.e.backend.spares.take(n); r != nil {
			return &slot{data: viewFlat(s.DType, r, s.Size()), owned: true}
		}
	}
	return &slot{data: makeFlat(s.DType, s.Size()), owned: true}
}

// reuse returns input k's slot when node n may write its output there:
// the slot is owned, no other live value uses it, n is the input's last
// reader, and dtype and size match. Otherwise nil.
//
// The op then reads and writes the same memory, so it must read each
// element of that input before it writes the output element at the same
// index, and read no element after its index is written: elementwise ops,
// a fused tree (chunk by chunk) and SoftmaxRows (row by row) do.
// DynamicUpdateSlice and ScatterSum keep the untouched elements and write
// only the update's, which they read from another slot: they refuse the
// reuse when the update is the operand's own memory.
func (st *execState) reuse(n *node, k int) *slot {
	in := n.inputs[k]
	s := st.vals[in.idx]
	if s == nil || !s.owned || s.refs != 1 || st.e.lastUse[in.idx] != n.idx {
		return nil
	}
	if in.shape.DType != n.shape.DType || in.shape.Size() != n.shape.Size() {
		return nil
	}
	return s
}

// allocOrReuse is reuse of the first input that fits, else alloc.
func (st *execState) allocOrReuse(n *node, candidates ...int) *slot {
	for _, k := range candidates {
		if s := st.reuse(n, k); s != nil {
			return s
		}
	}
	return st.alloc(n.shape)
}

// release drops one live value from s; the memory goes to the free list
// (a large value's to the backend's spares) when that was the last one
// and the slot is owned (so never a constant's or an undonated input's).
// A dead slot lets go of its memory: what the spares do not keep (a
// value over spareCap, or one they drop for room) is then the
// collector's at once, not held by vals until the execution ends (an
// encoder's attention scores, one set a layer: 7.8 GB for one
// 2,635-token input of a 22-layer ModernBERT). Two parameters given one
// buffer share a slot; both take their reference before any node runs
// (compile.Program creates every parameter before the graph's other
// nodes), so neither sees it released.
// scratchF32 is n f32 values of scratch from the call's free lists, for
// an op's working copy (16-bit values widened); st.drop gives it back.
func (st *execState) scratchF32(n int) *slot {
	return st.alloc(shapes.Make(dtypes.Float32, n))
}

// drop gives scratch slots back to the call's free lists.
func (st *execState) drop(ss ...*slot) {
	for _, s := range ss {
		s.refs = 1
		st.release(s)
	}
}

func (st *execState) release(s *slot) {
	s.refs--
	if s.refs != 0 {
		return
	}
	if s.owned && s.data != nil {
		if r := spareRegion(s.data); r != nil {
			st.e.backend.spares.give(r)
		} else {
			k := freeKey{dtypeOfFlat(s.data), flatLen(s.data)}
			st.free[k] = append(st.free[k], s.data)
		}
	}
	s.data = nil
}

// Execute implements backends.Executable. Inputs must have the
// parameters' shapes; donate[i] hands input i's memory to the call (nil
// donates nothing), and a donated buffer is invalid afterwards, whether
// the call succeeded or not. On an error the call's free memory is
// dropped rather than kept for the next call.
func (e *Executable) Execute(inputs []backends.Buffer, donate []bool, deviceNum backends.DeviceNum) (outs []backends.Buffer, err error) {
	if err := e.backend.checkDevice(deviceNum); err != nil {
		return nil, err
	}
	if len(inputs) != len(e.params) {
		return nil, fmt.Errorf("cpu backend: %q takes %d inputs, got %d", e.name, len(e.params), len(inputs))
	}
	if donate != nil && len(donate) != len(inputs) {
		return nil, fmt.Errorf("cpu backend: %q: %d donate flags for %d inputs", e.name, len(donate), len(inputs))
	}
	bufs := make([]*Buffer, len(inputs))
	for i, x := range inputs {
		buf, err := e.backend.buffer(x)
		if err != nil {
			return nil, fmt.Errorf("input #%d: %w", i, err)
		}
		if !buf.shape.Equal(e.params[i].shape) {
			return nil, fmt.Errorf("cpu backend: %q: input #%d (%s) has shape %s, want %s", e.name, i, e.params[i].paramName, buf.shape, e.params[i].shape)
		}
		bufs[i] = buf
	}
	// One slot per distinct input buffer; it is owned only when donated and
	// not also passed, undonated, as another input.
	st := &execState{e: e, vals: make([]*slot, len(e.nodes))}
	slots := map[*Buffer]*slot{}
	for i, buf := range bufs {
		data, err := buf.flatOf()
		if err != nil {
			return nil, fmt.Errorf("input #%d: %w", i, err)
		}
		s := slots[buf]
		if s == nil {
			s = &slot{data: data, owned: true}
			slots[buf] = s
		}
		if donate == nil || !donate[i] {
			s.owned = false
		}
		st.vals[e.params[i].idx] = s
	}
	// The memory the last call freed (none when another call has it).
	e.poolMu.Lock()
	st.free, e.pool = e.pool, nil
	e.poolMu.Unlock()
	if st.free == nil {
		st.free = map[freeKey][]any{}
	}
	cur := -1
	defer func() {
		if r := recover(); r != nil {
			op := "?"
			if cur >= 0 {
				op = opName(e.nodes[cur].op)
			}
			outs, err = nil, fmt.Errorf("cpu backend: %q: %s: panic during execution: %v\n%s", e.name, op, r, debug.Stack())
		}
		// Donated inputs are invalid after the call, whatever happened:
		// their memory may have been overwritten in place.
		for i, buf := range bufs {
			if donate != nil && donate[i] {
				buf.mu.Lock()
				buf.data = nil
				buf.mu.Unlock()
			}
		}
	}()
	// Each value adds one ref to its slot: a parameter to its buffer's
	// slot, a constant to a fresh unowned one, an aliasing node to its
	// input's, a computed node to the slot its fn returned (fresh, or a
	// dying input's through reuse).
	for i, n := range e.nodes {
		cur = i
		var s *slot
		switch {
		case n.op == backends.OpTypeParameter:
			if e.lastUse[i] < 0 {
				continue // bound but unread: it holds no ref
			}
			s = st.vals[i]
		case n.op == backends.OpTypeConstant:
			s = &slot{data: n.constant}
		case n.aliasesInput:
			s = st.vals[n.inputs[0].idx]
		default:
			ins := make([]*slot, len(n.inputs))
			for k, in := range n.inputs {
				ins[k] = st.vals[in.idx]
			}
			s, err = n.fn(st, n, ins)
			if err != nil {
				return nil, fmt.Errorf("cpu backend: %q: %s: %w", e.name, opName(n.op), err)
			}
		}
		s.refs++
		st.vals[i] = s
		for _, j := range e.dying[e.dyingAt[i]:e.dyingAt[i+1]] {
			st.release(st.vals[j])
		}
	}
	// Outputs are never released, so their memory is not in the free list.
	// An owned slot's memory is handed to the caller once; an unowned one
	// (a constant, an undonated input) and a slot already exported (two
	// outputs sharing memory) are copied.
	outs = make([]backends.Buffer, len(e.outputs))
	exported := map[*slot]bool{}
	for k, o := range e.outputs {
		s := st.vals[o.idx]
		data := s.data
		if !s.owned || exported[s] {
			data = cloneFlat(data)
		}
		exported[s] = true
		outs[k] = &Buffer{shape: o.shape, data: data, output: true}
	}
	e.keep(st.free)
	return outs, nil
}

// keep stores freed memory for the next call, up to poolCap bytes in all
// (which slices are kept beyond the cap depends on map order). The memory
// is dropped when another call has already put its own back.
func (e *Executable) keep(free map[freeKey][]any) {
	total := 0
	for k, l := range free {
		size := k.n * k.dt.Size()
		n := 0
		for n < len(l) && total+size <= poolCap {
			total += size
			n++
		}
		clear(l[n:])
		free[k] = l[:n]
	}
	e.poolMu.Lock()
	if e.pool == nil {
		e.pool = free
	}
	e.poolMu.Unlock()
}

// dtypeOfFlat is the dtype of a flat slice.
func dtypeOfFlat(flat any) dtypes.DType {
	return dtypes.FromGoType(reflectElem(flat))
}
