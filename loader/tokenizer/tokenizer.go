// Package tokenizer loads Hugging Face tokenizer.json files and encodes and
// decodes text the way the Rust `tokenizers` library does: added/special
// tokens first, then the normalizer, the pre-tokenizer and the model (BPE,
// Unigram, WordPiece, WordLevel), then the post-processor; decoding runs the
// decoder chain. It covers the byte-level BPE of GPT-2/Llama 3/Qwen, the
// SentencePiece-style BPE with byte fallback of Llama 2/Mistral/Gemma, CLIP's
// BPE and T5's Unigram. EncodePair and EncodePairTruncated encode a pair of
// texts (a cross-encoder's query and document) with the post-processor's
// pair form and token type ids. See docs/tokenizers.md.
//
// A Tokenizer is safe for concurrent use.
package tokenizer

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/tputool/tputool/internal/errs"
)

// Tokenizer encodes text to token ids and decodes ids to text.
type Tokenizer struct {
	model     model
	norm      normalizer
	pre       preTokenizer
	post      postProcessor
	dec       decoder
	vocab     map[string]int // original token strings (incl. added tokens)
	idToTok   []string       // dense; "" with hasID false for holes
	hasID     []bool
	added     []*addedToken
	addedByID map[int]*addedToken
	addedByTk map[string]*addedToken
	special   map[string]bool // content of special added tokens
	rawAdded  *addedMatcher   // tokens with normalized == false
	normAdded *addedMatcher   // tokens with normalized == true (normalized form)

	bos, eos, pad int // -1 when unknown
	templates     map[string]string
	maxLen        int // tokenizer_config.json's model_max_length; 0 when unset
	// chunk, when set, cuts the text into parts encoded one after the
	// other (Kimi's TikTokenTokenizer.encode); nil when it is one part.
	chunk func(string) []string

	bytesOnce  sync.Once
	tokenBytes [][]byte // TokenBytes
}

