package tokenizer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/tputool/tputool/internal/errs"
)

// gpt2Classes are the tokenizer classes whose slow files (vocab.json and
// merges.txt, without a tokenizer.json) loadGPT2Files reads: GPT-2's
// byte-level BPE, as transformers' GPT2Converter turns them into a fast
// tokenizer. Other classes that store vocab.json and merges.txt (RoBERTa,
// BART, Whisper...) wrap the BPE in their own special tokens and
// templates, and are refused by name.
var gpt2Classes = map[string]bool{
	"": true, "GPT2Tokenizer": true, "GPT2TokenizerFast": true, "CodeGenTokenizer": true, "CodeGenTokenizerFast": true,
}

// slowConfig is what loadGPT2Files and loadSPModel read of
// tokenizer_config.json (and of special_tokens_map.json, its special-token
// fields).
type slowConfig struct {
	Class          string `json:"tokenizer_class"`
	AddPrefixSpace *bool  `json:"add_prefix_space"`
	// Legacy is LlamaTokenizer's legacy flag (absent: true).
	Legacy *bool `json:"legacy"`
	// AddBOS and AddEOS are add_bos_token and add_eos_token.
	AddBOS     *bool           `json:"add_bos_token"`
	AddEOS     *bool           `json:"add_eos_token"`
	BOS        json.RawMessage `json:"bos_token"`
	EOS        json.RawMessage `json:"eos_token"`
	Unk        json.RawMessage `json:"unk_token"`
	Pad        json.RawMessage `json:"pad_token"`
	Sep        json.RawMessage `json:"sep_token"`
	Cls        json.RawMessage `json:"cls_token"`
	Mask       json.RawMessage `json:"mask_token"`
	Additional json.RawMessage `json:"additional_special_tokens"`
	// AddedDecoder is transformers' added_tokens_decoder: {"id":
	// {"content", "special", ...}}.
	AddedDecoder map[string]struct {
		Content string `json:"content"`
		Special bool   `json:"special"`
	} `json:"added_tokens_decoder"`
}

