package tpu

import (
	"bytes"
	"io"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/klog/v2"
)

// captureStderr runs fn with os.Stderr redirected to a pipe.
func captureStderr(t *testing.T, fn func()) string {
	t.Helper()
	r, w, err := os.Pipe()
	require.NoError(t, err)
	old := os.Stderr
	os.Stderr = w
	fn()
	os.Stderr = old
	require.NoError(t, w.Close())
	b, err := io.ReadAll(r)
	require.NoError(t, err)
	return string(b)
}

func TestBackendLogIsQuietByDefault(t *testing.T) {
	if os.Getenv(EnvXLALog) != "" {
		t.Skip(EnvXLALog + " is set")
	}
	out := captureStderr(t, func() {
		klog.Warningf("warning from a backend")
		klog.Errorf("error from a backend")
		klog.Flush()
	})
	assert.Empty(t, out)

	var buf bytes.Buffer
	SetBackendLog(&buf)
	defer SetBackendLog(nil)
	out = captureStderr(t, func() {
		klog.Errorf("routed error")
		klog.Flush()
	})
	assert.Empty(t, out, "errors go to the writer only")
	assert.Contains(t, buf.String(), "routed error")
}

func TestEnvHelpers(t *testing.T) {
	e := Env{LookupEnv: MapEnv(map[string]string{"A": "x", "EMPTY": ""})}
	assert.Equal(t, "x", e.Get("A"))
	v, ok := e.Lookup("EMPTY")
	assert.True(t, ok)
	assert.Empty(t, v)
	_, ok = e.Lookup("MISSING")
	assert.False(t, ok)
	assert.Empty(t, Env{}.Get("A"), "a zero Env has no variables")
	assert.Equal(t, "/usr/lib", Env{}.sys("/usr/lib"))
	assert.Equal(t, "/r/usr/lib", Env{Root: "/r"}.sys("/usr/lib"))
	assert.Equal(t, []string{"/a", "/b"}, splitPathList(":/a:: /b :"))
}
