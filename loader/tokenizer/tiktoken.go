package tokenizer

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/tputool/tputool/internal/errs"
)

// Tokenizers shipped as a tiktoken ranks file and a Python class instead
// of a tokenizer.json: Moonshot's Kimi K2, Kimi-Linear and Moonlight
// (TikTokenTokenizer over tiktoken.model), Tencent's HunYuan
// (HYTokenizer over hy.tiktoken) and Alibaba's Qwen 1 (QWenTokenizer over
// qwen.tiktoken). A ranks file holds one "base64 rank"
// line per token; the pre-tokenizer pattern and the special tokens live
// in the class's code, so each class is a flavour here, read from
// tokenization_kimi.py / tokenization_moonshot.py and tokenization_hy.py.
//
// tiktoken encodes a piece by merging, over and over, the adjacent pair
// whose concatenation has the lowest rank (the leftmost of equal ones),
// after looking the whole piece up first. That is HF's BPE with
// ignore_merges and, for every token, a merge of each two tokens it
// splits into, ranked by the token's own rank: the model built here.

// tiktokenFlavor is one tokenizer class's reading of a ranks file.
type tiktokenFlavor struct {
	class, file string
	// pattern is the class's pat_str.
	pattern string
	// lineRanks numbers the tokens by line, a repeated token skipped
	// (HYTokenizer's _load_tiktoken_bpe); else the file's ranks are the
	// ids (tiktoken's load_tiktoken_bpe).
	lineRanks bool
	// nfc normalizes the text to NFC first (HYTokenizer.tokenize).
	nfc bool
	// kimiChunks cuts the text between special tokens as
	// TikTokenTokenizer.encode does before tiktoken sees it.
	kimiChunks bool
	// specials names the special tokens from the first id after the
	// ranks.
	specials func(base int, cfg *tiktokenConfig) ([]rawAddedToken, error)
	// bos, eos and pad are the class's own defaults, which
	// tokenizer_config.json's fields override.
	bos, eos, pad string
}

// The Kimi pattern, as pat_str writes it: CJK ideographs apart, and
// letter runs that leave them out (a class intersection, which onigToNET
// writes as regexp2's subtraction).
var kimiPattern = strings.Join([]string{
	`[\p{Han}]+`,
	`[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?`,
	`[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?`,
	`\p{N}{1,3}`,
	` ?[^\s\p{L}\p{N}]+[\r\n]*`,
	`\s*[\r\n]+`,
	`\s+(?!\S)`,
	`\s+`,
}, "|")

// Kimi's TikTokenTokenizer reserves 256 special ids after the ranks, plus
// two (num_reserved_special_tokens + 2).
const kimiSpecials = 256 + 2

// maxTiktokenWork bounds the bytes hashed indexing a ranks file's merges
// (the sum of its tokens' lengths squared): Moonlight's 163,584 tokens
// come to about 2e7; a file of a few thousand long tokens would otherwise
// take minutes and gigabytes before any limit tripped.
const maxTiktokenWork = 1 << 30

// hySpecialStart is the first special id of HYTokenizer: SPECIAL_START_ID,
// fixed when tokenization_hy.py is imported, which the class's assert
// ties to the ranks file's size.
const hySpecialStart = 127957

// HYTokenizer's special tokens, in id order from the first id after the
// ranks.
var hySpecials = func() []string {
	s := []string{"<|endoftext|>", "<|startoftext|>", "<|bos|>", "<|eos|>", "<|pad|>"}
	for i := range 205 {
		s = append(s, fmt.Sprintf("<|extra_%d|>", i))
	}
	return s
}()

// qwenSpecialStart is the first special id of Qwen 1's QWenTokenizer:
// SPECIAL_START_ID, the size of its qwen.tiktoken.
const qwenSpecialStart = 151643

// QWenTokenizer's special tokens, in id order from SPECIAL_START_ID.
var qwenSpecials = func() []string {
	s := []string{"<|endoftext|>", "<|im_start|>", "<|im_end|>"}
	for i := range 205 {
		s = append(s, fmt.Sprintf("<|extra_%d|>", i))
	}
	return s
}()

