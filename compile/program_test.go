package compile

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"weak"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
)

// TestProgramKeepsNoGraph: once compiled, a Program holds the backend's
// executable and not the GoMLX graph it was built from, whose nodes the Go
// collector would otherwise mark on every cycle; the executable still
// runs, and two calls racing on new shapes compile them once.
func TestProgramKeepsNoGraph(t *testing.T) {
	for name, open := range map[string]func(testing.TB) backends.Backend{"go": goBackend, "cpu": cpuBackend} {
		t.Run(name, func(t *testing.T) {
			backend := open(t)
			var builds atomic.Int32
			var node weak.Pointer[graph.Node]
			p, err := NewProgram(backend, "double", func(in []*graph.Node) []*graph.Node {
				builds.Add(1)
				out := graph.MulScalar(in[0], 2)
				node = weak.Make(out)
				return []*graph.Node{out}
			})
			if err != nil {
				t.Fatal(err)
			}
			defer p.Finalize()
			var wg sync.WaitGroup
			errs := make([]error, 4)
			for i := range errs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					_, errs[i] = p.Call(Arg{T: tensors.FromValue([]float32{1, 2, 3})})
				}()
			}
			wg.Wait()
			for _, err := range errs {
				if err != nil {
					t.Fatal(err)
				}
			}
			if n := builds.Load(); n != 1 {
				t.Errorf("%d graphs built for one shape, want 1", n)
			}
			runtime.GC()
			if node.Value() != nil {
				t.Error("the compiled graph's nodes are still reachable")
			}
			outs, err := p.Call(Arg{T: tensors.FromValue([]float32{1, 2, 3})})
			if err != nil {
				t.Fatal(err)
			}
			if got := outs[0].Value().([]float32); got[0] != 2 || got[1] != 4 || got[2] != 6 {
				t.Errorf("got %v, want [2 4 6]", got)
			}
			st := p.Stats()
			// A call that waited on another's compile counts a miss, so
			// the split depends on the race; the sum does not.
			if st.Calls != 5 || st.Misses < 1 || st.Hits+st.Misses != 5 {
				t.Errorf("stats %+v: want 5 calls, at least one a miss", st)
			}
		})
	}
}

// TestProgramCap: a shape beyond the cap is an error naming the program,
// and unboundedCache lifts it.
func TestProgramCap(t *testing.T) {
	backend := cpuBackend(t)
	p, err := NewProgram(backend, "neg", func(in []*graph.Node) []*graph.Node { return []*graph.Node{graph.Neg(in[0])} })
	if err != nil {
		t.Fatal(err)
	}
	defer p.Finalize()
	p.maxCache = 2
	for n := 1; n <= 3; n++ {
		_, err := p.Call(Arg{T: tensors.FromValue(make([]float32, n))})
		if n <= 2 && err != nil {
			t.Fatal(err)
		}
		if n == 3 && err == nil {
			t.Fatal("a third shape compiled past a cap of 2")
		}
	}
	p.unboundedCache()
	if _, err := p.Call(Arg{T: tensors.FromValue(make([]float32, 3))}); err != nil {
		t.Fatalf("after unboundedCache: %v", err)
	}
}

// TestProgramDonatesHostTensors: a donated tensor that lives on the host
// (a new State's zero caches) moves into a buffer the backend shares with
// it, which the execution then owns: no copy is made, and the tensor
// keeps no host copy alive afterwards (it is invalid, as a donated tensor
// is). Donating it outright copied it, and the host copy lived on with
// the tensor: a serve warm-up peaked at 10 GB instead of 5.4.
func TestProgramDonatesHostTensors(t *testing.T) {
	backend := cpuBackend(t)
	p, err := NewProgram(backend, "inc", func(in []*graph.Node) []*graph.Node { return []*graph.Node{graph.AddScalar(in[0], 1)} })
	if err != nil {
		t.Fatal(err)
	}
	defer p.Finalize()
	x := tensors.FromValue([]float32{1, 2, 3})
	if x.IsOnDevice(0) {
		t.Fatal("the input should start on the host")
	}
	outs, err := p.Call(Arg{T: x, Donate: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := outs[0].Value().([]float32); got[0] != 2 || got[2] != 4 {
		t.Errorf("got %v, want [2 3 4]", got)
	}
	if x.Ok() {
		t.Error("the donated host tensor still holds data after the call")
	}
}

// keyOf reuses the last call's key only when every input has the same
// dtype and dimensions: a changed shape, count or dtype gives shapeKey's
// key of the new inputs, and going back gives the old one again.
func TestProgramKeyOf(t *testing.T) {
	mk := func(dims ...[]int) []Arg {
		args := make([]Arg, len(dims))
		for i, d := range dims {
			args[i] = Arg{T: tensors.FromShape(shapes.Make(dtypes.Float32, d...))}
		}
		return args
	}
	var p Program
	a := mk([]int{2, 3}, []int{4})
	b := mk([]int{2, 3}, []int{5})
	c := mk([]int{2, 3})
	d := []Arg{a[0], {T: tensors.FromShape(shapes.Make(dtypes.Int32, 4))}}
	for i, args := range [][]Arg{a, a, b, a, c, a, d, d, a} {
		if got, want := p.keyOf(args), shapeKey(args); got != want {
			t.Fatalf("call %d: key %q, want %q", i, got, want)
		}
	}
	if shapeKey(a) == shapeKey(d) {
		t.Fatal("inputs of other dtypes have the same key")
	}
}
