package tpu

import (
	"os"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRealDevice opens a real device from the process environment and runs
// small graphs on it. It is skipped unless TPUTOOL_TEST_DEVICE names a spec,
// e.g. on a TPU VM:
//
//	TPUTOOL_TEST_DEVICE=tpu go test ./tpu -run TestRealDevice -v
func TestRealDevice(t *testing.T) {
	specStr := os.Getenv("TPUTOOL_TEST_DEVICE")
	if specStr == "" {
		t.Skip("set TPUTOOL_TEST_DEVICE=tpu|gpu|xla:PLUGIN|cpu to run on a real device")
	}
	spec, err := ParseSpec(specStr)
	require.NoError(t, err)
	d, err := OpenEnv(spec, OSEnv())
	require.NoError(t, err)
	defer d.Close()
	t.Logf("device: %s", d)
	t.Logf("platform %q, %d devices, compute dtype %s, capabilities %+v", d.Platform, d.NumDevices, d.ComputeDTypeName, d.Capabilities)
	t.Logf("description: %s", d.Description)
	for _, desc := range d.DeviceDescriptions {
		t.Logf("  %s", desc)
	}
	if d.Topology != nil {
		t.Logf("topology: %+v", *d.Topology)
	}
	for _, n := range d.Notes {
		t.Logf("note: %s", n)
	}

	// x*x + 1 computed in the preferred compute dtype, read back as float32.
	out, err := graph.ExecOnce(d.Backend, func(x *graph.Node) *graph.Node {
		xc := graph.ConvertDType(x, d.ComputeDType)
		y := graph.Add(graph.Mul(xc, xc), graph.ConvertDType(graph.Const(x.Graph(), float32(1)), d.ComputeDType))
		return graph.ConvertDType(y, dtypes.Float32)
	}, []float32{1, 2, 3})
	require.NoError(t, err)
	assert.Equal(t, []float32{2, 5, 10}, out.Value())

	// KV-cache style in-place update, where the backend has it.
	if d.Capabilities.DynamicUpdateSlice {
		out, err = graph.ExecOnce(d.Backend, func(cache, update *graph.Node) *graph.Node {
			pos := graph.Const(cache.Graph(), int32(2))
			return graph.DynamicUpdateSlice(cache, update, []*graph.Node{pos})
		}, []float32{0, 0, 0, 0, 0}, []float32{7, 8})
		require.NoError(t, err)
		assert.Equal(t, []float32{0, 0, 7, 8, 0}, out.Value())
	}
}
