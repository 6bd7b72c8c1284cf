package cmd

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tputool/tputool/tpu"
)

// withFakeMachine points device discovery at an empty fake root with a
// /proc/meminfo, so the test sees a CPU-only machine whatever this host has.
func withFakeMachine(t *testing.T, e *testEnv, env map[string]string) {
	root := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(root, "proc"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(root, "proc/meminfo"), []byte("MemTotal:       16384 kB\n"), 0o644))
	e.f.DeviceEnv = func() tpu.Env {
		return tpu.Env{Root: root, Home: filepath.Join(root, "home"),
			LookupEnv: func(k string) (string, bool) { v, ok := env[k]; return v, ok }}
	}
}

func TestDevicesTable(t *testing.T) {
	for _, tty := range []bool{false, true} {
		e := newTestFactory(t, nil)
		withFakeMachine(t, e, nil)
		e.f.IOStreams.SetStdoutTTY(tty)
		require.Equal(t, ExitOK, e.run("devices"), e.errOut.String())
		out := e.out.String()
		assert.Contains(t, out, "DEVICE")
		assert.Contains(t, out, "16.0 MiB")
		assert.Contains(t, out, "--device auto picks: cpu")
		assert.NotContains(t, out, "\x1b[", "no ANSI codes in the table")
		if tty {
			assert.Contains(t, out, "│ cpu")
		} else {
			assert.Contains(t, out, "| cpu")
		}
		assert.Empty(t, e.errOut.String())
	}
}

func TestDevicesJSON(t *testing.T) {
	e := newTestFactory(t, nil)
	withFakeMachine(t, e, map[string]string{"TPU_ACCELERATOR_TYPE": "v6e-8", "TPU_WORKER_ID": "0"})
	require.Equal(t, ExitOK, e.run("devices", "--json"))
	var got struct {
		Backends []struct{ Name string }
		Devices  []struct {
			Name, Kind, Backend string
			Usable              bool
			Note                string
		}
		Auto      string
		Topology  *struct{ Generation string }
		Searches  []struct{ Target string }
		HugePages string `json:"huge_pages"`
	}
	require.NoError(t, json.Unmarshal(e.out.Bytes(), &got), e.out.String())
	assert.Contains(t, []string{"madvise", "always", "never", "off", "unsupported", "unknown"}, got.HugePages)
	assert.Equal(t, "cpu", got.Devices[0].Name)
	assert.True(t, got.Devices[0].Usable)
	assert.Equal(t, "cpu", got.Auto)
	require.NotNil(t, got.Topology)
	assert.Equal(t, "v6e", got.Topology.Generation)
	// TPU hardware advertised by the environment but no libtpu: listed, unusable, with the fix.
	require.Len(t, got.Devices, 2)
	assert.Equal(t, "tpu", got.Devices[1].Name)
	assert.False(t, got.Devices[1].Usable)
	assert.Contains(t, got.Devices[1].Note, "pip install libtpu")
	assert.Equal(t, "tpu", got.Searches[0].Target)
}

func TestDevicesMissingTPUExits4(t *testing.T) {
	e := newTestFactory(t, nil)
	withFakeMachine(t, e, nil)
	assert.Equal(t, ExitDevice, e.run("--device", "tpu", "devices"))
	msg := e.errOut.String()
	assert.Contains(t, msg, "error: --device tpu: no TPU runtime (libtpu.so) found. Searched, in order:")
	assert.Contains(t, msg, "$TPU_LIBRARY_PATH (not set)")
	assert.Contains(t, msg, "pip install libtpu")
	assert.Contains(t, msg, "export TPU_LIBRARY_PATH=")
	assert.Empty(t, e.out.String())

	// The environment variable selects the device too, and --json makes the error an object.
	e = newTestFactory(t, map[string]string{"TPUTOOL_DEVICE": "tpu"})
	withFakeMachine(t, e, nil)
	assert.Equal(t, ExitDevice, e.run("devices", "--json"))
	var obj map[string]any
	require.NoError(t, json.Unmarshal(e.errOut.Bytes(), &obj))
	assert.Equal(t, 4.0, obj["exit_code"])
}

func TestDevicesCPUSelected(t *testing.T) {
	e := newTestFactory(t, nil)
	withFakeMachine(t, e, nil)
	require.Equal(t, ExitOK, e.run("--device", "cpu", "devices"))
	assert.Contains(t, e.out.String(), "Selected: cpu ("+tpu.DefaultCPUBackend+", 1 device)")
}

func TestDevicesBadSpecIsUsage(t *testing.T) {
	e := newTestFactory(t, nil)
	withFakeMachine(t, e, nil)
	assert.Equal(t, ExitUsage, e.run("--device", "quantum", "devices"))
}
