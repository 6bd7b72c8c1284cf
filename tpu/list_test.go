package tpu

import (
	"encoding/json"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestListFakeTPUVM(t *testing.T) {
	f := newFakeEnv(t)
	tpuLib := f.touch(f.home(".local/lib/python3.11/site-packages/libtpu/libtpu.so"))
	cuda := f.touch(f.sys("/usr/local/lib/go-xla/pjrt_c_api_cuda_plugin.so"))
	cpu := f.touch(f.home(".local/lib/go-xla/pjrt_c_api_cpu_plugin.so"))
	f.touch(f.sys("/dev/accel0"))
	writeFile(t, f.sys("/proc/meminfo"), "MemTotal:       16384 kB\nMemFree:         1024 kB\n")
	f.Vars[EnvAcceleratorType] = "v6e-8"

	inv := List(f.Env())
	assert.Equal(t, []BackendInfo{{Name: "go", Available: true}, {Name: "cpu", Available: true, Note: "device cpu:fast"}, {Name: "xla", Available: XLACompiled(), Note: map[bool]string{false: noCgoMessage}[XLACompiled()]}}, inv.Backends)

	require.NotNil(t, inv.Topology)
	assert.Equal(t, "v6e", inv.Topology.Generation)

	byName := map[string]DeviceInfo{}
	for _, d := range inv.Devices {
		byName[d.Name] = d
	}
	assert.Equal(t, DeviceInfo{Name: "cpu", Kind: KindCPU, Backend: DefaultCPUBackend, Usable: true, Cores: runtime.NumCPU(), MemoryBytes: 16 << 20}, byName["cpu"])

	tpu := byName["tpu"]
	assert.Equal(t, tpuLib, tpu.PluginPath)
	assert.Equal(t, XLACompiled(), tpu.Usable)
	assert.Equal(t, "v6e", tpu.Generation)
	assert.Equal(t, 8, tpu.Chips)
	assert.Equal(t, int64(32<<30), tpu.HBMBytesPerChip)

	gpu := byName["gpu"]
	assert.Equal(t, cuda, gpu.PluginPath)
	assert.False(t, gpu.Usable)
	if XLACompiled() {
		assert.Contains(t, gpu.Note, "no NVIDIA device")
	}

	xcpu := byName["xla:cpu"]
	assert.Equal(t, cpu, xcpu.PluginPath)
	assert.Equal(t, KindCPU, xcpu.Kind)
	assert.Equal(t, XLACompiled(), xcpu.Usable)

	if XLACompiled() {
		assert.Equal(t, "tpu", inv.Auto)
	} else {
		assert.Equal(t, "cpu", inv.Auto)
	}
	require.Len(t, inv.Plugins, 3)
	require.Len(t, inv.Searches, 3)

	b, err := json.Marshal(inv)
	require.NoError(t, err)
	assert.Contains(t, string(b), `"accelerator_type":"v6e-8"`)
}

func TestListBareMachine(t *testing.T) {
	f := newFakeEnv(t)
	inv := List(f.Env())
	assert.Equal(t, "cpu", inv.Auto)
	assert.Nil(t, inv.Topology)
	require.Len(t, inv.Devices, 1)
	assert.Equal(t, "cpu", inv.Devices[0].Name)
	assert.Zero(t, inv.Devices[0].MemoryBytes, "no /proc/meminfo in the fake root")
	b, err := json.Marshal(inv)
	require.NoError(t, err)
	assert.Contains(t, string(b), `"plugins":[]`)
}

func TestListHardwareWithoutPlugins(t *testing.T) {
	f := newFakeEnv(t)
	f.touch(f.sys("/dev/vfio/0"))
	f.touch(f.sys("/dev/nvidia0"))
	f.Vars[EnvAcceleratorType] = "v6e-oops"
	inv := List(f.Env())
	byName := map[string]DeviceInfo{}
	for _, d := range inv.Devices {
		byName[d.Name] = d
	}
	assert.False(t, byName["tpu"].Usable)
	assert.Contains(t, byName["tpu"].Note, "pip install libtpu")
	assert.False(t, byName["gpu"].Usable)
	assert.Contains(t, byName["gpu"].Note, `pip install "jax[cuda12]"`)
	require.NotEmpty(t, inv.Notes)
	assert.Contains(t, inv.Notes[0], "$TPU_ACCELERATOR_TYPE")
}
