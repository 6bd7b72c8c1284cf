package tokenizer

import "fmt"

// EncodePair encodes the pair (a, b), a cross-encoder's (query, document),
// as HF tokenizers' encode(a, b, add_special_tokens) does: each text is
// encoded alone as Encode(text, false) does, then the post-processor puts
// the two together. It returns the ids and their token type ids (same
// length).
//
// With addSpecialTokens, the post-processor's pair form:
//   - TemplateProcessing: its "pair" template, each $A/$B and special
//     token with the template's type id;
//   - BertProcessing: [CLS] A [SEP] B [SEP], type ids 0 for [CLS] A [SEP]
//     and 1 for B [SEP];
//   - RobertaProcessing: <s> A </s> </s> B </s>, type ids all 0;
//   - none, or ByteLevel only: A B, type ids 0 for A and 1 for B.
//
// Without, A B with the type ids the post-processor gives the sequences:
// the template's types of $A and $B, all 0 for RobertaProcessing, else 0
// for A and 1 for B.
//
// A TemplateProcessing whose pair template is missing or does not use both
// $A and $B cannot encode a pair: an error wrapping errs.ErrUnsupported
// (HasPairTemplate reports it beforehand).
func (t *Tokenizer) EncodePair(a, b string, addSpecialTokens bool) (ids, typeIDs []int, err error) {
	ea, err := t.Encode(a, false)
	if err != nil {
		return nil, nil, err
	}
	eb, err := t.Encode(b, false)
	if err != nil {
		return nil, nil, err
	}
	return t.postPair(ea, eb, addSpecialTokens)
}

// EncodePairTruncated encodes the pair (a, b) with its special tokens, cut
// to at most maxLen tokens in all, as tokenizers (0.23) does with
// truncation {max_length: maxLen, strategy: LongestFirst}, which is what
// transformers' fast tokenizer(a, b, truncation=True, max_length=maxLen)
// sets. It returns what EncodePair(a', b', true) returns for the cut
// texts a', b':
//  1. each text is encoded alone, stopping after the pre-token (word) that
//     brings it to maxLen tokens or more (tokenizers' early exit);
//  2. if the two and the PairSpecialTokens exceed maxLen, the texts are
//     cut to room = maxLen - PairSpecialTokens tokens by LongestFirst
//     (the shorter kept whole when it takes at most half of room, else
//     both cut to halves with room's odd token to the longer, to the
//     second on a tie), each keeping its first tokens;
//  3. the post-processor adds its tokens.
//
// Step 1 matters only when both texts have maxLen tokens or more: it may
// change which is the longer and so which keeps the odd token (tokenizers
// before 0.23 compared the full lengths).
//
// When the pair must be cut and room is too small for one token of each
// text (of each that has tokens), it returns an error; tokenizers would
// drop a text.
func (t *Tokenizer) EncodePairTruncated(a, b string, maxLen int) (ids, typeIDs []int, err error) {
	p, err := t.NewPairEncoder(a, maxLen)
	if err != nil {
		return nil, nil, err
	}
	return p.Encode(b)
}

// PairEncoder encodes the pairs of one first text with many second texts
// (a query with each of its documents) as EncodePairTruncated does, the
// first text encoded once: a long query costs its encoding once, not once
// a document.
type PairEncoder struct {
	t      *Tokenizer
	ea     []int
	maxLen int
	added  int
}

// NewPairEncoder prepares EncodePairTruncated(a, b, maxLen) for any b.
func (t *Tokenizer) NewPairEncoder(a string, maxLen int) (*PairEncoder, error) {
	added, err := t.PairSpecialTokens()
	if err != nil {
		return nil, err
	}
	ea, err := t.encode(a, max(maxLen, 1))
	if err != nil {
		return nil, err
	}
	// Full slice: a post-processor that appends to it copies, so no pair
	// writes into the next one's first text.
	return &PairEncoder{t: t, ea: ea[:len(ea):len(ea)], maxLen: maxLen, added: added}, nil
}

