package serve

import (
	"encoding/json"
	"net/http"
	"unicode/utf8"
)

// POST /tokenize and /detokenize in the two forms clients send: vLLM's
// (prompt or messages; add_special_tokens, return_token_strs) and
// llama.cpp server's (content; add_special, with_pieces). The form is
// told by the fields: a request names prompt, messages or content. TEI's
// /tokenize (inputs, with each token's character offsets) is refused
// with TEI's error, as before: the tokenizer keeps no offsets.

// tokenizeRequest is a /tokenize body in either form (or TEI's).
type tokenizeRequest struct {
	// vLLM's.
	Model                string          `json:"model"`
	Prompt               *string         `json:"prompt"`
	Messages             []chatMessage   `json:"messages"`
	AddSpecialTokens     *bool           `json:"add_special_tokens"`
	AddGenerationPrompt  *bool           `json:"add_generation_prompt"`
	ContinueFinalMessage bool            `json:"continue_final_message"`
	ReturnTokenStrs      bool            `json:"return_token_strs"`
	ChatTemplateKwargs   map[string]any  `json:"chat_template_kwargs"`
	Tools                json.RawMessage `json:"tools"`

	// llama.cpp server's.
	Content      *string `json:"content"`
	AddSpecial   *bool   `json:"add_special"`
	ParseSpecial *bool   `json:"parse_special"`
	WithPieces   bool    `json:"with_pieces"`

	// TEI's (refused).
	Inputs     json.RawMessage `json:"inputs"`
	PromptName json.RawMessage `json:"prompt_name"`
}

// vllmTokenizeResponse is vLLM's /tokenize answer.
type vllmTokenizeResponse struct {
	Count       int      `json:"count"`
	MaxModelLen int      `json:"max_model_len"`
	Tokens      []int    `json:"tokens"`
	TokenStrs   []string `json:"token_strs"`
}

// llamaPiece is one token of llama.cpp's /tokenize with_pieces: its id
// and text, or the text's bytes when they are not valid UTF-8 (part of
// a character).
type llamaPiece struct {
	ID    int `json:"id"`
	Piece any `json:"piece"`
}

// tokenize answers POST /tokenize.
func (s *Server) tokenize(w http.ResponseWriter, r *http.Request, x *exchange) {
	var req tokenizeRequest
	if err := decodeBody(r, &req); err != nil {
		writeError(w, err)
		return
	}
	forms := 0
	for _, set := range []bool{req.Prompt != nil, req.Messages != nil, req.Content != nil, isSet(req.Inputs)} {
		if set {
			forms++
		}
	}
	switch {
	case isSet(req.Inputs):
		if forms > 1 {
			writeError(w, badRequest("inputs", "give one of prompt, messages, content or inputs"))
			return
		}
		s.teiUnsupported(w, r, x)
		return
	case forms != 1:
		writeError(w, badRequest("prompt", "give one of prompt or messages (vLLM's form) or content (llama.cpp's)"))
		return
	case s.o.Tokenizer == nil:
		writeError(w, badRequest("prompt", "this server has no tokenizer"))
		return
	case req.ParseSpecial != nil && !*req.ParseSpecial:
		writeError(w, badRequest("parse_special", "parse_special false is not supported: special tokens written in the text are encoded as those tokens"))
		return
	}
	if err := s.checkModel(req.Model); err != nil {
		writeError(w, err)
		return
	}
	if req.Content != nil {
		// llama.cpp's: add_special defaults to false.
		ids, err := s.o.Tokenizer.Encode(*req.Content, req.AddSpecial != nil && *req.AddSpecial)
		if err != nil {
			writeError(w, badRequest("content", "encoding the content: %v", err))
			return
		}
		x.promptTokens = len(ids)
		if !req.WithPieces {
			writeJSON(w, http.StatusOK, map[string][]int{"tokens": ids})
			return
		}
		pieces := make([]llamaPiece, len(ids))
		prev := -1
		for i, id := range ids {
			text := s.tokenText(prev, id)
			pieces[i] = llamaPiece{ID: id, Piece: text}
			if !utf8.ValidString(text) {
				b := make([]int, len(text))
				for j := range len(text) {
					b[j] = int(text[j])
				}
				pieces[i].Piece = b
			}
			prev = id
		}
		writeJSON(w, http.StatusOK, map[string][]llamaPiece{"tokens": pieces})
		return
	}
	var ids []int
	if req.Prompt != nil {
		var err error
		if ids, err = s.o.Tokenizer.Encode(*req.Prompt, req.AddSpecialTokens == nil || *req.AddSpecialTokens); err != nil {
			writeError(w, badRequest("prompt", "encoding the prompt: %v", err))
			return
		}
	} else {
		if req.AddGenerationPrompt != nil && !*req.AddGenerationPrompt {
			writeError(w, badRequest("add_generation_prompt", "add_generation_prompt false is not supported: the messages are rendered as a chat request renders them, with the generation prompt"))
			return
		}
		if req.ContinueFinalMessage {
			writeError(w, badRequest("continue_final_message", "continue_final_message is not supported"))
			return
		}
		creq := &chatRequest{Messages: req.Messages, ChatTemplateKwargs: req.ChatTemplateKwargs, Tools: req.Tools}
		p, err := s.chatPlan(r.Context(), creq)
		if err != nil {
			writeError(w, err)
			return
		}
		ids = p.reqs[0].Prompt
	}
	x.promptTokens = len(ids)
	resp := vllmTokenizeResponse{Count: len(ids), MaxModelLen: s.o.MaxContext, Tokens: ids}
	if req.ReturnTokenStrs {
		resp.TokenStrs = make([]string, len(ids))
		for i, id := range ids {
			resp.TokenStrs[i], _ = s.o.Tokenizer.IDToToken(id)
		}
	}
	writeJSON(w, http.StatusOK, resp)
}

// detokenizeRequest is a /detokenize body: vLLM's (with model) or
// llama.cpp's.
type detokenizeRequest struct {
	Model  string `json:"model"`
	Tokens []int  `json:"tokens"`
}

// detokenize answers POST /detokenize with the tokens' text, special
// tokens included, under both forms' names: vLLM's prompt and llama.cpp's
// content.
func (s *Server) detokenize(w http.ResponseWriter, r *http.Request, _ *exchange) {
	var req detokenizeRequest
	if err := decodeBody(r, &req); err != nil {
		writeError(w, err)
		return
	}
	if err := s.checkModel(req.Model); err != nil {
		writeError(w, err)
		return
	}
	if s.o.Tokenizer == nil {
		writeError(w, badRequest("tokens", "this server has no tokenizer"))
		return
	}
	vocab := s.vocabSize()
	for _, id := range req.Tokens {
		if id < 0 || (vocab > 0 && id >= vocab) {
			writeError(w, badRequest("tokens", "token id %d is outside the vocabulary [0, %d)", id, vocab))
			return
		}
	}
	text := s.o.Tokenizer.Decode(req.Tokens, false)
	writeJSON(w, http.StatusOK, map[string]string{"prompt": text, "content": text})
}
