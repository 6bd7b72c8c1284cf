package cmd

import (
	"cmp"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tputool/tputool/loader/tokenizer"
	"github.com/tputool/tputool/pipeline/testkit/bertref"
)

// editJSON rewrites the JSON object in the file at path through edit.
func editJSON(t *testing.T, path string, edit func(map[string]any)) {
	t.Helper()
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	var v map[string]any
	require.NoError(t, json.Unmarshal(raw, &v))
	edit(v)
	raw, err = json.Marshal(v)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, raw, 0o644))
}

// bertModel writes a sentence-transformers BERT model (all-MiniLM's and
// bge's layout: a WordPiece tokenizer, modules.json with Pooling by mode
// and Normalize, max_seq_length maxSeq) and returns its folder.
func bertModel(t *testing.T, c bertref.Config, mode string, maxSeq int) string {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, bertref.Write(dir, c, 11))
	require.NoError(t, bertref.WriteTokenizer(dir, c.Vocab))
	require.NoError(t, bertref.WriteSentenceTransformers(dir, c.Hidden, mode, maxSeq))
	return dir
}

// TestEmbedBert: `tputool embed` on a BERT sentence-transformers model
// gives, for text, the reference encoder's hidden states of the
// tokenizer's ids ([CLS] ... [SEP]) pooled as the model's Pooling config
// says (CLS or mean) and normalized, with --pooling overriding it; inputs
// beyond max_seq_length are cut to it, keeping [SEP].
// embedTexts runs embed --json on the model in dir with one -p per text
// and returns its results, one a text.
func embedTexts(t *testing.T, dir string, texts []string) []embedResult {
	t.Helper()
	e := genEnv(t)
	args := []string{"--json", "embed", "-m", dir}
	for _, p := range texts {
		args = append(args, "-p", p)
	}
	require.Equal(t, ExitOK, e.run(args...), e.errOut.String())
	var res []embedResult
	require.NoError(t, json.Unmarshal(e.out.Bytes(), &res), e.out.String())
	require.Len(t, res, len(texts))
	return res
}

func TestEmbedBert(t *testing.T) {
	c := bertref.Config{Vocab: bertref.FullTokenizerVocab, Hidden: 32, Layers: 2, Heads: 4, Intermediate: 48, MaxPositions: 24, TypeVocab: 2, Eps: 1e-12}
	texts := []string{"What is a TPU?", "hello world", "the model runs a matrix processor, what is it?"}
	for _, mode := range []string{"cls", "mean"} {
		dir := bertModel(t, c, mode, 12)
		tok, err := tokenizer.LoadDir(dir)
		require.NoError(t, err)
		res := embedTexts(t, dir, texts)
		for i, p := range texts {
			ids, err := tok.Encode(p, true)
			require.NoError(t, err)
			if len(ids) > 12 { // max_seq_length: the content cut, [SEP] kept
				ids = append(ids[:11:11], ids[len(ids)-1])
			}
			assert.Equal(t, len(ids), res[i].Tokens, "input %d", i)
			h, err := bertref.Forward(dir, c, ids)
			require.NoError(t, err)
			want := bertref.Pool(h, mode, true)
			require.Len(t, res[i].Embedding, c.Hidden)
			for j, x := range res[i].Embedding {
				assert.InDelta(t, want[j], x, 1e-5, "%s pooling, input %d, value %d", mode, i, j)
			}
		}
		// --pooling overrides the model's mode.
		other := map[string]string{"cls": "mean", "mean": "cls"}[mode]
		e := genEnv(t)
		require.Equal(t, ExitOK, e.run("--json", "embed", "-m", dir, "--pooling", other, "-p", texts[0]), e.errOut.String())
		res = nil
		require.NoError(t, json.Unmarshal(e.out.Bytes(), &res))
		ids, err := tok.Encode(texts[0], true)
		require.NoError(t, err)
		h, err := bertref.Forward(dir, c, ids)
		require.NoError(t, err)
		want := bertref.Pool(h, other, true)
		for j, x := range res[0].Embedding {
			assert.InDelta(t, want[j], x, 1e-5, "--pooling %s, value %d", other, j)
		}
	}
}