func build(raw *rawTokenizer) (*Tokenizer, error) {
	t := &Tokenizer{bos: -1, eos: -1, pad: -1, addedByID: map[int]*addedToken{}, addedByTk: map[string]*addedToken{}, special: map[string]bool{}}
	var mc *component
	if raw.bpe == nil {
		var err error
		if mc, err = parseComponent(raw.Model, "model"); err != nil {
			return nil, err
		}
		if mc == nil {
			return nil, fmt.Errorf("model: missing")
		}
	}
	var err error
	if len(raw.AddedTokens) > maxAddedTokens {
		return nil, fmt.Errorf("added_tokens: %d entries, more than the limit %d", len(raw.AddedTokens), maxAddedTokens)
	}
	if t.norm, err = buildComponent(raw.Normalizer, "normalizer", 0, buildNormalizer); err != nil {
		return nil, err
	}
	if t.pre, err = buildComponent(raw.PreTokenizer, "pre_tokenizer", 0, buildPreTokenizer); err != nil {
		return nil, err
	}
	if t.dec, err = buildComponent(raw.Decoder, "decoder", 0, buildDecoder); err != nil {
		return nil, err
	}

	// Model and vocabulary.
	var vocab map[string]int
	if raw.bpe != nil {
		vocab = raw.bpe.vocab // toByteMode swaps the model's own map
		if bl := finalByteLevel(t.pre); bl != nil && raw.bpe.toByteMode() {
			bl.raw = true
		}
		t.model = raw.bpe
	} else if vocab, err = t.buildModel(mc); err != nil {
		return nil, err
	}

	// The id table: model vocabulary plus added tokens.
	t.vocab = make(map[string]int, len(vocab)+len(raw.AddedTokens))
	maxID := -1
	for tok, id := range vocab {
		t.vocab[tok] = id
		maxID = max(maxID, id)
	}
	for i, a := range raw.AddedTokens {
		where := fmt.Sprintf("added_tokens[%d]", i)
		id, err := parseID(a.ID, where)
		if err != nil {
			return nil, err
		}
		if len(a.Content) > maxTokenBytes {
			return nil, fmt.Errorf("%s: content longer than %d bytes", where, maxTokenBytes)
		}
		if !utf8.ValidString(a.Content) {
			return nil, fmt.Errorf("%s: content is not valid UTF-8", where)
		}
		norm := !a.Special
		if a.Normalized != nil {
			norm = *a.Normalized
		}
		at := &addedToken{id: id, content: a.Content, singleWord: a.SingleWord, lstrip: a.Lstrip,
			rstrip: a.Rstrip, normalized: norm, special: a.Special}
		t.added = append(t.added, at)
		t.addedByID[id] = at
		if _, dup := t.addedByTk[a.Content]; !dup {
			t.addedByTk[a.Content] = at
		}
		if a.Special {
			t.special[a.Content] = true
		}
		maxID = max(maxID, id)
	}
	// ids index a dense table; real files are (nearly) dense, so a file
	// whose ids are mostly holes is refused rather than allocated.
	if entries := len(vocab) + len(t.added); maxID+1 > 2*entries+(1<<16) {
		return nil, fmt.Errorf("token ids up to %d for only %d tokens: ids must be (nearly) contiguous", maxID, entries)
	}
	t.idToTok = make([]string, maxID+1)
	t.hasID = make([]bool, maxID+1)
	for tok, id := range vocab {
		t.idToTok[id], t.hasID[id] = tok, true
	}
	for _, a := range t.added {
		t.idToTok[a.id], t.hasID[a.id] = a.content, true
		if _, ok := t.vocab[a.content]; !ok {
			t.vocab[a.content] = a.id
		}
	}
	var rawList, normList []*addedToken
	for _, a := range t.added {
		if a.normalized {
			normList = append(normList, a)
		} else {
			rawList = append(rawList, a)
		}
	}
	t.rawAdded = newAddedMatcher(rawList, func(a *addedToken) string { return a.content })
	var normErr error
	t.normAdded = newAddedMatcher(normList, func(a *addedToken) string {
		if t.norm == nil {
			return a.content
		}
		s, err := t.norm.normalize(a.content)
		if err != nil && normErr == nil {
			normErr = err
		}
		return s
	})
	if normErr != nil {
		return nil, fmt.Errorf("added_tokens: normalizing: %w", normErr)
	}

	if t.post, err = buildComponent(raw.PostProcessor, "post_processor", 0, func(c *component, depth int) (postProcessor, error) {
		return buildPostProcessor(c, t.TokenToID, depth)
	}); err != nil {
		return nil, err
	}
	if t.post != nil {
		before, after := t.post.around()
		if len(before) > 0 {
			t.bos = before[0]
		}
		if len(after) > 0 {
			t.eos = after[len(after)-1]
		}
	}
	if !isNull(raw.Padding) {
		var p struct {
			PadID *json.Number `json:"pad_id"`
		}
		if err := json.Unmarshal(raw.Padding, &p); err == nil && p.PadID != nil {
			if id, err := parseID(*p.PadID, "padding.pad_id"); err == nil {
				t.pad = id
			}
		}
	}
	return t, nil
}

// buildModel builds the model a tokenizer.json describes and returns its
// vocabulary (the original token strings).
func (t *Tokenizer) buildModel(mc *component) (map[string]int, error) {
	var vocab map[string]int
	var err error
	typ := mc.Type
	if typ == "" {
		// Old files omit the model type; infer it as tokenizers does.
		switch {
		case mc.has("merges"):
			typ = "BPE"
		case mc.has("max_input_chars_per_word"):
			typ = "WordPiece"
		default:
			var probe []json.RawMessage
			if mc.get("vocab", &probe) == nil && len(probe) > 0 {
				typ = "Unigram"
			} else {
				typ = "WordLevel"
			}
		}
	}
	switch typ {
	case "BPE", "WordPiece", "WordLevel":
		if vocab, err = parseVocabObject(mc); err != nil {
			return nil, err
		}
	}
	switch typ {
	case "BPE":
		m, err := buildBPE(mc, vocab)
		if err != nil {
			return nil, err
		}
		// toByteMode swaps the model's own map; vocab keeps the original
		// token strings.
		if bl := finalByteLevel(t.pre); bl != nil && m.toByteMode() {
			bl.raw = true
		}
		t.model = m
	case "Unigram":
		m, v, err := buildUnigram(mc)
		if err != nil {
			return nil, err
		}
		vocab = v
		t.model = m
	case "WordPiece":
		unk, err := mc.str("unk_token", "[UNK]")
		if err != nil {
			return nil, err
		}
		uid, ok := vocab[unk]
		if !ok {
			return nil, fmt.Errorf("model.unk_token: %q is not in the vocabulary", unk)
		}
		prefix, err := mc.str("continuing_subword_prefix", "##")
		if err != nil {
			return nil, err
		}
		maxc, err := mc.integer("max_input_chars_per_word", 100)
		if err != nil {
			return nil, err
		}
		t.model = &wordPieceModel{vocab: vocab, unk: uid, prefix: prefix, maxChars: maxc}
	case "WordLevel":
		unk, err := mc.str("unk_token", "")
		if err != nil {
			return nil, err
		}
		uid := -1
		if unk != "" {
			id, ok := vocab[unk]
			if !ok {
				return nil, fmt.Errorf("model.unk_token: %q is not in the vocabulary", unk)
			}
			uid = id
		}
		t.model = &wordLevelModel{vocab: vocab, unk: uid}
	default:
		return nil, errs.Unsupportedf("model: type %q", typ)
	}
	return vocab, nil
}

