package tokenizer

import (
	"bytes"
	"compress/gzip"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tputool/tputool/internal/errs"
)

func TestLoadDirSpecialTokens(t *testing.T) {
	cases := []struct {
		dir           string
		bos, eos, pad string
		bosFirst      bool // Encode(..., true) starts with BOS
	}{
		{"qwen3", "", "<|im_end|>", "<|endoftext|>", false},
		{"llama3", "<|begin_of_text|>", "<|end_of_text|>", "", false},
		{"llama2", "<s>", "</s>", "", true},
		{"gemma3", "<bos>", "<end_of_turn>", "<pad>", true},
	}
	for _, c := range cases {
		tk, err := LoadDir(filepath.Join("testdata", "tokenizers", c.dir))
		if err != nil {
			t.Fatal(err)
		}
		check := func(what string, got int, ok bool, want string) {
			if want == "" {
				if ok {
					t.Errorf("%s %s: got %d, want none", c.dir, what, got)
				}
				return
			}
			id, _ := tk.TokenToID(want)
			if !ok || got != id {
				t.Errorf("%s %s: got %d (%v), want %d %q", c.dir, what, got, ok, id, want)
			}
		}
		id, ok := tk.BOS()
		check("BOS", id, ok, c.bos)
		id, ok = tk.EOS()
		check("EOS", id, ok, c.eos)
		id, ok = tk.Pad()
		check("Pad", id, ok, c.pad)
		ids, err := tk.Encode("hi", true)
		if err != nil {
			t.Fatal(err)
		}
		bos, _ := tk.BOS()
		if got := len(ids) > 0 && ids[0] == bos && c.bos != ""; got != c.bosFirst {
			t.Errorf("%s: Encode(add special) = %v, BOS first = %v, want %v", c.dir, ids, got, c.bosFirst)
		}
		if tk.VocabSize() <= 0 {
			t.Errorf("%s: VocabSize %d", c.dir, tk.VocabSize())
		}
		for _, tok := range []string{"hello", "<0x0A>"} {
			if id, ok := tk.TokenToID(tok); ok {
				if back, _ := tk.IDToToken(id); back != tok {
					t.Errorf("%s: IDToToken(TokenToID(%q)) = %q", c.dir, tok, back)
				}
			}
		}
	}
}

// TestAddBOSFromConfig: add_bos_token / add_eos_token in tokenizer_config.json
// decide the special tokens of Encode(..., true).
func TestAddBOSFromConfig(t *testing.T) {
	dir := t.TempDir()
	src, err := os.ReadFile(filepath.Join("testdata", "tokenizers", "llama2", "tokenizer.json.gz"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tokenizer.json.gz"), src, 0o644); err != nil {
		t.Fatal(err)
	}
	write := func(cfg string) *Tokenizer {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), []byte(cfg), 0o644); err != nil {
			t.Fatal(err)
		}
		tk, err := LoadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		return tk
	}
	tk := write(`{"bos_token": "<s>", "eos_token": {"content": "</s>", "__type": "AddedToken"}, "add_bos_token": false, "add_eos_token": true}`)
	ids, _ := tk.Encode("hi", true)
	if ids[0] == 1 || ids[len(ids)-1] != 2 {
		t.Errorf("add_bos false, add_eos true: %v", ids)
	}
	tk = write(`{"bos_token": "<s>", "eos_token": "</s>", "chat_template": [{"name": "default", "template": "{{ bos_token }}x"}, {"name": "tool_use", "template": "t"}]}`)
	ids, _ = tk.Encode("hi", true)
	if ids[0] != 1 || ids[len(ids)-1] == 2 {
		t.Errorf("defaults from tokenizer.json: %v", ids)
	}
	if names := tk.ChatTemplateNames(); strings.Join(names, ",") != "default,tool_use" {
		t.Errorf("template names %v", names)
	}
	if _, err := tk.ChatTemplate("nope"); !errors.Is(err, errs.ErrUnsupported) {
		t.Errorf("missing named template: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "chat_template.jinja"), []byte("J{{ messages | length }}"), 0o644); err != nil {
		t.Fatal(err)
	}
	tk, err = LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	tmpl, err := tk.ChatTemplate("")
	if err != nil || !strings.HasPrefix(tmpl.Source(), "J") {
		t.Errorf("chat_template.jinja should be the default: %v", err)
	}
}

func gz(b []byte) []byte {
	var buf bytes.Buffer
	w := gzip.NewWriter(&buf)
	w.Write(b)
	w.Close()
	return buf.Bytes()
}

