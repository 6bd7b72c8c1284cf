package cmd

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tputool/tputool/internal/errs"
)

func TestHelpListsCommandsAndExitCodes(t *testing.T) {
	e := newTestFactory(t, nil)
	require.Equal(t, ExitOK, e.run("--help"))
	help := e.out.String()
	for _, c := range []string{"generate", "diffuse", "bench", "inspect", "devices", "version", "completion"} {
		assert.Contains(t, help, "\n  "+c+" ", c)
	}
	assert.Contains(t, help, "130  interrupted")
	assert.Contains(t, help, "--device string")
	assert.Empty(t, e.errOut.String())
}

func TestExitCodes(t *testing.T) {
	cases := []struct {
		err  error
		want ExitCode
	}{
		{nil, ExitOK},
		{fmt.Errorf("boom"), ExitError},
		{errs.Usagef("bad"), ExitUsage},
		{fmt.Errorf("load: %w", errs.Unsupportedf("arch X")), ExitUnsupported},
		{errs.Devicef("no libtpu"), ExitDevice},
		{fmt.Errorf("gated: %w", errs.ErrHub), ExitHub},
		{fmt.Errorf("--chat: %w", errs.Limitf("template %q: steps", "t")), ExitLimit},
		{fmt.Errorf("download: %w", context.Canceled), ExitInterrupted},
		{fmt.Errorf("%w: %w", errs.ErrInterrupted, fmt.Errorf("reset: %w", errs.ErrHub)), ExitInterrupted},
	}
	for _, c := range cases {
		assert.Equal(t, c.want, ExitCodeFor(c.err), "%v", c.err)
	}
}

func TestUsageErrors(t *testing.T) {
	e := newTestFactory(t, nil)
	assert.Equal(t, ExitUsage, e.run("version", "--bogus"))
	assert.Contains(t, e.errOut.String(), "error: unknown flag: --bogus")
	assert.Contains(t, e.errOut.String(), "for usage")

	e = newTestFactory(t, nil)
	assert.Equal(t, ExitUsage, e.run("version", "-q", "-v"))
	assert.Contains(t, e.errOut.String(), "--quiet and --verbose")

	e = newTestFactory(t, nil)
	assert.Equal(t, ExitUsage, e.run("version", "extra-arg"))
	assert.Empty(t, e.out.String())
}

func TestErrorAsJSON(t *testing.T) {
	e := newTestFactory(t, nil)
	code := e.run("--json", "version", "--bogus")
	assert.Equal(t, ExitUsage, code)
	var obj map[string]any
	require.NoError(t, json.Unmarshal(e.errOut.Bytes(), &obj), e.errOut.String())
	assert.Equal(t, map[string]any{"type": "error", "exit_code": 2.0, "message": "unknown flag: --bogus"}, obj)
	assert.Empty(t, e.out.String(), "stdout carries only results")
}

func TestInterruptedRunExits130(t *testing.T) {
	e := newTestFactory(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	assert.Equal(t, ExitInterrupted, Run(ctx, e.f, []string{"generate"}))
}

func TestEnvDefaults(t *testing.T) {
	e := newTestFactory(t, map[string]string{"TPUTOOL_DEVICE": "cpu", "HF_HUB_OFFLINE": "1"})
	require.Equal(t, ExitOK, e.run("version"))
	assert.Equal(t, "cpu", e.f.Global.DeviceSpec.String())
	assert.True(t, e.f.Global.Offline)

	e = newTestFactory(t, map[string]string{"TPUTOOL_DEVICE": "cpu", "HF_HUB_OFFLINE": "0"})
	require.Equal(t, ExitOK, e.run("--device", "tpu", "version"))
	assert.Equal(t, "tpu", e.f.Global.DeviceSpec.String(), "the flag wins over the environment")
	assert.False(t, e.f.Global.Offline)

	// huggingface_hub's true values only: "off" is not offline.
	e = newTestFactory(t, map[string]string{"HF_HUB_OFFLINE": "off"})
	require.Equal(t, ExitOK, e.run("version"))
	assert.False(t, e.f.Global.Offline)
}

func TestBadDeviceEnvIsNamed(t *testing.T) {
	e := newTestFactory(t, map[string]string{"TPUTOOL_DEVICE": "quantum"})
	assert.Equal(t, ExitUsage, e.run("version"))
	assert.Contains(t, e.errOut.String(), `$TPUTOOL_DEVICE "quantum"`)

	e = newTestFactory(t, map[string]string{"TPUTOOL_DEVICE": "quantum"})
	assert.Equal(t, ExitOK, e.run("--device", "cpu", "version"), "the flag wins over a bad variable")
}

// --cpuprofile writes a pprof CPU profile (gzip-compressed protobuf) of
// the command when it ends; a file that cannot be created is a usage
// error naming the flag.
func TestCPUProfile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cpu.prof")
	e := newTestFactory(t, nil)
	assert.Equal(t, ExitOK, e.run("--cpuprofile", path, "version"))
	b, err := os.ReadFile(path)
	if assert.NoError(t, err) && assert.Greater(t, len(b), 2) {
		assert.Equal(t, []byte{0x1f, 0x8b}, b[:2], "not a gzip-compressed profile")
	}

	e = newTestFactory(t, nil)
	assert.Equal(t, ExitUsage, e.run("--cpuprofile", filepath.Join(t.TempDir(), "no", "such", "dir", "p"), "version"))
	assert.Contains(t, e.errOut.String(), "--cpuprofile")
}

// TestGroupCommandRefusesUnknownSubcommand: a command that only groups
// others prints its help alone (exit 0), but a mistyped subcommand is a
// usage error, not the help with exit 0 that a script takes for success.
func TestGroupCommandRefusesUnknownSubcommand(t *testing.T) {
	for _, group := range []string{"cache", "completion"} {
		e := newTestFactory(t, nil)
		assert.Equal(t, ExitUsage, e.run(group, "lst"), group)
		assert.Contains(t, e.errOut.String(), `unknown command "lst" for "tputool `+group+`"`)
		assert.Empty(t, e.out.String())

		e = newTestFactory(t, nil)
		require.Equal(t, ExitOK, e.run(group), e.errOut.String())
		assert.Contains(t, e.out.String(), "Available Commands:")
	}
	e := newTestFactory(t, nil)
	require.Equal(t, ExitOK, e.run("completion", "bash"), e.errOut.String())
	assert.NotEmpty(t, e.out.String())
}
