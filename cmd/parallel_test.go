package cmd

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tputool/tputool/tpu"
)

func TestParallelFlagsUsage(t *testing.T) {
	for _, args := range [][]string{
		{"generate", "-m", storiesDir, "-p", "a", "--tp", "0"},
		{"generate", "-m", storiesDir, "-p", "a", "--dp", "-1"},
		{"bench", "-m", storiesDir, "--tp", "0"},
		{"bench", "--compare", "a.json", "b.json", "--tp", "2"},
	} {
		e := genEnv(t)
		assert.Equal(t, ExitUsage, e.run(args...), "%v: %s", args, e.errOut.String())
	}
}

// TestGenerateTPNeedsDevices: --tp 2 on the one-device go backend is exit
// 4, named, before any weight is loaded.
func TestGenerateTPNeedsDevices(t *testing.T) {
	e := genEnv(t)
	require.Equal(t, ExitDevice, e.run("--device", "cpu", "generate", "-m", storiesDir, "-p", "Once", "--tp", "2"), e.errOut.String())
	assert.Contains(t, e.errOut.String(), "--tp 2: needs 2 devices, but the "+tpu.DefaultCPUBackend+" backend has 1")
	assert.Empty(t, e.out.String())

	e = genEnv(t)
	require.Equal(t, ExitDevice, e.run("--device", "cpu", "generate", "-m", storiesDir, "-p", "Once", "--dp", "2"), e.errOut.String())
	assert.Contains(t, e.errOut.String(), "--dp 2: needs 2 devices")

	// --tp 1 is the default single-device run.
	e = genEnv(t)
	require.Equal(t, ExitOK, e.run("--device", "cpu", "generate", "-m", storiesDir, "-p", "Once upon a time", "-n", "4", "--tp", "1", "--temperature", "0"), e.errOut.String())
	assert.Equal(t, ", there was a\n", e.out.String())
}

func TestBenchTPNeedsDevices(t *testing.T) {
	e := genEnv(t)
	code := e.run("--device", "cpu", "bench", "-m", storiesDir, "--tp", "4", "--batch", "1", "--prompt-len", "8", "--gen-len", "2", "--repeat", "1", "--warmup", "0")
	require.Equal(t, ExitDevice, code, e.errOut.String())
	assert.Contains(t, e.errOut.String(), "--tp 4: needs 4 devices")
}

// TestPluginFailuresExit4: a plugin path that does not exist, a directory,
// and a file that is not a shared library are all exit 4 with the path.
func TestPluginFailuresExit4(t *testing.T) {
	dir := t.TempDir()
	garbage := filepath.Join(dir, "xla_cuda_plugin.so")
	require.NoError(t, os.WriteFile(garbage, []byte("this is not an ELF file\n"), 0o644))
	cases := map[string]string{
		filepath.Join(dir, "missing.so"): "no such file",
		dir:                              "is a directory",
	}
	if tpu.XLACompiled() {
		cases[garbage] = "could not be loaded"
	} else {
		cases[garbage] = "built without cgo"
	}
	for plugin, want := range cases {
		for _, args := range [][]string{
			{"--device", "xla:" + plugin, "generate", "-m", storiesDir, "-p", "a"},
			{"--device", "xla:" + plugin, "bench", "-m", storiesDir},
			{"--device", "xla:" + plugin, "devices"},
		} {
			e := genEnv(t)
			require.Equal(t, ExitDevice, e.run(args...), "%v: %s", args, e.errOut.String())
			msg := e.errOut.String()
			assert.Contains(t, msg, plugin, args)
			assert.True(t, strings.Contains(strings.ToLower(msg), want), "%v: %q lacks %q", args, msg, want)
		}
	}
}