// TestHostileTokenizers: malformed files give errors naming the problem, and
// never panic.
func TestHostileTokenizers(t *testing.T) {
	cases := map[string]string{
		"not json":        `{"model": `,
		"no model":        `{"added_tokens": []}`,
		"unknown model":   `{"model": {"type": "Magic"}}`,
		"merge oov":       `{"model": {"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": ["a c"]}}`,
		"merged oov":      `{"model": {"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": ["a b"]}}`,
		"bad merge":       `{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["ab"]}}`,
		"huge id":         `{"model": {"type": "BPE", "vocab": {"a": 99999999999}, "merges": []}}`,
		"negative id":     `{"model": {"type": "BPE", "vocab": {"a": -1}, "merges": []}}`,
		"sparse ids":      `{"model": {"type": "BPE", "vocab": {"a": 0, "b": 9000000}, "merges": []}}`,
		"added huge id":   `{"added_tokens": [{"id": 4000000000, "content": "x"}], "model": {"type": "BPE", "vocab": {}, "merges": []}}`,
		"bad regex":       `{"pre_tokenizer": {"type": "Split", "pattern": {"Regex": "(("}, "behavior": "Isolated"}, "model": {"type": "BPE", "vocab": {}, "merges": []}}`,
		"bad behavior":    `{"pre_tokenizer": {"type": "Split", "pattern": {"String": " "}, "behavior": "Sideways"}, "model": {"type": "BPE", "vocab": {}, "merges": []}}`,
		"unigram bad":     `{"model": {"type": "Unigram", "vocab": [["a"]]}}`,
		"unigram unk oob": `{"model": {"type": "Unigram", "vocab": [["a", -1]], "unk_id": 5}}`,
		"template oov":    `{"post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<x>"}}, {"Sequence": {"id": "A"}}]}, "model": {"type": "BPE", "vocab": {}, "merges": []}}`,
		"deep sequence":   `{"normalizer": ` + strings.Repeat(`{"type": "Sequence", "normalizers": [`, 40) + strings.Repeat(`]}`, 40) + `, "model": {"type": "BPE", "vocab": {}, "merges": []}}`,
		"bad charsmap":    `{"normalizer": {"type": "Precompiled", "precompiled_charsmap": "AAAA"}, "model": {"type": "BPE", "vocab": {}, "merges": []}}`,
	}
	for name, js := range cases {
		if _, err := Parse([]byte(js)); err == nil {
			t.Errorf("%s: no error", name)
		} else if strings.TrimSpace(err.Error()) == "" {
			t.Errorf("%s: empty error", name)
		}
	}
	// A missing unk token fails only when needed, as in tokenizers.
	tk, err := Parse([]byte(`{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": [], "unk_token": "<unk>"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tk.Encode("a", false); err != nil {
		t.Errorf("known chars: %v", err)
	}
	if _, err := tk.Encode("ab", false); err == nil || !strings.Contains(err.Error(), "<unk>") {
		t.Errorf("unknown char without unk: %v", err)
	}
	dir := t.TempDir()
	p := filepath.Join(dir, "tokenizer.json.gz")
	os.WriteFile(p, append(gz([]byte(`{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}}`))[:20], 0, 0), 0o644)
	if _, err := Load(p); err == nil {
		t.Error("truncated gzip: no error")
	}
	if _, err := LoadDir(t.TempDir()); !errors.Is(err, errs.ErrUnsupported) {
		t.Errorf("empty dir: %v", err)
	}
}

// TestMinimalModels covers WordPiece and WordLevel, which no vector file uses.
func TestMinimalModels(t *testing.T) {
	wp, err := Parse([]byte(`{"normalizer": {"type": "BertNormalizer", "lowercase": true}, "pre_tokenizer": {"type": "BertPreTokenizer"},
		"model": {"type": "WordPiece", "unk_token": "[UNK]", "vocab": {"[UNK]": 0, "un": 1, "##aff": 2, "##able": 3, "hello": 4, "!": 5}},
		"post_processor": {"type": "BertProcessing", "sep": ["[SEP]", 7], "cls": ["[CLS]", 6]},
		"decoder": {"type": "WordPiece", "prefix": "##"}}`))
	if err != nil {
		t.Fatal(err)
	}
	ids, err := wp.Encode("Unaffable HELLO! xyz", true)
	if err != nil {
		t.Fatal(err)
	}
	if want := []int{6, 1, 2, 3, 4, 5, 0, 7}; !slices.Equal(ids, want) {
		t.Errorf("wordpiece: got %v want %v", ids, want)
	}
	if got := wp.Decode([]int{1, 2, 3, 4, 5}, false); got != "unaffable hello!" {
		t.Errorf("wordpiece decode: %q", got)
	}
}
