package cmd

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tputool/tputool/loader/hub/hubtest"
	"github.com/tputool/tputool/loader/safetensors"
	"github.com/tputool/tputool/pipeline/testkit/sdckpt"
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
		"bench":    {"bench"},
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

// editedStories copies testdata/stories260K-hf with config.json and
// generation_config.json edited.
func editedStories(t *testing.T, edit func(cfg, gen map[string]any)) string {
	t.Helper()
	dir := t.TempDir()
	entries, err := os.ReadDir(storiesDir)
	require.NoError(t, err)
	docs := map[string]map[string]any{}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(storiesDir, e.Name()))
		require.NoError(t, err)
		if e.Name() == "config.json" || e.Name() == "generation_config.json" {
			m := map[string]any{}
			require.NoError(t, json.Unmarshal(b, &m))
			docs[e.Name()] = m
			continue
		}
		require.NoError(t, os.WriteFile(filepath.Join(dir, e.Name()), b, 0o644))
	}
	edit(docs["config.json"], docs["generation_config.json"])
	for name, m := range docs {
		b, err := json.Marshal(m)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), b, 0o644))
	}
	return dir
}

// TestGenerateRefusesStateThatCannotFit: a config with an absurd
// max_position_embeddings plus a huge token limit (flag or
// generation_config.json) is refused before the KV cache is allocated,
// with the figure, instead of crashing the process.
func TestGenerateRefusesStateThatCannotFit(t *testing.T) {
	huge := editedStories(t, func(cfg, gen map[string]any) {
		cfg["max_position_embeddings"] = int64(1) << 62
		gen["max_new_tokens"] = int64(1) << 40
	})
	cases := []struct {
		args []string
		want []string
	}{
		// 5 layers x K and V x 4 heads x 8 dims x 4 bytes = 1280 B per position.
		{[]string{"-n", "1000000"}, []string{"1000192 positions", "1.2 GiB", "more than this machine's 16.0 MiB", "--max-new-tokens", "--kv-cache-dtype int8"}},
		// int8: 5 x 2 x 4 x 8 bytes of codes and 5 x 2 x 4 f32 scales = 480 B per position.
		{[]string{"-n", "1000000", "--kv-cache-dtype", "int8"}, []string{"1000192 positions", "(5 layers, Int8)", "457.9 MiB", "--max-new-tokens (now 1000000) or the number of prompts"}},
		{nil, []string{"1099511628032 positions", "1.3 PiB"}}, // generation_config.json's 2^40
		{[]string{"-n", "4611686018427387000"}, []string{"more than 8 EiB"}},
	}
	for _, tc := range cases {
		e := genEnv(t)
		code := e.run(append([]string{"generate", "--model", huge, "-p", "Once upon a time"}, tc.args...)...)
		require.Equal(t, ExitUsage, code, e.errOut.String())
		for _, w := range tc.want {
			assert.Contains(t, e.errOut.String(), w)
		}
		if slices.Contains(tc.args, "int8") { // no hint to what is asked already
			assert.NotContains(t, e.errOut.String(), "--kv-cache-dtype int8,")
		}
		assert.Empty(t, e.out.String())
	}
	// A sane limit on the same config runs.
	e := genEnv(t)
	require.Equal(t, ExitOK, e.run("generate", "--model", huge, "-p", "Once upon a time", "-n", "3", "--temperature", "0"), e.errOut.String())
	assert.Equal(t, ", there was\n", e.out.String())
}

// TestDiffuseRefusesActivationsThatCannotFit: on the go backend a size or
// batch whose largest activation alone exceeds the host's memory (16 MiB
// on the fake machine) is refused before the pipeline runs, naming the
// tensor and the figure, instead of being killed by the OOM killer.
func TestDiffuseRefusesActivationsThatCannotFit(t *testing.T) {
	dir := tinyPipeline(t, sdckpt.TinySD()) // UNet attention at level 0, 2 heads; VAE scale 8
	for _, tc := range []struct {
		args []string
		want []string
	}{
		// 8192/8 = 1024x1024 latents: 2 (CFG) x 2 heads x (2^20)^2 x 4 B = 2^44 B.
		{[]string{"--size", "8192x8192"}, []string{"--size 8192x8192 --batch 1", "the UNet's self-attention scores at 1024x1024 latents (2 x 2 heads x 1048576^2, float32)", "16.0 TiB", "more than this machine's 16.0 MiB"}},
		// 64x64 latents: 2 x 2 x 4096^2 x 4 B = 256 MiB.
		{[]string{"--size", "512"}, []string{"(2 x 2 heads x 4096^2, float32)", "256.0 MiB", "lower --size or --batch"}},
		// Without guidance the unconditional rows are not computed.
		{[]string{"--size", "512", "--guidance", "1"}, []string{"(1 x 2 heads x 4096^2, float32)", "128.0 MiB"}},
	} {
		e := diffuseEnv(t)
		out := filepath.Join(t.TempDir(), "x.png")
		code := e.run(append([]string{"diffuse", "-m", dir, "-p", "fox", "--steps", "1", "-o", out}, tc.args...)...)
		require.Equal(t, ExitUsage, code, "%v: %s", tc.args, e.errOut.String())
		for _, w := range tc.want {
			assert.Contains(t, e.errOut.String(), w, "%v", tc.args)
		}
		assert.Empty(t, e.out.String())
		assert.NoFileExists(t, out)
	}
	// The model's own size runs on the same machine.
	e := diffuseEnv(t)
	out := filepath.Join(t.TempDir(), "x.png")
	require.Equal(t, ExitOK, e.run("diffuse", "-m", dir, "-p", "fox", "--steps", "1", "-o", out), e.errOut.String())
	assert.FileExists(t, out)
}

