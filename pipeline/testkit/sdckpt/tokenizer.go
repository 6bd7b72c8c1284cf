package sdckpt

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
)

// A tiny CLIP BPE vocabulary in the layout of openai/clip-vit-*: the 256
// byte-level symbols, the same with "</w>", the merge results, then
// <|startoftext|> and <|endoftext|> as the last two ids.

// tinyMerges are a few merges of common English, each made of symbols that
// exist before it.
var tinyMerges = [][2]string{
	{"t", "h"}, {"th", "e</w>"}, {"a", "n"}, {"an", "d</w>"}, {"i", "n"}, {"in", "g</w>"},
	{"o", "n</w>"}, {"e", "r</w>"}, {"r", "e"}, {"o", "u"}, {"a", "r"}, {"e", "d</w>"},
	{"i", "s</w>"}, {"o", "f</w>"}, {"o", "r</w>"}, {"e", "n"}, {"a", "t</w>"}, {"s", "t"},
	{"r", "ed</w>"}, {"f", "o"}, {"fo", "x</w>"}, {"c", "at</w>"}, {"d", "o"}, {"do", "g</w>"},
	{"s", "k"}, {"sk", "y</w>"}, {"b", "l"}, {"bl", "u"}, {"blu", "e</w>"},
	{"a", "i"}, {"ai", "n"}, {"in", "t"}, {"p", "h"}, {"t", "o</w>"},
}

// tinyVocab returns the vocabulary (id order) and the merges.
func tinyVocab() ([]string, [][2]string) {
	syms := lmckpt.ByteSymbols() // CLIP's bytes_to_unicode
	vocab := append([]string(nil), syms...)
	for _, s := range syms {
		vocab = append(vocab, s+"</w>")
	}
	seen := map[string]bool{}
	for _, v := range vocab {
		seen[v] = true
	}
	var merges [][2]string
	for _, m := range tinyMerges {
		if !seen[m[0]] || !seen[m[1]] {
			continue // a merge of symbols that do not exist (would be a bug above)
		}
		merges = append(merges, m)
		if joined := m[0] + m[1]; !seen[joined] {
			vocab = append(vocab, joined)
			seen[joined] = true
		}
	}
	vocab = append(vocab, "<|startoftext|>", "<|endoftext|>")
	return vocab, merges
}

// writeTokenizer writes a CLIPTokenizer folder: vocab.json, merges.txt,
// tokenizer_config.json, special_tokens_map.json, and the equivalent fast
// tokenizer.json.
func writeTokenizer(dir string, vocab []string, merges [][2]string, t TextSpec) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	ids := orderedVocab(vocab)
	if err := os.WriteFile(filepath.Join(dir, "vocab.json"), []byte(ids), 0o644); err != nil {
		return err
	}
	var mb strings.Builder
	mb.WriteString("#version: 0.2\n")
	mergeList := make([]string, len(merges))
	for i, m := range merges {
		mergeList[i] = m[0] + " " + m[1]
		mb.WriteString(mergeList[i] + "\n")
	}
	if err := os.WriteFile(filepath.Join(dir, "merges.txt"), []byte(mb.String()), 0o644); err != nil {
		return err
	}
	special := map[string]any{
		"bos_token": "<|startoftext|>", "eos_token": "<|endoftext|>",
		"pad_token": t.PadToken, "unk_token": "<|endoftext|>",
	}
	if err := writeJSON(filepath.Join(dir, "special_tokens_map.json"), special); err != nil {
		return err
	}
	cfg := map[string]any{
		"add_prefix_space": false, "bos_token": "<|startoftext|>", "eos_token": "<|endoftext|>",
		"pad_token": t.PadToken, "unk_token": "<|endoftext|>", "clean_up_tokenization_spaces": true,
		"do_lower_case": true, "errors": "replace", "model_max_length": t.MaxPositions,
		"tokenizer_class": "CLIPTokenizer",
	}
	if err := writeJSON(filepath.Join(dir, "tokenizer_config.json"), cfg); err != nil {
		return err
	}
	v := len(vocab)
	added := func(id int, content string) map[string]any {
		return map[string]any{"id": id, "content": content, "single_word": false, "lstrip": false,
			"rstrip": false, "normalized": true, "special": true}
	}
	vmap := map[string]int{}
	for i, s := range vocab {
		vmap[s] = i
	}
	fast := map[string]any{
		"version":      "1.0",
		"truncation":   nil,
		"padding":      nil,
		"added_tokens": []any{added(v-2, "<|startoftext|>"), added(v-1, "<|endoftext|>")},
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
		"post_processor": map[string]any{"type": "RobertaProcessing", "sep": []any{"<|endoftext|>", v - 1},
			"cls": []any{"<|startoftext|>", v - 2}, "trim_offsets": false, "add_prefix_space": false},
		"decoder": map[string]any{"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
		"model": map[string]any{"type": "BPE", "dropout": nil, "unk_token": "<|endoftext|>",
			"continuing_subword_prefix": "", "end_of_word_suffix": "</w>", "fuse_unk": false, "byte_fallback": false,
			"vocab": vmap, "merges": mergeList},
	}
	return writeJSON(filepath.Join(dir, "tokenizer.json"), fast)
}

// orderedVocab renders vocab.json with the entries in id order (as the
// reference files are), which encoding/json's sorted map keys would not.
func orderedVocab(vocab []string) string {
	var b strings.Builder
	b.WriteString("{")
	for i, s := range vocab {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString("\n  ")
		b.WriteString(jsonString(s))
		b.WriteString(": ")
		b.WriteString(strconv.Itoa(i))
	}
	b.WriteString("\n}\n")
	return b.String()
}

func jsonString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"':
			b.WriteString(`\"`)
		case r == '\\':
			b.WriteString(`\\`)
		case r < 0x20:
			b.WriteString(`\u00`)
			b.WriteByte("0123456789abcdef"[r>>4])
			b.WriteByte("0123456789abcdef"[r&15])
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}
