package cmd

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tputool/tputool/compile"
	"github.com/tputool/tputool/internal/errs"
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
