package blocks

import (
	"math"
	"testing"

	_ "github.com/gomlx/gomlx/backends/simplego"
	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/stretchr/testify/require"

	"github.com/tputool/tputool/pipeline/testkit/refcheck"
)

func TestTimestepSinusoid(t *testing.T) {
	backend := refcheck.GoBackend(t)
	for _, flip := range []bool{false, true} {
		out, err := ExecOnce(backend, func(t *Node) *Node { return TimestepSinusoid(t, 6, flip, 1) },
			tensors.FromFlatDataAndDimensions([]float32{0, 500}, 2))
		require.NoError(t, err)
		got := tensors.MustCopyFlatData[float32](out)
		for n, ts := range []float64{0, 500} {
			for i := 0; i < 3; i++ {
				f := math.Exp(-math.Log(10000) * float64(i) / (3 - 1))
				s, c := math.Sin(ts*f), math.Cos(ts*f)
				if flip {
					s, c = c, s
				}
				require.InDelta(t, s, got[n*6+i], 1e-4)
				require.InDelta(t, c, got[n*6+3+i], 1e-4)
			}
		}
	}
}

// mapSource is an in-memory Source.
type mapSource map[string][]int

func (m mapSource) Names() []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
func (m mapSource) Shape(name string) ([]int, bool) { s, ok := m[name]; return s, ok }
func (m mapSource) Float32(name string) ([]float32, error) {
	n := 1
	for _, d := range m[name] {
		n *= d
	}
	return make([]float32, n), nil
}

func TestLoaderStrictness(t *testing.T) {
	src := mapSource{"a.weight": {4, 3}, "a.bias": {4}, "attn.query.weight": {8, 8, 1, 1}, "buffer": {1, 7}}
	l := NewLoader("test", src)
	NewLinear(l, "a", 3, 4, true)
	l.Alias("attn.to_q.weight", "attn.query.weight")
	l.Take("attn.to_q.weight", 8, 8) // stored as a 1x1 convolution under its old name
	l.Ignore("buffer", 1, 7)
	w, err := l.Finish(nil)
	require.NoError(t, err)
	require.Len(t, w.Tensors, 3)
	require.Equal(t, int64(12+4+64), w.NumParameters())

	l = NewLoader("test", src)
	NewLinear(l, "a", 3, 5, true)
	l.Take("missing", 2)
	_, err = l.Finish(nil)
	require.Error(t, err)
	for _, want := range []string{`tensor "a.weight" has shape [4 3], want [5 3]`, `tensor "a.bias" has shape [4], want [5]`,
		`missing tensor "missing"`, `unused tensor "attn.query.weight"`, `unused tensor "buffer"`} {
		require.ErrorContains(t, err, want)
	}
}
