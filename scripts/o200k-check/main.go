// Command o200k-check verifies tputool's tokenizer on GPT-OSS's vocabulary
// (o200k_base) against tiktoken's algorithm, with no network beyond the Go
// module proxy:
//
//	cd scripts/o200k-check && go run . [-corpus DIR] [-json FILE]
//
// It builds the tokenizer.json that gpt-oss's release ships (a byte-level
// BPE over o200k_base's ranks: the o200k Split pattern, then ByteLevel
// without its own regex) from the ranks that github.com/pkoukk/tiktoken-go-loader
// embeds: the vocabulary maps each rank's bytes, GPT-2 byte-encoded, to the
// rank, and every way of cutting a token into two tokens is a merge whose
// priority is the token's rank (tiktoken merges the adjacent pair whose
// result has the lowest rank). It then encodes a corpus (the repository's
// docs and Go sources, and strings that exercise scripts, digits,
// whitespace, marks and emoji) with loader/tokenizer and with
// github.com/pkoukk/tiktoken-go (a port of tiktoken), and compares the ids
// of every text exactly, and tputool's decode of them with the text.
//
// It is its own module, so that tiktoken-go is a dependency of this check
// only; the tokenizer.json it writes (-json) is about 30 MB, too large to
// commit. Exit status 1 when any text differs.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/pkoukk/tiktoken-go"
	tiktoken_loader "github.com/pkoukk/tiktoken-go-loader"

	"github.com/tputool/tputool/loader/tokenizer"
)

// o200kPattern is o200k_base's pre-tokenization pattern, as gpt-oss's
// tokenizer.json Split holds it.
const o200kPattern = `[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+`

func main() {
	corpus := flag.String("corpus", "../..", "a directory whose .md and .go files are encoded too")
	out := flag.String("json", "", "also write the tokenizer.json here")
	flag.Parse()
	if err := run(*corpus, *out); err != nil {
		fmt.Fprintln(os.Stderr, "o200k-check:", err)
		os.Exit(1)
	}
}

func run(corpus, out string) error {
	ranks, err := tiktoken_loader.NewOfflineLoader().LoadTiktokenBpe("o200k_base.tiktoken")
	if err != nil {
		return err
	}
	raw, err := tokenizerJSON(ranks)
	if err != nil {
		return err
	}
	if out != "" {
		if err := os.WriteFile(out, raw, 0o644); err != nil {
			return err
		}
	}
	ours, err := tokenizer.Parse(raw)
	if err != nil {
		return fmt.Errorf("loading the built tokenizer.json: %w", err)
	}
	tiktoken.SetBpeLoader(tiktoken_loader.NewOfflineLoader())
	ref, err := tiktoken.GetEncoding("o200k_base")
	if err != nil {
		return err
	}
	texts, err := corpusTexts(corpus)
	if err != nil {
		return err
	}
	var bad, tokens, bytes int
	for _, c := range texts {
		want := ref.Encode(c.text, []string{"<|endoftext|>"}, nil) // an added token, as tokenizer.json's
		got, err := ours.Encode(c.text, false)
		if err != nil {
			return fmt.Errorf("%s: %w", c.name, err)
		}
		tokens += len(want)
		bytes += len(c.text)
		if i := firstDiff(got, want); i >= 0 {
			bad++
			if bad <= 5 {
				fmt.Printf("DIFF %s: token %d of %d: tputool %v, tiktoken %v\n", c.name, i, len(want), window(got, i), window(want, i))
			}
			continue
		}
		if back := ours.Decode(got, false); back != c.text {
			bad++
			if bad <= 5 {
				fmt.Printf("DECODE %s: tputool's decode differs from the text\n", c.name)
			}
		}
	}
	fmt.Printf("o200k_base: %d texts, %d bytes, %d tokens; %d differ\n", len(texts), bytes, tokens, bad)
	if bad > 0 {
		return fmt.Errorf("%d of %d texts differ", bad, len(texts))
	}
	return nil
}

