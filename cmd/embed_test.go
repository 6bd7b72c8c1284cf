package cmd

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/loader"
	"github.com/tputool/tputool/loader/safetensors"
	"github.com/tputool/tputool/loader/tokenizer"
)

// embedJSON runs embed with --json and returns its vectors.
func embedJSON(t *testing.T, args ...string) []embedResult {
	t.Helper()
	e := genEnv(t)
	code := e.run(append([]string{"--json", "embed", "-m", storiesDir}, args...)...)
	require.Equal(t, ExitOK, code, e.errOut.String())
	var res []embedResult
	require.NoError(t, json.Unmarshal(e.out.Bytes(), &res), e.out.String())
	return res
}

func norm(v []float32) float64 {
	var ss float64
	for _, x := range v {
		ss += float64(x) * float64(x)
	}
	return math.Sqrt(ss)
}

// TestEmbed: unit vectors of the model's hidden size, in input order
// whatever the grouping (an input alone gives the vector it gets among
// others, shorter and longer, padded), --dimensions cuts and normalizes
// again, --raw leaves the pooled states as they are.
func TestEmbed(t *testing.T) {
	inputs := []string{"Once upon a time there was a little girl", "a cat", "The dog ran to the park and played with a ball"}
	var args []string
	for _, p := range inputs {
		args = append(args, "-p", p)
	}
	all := embedJSON(t, args...)
	require.Len(t, all, 3)
	for i, r := range all {
		assert.Equal(t, i, r.Index)
		assert.Len(t, r.Embedding, 64)
		assert.InDelta(t, 1, norm(r.Embedding), 1e-5)
		assert.Positive(t, r.Tokens)
	}
	alone := embedJSON(t, "-p", inputs[1])
	for j := range alone[0].Embedding {
		assert.InDelta(t, all[1].Embedding[j], alone[0].Embedding[j], 1e-5, "value %d", j)
	}
	cut := embedJSON(t, "-p", inputs[1], "--dimensions", "8")
	require.Len(t, cut[0].Embedding, 8)
	assert.InDelta(t, 1, norm(cut[0].Embedding), 1e-5)
	s := norm(all[1].Embedding[:8])
	for j, x := range cut[0].Embedding {
		assert.InDelta(t, float64(all[1].Embedding[j])/s, x, 1e-5)
	}
	raw := embedJSON(t, "-p", inputs[1], "--raw")
	assert.Greater(t, math.Abs(norm(raw[0].Embedding)-1), 0.01, "the raw hidden states are not unit length")
	mean := embedJSON(t, "-p", inputs[1], "--pooling", "mean")
	assert.NotEqual(t, alone[0].Embedding, mean[0].Embedding)
}

// TestEmbedText: one line per input of space-separated values; stdin is
// an input.
func TestEmbedText(t *testing.T) {
	e := genEnv(t)
	e.f.IOStreams.In = strings.NewReader("a cat\n")
	require.Equal(t, ExitOK, e.run("embed", "-m", storiesDir), e.errOut.String())
	lines := strings.Split(strings.TrimSuffix(e.out.String(), "\n"), "\n")
	require.Len(t, lines, 1)
	fields := strings.Fields(lines[0])
	require.Len(t, fields, 64)
	for _, f := range fields {
		_, err := strconv.ParseFloat(f, 32)
		require.NoError(t, err, f)
	}
}

// TestEmbedBadFlags: usage errors (exit 2) naming the flag.
func TestEmbedBadFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"embed", "-p", "a"}, "--model is required"},
		{[]string{"embed", "-m", storiesDir, "-p", "a", "--pooling", "max"}, `--pooling "max"`},
		{[]string{"embed", "-m", storiesDir, "-p", "a", "--dimensions", "-1"}, "--dimensions -1"},
		{[]string{"embed", "-m", storiesDir, "-p", "a", "--dimensions", "65"}, "--dimensions 65"},
		{[]string{"embed", "-m", storiesDir, "-p", "a", "--tp", "2"}, "--tp 2"},
		{[]string{"embed", "-m", storiesDir, "-p", strings.Repeat("once upon a time ", 200)}, "positions"},
	} {
		e := genEnv(t)
		assert.Equal(t, ExitUsage, e.run(c.args...), "%v: %s", c.args, e.errOut.String())
		assert.Contains(t, e.errOut.String(), c.want, "%v", c.args)
	}
}

