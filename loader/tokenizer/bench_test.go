package tokenizer

import (
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// benchText builds ~size bytes of mixed text (English-like prose with a
// Zipf-distributed vocabulary, code, CJK, digits, emoji, whitespace runs),
// deterministically, as paragraphs separated by "\n\n".
func benchText(size int) string {
	rng := rand.New(rand.NewSource(42))
	syll := []string{"ka", "lo", "ther", "an", "in", "re", "tion", "de", "mo", "st", "ing", "er", "pa", "vi", "con", "al", "ex", "ur", "ly", "om"}
	words := make([]string, 5000)
	for i := range words {
		var b strings.Builder
		for k := 1 + rng.Intn(4); k > 0; k-- {
			b.WriteString(syll[rng.Intn(len(syll))])
		}
		words[i] = b.String()
	}
	zipf := rand.NewZipf(rng, 1.1, 2, uint64(len(words)-1))
	code := []string{
		"func main() {\n\tfmt.Println(\"hello\", x+1)\n}\n",
		"for (int i = 0; i < n; ++i) { sum += a[i] * b[i]; }\n",
		"def f(x):\n    return {k: v for k, v in x.items() if v is not None}\n",
		"SELECT id, name FROM users WHERE age > 30 ORDER BY name;\n",
	}
	cjk := []string{"你好，世界！今天天气很好。", "日本語のテキストとカタカナ、ひらがな。", "한국어 텍스트도 있습니다.", "Русский текст с пунктуацией."}
	var b strings.Builder
	for b.Len() < size {
		switch r := rng.Intn(10); {
		case r < 6:
			for s := 3 + rng.Intn(6); s > 0; s-- {
				n := 5 + rng.Intn(15)
				for i := 0; i < n; i++ {
					w := words[zipf.Uint64()]
					if i == 0 {
						w = strings.ToUpper(w[:1]) + w[1:]
					}
					b.WriteString(w)
					if i < n-1 {
						b.WriteByte(' ')
					}
				}
				b.WriteString([]string{". ", "! ", "? ", ", and ", "; "}[rng.Intn(5)])
			}
		case r < 8:
			b.WriteString(code[rng.Intn(len(code))])
			b.WriteString(strings.Repeat(" ", rng.Intn(8)))
		case r < 9:
			b.WriteString(cjk[rng.Intn(len(cjk))])
		default:
			b.WriteString("In 2024, 3.14159 × 1,000,000 = 3141590 😀👍🏽 ")
		}
		b.WriteString("\n\n")
	}
	return b.String()
}

const benchSize = 10 << 20

// TestWriteBenchText writes the benchmark text for scripts/tokenizer-bench.sh
// when TPUTOOL_TOKENIZER_BENCH_TEXT names a file.
func TestWriteBenchText(t *testing.T) {
	path := os.Getenv("TPUTOOL_TOKENIZER_BENCH_TEXT")
	if path == "" {
		t.Skip("TPUTOOL_TOKENIZER_BENCH_TEXT not set")
	}
	if err := os.WriteFile(path, []byte(benchText(benchSize)), 0o644); err != nil {
		t.Fatal(err)
	}
}

func benchEncode(b *testing.B, name string) {
	tk, err := Load(filepath.Join("testdata", "tokenizers", name, "tokenizer.json.gz"))
	if err != nil {
		b.Fatal(err)
	}
	paras := strings.Split(benchText(benchSize), "\n\n")
	total := 0
	for _, p := range paras {
		total += len(p)
	}
	b.SetBytes(int64(total))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for _, p := range paras {
			if _, err := tk.Encode(p, false); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// Encode throughput on 10 MB of mixed text, one paragraph per call.
func BenchmarkEncodeQwen3(b *testing.B)  { benchEncode(b, "qwen3") }
func BenchmarkEncodeLlama3(b *testing.B) { benchEncode(b, "llama3") }
func BenchmarkEncodeLlama2(b *testing.B) { benchEncode(b, "llama2") }

func BenchmarkLoadQwen3(b *testing.B) {
	for i := 0; i < b.N; i++ {
		if _, err := Load(filepath.Join("testdata", "tokenizers", "qwen3", "tokenizer.json.gz")); err != nil {
			b.Fatal(err)
		}
	}
}