// First is the first text's tokens as the encoder holds them (up to
// maxLen of them, tokenizers' early exit): read them, do not change them.
func (p *PairEncoder) First() []int { return p.ea }

// Encode is EncodePairTruncated(a, b, maxLen) for the encoder's a and
// maxLen. It is safe for one goroutine at a time.
func (p *PairEncoder) Encode(b string) (ids, typeIDs []int, err error) {
	eb, err := p.t.encode(b, max(p.maxLen, 1))
	if err != nil {
		return nil, nil, err
	}
	ea := p.ea
	if len(ea)+len(eb)+p.added > p.maxLen {
		room := p.maxLen - p.added
		need := min(len(ea), 1) + min(len(eb), 1)
		if room < need {
			return nil, nil, fmt.Errorf("tokenizer: a pair cut to %d tokens has no room for its %d special tokens and one token of each text", p.maxLen, p.added)
		}
		na, nb := LongestFirst(len(ea), len(eb), room)
		ea, eb = ea[:na:na], eb[:nb]
	}
	return p.t.postPair(ea, eb, true)
}

// LongestFirst returns how many tokens of two sequences of n1 and n2
// tokens tokenizers' LongestFirst truncation keeps within room tokens
// (the maximum length less the special tokens), as its truncate_encodings
// computes them:
//   - n1+n2 <= room: both whole;
//   - else, when the shorter one takes at most half of room: the shorter
//     whole, the longer cut to the rest (room - shorter);
//   - else both cut: the shorter to room/2, the longer to room/2 plus
//     room's odd token; on a tie the second counts as the longer one and
//     keeps the odd token.
//
// This is not the one-token-at-a-time loop of transformers' slow
// tokenizers, whose odd token goes to the first sequence: it differs when
// both are cut to an odd room and the second is the longer or ties.
func LongestFirst(n1, n2, room int) (k1, k2 int) {
	room = max(room, 0)
	if n1+n2 <= room {
		return n1, n2
	}
	short, long := min(n1, n2), max(n1, n2)
	if 2*short <= room {
		long = room - short
	} else {
		short = room / 2
		long = room - short
	}
	if n1 > n2 {
		return long, short
	}
	return short, long
}

// HasPairTemplate reports whether the post-processor has a pair form of its
// own (TemplateProcessing with a usable "pair" template, BertProcessing,
// RobertaProcessing, alone or in a Sequence), the special tokens and type
// ids a cross-encoder was trained on. Without one (no post-processor,
// ByteLevel only, a template whose pair is missing or lacks $A or $B) a
// caller that scores pairs should refuse the tokenizer; EncodePair then
// either concatenates the texts or fails.
func (t *Tokenizer) HasPairTemplate() bool {
	if t.post == nil {
		return false
	}
	has, err := t.post.pairForm()
	return has && err == nil
}

// PairSpecialTokens is the number of tokens the post-processor adds to a
// pair (3 for BERT's [CLS] A [SEP] B [SEP], 4 for RoBERTa's and XLM-R's,
// 0 without a pair form): EncodePairTruncated cuts a pair to no fewer than
// this plus 2 tokens. The error is EncodePair's for a pair it cannot encode.
func (t *Tokenizer) PairSpecialTokens() (int, error) {
	ids, _, err := t.postPair(nil, nil, true)
	return len(ids), err
}

// postPair is tokenizers' post-processing of a pair: A with type ids 0 and
// B with type ids 1 pass through the post-processor, then are joined.
func (t *Tokenizer) postPair(a, b []int, add bool) (ids, typeIDs []int, err error) {
	segs := []segment{{ids: a, types: filled(len(a), 0)}, {ids: b, types: filled(len(b), 1)}}
	if t.post != nil {
		if segs, err = t.post.processSegments(segs, add); err != nil {
			return nil, nil, err
		}
	}
	n := 0
	for _, s := range segs {
		n += len(s.ids)
	}
	ids, typeIDs = make([]int, 0, n), make([]int, 0, n)
	for _, s := range segs {
		ids = append(ids, s.ids...)
		typeIDs = append(typeIDs, s.types...)
	}
	return ids, typeIDs, nil
}
