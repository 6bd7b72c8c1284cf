package modernbertref

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
)

// MinTokenizerVocab is the smallest Config.Vocab WriteTokenizer accepts:
// the 256 byte-level symbols and the five special tokens.
const MinTokenizerVocab = 256 + 5

// tokenizerMerges are a few byte-level BPE merges ("Ġ" is the space byte),
// each of symbols that exist before it. WriteTokenizer keeps as many as the
// vocabulary has room for, in this order.
var tokenizerMerges = [][2]string{
	{"h", "e"}, {"l", "l"}, {"he", "ll"}, {"hell", "o"},
	{"Ġ", "w"}, {"o", "r"}, {"Ġw", "or"}, {"Ġwor", "l"}, {"Ġworl", "d"},
	{"Ġ", "t"}, {"Ġt", "he"}, {"Ġ", "a"}, {"i", "s"}, {"Ġ", "is"},
	{"Ġ", "m"}, {"a", "t"}, {"Ġm", "at"}, {"r", "i"}, {"Ġmat", "ri"}, {"Ġmatri", "x"},
	{"t", "p"}, {"tp", "u"}, {"Ġ", "tpu"}, {"e", "n"}, {"c", "o"}, {"Ġ", "en"}, {"Ġen", "co"},
	{"d", "e"}, {"Ġenco", "de"}, {"Ġencode", "r"},
}

// ByteSymbols is GPT-2's bytes_to_unicode in vocabulary order
// (lmckpt.ByteSymbols): ' ' is "Ġ".
func ByteSymbols() []string { return lmckpt.ByteSymbols() }

// TokenizerVocab returns WriteTokenizer's vocabulary for c (id order) and
// its merges: [UNK] [CLS] [SEP] [PAD] [MASK] at c.UnkID, c.CLSID, c.SepID,
// c.PadID and c.MaskID; the other ids, in order, hold the 256 byte symbols
// (ByteSymbols), then the results of as many merges as fit, then
// "<|unusedN|>" fillers.
func TokenizerVocab(c Config) ([]string, [][2]string, error) {
	if c.Vocab < MinTokenizerVocab {
		return nil, nil, fmt.Errorf("modernbertref: tokenizer vocabulary %d is below %d", c.Vocab, MinTokenizerVocab)
	}
	special := map[int]string{}
	for _, s := range []struct {
		id  int
		tok string
	}{{c.UnkID, "[UNK]"}, {c.CLSID, "[CLS]"}, {c.SepID, "[SEP]"}, {c.PadID, "[PAD]"}, {c.MaskID, "[MASK]"}} {
		if s.id < 0 || s.id >= c.Vocab {
			return nil, nil, fmt.Errorf("modernbertref: %s id %d outside the vocabulary of %d", s.tok, s.id, c.Vocab)
		}
		if prev, ok := special[s.id]; ok {
			return nil, nil, fmt.Errorf("modernbertref: %s and %s share id %d", prev, s.tok, s.id)
		}
		special[s.id] = s.tok
	}
	var regular []string
	regular = append(regular, ByteSymbols()...)
	room := c.Vocab - len(special)
	seen := map[string]bool{}
	for _, s := range regular {
		seen[s] = true
	}
	var merges [][2]string
	for _, m := range tokenizerMerges {
		if len(regular) >= room {
			break
		}
		if !seen[m[0]] || !seen[m[1]] {
			return nil, nil, fmt.Errorf("modernbertref: merge %q uses an unknown symbol", m)
		}
		merges = append(merges, m)
		if j := m[0] + m[1]; !seen[j] {
			regular = append(regular, j)
			seen[j] = true
		}
	}
	for n := 0; len(regular) < room; n++ {
		regular = append(regular, fmt.Sprintf("<|unused%d|>", n))
	}
	vocab := make([]string, c.Vocab)
	next := 0
	for id := range vocab {
		if s, ok := special[id]; ok {
			vocab[id] = s
			continue
		}
		vocab[id] = regular[next]
		next++
	}
	return vocab, merges, nil
}

