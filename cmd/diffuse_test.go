package cmd

import (
	"bytes"
	"context"
	"encoding/json"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tputool/tputool/compile"
	"github.com/tputool/tputool/pipeline/diffusion/pngmeta"
	"github.com/tputool/tputool/pipeline/testkit/sdckpt"
)

// tinyPipeline generates a tiny pipeline into a temporary directory.
func tinyPipeline(t *testing.T, spec sdckpt.Spec) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), spec.Name)
	require.NoError(t, sdckpt.Generate(dir, spec))
	return dir
}

func diffuseEnv(t *testing.T) *testEnv {
	e := newTestFactory(t, nil)
	withFakeMachine(t, e, nil)
	return e
}

func TestDiffuseOptions(t *testing.T) {
	var got *DiffuseOptions
	e := diffuseEnv(t)
	cmd := NewCmdDiffuse(e.f, func(_ context.Context, o *DiffuseOptions) error { got = o; return nil })
	cmd.SetArgs([]string{"-m", "org/name", "-p", "a fox", "--compile", "--size", "640x384", "-b", "3", "--seed", "9"})
	require.NoError(t, cmd.Execute())
	assert.Equal(t, "org/name", got.Model)
	assert.Equal(t, "a fox", got.Prompt)
	assert.Equal(t, compile.Compiled, got.Mode)
	assert.Equal(t, 640, got.Width)
	assert.Equal(t, 384, got.Height)
	assert.Equal(t, 3, got.Batch)
	assert.True(t, got.HasSeed)
	assert.False(t, got.HasNegative)
	assert.False(t, got.HasGuidance)
	assert.Equal(t, 25, got.Steps)
	assert.Equal(t, "out.png", got.Output)

	cmd = NewCmdDiffuse(e.f, func(_ context.Context, o *DiffuseOptions) error { got = o; return nil })
	cmd.SetArgs([]string{"-m", "x/y", "-p", "", "-n", "", "--size", "256", "--mode", "eager", "-g", "1"})
	require.NoError(t, cmd.Execute())
	assert.Equal(t, compile.Eager, got.Mode)
	assert.Equal(t, 256, got.Width)
	assert.Equal(t, 256, got.Height)
	assert.True(t, got.HasNegative, "an empty --negative-prompt is given")
	assert.True(t, got.HasGuidance)
}

func TestDiffuseUsageErrors(t *testing.T) {
	dir := tinyPipeline(t, sdckpt.TinySD())
	out := filepath.Join(t.TempDir(), "x.png")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"diffuse", "-p", "fox"}, "--model is required"},
		{[]string{"diffuse", "-m", dir}, "--prompt is required"},
		{[]string{"diffuse", "-m", dir, "-p", "fox", "--size", "big"}, "--size"},
		{[]string{"diffuse", "-m", dir, "-p", "fox", "--size", "4x4"}, "between 8 and 8192"},
		{[]string{"diffuse", "-m", dir, "-p", "fox", "--mode", "fast"}, "--mode"},
		{[]string{"diffuse", "-m", dir, "-p", "fox", "--mode", "eager", "--compile"}, "contradict"},
		{[]string{"diffuse", "-m", dir, "-p", "fox", "--scheduler", "nope"}, "--scheduler"},
		{[]string{"diffuse", "-m", dir, "-p", "fox", "-o", "fox.jpg"}, ".png"},
		{[]string{"diffuse", "-m", dir, "-p", "fox", "-o", "fox-%s.png"}, "integer verb"},
		{[]string{"diffuse", "-m", dir, "-p", "fox", "--steps", "0"}, "--steps"},
		{[]string{"diffuse", "-m", dir, "-p", "fox", "--batch", "0"}, "--batch"},
		{[]string{"diffuse", "-m", dir, "-p", "fox", "--guidance", "-1"}, "--guidance"},
		{[]string{"diffuse", "-m", dir, "-p", "fox", "--revision", "main", "-o", out}, "--revision applies to Hub models"},
		// Found after loading: not a multiple of the model's size step.
		{[]string{"diffuse", "-m", dir, "-p", "fox", "--size", "40x40", "-o", out}, "multiples of 16"},
	} {
		e := diffuseEnv(t)
		require.Equal(t, ExitUsage, e.run(tc.args...), "%v: %s", tc.args, e.errOut.String())
		assert.Contains(t, e.errOut.String(), tc.want, "%v", tc.args)
		assert.Empty(t, e.out.String())
	}
}

func TestDiffuseNotADiffusersModel(t *testing.T) {
	e := diffuseEnv(t)
	require.Equal(t, ExitUnsupported, e.run("diffuse", "-m", "../testdata/stories260K-hf", "-p", "fox"), e.errOut.String())
	assert.Contains(t, e.errOut.String(), "not a diffusers pipeline")
}