func parseVocabObject(mc *component) (map[string]int, error) {
	raw, ok := mc.fields["vocab"]
	if !ok || isNull(raw) {
		return map[string]int{}, nil
	}
	vocab, err := fastVocab(raw)
	if err != nil {
		var slow map[string]json.Number
		if err := json.Unmarshal(raw, &slow); err != nil {
			return nil, fmt.Errorf("model.vocab: %w", err)
		}
		if len(slow) > maxVocab {
			return nil, fmt.Errorf("model.vocab: %d entries, more than the limit %d", len(slow), maxVocab)
		}
		vocab = make(map[string]int, len(slow))
		for tok, n := range slow {
			id, err := parseID(n, fmt.Sprintf("model.vocab[%q]", tok))
			if err != nil {
				return nil, err
			}
			vocab[tok] = id
		}
	}
	for tok, id := range vocab {
		if len(tok) > maxTokenBytes {
			return nil, fmt.Errorf("model.vocab: a token is longer than %d bytes", maxTokenBytes)
		}
		if id < 0 || id >= maxTokenID {
			return nil, fmt.Errorf("model.vocab[%q]: token id %d out of range [0, %d)", tok, id, maxTokenID)
		}
	}
	return vocab, nil
}

// finalByteLevel returns the ByteLevel pre-tokenizer when it is the last
// step of the pre-tokenization, so that it may hand raw bytes to the model.
func finalByteLevel(p preTokenizer) *byteLevelPre {
	switch x := p.(type) {
	case *byteLevelPre:
		return x
	case seqPre:
		if len(x) > 0 {
			if bl, ok := x[len(x)-1].(*byteLevelPre); ok {
				for _, other := range x[:len(x)-1] {
					if _, dup := other.(*byteLevelPre); dup {
						return nil
					}
				}
				return bl
			}
		}
	}
	return nil
}

// ---------------------------------------------------------------------------
// Encoding

// encodeSink feeds pre-tokens to the model.
type encodeSink struct {
	m     model
	ids   []int
	limit int     // when > 0, stop once a pre-token brings ids to limit
	sub   []piece // encodePiece's split, reused
}

// errLimit stops an encoding that has reached its limit.
var errLimit = errors.New("tokenizer: limit reached")

func (e *encodeSink) emit(s string, _ bool) error {
	var err error
	e.ids, err = e.m.tokenize(s, e.ids)
	if err == nil && e.limit > 0 && len(e.ids) >= e.limit {
		return errLimit
	}
	return err
}

// Encode converts text to ids. With addSpecialTokens, the post-processor adds
// its special tokens (e.g. BOS). Invalid UTF-8 is replaced by U+FFFD first.
func (t *Tokenizer) Encode(text string, addSpecialTokens bool) ([]int, error) {
	ids, err := t.encode(text, 0)
	if err != nil {
		return nil, err
	}
	if addSpecialTokens && t.post != nil {
		ids = t.post.process(ids)
	}
	return ids, nil
}

