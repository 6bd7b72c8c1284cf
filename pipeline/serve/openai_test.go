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

// FuzzRequestPlan: any body decodes and plans (no generation) into either
// sequences within the bounds or a 4xx; never a panic or a 5xx.
func FuzzRequestPlan(f *testing.F) {
	for _, seed := range []string{
		`{"prompt":"Once upon a time","max_tokens":5,"n":2,"logprobs":3,"stop":["a","b"]}`,
		`{"prompt":[[1,2,3],[4]],"max_tokens":500}`,
		`{"messages":[{"role":"system","content":"x"},{"role":"user","content":[{"type":"text","text":"y"}]}],"top_logprobs":2,"logprobs":true}`,
		`{"messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"1"}]}],"max_completion_tokens":3}`,
		`{"temperature":0.5,"top_p":0.9,"top_k":-1,"min_p":0.1,"seed":-3,"repetition_penalty":1.1,"ignore_eos":true}`,
		`{"n":17}`, `{"max_tokens":0}`, `null`, `{"tools":[{}]}`,
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
		for _, isChat := range []bool{false, true} {
			r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(body))
			var p *plan
			var err error
			if isChat {
				var req chatRequest
				if err = decodeBody(r, &req); err == nil {
					p, err = s.chatPlan(context.Background(), &req)
				}
			} else {
				var req completionRequest
				if err = decodeBody(r, &req); err == nil {
					p, err = s.completionPlan(&req)
				}
			}
			if err != nil {
				var e *apiError
				if !errors.As(err, &e) || e.Status < 400 || e.Status >= 500 {
					t.Fatalf("chat=%v %q: error %v is not a 4xx", isChat, body, err)
				}
				continue
			}
			if len(p.reqs) == 0 || len(p.reqs) > maxSequences {
				t.Fatalf("chat=%v %q: %d sequences", isChat, body, len(p.reqs))
			}
			for _, rq := range p.reqs {
				if len(rq.Prompt) == 0 || rq.Gen.MaxNewTokens <= 0 || len(rq.Prompt)+rq.Gen.MaxNewTokens > testContext || rq.Logprobs > maxLogprobs {
					t.Fatalf("chat=%v %q: request out of bounds: %d prompt tokens, %d new, logprobs %d",
						isChat, body, len(rq.Prompt), rq.Gen.MaxNewTokens, rq.Logprobs)
				}
			}
		}
	})
}