// TestEncoderRefusesText: generate, and bench --task generate, on an
// encoder exit 3 (unsupported) saying that it gives embeddings (serve
// serves its embeddings: TestServeEncoder; bench without --task measures
// them).
func TestEncoderRefusesText(t *testing.T) {
	c := bertref.Config{Vocab: bertref.FullTokenizerVocab, Hidden: 16, Layers: 1, Heads: 2, Intermediate: 24, MaxPositions: 16, TypeVocab: 2, Eps: 1e-12}
	dir := bertModel(t, c, "mean", 16)
	// bench measures an encoder's embeddings by default (--task embed:
	// TestBenchEmbedEncoder); asked to generate with it, it refuses.
	for _, args := range [][]string{
		{"generate", "-m", dir, "-p", "hello", "-n", "2"},
		{"bench", "-m", dir, "--task", "generate", "--prompt-len", "4", "--gen-len", "2"},
	} {
		e := genEnv(t)
		code := e.run(args...)
		assert.Equal(t, ExitUnsupported, code, "%v: %s", args, e.errOut.String())
		assert.True(t, strings.Contains(e.errOut.String(), "is an encoder: it gives embeddings"), "%v: %s", args, e.errOut.String())
		if args[0] == "bench" {
			assert.Contains(t, e.errOut.String(), "bench --task embed measures its embeddings or scores")
		}
	}
}

// TestServeEncoder: serve on a BERT sentence-transformers model serves
// its embeddings: the listening event says embeddings only (no slots),
// /v1/embeddings gives for text the reference encoder's hidden states of
// the tokenizer's ids pooled as the model's Pooling config says and
// normalized (inputs beyond max_seq_length cut to it, [SEP] kept), as
// `tputool embed` does, while the generating endpoints answer 400 and
// /api/show lists the capability "embedding" alone.
func TestServeEncoder(t *testing.T) {
	c := bertref.Config{Vocab: bertref.FullTokenizerVocab, Hidden: 32, Layers: 2, Heads: 4, Intermediate: 48, MaxPositions: 24, TypeVocab: 2, Eps: 1e-12}
	dir := bertModel(t, c, "cls", 12)
	tok, err := tokenizer.LoadDir(dir)
	require.NoError(t, err)
	addr, out, stop := serveModelInProcess(t, "--model", dir, "--served-model-name", "minilm")
	url := "http://" + addr

	var listening map[string]any
	require.NoError(t, json.Unmarshal([]byte(strings.SplitN(out(), "\n", 2)[0]), &listening), out())
	assert.Equal(t, "listening", listening["type"])
	assert.Equal(t, true, listening["embeddings_only"])
	assert.EqualValues(t, 0, listening["slots"])
	assert.EqualValues(t, 24, listening["max_context"], "the model's positions")

	post := func(path, body string) (int, []byte) {
		t.Helper()
		resp, err := http.Post(url+path, "application/json", strings.NewReader(body))
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, b
	}

	texts := []string{"What is a TPU?", "the model runs a matrix processor, what is it?", "hello world"}
	in, err := json.Marshal(texts)
	require.NoError(t, err)
	status, body := post("/v1/embeddings", `{"model":"minilm","input":`+string(in)+`}`)
	require.Equal(t, http.StatusOK, status, string(body))
	var emb struct {
		Data []struct {
			Embedding []float64 `json:"embedding"`
		} `json:"data"`
		Usage struct {
			PromptTokens int `json:"prompt_tokens"`
		} `json:"usage"`
	}
	require.NoError(t, json.Unmarshal(body, &emb))
	require.Len(t, emb.Data, len(texts))
	tokens := 0
	for i, p := range texts {
		ids, err := tok.Encode(p, true)
		require.NoError(t, err)
		if len(ids) > 12 { // max_seq_length: the content cut, [SEP] kept
			ids = append(ids[:11:11], ids[len(ids)-1])
		}
		tokens += len(ids)
		h, err := bertref.Forward(dir, c, ids)
		require.NoError(t, err)
		want := bertref.Pool(h, "cls", true)
		require.Len(t, emb.Data[i].Embedding, c.Hidden)
		for j, x := range emb.Data[i].Embedding {
			assert.InDelta(t, want[j], x, 1e-5, "input %d, value %d", i, j)
		}
	}
	assert.Equal(t, tokens, emb.Usage.PromptTokens)

	status, body = post("/v1/chat/completions", `{"model":"minilm","messages":[{"role":"user","content":"hi"}]}`)
	assert.Equal(t, http.StatusBadRequest, status, string(body))
	assert.Contains(t, string(body), `is an embedding model: it serves /v1/embeddings and /api/embed only`)
	assert.Contains(t, string(body), `"invalid_request_error"`)
	status, body = post("/api/generate", `{"model":"minilm","prompt":"hi"}`)
	assert.Equal(t, http.StatusBadRequest, status, string(body))
	assert.JSONEq(t, `{"error":"\"minilm\" does not support generate"}`, string(body))
	status, body = post("/api/show", `{"model":"minilm"}`)
	require.Equal(t, http.StatusOK, status, string(body))
	var show struct {
		Capabilities []string `json:"capabilities"`
	}
	require.NoError(t, json.Unmarshal(body, &show))
	assert.Equal(t, []string{"embedding"}, show.Capabilities)

	require.Equal(t, ExitOK, stop())
}

