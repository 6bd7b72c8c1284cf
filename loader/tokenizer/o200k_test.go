package tokenizer

import (
	"encoding/json"
	"os"
	"slices"
	"testing"
)

// TestO200kSplit runs the pre-tokenization pattern of o200k_base (the
// Split of gpt-oss's tokenizer.json) through the regexp2 matcher on
// strings that exercise its cases (casing runs, contractions, digits in
// threes, slashes after punctuation, marks, CJK, scripts with case,
// whitespace before newlines) and compares the pieces with Python's regex
// module (testdata/o200k-split.json, written by it).
func TestO200kSplit(t *testing.T) {
	b, err := os.ReadFile("testdata/o200k-split.json")
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Pattern string `json:"pattern"`
		Cases   []struct {
			Text   string   `json:"text"`
			Pieces []string `json:"pieces"`
		} `json:"cases"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	m, err := compileRegex(v.Pattern, "o200k")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range v.Cases {
		var got []string
		if err := m.findAll(c.Text, func(start, end int) { got = append(got, c.Text[start:end]) }); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, c.Pieces) {
			t.Errorf("%q: pieces %q, want %q", c.Text, got, c.Pieces)
		}
	}
}
