package cmd

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tputool/tputool/pipeline/testkit/mambaref"
)

// TestInspectMamba: inspect reads an attention-free Mamba: no heads, its
// layers Mamba, no KV cache, the fixed recurrent state (per layer a
// convolution window of 3 × 48 and a state of 48 × 8 float32).
func TestInspectMamba(t *testing.T) {
	dir := t.TempDir()
	c := mambaref.Tiny()
	c.Vocab = 512 // stories260K's tokenizer
	require.NoError(t, c.Write(dir))
	copyStoriesTokenizer(t, dir)
	e := genEnv(t)
	require.Equal(t, ExitOK, e.run("inspect", "--model", dir, "--context", "256", "--dtype", "f32"), e.errOut.String())
	out := e.out.String()
	assert.Contains(t, out, "2 (2 Mamba, 0 full attention)")
	assert.Contains(t, out, "Attention:     none")
	assert.Contains(t, out, "KV cache         0 B")
	// 2 layers × (3·48·4 + 48·8·4) bytes = 4224.
	assert.Contains(t, out, "recurrent state  4.1 KiB")
	e = genEnv(t)
	require.Equal(t, ExitOK, e.run("generate", "--model", dir, "-p", "Once upon a time", "-n", "4", "--temperature", "0"), e.errOut.String())
}
