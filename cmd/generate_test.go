package cmd

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
	"github.com/tputool/tputool/tpu"
)

// genEnv is a test factory on a fake CPU-only machine.
func genEnv(t *testing.T) *testEnv {
	e := newTestFactory(t, nil)
	withFakeMachine(t, e, nil)
	return e
}

func TestGenerateText(t *testing.T) {
	for _, tty := range []bool{false, true} {
		e := genEnv(t)
		e.f.IOStreams.SetStdoutTTY(tty)
		code := e.run("generate", "--model", storiesDir, "--prompt", "Once upon a time", "--stop", ".", "--temperature", "0")
		require.Equal(t, ExitOK, code, e.errOut.String())
		assert.Equal(t, ", there was a little girl named Lily\n", e.out.String())
		assert.Empty(t, e.errOut.String())
	}
}

func TestGenerateVerboseMetricsOnStderr(t *testing.T) {
	e := genEnv(t)
	require.Equal(t, ExitOK, e.run("generate", "-v", "--model", storiesDir, "-p", "Once upon a time", "-n", "8"), e.errOut.String())
	assert.Equal(t, ", there was a little girl\n", e.out.String())
	for _, line := range []string{"load duration:", "compile duration:", "prompt eval count:    5 token(s)", "prompt eval rate:", "eval count:           8 token(s)", "eval rate:", "time to first token:"} {
		assert.Contains(t, e.errOut.String(), line)
	}
}

type jsonResult struct {
	Text           string `json:"text"`
	TokenIDs       []int  `json:"token_ids"`
	PromptTokenIDs []int  `json:"prompt_token_ids"`
	FinishReason   string `json:"finish_reason"`
	Metrics        struct {
		PromptEvalCount int   `json:"prompt_eval_count"`
		EvalCount       int   `json:"eval_count"`
		EvalDuration    int64 `json:"eval_duration"`
	} `json:"metrics"`
}

func TestGenerateJSONBatchBothModes(t *testing.T) {
	var byMode [][]jsonResult
	for _, mode := range []string{"compiled", "eager"} {
		e := genEnv(t)
		code := e.run("generate", "--model", storiesDir, "--json", "--mode", mode, "-n", "12",
			"-p", "Once upon a time", "-p", "The little dog", "--stop", "Lily")
		require.Equal(t, ExitOK, code, e.errOut.String())
		var res []jsonResult
		require.NoError(t, json.Unmarshal(e.out.Bytes(), &res), e.out.String())
		require.Len(t, res, 2)
		assert.Equal(t, []int{1, 403, 407, 261, 378}, res[0].PromptTokenIDs)
		assert.Equal(t, "stop_string", res[0].FinishReason)
		assert.Equal(t, ", there was a little girl named ", res[0].Text)
		// The first token keeps its leading space, as in the decode of
		// prompt plus continuation ("The little dog was ...").
		assert.Equal(t, "stop_string", res[1].FinishReason)
		assert.Equal(t, " was a little girl named ", res[1].Text)
		assert.Equal(t, len(res[0].TokenIDs)+len(res[1].TokenIDs), res[0].Metrics.EvalCount)
		byMode = append(byMode, res)
	}
	assert.Equal(t, byMode[0], clearMetrics(byMode[1], byMode[0]), "eager and compiled differ")
}

// clearMetrics copies the metrics of want into got, so results compare on
// text and ids only.
func clearMetrics(got, want []jsonResult) []jsonResult {
	out := append([]jsonResult(nil), got...)
	for i := range out {
		out[i].Metrics = want[i].Metrics
	}
	return out
}

