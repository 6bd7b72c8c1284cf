package errs

import (
	"errors"
	"io/fs"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestWrapfKeepsSentinelAndCause(t *testing.T) {
	err := Devicef("open %q: %w", "libtpu.so", fs.ErrNotExist)
	assert.Equal(t, `open "libtpu.so": file does not exist`, err.Error())
	assert.ErrorIs(t, err, ErrDeviceUnavailable)
	assert.ErrorIs(t, err, fs.ErrNotExist)
	assert.NotErrorIs(t, err, ErrUsage)

	multi := Unsupportedf("a %w b %w", fs.ErrPermission, fs.ErrClosed)
	assert.ErrorIs(t, multi, ErrUnsupported)
	assert.ErrorIs(t, multi, fs.ErrPermission)
	assert.ErrorIs(t, multi, fs.ErrClosed)

	plain := Usagef("flag --steps: want > 0, got %d", -1)
	assert.Equal(t, "flag --steps: want > 0, got -1", plain.Error())
	assert.True(t, errors.Is(plain, ErrUsage))
	assert.Equal(t, []error{ErrUsage}, plain.(interface{ Unwrap() []error }).Unwrap())
	assert.ErrorIs(t, Devicef("x"), ErrDeviceUnavailable)
}