// crossEncoderModel writes a tiny BertForSequenceClassification of c
// (c.Labels labels) with bertref's WordPiece tokenizer, whose pair form
// is [CLS] A [SEP] B:1 [SEP]:1, and returns its folder; noPair drops the
// tokenizer's post-processor, and with it the pair form.
func crossEncoderModel(t *testing.T, c bertref.Config, noPair bool) string {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, bertref.Write(dir, c, 13))
	require.NoError(t, bertref.WriteTokenizer(dir, c.Vocab))
	if noPair {
		editJSON(t, filepath.Join(dir, "tokenizer.json"), func(v map[string]any) { v["post_processor"] = nil })
	}
	return dir
}

// TestServeRerank: serve on a cross-encoder of one label
// (BertForSequenceClassification) serves /v1/rerank: the listening event
// says rerank (no slots, not embeddings), and each document's
// relevance_score is the sigmoid of the reference classifier's logit
// (bertref.Score) of the tokenizer's pair (EncodePairTruncated, cut to
// the model's positions: one document is longer), best first, usage
// counting the pairs' tokens; /v1/embeddings answers 400 and /api/show
// lists no capability.
func TestServeRerank(t *testing.T) {
	c := bertref.Config{Vocab: bertref.FullTokenizerVocab, Hidden: 32, Layers: 2, Heads: 4, Intermediate: 48, MaxPositions: 40, TypeVocab: 2, Eps: 1e-12, Labels: 1, Prefix: "bert."}
	dir := crossEncoderModel(t, c, false)
	tok, err := tokenizer.LoadDir(dir)
	require.NoError(t, err)
	addr, out, stop := serveModelInProcess(t, "--model", dir, "--served-model-name", "reranker")
	url := "http://" + addr

	var listening map[string]any
	require.NoError(t, json.Unmarshal([]byte(strings.SplitN(out(), "\n", 2)[0]), &listening), out())
	assert.Equal(t, true, listening["rerank"])
	assert.Equal(t, false, listening["embeddings_only"])
	assert.EqualValues(t, 0, listening["slots"])
	assert.EqualValues(t, 40, listening["max_context"], "the model's positions")

	post := func(path, body string) (int, []byte) {
		t.Helper()
		resp, err := http.Post(url+path, "application/json", strings.NewReader(body))
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, b
	}

	query := "what is a tpu?"
	docs := []string{
		"hello world",
		"a tpu is a matrix processor, it runs the model",
		strings.Repeat("the processor runs this model on a tpu and it embeds the text of the query. ", 4), // cut to 40 tokens
	}
	in, err := json.Marshal(docs)
	require.NoError(t, err)
	status, body := post("/v1/rerank", `{"model":"reranker","query":"`+query+`","documents":`+string(in)+`}`)
	require.Equal(t, http.StatusOK, status, string(body))
	var resp struct {
		Model string `json:"model"`
		Usage struct {
			TotalTokens int `json:"total_tokens"`
		} `json:"usage"`
		Results []struct {
			Index          int     `json:"index"`
			RelevanceScore float64 `json:"relevance_score"`
			Document       struct {
				Text string `json:"text"`
			} `json:"document"`
		} `json:"results"`
	}
	require.NoError(t, json.Unmarshal(body, &resp), string(body))
	assert.Equal(t, "reranker", resp.Model)
	require.Len(t, resp.Results, len(docs))
	want := make([]float64, len(docs))
	tokens := 0
	for i, d := range docs {
		ids, types, err := tok.EncodePairTruncated(query, d, c.MaxPositions)
		require.NoError(t, err)
		require.LessOrEqual(t, len(ids), c.MaxPositions)
		tokens += len(ids)
		s, err := bertref.Score(dir, c, ids, types)
		require.NoError(t, err)
		want[i] = 1 / (1 + math.Exp(-s[0]))
	}
	assert.Equal(t, tokens, resp.Usage.TotalTokens)
	order := []int{0, 1, 2}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(want[b], want[a]) })
	for k, r := range resp.Results {
		assert.Equal(t, order[k], r.Index, "result %d: the documents best first (want %v)", k, want)
		assert.InDelta(t, want[r.Index], r.RelevanceScore, 1e-5, "document %d", r.Index)
		assert.Equal(t, docs[r.Index], r.Document.Text)
	}

	status, body = post("/v1/embeddings", `{"model":"reranker","input":"hello"}`)
	assert.Equal(t, http.StatusBadRequest, status, string(body))
	assert.Contains(t, string(body), `model \"reranker\" is a reranker (a cross-encoder): it serves /v1/rerank`)
	status, body = post("/api/show", `{"model":"reranker"}`)
	require.Equal(t, http.StatusOK, status, string(body))
	assert.Contains(t, string(body), `"capabilities":[]`)

	require.Equal(t, ExitOK, stop())
}

