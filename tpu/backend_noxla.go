//go:build !cgo

package tpu

import (
	"github.com/gomlx/gomlx/backends"

	"github.com/tputool/tputool/internal/errs"
)

const xlaCompiled = false

// newXLABackend is the !cgo twin: go-xla's PJRT bindings need cgo.
func newXLABackend(spec Spec, c candidate) (backends.Backend, error) {
	return nil, specErr("", spec.String(), errs.Devicef, "%s was found, but %s", pluginLabel(spec, c), noCgoMessage)
}