// encode converts text to ids without special tokens. With limit > 0 it
// stops as tokenizers (0.23 and later) does when truncation is set: after
// the pre-token whose tokens bring the count to limit or more, added
// tokens counting but not stopping it.
func (t *Tokenizer) encode(text string, limit int) ([]int, error) {
	if !utf8.ValidString(text) {
		text = strings.ToValidUTF8(text, "\uFFFD")
	}
	sink := &encodeSink{m: t.model, ids: make([]int, 0, len(text)/4+8), limit: limit}
	var pieces []piece
	pieces = t.rawAdded.split(text, pieces)
	for _, p := range pieces {
		if p.id >= 0 {
			sink.ids = append(sink.ids, p.id)
			continue
		}
		s := text[p.start:p.end]
		var err error
		if parts := t.chunks(s); parts != nil {
			for j := 0; j < len(parts) && err == nil; j++ {
				err = t.encodePiece(parts[j], p.start == 0 && j == 0, sink)
			}
		} else {
			err = t.encodePiece(s, p.start == 0, sink)
		}
		if errors.Is(err, errLimit) {
			return sink.ids, nil
		} else if err != nil {
			return nil, err
		}
	}
	return sink.ids, nil
}

// chunks is t.chunk's cut of s, nil when s is one piece.
func (t *Tokenizer) chunks(s string) []string {
	if t.chunk == nil {
		return nil
	}
	return t.chunk(s)
}

