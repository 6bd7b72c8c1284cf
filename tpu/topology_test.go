package tpu

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tputool/tputool/internal/errs"
)

func TestParseAcceleratorType(t *testing.T) {
	for _, tc := range []struct {
		in    string
		gen   string
		chips int
	}{
		{"v6e-8", "v6e", 8},
		{"v6e-1", "v6e", 1},
		{"V6E-256", "v6e", 256},
		{"v5litepod-4", "v5e", 4},
		{"v5litepod-16", "v5e", 16},
		{"v4-8", "v4", 4},
		{"v4-16", "v4", 8}, // the suffix counts TensorCores on v4
		{"v5p-8", "v5p", 4},
		{"v5p-128", "v5p", 64},
		{"tpu7x-2", "v7x", 1},
		{"tpu7x-8", "v7x", 4},
		{"tpu7x-128", "v7x", 64},
	} {
		chip, chips, err := ParseAcceleratorType(tc.in)
		require.NoError(t, err, tc.in)
		assert.Equal(t, tc.gen, chip.Generation, tc.in)
		assert.Equal(t, tc.chips, chips, tc.in)
	}
}

func TestParseAcceleratorTypeErrors(t *testing.T) {
	for _, tc := range []struct {
		in, msg  string
		sentinel error
	}{
		{"v6e", "want GENERATION-COUNT", errs.ErrUsage},
		{"v6e-", "want GENERATION-COUNT", errs.ErrUsage},
		{"8-v6e", "want GENERATION-COUNT", errs.ErrUsage},
		{"v6e-0", "must be a positive integer", errs.ErrUsage},
		{"v4-7", "must be a multiple of 2", errs.ErrUsage},
		{"v9z-8", `unknown TPU generation "v9z"`, errs.ErrUnsupported},
		{"v3-8", `unknown TPU generation "v3"`, errs.ErrUnsupported},
	} {
		_, _, err := ParseAcceleratorType(tc.in)
		require.Error(t, err, tc.in)
		assert.ErrorIs(t, err, tc.sentinel, tc.in)
		assert.Contains(t, err.Error(), tc.msg, tc.in)
		assert.Contains(t, err.Error(), tc.in, tc.in)
	}
}

func topoFrom(t *testing.T, vars map[string]string) (*Topology, error) {
	t.Helper()
	return TopologyFromEnv(Env{LookupEnv: MapEnv(vars)})
}

func TestTopologyFromEnv(t *testing.T) {
	topo, err := topoFrom(t, nil)
	require.NoError(t, err)
	assert.Nil(t, topo, "no TPU_ACCELERATOR_TYPE: not a TPU VM")

	for _, tc := range []struct {
		name string
		vars map[string]string
		want Topology
	}{
		{"v6e-8 single host", map[string]string{EnvAcceleratorType: "v6e-8"},
			Topology{AcceleratorType: "v6e-8", Generation: "v6e", Chips: 8, TensorCores: 8, Hosts: 1, ChipsPerHost: 8, WorkerID: 0}},
		{"v5litepod-4 with GKE variables", map[string]string{
			EnvAcceleratorType: "v5litepod-4", EnvTopology: "2x2", EnvHostBounds: "1,1,1",
			EnvChipsPerHostBounds: "2,2,1", EnvWorkerID: "0", EnvWorkerHostnames: "localhost"},
			Topology{AcceleratorType: "v5litepod-4", Generation: "v5e", Chips: 4, TensorCores: 4, Hosts: 1, ChipsPerHost: 4,
				WorkerID: 0, WorkerHostnames: []string{"localhost"}, Shape: "2x2"}},
		{"v4-16 on two hosts", map[string]string{
			EnvAcceleratorType: "v4-16", EnvWorkerID: "1", EnvWorkerHostnames: "t1k-w-0, t1k-w-1"},
			Topology{AcceleratorType: "v4-16", Generation: "v4", Chips: 8, TensorCores: 16, Hosts: 2, ChipsPerHost: 4,
				WorkerID: 1, WorkerHostnames: []string{"t1k-w-0", "t1k-w-1"}}},
		{"v5litepod-8 as two 4-chip hosts", map[string]string{
			EnvAcceleratorType: "v5litepod-8", EnvTopology: "2x4", EnvHostBounds: "1,2,1", EnvChipsPerHostBounds: "2,2,1"},
			Topology{AcceleratorType: "v5litepod-8", Generation: "v5e", Chips: 8, TensorCores: 8, Hosts: 2, ChipsPerHost: 4,
				WorkerID: -1, Shape: "2x4"}},
		{"v6e-16 defaults to 4-chip hosts", map[string]string{EnvAcceleratorType: "v6e-16"},
			Topology{AcceleratorType: "v6e-16", Generation: "v6e", Chips: 16, TensorCores: 16, Hosts: 4, ChipsPerHost: 4, WorkerID: -1}},
		{"tpu7x-8", map[string]string{EnvAcceleratorType: "tpu7x-8", EnvTopology: "2x2x1"},
			Topology{AcceleratorType: "tpu7x-8", Generation: "v7x", Chips: 4, TensorCores: 8, Hosts: 1, ChipsPerHost: 4,
				WorkerID: 0, Shape: "2x2x1"}},
		{"v5p-128", map[string]string{EnvAcceleratorType: "v5p-128", EnvHostBounds: "2,2,4", EnvWorkerID: "15"},
			Topology{AcceleratorType: "v5p-128", Generation: "v5p", Chips: 64, TensorCores: 128, Hosts: 16, ChipsPerHost: 4, WorkerID: 15}},
	} {
		got, err := topoFrom(t, tc.vars)
		require.NoError(t, err, tc.name)
		require.NotNil(t, got, tc.name)
		assert.Equal(t, tc.want, *got, tc.name)
		assert.Equal(t, tc.want.Hosts > 1, got.MultiHost(), tc.name)
	}
}

func TestTopologyFromEnvErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		vars map[string]string
		msg  string
	}{
		{"bad type", map[string]string{EnvAcceleratorType: "v6e_8"}, "$TPU_ACCELERATOR_TYPE"},
		{"shape mismatch", map[string]string{EnvAcceleratorType: "v6e-8", EnvTopology: "2x2"}, `$TPU_TOPOLOGY="2x2" is 4 chips but $TPU_ACCELERATOR_TYPE="v6e-8" is 8 chips`},
		{"bad shape", map[string]string{EnvAcceleratorType: "v6e-8", EnvTopology: "2xfour"}, "$TPU_TOPOLOGY"},
		{"bad host bounds", map[string]string{EnvAcceleratorType: "v4-16", EnvHostBounds: "1,x"}, "$TPU_HOST_BOUNDS"},
		{"bad worker id", map[string]string{EnvAcceleratorType: "v6e-8", EnvWorkerID: "first"}, `$TPU_WORKER_ID="first"`},
		{"worker out of range", map[string]string{EnvAcceleratorType: "v6e-8", EnvWorkerID: "1"}, "$TPU_WORKER_ID=1 is out of range for a slice of 1 host(s)"},
		{"hosts do not add up", map[string]string{EnvAcceleratorType: "v6e-8", EnvWorkerHostnames: "a,b,c"}, "describes 3 host(s)"},
	} {
		_, err := topoFrom(t, tc.vars)
		require.Error(t, err, tc.name)
		assert.ErrorIs(t, err, errs.ErrUsage, tc.name)
		assert.Contains(t, err.Error(), tc.msg, tc.name)
	}
	_, err := topoFrom(t, map[string]string{EnvAcceleratorType: "v2-8"})
	assert.ErrorIs(t, err, errs.ErrUnsupported)
}
