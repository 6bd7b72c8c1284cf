package tokenizer

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/tputool/tputool/internal/errs"
)

// postProcessor adds special tokens around an encoded sequence, or around
// the two sequences of a pair, as tokenizers' post-processors do.
type postProcessor interface {
	// process adds the special tokens of the single-sequence form.
	process(ids []int) []int
	// around reports the ids placed before and after the sequence, for BOS()
	// and EOS() when the config does not name them.
	around() (before, after []int)
	// processSegments is tokenizers' process_encodings: it maps the parts
	// of an encoding (one or two sequences at first) to the parts of the
	// result, adding special tokens when add is set and setting type ids.
	processSegments(segs []segment, add bool) ([]segment, error)
	// pairForm reports whether the post-processor puts a pair in a form of
	// its own (special tokens, type ids), and err when it has a pair form
	// that cannot be used (a template without "pair").
	pairForm() (has bool, err error)
}

// segment is one part of an encoding as tokenizers' post-processors pass
// it on (an Encoding of process_encodings' list): ids and their type ids.
type segment struct{ ids, types []int }

func filled(n, v int) []int {
	s := make([]int, n)
	if v != 0 {
		for i := range s {
			s[i] = v
		}
	}
	return s
}

// tmplPiece is one piece of a TemplateProcessing template: a sequence or a
// special token's ids, with the type id its tokens get.
type tmplPiece struct {
	seq    int   // 0 for $A, 1 for $B, -1 for a special token
	ids    []int // a special token's ids
	typeID int
}

// templatePost is TemplateProcessing. The "single" template is also kept
// flattened into the ids before and after $A.
type templatePost struct {
	before, after []int
	single        []tmplPiece
	pair          []tmplPiece
	// pairErr says why the pair template cannot be used (missing, not
	// using both $A and $B, naming an unknown token); loading does not
	// fail on it, only encoding a pair does.
	pairErr error
}

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

func (p *templatePost) pairForm() (bool, error) { return p.pairErr == nil, p.pairErr }

// processSegments applies the template as tokenizers' apply_template does:
// each piece in order, a sequence with all its type ids set to the piece's,
// a special token only when add is set.
func (p *templatePost) processSegments(segs []segment, add bool) ([]segment, error) {
	var pieces []tmplPiece
	switch len(segs) {
	case 1:
		pieces = p.single
	case 2:
		if p.pairErr != nil {
			return nil, p.pairErr
		}
		pieces = p.pair
	default:
		return nil, fmt.Errorf("TemplateProcessing: %d sequences, expected 1 or 2", len(segs))
	}
	out := make([]segment, 0, len(pieces))
	for _, pc := range pieces {
		switch {
		case pc.seq >= 0:
			s := segs[min(pc.seq, len(segs)-1)]
			out = append(out, segment{ids: s.ids, types: filled(len(s.ids), pc.typeID)})
		case add:
			out = append(out, segment{ids: pc.ids, types: filled(len(pc.ids), pc.typeID)})
		}
	}
	return out, nil
}

// flatPieces is the template "before $A after" with one type id.
func flatPieces(before, after []int, typeID int) []tmplPiece {
	var out []tmplPiece
	if len(before) > 0 {
		out = append(out, tmplPiece{seq: -1, ids: before, typeID: typeID})
	}
	out = append(out, tmplPiece{seq: 0, typeID: typeID})
	if len(after) > 0 {
		out = append(out, tmplPiece{seq: -1, ids: after, typeID: typeID})
	}
	return out
}

// clsSepPost is BertProcessing or RobertaProcessing: [CLS] $A [SEP] for a
// single sequence. For a pair, BertProcessing writes [CLS] A [SEP] B [SEP]
// with type ids 0 up to the first [SEP] and 1 after it; RobertaProcessing
// writes <s> A </s> </s> B </s> and sets every type id to 0, with or
// without special tokens.
type clsSepPost struct {
	cls, sep int
	roberta  bool
}

func (p *clsSepPost) process(ids []int) []int {
	out := make([]int, 0, len(ids)+2)
	out = append(out, p.cls)
	out = append(out, ids...)
	return append(out, p.sep)
}

func (p *clsSepPost) around() ([]int, []int) { return []int{p.cls}, []int{p.sep} }

func (p *clsSepPost) pairForm() (bool, error) { return true, nil }

func (p *clsSepPost) processSegments(segs []segment, add bool) ([]segment, error) {
	out := make([]segment, len(segs))
	for i, s := range segs {
		types := s.types
		if p.roberta {
			types = filled(len(s.ids), 0)
		}
		out[i] = segment{ids: s.ids, types: types}
	}
	if !add {
		return out, nil
	}
	for i, s := range out {
		var ids, types []int
		switch {
		case i == 0:
			ids = append(append(append(make([]int, 0, len(s.ids)+2), p.cls), s.ids...), p.sep)
			types = append(append(append(make([]int, 0, len(s.ids)+2), 0), s.types...), 0)
		case p.roberta:
			ids = append(append(append(make([]int, 0, len(s.ids)+2), p.sep), s.ids...), p.sep)
			types = filled(len(ids), 0)
		default:
			ids = append(append(make([]int, 0, len(s.ids)+1), s.ids...), p.sep)
			types = append(append(make([]int, 0, len(s.ids)+1), s.types...), 1)
		}
		out[i] = segment{ids: ids, types: types}
	}
	return out, nil
}

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

