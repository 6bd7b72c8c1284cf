package cmd

import (
	"encoding/json"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tputool/tputool/loader/tokenizer"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
	"github.com/tputool/tputool/pipeline/testkit/lmref"
)

// seqClsModel writes a tiny decoder cross-encoder (arch, one of the
// *ForSequenceClassification lmckpt writes, with labels) with the
// stories model's tokenizer (512 ids). noPair gives the tokenizer what
// Qwen's has: a ByteLevel post-processor and no add_bos_token, so no pair
// form. It returns the folder and the model's description.
func seqClsModel(t *testing.T, arch string, labels int, noPair bool) (string, lmckpt.Tiny) {
	t.Helper()
	c := lmckpt.Config{Vocab: 512, Hidden: 32, Intermediate: 48, Layers: 2, Heads: 4, KVHeads: 2, HeadDim: 16, Eps: 1e-6,
		QKNorm: strings.HasPrefix(arch, "Qwen3"), Tied: true, RopeTheta: []float64{1e6, 1e6}, Window: []int{0, 0}}
	tiny := lmckpt.Tiny{Arch: arch, Config: c, Seed: 21, Labels: labels, MaxPositions: 48}
	dir := t.TempDir()
	require.NoError(t, tiny.Write(dir))
	for _, f := range []string{"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"} {
		b, err := os.ReadFile(filepath.Join(storiesDir, f))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, f), b, 0o644))
	}
	if noPair {
		editJSON(t, filepath.Join(dir, "tokenizer.json"), func(v map[string]any) {
			v["post_processor"] = map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false}
		})
		editJSON(t, filepath.Join(dir, "tokenizer_config.json"), func(v map[string]any) {
			delete(v, "add_bos_token")
			delete(v, "add_eos_token")
		})
		tok, err := tokenizer.LoadDir(dir)
		require.NoError(t, err)
		require.False(t, tok.HasPairTemplate(), "the Qwen-like tokenizer has no pair form")
	}
	return dir, tiny
}

// seqClsWant is each document's relevance score against query under
// the float64 reference (the sigmoid of lmref.Score, transformers'
// GenericForSequenceClassification on the unpadded pair), the pair's ids
// being pair(query ids, document ids) (each text encoded alone, without
// special tokens), and its tokens.
func seqClsWant(t *testing.T, dir string, tiny lmckpt.Tiny, query string, docs []string, pair func(q, d []int) []int) (scores []float64, tokens int) {
	t.Helper()
	tok, err := tokenizer.LoadDir(dir)
	require.NoError(t, err)
	ref, err := lmref.Load(dir, tiny.Config)
	require.NoError(t, err)
	q, err := tok.Encode(query, false)
	require.NoError(t, err)
	for _, d := range docs {
		di, err := tok.Encode(d, false)
		require.NoError(t, err)
		ids := pair(q, di)
		tokens += len(ids)
		scores = append(scores, 1/(1+math.Exp(-ref.Score(ids)[0])))
	}
	return scores, tokens
}

// concatPair is a pair as tokenizers encodes it without a pair form:
// the query's tokens, then the document's, cut longest first to maxLen
// (here the query is always the shorter and stays whole).
func concatPair(maxLen int) func(q, d []int) []int {
	return func(q, d []int) []int {
		if len(q)+len(d) > maxLen {
			d = d[:maxLen-len(q)]
		}
		return append(append([]int(nil), q...), d...)
	}
}

var seqClsDocs = []string{
	"Once upon a time there was a little girl.",
	"The cat sat on the mat.",
	// Longer than the model's 48 positions with the query: cut.
	strings.Repeat("Lily went to the park with her mom and they played in the sun all day. ", 4),
	"A dog.",
}

// TestRerankCausal: `tputool rerank` on a Qwen3ForSequenceClassification
// whose tokenizer has no pair form (as Qwen's) scores each document as
// the float64 reference does on the query's tokens followed by the
// document's (tokenizers' pair without a pair form), the long document
// cut to the model's positions, best first; on a
// LlamaForSequenceClassification with the stories tokenizer's pair
// template, on <s> query <s> document. `tputool generate` refuses the
// classifier, exit 3.
func TestRerankCausal(t *testing.T) {
	query := "Who went to the park?"
	for _, c := range []struct {
		arch   string
		noPair bool
		pair   func(q, d []int) []int
	}{
		{"Qwen3ForSequenceClassification", true, concatPair(48)},
		{"LlamaForSequenceClassification", false, func(q, d []int) []int {
			if 2+len(q)+len(d) > 48 {
				d = d[:48-2-len(q)]
			}
			return append(append(append([]int{1}, q...), 1), d...)
		}},
	} {
		t.Run(c.arch, func(t *testing.T) {
			dir, tiny := seqClsModel(t, c.arch, 1, c.noPair)
			want, _ := seqClsWant(t, dir, tiny, query, seqClsDocs, c.pair)
			args := []string{"--json", "rerank", "-m", dir, "--query", query}
			for _, d := range seqClsDocs {
				args = append(args, "-d", d)
			}
			e := genEnv(t)
			require.Equal(t, ExitOK, e.run(args...), e.errOut.String())
			var res []rerankResult
			require.NoError(t, json.Unmarshal(e.out.Bytes(), &res), e.out.String())
			require.Len(t, res, len(seqClsDocs))
			for k, r := range res {
				assert.InDelta(t, want[r.Index], r.RelevanceScore, 1e-5, "document %d", r.Index)
				assert.Equal(t, seqClsDocs[r.Index], r.Document)
				if k > 0 {
					assert.GreaterOrEqual(t, res[k-1].RelevanceScore, r.RelevanceScore, "best first")
				}
			}

			e = genEnv(t)
			assert.Equal(t, ExitUnsupported, e.run("generate", "-m", dir, "--prompt", "Once upon a time", "--max-new-tokens", "4"), e.errOut.String())
			assert.Contains(t, e.errOut.String(), "is a sequence classifier")
		})
	}
	// A classifier of two labels is not a reranker.
	dir, _ := seqClsModel(t, "Qwen3ForSequenceClassification", 2, true)
	e := genEnv(t)
	assert.Equal(t, ExitUnsupported, e.run("rerank", "-m", dir, "--query", "q", "-d", "a"), e.errOut.String())
	assert.Contains(t, e.errOut.String(), "2 labels")
}

