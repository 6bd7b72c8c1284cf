package compile

import (
	"testing"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/stretchr/testify/require"
)

// TestGraphExecutorCaches: one program per key, one executable per key and
// input shapes; hits, misses and compile time are counted per key and in
// total, Precompile compiles without running, a key that ran before warns
// when new shapes make it compile again, and Finalize empties the cache.
func TestGraphExecutorCaches(t *testing.T) {
	var recompiled []string
	x := NewGraphExecutor(goBackend(t), ExecutorOptions{OnRecompile: func(program, _ string) {
		recompiled = append(recompiled, program)
	}})
	defer x.Finalize()
	built := map[string]int{}
	scale := func(key string, k float64) func([]*graph.Node) []*graph.Node {
		return func(in []*graph.Node) []*graph.Node {
			built[key]++
			return []*graph.Node{graph.MulScalar(in[0], k)}
		}
	}
	v3 := tensors.FromFlatDataAndDimensions([]float32{1, 2, 3}, 3)
	v2 := tensors.FromFlatDataAndDimensions([]float32{1, 2}, 2)
	call := func(key string, k float64, v *tensors.Tensor) []float32 {
		t.Helper()
		out, err := x.Call(key, scale(key, k), []*tensors.Tensor{v})
		require.NoError(t, err)
		return tensors.MustCopyFlatData[float32](out[0])
	}

	// Precompile builds the executable once; the next call is a hit.
	compiled, err := x.Precompile("double", scale("double", 2), []*tensors.Tensor{v3})
	require.NoError(t, err)
	require.True(t, compiled)
	compiled, err = x.Precompile("double", scale("double", 2), []*tensors.Tensor{v3})
	require.NoError(t, err)
	require.False(t, compiled)
	require.Equal(t, []float32{2, 4, 6}, call("double", 2, v3))
	require.Equal(t, 1, built["double"], "graph built once for one shape")

	// Another key is another program; same shapes, no warning.
	require.Equal(t, []float32{3, 6, 9}, call("triple", 3, v3))
	require.Equal(t, []float32{3, 6, 9}, call("triple", 3, v3))
	require.Empty(t, recompiled)

	// New shapes for a key that ran: compiled again, with a warning.
	require.Equal(t, []float32{2, 4}, call("double", 2, v2))
	require.Equal(t, []string{"double"}, recompiled)
	require.Equal(t, 2, built["double"])

	s := x.Stats()
	require.Len(t, s.Programs, 2)
	d, tr := s.Programs[0], s.Programs[1]
	require.Equal(t, "double", d.Name, "programs in first-use order")
	require.Equal(t, ProgramStats{Name: "double", Calls: 4, Hits: 2, Misses: 2, Compile: d.Compile, Run: d.Run}, d)
	require.Equal(t, ProgramStats{Name: "triple", Calls: 2, Hits: 1, Misses: 1, Compile: tr.Compile, Run: tr.Run}, tr)
	require.Positive(t, d.Compile)
	require.Positive(t, d.Run)
	require.Equal(t, 3, s.Executables)
	require.Equal(t, d.Compile+tr.Compile, s.Compile)
	require.Equal(t, ProgramStats{Calls: 6, Hits: 3, Misses: 3, Compile: s.Compile, Run: d.Run + tr.Run}, s.Sum())
	n, took := x.CompileStats()
	require.Equal(t, 3, n)
	require.Equal(t, s.Compile, took)

	x.Finalize()
	require.Empty(t, x.Stats().Programs)
	require.Equal(t, []float32{2, 4, 6}, call("double", 2, v3), "usable after Finalize")
	require.Equal(t, 3, built["double"])
}