// TestEmbedPoolingDense: a sentence-transformers model with a Dense
// projection after its pooling is refused, even with an explicit
// --pooling: tputool does not apply the projection.
func TestEmbedPoolingDense(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{"model_type":"llama"}`), 0o644))
	require.NoError(t, safetensors.WriteFile(filepath.Join(dir, "model.safetensors"), nil, nil))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "modules.json"), []byte(`[{"path":"","type":"sentence_transformers.models.Transformer"},
		{"path":"1_Pooling","type":"sentence_transformers.models.Pooling"},{"path":"2_Dense","type":"sentence_transformers.models.Dense"}]`), 0o644))
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "1_Pooling"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "1_Pooling", "config.json"), []byte(`{"pooling_mode_mean_tokens":true}`), 0o644))
	ref, err := loader.ParseRef(dir)
	require.NoError(t, err)
	m, err := loader.ResolveRef(context.Background(), ref, loader.Options{})
	require.NoError(t, err)
	for _, flag := range []string{"auto", "mean", "last"} {
		_, err := resolvePooling(flag, m, false)
		assert.ErrorIs(t, err, errs.ErrUnsupported, flag)
		assert.ErrorContains(t, err, "Dense", flag)
	}
}

// TestEmbedMaxSeqLength: an input longer than sentence_bert_config.json's
// max_seq_length is cut to it as sentence-transformers cuts it (the
// content; the <s> and </s> the tokenizer's post-processor adds kept),
// even one beyond the model's positions.
func TestEmbedMaxSeqLength(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"config.json", "generation_config.json", "model.safetensors", "special_tokens_map.json"} {
		b, err := os.ReadFile(filepath.Join(storiesDir, f))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, f), b, 0o644))
	}
	b, err := os.ReadFile(filepath.Join(storiesDir, "tokenizer.json"))
	require.NoError(t, err)
	var tj map[string]any
	require.NoError(t, json.Unmarshal(b, &tj))
	special := func(s string) map[string]any {
		return map[string]any{"SpecialToken": map[string]any{"id": s, "type_id": 0}}
	}
	tj["post_processor"] = map[string]any{"type": "TemplateProcessing",
		"single": []any{special("<s>"), map[string]any{"Sequence": map[string]any{"id": "A", "type_id": 0}}, special("</s>")},
		"pair":   []any{},
		"special_tokens": map[string]any{
			"<s>":  map[string]any{"id": "<s>", "ids": []int{1}, "tokens": []string{"<s>"}},
			"</s>": map[string]any{"id": "</s>", "ids": []int{2}, "tokens": []string{"</s>"}}}}
	b, err = json.Marshal(tj)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "tokenizer.json"), b, 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "sentence_bert_config.json"), []byte(`{"max_seq_length":8,"do_lower_case":false}`), 0o644))

	run := func(args ...string) []embedResult {
		t.Helper()
		e := genEnv(t)
		require.Equal(t, ExitOK, e.run(append([]string{"--json", "embed", "-m", dir}, args...)...), e.errOut.String())
		var res []embedResult
		require.NoError(t, json.Unmarshal(e.out.Bytes(), &res), e.out.String())
		return res
	}
	// The long input keeps its first 6 content tokens: the reference is
	// their text, which encodes to <s>, exactly them and </s>.
	tok, err := tokenizer.LoadDir(dir)
	require.NoError(t, err)
	longIDs, err := tok.Encode(strings.Repeat("once upon a time ", 200), true)
	require.NoError(t, err)
	ref := tok.Decode(longIDs[1:7], true)
	refIDs, err := tok.Encode(ref, true)
	require.NoError(t, err)
	require.Equal(t, append(longIDs[:7:7], 2), refIDs, "%q", ref)
	long := run("-p", strings.Repeat("once upon a time ", 200))
	short := run("-p", ref)
	require.Equal(t, 8, long[0].Tokens)
	assert.InDeltaSlice(t, short[0].Embedding, long[0].Embedding, 1e-5)
}
