package cmd

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tputool/tputool/pipeline/bench"
	"github.com/tputool/tputool/pipeline/testkit/bertref"
)

// tinyBert is a BERT encoder of 16 positions (bertModel: mean pooling).
func tinyBert(t *testing.T) string {
	c := bertref.Config{Vocab: bertref.FullTokenizerVocab, Hidden: 16, Layers: 1, Heads: 2, Intermediate: 24, MaxPositions: 16, TypeVocab: 2, Eps: 1e-12}
	return bertModel(t, c, "mean", 16)
}

// benchJSON runs bench with --json and decodes the report.
func benchJSON(t *testing.T, args ...string) (*bench.Report, *testEnv) {
	t.Helper()
	e := benchEnv(t)
	code := e.run(append([]string{"bench", "--json"}, args...)...)
	require.Equal(t, ExitOK, code, e.errOut.String())
	var rep bench.Report
	require.NoError(t, json.Unmarshal(e.out.Bytes(), &rep), e.out.String())
	return &rep, e
}

// checkEmbedRows checks rows of the embed task measured with benchEnv's
// clock (1 ms a reading, so each call takes exactly 1 ms).
func checkEmbedRows(t *testing.T, rows []bench.Row, labels []string, repeat int) {
	t.Helper()
	require.Len(t, rows, len(labels))
	var got []string
	for _, r := range rows {
		got = append(got, r.Label())
		assert.Equal(t, bench.TaskEmbed, r.Task)
		assert.Equal(t, "p"+strconv.Itoa(r.PromptLen), r.Shape)
		assert.Equal(t, 0.002, r.LoadS, "checkpoint + runner: 1 ms each")
		assert.Equal(t, &bench.Stat{Median: 1, Min: 1, Max: 1, N: repeat}, r.EmbedMs)
		rate := float64(r.Batch*r.PromptLen) / 0.001
		assert.Equal(t, &bench.Stat{Median: rate, Min: rate, Max: rate, N: repeat}, r.EmbedTokS)
		assert.GreaterOrEqual(t, r.FirstRunS, 0.001)
		assert.Positive(t, r.CompileS, "the first call compiles")
		assert.Positive(t, r.CacheMisses)
		assert.Zero(t, r.Recompiles)
		assert.Nil(t, r.TTFTMs)
		assert.Nil(t, r.ITLMs)
		assert.Zero(t, r.GenLen)
		if r.Mode == bench.ModeCompiled {
			require.NotNil(t, r.SpeedupVsEager, r.Label())
			assert.Equal(t, 1.0, *r.SpeedupVsEager, "the same 1 ms")
		} else {
			assert.Nil(t, r.SpeedupVsEager)
		}
	}
	assert.Equal(t, labels, got)
}

// TestBenchEmbedEncoder: bench on a BERT encoder, which does not generate,
// measures its embeddings without being asked (--task embed), mean-pooled,
// in both modes; the default --prompt-len is clamped to its 16 positions.
func TestBenchEmbedEncoder(t *testing.T) {
	dir := tinyBert(t)
	rep, e := benchJSON(t, "-m", dir, "--batch", "1,3", "--prompt-len", "8", "--repeat", "2")
	h := rep.Header
	assert.Equal(t, bench.SchemaVersion, rep.SchemaVersion)
	assert.Equal(t, "embed", h.Task, "from the model: an encoder")
	assert.Equal(t, []string{"embed", "mean"}, []string{h.Call, h.Pooling})
	assert.Equal(t, "float32", h.DType)
	assert.Equal(t, []int{2, 1}, []int{h.Repeat, h.Warmup})
	checkEmbedRows(t, rep.Rows, []string{"eager b1 p8", "eager b3 p8", "compiled b1 p8", "compiled b3 p8"}, 2)
	// Compiled: one executable (the whole step), compiled at the first of
	// the 4 calls.
	assert.Equal(t, []int{3, 1}, []int{rep.Rows[2].CacheHits, rep.Rows[2].CacheMisses})
	rows := 0
	for _, line := range strings.Split(strings.TrimSpace(e.errOut.String()), "\n") {
		var ev map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &ev), line)
		if ev["type"] == "bench_row" {
			rows++
		}
	}
	assert.Equal(t, 4, rows)

	// The default 512 is clamped to the model's positions, with a note;
	// --task embed may be given; md prints the embed columns and what ran.
	e = benchEnv(t)
	require.Equal(t, ExitOK, e.run("bench", "-m", dir, "--task", "embed", "--mode", "compiled", "--batch", "2", "--repeat", "1", "--warmup", "0"), e.errOut.String())
	out := e.out.String()
	assert.Contains(t, out, "| embed "+dir+" |")
	assert.Contains(t, out, "dtype float32, call embed, pooling mean |")
	assert.Regexp(t, `\| +mode +\| batch \| shape \| load s \| compile s \| hits/misses \| embed tok/s \| embed ms \| compiled vs eager \|`, out)
	assert.Contains(t, out, "| compiled | 2     | p16   |")
	assert.Contains(t, out, "| 32000.0     | 1.00     | -")
	assert.Contains(t, e.errOut.String(), "note: the model has 16 positions: using --prompt-len 16")
	assert.Contains(t, e.errOut.String(), "compiled b2 p16: embed 32000.0 tok/s, 1.00 ms; load")
}

