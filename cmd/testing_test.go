package cmd

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/tputool/tputool/internal/ui"
)

// testEnv is what a command test gets back: the factory and its buffers.
type testEnv struct {
	f      *Factory
	out    *bytes.Buffer
	errOut *bytes.Buffer
}

// newTestFactory returns a factory with buffer streams (not TTYs), a fixed
// clock and the given environment only, so no test reads the real
// environment or writes to the real terminal.
func newTestFactory(t *testing.T, env map[string]string) *testEnv {
	t.Helper()
	io, _, out, errOut := ui.Test()
	f := &Factory{
		IOStreams: io,
		Global:    &GlobalOptions{},
		LookupEnv: func(k string) (string, bool) { v, ok := env[k]; return v, ok },
		Now:       func() time.Time { return time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC) },
		Build:     BuildInfo{Version: "1.2.3", GoVersion: "go1.26.8", GoMLX: "v0.26.0", GoXLA: "v0.1.4", Platform: "linux/amd64"},
	}
	return &testEnv{f: f, out: out, errOut: errOut}
}

// run executes args against the env's factory.
func (e *testEnv) run(args ...string) ExitCode {
	return Run(context.Background(), e.f, args)
}
