//go:build cgo

package tpu

import (
	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/backends/xla"

	"github.com/tputool/tputool/internal/errs"
)

const xlaCompiled = true

func init() {
	// xla reads GOMLX_NO_AUTO_INSTALL in its own init, which has already
	// run; this is the switch that counts from here on.
	xla.EnableAutoInstall(false)
}

// newXLABackend loads a PJRT plugin by absolute path (so go-xla's own
// name-based search and auto-install never run) and creates a client.
func newXLABackend(spec Spec, c candidate) (b backends.Backend, err error) {
	defer func() {
		if r := recover(); r != nil {
			b, err = nil, specErr("", spec.String(), errs.Devicef, "%s could not be loaded: the XLA backend panicked (is it a PJRT plugin?): %v", pluginLabel(spec, c), r)
		}
	}()
	config := c.path
	if c.platform == "cpu" {
		// Loaded by path, the CPU plugin would not get the zero-copy
		// buffers xla enables for a plugin named "cpu".
		config += ",shared_buffers"
	}
	xb, err := xla.NewWithOptions(config, nil)
	if err != nil {
		return nil, specErr("", spec.String(), errs.Devicef, "%s exists but could not be loaded: %w", pluginLabel(spec, c), conciseLoadError(err, c.path))
	}
	return xb, nil
}
