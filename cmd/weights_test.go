package cmd

import (
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tputool/tputool/compile"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
	"github.com/tputool/tputool/tpu"
)

// --quantize int8 continues TinyStories with the f32 text, names the held
// weights under --verbose, and on the go backend (no fused int8 matmul)
// warns that it is slow.
func TestGenerateQuantizeInt8(t *testing.T) {
	for _, dev := range []string{"cpu:fast", "cpu:go"} {
		e := genEnv(t)
		code := e.run("--device", dev, "generate", "-v", "--model", storiesDir, "-p", "Once upon a time", "--stop", ".", "--temperature", "0", "--quantize", "int8")
		require.Equal(t, ExitOK, code, e.errOut.String())
		assert.Equal(t, ", there was a little girl named Lily\n", e.out.String(), dev)
		assert.Contains(t, e.errOut.String(), "held as int8 with float32 compute", dev)
		assert.Equal(t, dev == "cpu:go", strings.Contains(e.errOut.String(), "dequantised at every step"), dev)
	}
}

// --quantize int4 holds the weights as int4 (named under --verbose) and
// continues TinyStories sensibly; the cpu engine's fused int4 product and
// the go backend's graph as written give the same text.
func TestGenerateQuantizeInt4(t *testing.T) {
	var texts []string
	for _, dev := range []string{"cpu:fast", "cpu:go"} {
		e := genEnv(t)
		code := e.run("--device", dev, "generate", "-v", "--model", storiesDir, "-p", "Once upon a time", "-n", "12", "--temperature", "0", "--quantize", "int4")
		require.Equal(t, ExitOK, code, e.errOut.String())
		assert.Contains(t, e.errOut.String(), "held as int4 with float32 compute", dev)
		assert.Equal(t, dev == "cpu:go", strings.Contains(e.errOut.String(), "dequantised at every step"), dev)
		texts = append(texts, e.out.String())
	}
	assert.Equal(t, texts[0], texts[1])
	assert.NotEmpty(t, strings.TrimSpace(texts[0]))
	t.Logf("int4 continuation: %q", texts[0])
}

// --activations int8 runs int4 weights with int8 activations on the CPU
// engine, is refused elsewhere, and on a float checkpoint without
// --quantize (a 4-bit checkpoint takes it: TestActivationsInt8On4Bit).
func TestActivationsInt8(t *testing.T) {
	e := genEnv(t)
	code := e.run("--device", "cpu:fast", "generate", "--model", storiesDir, "-p", "Once upon a time", "-n", "12", "--temperature", "0", "--quantize", "int4", "--activations", "int8")
	require.Equal(t, ExitOK, code, e.errOut.String())
	assert.NotEmpty(t, strings.TrimSpace(e.out.String()))
	t.Logf("int4, int8 activations: %q", e.out.String())
	e = genEnv(t)
	require.Equal(t, ExitOK, e.run("--device", "cpu:fast", "generate", "--model", storiesDir, "-p", "Once upon a time", "-n", "4", "--quantize", "int8", "--activations", "int8"), e.errOut.String())
	e = genEnv(t)
	require.Equal(t, ExitUnsupported, e.run("--device", "cpu:go", "generate", "--model", storiesDir, "-p", "hi", "-n", "2", "--quantize", "int4", "--activations", "int8"))
	assert.Contains(t, e.errOut.String(), "--activations int8: int8 activations run on tputool's CPU engine only")
	e = genEnv(t)
	require.Equal(t, ExitUsage, e.run("generate", "--model", storiesDir, "-p", "hi", "--activations", "int8"))
	assert.Contains(t, e.errOut.String(), "holds none: add --quantize int4 or int8")
	e = genEnv(t)
	require.Equal(t, ExitUsage, e.run("bench", "--model", storiesDir, "--quantize", "int4", "--activations", "int4"))
	assert.Contains(t, e.errOut.String(), `--activations "int4": want f32, int8 or bf16`)
}

// --activations bf16 runs on the CPU engine (bf16 weights, --quantize
// int8 and int4) and is refused elsewhere.
func TestActivationsBF16(t *testing.T) {
	e := genEnv(t)
	code := e.run("--device", "cpu:fast", "-v", "generate", "--model", storiesDir, "-p", "Once upon a time", "-n", "8", "--temperature", "0", "--dtype", "bf16", "--activations", "bf16")
	require.Equal(t, ExitOK, code, e.errOut.String())
	assert.NotEmpty(t, strings.TrimSpace(e.out.String()))
	assert.Contains(t, e.errOut.String(), "products with bf16 and compact weights round their activations to bf16")
	e = genEnv(t)
	require.Equal(t, ExitUnsupported, e.run("--device", "cpu:go", "generate", "--model", storiesDir, "-p", "hi", "-n", "2", "--activations", "bf16"))
	assert.Contains(t, e.errOut.String(), "--activations bf16: bf16 activations run on tputool's CPU engine only")
	e = genEnv(t)
	require.Equal(t, ExitOK, e.run("--device", "cpu:fast", "generate", "--model", storiesDir, "-p", "Once upon a time", "-n", "4", "--quantize", "int4", "--activations", "bf16"), e.errOut.String())
	e = genEnv(t)
	require.Equal(t, ExitOK, e.run("--device", "cpu:fast", "generate", "--model", storiesDir, "-p", "Once upon a time", "-n", "4", "--quantize", "int8", "--activations", "bf16"), e.errOut.String())
}

