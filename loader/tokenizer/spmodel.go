package tokenizer

import (
	"bytes"
	"cmp"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/tputool/tputool/internal/errs"
)

// spFiles are the names slow tokenizers give their SentencePiece model:
// tokenizer.model (Llama, InternLM, Baichuan...) and spiece.model (T5's
// name). LoadDir also reads each with a .gz suffix (the tests' fixtures).
var spFiles = []string{"tokenizer.model", "spiece.model"}

// spLlamaClasses are the tokenizer classes whose SentencePiece model
// loadSPModel turns into a fast tokenizer as transformers' LlamaConverter
// does (its legacy flag and add_prefix_space included).
var spLlamaClasses = map[string]bool{
	"LlamaTokenizer": true, "LlamaTokenizerFast": true, "CodeLlamaTokenizer": true, "CodeLlamaTokenizerFast": true,
}

// spNativeClasses are the tokenizer classes whose slow tokenizer calls
// SentencePiece on the text between added tokens and adds BOS (InternLM's
// and Baichuan's remote code), and "" (no tokenizer_config.json, or no
// class in it): loadSPModel reproduces SentencePiece's own normalizer
// (the precompiled charsmap, remove_extra_whitespaces, add_dummy_prefix,
// escape_whitespaces) for them. Other classes (T5's extra ids, XLM-R's
// and ALBERT's remapped vocabularies, Gemma's split on spaces...) change
// the vocabulary or the pipeline around the model and are refused by name.
var spNativeClasses = map[string]bool{
	"": true, "InternLM2Tokenizer": true, "InternLM2TokenizerFast": true, "BaichuanTokenizer": true,
}

const (
	// maxSPModelBytes bounds a SentencePiece model file (Gemma's 256,000
	// pieces take 4.2 MB).
	maxSPModelBytes = 64 << 20
	// maxSPPieceBytes bounds the pieces BPE merges are made of (the
	// trainer's max_sentencepiece_length is 16 characters by default and
	// at most 512).
	maxSPPieceBytes = 1 << 10
	// maxSPMergeWork bounds the sum of those pieces' lengths squared: the
	// bytes that finding every piece's splits hashes, and a bound on the
	// bytes the merges hold. Llama 2's 32,000 pieces come to about 1e6;
	// a hostile file of long pieces would otherwise take seconds and
	// gigabytes.
	maxSPMergeWork = 1 << 27
)

// SentencePiece piece types (sentencepiece_model.proto).
const (
	spNormal      = 1
	spUnknown     = 2
	spControl     = 3
	spUserDefined = 4
	spUnused      = 5
	spByte        = 6
)

type spPiece struct {
	piece string
	score float32
	typ   int32
}

// spModel is what tputool reads of a SentencePiece ModelProto.
type spModel struct {
	pieces []spPiece
	// Trainer spec.
	modelType                     int32 // 1 unigram, 2 BPE, 3 word, 4 char
	byteFallback, whitespaceAsSuf bool
	unkID, bosID, eosID           int32
	// Normalizer spec.
	normName                                string
	charsmap                                []byte
	addDummyPrefix, removeExtraWS, escapeWS bool
}

// pbField is one field of a protobuf message on the wire.
type pbField struct {
	num  int
	wire int    // 0 varint, 1 fixed64, 2 bytes, 5 fixed32
	v    uint64 // varint, fixed32 and fixed64 values
	data []byte // wire type 2
}

