package serve

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tputool/tputool/loader/tokenizer/chat"
	"github.com/tputool/tputool/pipeline/generate"
)

// TestTokenizeVLLM: vLLM's /tokenize gives a prompt's tokens with the
// tokenizer's special tokens (or without, add_special_tokens false),
// their count, the context, and with return_token_strs the tokens'
// pieces; messages are rendered as a chat request renders them.
func TestTokenizeVLLM(t *testing.T) {
	ts := newTestServer(t, serverConfig{})
	var res vllmTokenizeResponse
	status, _, body := ts.post(t, "/tokenize", `{"model":"`+testModel+`","prompt":"Once upon a time","return_token_strs":true}`)
	require.Equal(t, 200, status, string(body))
	require.NoError(t, json.Unmarshal(body, &res))
	want := ts.encode(t, "Once upon a time")
	assert.Equal(t, want, res.Tokens)
	assert.Equal(t, len(want), res.Count)
	assert.Equal(t, testContext, res.MaxModelLen)
	require.Len(t, res.TokenStrs, len(want))
	for i, id := range want {
		piece, _ := ts.tok.IDToToken(id)
		assert.Equal(t, piece, res.TokenStrs[i])
	}

	status, _, body = ts.post(t, "/tokenize", `{"prompt":"Once upon a time","add_special_tokens":false}`)
	require.Equal(t, 200, status, string(body))
	require.NoError(t, json.Unmarshal(body, &res))
	plain, err := ts.tok.Encode("Once upon a time", false)
	require.NoError(t, err)
	assert.Equal(t, plain, res.Tokens)
	assert.Nil(t, res.TokenStrs)

	status, _, body = ts.post(t, "/tokenize", `{"messages":[{"role":"user","content":"Hi there"}]}`)
	require.Equal(t, 200, status, string(body))
	require.NoError(t, json.Unmarshal(body, &res))
	rendered, err := ts.tok.Encode("<s>user: Hi there\nassistant:", false)
	require.NoError(t, err)
	assert.Equal(t, rendered, res.Tokens, "testTemplate's rendering")
}

// TestTokenizeLlamaCpp: llama.cpp's /tokenize gives the content's tokens
// without special tokens by default, with them on add_special, and with
// with_pieces each token's id and text, which concatenate to the text.
func TestTokenizeLlamaCpp(t *testing.T) {
	ts := newTestServer(t, serverConfig{})
	var res struct {
		Tokens []int `json:"tokens"`
	}
	status, _, body := ts.post(t, "/tokenize", `{"content":"Once upon a time"}`)
	require.Equal(t, 200, status, string(body))
	require.NoError(t, json.Unmarshal(body, &res))
	plain, err := ts.tok.Encode("Once upon a time", false)
	require.NoError(t, err)
	assert.Equal(t, plain, res.Tokens)

	status, _, body = ts.post(t, "/tokenize", `{"content":"Once upon a time","add_special":true}`)
	require.Equal(t, 200, status, string(body))
	require.NoError(t, json.Unmarshal(body, &res))
	assert.Equal(t, ts.encode(t, "Once upon a time"), res.Tokens)

	var pieces struct {
		Tokens []struct {
			ID    int    `json:"id"`
			Piece string `json:"piece"`
		} `json:"tokens"`
	}
	status, _, body = ts.post(t, "/tokenize", `{"content":"Once upon a time","with_pieces":true}`)
	require.Equal(t, 200, status, string(body))
	require.NoError(t, json.Unmarshal(body, &pieces))
	require.Len(t, pieces.Tokens, len(plain))
	var text strings.Builder
	for i, p := range pieces.Tokens {
		assert.Equal(t, plain[i], p.ID)
		text.WriteString(p.Piece)
	}
	assert.Equal(t, "Once upon a time", strings.TrimPrefix(text.String(), " "))
}

