package serve

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/tputool/tputool/loader/tokenizer"
	"github.com/tputool/tputool/loader/tokenizer/chat"
	"github.com/tputool/tputool/pipeline/constrain"
	"github.com/tputool/tputool/pipeline/generate"
)

// Structured output: OpenAI's response_format (json_object, json_schema)
// and ollama's format ("json" or a schema) become a grammar that every
// sequence of the request is decoded under (pipeline/constrain), so the
// answer always parses and validates; a schema keyword the grammar
// cannot enforce is a 400 naming it.

// grammarSpec is the structured output a request asks for.
type grammarSpec struct {
	key     string // cache key: the kind and the schema's compact text
	param   string // the request field, for errors
	compile func() (*constrain.Grammar, error)
	// specials are special tokens the grammar's text spells (mistral's
	// [TOOL_CALLS]): in its vocabulary they read as their content, where
	// special tokens are otherwise never allowed.
	specials []string
}

// objectGrammar is any JSON object (json_object, ollama's "json").
func objectGrammar(param string) *grammarSpec {
	return &grammarSpec{key: "object", param: param, compile: func() (*constrain.Grammar, error) { return constrain.AnyJSON(true), nil }}
}

// schemaGrammar is the texts of schema.
func schemaGrammar(schema json.RawMessage, param string) (*grammarSpec, error) {
	var compact bytes.Buffer
	if err := json.Compact(&compact, schema); err != nil {
		return nil, badRequest(param, "%s must be a JSON schema: %v", param, err)
	}
	text := compact.Bytes()
	return &grammarSpec{key: "schema:" + string(text), param: param, compile: func() (*constrain.Grammar, error) { return constrain.JSONSchema(text) }}, nil
}

// responseFormat reads OpenAI's response_format (nil for text).
func responseFormat(raw json.RawMessage) (*grammarSpec, error) {
	if !isSet(raw) {
		return nil, nil
	}
	var rf struct {
		Type       string `json:"type"`
		JSONSchema *struct {
			Name        string          `json:"name"`
			Description string          `json:"description"`
			Schema      json.RawMessage `json:"schema"`
			Strict      *bool           `json:"strict"`
		} `json:"json_schema"`
	}
	d := json.NewDecoder(bytes.NewReader(raw))
	d.DisallowUnknownFields()
	if err := d.Decode(&rf); err != nil {
		return nil, badRequest("response_format", "response_format must be {\"type\": \"text\" | \"json_object\" | \"json_schema\", \"json_schema\": {...}}: %v", err)
	}
	switch rf.Type {
	case "text":
		return nil, nil
	case "json_object":
		return objectGrammar("response_format"), nil
	case "json_schema":
		if rf.JSONSchema == nil || !isSet(rf.JSONSchema.Schema) {
			return nil, badRequest("response_format.json_schema.schema", "response_format json_schema needs json_schema.schema")
		}
		return schemaGrammar(rf.JSONSchema.Schema, "response_format.json_schema.schema")
	}
	return nil, badRequest("response_format.type", "response_format.type must be text, json_object or json_schema, got %q", rf.Type)
}

// ollamaFormat reads ollama's format: "json" or a schema ("" for none).
func ollamaFormat(raw json.RawMessage) (*grammarSpec, error) {
	if !isSet(raw) || string(raw) == `""` {
		return nil, nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		if s == "json" {
			return objectGrammar("format"), nil
		}
		return nil, badRequest("format", "format must be \"json\" or a JSON schema, got %q", s)
	}
	if !bytes.HasPrefix(bytes.TrimSpace(raw), []byte("{")) {
		return nil, badRequest("format", "format must be \"json\" or a JSON schema object")
	}
	return schemaGrammar(raw, "format")
}

// grammarCache keeps the vocabulary per end-of-sequence set and the
// compiled grammars' indexes (with their mask caches) per schema, so a
// schema an application sends with every request compiles once.
type grammarCache struct {
	mu      sync.Mutex
	vocabs  map[string]*constrain.Vocab
	indexes map[string]*constrain.Index
}

// maxCachedGrammars bounds the indexes kept; past it the cache starts over
// (each holds at most 16 MiB of masks: constrain.Index).
const maxCachedGrammars = 32

// constrain puts the plan's sequences under spec: from the first token,
// or, when the prompt opened the model's thought, from the end of it.
func (s *Server) constrain(p *plan, spec *grammarSpec) error {
	if spec == nil {
		return nil
	}
	if s.o.Tokenizer == nil {
		return badRequest(spec.param, "structured output needs the model's tokenizer")
	}
	eos := p.reqs[0].Gen.EOS
	if len(eos) == 0 {
		return badRequest(spec.param, "%s cannot be combined with ignore_eos: the answer ends when its JSON does", spec.param)
	}
	cc := chatConstraint(s.o.Tokenizer, answerShape{reasoning: p.reasoning, thinking: p.thinking, mayThink: p.mayThink, harmony: p.harmony,
		forcedCall: spec.param == "tool_choice"}, eos)
	if len(cc.Specials) > 0 {
		hs := *spec
		hs.specials = cc.Specials
		spec = &hs
	}
	ix, err := s.grammars.index(s, spec, eos)
	if err != nil {
		return err
	}
	for i := range p.reqs {
		p.reqs[i].Gen.Constrain = func() generate.Constraint { return cc.New(ix) }
	}
	return nil
}

// answerShape is what of a chat answer's form decides where its grammar
// starts.
type answerShape struct {
	reasoning          *Reasoning // the template's reasoning markup, if any
	thinking, mayThink bool       // the prompt opened a thought; it neither opened nor closed one
	harmony            bool       // GPT-OSS's harmony messages
	forcedCall         bool       // the grammar is a forced tool call's
}