// loadGPT2Files builds a tokenizer from a folder's slow GPT-2 files when
// it has no tokenizer.json: vocab.json (token → id) and merges.txt (one
// merge a line, after an optional "#version" line) as a byte-level BPE
// (unk_token for a piece outside the vocabulary when it has one, as the
// slow GPT2Tokenizer reads it; GPT2Converter's BPE has none), its
// pre-tokenizer ByteLevel with tokenizer_config.json's
// add_prefix_space (false when absent), ByteLevel decoding, and as
// special added tokens the special tokens tokenizer_config.json and
// special_tokens_map.json name (tokenizer_config.json's fields first:
// LoadDir applies it after, where transformers lets a legacy
// special_tokens_map.json win; the two agree in the releases), with
// GPT2Tokenizer's <|endoftext|> for BOS, EOS and unknown when neither
// names one, and added_tokens.json's (transformers adds a name the
// vocabulary lacks after its last id). LoadDir then applies
// tokenizer_config.json as it does to a tokenizer.json (add_bos_token:
// OPT's BOS). It reports ok false when either file is missing.
func loadGPT2Files(dir string) (t *Tokenizer, ok bool, err error) {
	vocabPath, mergesPath := filepath.Join(dir, "vocab.json"), filepath.Join(dir, "merges.txt")
	for _, p := range []string{vocabPath, mergesPath} {
		if _, err := os.Stat(p); err != nil {
			return nil, false, nil
		}
	}
	cfg, err := readSlowConfig(dir)
	if err != nil {
		return nil, false, err
	}
	// GPT2Tokenizer's and CodeGenTokenizer's defaults: <|endoftext|> is
	// their BOS, EOS and unknown token when no file names one.
	for _, f := range []*json.RawMessage{&cfg.BOS, &cfg.EOS, &cfg.Unk} {
		if isNull(*f) {
			*f = json.RawMessage(`"<|endoftext|>"`)
		}
	}
	if !gpt2Classes[cfg.Class] {
		return nil, false, errs.Unsupportedf("%s: vocab.json and merges.txt of tokenizer class %q without a tokenizer.json; tputool reads such files as GPT-2's byte-level BPE (GPT2Tokenizer, CodeGenTokenizer) only, as other classes add their own special tokens and templates", dir, cfg.Class)
	}
	vocabData, err := readMaybeGzip(vocabPath, maxFileBytes)
	if err != nil {
		return nil, false, err
	}
	var vocab map[string]int
	if err := json.Unmarshal(vocabData, &vocab); err != nil {
		return nil, false, fmt.Errorf("%s: expected an object of token → id: %w", vocabPath, err)
	}
	if len(vocab) > maxVocab {
		return nil, false, fmt.Errorf("%s: %d tokens, more than %d", vocabPath, len(vocab), maxVocab)
	}
	mergesData, err := readMaybeGzip(mergesPath, maxFileBytes)
	if err != nil {
		return nil, false, err
	}
	var merges []string
	for i, line := range strings.Split(string(mergesData), "\n") {
		line = strings.TrimSuffix(line, "\r")
		if line == "" || (i == 0 && strings.HasPrefix(line, "#version")) {
			continue
		}
		if a, b, ok := strings.Cut(line, " "); !ok || a == "" || b == "" || strings.Contains(b, " ") {
			return nil, false, fmt.Errorf("%s: line %d: %q is not two tokens separated by a space", mergesPath, i+1, line)
		}
		if len(merges) == maxMerges {
			return nil, false, fmt.Errorf("%s: more than %d merges", mergesPath, maxMerges)
		}
		merges = append(merges, line)
	}
	added, err := slowSpecials(dir, &cfg, vocab)
	if err != nil {
		return nil, false, err
	}
	aps := cfg.AddPrefixSpace != nil && *cfg.AddPrefixSpace
	// GPT2Tokenizer reads a piece outside the vocabulary as unk_token
	// when the vocabulary has it (a vocabulary of every byte, as GPT-2's,
	// never meets one).
	var unk any
	if n, err := tokenName(cfg.Unk, "unk_token"); err == nil && n != "" {
		if _, ok := vocab[n]; ok {
			unk = n
		}
	}
	byteLevel := func(prefix, trim bool) map[string]any {
		return map[string]any{"type": "ByteLevel", "add_prefix_space": prefix, "trim_offsets": trim, "use_regex": true}
	}
	var raw bytes.Buffer
	enc := json.NewEncoder(&raw)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(map[string]any{
		"added_tokens":   added,
		"normalizer":     nil,
		"pre_tokenizer":  byteLevel(aps, true),
		"post_processor": byteLevel(true, false),
		"decoder":        byteLevel(true, true),
		"model": map[string]any{
			"type": "BPE", "dropout": nil, "unk_token": unk, "continuing_subword_prefix": "", "end_of_word_suffix": "",
			"fuse_unk": false, "byte_fallback": false, "vocab": json.RawMessage(vocabData), "merges": merges,
		},
	}); err != nil {
		return nil, false, err
	}
	t, err = Parse(raw.Bytes())
	if err != nil {
		return nil, false, fmt.Errorf("%s and %s: %w", vocabPath, mergesPath, err)
	}
	// BOS, EOS and padding as the files name them (tokenizer_config.json,
	// which LoadDir applies next, names them again when it has them).
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
	return t, true, nil
}

// readSlowConfig reads what a folder without a tokenizer.json says of its
// tokenizer: special_tokens_map.json's special tokens, then
// tokenizer_config.json's fields over them (LoadDir applies
// tokenizer_config.json again after, where transformers lets a legacy
// special_tokens_map.json win; the two agree in the releases).
func readSlowConfig(dir string) (slowConfig, error) {
	var cfg slowConfig
	for _, name := range []string{"special_tokens_map.json", "tokenizer_config.json"} { // the config's fields win
		p := filepath.Join(dir, name)
		data, err := readMaybeGzip(p, maxConfigBytes)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return cfg, err
		}
		var one slowConfig
		if err := json.Unmarshal(data, &one); err != nil {
			return cfg, fmt.Errorf("%s: %w", p, err)
		}
		if _, err := one.specials(); err != nil {
			return cfg, fmt.Errorf("%s: %w", p, err)
		}
		if err := json.Unmarshal(data, &cfg); err != nil {
			return cfg, fmt.Errorf("%s: %w", p, err)
		}
	}
	return cfg, nil
}