// TestBenchEmbedCrossEncoder: on a cross-encoder bench runs the
// classifier's scores, as rerank does (the first token's hidden states).
func TestBenchEmbedCrossEncoder(t *testing.T) {
	c := bertref.Config{Vocab: bertref.FullTokenizerVocab, Hidden: 16, Layers: 1, Heads: 2, Intermediate: 24, MaxPositions: 24, TypeVocab: 2, Eps: 1e-12, Labels: 1, Prefix: "bert."}
	dir := crossEncoderModel(t, c, false)
	rep, _ := benchJSON(t, "-m", dir, "--batch", "2", "--prompt-len", "5,24", "--repeat", "3", "--warmup", "0")
	assert.Equal(t, "embed", rep.Header.Task)
	assert.Equal(t, []string{"score", "cls"}, []string{rep.Header.Call, rep.Header.Pooling})
	checkEmbedRows(t, rep.Rows, []string{"eager b2 p5", "eager b2 p24", "compiled b2 p5", "compiled b2 p24"}, 3)
	// Compiled: the whole step and the classifier head, each compiled at
	// the first of the 4 calls (an embedding's step alone: 1 miss).
	assert.Equal(t, []int{6, 2}, []int{rep.Rows[2].CacheHits, rep.Rows[2].CacheMisses})
}

// TestBenchEmbedDecoder: --task embed on a decoder runs its final hidden
// states pooled on the last token (Qwen3-Embedding's pooling).
func TestBenchEmbedDecoder(t *testing.T) {
	rep, _ := benchJSON(t, "-m", storiesDir, "--task", "embed", "--batch", "2", "--prompt-len", "6", "--repeat", "1")
	assert.Equal(t, []string{"embed", "embed", "last"}, []string{rep.Header.Task, rep.Header.Call, rep.Header.Pooling})
	checkEmbedRows(t, rep.Rows, []string{"eager b2 p6", "compiled b2 p6"}, 1)
	// A decoder's inputs run through KV caches, in the dtype asked for.
	rep, _ = benchJSON(t, "-m", storiesDir, "--task", "embed", "--batch", "2", "--prompt-len", "6", "--repeat", "1", "--kv-cache-dtype", "int8")
	assert.Equal(t, "int8", rep.Header.KVCacheDType)
	checkEmbedRows(t, rep.Rows, []string{"eager b2 p6", "compiled b2 p6"}, 1)
}

// TestBenchEmbedRefusals: the flags of other tasks are usage errors naming
// the flag, whether the task is given or comes from the model, as are an
// input beyond the model's positions and a batch whose buffers cannot fit
// in the (fake, 16 MiB) machine's memory, before anything runs.
func TestBenchEmbedRefusals(t *testing.T) {
	dir := tinyBert(t)
	for _, flag := range [][]string{{"--gen-len", "3"}, {"--steps", "2"}, {"--size", "64x64"}, {"--variant", "fp16"},
		{"--tp", "1"}, {"--dp", "1"}, {"--host-argmax"}, {"--experts", "host"}} {
		for _, args := range [][]string{{"bench", "-m", dir}, {"bench", "-m", storiesDir, "--task", "embed"}} {
			e := benchEnv(t)
			args = append(append(args, "--repeat", "1"), flag...)
			assert.Equal(t, ExitUsage, e.run(args...), "%v: %s", args, e.errOut.String())
			assert.Contains(t, e.errOut.String(), flag[0]+" does not apply to --task embed", "%v", args)
			assert.Empty(t, e.out.String())
		}
	}
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"--prompt-len", "17"}, "InputLen 17: exceeds the model's 16 positions"},
		{[]string{"--batch", "1,100000", "--prompt-len", "16"}, "--batch 100000 --prompt-len 16: the attention scores of 100000 input(s) of 16 tokens (2 heads, f32) needs 195.3 MiB, more than this machine's 16.0 MiB of memory; lower --batch or --prompt-len"},
	} {
		e := benchEnv(t)
		args := append([]string{"bench", "-m", dir, "--repeat", "1"}, tc.args...)
		assert.Equal(t, ExitUsage, e.run(args...), "%v: %s", args, e.errOut.String())
		assert.Contains(t, e.errOut.String(), tc.msg)
		assert.NotContains(t, e.errOut.String(), "eager b1", "nothing ran")
		assert.Empty(t, e.out.String())
	}
}
