package cmd

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
)

// TestGenerateSentencePieceTokenizer runs generate on a folder whose
// tokenizer is only a SentencePiece model and a LlamaTokenizer
// tokenizer_config.json (as many Llama 2 fine-tunes ship it): the prompt's
// ids are BOS and SentencePiece's own pieces (loader/tokenizer's
// testdata/spm/llama-bpe, whose vectors come from SentencePiece).
func TestGenerateSentencePieceTokenizer(t *testing.T) {
	dir := t.TempDir()
	c := lmckpt.Config{Vocab: 700, Hidden: 32, Intermediate: 48, Layers: 1, Heads: 4, KVHeads: 2, HeadDim: 8, Eps: 1e-5, Tied: true, RopeTheta: []float64{10000}, Window: []int{0}}
	require.NoError(t, lmckpt.Tiny{Arch: "LlamaForCausalLM", Config: c, Seed: 13}.Write(dir))
	src := filepath.Join("..", "loader", "tokenizer", "testdata", "spm", "llama-bpe")
	gz, err := os.ReadFile(filepath.Join(src, "tokenizer.model.gz"))
	require.NoError(t, err)
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	require.NoError(t, err)
	model, err := io.ReadAll(zr)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "tokenizer.model"), model, 0o644))
	cfg, err := os.ReadFile(filepath.Join(src, "tokenizer_config.json"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), cfg, 0o644))

	var vecs []struct {
		Input      string `json:"input"`
		IDsSpecial []int  `json:"ids_special"`
	}
	data, err := os.ReadFile(filepath.Join(src, "vectors.json"))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(data, &vecs))
	const prompt = "The quick brown fox jumps over the lazy dog."
	var want []int
	for _, v := range vecs {
		if v.Input == prompt {
			want = v.IDsSpecial
		}
	}
	require.NotEmpty(t, want, "vectors.json lacks the prompt")

	e := genEnv(t)
	require.Equal(t, ExitOK, e.run("--json", "generate", "-m", dir, "-p", prompt, "-n", "4", "--temperature", "0"), e.errOut.String())
	var res []struct {
		Prompt []int `json:"prompt_token_ids"`
		IDs    []int `json:"token_ids"`
	}
	require.NoError(t, json.Unmarshal(e.out.Bytes(), &res), e.out.String())
	require.Len(t, res, 1)
	assert.Equal(t, want, res[0].Prompt)
	assert.Len(t, res[0].IDs, 4)

	// A class whose converter changes the vocabulary is refused by name,
	// exit 3.
	require.NoError(t, os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), []byte(`{"tokenizer_class": "T5Tokenizer"}`), 0o644))
	e = genEnv(t)
	assert.Equal(t, ExitUnsupported, e.run("generate", "-m", dir, "-p", prompt, "-n", "1"))
	assert.Contains(t, e.errOut.String(), `tokenizer class "T5Tokenizer"`)
	assert.Contains(t, e.errOut.String(), "tokenizer.model")
}

// TestChatSentencePieceInternLM2: generate --chat renders the chat
// template and encodes it with an InternLM2Tokenizer's SentencePiece model
// (loader/tokenizer's testdata/spm/bpe-nobyte, whose config adds no BOS):
// the unregistered user-defined <|im_end|> the template writes is one
// piece, and "b" after it takes no dummy prefix, as SentencePiece itself
// encodes "a<|im_end|>b" (the fixture's vectors: 9, 3, 451).
func TestChatSentencePieceInternLM2(t *testing.T) {
	dir := t.TempDir()
	c := lmckpt.Config{Vocab: 500, Hidden: 32, Intermediate: 48, Layers: 1, Heads: 4, KVHeads: 2, HeadDim: 8, Eps: 1e-5, Tied: true, RopeTheta: []float64{10000}, Window: []int{0}}
	require.NoError(t, lmckpt.Tiny{Arch: "LlamaForCausalLM", Config: c, Seed: 14}.Write(dir))
	gz, err := os.ReadFile(filepath.Join("..", "loader", "tokenizer", "testdata", "spm", "bpe-nobyte", "tokenizer.model.gz"))
	require.NoError(t, err)
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	require.NoError(t, err)
	model, err := io.ReadAll(zr)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "tokenizer.model"), model, 0o644))
	cfg := `{"tokenizer_class": "InternLM2Tokenizer", "add_bos_token": false,
		"chat_template": "{% for m in messages %}{{ m.content }}<|im_end|>b{% endfor %}"}`
	require.NoError(t, os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), []byte(cfg), 0o644))

	e := genEnv(t)
	require.Equal(t, ExitOK, e.run("--json", "generate", "-m", dir, "--chat", "-p", "a", "-n", "2", "--temperature", "0"), e.errOut.String())
	var res []struct {
		Prompt []int `json:"prompt_token_ids"`
	}
	require.NoError(t, json.Unmarshal(e.out.Bytes(), &res), e.out.String())
	require.Len(t, res, 1)
	assert.Equal(t, []int{9, 3, 451}, res[0].Prompt)
}