// pbFields splits a protobuf message into its fields, refusing groups,
// unknown wire types and lengths past the end.
func pbFields(b []byte, visit func(f pbField) error) error {
	for len(b) > 0 {
		key, n := binary.Uvarint(b)
		if n <= 0 {
			return errors.New("truncated field key")
		}
		b = b[n:]
		f := pbField{num: int(key >> 3), wire: int(key & 7)}
		if key>>3 == 0 || key>>3 > math.MaxInt32 {
			return fmt.Errorf("field number %d out of range", key>>3)
		}
		switch f.wire {
		case 0:
			if f.v, n = binary.Uvarint(b); n <= 0 {
				return fmt.Errorf("field %d: truncated varint", f.num)
			}
			b = b[n:]
		case 1:
			if len(b) < 8 {
				return fmt.Errorf("field %d: truncated fixed64", f.num)
			}
			f.v, b = binary.LittleEndian.Uint64(b), b[8:]
		case 2:
			l, n := binary.Uvarint(b)
			if n <= 0 || l > uint64(len(b)-n) {
				return fmt.Errorf("field %d: length past the end of the message", f.num)
			}
			f.data, b = b[n:n+int(l)], b[n+int(l):]
		case 5:
			if len(b) < 4 {
				return fmt.Errorf("field %d: truncated fixed32", f.num)
			}
			f.v, b = uint64(binary.LittleEndian.Uint32(b)), b[4:]
		default:
			return fmt.Errorf("field %d: wire type %d is not read", f.num, f.wire)
		}
		if err := visit(f); err != nil {
			return err
		}
	}
	return nil
}

// want checks a field's wire type.
func (f pbField) want(wire int, name string) error {
	if f.wire != wire {
		return fmt.Errorf("%s (field %d): wire type %d, expected %d", name, f.num, f.wire, wire)
	}
	return nil
}

