package tokenizer

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
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

// The expected values in the tests below are the outputs of tokenizers
// 0.23.2 (the Node binding) for the same component and input.

type collectSink struct{ out []string }

func (c *collectSink) emit(s string, _ bool) error {
	c.out = append(c.out, s)
	return nil
}

// TestNormalizersMatchHF covers normalizer edge cases: runs of more than 30
// combining marks (no U+034F, full canonical ordering), StripAccents on Mn,
// Mc and Me, empty Replace matches, and Oniguruma regex semantics.
func TestNormalizersMatchHF(t *testing.T) {
	cases := []struct{ json, in, want string }{
		{`{"type": "NFC"}`, "e" + strings.Repeat("\u0301", 31), "\u00e9" + strings.Repeat("\u0301", 30)},
		{`{"type": "NFC"}`, "a" + strings.Repeat("\u0301", 20) + "\u0323" + strings.Repeat("\u0301", 15), "\u1ea1" + strings.Repeat("\u0301", 35)},
		{`{"type": "NFC"}`, "u\u0308\u0304" + strings.Repeat("\u0301", 30) + "\u0323x", "\u1ee5\u0308\u0304" + strings.Repeat("\u0301", 30) + "x"},
		{`{"type": "NFC"}`, "\u1e09" + strings.Repeat("\u0301", 29) + "\u0323", "\u1e09\u0323" + strings.Repeat("\u0301", 29)},
		{`{"type": "NFD"}`, "\u00e9" + strings.Repeat("\u0301", 30), "e" + strings.Repeat("\u0301", 31)},
		{`{"type": "NFKC"}`, "\ufb01" + strings.Repeat("\u0301", 35) + "\u034f\u0301", "f\u00ed" + strings.Repeat("\u0301", 34) + "\u034f\u0301"},
		{`{"type": "NFKD"}`, "x" + strings.Repeat("\u0344", 20) + "\u0301", "x\u0308\u0301\u0308\u0301\u0308\u0301\u0308\u0301\u0308\u0301\u0308\u0301\u0308\u0301\u0308\u0301\u0308\u0301\u0308\u0301\u0308\u0301\u0308\u0301\u0308\u0301\u0308\u0301\u0308\u0301\u0308\u0301\u0308\u0301\u0308\u0301\u0308\u0301\u0308\u0301\u0301"},
		{`{"type": "StripAccents"}`, "a\u0301b\u0903c\u20dd", "abc"},
		{`{"type": "Sequence", "normalizers": [{"type": "NFD"}, {"type": "StripAccents"}]}`, "\u00e9" + strings.Repeat("\u0301", 40) + "x", "ex"},
		{`{"type": "BertNormalizer", "clean_text": true, "handle_chinese_chars": true, "strip_accents": null, "lowercase": true}`, "\u00c9\u0903\u20dd" + strings.Repeat("\u0301", 40), "e\u0903\u20dd"},
		{`{"type": "Replace", "pattern": {"Regex": "a*"}, "content": "-"}`, "bab", "-b-b-"},
		{`{"type": "Replace", "pattern": {"Regex": "a*"}, "content": "-"}`, "\u00e9baa", "-\u00e9-b-"},
		{`{"type": "Replace", "pattern": {"Regex": "a*"}, "content": "-"}`, "", ""},
		{`{"type": "Replace", "pattern": {"String": ""}, "content": "-"}`, "ab", "-a-b-"},
		{`{"type": "Replace", "pattern": {"Regex": "^"}, "content": ">"}`, "a\nb\n", ">a\n>b\n"},
		{`{"type": "Replace", "pattern": {"Regex": "$"}, "content": "<"}`, "a\nb\n", "a<\nb<\n<"},
		{`{"type": "Replace", "pattern": {"Regex": "^\\s+|\\s+$"}, "content": ""}`, "  a b \n c \n", "a b\nc"},
		{`{"type": "Replace", "pattern": {"Regex": "\\w+"}, "content": "-"}`, "a\u00b3_\u24b6\u200d\u3007\u0903.\u00bd", "-\u200d-.-"},
		{`{"type": "Replace", "pattern": {"Regex": "[\\w.]+"}, "content": "-"}`, "a\u00b3_\u24b6\u200d\u3007\u0903.\u00bd", "-\u00b3-\u200d-\u00bd"},
		{`{"type": "Replace", "pattern": {"Regex": "\\W"}, "content": "-"}`, "a\u00b3_\u24b6\u200d\u3007\u0903.\u00bd", "a\u00b3_\u24b6-\u3007\u0903-\u00bd"},
		{`{"type": "Replace", "pattern": {"Regex": "\\b"}, "content": "|"}`, "a\u216b \u00b3x\u200dy\u0903", "|a\u216b| |\u00b3x|\u200d|y\u0903|"},
		{`{"type": "Replace", "pattern": {"Regex": "\\B"}, "content": "|"}`, "ab\u00b3 c", "a|b|\u00b3 c"},
		{`{"type": "Replace", "pattern": {"Regex": "(?m)a."}, "content": "-"}`, "a\nab", "--"},
		{`{"type": "Replace", "pattern": {"Regex": "(?m:a.)|a."}, "content": "-"}`, "a\na\n", "--"},
		{`{"type": "Replace", "pattern": {"Regex": "a{,2}"}, "content": "-"}`, "baaab", "-b--b-"},
		{`{"type": "Replace", "pattern": {"Regex": "[]a]"}, "content": "-"}`, "a]b", "--b"},
		{`{"type": "Replace", "pattern": {"Regex": "\\p{Lu}[\\x{61}\\p{N}]|\\x{63}"}, "content": "-"}`, "Aa B1 Cc Dd", "- - C- Dd"},
	}
	for _, c := range cases {
		comp, err := parseComponent(json.RawMessage(c.json), "normalizer")
		if err != nil {
			t.Fatal(err)
		}
		n, err := buildNormalizer(comp, 0)
		if err != nil {
			t.Errorf("%s: %v", c.json, err)
			continue
		}
		if got, err := n.normalize(c.in); err != nil || got != c.want {
			t.Errorf("%s on %+q: got %+q (%v), want %+q", c.json, c.in, got, err, c.want)
		}
	}
}