var tiktokenFlavors = []*tiktokenFlavor{
	{
		class: "TikTokenTokenizer", file: "tiktoken.model", pattern: kimiPattern, kimiChunks: true,
		bos: "[BOS]", eos: "[EOS]",
		specials: func(base int, cfg *tiktokenConfig) ([]rawAddedToken, error) {
			out := make([]rawAddedToken, kimiSpecials)
			for i := range out {
				id := base + i
				content := fmt.Sprintf("<|reserved_token_%d|>", id)
				if a, ok := cfg.Added[strconv.Itoa(id)]; ok {
					content = a.Content
				}
				out[i] = rawAddedToken{ID: json.Number(strconv.Itoa(id)), Content: content, Special: true}
			}
			return out, nil
		},
	},
	{
		// Qwen 1 (Qwen-7B, -14B, -72B, -1.8B and their chat models,
		// Qwen-VL's language model): tokenization_qwen.py reads the
		// file's ranks, puts the text in NFC and lets tiktoken find the
		// special tokens in it; the class has no BOS, and its end of
		// text (eod_id) is <|endoftext|>.
		class: "QWenTokenizer", file: "qwen.tiktoken", pattern: patternQwen2, nfc: true,
		eos: "<|endoftext|>",
		specials: func(base int, _ *tiktokenConfig) ([]rawAddedToken, error) {
			if base != qwenSpecialStart {
				return nil, fmt.Errorf("%d tokens; QWenTokenizer's special tokens start at id %d, so its ranks file has %d", base, qwenSpecialStart, qwenSpecialStart)
			}
			norm := true
			out := make([]rawAddedToken, len(qwenSpecials))
			for i, s := range qwenSpecials {
				out[i] = rawAddedToken{ID: json.Number(strconv.Itoa(base + i)), Content: s, Special: true, Normalized: &norm}
			}
			return out, nil
		},
	},
	{
		class: "HYTokenizer", file: "hy.tiktoken", pattern: patternQwen2, lineRanks: true, nfc: true,
		bos: "<|bos|>", eos: "<|eos|>", pad: "<|pad|>",
		specials: func(base int, _ *tiktokenConfig) ([]rawAddedToken, error) {
			if base != hySpecialStart {
				return nil, fmt.Errorf("%d tokens; HYTokenizer's special tokens start at id %d, so its ranks file has %d", base, hySpecialStart, hySpecialStart)
			}
			// Normalized: HYTokenizer puts the whole text in NFC before
			// tiktoken finds the special tokens in it.
			norm := true
			out := make([]rawAddedToken, len(hySpecials))
			for i, s := range hySpecials {
				out[i] = rawAddedToken{ID: json.Number(strconv.Itoa(base + i)), Content: s, Special: true, Normalized: &norm}
			}
			return out, nil
		},
	},
}

// tiktokenConfig is what a tiktoken flavour reads of tokenizer_config.json.
type tiktokenConfig struct {
	Class   string          `json:"tokenizer_class"`
	AutoMap json.RawMessage `json:"auto_map"`
	Added   map[string]struct {
		Content string `json:"content"`
	} `json:"added_tokens_decoder"`
}

// className is the tokenizer class the config names: tokenizer_class, or
// the slow class of auto_map.AutoTokenizer ("module.Class").
func (c *tiktokenConfig) className() string {
	if c.Class != "" {
		return c.Class
	}
	var am struct {
		AutoTokenizer json.RawMessage `json:"AutoTokenizer"`
	}
	if json.Unmarshal(c.AutoMap, &am) != nil {
		return ""
	}
	var names []*string
	if json.Unmarshal(am.AutoTokenizer, &names) != nil {
		var one string
		if json.Unmarshal(am.AutoTokenizer, &one) != nil {
			return ""
		}
		names = []*string{&one}
	}
	for _, n := range names {
		if n != nil && *n != "" {
			return (*n)[strings.LastIndex(*n, ".")+1:] // "module.Class", the module perhaps "org/repo--module"
		}
	}
	return ""
}

