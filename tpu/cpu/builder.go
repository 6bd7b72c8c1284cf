package cpu

import (
	"fmt"
	"reflect"
	"slices"
	"sync/atomic"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/backends/notimplemented"
	"github.com/gomlx/gomlx/backends/shapeinference"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/shapes"
)

// Builder records a computation as a list of nodes in creation order,
// which is a topological order: a node is only created after its inputs.
// Every op it does not implement comes from notimplemented.Builder and
// returns an error naming the op.
//
// An op method checks its operands, computes the output shape (with
// GoMLX's shapeinference where it has a rule) and appends a node; nothing
// runs until an Executable does. Compile hands the node list itself to
// the Executable, which rewrites it in place; the Builder is then marked
// compiled, and ops taking its nodes (in) fail.
type Builder struct {
	notimplemented.Builder

	backend  *Backend
	name     string
	nodes    []*node
	params   []*node
	compiled bool
}

var _ backends.Builder = (*Builder)(nil)

func newBuilder(b *Backend, name string) *Builder {
	return &Builder{
		Builder: notimplemented.Builder{ErrFn: func(op backends.OpType) error {
			return fmt.Errorf("cpu backend: op %s is not implemented: %w", op, notimplemented.NotImplementedError)
		}},
		backend: b,
		name:    name,
	}
}

// execFn computes a node's value from its inputs' values (in[k] is
// n.inputs[k]'s slot). It returns the slot of the result: new memory from
// st.alloc, or an input's through st.reuse. It must write every element of
// the result, since recycled memory is not zeroed, and must not write an
// input's memory it did not get through reuse.
type execFn func(st *execState, n *node, in []*slot) (*slot, error)

// node is one op of the graph: idx is its position in the Builder's (and
// then the Executable's) list; fn is nil for parameters, constants and
// aliasing nodes, which the executor handles itself. Compile's rewrites
// (exec.go) may change a node's op (to opTypeFused, opTypeSoftmax or
// opTypeGrouped), inputs, fn and aux; idx and shape never change.
type node struct {
	idx    int
	op     backends.OpType
	shape  shapes.Shape
	inputs []*node
	fn     execFn

	paramIdx  int // OpTypeParameter
	paramName string
	constant  any // OpTypeConstant: flat data
	aux       any // op-specific settings
	// aliasesInput: the value is input 0's memory (Reshape, Identity, a
	// ConvertDType to the same dtype); the executor then shares the slot
	// instead of calling fn. The shared slot then holds two live values,
	// so neither is written in place while the other lives.
	aliasesInput bool
}

// Name implements backends.Builder.
func (b *Builder) Name() string { return b.name }

// OpShape implements backends.Builder.
func (b *Builder) OpShape(op backends.Op) (shapes.Shape, error) {
	n, err := b.in("OpShape", op)
	if err != nil {
		return shapes.Invalid(), err
	}
	return n[0].shape, nil
}

// in checks that ops are nodes of this builder (not of another Builder,
// whose idx would point at a different node here) and that the builder is
// not compiled yet.
func (b *Builder) in(where string, ops ...backends.Op) ([]*node, error) {
	if b.compiled {
		return nil, fmt.Errorf("cpu backend: %s: builder %q was already compiled", where, b.name)
	}
	out := make([]*node, len(ops))
	for i, op := range ops {
		n, ok := op.(*node)
		if !ok || n == nil {
			return nil, fmt.Errorf("cpu backend: %s: operand #%d is %T, not a cpu backend op", where, i, op)
		}
		if n.idx >= len(b.nodes) || b.nodes[n.idx] != n {
			return nil, fmt.Errorf("cpu backend: %s: operand #%d belongs to another builder", where, i)
		}
		out[i] = n
	}
	return out, nil
}

// opObserver, when set, is told of every op a Builder records.
var opObserver atomic.Pointer[func(backends.OpType)]

// ObserveOps sets a function told of every op any Builder of this backend
// records (nil to stop), for surveys of the ops a workload uses; see
// docs/cpu-engine.md. fn may be called from several goroutines at once.
func ObserveOps(fn func(backends.OpType)) {
	if fn == nil {
		opObserver.Store(nil)
		return
	}
	opObserver.Store(&fn)
}

// add appends a node; its inputs are earlier nodes, which keeps creation
// order topological.
func (b *Builder) add(op backends.OpType, shape shapes.Shape, inputs []*node, fn execFn) *node {
	if f := opObserver.Load(); f != nil {
		(*f)(op)
	}
	n := &node{idx: len(b.nodes), op: op, shape: shape, inputs: inputs, fn: fn}
	b.nodes = append(b.nodes, n)
	return n
}

// Parameter implements backends.Builder.
func (b *Builder) Parameter(name string, shape shapes.Shape, sharding *backends.ShardingSpec) (backends.Op, error) {
	if sharding != nil {
		return nil, fmt.Errorf("cpu backend: parameter %q: sharding is not supported", name)
	}
	if err := checkShape(shape); err != nil {
		return nil, fmt.Errorf("parameter %q: %w", name, err)
	}
	n := b.add(backends.OpTypeParameter, shape.Clone(), nil, nil)
	n.paramIdx, n.paramName = len(b.params), name
	b.params = append(b.params, n)
	return n, nil
}