// TestDetokenize: /detokenize gives the tokens' text under vLLM's and
// llama.cpp's names; an id outside the vocabulary is a 400.
func TestDetokenize(t *testing.T) {
	ts := newTestServer(t, serverConfig{})
	ids, _ := json.Marshal(ts.encode(t, "Once upon a time"))
	status, _, body := ts.post(t, "/detokenize", `{"tokens":`+string(ids)+`}`)
	require.Equal(t, 200, status, string(body))
	var res map[string]string
	require.NoError(t, json.Unmarshal(body, &res))
	assert.Equal(t, ts.tok.Decode(ts.encode(t, "Once upon a time"), false), res["prompt"])
	assert.Equal(t, res["prompt"], res["content"])
	assert.Contains(t, res["prompt"], "Once upon a time")

	status, _, body = ts.post(t, "/detokenize", `{"tokens":[1, 100000]}`)
	require.Equal(t, 400, status, string(body))
	assert.Equal(t, "tokens", *decodeError(t, body).Param)
}

// TestTokenizeBadRequests: no form or two of them, parse_special false,
// add_generation_prompt false, an unknown model and unknown fields are
// 4xx naming the field; TEI's form keeps TEI's error.
func TestTokenizeBadRequests(t *testing.T) {
	ts := newTestServer(t, serverConfig{})
	for _, c := range []struct {
		body, param string
		status      int
	}{
		{`{}`, "prompt", 400},
		{`{"prompt":"a","content":"a"}`, "prompt", 400},
		{`{"content":"a","parse_special":false}`, "parse_special", 400},
		{`{"messages":[{"role":"user","content":"a"}],"add_generation_prompt":false}`, "add_generation_prompt", 400},
		{`{"prompt":"a","model":"davinci"}`, "model", 404},
		{`{"prompt":"a","tokens":[1]}`, "tokens", 400},
	} {
		status, _, body := ts.post(t, "/tokenize", c.body)
		require.Equal(t, c.status, status, "%s: %s", c.body, body)
		e := decodeError(t, body)
		require.NotNil(t, e.Param, "%s: %s", c.body, body)
		assert.Equal(t, c.param, *e.Param, c.body)
	}
	status, _, body := ts.post(t, "/tokenize", `{"inputs":"a"}`)
	assert.Equal(t, 424, status, string(body))
	assert.Contains(t, string(body), "/tokenize is not available")
}

// FuzzTokenize: any body to /tokenize or /detokenize is answered 200 or
// a 4xx (TEI's form its 424), never a 5xx or a panic.
func FuzzTokenize(f *testing.F) {
	for _, seed := range []string{
		`{"prompt":"Once upon a time","return_token_strs":true}`,
		`{"content":"a <s> b","with_pieces":true,"add_special":true}`,
		`{"messages":[{"role":"user","content":"hi"}]}`,
		`{"inputs":"a"}`, `{"tokens":[1,2,3]}`, `{"tokens":[-1]}`, `{}`, `null`, `[]`,
	} {
		f.Add(seed)
	}
	tok := loadTestTokenizer(f)
	tmpl, err := chat.New("test", testTemplate, chat.Options{BOSToken: "<s>"})
	if err != nil {
		f.Fatal(err)
	}
	s := &Server{o: ServerOptions{ModelName: testModel, Tokenizer: tok, Template: tmpl, MaxContext: testContext,
		Resolve: func(o generate.Overrides) (generate.Options, error) { return generate.Resolve(nil, []int{textEOS}, o) }}}
	f.Fuzz(func(t *testing.T, body string) {
		for _, path := range []string{"/tokenize", "/detokenize"} {
			w := httptest.NewRecorder()
			r := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
			if path == "/tokenize" {
				s.tokenize(w, r, &exchange{})
			} else {
				s.detokenize(w, r, &exchange{})
			}
			if w.Code >= 500 || (w.Code != 200 && w.Code < 400) {
				t.Fatalf("%s %q: status %d: %s", path, body, w.Code, w.Body.String())
			}
		}
	})
}