func TestGenerateStreamNDJSON(t *testing.T) {
	e := genEnv(t)
	require.Equal(t, ExitOK, e.run("generate", "--model", storiesDir, "--json", "--stream", "-n", "8", "-p", "Once upon a time"), e.errOut.String())
	var types []string
	var text strings.Builder
	sc := bufio.NewScanner(bytes.NewReader(e.out.Bytes()))
	for sc.Scan() {
		var ev map[string]any
		require.NoError(t, json.Unmarshal(sc.Bytes(), &ev), sc.Text())
		types = append(types, ev["type"].(string))
		if ev["type"] == "token" {
			text.WriteString(ev["text"].(string))
		}
		if ev["type"] == "result" {
			assert.Equal(t, ev["text"], text.String())
			assert.Equal(t, "length", ev["finish_reason"])
		}
		if ev["type"] == "done" {
			assert.EqualValues(t, 8, ev["metrics"].(map[string]any)["eval_count"])
		}
	}
	assert.Equal(t, []string{"token", "token", "token", "token", "token", "token", "token", "token", "result", "done"}, types)
	assert.Equal(t, ", there was a little girl", text.String())
}

func TestGeneratePromptsFileSequentialStream(t *testing.T) {
	path := filepath.Join(t.TempDir(), "prompts.txt")
	require.NoError(t, os.WriteFile(path, []byte("Once upon a time\n\nThe little dog\n"), 0o644))
	e := genEnv(t)
	require.Equal(t, ExitOK, e.run("generate", "--model", storiesDir, "--prompts-file", path, "-n", "4", "--stream"), e.errOut.String())
	assert.Equal(t, "==> 1: Once upon a time <==\n, there was a\n\n==> 2: The little dog <==\n was a little g\n", e.out.String())
}

func TestGenerateSeededSamplingRepeats(t *testing.T) {
	var outs []string
	for range 2 {
		e := genEnv(t)
		require.Equal(t, ExitOK, e.run("generate", "--model", storiesDir, "-p", "Once upon a time", "-n", "30",
			"--temperature", "1.0", "--top-p", "0.9", "--seed", "7"), e.errOut.String())
		outs = append(outs, e.out.String())
	}
	assert.Equal(t, outs[0], outs[1])
	assert.NotEqual(t, ", there was a little girl named Lily. She loved to play outside in the park.", strings.TrimSpace(outs[0]))
}

func TestGenerateUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"generate", "-p", "x"},
		{"generate", "--model", storiesDir},
		{"generate", "--model", storiesDir, "-p", "x", "--mode", "fast"},
		{"generate", "--model", storiesDir, "-p", "x", "--dtype", "f16"},
		{"generate", "--model", storiesDir, "-p", "x", "--temperature", "-1"},
		{"generate", "--model", storiesDir, "-p", "x", "--top-p", "1.5"},
		{"generate", "--model", storiesDir, "-p", "x", "--max-new-tokens", "0"},
		{"generate", "--model", storiesDir, "-p", "x", "--stop", ""},
		{"generate", "--model", storiesDir, "--prompts-file", "/nonexistent/prompts.txt"},
	} {
		e := genEnv(t)
		assert.Equal(t, ExitUsage, e.run(args...), "%v: %s", args, e.errOut.String())
		assert.Empty(t, e.out.String())
	}
}

