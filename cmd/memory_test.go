package cmd

import (
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tputool/tputool/compile"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
	"github.com/tputool/tputool/pipeline/testkit/qwenref"
)

// TestStateFitsOverDevices: over several devices checkStateFits counts
// the layer state as the host builds it, a shard a device: the tiny
// Qwen3.5's recurrent state and, at --tp 4 (above its 2 KV heads), its KV
// caches are whole on each, so a host that holds one copy is refused,
// naming the devices.
func TestStateFitsOverDevices(t *testing.T) {
	c := qwenref.TinyQwen35()
	c.CausalLM = true
	_, l := lmckpt.WriteLoad(t, c.Write)
	f32, none := dtypes.Float32, dtypes.InvalidDType
	positions, one, ok := stateNeed(l.Model, 1, 20, 100, f32, none)
	require.True(t, ok)
	exactly := func(n int64) func() int64 { return func() int64 { return n } }
	require.NoError(t, checkStateFits(l.Model, 1, 20, 100, 1, 1, f32, none, exactly(one)))
	four, ok := compile.HostStateBytes(l.Model, 4, 1, 1, positions, f32, none)
	require.True(t, ok)
	assert.Equal(t, 4*one, four)
	err := checkStateFits(l.Model, 1, 20, 100, 4, 1, f32, none, exactly(one))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "built on the host for 4 devices")
	require.NoError(t, checkStateFits(l.Model, 1, 20, 100, 4, 1, f32, none, exactly(four)))
}
