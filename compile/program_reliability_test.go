package compile

import (
	"errors"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
	"github.com/tputool/tputool/tpu"
)

// cpuDevice opens the pure-Go backend exactly as tputool does (--device cpu).
func cpuDevice(t *testing.T) backends.Backend {
	t.Helper()
	spec, err := tpu.ParseSpec("cpu:go")
	if err != nil {
		t.Fatal(err)
	}
	d, err := tpu.OpenEnv(spec, tpu.OSEnv())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	return d.Backend
}

// TestGoBackendTrapsAreErrors: graphs the pure-Go backend cannot run
// (an op it lacks, a dtype conversion it lacks, a panic while building)
// fail with an error that names the program and the op, and the process
// and the backend go on working. On GoMLX v0.26.0 the F32->F16 conversion
// panics inside the backend, which kills the whole process when the
// backend runs ops in its worker goroutines; tputool opens it with
// ops_sequential, where the panic reaches Program's recover.
func TestGoBackendTrapsAreErrors(t *testing.T) {
	be := cpuDevice(t)
	x := tensors.FromValue(make([]float32, 64*1024)) // large enough for intra-op parallel chunks
	cases := []struct {
		name string
		fn   func(in []*graph.Node) []*graph.Node
		args []Arg
		want []string
		// atRun: the backend only finds out when it executes the graph.
		atRun bool
	}{
		{"dynamic-update-slice", func(in []*graph.Node) []*graph.Node {
			start := graph.Const(in[0].Graph(), int32(0))
			return []*graph.Node{graph.DynamicUpdateSlice(in[0], in[1], []*graph.Node{start})}
		}, []Arg{{T: x}, {T: tensors.FromValue(make([]float32, 8))}}, []string{`program "dynamic-update-slice"`, "DynamicUpdateSlice"}, false},
		{"to-float16", func(in []*graph.Node) []*graph.Node {
			// Two independent branches: with the backend's parallel op
			// scheduling (its default) the conversion would run, and
			// panic, in a worker goroutine and kill the test binary.
			return []*graph.Node{graph.ConvertDType(graph.Neg(in[0]), dtypes.Float16), graph.Abs(in[0])}
		}, []Arg{{T: x}}, []string{`program "to-float16"`, "ConvertDType", "Float16"}, true},
		{"float16-input", func(in []*graph.Node) []*graph.Node {
			return []*graph.Node{graph.Add(in[0], in[0])}
		}, []Arg{{T: tensors.FromShape(shapesF16(4))}}, []string{`program "float16-input"`}, false},
		{"panicking-builder", func(in []*graph.Node) []*graph.Node {
			panic("shape mismatch in layer 3")
		}, []Arg{{T: x}}, []string{`program "panicking-builder"`, "shape mismatch in layer 3"}, false},
		{"bad-reshape", func(in []*graph.Node) []*graph.Node {
			return []*graph.Node{graph.Reshape(in[0], 3, 5)}
		}, []Arg{{T: x}}, []string{`program "bad-reshape"`}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, err := NewProgram(be, tc.name, tc.fn)
			if err == nil {
				defer p.Finalize()
				_, err = p.Call(tc.args...)
			}
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
			// Precompile reports it the same way, unless only running can.
			if p2, err := NewProgram(be, tc.name, tc.fn); err == nil && !tc.atRun {
				if _, err := p2.Precompile(tc.args...); err == nil {
					t.Error("Precompile: no error")
				}
				p2.Finalize()
			}
		})
	}
	// The backend still works.
	p, err := NewProgram(be, "ok", func(in []*graph.Node) []*graph.Node { return []*graph.Node{graph.Neg(in[0])} })
	if err != nil {
		t.Fatal(err)
	}
	defer p.Finalize()
	out, err := p.Call(Arg{T: tensors.FromValue([]float32{1, 2})})
	if err != nil {
		t.Fatal(err)
	}
	if got := out[0].Value().([]float32); got[0] != -1 || got[1] != -2 {
		t.Fatalf("got %v", got)
	}
}

// TestNewRunnerRefusesDTypesUpFront: a compute dtype the backend or tputool
// lacks is refused (errs.ErrUnsupported, exit 3) before any weight is
// converted or a graph is built.
func TestNewRunnerRefusesDTypesUpFront(t *testing.T) {
	be := cpuDevice(t)
	l, err := lmckpt.Load("../testdata/stories260K-hf")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for _, dt := range []dtypes.DType{dtypes.Float16, dtypes.Float64, dtypes.Int8} {
		_, err := NewRunner(be, l, Options{DType: dt})
		if !errors.Is(err, errs.ErrUnsupported) || !strings.Contains(err.Error(), dt.String()) {
			t.Errorf("%s: got %v", dt, err)
		}
	}
}

func shapesF16(n int) shapes.Shape { return shapes.Make(dtypes.Float16, n) }
