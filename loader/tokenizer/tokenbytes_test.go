package tokenizer

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The bytes of each generated token, concatenated, are the text the
// stream decoder emits after a prompt: what constrained decoding walks
// is what the user reads.
func TestTokenBytesMatchStream(t *testing.T) {
	texts := []string{
		` {"name": "Ann", "age": 3}`,
		"\n  [1, 2.5e+3, true, null]\n",
		` "日本語 é ü 😀 \u00e9"`,
		`Hello  world\ttab`,
	}
	for _, name := range []string{"llama2", "llama2-metaspace", "llama3", "qwen3", "gemma3", "gpt2-tiny", "qwen2-tiny", "t5-sp"} {
		path := filepath.Join("testdata", "tokenizers", name, "tokenizer.json")
		if _, err := os.Stat(path); err != nil {
			path += ".gz"
		}
		tk := loadCached(t, path)
		tb := tk.TokenBytes()
		if len(tb) != tk.VocabSize() {
			t.Fatalf("%s: %d token byte strings for %d ids", name, len(tb), tk.VocabSize())
		}
		prompt, err := tk.Encode("Once upon a time", false)
		if err != nil {
			t.Fatal(err)
		}
		for _, text := range texts {
			ids, err := tk.Encode(text, false)
			if err != nil {
				t.Fatal(err)
			}
			d := tk.StreamDecoderAfter(prompt)
			var streamed, concat strings.Builder
			for _, id := range ids {
				streamed.WriteString(d.Add(id))
				concat.Write(tb[id])
			}
			streamed.WriteString(d.Flush())
			if streamed.String() != concat.String() {
				t.Errorf("%s: %q: streamed %q, token bytes %q", name, text, streamed.String(), concat.String())
			}
		}
		for _, id := range tk.SpecialTokens() {
			if tb[id] != nil {
				t.Errorf("%s: special token %d has bytes %q", name, id, tb[id])
			}
		}
	}
}