func TestGenerateUnsupported(t *testing.T) {
	// No chat template in the stories tokenizer.
	e := genEnv(t)
	assert.Equal(t, ExitUnsupported, e.run("generate", "--model", storiesDir, "-p", "x", "--chat"))
	assert.Contains(t, e.errOut.String(), "chat template")

	// An architecture tputool does not implement.
	dir := t.TempDir()
	for _, name := range []string{"tokenizer.json", "tokenizer_config.json", "model.safetensors"} {
		b, err := os.ReadFile(filepath.Join(storiesDir, name))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), b, 0o644))
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{"architectures":["RwkvForCausalLM"],"model_type":"rwkv"}`), 0o644))
	e = genEnv(t)
	assert.Equal(t, ExitUnsupported, e.run("generate", "--model", dir, "-p", "x"))
	assert.Contains(t, e.errOut.String(), `architecture "RwkvForCausalLM" is not supported`)
	assert.Contains(t, e.errOut.String(), "LlamaForCausalLM")
}

func TestGenerateOptionsParsing(t *testing.T) {
	e := genEnv(t)
	var got *GenerateOptions
	NewCmdGenerate(e.f, func(_ context.Context, o *GenerateOptions) error { got = o; return nil })
	c := NewCmdGenerate(e.f, func(_ context.Context, o *GenerateOptions) error { got = o; return nil })
	c.SetArgs([]string{"--model", "m", "-p", "a", "-p", "b", "--top-k", "5", "--system", "s", "--seed", "3"})
	require.NoError(t, c.Execute())
	assert.Equal(t, []string{"a", "b"}, got.Prompts)
	require.NotNil(t, got.Overrides.TopK)
	assert.Equal(t, 5, *got.Overrides.TopK)
	assert.Nil(t, got.Overrides.Temperature, "an absent flag is not an override")
	assert.Nil(t, got.Overrides.MaxNewTokens)
	assert.True(t, got.Chat, "--system implies --chat")
	require.NotNil(t, got.Overrides.Seed)
	assert.EqualValues(t, 3, *got.Overrides.Seed)
}

func TestGenerateBatchTextIsLabelled(t *testing.T) {
	e := genEnv(t)
	require.Equal(t, ExitOK, e.run("generate", "--model", storiesDir, "-n", "4", "-p", "Once upon a time", "-p", "The little dog"), e.errOut.String())
	assert.Equal(t, "==> 1: Once upon a time <==\n, there was a\n\n==> 2: The little dog <==\n was a little g\n", e.out.String())
}

func TestGenerateFirstTokenKeepsItsSpace(t *testing.T) {
	e := genEnv(t)
	require.Equal(t, ExitOK, e.run("generate", "--model", storiesDir, "--json", "--stream", "-n", "3", "-p", "The little dog"), e.errOut.String())
	var first map[string]any
	require.NoError(t, json.Unmarshal(bytes.SplitN(e.out.Bytes(), []byte("\n"), 2)[0], &first))
	assert.Equal(t, " was", first["text"], "the first token event keeps the leading space of ▁was")
}

// TestGeneratePromptFromStdin: stdin is the prompt when it is not a
// terminal and no --prompt is given, and with -p -; on a terminal without
// --prompt it is a usage error.
func TestGeneratePromptFromStdin(t *testing.T) {
	for _, args := range [][]string{{}, {"-p", "-"}} {
		for _, tty := range []bool{false, true} {
			e := genEnv(t)
			e.f.IOStreams.SetStdoutTTY(tty)
			e.f.IOStreams.In = strings.NewReader("Once upon a time\n")
			code := e.run(append([]string{"generate", "--model", storiesDir, "-n", "4"}, args...)...)
			require.Equal(t, ExitOK, code, e.errOut.String())
			assert.Equal(t, ", there was a\n", e.out.String(), "%v", args)
		}
	}
	e := genEnv(t)
	e.f.IOStreams.SetStdinTTY(true)
	assert.Equal(t, ExitUsage, e.run("generate", "--model", storiesDir))
	assert.Contains(t, e.errOut.String(), "pipe the prompt on stdin")

	e = genEnv(t)
	e.f.IOStreams.In = strings.NewReader("  \n")
	assert.Equal(t, ExitUsage, e.run("generate", "--model", storiesDir))
	assert.Contains(t, e.errOut.String(), "stdin is empty")

	e = genEnv(t)
	assert.Equal(t, ExitUsage, e.run("generate", "--model", storiesDir, "-p", "-", "--prompts-file", "-"))
	assert.Contains(t, e.errOut.String(), "stdin can be read once")
}

func TestSplitPrompts(t *testing.T) {
	assert.Equal(t, []string{"a", "b c"}, splitPrompts("a\n\nb c\r\n"))
	assert.Equal(t, []string{"first,\non two lines", "second"}, splitPrompts("first,\non two lines\n---\nsecond\n"))
	assert.Equal(t, []string{"x\n---y", "z\n\nw"}, splitPrompts("x\n---y\x00z\n\nw\n\x00\n"))
}

func TestGeneratePromptsFileMultiline(t *testing.T) {
	e := genEnv(t)
	e.f.IOStreams.In = strings.NewReader("Once upon\na time\n---\nThe little dog\n")
	require.Equal(t, ExitOK, e.run("generate", "--model", storiesDir, "--json", "-n", "2", "--prompts-file", "-"), e.errOut.String())
	var res []jsonResult
	require.NoError(t, json.Unmarshal(e.out.Bytes(), &res))
	require.Len(t, res, 2)
}

// TestGenerateSeeds: without --seed, sampling draws a seed, reported in
// --json and under -v; passing it back repeats the text exactly.
func TestGenerateSeeds(t *testing.T) {
	type seeded struct {
		Text string `json:"text"`
		Seed uint64 `json:"seed"`
	}
	runOnce := func(extra ...string) seeded {
		e := genEnv(t)
		args := append([]string{"generate", "--model", storiesDir, "--json", "-p", "Once upon a time", "-n", "20", "--temperature", "1"}, extra...)
		require.Equal(t, ExitOK, e.run(args...), e.errOut.String())
		var res []seeded
		require.NoError(t, json.Unmarshal(e.out.Bytes(), &res), e.out.String())
		return res[0]
	}
	a, b := runOnce(), runOnce()
	assert.NotEqual(t, a.Seed, b.Seed, "two runs without --seed drew the same seed")
	again := runOnce("--seed", strconv.FormatUint(a.Seed, 10))
	assert.Equal(t, a, again, "--seed with the reported seed repeats the run")

	e := genEnv(t)
	require.Equal(t, ExitOK, e.run("generate", "-v", "--model", storiesDir, "-p", "Once", "-n", "2", "--temperature", "1", "--seed", "42"), e.errOut.String())
	assert.Contains(t, e.errOut.String(), "sampling with seed 42")
	assert.Contains(t, e.errOut.String(), "prefill: 8 tokens in")
	assert.Contains(t, e.errOut.String(), "cpu ("+tpu.DefaultCPUBackend+" backend; asked for auto)")
}

// TestNotAModelFolder: a directory without config.json or model_index.json
// is refused before anything walks it, with one message and exit 2, for
// every model command.
func TestNotAModelFolder(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "README.md"), []byte("docs"), 0o644))
	require.NoError(t, os.Symlink("/nonexistent/target", filepath.Join(dir, "dangling")))
	for _, args := range [][]string{
		{"generate", "--model", dir, "-p", "x"},
		{"chat", "--model", dir},
		{"diffuse", "--model", dir, "-p", "x"},
		{"inspect", "--model", dir},
	} {
		e := genEnv(t)
		assert.Equal(t, ExitUsage, e.run(args...), "%v: %s", args, e.errOut.String())
		assert.Contains(t, e.errOut.String(), "not a model folder: no config.json or model_index.json", "%v", args)
	}
}

// -v says which checkpoint tensors the model skips (a multimodal
// checkpoint's vision tower run text-only), by reason, with their count
// and size.
func TestGenerateVerboseSkipped(t *testing.T) {
	c := lmckpt.Config{Vocab: 512, Hidden: 32, Intermediate: 48, Layers: 2, Heads: 4, KVHeads: 2, HeadDim: 16, Eps: 1e-6, Gemma: true, Tied: true}
	c.Window = []int{4, 0}
	c.RopeTheta = []float64{10000, 1e6}
	cfg, ts, err := lmckpt.Tiny{Arch: "Gemma3ForCausalLM", Config: c, Seed: 5}.Gemma3Multimodal(lmckpt.Gemma3Saved)
	require.NoError(t, err)
	dir := t.TempDir()
	require.NoError(t, lmckpt.WriteCheckpoint(dir, cfg, ts))
	for _, f := range []string{"tokenizer.json", "tokenizer_config.json"} {
		b, err := os.ReadFile(filepath.Join(storiesDir, f))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, f), b, 0o644))
	}
	e := genEnv(t)
	require.Equal(t, ExitOK, e.run("generate", "-v", "--model", dir, "-p", "Once", "-n", "1"), e.errOut.String())
	assert.Regexp(t, `not loaded: \d+ tensors, .* \(.*vision.*\)`, e.errOut.String())
}