// TestPreTokenizersMatchHF: the Whitespace pre-tokenizer's \w (the regex
// crate's), Metaspace splitting at a replacement character at byte 1 or 2,
// and empty matches in Split.
func TestPreTokenizersMatchHF(t *testing.T) {
	cases := []struct {
		json, in string
		want     []string
	}{
		{`{"type": "Whitespace"}`, "a\u216bb x\u0345y \u00b3z a\u200cb \u24b6\u3007 \u00bdx \u06631", []string{"a\u216bb", "x\u0345y", "\u00b3", "z", "a\u200cb", "\u24b6\u3007", "\u00bd", "x", "\u06631"}},
		{`{"type": "Metaspace", "replacement": "▁", "prepend_scheme": "never", "split": true}`, "e f", []string{"e", "\u2581f"}},
		{`{"type": "Metaspace", "replacement": "▁", "prepend_scheme": "never", "split": true}`, "e  ", []string{"e", "\u2581", "\u2581"}},
		{`{"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": true}`, "\u2581\u2581a b", []string{"\u2581", "\u2581a", "\u2581b"}},
		{`{"type": "Split", "pattern": {"String": ""}, "behavior": "Removed", "invert": false}`, "b\u00e9", []string{"b", "\u00e9"}},
		{`{"type": "Split", "pattern": {"Regex": "^"}, "behavior": "Isolated", "invert": false}`, "a\nb\n", []string{"a\n", "b\n"}},
	}
	for _, c := range cases {
		comp, err := parseComponent(json.RawMessage(c.json), "pre_tokenizer")
		if err != nil {
			t.Fatal(err)
		}
		p, err := buildPreTokenizer(comp, 0)
		if err != nil {
			t.Errorf("%s: %v", c.json, err)
			continue
		}
		var got collectSink
		if err := p.pretok(c.in, true, &got); err != nil || !slices.Equal(got.out, c.want) {
			t.Errorf("%s on %+q: got %+q (%v), want %+q", c.json, c.in, got.out, err, c.want)
		}
	}
}