// parseSPModel reads a serialized SentencePiece ModelProto: its pieces,
// the trainer spec's model type, byte fallback and special ids, and the
// normalizer spec (proto2 defaults where a field is absent).
func parseSPModel(data []byte) (*spModel, error) {
	m := &spModel{modelType: 1, unkID: 0, bosID: 1, eosID: 2, addDummyPrefix: true, removeExtraWS: true, escapeWS: true}
	err := pbFields(data, func(f pbField) error {
		switch f.num {
		case 1: // pieces
			if err := f.want(2, "pieces"); err != nil {
				return err
			}
			if len(m.pieces) == maxVocab {
				return fmt.Errorf("more than %d pieces", maxVocab)
			}
			p := spPiece{typ: spNormal}
			if err := pbFields(f.data, func(g pbField) error {
				switch g.num {
				case 1:
					if err := g.want(2, "piece"); err != nil {
						return err
					}
					p.piece = string(g.data)
				case 2:
					if err := g.want(5, "score"); err != nil {
						return err
					}
					p.score = math.Float32frombits(uint32(g.v))
				case 3:
					if err := g.want(0, "type"); err != nil {
						return err
					}
					p.typ = int32(g.v)
				}
				return nil
			}); err != nil {
				return fmt.Errorf("piece %d: %w", len(m.pieces), err)
			}
			if p.piece == "" || !utf8.ValidString(p.piece) {
				return fmt.Errorf("piece %d: %q is empty or not UTF-8", len(m.pieces), p.piece)
			}
			if p.typ < spNormal || p.typ > spByte {
				return fmt.Errorf("piece %d (%q): unknown type %d", len(m.pieces), p.piece, p.typ)
			}
			if len(p.piece) > maxSPPieceBytes && (p.typ == spNormal || p.typ == spUnused) {
				return fmt.Errorf("piece %d: %d bytes, more than %d", len(m.pieces), len(p.piece), maxSPPieceBytes)
			}
			if math.IsNaN(float64(p.score)) || math.IsInf(float64(p.score), 0) {
				return fmt.Errorf("piece %d (%q): score %v", len(m.pieces), p.piece, p.score)
			}
			m.pieces = append(m.pieces, p)
		case 2: // trainer_spec
			if err := f.want(2, "trainer_spec"); err != nil {
				return err
			}
			return pbFields(f.data, func(g pbField) error {
				var err error
				switch g.num {
				case 3:
					err = g.want(0, "model_type")
					m.modelType = int32(g.v)
				case 24:
					err = g.want(0, "treat_whitespace_as_suffix")
					m.whitespaceAsSuf = g.v != 0
				case 35:
					err = g.want(0, "byte_fallback")
					m.byteFallback = g.v != 0
				case 40:
					err = g.want(0, "unk_id")
					m.unkID = int32(g.v)
				case 41:
					err = g.want(0, "bos_id")
					m.bosID = int32(g.v)
				case 42:
					err = g.want(0, "eos_id")
					m.eosID = int32(g.v)
				}
				if err != nil {
					return fmt.Errorf("trainer_spec: %w", err)
				}
				return nil
			})
		case 3: // normalizer_spec
			if err := f.want(2, "normalizer_spec"); err != nil {
				return err
			}
			return pbFields(f.data, func(g pbField) error {
				var err error
				switch g.num {
				case 1:
					err = g.want(2, "name")
					m.normName = string(g.data)
				case 2:
					err = g.want(2, "precompiled_charsmap")
					m.charsmap = g.data
				case 3:
					err = g.want(0, "add_dummy_prefix")
					m.addDummyPrefix = g.v != 0
				case 4:
					err = g.want(0, "remove_extra_whitespaces")
					m.removeExtraWS = g.v != 0
				case 5:
					err = g.want(0, "escape_whitespaces")
					m.escapeWS = g.v != 0
				}
				if err != nil {
					return fmt.Errorf("normalizer_spec: %w", err)
				}
				return nil
			})
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(m.pieces) == 0 {
		return nil, errors.New("no pieces (not a SentencePiece model?)")
	}
	seen := make(map[string]bool, len(m.pieces))
	for i, p := range m.pieces {
		if seen[p.piece] {
			return nil, fmt.Errorf("piece %d: %q appears twice", i, p.piece)
		}
		seen[p.piece] = true
	}
	switch m.modelType {
	case 1, 2:
	case 3, 4:
		return nil, errs.Unsupportedf("model type %d (%s); tputool reads unigram and BPE SentencePiece models", m.modelType, map[int32]string{3: "word", 4: "char"}[m.modelType])
	default:
		return nil, fmt.Errorf("unknown model type %d", m.modelType)
	}
	if m.whitespaceAsSuf {
		return nil, errs.Unsupportedf("treat_whitespace_as_suffix is not read")
	}
	if m.unkID < 0 || int(m.unkID) >= len(m.pieces) || m.pieces[m.unkID].typ != spUnknown {
		return nil, fmt.Errorf("unk_id %d is not an unknown piece of the %d", m.unkID, len(m.pieces))
	}
	return m, nil
}

// pieceAt names the piece of a special id, "" when the id is unset (-1)
// or out of range.
func (m *spModel) pieceAt(id int32) string {
	if id < 0 || int(id) >= len(m.pieces) {
		return ""
	}
	return m.pieces[id].piece
}

// spMerges orders the BPE merges of a SentencePiece model as transformers'
// SentencePieceExtractor did when it wrote the Hub's tokenizer.json files
// (Llama 2's among them, TestSPModelLlama2): every split of a piece into
// two pieces of the vocabulary (ordered by their ids), all sorted by the
// piece's score, stably. (Later transformers releases break ties in
// score by the parts' lengths; the releases' files do not.)
// SentencePiece merges the adjacent pair whose union scores highest, so
// rank and score agree. Pieces of the types skip names give no merge:
// none for LlamaConverter, which merges into every piece; for
// SentencePiece's own reading the control, unknown and byte pieces,
// which it never merges into. It refuses a model whose pieces' lengths
// squared pass maxSPMergeWork.
func (m *spModel) spMerges(vocab map[string]int, skip func(typ int32) bool) ([]string, error) {
	work := 0
	for _, p := range m.pieces {
		if !skip(p.typ) {
			work += len(p.piece) * len(p.piece)
		}
	}
	if work > maxSPMergeWork {
		return nil, fmt.Errorf("pieces whose lengths squared sum to %d, past %d (a piece's splits are indexed for its merges)", work, maxSPMergeWork)
	}
	type merge struct {
		l, r  string
		score float32
	}
	var merges []merge
	for _, p := range m.pieces {
		if skip(p.typ) {
			continue
		}
		start := len(merges)
		for i := range p.piece {
			if i == 0 {
				continue
			}
			l, r := p.piece[:i], p.piece[i:]
			if _, ok := vocab[l]; !ok {
				continue
			}
			if _, ok := vocab[r]; !ok {
				continue
			}
			merges = append(merges, merge{l, r, p.score})
		}
		slices.SortFunc(merges[start:], func(a, b merge) int {
			return cmp.Or(cmp.Compare(vocab[a.l], vocab[b.l]), cmp.Compare(vocab[a.r], vocab[b.r]))
		})
	}
	if len(merges) > maxMerges {
		return nil, fmt.Errorf("%d merges, more than %d", len(merges), maxMerges)
	}
	slices.SortStableFunc(merges, func(a, b merge) int { return cmp.Compare(b.score, a.score) })
	out := make([]string, len(merges))
	for i, mg := range merges {
		out[i] = mg.l + " " + mg.r
	}
	return out, nil
}

// spSkipNone and spSkipReserved are spMerges' skip for LlamaConverter and
// for SentencePiece's own reading.
func spSkipNone(int32) bool { return false }

func spSkipReserved(typ int32) bool { return typ == spControl || typ == spUnknown || typ == spByte }

// spModelPath finds a folder's SentencePiece model file, "" when it has
// none.
func spModelPath(dir string) string {
	for _, name := range spFiles {
		for _, p := range []string{filepath.Join(dir, name), filepath.Join(dir, name+".gz")} {
			if _, err := os.Stat(p); err == nil {
				return p
			}
		}
	}
	return ""
}

// loadSPModel builds a tokenizer from a folder's SentencePiece model
// (tokenizer.model) when it has no tokenizer.json, as transformers turns
// the slow tokenizer into a fast one:
//
//   - the pieces in their order are the vocabulary, a unigram model with
//     the pieces' scores, or a BPE model whose merges follow the scores
//     (spMerges), with the trainer's unknown piece (consecutive unknowns
//     fused) and byte fallback;
//   - the special tokens tokenizer_config.json and
//     special_tokens_map.json name and added_tokens.json's are added
//     tokens (slowSpecials), which the text is split at first; for
//     LlamaTokenizer's classes so are the control pieces (special) and
//     the user-defined ones, while for the others a control piece typed
//     in the text is text and a user-defined one a piece where it
//     stands, as SentencePiece reads them;
//   - LlamaTokenizer's classes (spLlamaClasses) take LlamaConverter's
//     pipeline: with legacy (the default) a normalizer that prepends "▁"
//     (unless add_prefix_space is false) and turns spaces into "▁";
//     without it a Metaspace pre-tokenizer that prepends "▁" to the
//     text's first piece only; byte fallback always on;
//   - the others (spNativeClasses) SentencePiece's own normalizer: the
//     precompiled charsmap, then (remove_extra_whitespaces) no spaces
//     at either end nor two in a row, the dummy prefix, spaces as "▁";
//   - decoding turns "▁" back into spaces, bytes into text, and drops the
//     prefix's space;
//   - BOS before the text unless add_bos_token is false, EOS after it
//     when add_eos_token is true (the slow classes' defaults), BOS and
//     EOS being the trainer's bos_id and eos_id pieces unless the configs
//     name others.
//
// It reports ok false when the folder has no such file.
func loadSPModel(dir string) (t *Tokenizer, ok bool, err error) {
	path := spModelPath(dir)
	if path == "" {
		return nil, false, nil
	}
	cfg, err := readSlowConfig(dir)
	if err != nil {
		return nil, false, err
	}
	data, err := readMaybeGzip(path, maxSPModelBytes)
	if err != nil {
		return nil, false, err
	}
	if looksLikeRanks(data) {
		return nil, false, errs.Unsupportedf("%s holds tiktoken ranks (base64 tokens and ranks, one a line), not a SentencePiece model; tputool reads the ranks files of %s", path, tiktokenFiles())
	}
	llama := spLlamaClasses[cfg.Class]
	if !llama && !spNativeClasses[cfg.Class] {
		return nil, false, errs.Unsupportedf("%s: a SentencePiece model of tokenizer class %q without a tokenizer.json; tputool converts those of %s and of the remote-code classes that call SentencePiece directly (%s), as other classes change the vocabulary or the steps around the model",
			path, cfg.Class, strings.Join(sortedKeys(spLlamaClasses), ", "), strings.Join(sortedKeys(spNativeClasses)[1:], ", "))
	}
	m, err := parseSPModel(data)
	if err != nil {
		return nil, false, fmt.Errorf("%s: reading it as a SentencePiece model: %w", path, err)
	}
	vocab := make(map[string]int, len(m.pieces))
	for i, p := range m.pieces {
		vocab[p.piece] = i
	}
	// The model's own special pieces, when the configs do not name them.
	for _, f := range []struct {
		raw *json.RawMessage
		id  int32
	}{{&cfg.BOS, m.bosID}, {&cfg.EOS, m.eosID}, {&cfg.Unk, m.unkID}} {
		if isNull(*f.raw) {
			if n := m.pieceAt(f.id); n != "" {
				*f.raw, _ = json.Marshal(n)
			}
		}
	}
	added, err := slowSpecials(dir, &cfg, vocab)
	if err != nil {
		return nil, false, err
	}
	have := map[string]bool{}
	for _, a := range added {
		have[a.Content] = true
	}
	// LlamaConverter adds every control and user-defined piece, split
	// from the text before it is normalized. SentencePiece itself (the
	// remote-code slow classes, which split only at the tokens the
	// configs name) reads a control piece typed in the text as text, and
	// a user-defined piece as one piece where it stands in the text, the
	// dummy prefix and the normalizer unchanged around it: an "inline"
	// added token, matched in the normalized text (below).
	inline := map[string]bool{}
	for i, p := range m.pieces {
		switch {
		case have[p.piece]:
		case llama && (p.typ == spControl || p.typ == spUserDefined):
			added = append(added, addedTokenJSON{ID: i, Content: p.piece, Special: p.typ == spControl})
		case !llama && p.typ == spUserDefined:
			added = append(added, addedTokenJSON{ID: i, Content: p.piece, Normalized: true})
			inline[p.piece] = true
		}
	}
	slices.SortFunc(added, func(a, b addedTokenJSON) int { return a.ID - b.ID })

	prefix := m.addDummyPrefix
	var normalizers []any
	var pre any
	byteFallback := m.byteFallback
	if llama {
		byteFallback = true // LlamaConverter's handle_byte_fallback
		prefix = cfg.AddPrefixSpace == nil || *cfg.AddPrefixSpace
		if cfg.Legacy == nil || *cfg.Legacy {
			if prefix {
				normalizers = append(normalizers, map[string]any{"type": "Prepend", "prepend": "▁"})
			}
			normalizers = append(normalizers, replaceJSON(false, " ", "▁"))
		} else {
			scheme := "never"
			if prefix {
				scheme = "first"
			}
			pre = map[string]any{"type": "Metaspace", "replacement": "▁", "prepend_scheme": scheme, "split": false}
		}
	} else {
		if len(m.charsmap) > 0 {
			normalizers = append(normalizers, map[string]any{"type": "Precompiled", "precompiled_charsmap": base64.StdEncoding.EncodeToString(m.charsmap)})
		}
		if m.removeExtraWS {
			normalizers = append(normalizers, replaceJSON(true, `\A +| +\z`, ""), replaceJSON(true, ` {2,}`, " "))
		}
		if prefix {
			normalizers = append(normalizers, map[string]any{"type": "Prepend", "prepend": " "})
		}
		if m.escapeWS {
			normalizers = append(normalizers, replaceJSON(false, " ", "▁"))
		}
	}
	decoders := []any{replaceJSON(false, "▁", " "), map[string]any{"type": "ByteFallback"}, map[string]any{"type": "Fuse"}}
	if prefix {
		decoders = append(decoders, map[string]any{"type": "Strip", "content": " ", "start": 1, "stop": 0})
	}
	var model map[string]any
	unk := m.pieces[m.unkID].piece
	if m.modelType == 1 {
		pieces := make([][2]any, len(m.pieces))
		for i, p := range m.pieces {
			pieces[i] = [2]any{p.piece, p.score}
		}
		model = map[string]any{"type": "Unigram", "unk_id": m.unkID, "vocab": pieces, "byte_fallback": byteFallback}
	} else {
		skip := spSkipReserved
		if llama {
			skip = spSkipNone
		}
		merges, err := m.spMerges(vocab, skip)
		if err != nil {
			return nil, false, fmt.Errorf("%s: %w", path, err)
		}
		model = map[string]any{
			"type": "BPE", "dropout": nil, "unk_token": unk, "continuing_subword_prefix": nil, "end_of_word_suffix": nil,
			"fuse_unk": true, "byte_fallback": byteFallback, "vocab": vocab, "merges": merges,
		}
	}
	var norm any
	if len(normalizers) > 0 {
		norm = map[string]any{"type": "Sequence", "normalizers": normalizers}
	}
	var raw bytes.Buffer
	enc := json.NewEncoder(&raw)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(map[string]any{
		"added_tokens":   added,
		"normalizer":     norm,
		"pre_tokenizer":  pre,
		"post_processor": nil,
		"decoder":        map[string]any{"type": "Sequence", "decoders": decoders},
		"model":          model,
	}); err != nil {
		return nil, false, err
	}
	t, err = Parse(raw.Bytes())
	if err != nil {
		return nil, false, fmt.Errorf("%s: %w", path, err)
	}
	if len(inline) > 0 { // matched in the normalized text as they stand, spaces escaped
		var list []*addedToken
		for _, a := range t.added {
			if inline[a.content] {
				list = append(list, a)
			}
		}
		t.normAdded = newAddedMatcher(list, func(a *addedToken) string {
			if m.escapeWS {
				return strings.ReplaceAll(a.content, " ", "▁")
			}
			return a.content
		})
	}
	for _, f := range []struct {
		raw json.RawMessage
		dst *int
	}{{cfg.BOS, &t.bos}, {cfg.EOS, &t.eos}, {cfg.Pad, &t.pad}} {
		if n, _ := tokenName(f.raw, ""); n != "" {
			if id, ok := t.TokenToID(n); ok {
				*f.dst = id
			}
		}
	}
	addBOS, addEOS := cfg.AddBOS == nil || *cfg.AddBOS, cfg.AddEOS != nil && *cfg.AddEOS
	t.applyAddBOSEOS(&addBOS, &addEOS)
	return t, true, nil
}

// replaceJSON is a Replace normalizer or decoder of a literal or a regex.
func replaceJSON(regex bool, pattern, content string) map[string]any {
	key := "String"
	if regex {
		key = "Regex"
	}
	return map[string]any{"type": "Replace", "pattern": map[string]string{key: pattern}, "content": content}
}

func sortedKeys(m map[string]bool) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// looksLikeRanks reports a tiktoken ranks file, which some repositories
// name tokenizer.model (Llama 3's original release): its first line is a
// base64 token, a space and a rank. A serialized ModelProto starts with
// its first piece's tag, 0x0a.
func looksLikeRanks(data []byte) bool {
	line, _, _ := bytes.Cut(data[:min(len(data), 1024)], []byte{'\n'})
	tok, rank, ok := bytes.Cut(bytes.TrimRight(line, "\r"), []byte{' '})
	if !ok || len(tok) == 0 || len(rank) == 0 {
		return false
	}
	if _, err := base64.StdEncoding.DecodeString(string(tok)); err != nil {
		return false
	}
	for _, c := range rank {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}
