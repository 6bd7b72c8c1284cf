package cmd

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tputool/tputool/compile"
	"github.com/tputool/tputool/loader/tokenizer"
	"github.com/tputool/tputool/pipeline/perplexity"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
	"github.com/tputool/tputool/pipeline/testkit/refcheck"
)

const perplexityText = "Once upon a time there was a little girl named Lily. She loved to play outside in the park with her friends. One day she found a big red ball."

// perplexityJSON runs perplexity with --json and returns its result.
func perplexityJSON(t *testing.T, args ...string) perplexityResult {
	t.Helper()
	e := genEnv(t)
	code := e.run(append([]string{"--json", "perplexity", "-m", storiesDir}, args...)...)
	require.Equal(t, ExitOK, code, e.errOut.String())
	var res perplexityResult
	require.NoError(t, json.Unmarshal(e.out.Bytes(), &res), e.out.String())
	return res
}

// refPerplexity is the perplexity of text under the stories model with
// the windows of context and stride, each token's log-probability taken
// from the logits Prefill gives after its window's tokens before it
// (the path generation takes), log-softmaxed here in float64.
func refPerplexity(t *testing.T, text string, context, stride int) (nll float64, scored int) {
	tok, err := tokenizer.LoadDir(storiesDir)
	require.NoError(t, err)
	ids, err := tok.Encode(text, true)
	require.NoError(t, err)
	l, err := lmckpt.Load(storiesDir)
	require.NoError(t, err)
	defer l.Close()
	r, err := compile.NewRunner(refcheck.GoBackend(t), l, compile.Options{Mode: compile.Compiled})
	require.NoError(t, err)
	defer r.Close()
	var sum float64
	for _, w := range perplexity.Windows(len(ids), context, stride) {
		for p := w.End - w.Scored; p < w.End; p++ {
			st := r.NewState()
			logits, err := st.Prefill([][]int{ids[w.Begin:p]}, 1)
			st.Release()
			require.NoError(t, err)
			mx := math.Inf(-1)
			for _, v := range logits[0] {
				mx = math.Max(mx, float64(v))
			}
			var s float64
			for _, v := range logits[0] {
				s += math.Exp(float64(v) - mx)
			}
			sum -= float64(logits[0][ids[p]]) - mx - math.Log(s)
			scored++
		}
	}
	return sum / float64(scored), scored
}

// TestPerplexity: the perplexity, its NLL, bits per byte and word
// perplexity are those of each token's log-probability after its
// window's tokens before it, taken from generation's own logits, for
// disjoint-ish windows, overlapping ones batched together, and one
// window holding the whole text; the text from --file and stdin gives
// the same as --text.
func TestPerplexity(t *testing.T) {
	for _, c := range []struct{ context, stride, batch int }{{8, 7, 1}, {12, 4, 3}, {0, 0, 1}} {
		args := []string{"--text", perplexityText, "--batch", strconv.Itoa(c.batch)}
		if c.context > 0 {
			args = append(args, "--context", strconv.Itoa(c.context), "--stride", strconv.Itoa(c.stride))
		}
		res := perplexityJSON(t, args...)
		context, stride := c.context, c.stride
		if context == 0 {
			context, stride = 512, 256 // the stories model has 512 positions
		}
		wantNLL, scored := refPerplexity(t, perplexityText, context, stride)
		assert.Equal(t, scored, res.Scored)
		assert.Equal(t, res.Tokens-1, res.Scored)
		assert.Equal(t, context, res.Context)
		assert.Equal(t, stride, res.Stride)
		assert.InDelta(t, wantNLL, res.NLL, 1e-4, "context %d stride %d", context, stride)
		assert.InDelta(t, math.Exp(wantNLL), res.Perplexity, 1e-4*res.Perplexity)
		total := wantNLL * float64(scored)
		assert.InDelta(t, total/math.Ln2/float64(len(perplexityText)), res.BitsPerByte, 1e-4)
		assert.InDelta(t, math.Exp(total/float64(len(strings.Fields(perplexityText)))), res.WordPerplexity, 1e-3*res.WordPerplexity)
		assert.Positive(t, res.PerplexityStderr)
		assert.Less(t, res.MinLogprob, 0.0)
	}

	text := perplexityJSON(t, "--text", perplexityText, "--context", "16")
	file := filepath.Join(t.TempDir(), "text.txt")
	require.NoError(t, os.WriteFile(file, []byte(perplexityText), 0o644))
	assert.Equal(t, text.Perplexity, perplexityJSON(t, "--file", file, "--context", "16").Perplexity)
	e := genEnv(t)
	e.f.IOStreams.In = strings.NewReader(perplexityText)
	require.Equal(t, ExitOK, e.run("--json", "perplexity", "-m", storiesDir, "--context", "16"), e.errOut.String())
	var piped perplexityResult
	require.NoError(t, json.Unmarshal(e.out.Bytes(), &piped))
	assert.Equal(t, text.Perplexity, piped.Perplexity)

	// The text output names the figures.
	e = genEnv(t)
	require.Equal(t, ExitOK, e.run("perplexity", "-m", storiesDir, "--text", perplexityText, "--context", "16"), e.errOut.String())
	assert.Contains(t, e.out.String(), "perplexity       ")
	assert.Contains(t, e.out.String(), "bits per byte")
}