// TestEncodeDecodeMatchHF: single_word added tokens (\w of the regex crate:
// Alphabetic, marks, Nd, Pc, Join_Control, not '³' or '½'), Metaspace with
// prepend_scheme "first" after an added token, and the Replace decoder's
// empty matches.
func TestEncodeDecodeMatchHF(t *testing.T) {
	parse := func(js string) *Tokenizer {
		t.Helper()
		tk, err := Parse([]byte(js))
		if err != nil {
			t.Fatal(err)
		}
		return tk
	}
	sw := parse(`{"version": "1.0", "added_tokens": [{"id": 1, "content": "tok", "single_word": true, "lstrip": false, "rstrip": false, "normalized": false, "special": false}], "normalizer": null, "pre_tokenizer": null, "post_processor": null, "decoder": null, "model": {"type": "WordLevel", "vocab": {"[UNK]": 0, "tok": 1}, "unk_token": "[UNK]"}}`)
	ms := parse(`{"version": "1.0", "added_tokens": [{"id": 1, "content": "<x>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true}], "normalizer": null, "pre_tokenizer": {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": true}, "post_processor": null, "decoder": null, "model": {"type": "WordLevel", "vocab": {"[UNK]": 0, "<x>": 1, "e": 2, "▁": 3, "▁f": 4, "e▁": 5, "e▁f": 6, "▁e": 7}, "unk_token": "[UNK]"}}`)
	dec := parse(`{"version": "1.0", "added_tokens": [], "normalizer": null, "pre_tokenizer": null, "post_processor": null, "decoder": {"type": "Replace", "pattern": {"Regex": "a*"}, "content": "-"}, "model": {"type": "WordLevel", "vocab": {"[UNK]": 0, "bab": 1, "aa": 2, "ébaa": 3}, "unk_token": "[UNK]"}}`)
	cases := []struct {
		tk   *Tokenizer
		in   string
		want []int
	}{
		{sw, "\u24b6tok", []int{0}},
		{sw, "tok\u216b", []int{0}},
		{sw, "\u00b3tok", []int{0, 1}},
		{sw, "tok\u00bd", []int{1, 0}},
		{sw, "\u200dtok", []int{0}},
		{sw, "tok\u0903", []int{0}},
		{sw, "tok\u20dd", []int{0}},
		{sw, "\u203ftok", []int{0}},
		{sw, "\u0663tok", []int{0}},
		{sw, "-tok", []int{0, 1}},
		{sw, "tok.", []int{1, 0}},
		{ms, "e f", []int{7, 4}},
		{ms, "<x>e f", []int{1, 2, 4}},
		{ms, "<x>e  ", []int{1, 2, 3, 3}},
	}
	for _, c := range cases {
		if got, err := c.tk.Encode(c.in, false); err != nil || !slices.Equal(got, c.want) {
			t.Errorf("Encode(%+q) = %v (%v), want %v", c.in, got, err, c.want)
		}
	}
	decodes := []struct {
		ids  []int
		want string
	}{
		{[]int{1}, "-b-b-"},
		{[]int{3}, "-\u00e9-b-"},
		{[]int{1, 2, 3}, "-b-b---\u00e9-b-"},
	}
	for _, c := range decodes {
		if got := dec.Decode(c.ids, false); got != c.want {
			t.Errorf("Decode(%v) = %+q, want %+q", c.ids, got, c.want)
		}
	}
}

