package serve

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/tputool/tputool/loader/tokenizer/chat"
	"github.com/tputool/tputool/pipeline/generate"
)

// FuzzResponsesPlan: any body to /v1/responses decodes, translates to a
// chat request and plans (no generation) into one sequence within the
// context, or a 4xx; never a panic or a 5xx. Also any TEI /embed and
// /rerank body's inputs parse or are TEI's 4xx.
func FuzzResponsesPlan(f *testing.F) {
	for _, seed := range []string{
		`{"input":"Once upon a time","max_output_tokens":5}`,
		`{"instructions":"be brief","input":[{"role":"user","content":[{"type":"input_text","text":"hi"}]}]}`,
		`{"input":[{"type":"function_call","call_id":"c1","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"c1","output":"3"}]}`,
		`{"input":"x","tools":[{"type":"function","name":"f","parameters":{"type":"object"}}],"tool_choice":"required"}`,
		`{"input":"x","text":{"format":{"type":"json_schema","name":"s","schema":{"type":"object","properties":{"a":{"type":"integer"}}},"strict":true}}}`,
		`{"input":"x","truncation":"auto","reasoning":{"effort":"low"}}`,
		`{"input":[{"type":"reasoning","summary":[]},{"role":"assistant","content":"ok"}]}`,
		`{"previous_response_id":"resp_1"}`, `null`, `{"input":[{}]}`, `{"inputs":["a",[1,2]],"truncate":false}`,
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
		r := httptest.NewRequest(http.MethodPost, "/v1/responses", strings.NewReader(body))
		var req responsesRequest
		err := decodeBody(r, &req)
		var p *plan
		if err == nil {
			var c *chatRequest
			if c, err = req.chatRequest(); err == nil {
				p, err = s.responsesPlan(context.Background(), &req, c)
				err = responsesError(err)
			}
		}
		if err != nil {
			var e *apiError
			if !errors.As(err, &e) || e.Status < 400 || e.Status >= 500 {
				t.Fatalf("%q: error %v is not a 4xx", body, err)
			}
		} else {
			if len(p.reqs) != 1 {
				t.Fatalf("%q: %d sequences, want 1", body, len(p.reqs))
			}
			rq := p.reqs[0]
			if len(rq.Prompt) == 0 || rq.Gen.MaxNewTokens <= 0 || len(rq.Prompt)+rq.Gen.MaxNewTokens > testContext {
				t.Fatalf("%q: request out of bounds: %d prompt tokens, %d new", body, len(rq.Prompt), rq.Gen.MaxNewTokens)
			}
		}
		// TEI's /embed inputs.
		var emb teiEmbedRequest
		if decodeTEIBody([]byte(body), &emb) == nil {
			if _, err := teiInputs(emb.Inputs); err != nil {
				var e *teiError
				if !errors.As(err, &e) {
					t.Fatalf("%q: TEI inputs error %v is not TEI's", body, err)
				}
			}
		}
	})
}
