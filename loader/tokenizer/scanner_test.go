package tokenizer

import (
	"encoding/json"
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// scannerCorpus: every vector input plus random strings over an alphabet
// chosen to hit each branch of the patterns: contractions in both cases,
// every kind of Unicode whitespace (including U+0085, U+00A0, U+2028,
// U+3000), \r and \n runs, digits of several scripts, letters, marks,
// CJK, emoji and punctuation.
func scannerCorpus(t testing.TB, n int) []string {
	var corpus []string
	files, _ := filepath.Glob(filepath.Join("testdata", "vectors", "*.json"))
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var vecs []vector
		if err := json.Unmarshal(data, &vecs); err != nil {
			t.Fatal(err)
		}
		for _, v := range vecs {
			corpus = append(corpus, v.Input)
		}
	}
	alphabet := []string{
		"a", "b", "Z", "é", "ß", "ſ", "K", "s", "S", "t", "T", "re", "RE", "ve", "m", "ll", "LL", "d", "D",
		"'", "'", "’", " ", " ", " ", "  ", "\t", "\n", "\r", "\r\n", "\v", "\f", "\u0085", "\u00a0", "\u1680",
		"\u2000", "\u2028", "\u2029", "\u202f", "\u3000", "\u200b", "\ufeff",
		"0", "1", "9", "٣", "५", "Ⅻ", "½", "²",
		"你", "好", "の", "한", "ж", "α", "\u0301", "\u0308", "\u0903", "\u20dd", "\u093f", "😀", "👍🏽", "‍",
		".", ",", "!", "?", "-", "_", "(", ")", "{", "}", ";", "<", "|", ">", "$", "#", "%", "…", "—", "\x00", "\x7f",
	}
	rng := rand.New(rand.NewSource(1))
	for i := 0; i < n; i++ {
		var b strings.Builder
		for k := rng.Intn(24); k >= 0; k-- {
			b.WriteString(alphabet[rng.Intn(len(alphabet))])
		}
		corpus = append(corpus, b.String())
	}
	// Long runs exercise the backtracking of \s+(?!\S).
	corpus = append(corpus, strings.Repeat(" ", 300)+"x"+strings.Repeat("\n ", 200)+strings.Repeat("1", 50))
	return corpus
}

func collectSpans(t testing.TB, m matcher, s string) [][2]int {
	var spans [][2]int
	if err := m.findAll(s, func(a, b int) { spans = append(spans, [2]int{a, b}) }); err != nil {
		t.Fatal(err)
	}
	return spans
}

// TestScannerMatchesRegexp2 proves the hand-written scanner agrees with
// regexp2 running the exact patterns from the tokenizer files.
func TestScannerMatchesRegexp2(t *testing.T) {
	n := 20000
	if testing.Short() {
		n = 2000
	}
	corpus := scannerCorpus(t, n)
	for _, pat := range []struct {
		name string
		expr string
		kind scanKind
	}{{"gpt2", patternGPT2, scanGPT2}, {"llama3", patternLlama3, scanLlama3}, {"qwen2", patternQwen2, scanQwen2}, {"qwen3.5", patternQwen35, scanQwen35}} {
		re, err := newRegexp2(pat.expr)
		if err != nil {
			t.Fatal(err)
		}
		sc := scanMatcher{kind: pat.kind}
		bad := 0
		for _, s := range corpus {
			want := collectSpans(t, re, s)
			got := collectSpans(t, sc, s)
			if !slices.Equal(got, want) {
				bad++
				if bad <= 5 {
					t.Errorf("%s: %q:\nscanner %v\nregexp2 %v", pat.name, s, got, want)
				}
			}
		}
		if bad > 0 {
			t.Errorf("%s: %d of %d strings differ", pat.name, bad, len(corpus))
		}
	}
}