// TestServeRefusesClassifier: serve refuses, exit 3 (unsupported), a
// cross-encoder of more labels than one (a text classifier, not a
// reranker), naming the label count, and a cross-encoder whose
// tokenizer has no pair form.
func TestServeRefusesClassifier(t *testing.T) {
	c := bertref.Config{Vocab: bertref.FullTokenizerVocab, Hidden: 16, Layers: 1, Heads: 2, Intermediate: 24, MaxPositions: 16, TypeVocab: 2, Eps: 1e-12, Labels: 3, Prefix: "bert."}
	e := genEnv(t)
	assert.Equal(t, ExitUnsupported, e.run("serve", "--port", "0", "--model", crossEncoderModel(t, c, false)), e.errOut.String())
	assert.Contains(t, e.errOut.String(), "has 3 labels: serve reranks with a cross-encoder of one label")
	c.Labels = 1
	e = genEnv(t)
	assert.Equal(t, ExitUnsupported, e.run("serve", "--port", "0", "--model", crossEncoderModel(t, c, true)), e.errOut.String())
	assert.Contains(t, e.errOut.String(), "its tokenizer has no pair form")
}

// TestEmbedBertModelMaxLength: a sentence-transformers model whose
// sentence_bert_config.json sets no max_seq_length (as 5.4 and later save
// it) is cut to the tokenizer's model_max_length, as sentence-transformers
// cuts it.
func TestEmbedBertModelMaxLength(t *testing.T) {
	c := bertref.Config{Vocab: bertref.FullTokenizerVocab, Hidden: 16, Layers: 1, Heads: 2, Intermediate: 24, MaxPositions: 40, TypeVocab: 2, Eps: 1e-12}
	dir := bertModel(t, c, "mean", 12)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "sentence_bert_config.json"), []byte(`{"do_lower_case": false}`), 0o644))
	editJSON(t, filepath.Join(dir, "tokenizer_config.json"), func(v map[string]any) {
		v["model_max_length"] = 10
	})
	e := genEnv(t)
	require.Equal(t, ExitOK, e.run("--json", "embed", "-m", dir, "-p", "the model runs a matrix processor, what is it?"), e.errOut.String())
	var res []embedResult
	require.NoError(t, json.Unmarshal(e.out.Bytes(), &res), e.out.String())
	require.Len(t, res, 1)
	assert.Equal(t, 10, res[0].Tokens)
}

