package tokenizer

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/tputool/tputool/internal/errs"
)

// postProcessor adds special tokens around a single encoded sequence when
// Encode is called with addSpecialTokens. Pairs are not supported: tputool
// encodes one sequence at a time.
type postProcessor interface {
	process(ids []int) []int
	// around reports the ids placed before and after the sequence, for BOS()
	// and EOS() when the config does not name them.
	around() (before, after []int)
}

// templatePost is TemplateProcessing's "single" template flattened into the
// ids before and after $A.
type templatePost struct{ before, after []int }

func (p *templatePost) process(ids []int) []int {
	if len(p.before) == 0 && len(p.after) == 0 {
		return ids
	}
	out := make([]int, 0, len(ids)+len(p.before)+len(p.after))
	out = append(out, p.before...)
	out = append(out, ids...)
	return append(out, p.after...)
}

func (p *templatePost) around() ([]int, []int) { return p.before, p.after }

type seqPost []postProcessor

func (s seqPost) process(ids []int) []int {
	for _, p := range s {
		ids = p.process(ids)
	}
	return ids
}

func (s seqPost) around() ([]int, []int) {
	var b, a []int
	for _, p := range s {
		pb, pa := p.around()
		b = append(append([]int(nil), pb...), b...)
		a = append(a, pa...)
	}
	return b, a
}

func buildPostProcessor(c *component, vocab func(string) (int, bool), depth int) (postProcessor, error) {
	if c == nil {
		return nil, nil
	}
	if depth > maxNesting {
		return nil, fmt.Errorf("%s: nested deeper than %d", c.where, maxNesting)
	}
	switch c.Type {
	case "ByteLevel":
		return nil, nil
	case "Sequence":
		seq, err := buildSequence(c, "processors", depth, func(c *component, depth int) (postProcessor, error) {
			return buildPostProcessor(c, vocab, depth)
		})
		if err != nil {
			return nil, err
		}
		return seqPost(seq), nil
	case "RobertaProcessing", "BertProcessing":
		var sep, cls []json.RawMessage
		if err := c.get("sep", &sep); err != nil {
			return nil, err
		}
		if err := c.get("cls", &cls); err != nil {
			return nil, err
		}
		sepID, err := tokenPair(sep, c.where+".sep")
		if err != nil {
			return nil, err
		}
		clsID, err := tokenPair(cls, c.where+".cls")
		if err != nil {
			return nil, err
		}
		return &templatePost{before: []int{clsID}, after: []int{sepID}}, nil
	case "TemplateProcessing":
		return buildTemplate(c, vocab)
	default:
		return nil, errs.Unsupportedf("%s: post-processor type %q", c.where, c.Type)
	}
}

func tokenPair(raw []json.RawMessage, where string) (int, error) {
	if len(raw) != 2 {
		return 0, fmt.Errorf("%s: expected [token, id]", where)
	}
	var n json.Number
	if err := json.Unmarshal(raw[1], &n); err != nil {
		return 0, fmt.Errorf("%s: id: %w", where, err)
	}
	return parseID(n, where)
}

type rawSpecial struct {
	ID  string        `json:"id"`
	IDs []json.Number `json:"ids"`
}

func buildTemplate(c *component, vocab func(string) (int, bool)) (postProcessor, error) {
	var specials map[string]rawSpecial
	if err := c.get("special_tokens", &specials); err != nil {
		return nil, err
	}
	lookup := func(name, where string) ([]int, error) {
		if sp, ok := specials[name]; ok {
			ids := make([]int, 0, len(sp.IDs))
			for _, n := range sp.IDs {
				id, err := parseID(n, where)
				if err != nil {
					return nil, err
				}
				ids = append(ids, id)
			}
			return ids, nil
		}
		if id, ok := vocab(name); ok {
			return []int{id}, nil
		}
		return nil, fmt.Errorf("%s: special token %q is neither in special_tokens nor in the vocabulary", where, name)
	}
	raw, ok := c.fields["single"]
	if !ok || isNull(raw) {
		return nil, nil
	}
	p := &templatePost{}
	seenSeq := false
	addSpecial := func(name, where string) error {
		ids, err := lookup(name, where)
		if err != nil {
			return err
		}
		if seenSeq {
			p.after = append(p.after, ids...)
		} else {
			p.before = append(p.before, ids...)
		}
		return nil
	}
	// Either the structured form or the "[CLS] $A [SEP]" string form.
	var asString string
	if err := json.Unmarshal(raw, &asString); err == nil {
		for _, f := range strings.Fields(asString) {
			name, _, _ := strings.Cut(f, ":")
			if strings.HasPrefix(name, "$") {
				seenSeq = true
				continue
			}
			if err := addSpecial(name, c.where+".single"); err != nil {
				return nil, err
			}
		}
		return p, nil
	}
	var items []struct {
		SpecialToken *struct {
			ID string `json:"id"`
		} `json:"SpecialToken"`
		Sequence *struct {
			ID string `json:"id"`
		} `json:"Sequence"`
	}
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, fmt.Errorf("%s.single: %w", c.where, err)
	}
	for i, it := range items {
		where := fmt.Sprintf("%s.single[%d]", c.where, i)
		switch {
		case it.Sequence != nil:
			if seenSeq {
				return nil, errs.Unsupportedf("%s: more than one sequence in the single template", where)
			}
			seenSeq = true
		case it.SpecialToken != nil:
			if err := addSpecial(it.SpecialToken.ID, where); err != nil {
				return nil, err
			}
		default:
			return nil, fmt.Errorf("%s: expected SpecialToken or Sequence", where)
		}
	}
	return p, nil
}
