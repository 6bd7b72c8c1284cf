package cpu

import (
	"fmt"
	"runtime/debug"
	"sync"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/shapes"
)

// Executable runs a compiled graph. It is immutable after Compile, so any
// number of goroutines may Execute it at once; each call has its own
// execState.
type Executable struct {
	backend *Backend
	name    string
	nodes   []*node // creation order, a topological order
	params  []*node
	outputs []*node
	// live[i]: node i is needed for an output.
	live []bool
	// lastUse[i]: index of the last node reading node i's value;
	// len(nodes) for outputs (never released), -1 when unused.
	lastUse []int
	// releaseAt[i]: the nodes whose value is dead once node i has run.
	releaseAt [][]int

	// pool is the memory the last execution freed, handed to the next
	// one, so that repeated calls (a decode step) allocate nothing big and
	// leave no garbage behind (with GOGC's default, garbage lets the heap
	// grow by as much as the weights). At most poolCap bytes are kept.
	poolMu sync.Mutex
	pool   map[freeKey][]any
}

// poolCap bounds the memory an Executable keeps between calls.
const poolCap = 128 << 20

var _ backends.Executable = (*Executable)(nil)

func newExecutable(b *Builder, outputs []*node) *Executable {
	e := &Executable{backend: b.backend, name: b.name, nodes: b.nodes, params: b.params, outputs: outputs}
	rewrite(e.nodes, actKind(b.backend.act.Load()))
	fuse(e.nodes, outputs)
	n := len(e.nodes)
	e.live = make([]bool, n)
	for _, o := range outputs {
		e.live[o.idx] = true
	}
	for i := n - 1; i >= 0; i-- {
		if e.live[i] {
			for _, in := range e.nodes[i].inputs {
				e.live[in.idx] = true
			}
		}
	}
	e.lastUse = make([]int, n)
	for i := range e.lastUse {
		e.lastUse[i] = -1
	}
	for i, nd := range e.nodes {
		if !e.live[i] {
			continue
		}
		for _, in := range nd.inputs {
			e.lastUse[in.idx] = i
		}
	}
	for _, o := range outputs {
		e.lastUse[o.idx] = n
	}
	e.releaseAt = make([][]int, n)
	for i, last := range e.lastUse {
		if last >= 0 && last < n {
			e.releaseAt[last] = append(e.releaseAt[last], i)
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
// Several nodes may share a slot (Reshape, Identity, ops done in place);
// refs counts the live values in it. An owned slot was allocated by this
// execution or donated by the caller, so it may be overwritten or reused
// once no live value is left in it.
type slot struct {
	data  any
	refs  int
	owned bool
}

type freeKey struct {
	dt dtypes.DType
	n  int
}

// execState is one execution's values and free memory.
type execState struct {
	e    *Executable
	vals []*slot
	free map[freeKey][]any
}

// alloc returns an owned slot for a value of this shape, recycled from a
// dead value when one of the same dtype and size exists. Its contents are
// not zeroed: every op writes its whole output.
func (st *execState) alloc(s shapes.Shape) *slot {
	k := freeKey{s.DType, s.Size()}
	if l := st.free[k]; len(l) > 0 {
		d := l[len(l)-1]
		st.free[k] = l[:len(l)-1]
		return &slot{data: d, owned: true}
	}
	return &slot{data: makeFlat(s.DType, s.Size()), owned: true}
}

// reuse returns input k's slot when node n may write its output there:
// the slot is owned, no other live value uses it, n is the input's last
// reader, and dtype and size match. Otherwise nil.
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

func (st *execState) release(s *slot) {
	s.refs--
	if s.refs == 0 && s.owned && s.data != nil {
		k := freeKey{dtypeOfFlat(s.data), flatLen(s.data)}
		st.free[k] = append(st.free[k], s.data)
	}
}

// Execute implements backends.Executable.
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
	for i, n := range e.nodes {
		if !e.live[i] {
			continue
		}
		cur = i
		var s *slot
		switch {
		case n.op == backends.OpTypeParameter:
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
		for _, j := range e.releaseAt[i] {
			st.release(st.vals[j])
		}
	}
	outs = make([]backends.Buffer, len(e.outputs))
	exported := map[*slot]bool{}
	for k, o := range e.outputs {
		s := st.vals[o.idx]
		data := s.data
		if !s.owned || exported[s] {
			data = cloneFlat(data)
		}
		exported[s] = true
		outs[k] = &Buffer{shape: o.shape, data: data}
	}
	e.keep(st.free)
	return outs, nil
}

// keep stores freed memory for the next call, up to poolCap bytes.
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