// specials are the special tokens' names a config lists: bos, eos, unk,
// pad, sep, cls and mask tokens, then additional_special_tokens.
func (c *slowConfig) specials() ([]string, error) {
	var names []string
	for _, f := range []struct {
		name string
		raw  json.RawMessage
	}{{"bos_token", c.BOS}, {"eos_token", c.EOS}, {"unk_token", c.Unk}, {"pad_token", c.Pad}, {"sep_token", c.Sep},
		{"cls_token", c.Cls}, {"mask_token", c.Mask}} {
		n, err := tokenName(f.raw, f.name)
		if err != nil {
			return nil, err
		}
		if n != "" {
			names = append(names, n)
		}
	}
	if !isNull(c.Additional) {
		var list []json.RawMessage
		if err := json.Unmarshal(c.Additional, &list); err != nil {
			return nil, fmt.Errorf("additional_special_tokens: expected a list: %w", err)
		}
		for _, raw := range list {
			n, err := tokenName(raw, "additional_special_tokens")
			if err != nil {
				return nil, err
			}
			names = append(names, n)
		}
	}
	for k := range c.AddedDecoder {
		if id, err := strconv.Atoi(k); err != nil || id < 0 || id >= maxTokenID {
			return nil, fmt.Errorf("added_tokens_decoder: id %q is not an integer in [0, %d)", k, maxTokenID)
		}
	}
	return names, nil
}

// addedTokenJSON is one added token of the synthesised tokenizer.json.
type addedTokenJSON struct {
	ID         int    `json:"id"`
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	LStrip     bool   `json:"lstrip"`
	RStrip     bool   `json:"rstrip"`
	Normalized bool   `json:"normalized"`
	Special    bool   `json:"special"`
}

// slowSpecials lists the special tokens the configs name, each with its
// id: added_tokens.json's or added_tokens_decoder's, else the
// vocabulary's, else the next id past every other, in the order named;
// then added_tokens.json's other tokens, added but not special.
func slowSpecials(dir string, cfg *slowConfig, vocab map[string]int) ([]addedTokenJSON, error) {
	ids := map[string]int{}
	next := 0
	for _, id := range vocab {
		next = max(next, id+1)
	}
	p := filepath.Join(dir, "added_tokens.json")
	if data, err := readMaybeGzip(p, maxConfigBytes); err == nil {
		var extra map[string]int
		if err := json.Unmarshal(data, &extra); err != nil {
			return nil, fmt.Errorf("%s: expected an object of token → id: %w", p, err)
		}
		for c, id := range extra {
			if id < 0 || id >= maxTokenID {
				return nil, fmt.Errorf("%s: %q: id %d is not in [0, %d)", p, c, id, maxTokenID)
			}
			ids[c], next = id, max(next, id+1)
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	var names []string
	for k, v := range cfg.AddedDecoder {
		id, _ := strconv.Atoi(k) // checked by specials
		ids[v.Content], next = id, max(next, id+1)
		if v.Special {
			names = append(names, v.Content)
		}
	}
	slices.Sort(names)           // map order: a stable list
	named, err := cfg.specials() // checked for each file as it was read
	if err != nil {
		return nil, err
	}
	names = append(names, named...)
	var out []addedTokenJSON
	seen := map[string]bool{}
	special := map[string]bool{}
	for _, n := range names {
		special[n] = true
	}
	var plain []string // added_tokens.json's other tokens: added, not special
	for c := range ids {
		if !special[c] {
			plain = append(plain, c)
		}
	}
	slices.Sort(plain)
	for _, n := range append(names, plain...) {
		if n == "" || seen[n] {
			continue
		}
		seen[n] = true
		id, ok := ids[n]
		if !ok {
			if id, ok = vocab[n]; !ok {
				id, next = next, next+1
			}
		}
		if id >= maxTokenID {
			return nil, fmt.Errorf("%s: special token %q: id %d past %d", dir, n, id, maxTokenID)
		}
		out = append(out, addedTokenJSON{ID: id, Content: n, Special: special[n]})
	}
	slices.SortFunc(out, func(a, b addedTokenJSON) int { return a.ID - b.ID })
	return out, nil
}