// TestServeRerankCausal: serve on a Qwen3ForSequenceClassification whose
// tokenizer has no pair form serves /v1/rerank (reranking only, no
// slots, the decoders' context bounded by the model's 48 positions):
// each document's relevance_score is the reference's on the query's
// tokens followed by the document's, best first, usage counting the
// pairs' tokens; the generating endpoints answer 400.
func TestServeRerankCausal(t *testing.T) {
	dir, tiny := seqClsModel(t, "Qwen3ForSequenceClassification", 1, true)
	query := "Who went to the park?"
	want, tokens := seqClsWant(t, dir, tiny, query, seqClsDocs, concatPair(48))
	addr, out, stop := serveModelInProcess(t, "--model", dir, "--served-model-name", "qwen-reranker")
	url := "http://" + addr

	var listening map[string]any
	require.NoError(t, json.Unmarshal([]byte(strings.SplitN(out(), "\n", 2)[0]), &listening), out())
	assert.Equal(t, true, listening["rerank"])
	assert.Equal(t, false, listening["embeddings_only"])
	assert.EqualValues(t, 0, listening["slots"])
	assert.EqualValues(t, 48, listening["max_context"])

	post := func(path, body string) (int, []byte) {
		t.Helper()
		resp, err := http.Post(url+path, "application/json", strings.NewReader(body))
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, b
	}
	in, err := json.Marshal(map[string]any{"model": "qwen-reranker", "query": query, "documents": seqClsDocs})
	require.NoError(t, err)
	status, body := post("/v1/rerank", string(in))
	require.Equal(t, http.StatusOK, status, string(body))
	var resp struct {
		Usage struct {
			TotalTokens int `json:"total_tokens"`
		} `json:"usage"`
		Results []struct {
			Index          int     `json:"index"`
			RelevanceScore float64 `json:"relevance_score"`
		} `json:"results"`
	}
	require.NoError(t, json.Unmarshal(body, &resp), string(body))
	require.Len(t, resp.Results, len(seqClsDocs))
	assert.Equal(t, tokens, resp.Usage.TotalTokens)
	for k, r := range resp.Results {
		assert.InDelta(t, want[r.Index], r.RelevanceScore, 1e-5, "document %d", r.Index)
		if k > 0 {
			assert.GreaterOrEqual(t, resp.Results[k-1].RelevanceScore, r.RelevanceScore, "best first")
		}
	}
	status, body = post("/v1/completions", `{"model":"qwen-reranker","prompt":"Once upon a time","max_tokens":2}`)
	assert.Equal(t, http.StatusBadRequest, status, string(body))
	require.Equal(t, ExitOK, stop())
}

// TestRerankCausalRefusesScoresThatCannotFit: a decoder cross-encoder's
// pairs run in steps of up to 512 tokens attending over the whole pair,
// and the memory check counts those scores (compile.EmbedScoreBytes), not
// only the KV caches: a pair of about 2,300 tokens needs more than the
// fake machine's 16 MiB (4 heads·512·T·4 bytes), and is refused before
// anything runs; a short one runs.
func TestRerankCausalRefusesScoresThatCannotFit(t *testing.T) {
	dir, _ := seqClsModel(t, "Qwen3ForSequenceClassification", 1, true)
	editJSON(t, filepath.Join(dir, "config.json"), func(v map[string]any) { v["max_position_embeddings"] = 8192 })
	editJSON(t, filepath.Join(dir, "tokenizer_config.json"), func(v map[string]any) { v["model_max_length"] = 8192 })
	long := strings.Repeat("the park ", 1200)
	e := genEnv(t)
	require.Equal(t, ExitUsage, e.run("rerank", "-m", dir, "--query", "Who went to the park?", "-d", long), e.errOut.String())
	assert.Contains(t, e.errOut.String(), "attention scores in f32) needs")
	assert.Contains(t, e.errOut.String(), "more than this machine's 16.0 MiB")
	e = genEnv(t)
	require.Equal(t, ExitOK, e.run("rerank", "-m", dir, "--query", "Who went to the park?", "-d", "the park"), e.errOut.String())
}