// TestPerplexityErrors: bad flags and inputs are usage errors naming
// what was wrong; a model without a language-model head is unsupported.
func TestPerplexityErrors(t *testing.T) {
	file := filepath.Join(t.TempDir(), "bin.txt")
	require.NoError(t, os.WriteFile(file, []byte{0xff, 0xfe, 'a'}, 0o644))
	empty := filepath.Join(t.TempDir(), "empty.txt")
	require.NoError(t, os.WriteFile(empty, nil, 0o644))
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--text", "a b", "--file", file}, "not both"},
		{[]string{"--text", "a b", "--context", "1"}, "--context 1"},
		{[]string{"--text", "a b", "--context", "8", "--stride", "8"}, "--stride 8"},
		{[]string{"--text", "a b", "--stride", "-1"}, "--stride -1"},
		{[]string{"--text", "a b", "--batch", "0"}, "--batch 0"},
		{[]string{"--text", "a b", "--context", "4096"}, "beyond the model's 512 positions"},
		{[]string{"--text", "a b", "--tp", "2"}, "--tp 2"},
		{[]string{"--file", file}, "not UTF-8"},
		{[]string{"--file", filepath.Join(t.TempDir(), "missing")}, "--file"},
		{[]string{"--file", empty}, "perplexity needs at least 2"},
	} {
		e := genEnv(t)
		assert.Equal(t, ExitUsage, e.run(append([]string{"perplexity", "-m", storiesDir}, c.args...)...), "%v: %s", c.args, e.errOut.String())
		assert.Contains(t, e.errOut.String(), c.want, "%v", c.args)
	}
	e := genEnv(t)
	e.f.IOStreams.SetStdinTTY(true)
	assert.Equal(t, ExitUsage, e.run("perplexity", "-m", storiesDir))
	assert.Contains(t, e.errOut.String(), "pipe it on stdin")

	defer func(n int64) { maxPerplexityText = n }(maxPerplexityText)
	maxPerplexityText = 8
	e = genEnv(t)
	e.f.IOStreams.In = strings.NewReader(perplexityText)
	assert.Equal(t, ExitUsage, e.run("perplexity", "-m", storiesDir, "--file", "-"))
	assert.Contains(t, e.errOut.String(), "larger than")
	maxPerplexityText = 256 << 20

	// A cross-encoder has no language-model head.
	dir, _ := seqClsModel(t, "Qwen3ForSequenceClassification", 1, false)
	e = genEnv(t)
	assert.Equal(t, ExitUnsupported, e.run("perplexity", "-m", dir, "--text", perplexityText), e.errOut.String())
	assert.Contains(t, e.errOut.String(), "sequence classifier")
}

// TestPerplexityRefusesWhatCannotFit: the memory check counts a step's
// attention scores, hidden states and logits beside the KV caches: four
// windows of 2,048 tokens need more than the fake machine's 16 MiB and
// are refused before anything runs; short windows run.
func TestPerplexityRefusesWhatCannotFit(t *testing.T) {
	dir, _ := seqClsModel(t, "Qwen3ForCausalLM", 0, false)
	editJSON(t, filepath.Join(dir, "config.json"), func(v map[string]any) { v["max_position_embeddings"] = 8192 })
	long := strings.Repeat("the park ", 1200)
	e := genEnv(t)
	require.Equal(t, ExitUsage, e.run("perplexity", "-m", dir, "--text", long, "--context", "2048", "--batch", "4"), e.errOut.String())
	assert.Contains(t, e.errOut.String(), "hidden states and logits in f32) needs")
	assert.Contains(t, e.errOut.String(), "lower --context or --batch")
	e = genEnv(t)
	require.Equal(t, ExitOK, e.run("perplexity", "-m", dir, "--text", long, "--context", "64"), e.errOut.String())
}