// Constant implements backends.Builder: the data is copied. Every
// execution, from any goroutine, reads that one copy through an unowned
// slot, so nothing ever writes it.
func (b *Builder) Constant(flat any, dims ...int) (backends.Op, error) {
	v := reflect.ValueOf(flat)
	if v.Kind() != reflect.Slice {
		return nil, fmt.Errorf("cpu backend: Constant wants a flat slice, got %T", flat)
	}
	dt := dtypes.FromGoType(v.Type().Elem())
	shape := shapes.Make(dt, dims...)
	if err := checkShape(shape); err != nil {
		return nil, err
	}
	if v.Len() != shape.Size() {
		return nil, fmt.Errorf("cpu backend: Constant of shape %s wants %d values, got %d", shape, shape.Size(), v.Len())
	}
	n := b.add(backends.OpTypeConstant, shape, nil, nil)
	n.constant = cloneFlat(flat)
	return n, nil
}

// Identity implements backends.Builder.
func (b *Builder) Identity(x backends.Op) (backends.Op, error) {
	in, err := b.in("Identity", x)
	if err != nil {
		return nil, err
	}
	n := b.add(backends.OpTypeIdentity, in[0].shape, in, nil)
	n.aliasesInput = true
	return n, nil
}

// Reshape implements backends.Builder: no data moves.
func (b *Builder) Reshape(x backends.Op, dims ...int) (backends.Op, error) {
	in, err := b.in("Reshape", x)
	if err != nil {
		return nil, err
	}
	shape, err := shapeinference.ReshapeOp(in[0].shape, dims)
	if err != nil {
		return nil, err
	}
	n := b.add(backends.OpTypeReshape, shape, in, nil)
	n.aliasesInput = true
	return n, nil
}

// Compile implements backends.Builder.
func (b *Builder) Compile(outputs []backends.Op, shardings []*backends.ShardingSpec) (backends.Executable, error) {
	if len(shardings) != 0 {
		return nil, fmt.Errorf("cpu backend: sharding is not supported")
	}
	outs, err := b.in("Compile", outputs...)
	if err != nil {
		return nil, err
	}
	b.compiled = true
	return newExecutable(b, outs), nil
}

// DistributedSPMD implements backends.Builder: one device only.
func (b *Builder) DistributedSPMD(numDevices int) error {
	if numDevices == 1 {
		return nil
	}
	return fmt.Errorf("cpu backend: distributed execution over %d devices is not supported", numDevices)
}

// DistributedAutoSharding implements backends.Builder: not supported.
func (b *Builder) DistributedAutoSharding(meshes ...backends.Mesh) error {
	return fmt.Errorf("cpu backend: auto-sharding is not supported")
}

// DeviceAssignment implements backends.Builder: device 0 only.
func (b *Builder) DeviceAssignment(devices ...backends.DeviceNum) error {
	if len(devices) == 1 && devices[0] == 0 {
		return nil
	}
	return fmt.Errorf("cpu backend: only device 0 exists, got assignment %v", devices)
}

// axesOK checks a list of distinct axes within rank.
func axesOK(where string, axes []int, rank int) error {
	seen := make([]bool, rank)
	for _, a := range axes {
		if a < 0 || a >= rank {
			return fmt.Errorf("cpu backend: %s: axis %d out of range for rank %d", where, a, rank)
		}
		if seen[a] {
			return fmt.Errorf("cpu backend: %s: axis %d repeated in %v", where, a, axes)
		}
		seen[a] = true
	}
	return nil
}

// capabilities lists the implemented ops and dtypes.
var capabilities = func() backends.Capabilities {
	c := backends.Capabilities{Operations: map[backends.OpType]bool{}, DTypes: map[dtypes.DType]bool{}}
	for _, dt := range supportedDTypes {
		c.DTypes[dt] = true
	}
	for _, op := range implementedOps() {
		c.Operations[op] = true
	}
	return c
}()

func implementedOps() []backends.OpType {
	ops := []backends.OpType{
		backends.OpTypeParameter, backends.OpTypeConstant, backends.OpTypeIdentity,
		backends.OpTypeReshape, backends.OpTypeTranspose, backends.OpTypeBroadcastInDim,
		backends.OpTypeSlice, backends.OpTypeConcatenate, backends.OpTypePad, backends.OpTypeIota,
		backends.OpTypeReverse, backends.OpTypeConvertDType, backends.OpTypeWhere, backends.OpTypeClamp,
		backends.OpTypeReduceSum, backends.OpTypeReduceMax, backends.OpTypeReduceMin, backends.OpTypeReduceProduct,
		backends.OpTypeArgMinMax, backends.OpTypeDotGeneral, backends.OpTypeGather, backends.OpTypeConvGeneral, backends.OpTypeScatterSum,
		backends.OpTypeDynamicSlice, backends.OpTypeDynamicUpdateSlice,
	}
	ops = append(ops, unaryOps...)
	ops = append(ops, binaryOps...)
	ops = append(ops, compareOps...)
	slices.Sort(ops)
	return ops
}