// loadTiktokenDir builds the tokenizer of a directory that has a tiktoken
// ranks file of a known class instead of a tokenizer.json. ok is false
// when it has no ranks file.
func loadTiktokenDir(dir string) (t *Tokenizer, ok bool, err error) {
	var found []*tiktokenFlavor
	for _, f := range tiktokenFlavors {
		if _, err := os.Stat(filepath.Join(dir, f.file)); err == nil {
			found = append(found, f)
		}
	}
	if len(found) == 0 {
		return nil, false, nil
	}
	var cfg tiktokenConfig
	cfgPath := filepath.Join(dir, "tokenizer_config.json")
	data, err := readMaybeGzip(cfgPath, maxConfigBytes)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, false, err
	}
	if err == nil {
		if err := json.Unmarshal(data, &cfg); err != nil {
			return nil, false, fmt.Errorf("%s: %w", cfgPath, err)
		}
	}
	class := cfg.className()
	for _, f := range found {
		if class != f.class {
			continue
		}
		path := filepath.Join(dir, f.file)
		data, err := readMaybeGzip(path, maxFileBytes)
		if err != nil {
			return nil, false, err
		}
		t, err := buildTiktoken(data, f, &cfg)
		if err != nil {
			return nil, false, fmt.Errorf("%s: %w", path, err)
		}
		return t, true, nil
	}
	path := filepath.Join(dir, found[0].file)
	named := fmt.Sprintf("whose tokenizer class is %q (%s)", class, cfgPath)
	switch {
	case data == nil:
		named = fmt.Sprintf("without a %s to name its tokenizer class", cfgPath)
	case class == "":
		named = fmt.Sprintf("whose %s names no tokenizer_class or auto_map.AutoTokenizer", cfgPath)
	}
	return nil, false, errs.Unsupportedf("%s: a tiktoken ranks file %s; tputool reads it as %s only, as the pre-tokenizer pattern and special tokens are in the class's code", path, named, found[0].class)
}

// readRanks parses a ranks file: the token bytes by rank.
func readRanks(data []byte, lineRanks bool) ([][]byte, error) {
	var byRank [][]byte
	seen := map[string]int{} // token → line
	line := 0
	for len(data) > 0 {
		var l []byte
		l, data, _ = bytes.Cut(data, []byte{'\n'})
		line++
		l = bytes.TrimRight(l, "\r")
		if len(bytes.TrimSpace(l)) == 0 {
			continue
		}
		fields := bytes.Fields(l)
		if len(fields) != 2 {
			return nil, fmt.Errorf("line %d: expected \"base64-token rank\", got %d fields", line, len(fields))
		}
		tok, err := base64.StdEncoding.DecodeString(string(fields[0]))
		if err != nil {
			return nil, fmt.Errorf("line %d: token: %w", line, err)
		}
		if len(tok) == 0 || len(tok) > maxTokenBytes {
			return nil, fmt.Errorf("line %d: a token of %d bytes (want 1 to %d)", line, len(tok), maxTokenBytes)
		}
		if prev, dup := seen[string(tok)]; dup {
			if lineRanks {
				continue // HYTokenizer skips a repeated token
			}
			return nil, fmt.Errorf("line %d: token %q repeats line %d", line, tok, prev)
		}
		seen[string(tok)] = line
		rank := len(byRank)
		if !lineRanks {
			r, err := strconv.Atoi(string(fields[1]))
			if err != nil || r < 0 || r >= maxTokenID {
				return nil, fmt.Errorf("line %d: rank %q is not an integer in [0, %d)", line, fields[1], maxTokenID)
			}
			rank = r
		}
		if len(seen) > maxVocab {
			return nil, fmt.Errorf("more than %d tokens", maxVocab)
		}
		if rank >= len(byRank) {
			if rank > 2*len(seen)+(1<<16) {
				return nil, fmt.Errorf("line %d: rank %d for only %d tokens: ranks must be (nearly) contiguous", line, rank, len(seen))
			}
			byRank = append(byRank, make([][]byte, rank+1-len(byRank))...)
		}
		if byRank[rank] != nil {
			return nil, fmt.Errorf("line %d: rank %d is also token %q's", line, rank, byRank[rank])
		}
		byRank[rank] = tok
	}
	for b := range 256 {
		if _, ok := seen[string([]byte{byte(b)})]; !ok {
			return nil, fmt.Errorf("byte 0x%02x has no token: a byte-level ranks file has all 256", b)
		}
	}
	return byRank, nil
}