// encodePiece encodes s, text between the raw added tokens (atStart when
// it opens the text), into sink: the normalizer, the normalized added
// tokens, the pre-tokenizer and the model.
func (t *Tokenizer) encodePiece(s string, atStart bool, sink *encodeSink) error {
	if s == "" {
		return nil
	}
	if t.norm != nil {
		var err error
		if s, err = t.norm.normalize(s); err != nil {
			return err
		}
	}
	sink.sub = t.normAdded.split(s, sink.sub[:0])
	for _, q := range sink.sub {
		if q.id >= 0 {
			sink.ids = append(sink.ids, q.id)
			continue
		}
		w := s[q.start:q.end]
		if w == "" {
			continue
		}
		atStart := atStart && q.start == 0
		var err error
		if t.pre != nil {
			err = t.pre.pretok(w, atStart, sink)
		} else {
			err = sink.emit(w, atStart)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// Truncate cuts ids, text encoded with its special tokens (Encode(text,
// true)), to n tokens as HF tokenizers truncate: the content is cut and
// the post-processor then adds its tokens before and after it, so they
// are kept (Qwen3-Embedding's final <|endoftext|>, whose hidden state
// last-token pooling takes). ids of n tokens or fewer come back as they
// are; when the added tokens leave no room for content, the end is cut.
func (t *Tokenizer) Truncate(text string, ids []int, n int) ([]int, error) {
	if len(ids) <= n {
		return ids, nil
	}
	var before, after []int
	if t.post != nil {
		before, after = t.post.around()
	}
	room := n - len(before) - len(after)
	if room <= 0 {
		return ids[:n], nil
	}
	content, err := t.Encode(text, false)
	if err != nil {
		return nil, err
	}
	content = content[:min(room, len(content))]
	if t.post == nil {
		return content, nil
	}
	return t.post.process(content), nil
}

// ---------------------------------------------------------------------------
// Decoding

// Decode converts ids to text. Unknown ids are skipped, as in tokenizers.
// With skipSpecialTokens, special added tokens are left out. Unlike
// transformers, no clean_up_tokenization_spaces step is applied.
func (t *Tokenizer) Decode(ids []int, skipSpecialTokens bool) string {
	tokens := make([]string, 0, len(ids))
	for _, id := range ids {
		tok, ok := t.IDToToken(id)
		if !ok {
			continue
		}
		if skipSpecialTokens && t.special[tok] {
			if a, isAdded := t.addedByID[id]; isAdded && a.special {
				continue
			}
		}
		tokens = append(tokens, tok)
	}
	if t.dec == nil {
		return strings.Join(tokens, " ")
	}
	out, err := t.dec.decodeChain(tokens)
	if err != nil {
		// Only a regexp2 timeout in a Replace decoder can fail here.
		return strings.Join(tokens, "")
	}
	return strings.Join(out, "")
}

// TokenBytes returns, for every id, the bytes the token adds to a text
// it does not start (as the stream decoder emits them, but with a partial
// UTF-8 character kept as its bytes), or nil for special tokens and ids
// without a token: the vocabulary constrained decoding walks. It is
// computed once.
func (t *Tokenizer) TokenBytes() [][]byte {
	t.bytesOnce.Do(func() {
		out := make([][]byte, len(t.idToTok))
		// An anchor token in front keeps the first-token rules (a stripped
		// leading space, a Metaspace prefix) off the token itself.
		anchor, prefix := "", ""
		for id, tok := range t.idToTok {
			if !t.hasID[id] || t.addedByID[id] != nil {
				continue
			}
			if s := t.decodeRaw([]string{tok}); len(s) == 1 && s[0] >= 'a' && s[0] <= 'z' {
				anchor, prefix = tok, s
				break
			}
		}
		for id, tok := range t.idToTok {
			if !t.hasID[id] {
				continue
			}
			if a := t.addedByID[id]; a != nil && a.special {
				continue
			}
			var s string
			if anchor != "" {
				s = t.decodeRaw([]string{anchor, tok})
				if rest, ok := strings.CutPrefix(s, prefix); ok {
					s = rest
				} else {
					s = t.decodeRaw([]string{tok})
				}
			} else {
				s = t.decodeRaw([]string{tok})
			}
			if s != "" {
				out[id] = []byte(s)
			}
		}
		t.tokenBytes = out
	})
	return t.tokenBytes
}

// decodeRaw decodes tokens as Decode does, keeping invalid UTF-8.
func (t *Tokenizer) decodeRaw(tokens []string) string {
	if t.dec == nil {
		return strings.Join(tokens, " ")
	}
	out, err := decodeRaw(t.dec, tokens)
	if err != nil {
		return strings.Join(tokens, "")
	}
	return strings.Join(out, "")
}

// ---------------------------------------------------------------------------
// Vocabulary

// TokenToID returns the id of a token string (model vocabulary or added).
func (t *Tokenizer) TokenToID(tok string) (int, bool) {
	if a, ok := t.addedByTk[tok]; ok {
		return a.id, true
	}
	id, ok := t.vocab[tok]
	return id, ok
}

// IDToToken returns the token string of id.
func (t *Tokenizer) IDToToken(id int) (string, bool) {
	if id < 0 || id >= len(t.idToTok) || !t.hasID[id] {
		return "", false
	}
	return t.idToTok[id], true
}

// VocabSize is one more than the largest id (model vocabulary and added
// tokens), the size an embedding table must have at least.
func (t *Tokenizer) VocabSize() int { return len(t.idToTok) }

// IsSpecial reports whether id is a special added token.
func (t *Tokenizer) IsSpecial(id int) bool {
	a, ok := t.addedByID[id]
	return ok && a.special
}

// SpecialTokens returns the ids of all special added tokens, sorted.
func (t *Tokenizer) SpecialTokens() []int {
	var ids []int
	for id, a := range t.addedByID {
		if a.special {
			ids = append(ids, id)
		}
	}
	sort.Ints(ids)
	return ids
}

// BOS returns the beginning-of-sequence id: tokenizer_config.json's
// bos_token when loaded with LoadDir, else the first special token the
// post-processor puts before the text.
func (t *Tokenizer) BOS() (int, bool) { return t.bos, t.bos >= 0 }

// EOS returns the end-of-sequence id (tokenizer_config.json's eos_token, else
// the last special token the post-processor appends).
func (t *Tokenizer) EOS() (int, bool) { return t.eos, t.eos >= 0 }

// ModelMaxLength is tokenizer_config.json's model_max_length, the longest
// input the tokenizer was saved for (what sentence-transformers and
// CrossEncoder cut inputs to, with the model's positions); 0 when it is
// unset or transformers' "no limit".
func (t *Tokenizer) ModelMaxLength() int { return t.maxLen }

// Pad returns the padding id (pad_token, else tokenizer.json's padding).
func (t *Tokenizer) Pad() (int, bool) { return t.pad, t.pad >= 0 }
