package serve

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Log-probabilities in OpenAI's shapes: completions' and chat's.

// tokenText is the text of token id after token prev (so a SentencePiece
// word keeps its leading space); a byte-fallback token is its byte.
func (s *Server) tokenText(prev, id int) string {
	return s.tokenTextAfter(prev, s.prevText(prev), id)
}

// prevText is token prev's text alone, tokenTextAfter's context ("" for
// none, prev < 0, or without a tokenizer).
func (s *Server) prevText(prev int) string {
	if prev < 0 || s.o.Tokenizer == nil {
		return ""
	}
	return s.o.Tokenizer.Decode([]int{prev}, false)
}

// tokenTextAfter is tokenText with prev's text decoded already (a, from
// prevText), for the alternatives of one position.
func (s *Server) tokenTextAfter(prev int, a string, id int) string {
	tok := s.o.Tokenizer
	if tok == nil {
		return fmt.Sprintf("token_id:%d", id)
	}
	if piece, ok := tok.IDToToken(id); ok && len(piece) == 6 && strings.HasPrefix(piece, "<0x") && piece[5] == '>' {
		if b, err := strconv.ParseUint(piece[3:5], 16, 8); err == nil {
			return string([]byte{byte(b)})
		}
	}
	if prev >= 0 {
		ab := tok.Decode([]int{prev, id}, false)
		if t, ok := strings.CutPrefix(ab, a); ok {
			return t
		}
	}
	return tok.Decode([]int{id}, false)
}

// logprobValue makes a log-probability JSON-safe: -Inf (a token the model
// rules out) is reported as -9999, as OpenAI does.
func logprobValue(v float64) float64 {
	if math.IsInf(v, 0) || math.IsNaN(v) {
		return -9999
	}
	return v
}

// completionLogprobs is a completion choice's logprobs object.
type completionLogprobs struct {
	Tokens        []string             `json:"tokens"`
	TokenLogprobs []*float64           `json:"token_logprobs"` // null: an echoed prompt's first token
	TopLogprobs   []map[string]float64 `json:"top_logprobs"`
	TextOffset    []int                `json:"text_offset"`
}

// completionLogprobsOf renders evs, continuing c's token context and text
// offsets.
func (s *Server) completionLogprobsOf(c *choice, evs []Event) *completionLogprobs {
	lp := &completionLogprobs{Tokens: []string{}, TokenLogprobs: []*float64{}, TopLogprobs: []map[string]float64{}, TextOffset: []int{}}
	for _, ev := range evs {
		a := s.prevText(c.prev)
		text := s.tokenTextAfter(c.prev, a, ev.Token)
		top := map[string]float64{}
		for _, t := range ev.TopLogprobs {
			top[s.tokenTextAfter(c.prev, a, t.Token)] = logprobValue(t.Logprob)
		}
		top[text] = logprobValue(ev.Logprob)
		lp.Tokens = append(lp.Tokens, text)
		lp.TokenLogprobs = append(lp.TokenLogprobs, new(logprobValue(ev.Logprob)))
		lp.TopLogprobs = append(lp.TopLogprobs, top)
		lp.TextOffset = append(lp.TextOffset, c.offset)
		c.offset += utf8.RuneCountInString(text)
		c.prev = ev.Token
	}
	return lp
}

// chatTopLogprob is one of a token's top_logprobs (OpenAI's TopLogprob).
type chatTopLogprob struct {
	Token   string  `json:"token"`
	Logprob float64 `json:"logprob"`
	Bytes   []int   `json:"bytes"`
}

// chatLogprob is one token of a chat choice's logprobs.content.
type chatLogprob struct {
	chatTopLogprob
	TopLogprobs []chatTopLogprob `json:"top_logprobs"`
}

type chatLogprobs struct {
	Content []chatLogprob `json:"content"`
	Refusal []chatLogprob `json:"refusal"`
}

// tokenBytes is token id's bytes as OpenAI's logprobs give them: its raw
// bytes where the tokenizer says them (a byte-level BPE token holding part
// of a character has that part, so the bytes of the tokens concatenated
// are the text), else the UTF-8 of its text.
func (s *Server) tokenBytes(id int, text string) []int {
	raw := []byte(text)
	if tok := s.o.Tokenizer; tok != nil {
		if all := tok.TokenBytes(); id >= 0 && id < len(all) && all[id] != nil {
			raw = all[id]
		}
	}
	b := make([]int, len(raw))
	for i, c := range raw {
		b[i] = int(c)
	}
	return b
}

// chatLogprobsOf renders evs, continuing c's token context.
func (s *Server) chatLogprobsOf(c *choice, evs []Event) *chatLogprobs {
	lp := &chatLogprobs{Content: []chatLogprob{}}
	for _, ev := range evs {
		a := s.prevText(c.prev)
		text := s.tokenTextAfter(c.prev, a, ev.Token)
		item := chatLogprob{chatTopLogprob: chatTopLogprob{Token: text, Logprob: logprobValue(ev.Logprob), Bytes: s.tokenBytes(ev.Token, text)}, TopLogprobs: []chatTopLogprob{}}
		for _, t := range ev.TopLogprobs {
			tt := s.tokenTextAfter(c.prev, a, t.Token)
			item.TopLogprobs = append(item.TopLogprobs, chatTopLogprob{Token: tt, Logprob: logprobValue(t.Logprob), Bytes: s.tokenBytes(t.Token, tt)})
		}
		lp.Content = append(lp.Content, item)
		c.prev = ev.Token
	}
	return lp
}
