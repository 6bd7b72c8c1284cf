package cmd

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tputool/tputool/loader/hub/hubtest"
	"github.com/tputool/tputool/tpu"
)

// TestRetriesFlagOnEveryDownloadingCommand: each command that can download
// takes --retries and hands it to the Hub client: against a Hub that
// always answers 503, --retries N makes exactly N+1 listing requests and
// exits 5 with the HTTP status in the message; a negative value is a usage
// error.
func TestRetriesFlagOnEveryDownloadingCommand(t *testing.T) {
	commands := map[string][]string{
		"download": {"download"},
		"inspect":  {"inspect"},
		"generate": {"generate", "-p", "hi"},
		"diffuse":  {"diffuse", "-p", "a cat"},
	}
	for name, args := range commands {
		for _, retries := range []string{"0", "1"} {
			t.Run(name+"/"+retries, func(t *testing.T) {
				t.Parallel()
				srv := hubtest.New(t)
				srv.AddRepo(storiesRepo(t, "org/stories"))
				srv.AddFault(&hubtest.Fault{Status: 503})
				e := newTestFactory(t, hubEnv(t, srv))
				withFakeMachine(t, e, nil)
				code := e.run(append(args, "--model", "org/stories", "--retries", retries)...)
				assert.Equal(t, ExitHub, code, e.errOut.String())
				assert.Contains(t, e.errOut.String(), "HTTP 503")
				want := 1
				if retries == "1" {
					want = 2
				}
				assert.Equal(t, want, srv.Count(func(r hubtest.Request) bool { return strings.HasPrefix(r.Path, "/api/") }))
			})
		}
		t.Run(name+"/negative", func(t *testing.T) {
			e := newTestFactory(t, nil)
			assert.Equal(t, ExitUsage, e.run(append(args, "--model", "org/x", "--retries", "-1")...))
			assert.Contains(t, e.errOut.String(), "--retries -1")
		})
	}
}

// TestGenerateRefusesFloat16UpFront: --dtype f16 is refused while the
// flags are checked, before any model is read or device opened (the go
// backend cannot convert to Float16, and no TPU path computes in it).
func TestGenerateRefusesFloat16UpFront(t *testing.T) {
	for _, dt := range []string{"f16", "fp16", "float16", "f8"} {
		e := newTestFactory(t, nil)
		opened := false
		e.f.DeviceEnv = func() tpu.Env { opened = true; return tpu.Env{} }
		code := e.run("generate", "--model", "./does-not-exist", "-p", "hi", "--dtype", dt, "--device", "cpu")
		require.Equal(t, ExitUsage, code, e.errOut.String())
		assert.Contains(t, e.errOut.String(), "--dtype")
		assert.False(t, opened, "the device was opened before the flags were checked")
	}
}
