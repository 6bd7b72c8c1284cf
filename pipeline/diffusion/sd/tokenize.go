package sd

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/tputool/tputool/loader/tokenizer"
)

// promptTokenizer turns prompts into the fixed-length id rows the CLIP text
// encoders take: [bos] + up to max-2 ids + [eos], padded with pad to max,
// as CLIPTokenizer(padding="max_length", truncation=True) does.
type promptTokenizer struct {
	tok           *tokenizer.Tokenizer
	bos, eos, pad int
	maxLen        int
}

// loadPromptTokenizer reads a CLIPTokenizer folder. tokenizer.json is used
// when present; otherwise (the usual layout of diffusers repos) the fast
// tokenizer is assembled from vocab.json and merges.txt with CLIP's
// normalisation and pre-tokenisation.
func loadPromptTokenizer(dir string) (*promptTokenizer, error) {
	var tok *tokenizer.Tokenizer
	var err error
	if _, statErr := os.Stat(filepath.Join(dir, "tokenizer.json")); statErr == nil {
		tok, err = tokenizer.LoadDir(dir)
	} else {
		var data []byte
		data, err = clipTokenizerJSON(dir)
		if err == nil {
			tok, err = tokenizer.Parse(data)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("tokenizer %s: %w", dir, err)
	}
	pt := &promptTokenizer{tok: tok, maxLen: 77}
	var cfg struct {
		ModelMaxLength float64 `json:"model_max_length"`
		BOS            any     `json:"bos_token"`
		EOS            any     `json:"eos_token"`
		Pad            any     `json:"pad_token"`
	}
	special := map[string]any{}
	if b, err := os.ReadFile(filepath.Join(dir, "tokenizer_config.json")); err == nil {
		if err := json.Unmarshal(b, &cfg); err != nil {
			return nil, fmt.Errorf("%s: %w", filepath.Join(dir, "tokenizer_config.json"), err)
		}
	}
	if b, err := os.ReadFile(filepath.Join(dir, "special_tokens_map.json")); err == nil {
		if err := json.Unmarshal(b, &special); err != nil {
			return nil, fmt.Errorf("%s: %w", filepath.Join(dir, "special_tokens_map.json"), err)
		}
	}
	if cfg.ModelMaxLength > 0 && cfg.ModelMaxLength < 1e6 {
		pt.maxLen = int(cfg.ModelMaxLength)
	}
	lookup := func(field string, vals ...any) (int, error) {
		for _, v := range vals {
			name := tokenName(v)
			if name == "" {
				continue
			}
			id, ok := tok.TokenToID(name)
			if !ok {
				return 0, fmt.Errorf("tokenizer %s: %s %q is not in the vocabulary", dir, field, name)
			}
			return id, nil
		}
		return -1, nil
	}
	if pt.bos, err = lookup("bos_token", cfg.BOS, special["bos_token"], "<|startoftext|>"); err != nil {
		return nil, err
	}
	if pt.eos, err = lookup("eos_token", cfg.EOS, special["eos_token"], "<|endoftext|>"); err != nil {
		return nil, err
	}
	if pt.pad, err = lookup("pad_token", cfg.Pad, special["pad_token"]); err != nil {
		return nil, err
	}
	if pt.bos < 0 || pt.eos < 0 {
		return nil, fmt.Errorf("tokenizer %s: no <|startoftext|>/<|endoftext|> tokens", dir)
	}
	if pt.pad < 0 {
		pt.pad = pt.eos
	}
	if pt.maxLen < 2 {
		return nil, fmt.Errorf("tokenizer %s: model_max_length %d is too small", dir, pt.maxLen)
	}
	return pt, nil
}

// tokenName reads a special token given as a string or as an AddedToken
// object {"content": ...}.
func tokenName(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case map[string]any:
		if c, ok := x["content"].(string); ok {
			return c
		}
	}
	return ""
}

// encode returns the padded id row and whether the prompt was truncated.
func (pt *promptTokenizer) encode(text string, maxLen int) ([]int, bool, error) {
	ids, err := pt.tok.Encode(text, false)
	if err != nil {
		return nil, false, err
	}
	truncated := false
	if len(ids) > maxLen-2 {
		ids = ids[:maxLen-2]
		truncated = true
	}
	row := make([]int, 0, maxLen)
	row = append(row, pt.bos)
	row = append(row, ids...)
	row = append(row, pt.eos)
	for len(row) < maxLen {
		row = append(row, pt.pad)
	}
	return row, truncated, nil
}

// clipTokenizerJSON builds the tokenizer.json of a CLIP fast tokenizer from
// dir/vocab.json and dir/merges.txt.
func clipTokenizerJSON(dir string) ([]byte, error) {
	vb, err := os.ReadFile(filepath.Join(dir, "vocab.json"))
	if err != nil {
		return nil, fmt.Errorf("no tokenizer.json and no vocab.json: %w", err)
	}
	var vocab map[string]int
	if err := json.Unmarshal(vb, &vocab); err != nil {
		return nil, fmt.Errorf("vocab.json: %w", err)
	}
	mb, err := os.ReadFile(filepath.Join(dir, "merges.txt"))
	if err != nil {
		return nil, fmt.Errorf("merges.txt: %w", err)
	}
	var merges []string
	for i, line := range strings.Split(string(mb), "\n") {
		line = strings.TrimRight(line, "\r")
		if line == "" || (i == 0 && strings.HasPrefix(line, "#version")) {
			continue
		}
		if len(strings.Split(line, " ")) != 2 {
			return nil, fmt.Errorf("merges.txt line %d: want two symbols, got %q", i+1, line)
		}
		merges = append(merges, line)
	}
	var added []any
	for _, s := range []string{"<|startoftext|>", "<|endoftext|>"} {
		id, ok := vocab[s]
		if !ok {
			return nil, fmt.Errorf("vocab.json has no %s", s)
		}
		added = append(added, map[string]any{"id": id, "content": s, "single_word": false, "lstrip": false,
			"rstrip": false, "normalized": true, "special": true})
	}
	fast := map[string]any{
		"version":      "1.0",
		"added_tokens": added,
		"normalizer": map[string]any{"type": "Sequence", "normalizers": []any{
			map[string]any{"type": "NFC"},
			map[string]any{"type": "Replace", "pattern": map[string]any{"Regex": `\s+`}, "content": " "},
			map[string]any{"type": "Lowercase"},
		}},
		"pre_tokenizer": map[string]any{"type": "Sequence", "pretokenizers": []any{
			map[string]any{"type": "Split", "pattern": map[string]any{
				"Regex": `<\|startoftext\|>|<\|endoftext\|>|'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+`},
				"behavior": "Removed", "invert": true},
			map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false},
		}},
		"decoder": map[string]any{"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
		"model": map[string]any{"type": "BPE", "dropout": nil, "unk_token": "<|endoftext|>",
			"continuing_subword_prefix": "", "end_of_word_suffix": "</w>", "fuse_unk": false, "byte_fallback": false,
			"vocab": vocab, "merges": merges},
	}
	return json.Marshal(fast)
}
