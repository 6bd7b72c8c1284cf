package compile

import (
	"testing"

	"github.com/gomlx/gomlx/backends"
	_ "github.com/gomlx/gomlx/backends/simplego"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/stretchr/testify/require"
)

func TestProgramPrecompile(t *testing.T) {
	b, err := backends.NewWithConfig("go:ops_sequential")
	require.NoError(t, err)
	defer b.Finalize()
	p, err := NewProgram(b, "double", func(in []*graph.Node) []*graph.Node {
		return []*graph.Node{graph.MulScalar(in[0], 2)}
	})
	require.NoError(t, err)
	defer p.Finalize()
	var recompiled []string
	p.OnRecompile = func(_, shapes string) { recompiled = append(recompiled, shapes) }

	x := tensors.FromFlatDataAndDimensions([]float32{1, 2, 3}, 3)
	compiled, err := p.Precompile(Arg{T: x})
	require.NoError(t, err)
	require.True(t, compiled)
	compiled, err = p.Precompile(Arg{T: x})
	require.NoError(t, err)
	require.False(t, compiled)
	out, err := p.Call(Arg{T: x})
	require.NoError(t, err)
	require.Equal(t, []float32{2, 4, 6}, tensors.MustCopyFlatData[float32](out[0]))
	s := p.Stats()
	require.Equal(t, 3, s.Calls)
	require.Equal(t, 1, s.Misses)
	require.Equal(t, 2, s.Hits)
	require.Positive(t, s.Compile)
	require.Empty(t, recompiled)

	compiled, err = p.Precompile(Arg{T: tensors.FromFlatDataAndDimensions([]float32{1, 2}, 2)})
	require.NoError(t, err)
	require.True(t, compiled)
	require.Len(t, recompiled, 1, "new shapes after the first call warn")
}
