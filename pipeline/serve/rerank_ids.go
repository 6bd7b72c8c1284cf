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
	if !tok.HasPairTemplate() {
		return nil, fmt.Errorf("the tokenizer has no pair form (its post-processor joins no second text): %w", errs.ErrUnsupported)
	}
	ids, types, err := tok.EncodePairTruncated(query, doc, maxLen)
	if err != nil {
		return nil, err
	}
	for i, t := range types {
		ids[i] += t * stride
	}
	return ids, nil
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
