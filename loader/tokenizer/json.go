package tokenizer

import (
	"encoding/json"
	"fmt"
	"strconv"
)

// rawTokenizer mirrors the top level of an HF tokenizer.json. Components are
// kept raw and decoded by type in build.
type rawTokenizer struct {
	Version       string          `json:"version"`
	AddedTokens   []rawAddedToken `json:"added_tokens"`
	Normalizer    json.RawMessage `json:"normalizer"`
	PreTokenizer  json.RawMessage `json:"pre_tokenizer"`
	Model         json.RawMessage `json:"model"`
	PostProcessor json.RawMessage `json:"post_processor"`
	Decoder       json.RawMessage `json:"decoder"`
	Padding       json.RawMessage `json:"padding"`

	// bpe, when set, is the model itself, built from another format
	// (a tiktoken ranks file); Model is then not read.
	bpe *bpeModel
}

type rawAddedToken struct {
	ID         json.Number `json:"id"`
	Content    string      `json:"content"`
	SingleWord bool        `json:"single_word"`
	Lstrip     bool        `json:"lstrip"`
	Rstrip     bool        `json:"rstrip"`
	Normalized *bool       `json:"normalized"`
	Special    bool        `json:"special"`
}

// rawPattern is the {"String": ...} or {"Regex": ...} of Split and Replace.
type rawPattern struct {
	String *string `json:"String"`
	Regex  *string `json:"Regex"`
}

// component is a decoded JSON object with a "type" field.
type component struct {
	Type   string
	fields map[string]json.RawMessage
	where  string // e.g. "pre_tokenizer.pretokenizers[1]", for errors
}

func isNull(m json.RawMessage) bool {
	if len(m) == 0 {
		return true
	}
	for _, c := range m {
		switch c {
		case ' ', '\t', '\n', '\r':
			continue
		case 'n':
			return true
		default:
			return false
		}
	}
	return true
}

func parseComponent(m json.RawMessage, where string) (*component, error) {
	if isNull(m) {
		return nil, nil
	}
	fields, err := objectFields(m)
	if err != nil {
		if err := json.Unmarshal(m, &fields); err != nil {
			return nil, fmt.Errorf("%s: expected an object: %w", where, err)
		}
	}
	c := &component{fields: fields, where: where}
	if t, ok := fields["type"]; ok {
		if err := json.Unmarshal(t, &c.Type); err != nil {
			return nil, fmt.Errorf("%s.type: expected a string: %w", where, err)
		}
	}
	return c, nil
}

func (c *component) has(name string) bool {
	v, ok := c.fields[name]
	return ok && !isNull(v)
}

// get decodes field name into v; a missing or null field leaves v unchanged.
func (c *component) get(name string, v any) error {
	raw, ok := c.fields[name]
	if !ok || isNull(raw) {
		return nil
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return fmt.Errorf("%s.%s: %w", c.where, name, err)
	}
	return nil
}

func (c *component) str(name, def string) (string, error) {
	s := def
	err := c.get(name, &s)
	return s, err
}

func (c *component) boolean(name string, def bool) (bool, error) {
	b := def
	err := c.get(name, &b)
	return b, err
}

func (c *component) integer(name string, def int) (int, error) {
	raw, ok := c.fields[name]
	if !ok || isNull(raw) {
		return def, nil
	}
	var n json.Number
	if err := json.Unmarshal(raw, &n); err != nil {
		return 0, fmt.Errorf("%s.%s: expected a number: %w", c.where, name, err)
	}
	i, err := strconv.ParseInt(n.String(), 10, 64)
	if err != nil || i < 0 || i > 1<<30 {
		return 0, fmt.Errorf("%s.%s: expected a small non-negative integer, got %s", c.where, name, n)
	}
	return int(i), nil
}

// list decodes an array field of components.
func (c *component) list(name string) ([]json.RawMessage, error) {
	var l []json.RawMessage
	if err := c.get(name, &l); err != nil {
		return nil, err
	}
	return l, nil
}

// buildComponent parses m (found at where) and builds it with build at
// nesting depth; an absent or null m builds to build's nil.
func buildComponent[T any](m json.RawMessage, where string, depth int, build func(*component, int) (T, error)) (T, error) {
	c, err := parseComponent(m, where)
	if err != nil {
		var zero T
		return zero, err
	}
	return build(c, depth)
}

// buildSequence builds the steps listed in field of a "Sequence" component
// (normalizers, pretokenizers, processors, decoders) one level deeper,
// leaving out steps that build to nil.
func buildSequence[T any](c *component, field string, depth int, build func(*component, int) (T, error)) ([]T, error) {
	list, err := c.list(field)
	if err != nil {
		return nil, err
	}
	var seq []T
	for i, raw := range list {
		step, err := buildComponent(raw, fmt.Sprintf("%s.%s[%d]", c.where, field, i), depth+1, build)
		if err != nil {
			return nil, err
		}
		if any(step) != nil {
			seq = append(seq, step)
		}
	}
	return seq, nil
}
func parseID(n json.Number, where string) (int, error) {
	i, err := strconv.ParseInt(n.String(), 10, 64)
	if err != nil || i < 0 || i >= maxTokenID {
		return 0, fmt.Errorf("%s: token id %q out of range [0, %d)", where, n.String(), maxTokenID)
	}
	return int(i), nil
}