// WriteTokenizer writes dir/tokenizer.json and dir/tokenizer_config.json:
// a tiny but real HF "tokenizers" byte-level BPE tokenizer laid out as
// ModernBERT's (the OLMo-derived BPE of answerdotai/ModernBERT-base), with
// the vocabulary of TokenizerVocab(c):
//
//   - normalizer null; pre_tokenizer ByteLevel{add_prefix_space false,
//     trim_offsets true, use_regex true}; decoder ByteLevel;
//   - model BPE{dropout null, unk_token null, continuing_subword_prefix "",
//     end_of_word_suffix "", fuse_unk false, byte_fallback false};
//   - post_processor TemplateProcessing single "[CLS]:0 $A:0 [SEP]:0",
//     pair "[CLS]:0 $A:0 [SEP]:0 $B:1 [SEP]:1";
//   - added_tokens [UNK] [CLS] [SEP] [PAD] [MASK] (special, normalized
//     false; [MASK] with lstrip true, so the space before it is absorbed);
//   - tokenizer_config.json: PreTrainedTokenizerFast with the five special
//     tokens, model_max_length = max_position_embeddings and
//     model_input_names ["input_ids", "attention_mask"] (no token types).
//
// The layout follows what this package's author knows of
// ModernBERT-base's tokenizer files; it was not checked against the
// published tokenizer.json (no copy was reachable), so the exact flags
// above are not a verified reproduction of it.
func WriteTokenizer(dir string, c Config) error {
	vocab, merges, err := TokenizerVocab(c)
	if err != nil {
		return err
	}
	mergeList := make([]string, len(merges))
	for i, m := range merges {
		mergeList[i] = m[0] + " " + m[1]
	}
	special := func(tok string, typeID int) map[string]any {
		return map[string]any{"SpecialToken": map[string]any{"id": tok, "type_id": typeID}}
	}
	seq := func(name string, typeID int) map[string]any {
		return map[string]any{"Sequence": map[string]any{"id": name, "type_id": typeID}}
	}
	added := func(id int, tok string, lstrip bool) map[string]any {
		return map[string]any{"id": id, "content": tok, "single_word": false, "lstrip": lstrip,
			"rstrip": false, "normalized": false, "special": true}
	}
	var addedTokens []any
	for id, tok := range vocab {
		switch tok {
		case "[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]":
			addedTokens = append(addedTokens, added(id, tok, tok == "[MASK]"))
		}
	}
	byteLevel := map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true}
	tj := map[string]any{
		"version":       "1.0",
		"truncation":    nil,
		"padding":       nil,
		"added_tokens":  addedTokens,
		"normalizer":    nil,
		"pre_tokenizer": byteLevel,
		"decoder":       byteLevel,
		"post_processor": map[string]any{
			"type":   "TemplateProcessing",
			"single": []any{special("[CLS]", 0), seq("A", 0), special("[SEP]", 0)},
			"pair":   []any{special("[CLS]", 0), seq("A", 0), special("[SEP]", 0), seq("B", 1), special("[SEP]", 1)},
			"special_tokens": map[string]any{
				"[CLS]": map[string]any{"id": "[CLS]", "ids": []int{c.CLSID}, "tokens": []string{"[CLS]"}},
				"[SEP]": map[string]any{"id": "[SEP]", "ids": []int{c.SepID}, "tokens": []string{"[SEP]"}},
			},
		},
		"model": map[string]any{
			"type": "BPE", "dropout": nil, "unk_token": nil, "continuing_subword_prefix": "",
			"end_of_word_suffix": "", "fuse_unk": false, "byte_fallback": false,
			"vocab": lmckpt.OrderedVocab(vocab), "merges": mergeList,
		},
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := writeJSON(filepath.Join(dir, "tokenizer.json"), tj); err != nil {
		return err
	}
	cfg := map[string]any{
		"clean_up_tokenization_spaces": true,
		"cls_token":                    "[CLS]",
		"mask_token":                   "[MASK]",
		"model_input_names":            []string{"input_ids", "attention_mask"},
		"model_max_length":             c.maxPositions(),
		"pad_token":                    "[PAD]",
		"sep_token":                    "[SEP]",
		"tokenizer_class":              "PreTrainedTokenizerFast",
		"unk_token":                    "[UNK]",
	}
	return writeJSON(filepath.Join(dir, "tokenizer_config.json"), cfg)
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}