func TestQuantizeFlagValues(t *testing.T) {
	e := genEnv(t)
	require.Equal(t, ExitUsage, e.run("generate", "--model", storiesDir, "-p", "hi", "--quantize", "int3"))
	assert.Contains(t, e.errOut.String(), `--quantize "int3": want int8, int4 or none`)
	e = genEnv(t)
	require.Equal(t, ExitUsage, e.run("bench", "--model", storiesDir, "--quantize", "q4"))
	assert.Contains(t, e.errOut.String(), `--quantize "q4"`)
}

// The pre-flight check counts the weights as they will be held: f32, the
// checkpoint's bf16/f16 on a NarrowWeights backend, or int8 and scales.
func TestCheckWeightsFit(t *testing.T) {
	l, err := lmckpt.Load(storiesDir)
	require.NoError(t, err)
	defer l.Close()
	dev := &tpu.Device{Capabilities: tpu.Capabilities{HostMemory: true, NarrowWeights: true}}
	f32 := compile.Options{DType: dtypes.Float32}
	int8 := compile.Options{DType: dtypes.Float32, Quantize: "int8"}
	full := l.WeightBytes() // an f32 checkpoint: as stored
	require.NoError(t, checkWeightsFit(dev, l, f32, full))
	err = checkWeightsFit(dev, l, f32, full-1)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "try --quantize int8")
	require.NoError(t, checkWeightsFit(dev, l, int8, full/3))
	err = checkWeightsFit(dev, l, int8, 1000)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "held as int8 with float32 compute")
	// Not in host memory (an accelerator): no check.
	require.NoError(t, checkWeightsFit(&tpu.Device{}, l, f32, 1))
}

// --kv-cache-dtype bf16 and int8 generate (on the CPU engine and the go
// backend, the same text), and -v says what the caches take (stories:
// 5 layers, K and V, 4 heads of 8 values, 32 positions: 2 bytes a value,
// or 1 and a 4-byte scale a slot and head); other values are usage
// errors naming the flag.
func TestKVCacheDTypeFlag(t *testing.T) {
	for _, c := range []struct{ kv, held string }{
		{"bf16", "KV cache: up to 20.0 KiB for 1 sequence(s) of 32 positions, held as bfloat16"},
		{"int8", "KV cache: up to 15.0 KiB for 1 sequence(s) of 32 positions, held as int8 with an f32 scale a slot and head"},
	} {
		kv := c.kv
		var texts []string
		for _, dev := range []string{"cpu:fast", "cpu:go"} {
			e := genEnv(t)
			code := e.run("-v", "--device", dev, "generate", "--model", storiesDir, "-p", "Once upon a time", "-n", "12", "--temperature", "0", "--kv-cache-dtype", kv)
			require.Equal(t, ExitOK, code, e.errOut.String())
			assert.Contains(t, e.errOut.String(), c.held)
			texts = append(texts, e.out.String())
		}
		assert.Equal(t, texts[0], texts[1], kv)
		assert.NotEmpty(t, strings.TrimSpace(texts[0]), kv)
	}
	e := genEnv(t)
	require.Equal(t, ExitUsage, e.run("generate", "--model", storiesDir, "-p", "hi", "--kv-cache-dtype", "int4"))
	assert.Contains(t, e.errOut.String(), `--kv-cache-dtype "int4": want f32, bf16, int8 or auto`)
	e = genEnv(t)
	require.Equal(t, ExitUsage, e.run("bench", "--model", storiesDir, "--kv-cache-dtype", "fp8"))
	assert.Contains(t, e.errOut.String(), `--kv-cache-dtype "fp8"`)
}

// --activations int8 without --quantize takes a GPTQ checkpoint's 4-bit
// weights (held as stored), and its -v says how the weights are held.
func TestActivationsInt8On4Bit(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, lmckpt.WriteInt4Copy(storiesDir, dir, lmckpt.Int4Options{Format: "gptq", Group: 32}))
	e := genEnv(t)
	code := e.run("--device", "cpu:fast", "-v", "generate", "--model", dir, "-p", "Once upon a time", "-n", "8", "--temperature", "0", "--activations", "int8")
	require.Equal(t, ExitOK, code, e.errOut.String())
	assert.NotEmpty(t, strings.TrimSpace(e.out.String()))
	assert.Contains(t, e.errOut.String(), "4-bit matrices of the checkpoint held as stored")
}