// buildTiktoken builds a flavour's tokenizer from the bytes of its ranks
// file.
func buildTiktoken(data []byte, f *tiktokenFlavor, cfg *tiktokenConfig) (*Tokenizer, error) {
	byRank, err := readRanks(data, f.lineRanks)
	if err != nil {
		return nil, err
	}
	// The model: the vocabulary in GPT-2's byte characters, as the
	// ByteLevel decoder reads them, and a merge for every way a token
	// splits in two tokens.
	ranks := make(map[string]int, len(byRank))
	vocab := make(map[string]int, len(byRank))
	for r, tok := range byRank {
		if tok != nil {
			ranks[string(tok)] = r
			vocab[byteLevelEncode(string(tok))] = r
		}
	}
	m := &bpeModel{vocab: vocab, unk: -1, ignoreMerge: true, merges: map[uint64]mergeInfo{}, cache: map[string][]int32{}}
	for b := range m.byteFBIDs {
		m.byteFBIDs[b] = -1
	}
	work := 0 // bytes hashed looking the halves up: a token's length squared
	for r, tok := range byRank {
		if work += len(tok) * len(tok); work > maxTiktokenWork {
			return nil, fmt.Errorf("tokens too long in all to index: their lengths squared pass %d by rank %d", maxTiktokenWork, r)
		}
		for i := 1; i < len(tok); i++ {
			a, okA := ranks[string(tok[:i])]
			b, okB := ranks[string(tok[i:])]
			if okA && okB {
				m.merges[pairKey(a, b)] = mergeInfo{rank: uint32(r), newID: uint32(r)}
			}
		}
		if len(m.merges) > maxMerges {
			return nil, fmt.Errorf("more than %d merges by rank %d", maxMerges, r)
		}
	}
	// The special tokens follow the ranks (tiktoken's num_base_tokens, the
	// number of tokens, which is the first free id for a dense file).
	added, err := f.specials(len(ranks), cfg)
	if err != nil {
		return nil, err
	}
	for _, a := range added {
		id, _ := strconv.Atoi(string(a.ID))
		if id < len(byRank) && byRank[id] != nil {
			return nil, fmt.Errorf("special token %q's id %d is also the rank of %q", a.Content, id, byRank[id])
		}
	}
	raw := &rawTokenizer{
		AddedTokens: added,
		PreTokenizer: mustJSON(map[string]any{"type": "Sequence", "pretokenizers": []any{
			map[string]any{"type": "Split", "pattern": map[string]string{"Regex": f.pattern}, "behavior": "Isolated", "invert": false},
			map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false},
		}}),
		Decoder: mustJSON(map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false}),
		bpe:     m,
	}
	if f.nfc {
		raw.Normalizer = mustJSON(map[string]string{"type": "NFC"})
	}
	t, err := build(raw)
	if err != nil {
		return nil, err
	}
	if f.kimiChunks {
		t.chunk = kimiChunks
	}
	for _, d := range []struct {
		name string
		dst  *int
	}{{f.bos, &t.bos}, {f.eos, &t.eos}, {f.pad, &t.pad}} {
		if id, ok := t.TokenToID(d.name); ok && d.name != "" {
			*d.dst = id
		}
	}
	return t, nil
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // only maps of strings, bools and slices of them
	}
	return b
}

// Kimi's TikTokenTokenizer.encode hands tiktoken the text in slices of
// 400,000 characters, each cut again where a run of whitespace or of
// non-whitespace passes 25,000 characters
// (_split_whitespaces_or_nonwhitespaces), and encodes each alone.
// transformers' tokenize, which __call__ and apply_chat_template take,
// first splits the text on the special tokens and encodes each piece
// between them so: the cut is made within each such piece.
const (
	kimiMaxChars = 400_000
	kimiMaxRun   = 25_000
)

// kimiChunks cuts text as TikTokenTokenizer.encode does; nil when it is
// one piece.
func kimiChunks(text string) []string {
	if len(text) <= kimiMaxRun { // bytes ≥ characters
		return nil
	}
	var out []string
	sliceStart := 0
	for sliceStart < len(text) {
		// One slice of at most kimiMaxChars characters.
		end := len(text)
		n := 0 // characters into this slice
		for i := range text[sliceStart:] {
			if n == kimiMaxChars {
				end = sliceStart + i
				break
			}
			n++
		}
		out = appendRuns(out, text[sliceStart:end])
		sliceStart = end
	}
	return out
}

// appendRuns is _split_whitespaces_or_nonwhitespaces(s, kimiMaxRun).
func appendRuns(out []string, s string) []string {
	if s == "" {
		return append(out, s)
	}
	r0, _ := utf8.DecodeRuneInString(s)
	inSpace := pyIsSpace(r0)
	run, start := 0, 0
	for i, r := range s {
		now := pyIsSpace(r)
		if inSpace != now {
			run, inSpace = 1, now
			continue
		}
		run++
		if run > kimiMaxRun {
			out = append(out, s[start:i])
			start, run = i, 1
		}
	}
	return append(out, s[start:])
}

// pyIsSpace is Python's str.isspace for one character: Unicode White_Space
// and the four information separators U+001C to U+001F.
func pyIsSpace(r rune) bool {
	return unicode.IsSpace(r) || r >= 0x1c && r <= 0x1f
}

// tiktokenFiles lists the ranks files tputool reads, for messages.
func tiktokenFiles() string {
	var names []string
	for _, f := range tiktokenFlavors {
		names = append(names, f.file+" ("+f.class+")")
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}