// TestRegexUnsupported: patterns whose Oniguruma meaning regexp2 cannot
// reproduce fail to load with an error naming them, rather than silently
// matching something else.
func TestRegexUnsupported(t *testing.T) {
	for _, pat := range []string{
		`[a&&b]`,        // class intersection, other than with a negated class
		`[^a-z&&[^b]]`,  // ... or in a negated class
		`[a&&[^b]c]`,    // ... or before the class's end
		`[a&&[^[b]]]`,   // ... or with a nested class
		`[&&[^b]]`,      // ... or an empty X
		`[a&&[^]]]`,     // ... or an empty Y
		`[[:alpha:]]`,   // POSIX bracket
		`[a-z-[aeiou]]`, // nested class (a union in Oniguruma)
		`[\W]`,          // \W inside a class
		`(?s).`,         // undefined in Oniguruma
		`(?x) a`,        // extended mode
		`a{2}+`,         // (?:a{2})+ in Oniguruma
		`a{2}?`,         // (?:a{2})? in Oniguruma
	} {
		js, _ := json.Marshal(pat)
		_, err := Parse([]byte(`{"pre_tokenizer": {"type": "Split", "pattern": {"Regex": ` + string(js) + `}, "behavior": "Isolated"},
			"model": {"type": "WordLevel", "vocab": {"a": 0}, "unk_token": "a"}}`))
		if !errors.Is(err, errs.ErrUnsupported) || !strings.Contains(err.Error(), strconv.Quote(pat)) {
			t.Errorf("%s: got %v, want ErrUnsupported naming the pattern", pat, err)
		}
	}
}

// TestRegexIntersection: [X&&[^Y]], X without Y, as Oniguruma and
// fancy-regex match it (Kimi's pat_str).
func TestRegexIntersection(t *testing.T) {
	m, err := compileRegex(`[a-z&&[^aeiou]]+|\p{L}`, "test")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	in := "strength is"
	if err := m.findAll(in, func(s, e int) { got = append(got, in[s:e]) }); err != nil {
		t.Fatal(err)
	}
	if want := []string{"str", "e", "ngth", "i", "s"}; !slices.Equal(got, want) {
		t.Errorf("pieces %q, want %q", got, want)
	}
	// A ^ opening Y is a character: [a-z&&[^^a]] is a-z without a (and ^).
	m, err = compileRegex(`[a-z&&[^^a]]`, "test")
	if err != nil {
		t.Fatal(err)
	}
	got, in = nil, "bab^c"
	if err := m.findAll(in, func(s, e int) { got = append(got, in[s:e]) }); err != nil {
		t.Fatal(err)
	}
	if want := []string{"b", "b", "c"}; !slices.Equal(got, want) {
		t.Errorf("[a-z&&[^^a]] on %q: %q, want %q", in, got, want)
	}
}

// Truncate cuts the content and keeps what the post-processor adds (T5's
// </s> after it, as Qwen3-Embedding's <|endoftext|>), as HF tokenizers
// truncate before post-processing; short enough, the ids stay as they
// are; no room for content cuts the end.
func TestTruncateKeepsAddedTokens(t *testing.T) {
	tk := loadCached(t, filepath.Join("testdata", "tokenizers", "t5-sp", "tokenizer.json.gz"))
	text := "The quick brown fox jumps over the lazy dog, twice over."
	ids, err := tk.Encode(text, true)
	if err != nil {
		t.Fatal(err)
	}
	content, err := tk.Encode(text, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(ids) != len(content)+1 || len(ids) < 6 || !slices.Equal(ids[:len(content)], content) {
		t.Fatalf("ids %v, content %v: want one added token after", ids, content)
	}
	end := ids[len(ids)-1]
	got, err := tk.Truncate(text, ids, 5)
	if err != nil {
		t.Fatal(err)
	}
	if want := append(slices.Clone(content[:4]), end); !slices.Equal(got, want) {
		t.Errorf("Truncate to 5: %v, want %v", got, want)
	}
	if got, _ := tk.Truncate(text, ids, len(ids)); !slices.Equal(got, ids) {
		t.Errorf("Truncate to its length: %v, want %v", got, ids)
	}
	if got, _ := tk.Truncate(text, ids, 1); !slices.Equal(got, ids[:1]) {
		t.Errorf("Truncate to 1 (no room for content): %v, want %v", got, ids[:1])
	}
}