// ChatConstraint is how a chat answer is held to a grammar: the special
// tokens its vocabulary must read as their text (VocabBytes), and the
// constraint of each sequence over the grammar's index.
type ChatConstraint struct {
	Specials []string
	New      func(ix *constrain.Index) generate.Constraint
}

// ChatConstraintOf is the ChatConstraint of answers to prompt (rendered
// through template t, special tokens as text) with end-of-sequence ids
// eos, for a caller outside the server (generate --chat --json-schema):
// a thinking model thinks first where the prompt opened its thought or
// left it to open one, and a harmony model's final message is held.
func ChatConstraintOf(tok *tokenizer.Tokenizer, t *chat.Template, prompt string, eos []int) ChatConstraint {
	a := answerShape{harmony: IsHarmony(t)}
	if r := ReasoningOf(t); r != nil && !a.harmony {
		a.reasoning, a.thinking = r, promptOpens(*r, prompt)
		a.mayThink = !a.thinking && !promptCloses(*r, prompt)
	}
	return chatConstraint(tok, a, eos)
}

// chatConstraint: a harmony answer's final message (or, for a forced
// call, the whole answer with its headers, constrain.HarmonyCall) is
// held, harmony's markers read as text before it and never inside it; a
// thinking model's answer is held from the end of its thought (one the
// prompt opened, or one its first token opens); any other answer from
// its first token.
func chatConstraint(tok *tokenizer.Tokenizer, a answerShape, eos []int) ChatConstraint {
	plain := ChatConstraint{New: func(ix *constrain.Index) generate.Constraint { return ix.NewMatcher() }}
	switch {
	case a.harmony:
		var ids []int
		for _, sp := range harmonySpecials {
			if id, ok := tok.TokenToID(sp); ok && tok.IsSpecial(id) && !slices.Contains(eos, id) {
				ids = append(ids, id)
			}
		}
		if a.forcedCall {
			return ChatConstraint{Specials: harmonySpecials, New: func(ix *constrain.Index) generate.Constraint { return ix.Guard(constrain.HarmonyArgs, ids...) }}
		}
		return ChatConstraint{Specials: harmonySpecials, New: func(ix *constrain.Index) generate.Constraint { return ix.After(harmonyFinal).Then(ids...) }}
	case a.reasoning == nil || !a.thinking && !a.mayThink:
		return plain
	}
	end := a.reasoning.End
	var ids []int // the end tag as a special token, which has no text
	if id, ok := tok.TokenToID(end); ok && tok.IsSpecial(id) {
		ids = append(ids, id)
	}
	if a.thinking {
		return ChatConstraint{New: func(ix *constrain.Index) generate.Constraint { return ix.After(end, ids...) }}
	}
	// The model may open a thought itself: its first token opens one (the
	// start tag as one token) or starts the answer.
	if id, ok := tok.TokenToID(a.reasoning.Start); ok {
		return ChatConstraint{New: func(ix *constrain.Index) generate.Constraint { return ix.MaybeAfter([]int{id}, end, ids...) }}
	}
	return plain
}

func (c *grammarCache) index(s *Server, spec *grammarSpec, eos []int) (*constrain.Index, error) {
	eosKey := fmt.Sprint(slices.Sorted(slices.Values(eos))) + strings.Join(spec.specials, "\x00")
	c.mu.Lock()
	ix, ok := c.indexes[eosKey+spec.key]
	v := c.vocabs[eosKey]
	c.mu.Unlock()
	if ok {
		return ix, nil
	}
	// Compiling happens outside the lock: a slow schema holds up only its
	// own request.
	g, err := spec.compile()
	if err != nil {
		return nil, badRequest(spec.param, "%s: %v", spec.param, strings.TrimPrefix(err.Error(), "#: "))
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if v == nil {
		if v = c.vocabs[eosKey]; v == nil {
			if v, err = constrain.NewVocab(VocabBytes(s.o.Tokenizer, spec.specials), validIDs(eos, s.o.Tokenizer.VocabSize())); err != nil {
				return nil, badRequest(spec.param, "%v", err)
			}
			if c.vocabs == nil {
				c.vocabs = map[string]*constrain.Vocab{}
			}
			c.vocabs[eosKey] = v
		}
	}
	if ix, ok := c.indexes[eosKey+spec.key]; ok { // another request compiled it meanwhile
		return ix, nil
	}
	if c.indexes == nil || len(c.indexes) >= maxCachedGrammars {
		c.indexes = map[string]*constrain.Index{}
	}
	ix = constrain.NewIndex(g, v)
	c.indexes[eosKey+spec.key] = ix
	return ix, nil
}

// VocabBytes is the tokenizer's TokenBytes with each special token of
// specials reading as its content (ChatConstraint.Specials).
func VocabBytes(tok *tokenizer.Tokenizer, specials []string) [][]byte {
	tb := tok.TokenBytes()
	if len(specials) == 0 {
		return tb
	}
	tb = slices.Clone(tb)
	for _, sp := range specials {
		if id, ok := tok.TokenToID(sp); ok && id < len(tb) && tok.IsSpecial(id) {
			tb[id] = []byte(sp)
		}
	}
	return tb
}

// validIDs keeps the ids inside the tokenizer's vocabulary.
func validIDs(ids []int, n int) []int {
	var out []int
	for _, id := range ids {
		if id >= 0 && id < n {
			out = append(out, id)
		}
	}
	return out
}