// tokenizerJSON is gpt-oss's tokenizer.json form of ranks (token bytes to
// rank): a byte-level BPE whose merges are every split of a token into two
// tokens, by the token's rank (then the halves' ranks), and <|endoftext|>
// (o200k_base's special token, at its id; tiktoken is asked to allow it,
// as a tokenizer.json matches its added tokens in any text).
func tokenizerJSON(ranks map[string]int) ([]byte, error) {
	vocab := make(map[string]int, len(ranks))
	type merge struct {
		l, r       string
		rank, a, b int
	}
	var merges []merge
	for tok, rank := range ranks {
		vocab[byteLevel(tok)] = rank
		for i := 1; i < len(tok); i++ {
			a, okA := ranks[tok[:i]]
			b, okB := ranks[tok[i:]]
			if okA && okB {
				merges = append(merges, merge{tok[:i], tok[i:], rank, a, b})
			}
		}
	}
	sort.Slice(merges, func(i, j int) bool {
		x, y := merges[i], merges[j]
		if x.rank != y.rank {
			return x.rank < y.rank
		}
		if x.a != y.a {
			return x.a < y.a
		}
		return x.b < y.b
	})
	pairs := make([][2]string, len(merges))
	for i, m := range merges {
		pairs[i] = [2]string{byteLevel(m.l), byteLevel(m.r)}
	}
	n := len(ranks)
	doc := map[string]any{
		"version":    "1.0",
		"truncation": nil,
		"padding":    nil,
		"added_tokens": []map[string]any{
			{"id": n + 1, "content": "<|endoftext|>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true},
		},
		"normalizer": nil,
		"pre_tokenizer": map[string]any{
			"type": "Sequence",
			"pretokenizers": []map[string]any{
				{"type": "Split", "pattern": map[string]any{"Regex": o200kPattern}, "behavior": "Isolated", "invert": false},
				{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false},
			},
		},
		"post_processor": nil,
		"decoder":        map[string]any{"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
		"model": map[string]any{
			"type": "BPE", "dropout": nil, "unk_token": nil, "continuing_subword_prefix": nil,
			"end_of_word_suffix": nil, "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
			"vocab": vocab, "merges": pairs,
		},
	}
	return json.Marshal(doc)
}

// byteLevel is s with each byte replaced by its printable stand-in (GPT-2's
// bytes_to_unicode): printable Latin-1 bytes stand for themselves, the
// others for 256 + their order among them.
func byteLevel(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		b.WriteRune(byteRune[s[i]])
	}
	return b.String()
}

var byteRune = func() [256]rune {
	var t [256]rune
	printable := func(c int) bool {
		return c >= '!' && c <= '~' || c >= 0xA1 && c <= 0xAC || c >= 0xAE && c <= 0xFF
	}
	next := 256
	for c := range 256 {
		if printable(c) {
			t[c] = rune(c)
		} else {
			t[c] = rune(next)
			next++
		}
	}
	return t
}()

type text struct{ name, text string }

// corpusTexts are the crafted strings and every .md and .go file below dir
// (testdata and hidden folders left out).
func corpusTexts(dir string) ([]text, error) {
	out := []text{
		{"contractions", "Hello World's HTTPServer isn't OK'd, THEY'RE we'll I'M"},
		{"digits", "1 12 123 1234 12345 3.14159 1,000,000 0x1F 2026-12-05"},
		{"whitespace", "a  b   c\t\td\n\n\ne \r\n f  \n  g   "},
		{"code", "func main() {\n\tfmt.Println(\"hi\") // x := y[i:j]\n}\n"},
		{"cjk", "日本語のテキストと中文文本，以及한국어 텍스트。"},
		{"scripts", "Ελληνικά Русский текст العربية עברית हिन्दी ไทย"},
		{"marks", "café naïve Å Ǆ ǅ ǆ e\u0301 a\u0308\u0323"},
		{"emoji", "👋🏽 family: 👨‍👩‍👧‍👦 flags 🇫🇷🇯🇵 ✨🔥"},
		{"punctuation", "...!!! ??? --- /// \\\\ ''' \"\" <<>> ((()))"},
		{"urls", "https://huggingface.co/openai/gpt-oss-20b/resolve/main/tokenizer.json?download=true"},
	}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != dir && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".md") && !strings.HasSuffix(name, ".go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		out = append(out, text{path, string(b)})
		return nil
	})
	return out, err
}

// firstDiff is the first index where a and b differ, or -1.
func firstDiff(a, b []int) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	if len(a) != len(b) {
		return min(len(a), len(b))
	}
	return -1
}

// window is the ids around i.
func window(ids []int, i int) []int { return ids[max(0, i-3):min(len(ids), i+4)] }
