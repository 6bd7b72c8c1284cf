package tokenizer

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tputool/tputool/internal/errs"
)

// writeGPT2Files writes gpt2-tiny's vocabulary and merges as GPT-2's slow
// files (vocab.json, merges.txt after a "#version" line) into a new
// folder, with the given tokenizer_config.json (none when empty) and
// added_tokens.json (none when nil).
func writeGPT2Files(t *testing.T, config string, added map[string]int) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", "tokenizers", "gpt2-tiny", "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	var tj struct {
		Model struct {
			Vocab  json.RawMessage `json:"vocab"`
			Merges []string        `json:"merges"`
		} `json:"model"`
	}
	if err := json.Unmarshal(raw, &tj); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	files := map[string]string{
		"vocab.json": string(tj.Model.Vocab),
		"merges.txt": "#version: 0.2\n" + strings.Join(tj.Model.Merges, "\n") + "\n",
	}
	if config != "" {
		files["tokenizer_config.json"] = config
	}
	if added != nil {
		b, _ := json.Marshal(added)
		files["added_tokens.json"] = string(b)
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestGPT2SlowFiles reads gpt2-tiny as GPT-2's slow files and checks that
// it encodes and decodes as its tokenizer.json does: the byte-level BPE,
// add_prefix_space from tokenizer_config.json, the special token matched
// inside text.
func TestGPT2SlowFiles(t *testing.T) {
	fast, err := Load(filepath.Join("testdata", "tokenizers", "gpt2-tiny", "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	dir := writeGPT2Files(t, `{"tokenizer_class": "GPT2Tokenizer", "add_prefix_space": true, "unk_token": "<unk>",
		"bos_token": "<|endoftext|>", "eos_token": {"content": "<|endoftext|>", "special": true}}`, nil)
	slow, err := LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, text := range []string{"lower newer", "lowest wider", " lower\n\nnewer  ", "low<|endoftext|>er", "naïve 日本 🙂", ""} {
		want, err := fast.Encode(text, true)
		if err != nil {
			t.Fatal(err)
		}
		got, err := slow.Encode(text, true)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, want) {
			t.Errorf("%q: slow files %v, tokenizer.json %v", text, got, want)
		}
		if a, b := slow.Decode(got, false), fast.Decode(want, false); a != b {
			t.Errorf("%q: decoded %q, tokenizer.json %q", text, a, b)
		}
	}
	if ids, _ := slow.Encode("lower newer", true); !slices.Equal(ids, []int{14, 15, 10, 9, 3, 2, 15}) {
		t.Errorf("lower newer: %v, want transformers' [14 15 10 9 3 2 15]", ids)
	}
	// Without add_prefix_space (GPT2Tokenizer's default) "lower" has no
	// leading Ġ.
	plain, err := LoadDir(writeGPT2Files(t, "", nil))
	if err != nil {
		t.Fatal(err)
	}
	if ids, _ := plain.Encode("lower", false); slices.Contains(ids, 14) || len(ids) != 4 {
		t.Errorf("lower without add_prefix_space: %v, want l o w er", ids)
	}
}

// TestGPT2SlowFilesSpecials checks OPT's add_bos_token, a special token
// the vocabulary lacks (the next id), and added_tokens.json's tokens.
func TestGPT2SlowFilesSpecials(t *testing.T) {
	dir := writeGPT2Files(t, `{"add_bos_token": true, "bos_token": "<|endoftext|>", "pad_token": "<pad>",
		"additional_special_tokens": ["<extra>"]}`, map[string]int{"<extra>": 30, "<word>": 31})
	tk, err := LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := tk.Encode("low<extra> <word><pad>", true)
	if err != nil {
		t.Fatal(err)
	}
	// BOS; "low" (l o w: no merge applies without the Ġ); <extra> 30; " "
	// (Ġ); <word> 31; <pad>, absent from vocab.json, the next id past
	// added_tokens.json's.
	if want := []int{20, 0, 1, 2, 30, 10, 31, 32}; !slices.Equal(ids, want) {
		t.Errorf("ids %v, want %v", ids, want)
	}
	if got := tk.Decode(ids, true); got != "low <word>" {
		t.Errorf("decoded without specials: %q, want %q (<word> is added, not special)", got, "low <word>")
	}
}

// TestGPT2SlowFilesRefused names the file or class it cannot read.
func TestGPT2SlowFilesRefused(t *testing.T) {
	roberta := writeGPT2Files(t, `{"tokenizer_class": "RobertaTokenizer"}`, nil)
	if _, err := LoadDir(roberta); err == nil || !errors.Is(err, errs.ErrUnsupported) || !strings.Contains(err.Error(), "RobertaTokenizer") {
		t.Errorf("RobertaTokenizer: %v, want unsupported naming the class", err)
	}
	bad := writeGPT2Files(t, "", nil)
	if err := os.WriteFile(filepath.Join(bad, "merges.txt"), []byte("#version: 0.2\nl o\nlo w x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadDir(bad); err == nil || !strings.Contains(err.Error(), "merges.txt: line 3") {
		t.Errorf("a merge of three tokens: %v, want merges.txt's line 3 named", err)
	}
	if err := os.WriteFile(filepath.Join(bad, "vocab.json"), []byte(`["l", "o"]`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadDir(bad); err == nil || !strings.Contains(err.Error(), "vocab.json") {
		t.Errorf("a vocab.json list: %v, want vocab.json named", err)
	}
	// merges.txt alone is no tokenizer: the usual error.
	if err := os.Remove(filepath.Join(bad, "vocab.json")); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadDir(bad); err == nil || !strings.Contains(err.Error(), "no tokenizer.json") {
		t.Errorf("merges.txt alone: %v", err)
	}
}

// TestGPT2SlowFilesDefaults: a BOS named by special_tokens_map.json alone
// is the BOS add_bos_token prepends, and without any config
// <|endoftext|> is GPT2Tokenizer's BOS, EOS and unknown token, matched
// whole inside text.
func TestGPT2SlowFilesDefaults(t *testing.T) {
	dir := writeGPT2Files(t, `{"add_bos_token": true}`, nil)
	if err := os.WriteFile(filepath.Join(dir, "special_tokens_map.json"), []byte(`{"bos_token": "<unk>"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	tk, err := LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if ids, _ := tk.Encode("lower", true); len(ids) == 0 || ids[0] != 19 {
		t.Errorf("BOS from special_tokens_map.json: %v, want <unk> (19) first", ids)
	}
	if bos, ok := tk.BOS(); !ok || bos != 19 {
		t.Errorf("BOS %d, %v; want 19", bos, ok)
	}
	plain, err := LoadDir(writeGPT2Files(t, "", nil))
	if err != nil {
		t.Fatal(err)
	}
	if ids, _ := plain.Encode("low<|endoftext|>", false); !slices.Equal(ids, []int{0, 1, 2, 20}) {
		t.Errorf("<|endoftext|> without configs: %v, want it whole (20)", ids)
	}
	if eos, ok := plain.EOS(); !ok || eos != 20 {
		t.Errorf("EOS %d, %v; want <|endoftext|> (20)", eos, ok)
	}
}

// TestGPT2SlowFilesBadSpecials names the file that holds a bad field.
func TestGPT2SlowFilesBadSpecials(t *testing.T) {
	for _, c := range []struct{ file, data, want string }{
		{"special_tokens_map.json", `{"eos_token": 7}`, "special_tokens_map.json: eos_token"},
		{"tokenizer_config.json", `{"added_tokens_decoder": {"25x": {"content": "<x>", "special": true}}}`, `tokenizer_config.json: added_tokens_decoder: id "25x"`},
		{"added_tokens.json", `{"<x>": 1099511627776}`, "added_tokens.json"},
		{"added_tokens.json", `{"<x>": -1}`, "added_tokens.json"},
	} {
		dir := writeGPT2Files(t, "", nil)
		if err := os.WriteFile(filepath.Join(dir, c.file), []byte(c.data), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := LoadDir(dir); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s %s: %v, want an error naming %q", c.file, c.data, err, c.want)
		}
	}
}