func readPNG(t *testing.T, path string) ([]byte, map[string]string) {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	texts, err := pngmeta.Read(b)
	require.NoError(t, err)
	meta := map[string]string{}
	for _, kv := range texts {
		meta[kv.Key] = kv.Value
	}
	_, err = png.Decode(bytes.NewReader(b))
	require.NoError(t, err, "a valid PNG")
	return b, meta
}

func TestDiffuseWritesDeterministicPNGs(t *testing.T) {
	dir := tinyPipeline(t, sdckpt.TinySD())
	outDir := t.TempDir()
	run := func(name string, extra ...string) ([]byte, map[string]string, *testEnv) {
		e := diffuseEnv(t)
		path := filepath.Join(outDir, name)
		args := append([]string{"diffuse", "-m", dir, "-p", "a red fox", "-n", "blurry", "--steps", "2",
			"--size", "32x32", "-o", path}, extra...)
		require.Equal(t, ExitOK, e.run(args...), e.errOut.String())
		assert.Equal(t, path+"\n", e.out.String(), "stdout is the file path")
		b, meta := readPNG(t, path)
		return b, meta, e
	}
	a, meta, e := run("a.png", "--seed", "7")
	assert.Equal(t, "a red fox", meta["prompt"])
	assert.Equal(t, "blurry", meta["negative_prompt"])
	assert.Equal(t, "7", meta["seed"])
	assert.Equal(t, "2", meta["steps"])
	assert.Equal(t, "7.5", meta["guidance"])
	assert.Equal(t, "PNDMScheduler", meta["scheduler"])
	assert.Equal(t, dir, meta["model"])
	assert.Equal(t, "32x32", meta["size"])
	assert.Equal(t, "1.2.3", meta["tputool_version"])
	assert.Equal(t, "tputool 1.2.3", meta["Software"])
	// Non-TTY stderr: plain progress lines, no bar escapes.
	assert.Contains(t, e.errOut.String(), "denoising")
	assert.NotContains(t, e.errOut.String(), "\r")

	b, _, _ := run("b.png", "--seed", "7")
	assert.Equal(t, a, b, "same seed, same bytes")
	c, _, _ := run("c.png", "--seed", "8")
	assert.NotEqual(t, a, c, "different seed, different image")

	// Eager and compiled produce the same image.
	d, _, _ := run("d.png", "--seed", "7", "--mode", "eager")
	imgA, err := png.Decode(bytes.NewReader(a))
	require.NoError(t, err)
	imgD, err := png.Decode(bytes.NewReader(d))
	require.NoError(t, err)
	assert.Equal(t, imgA, imgD)
}

func TestDiffuseJSONAndBatch(t *testing.T) {
	dir := tinyPipeline(t, sdckpt.TinySDXL())
	outDir := t.TempDir()
	e := diffuseEnv(t)
	require.Equal(t, ExitOK, e.run("diffuse", "-m", dir, "-p", "a cat", "--steps", "2", "--size", "32x32", "--seed", "3",
		"-b", "2", "--scheduler", "euler_a", "-o", filepath.Join(outDir, "cat.png"), "--json"), e.errOut.String())
	var res DiffuseResult
	require.NoError(t, json.Unmarshal(e.out.Bytes(), &res), e.out.String())
	assert.Equal(t, []string{filepath.Join(outDir, "cat-0.png"), filepath.Join(outDir, "cat-1.png")}, res.Files)
	assert.Equal(t, "StableDiffusionXLPipeline", res.Pipeline)
	assert.Equal(t, 5.0, res.Guidance, "SDXL's default guidance")
	assert.Equal(t, "euler_a (EulerAncestralDiscreteScheduler)", res.Scheduler)
	assert.Nil(t, res.NegativePrompt)
	assert.Equal(t, uint64(3), res.Seed)
	assert.Len(t, res.Timings.Steps, 2)
	assert.Positive(t, res.Timings.Step)
	assert.Positive(t, res.Timings.Total)
	assert.Positive(t, res.Compiles)
	assert.True(t, res.NewSize)
	assert.Equal(t, compile.Compiled.String(), res.Mode)
	// --json: NDJSON events on stderr.
	for _, line := range strings.Split(strings.TrimSpace(e.errOut.String()), "\n") {
		var ev map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &ev), line)
		assert.Contains(t, ev, "type")
	}
	_, m0 := readPNG(t, res.Files[0])
	_, m1 := readPNG(t, res.Files[1])
	assert.Equal(t, "0/2", m0["batch_index"])
	assert.Equal(t, "1/2", m1["batch_index"])
	assert.Equal(t, "3", m1["seed"])

	// A printf pattern.
	e = diffuseEnv(t)
	pattern := filepath.Join(outDir, "img-%02d.png")
	require.Equal(t, ExitOK, e.run("diffuse", "-m", dir, "-p", "a cat", "--steps", "1", "--size", "32x32",
		"-b", "2", "-o", pattern), e.errOut.String())
	assert.Equal(t, filepath.Join(outDir, "img-00.png")+"\n"+filepath.Join(outDir, "img-01.png")+"\n", e.out.String())
}