// TestEmbedPromptName: --prompt-name puts the model's sentence-transformers
// prompt before each input, as encode(prompt_name=...) does; the model's
// default_prompt_name applies without the flag and --prompt-name none
// drops it; an unknown name is a usage error listing the prompts; a
// prompt that mean pooling would have to leave out (include_prompt
// false) is refused.
func TestEmbedPromptName(t *testing.T) {
	c := bertref.Config{Vocab: bertref.FullTokenizerVocab, Hidden: 16, Layers: 1, Heads: 2, Intermediate: 24, MaxPositions: 40, TypeVocab: 2, Eps: 1e-12}
	dir := bertModel(t, c, "mean", 32)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "config_sentence_transformers.json"),
		[]byte(`{"prompts": {"query": "what is ", "document": ""}, "default_prompt_name": "query"}`), 0o644))
	tok, err := tokenizer.LoadDir(dir)
	require.NoError(t, err)
	vector := func(text string) []float64 {
		ids, err := tok.Encode(text, true)
		require.NoError(t, err)
		h, err := bertref.Forward(dir, c, ids)
		require.NoError(t, err)
		return bertref.Pool(h, "mean", true)
	}
	embed := func(args ...string) []float32 {
		t.Helper()
		e := genEnv(t)
		require.Equal(t, ExitOK, e.run(append([]string{"--json", "embed", "-m", dir, "-p", "a tpu"}, args...)...), e.errOut.String())
		var res []embedResult
		require.NoError(t, json.Unmarshal(e.out.Bytes(), &res), e.out.String())
		return res[0].Embedding
	}
	for _, tc := range []struct {
		args []string
		text string
	}{
		{nil, "what is a tpu"}, // the default prompt
		{[]string{"--prompt-name", "query"}, "what is a tpu"},
		{[]string{"--prompt-name", "document"}, "a tpu"},
		{[]string{"--prompt-name", "none"}, "a tpu"},
	} {
		got, want := embed(tc.args...), vector(tc.text)
		for j, x := range got {
			assert.InDelta(t, want[j], x, 1e-5, "%v: value %d", tc.args, j)
		}
	}
	e := genEnv(t)
	assert.Equal(t, ExitUsage, e.run("embed", "-m", dir, "-p", "a", "--prompt-name", "passage"), e.errOut.String())
	assert.Contains(t, e.errOut.String(), "document, query")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "1_Pooling", "config.json"),
		[]byte(`{"word_embedding_dimension": 16, "pooling_mode_mean_tokens": true, "include_prompt": false}`), 0o644))
	e = genEnv(t)
	assert.Equal(t, ExitUnsupported, e.run("embed", "-m", dir, "-p", "a"), e.errOut.String())
	assert.Contains(t, e.errOut.String(), "include_prompt")
}

// TestEmbedBertPositionsLimit: a sentence-transformers model with neither
// max_seq_length nor model_max_length is cut to its positions, as
// sentence-transformers cuts it, instead of refused.
func TestEmbedBertPositionsLimit(t *testing.T) {
	c := bertref.Config{Vocab: bertref.FullTokenizerVocab, Hidden: 16, Layers: 1, Heads: 2, Intermediate: 24, MaxPositions: 20, TypeVocab: 2, Eps: 1e-12}
	dir := bertModel(t, c, "mean", 12)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "sentence_bert_config.json"), []byte(`{}`), 0o644))
	editJSON(t, filepath.Join(dir, "tokenizer_config.json"), func(v map[string]any) {
		delete(v, "model_max_length")
	})
	e := genEnv(t)
	require.Equal(t, ExitOK, e.run("--json", "embed", "-m", dir, "-p", strings.Repeat("a tpu ", 20)), e.errOut.String())
	var res []embedResult
	require.NoError(t, json.Unmarshal(e.out.Bytes(), &res), e.out.String())
	require.Len(t, res, 1)
	assert.Equal(t, 20, res[0].Tokens)
}
