package cmd

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tputool/tputool/compile"
	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/loader/hub"
	"github.com/tputool/tputool/tpu"
)

// TestRestateOptions: compile's option errors come back naming the flags
// that set the fields, wherever they sit in the message, keeping their
// kind (exit code); other errors pass unchanged.
func TestRestateOptions(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
		kind error
	}{
		{fmt.Errorf("batch: %w", &compile.OptionError{Option: "MaxContext", Value: 9000, Want: "2 to the model's 512 positions"}),
			"batch: --max-context 9000: want 2 to the model's 512 positions", errs.ErrUsage},
		{fmt.Errorf("load: %w", &compile.OptionError{Option: "Quantize", Value: "int8", Kind: errs.ErrUnsupported,
			Reason: "not supported with {TP}/{DP} (weights are split on the host as floats)"}),
			"load: --quantize int8: not supported with --tp/--dp (weights are split on the host as floats)", errs.ErrUnsupported},
		{&compile.OptionError{Option: "TP", Value: 8, Kind: errs.ErrDeviceUnavailable, Reason: "{TP} 8 needs 8 devices"},
			"--tp 8: --tp 8 needs 8 devices", errs.ErrDeviceUnavailable},
		{&compile.OptionError{Option: "Unknown", Value: 1, Want: "2"}, "Unknown 1: want 2", errs.ErrUsage},
	} {
		got := restateOptions(c.err)
		assert.Equal(t, c.want, got.Error())
		assert.True(t, errors.Is(got, c.kind), "%v: want kind %v", got, c.kind)
		assert.Equal(t, ExitCodeFor(c.err), ExitCodeFor(got), "%v", got)
	}
	other := errors.New("engine failed")
	assert.Same(t, other, restateOptions(other))
	require.NoError(t, restateOptions(nil))
	// Without cmd, the fields are named as Go names them.
	assert.Equal(t, "Options.Quantize int8: not supported with Options.TP/Options.DP", (&compile.OptionError{Owner: "Options", Option: "Quantize", Value: "int8", Reason: "not supported with {TP}/{DP}"}).Error())
	assert.Equal(t, "BatchOptions.MaxBatch 0: want 1 or more", (&compile.OptionError{Owner: "BatchOptions", Option: "MaxBatch", Value: 0, Want: "1 or more"}).Error())
}

// TestRestateHubAndDevice: the hub and tpu packages name their own fields
// and the device spec, never a flag; cmd restates them with its flags,
// keeping the kind (exit code).
func TestRestateHubAndDevice(t *testing.T) {
	offline := &hub.Client{Cache: hub.Cache{Dir: t.TempDir()}, Offline: true}
	_, err := offline.ListFiles(context.Background(), "org/model", "main")
	require.ErrorIs(t, err, errs.ErrHub)
	assert.NotContains(t, err.Error(), "--", "below cmd")
	assert.Contains(t, restateHub(err).Error(), "(HF_HUB_OFFLINE or --offline)")
	assert.Equal(t, ExitHub, ExitCodeFor(restateHub(err)))

	down := &hub.Client{Endpoint: "http://127.0.0.1:1", Cache: hub.Cache{Dir: t.TempDir()}, Retries: 1,
		Backoff: func(int) time.Duration { return 0 }, Sleep: func(context.Context, time.Duration) error { return nil }}
	_, err = down.ListFiles(context.Background(), "org/model", "main")
	require.ErrorIs(t, err, errs.ErrHub)
	assert.NotContains(t, err.Error(), "--")
	assert.Contains(t, restateHub(err).Error(), "(--offline, or HF_HUB_OFFLINE=1) for a model in the cache, or give a local path to --model")

	full := &hub.Error{Kind: hub.ErrNoSpace, Repo: "org/m", Detail: "free some space, or point HF_HUB_CACHE at a bigger disk."}
	assert.Contains(t, restateHub(full).Error(), "point --cache-dir or HF_HUB_CACHE at a bigger disk")

	_, err = tpu.ParseSpec("quantum")
	assert.Equal(t, `device "quantum": `, err.Error()[:len(`device "quantum": `)])
	assert.True(t, strings.HasPrefix(restateDevice(err, false).Error(), `--device "quantum": `))
	assert.True(t, strings.HasPrefix(restateDevice(err, true).Error(), `$TPUTOOL_DEVICE "quantum": `))
	assert.Equal(t, ExitUsage, ExitCodeFor(restateDevice(err, false)))
	assert.Nil(t, restateHub(nil))
	plain := errors.New("x")
	assert.Equal(t, plain, restateDevice(plain, false))
}
