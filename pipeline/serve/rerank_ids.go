package serve

import (
	"fmt"
	"math"

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/loader/tokenizer"
)

// PairIDs encodes a cross-encoder's (query, document) pair as one input:
// the tokenizer's pair form cut to maxLen tokens as transformers cuts it
// (tokenizer.EncodePairTruncated), each id carrying its token type as id
// + type·stride, as an encoder reads it (lm.Spec.Encoder; TypeStride
// gives the stride, 0 for a model without token types, whose ids carry
// none). A tokenizer without a pair form is refused (errs.ErrUnsupported).
func PairIDs(tok *tokenizer.Tokenizer, stride int, query, doc string, maxLen int) ([]int, error) {
	p, err := NewPairs(tok, stride, false, query, maxLen)
	if err != nil {
		return nil, err
	}
	return p.IDs(doc)
}

// Pairs encodes a query's pairs with its documents as PairIDs (or, for
// a causal cross-encoder, CausalPairIDs) does, the query encoded once
// (tokenizer.PairEncoder): a request's long query costs its encoding
// once, not once a document.
type Pairs struct {
	p      *tokenizer.PairEncoder
	stride int
}

// NewPairs prepares the pairs of query cut to maxLen tokens: PairIDs'
// (an encoder's: the tokenizer's pair form, required, and token types at
// stride) or, with causal, CausalPairIDs' (no token types).
func NewPairs(tok *tokenizer.Tokenizer, stride int, causal bool, query string, maxLen int) (*Pairs, error) {
	if !causal && !tok.HasPairTemplate() {
		return nil, fmt.Errorf("the tokenizer has no pair form (its post-processor joins no second text): %w", errs.ErrUnsupported)
	}
	p, err := tok.NewPairEncoder(query, maxLen)
	if err != nil {
		return nil, err
	}
	if causal {
		stride = 0
	}
	return &Pairs{p: p, stride: stride}, nil
}

// IDs is the model's input of the query's pair with doc.
func (p *Pairs) IDs(doc string) ([]int, error) {
	ids, types, err := p.p.Encode(doc)
	if err != nil {
		return nil, err
	}
	for i, t := range types {
		ids[i] += t * p.stride
	}
	return ids, nil
}

// CausalPairIDs encodes a causal cross-encoder's (query, document) pair
// (a decoder's *ForSequenceClassification, lm.Spec.Classifier:
// Qwen3-Reranker converted to one label) as one input, cut to maxLen
// tokens longest first as transformers cuts a pair
// (tokenizer.EncodePairTruncated): with the tokenizer's pair form when it
// has one (Llama 3's and Mistral's templates), else the two texts' tokens
// one after the other without special tokens, which is what tokenizers
// gives for a pair when its post-processor has no pair form (none, or
// ByteLevel alone, as Qwen's: the encodings are merged as they are), and
// so what sentence-transformers' CrossEncoder feeds such a model. The
// ids carry no token type: a decoder reads none.
func CausalPairIDs(tok *tokenizer.Tokenizer, query, doc string, maxLen int) ([]int, error) {
	p, err := NewPairs(tok, 0, true, query, maxLen)
	if err != nil {
		return nil, err
	}
	return p.IDs(doc)
}

// TypeStride is the offset of one token type in an input's ids for a
// model of vocab tokens and tokenTypes types (lm.Spec.TokenTypes): vocab
// for a model that reads two or more (BERT), else 0: a model without
// token types (ModernBERT, MPNet) ignores the types a tokenizer gives,
// as transformers' forward takes no token_type_ids.
func TypeStride(vocab, tokenTypes int) int {
	if tokenTypes < 2 {
		return 0
	}
	return vocab
}

// RelevanceScore is a cross-encoder's relevance score from its logit:
// the logistic sigmoid, as sentence-transformers' CrossEncoder applies to
// a one-label model's output by default (raw: the logit as it is).
func RelevanceScore(logit float32, raw bool) float64 {
	if raw {
		return float64(logit)
	}
	return 1 / (1 + math.Exp(-float64(logit)))
}