func TestDiffuseTTY(t *testing.T) {
	dir := tinyPipeline(t, sdckpt.TinySD())
	e := diffuseEnv(t)
	e.f.IOStreams.SetStdoutTTY(true)
	e.f.IOStreams.SetStderrTTY(true)
	path := filepath.Join(t.TempDir(), "fox.png")
	require.Equal(t, ExitOK, e.run("diffuse", "-m", dir, "-p", "fox", "--steps", "2", "--size", "32x32", "-o", path), e.errOut.String())
	assert.Equal(t, path+"\n", e.out.String())
	stderr := e.errOut.String()
	assert.Contains(t, stderr, "denoising")
	assert.Contains(t, stderr, "\r", "a progress bar redraws in place on a terminal")
	// PNDM calls the UNet 3 times for 2 steps, and says so.
	assert.Contains(t, stderr, "2 steps (3 unet calls)")
	assert.Contains(t, stderr, "s/unet call")

	// --quiet: nothing on stderr, the path on stdout.
	e = diffuseEnv(t)
	e.f.IOStreams.SetStderrTTY(true)
	require.Equal(t, ExitOK, e.run("diffuse", "-q", "-m", dir, "-p", "fox", "--steps", "1", "--size", "32x32", "-o", path), e.errOut.String())
	assert.Empty(t, e.errOut.String())
	assert.Equal(t, path+"\n", e.out.String())
}

func TestDiffuseSD3(t *testing.T) {
	dir := tinyPipeline(t, sdckpt.TinySD3())
	e := diffuseEnv(t)
	path := filepath.Join(t.TempDir(), "sd3.png")
	require.Equal(t, ExitOK, e.run("diffuse", "-m", dir, "-p", "a fox", "--steps", "2", "--size", "32x48", "--seed", "5",
		"-o", path, "--json", "--mode", "eager"), e.errOut.String())
	var res DiffuseResult
	require.NoError(t, json.Unmarshal(e.out.Bytes(), &res))
	assert.Equal(t, "StableDiffusion3Pipeline", res.Pipeline)
	assert.Equal(t, 7.0, res.Guidance)
	assert.Equal(t, "FlowMatchEulerDiscreteScheduler", res.Scheduler)
	assert.Equal(t, 32, res.Width)
	assert.Equal(t, 48, res.Height)
	_, meta := readPNG(t, path)
	assert.Equal(t, "32x48", meta["size"])
}

// TestDiffuseFailsEarly: an output directory that does not exist fails
// before the model is even resolved; a prompt too long for CLIP is
// warned about before the denoising; PNDM's calls are counted apart from
// the steps asked for.
func TestDiffuseFailsEarly(t *testing.T) {
	e := diffuseEnv(t)
	assert.Equal(t, ExitUsage, e.run("diffuse", "-m", "/nonexistent/model", "-p", "fox", "-o", "/nonexistent/dir/x.png"))
	assert.Contains(t, e.errOut.String(), "-o /nonexistent/dir/x.png: directory /nonexistent/dir does not exist")

	dir := tinyPipeline(t, sdckpt.TinySD())
	e = diffuseEnv(t)
	path := filepath.Join(t.TempDir(), "fox.png")
	long := strings.Repeat("a red fox in the snow ", 40)
	require.Equal(t, ExitOK, e.run("diffuse", "-v", "-m", dir, "-p", long, "--steps", "2", "--size", "32x32", "--seed", "4", "-o", path), e.errOut.String())
	stderr := e.errOut.String()
	warn := strings.Index(stderr, "the prompt will be truncated")
	denoise := strings.Index(stderr, "denoising, 2 steps as")
	require.GreaterOrEqual(t, warn, 0, stderr)
	require.GreaterOrEqual(t, denoise, 0, stderr)
	assert.Less(t, warn, denoise, "the warning comes before the work")
	assert.Contains(t, stderr, "3 unet calls")
	assert.NotContains(t, stderr, "3 steps")
	assert.Contains(t, stderr, "seed 4 (--seed)")
}