func (s seqPost) processSegments(segs []segment, add bool) ([]segment, error) {
	for _, p := range s {
		var err error
		if segs, err = p.processSegments(segs, add); err != nil {
			return nil, err
		}
	}
	return segs, nil
}

func (s seqPost) pairForm() (bool, error) {
	has := false
	for _, p := range s {
		h, err := p.pairForm()
		if err != nil {
			return false, err
		}
		has = has || h
	}
	return has, nil
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
		// It only trims offsets: the ids and type ids stay as they are.
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
		return &clsSepPost{cls: clsID, sep: sepID, roberta: c.Type == "RobertaProcessing"}, nil
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
	single, err := parseTemplate(raw, c.where+".single", lookup)
	if err != nil {
		return nil, err
	}
	p := &templatePost{single: single}
	seenSeq := false
	for i, pc := range single {
		if pc.seq >= 0 {
			if seenSeq {
				return nil, errs.Unsupportedf("%s.single[%d]: more than one sequence in the single template", c.where, i)
			}
			seenSeq = true
			continue
		}
		if seenSeq {
			p.after = append(p.after, pc.ids...)
		} else {
			p.before = append(p.before, pc.ids...)
		}
	}
	// The pair template matters only to pairs: a problem with it is kept
	// for EncodePair instead of failing the load.
	if raw, ok := c.fields["pair"]; !ok || isNull(raw) {
		p.pairErr = errs.Unsupportedf("%s: TemplateProcessing has no pair template", c.where)
	} else if p.pair, err = parseTemplate(raw, c.where+".pair", lookup); err != nil {
		p.pair, p.pairErr = nil, err
	} else {
		var hasA, hasB bool
		for _, pc := range p.pair {
			hasA = hasA || pc.seq == 0
			hasB = hasB || pc.seq == 1
		}
		if !hasA || !hasB {
			p.pair, p.pairErr = nil, errs.Unsupportedf("%s.pair: the pair template must use both $A and $B", c.where)
		}
	}
	return p, nil
}

// parseTemplate reads a template in the structured form tokenizer.json
// has ([{"SpecialToken": {"id", "type_id"}}, {"Sequence": {"id", "type_id"}}])
// or as a string ("[CLS] $A [SEP] $B:1 [SEP]:1") read as tokenizers'
// Piece::try_from reads one: "$", "$A" and "$a" are $A, "$B" and "$b" are
// $B, "$N" is $A with type id N, ":N" sets the type id, anything else is a
// special token.
func parseTemplate(raw json.RawMessage, where string, lookup func(name, where string) ([]int, error)) ([]tmplPiece, error) {
	var out []tmplPiece
	var asString string
	if err := json.Unmarshal(raw, &asString); err == nil {
		for i, f := range strings.Fields(asString) {
			w := fmt.Sprintf("%s[%d]", where, i)
			pc, name, err := parsePieceString(f, w)
			if err != nil {
				return nil, err
			}
			if pc.seq < 0 {
				if pc.ids, err = lookup(name, w); err != nil {
					return nil, err
				}
			}
			out = append(out, pc)
		}
		return out, nil
	}
	var items []struct {
		SpecialToken *struct {
			ID     string `json:"id"`
			TypeID uint32 `json:"type_id"`
		} `json:"SpecialToken"`
		Sequence *struct {
			ID     string `json:"id"`
			TypeID uint32 `json:"type_id"`
		} `json:"Sequence"`
	}
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	for i, it := range items {
		w := fmt.Sprintf("%s[%d]", where, i)
		switch {
		case it.Sequence != nil:
			seq := 0
			switch it.Sequence.ID {
			case "A":
			case "B":
				seq = 1
			default:
				return nil, fmt.Errorf("%s: sequence %q, expected A or B", w, it.Sequence.ID)
			}
			out = append(out, tmplPiece{seq: seq, typeID: int(it.Sequence.TypeID)})
		case it.SpecialToken != nil:
			ids, err := lookup(it.SpecialToken.ID, w)
			if err != nil {
				return nil, err
			}
			out = append(out, tmplPiece{seq: -1, ids: ids, typeID: int(it.SpecialToken.TypeID)})
		default:
			return nil, fmt.Errorf("%s: expected SpecialToken or Sequence", w)
		}
	}
	return out, nil
}

// parsePieceString reads one piece of a string template; a special token
// comes back with seq -1, no ids yet and its name.
func parsePieceString(f, where string) (pc tmplPiece, name string, err error) {
	bad := func() (tmplPiece, string, error) {
		return tmplPiece{}, "", fmt.Errorf("%s: cannot read template piece %q", where, f)
	}
	name, typ, hasType := strings.Cut(f, ":")
	if strings.Contains(typ, ":") {
		return bad()
	}
	pc = tmplPiece{seq: -1}
	if rest, ok := strings.CutPrefix(name, "$"); ok {
		switch rest {
		case "", "A", "a":
			pc.seq = 0
		case "B", "b":
			pc.seq = 1
		default:
			n, err := strconv.ParseUint(rest, 10, 32)
			if err != nil {
				return bad()
			}
			pc.seq, pc.typeID = 0, int(n)
		}
	}
	if hasType {
		n, err := strconv.ParseUint(typ, 10, 32)
		if err != nil {
			return bad()
		}
		pc.typeID = int(n)
	}
	return pc, name, nil
}