// TestGenerateWarnsAboutNonFiniteWeights: a checkpoint with NaN/Inf in a
// tensor still loads, and a warning names the tensor and the count.
func TestGenerateWarnsAboutNonFiniteWeights(t *testing.T) {
	dir := editedStories(t, func(cfg, gen map[string]any) {})
	p := filepath.Join(dir, "model.safetensors")
	ck, err := safetensors.Open(p)
	require.NoError(t, err)
	var ts []safetensors.Tensor
	const victim = "model.layers.2.mlp.down_proj.weight"
	for _, name := range ck.Names() {
		info, _ := ck.Info(name)
		raw, err := ck.Raw(name)
		require.NoError(t, err)
		data := append([]byte(nil), raw...)
		if name == victim {
			require.Equal(t, safetensors.F32, info.DType)
			for i, bits := range map[int]uint32{3: 0x7FC00000, 40: 0x7F800000, 41: 0xFF800000} { // NaN, +Inf, -Inf
				binary.LittleEndian.PutUint32(data[4*i:], bits)
			}
		}
		ts = append(ts, safetensors.Tensor{Name: name, DType: info.DType, Shape: info.Shape, Data: data})
	}
	ck.Close()
	b, err := safetensors.Encode(ts, nil)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(p, b, 0o644))

	e := genEnv(t)
	code := e.run("generate", "--model", dir, "-p", "Once upon a time", "-n", "2", "--temperature", "0")
	assert.Equal(t, ExitOK, code, "NaN weights are a warning, not an error")
	assert.Contains(t, e.errOut.String(), "tensor "+victim+" (F32) holds 3 NaN/Inf value(s) of 11008, the first at element 3")
	assert.NotContains(t, e.errOut.String(), "panic")
}

// TestWarnNonFiniteNamesComponent: in a diffusers pipeline the warning
// names the component folder and the tensor, found while diffuse loads the
// weights, and the run goes on.
func TestWarnNonFiniteNamesComponent(t *testing.T) {
	spec := sdckpt.TinySD()
	spec.DType = "F16"
	dir := tinyPipeline(t, spec)
	vaeElems := plantF16(t, filepath.Join(dir, "vae", "diffusion_pytorch_model.safetensors"), "decoder.conv_out.weight", 6, 0x7C00)  // +Inf
	teElems := plantF16(t, filepath.Join(dir, "text_encoder", "model.safetensors"), "text_model.final_layer_norm.weight", 0, 0x7E00) // NaN

	e := diffuseEnv(t)
	require.Equal(t, ExitOK, e.run("diffuse", "-m", dir, "-p", "a fox", "--steps", "1", "--size", "32x32",
		"-o", filepath.Join(t.TempDir(), "fox.png")), e.errOut.String())
	var warnings []string
	for _, line := range strings.Split(e.errOut.String(), "\n") {
		if strings.HasPrefix(line, "warning: weights:") {
			warnings = append(warnings, line)
		}
	}
	assert.Equal(t, []string{
		fmt.Sprintf("warning: weights: tensor vae/decoder.conv_out.weight (F16) holds 1 NaN/Inf value(s) of %d, the first at element 6; the output may be NaN or garbage", vaeElems),
		fmt.Sprintf("warning: weights: tensor text_encoder/text_model.final_layer_norm.weight (F16) holds 1 NaN/Inf value(s) of %d, the first at element 0; the output may be NaN or garbage", teElems),
	}, warnings)
}

// plantF16 rewrites the F16 tensor name of the safetensors file at path
// with the bits of element i set to v, and returns its element count.
func plantF16(t *testing.T, path, name string, i int, v uint16) int64 {
	t.Helper()
	ck, err := safetensors.Open(path)
	require.NoError(t, err)
	var ts []safetensors.Tensor
	var elems int64
	for _, n := range ck.Names() {
		info, _ := ck.Info(n)
		raw, err := ck.Raw(n)
		require.NoError(t, err)
		data := append([]byte(nil), raw...)
		if n == name {
			require.Equal(t, safetensors.F16, info.DType)
			binary.LittleEndian.PutUint16(data[2*i:], v)
			elems = info.NumElements()
		}
		ts = append(ts, safetensors.Tensor{Name: n, DType: info.DType, Shape: info.Shape, Data: data})
	}
	ck.Close()
	require.Positive(t, elems, "no tensor %s in %s", name, path)
	b, err := safetensors.Encode(ts, nil)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, b, 0o644))
	return elems
}

// TestNonFiniteWarningsLimit: the first eight tensors are named, the rest
// counted in one line once loading is over.
func TestNonFiniteWarningsLimit(t *testing.T) {
	e := newTestFactory(t, nil)
	w := newNonFiniteWarnings(e.f.Reporter())
	for i := range 11 {
		w.note(safetensors.NonFiniteTensor{Name: fmt.Sprintf("t%d", i), DType: safetensors.BF16, Count: 1, Elements: 4, First: 2})
	}
	w.done()
	lines := strings.Split(strings.TrimSuffix(e.errOut.String(), "\n"), "\n")
	require.Len(t, lines, 9)
	assert.Equal(t, "warning: weights: tensor t0 (BF16) holds 1 NaN/Inf value(s) of 4, the first at element 2; the output may be NaN or garbage", lines[0])
	assert.Contains(t, lines[7], "tensor t7 ")
	assert.Equal(t, "warning: weights: 3 more tensor(s) hold NaN/Inf values", lines[8])
}
