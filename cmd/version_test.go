package cmd

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestVersion(t *testing.T) {
	e := newTestFactory(t, nil)
	e.f.Build.Commit = "0123456789abcdef0123"
	e.f.Build.Modified = true
	require.Equal(t, ExitOK, e.run("version"))
	assert.Equal(t, "tputool 1.2.3 (0123456789ab+dirty)\ngo1.26.8 linux/amd64, gomlx v0.26.0, go-xla v0.1.4, cgo off (pure Go: CPU backend only)\n", e.out.String())

	e = newTestFactory(t, nil)
	require.Equal(t, ExitOK, e.run("version", "--json"))
	var got map[string]any
	require.NoError(t, json.Unmarshal(e.out.Bytes(), &got))
	assert.Equal(t, "1.2.3", got["version"])
	assert.Equal(t, "v0.26.0", got["gomlx"])
	assert.Equal(t, false, got["cgo"])
	assert.Contains(t, e.out.String(), `"go_version":"go1.26.8"`, "compact JSON off a TTY")

	e = newTestFactory(t, nil)
	e.f.IOStreams.SetStdoutTTY(true)
	require.Equal(t, ExitOK, e.run("version", "--json"))
	assert.Contains(t, e.out.String(), "\n  \"version\": \"1.2.3\"", "indented JSON on a TTY")
}

func TestVersionFlag(t *testing.T) {
	e := newTestFactory(t, nil)
	require.Equal(t, ExitOK, e.run("--version"), e.errOut.String())
	assert.Equal(t, "tputool 1.2.3\ngo1.26.8 linux/amd64, gomlx v0.26.0, go-xla v0.1.4, cgo off (pure Go: CPU backend only)\n", e.out.String())

	e = newTestFactory(t, nil)
	require.Equal(t, ExitOK, e.run("--version", "--json"), e.errOut.String())
	assert.Contains(t, e.out.String(), `"version":"1.2.3"`)

	// Without it, the root command still prints help; a stray word is a usage error.
	e = newTestFactory(t, nil)
	require.Equal(t, ExitOK, e.run())
	assert.Contains(t, e.out.String(), "Available Commands")
	e = newTestFactory(t, nil)
	assert.Equal(t, ExitUsage, e.run("genrate"))
}
