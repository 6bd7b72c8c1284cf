package tokenizer

import (
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"
)

// TestStreamDecoder: streaming the ids of each corpus text one by one gives
// valid UTF-8 chunks whose concatenation equals Decode of all ids.
func TestStreamDecoder(t *testing.T) {
	texts := []string{
		"Hello world, this is a test.",
		"你好，世界！今天天气很好。",
		"emoji: 😀😃😄 👍🏽 👨‍👩‍👧‍👦 🇫🇷 ❤️",
		"combining: e\u0301 a\u0300 and Ελληνικά, русский, हिन्दी",
		"  leading spaces and\ttabs\n\nnewlines  ",
	}
	for _, name := range []string{"qwen3", "llama3", "llama2", "gemma3"} {
		tk := loadCached(t, filepath.Join("testdata", "tokenizers", name, "tokenizer.json.gz"))
		for _, text := range texts {
			ids, err := tk.Encode(text, true)
			if err != nil {
				t.Fatal(err)
			}
			for _, skip := range []bool{false, true} {
				d := tk.NewStreamDecoder(skip)
				var b strings.Builder
				for _, id := range ids {
					chunk := d.Add(id)
					if !utf8.ValidString(chunk) || strings.Contains(chunk, "\uFFFD") {
						t.Errorf("%s %q: chunk %q is not complete UTF-8", name, text, chunk)
					}
					b.WriteString(chunk)
				}
				b.WriteString(d.Flush())
				if want := tk.Decode(ids, skip); b.String() != want {
					t.Errorf("%s %q skip=%v: stream %q, decode %q", name, text, skip, b.String(), want)
				}
			}
		}
	}
}

func TestDecodeSkipSpecial(t *testing.T) {
	tk := loadCached(t, filepath.Join("testdata", "tokenizers", "qwen3", "tokenizer.json.gz"))
	ids, err := tk.Encode("<|im_start|>user\nhi<|im_end|>", false)
	if err != nil {
		t.Fatal(err)
	}
	if got := tk.Decode(ids, true); got != "user\nhi" {
		t.Errorf("skip special: %q", got)
	}
	if got := tk.Decode(ids, false); got != "<|im_start|>user\nhi<|im_end|>" {
		t.Errorf("keep special: %q", got)
	}
	if !tk.IsSpecial(ids[0]) || tk.IsSpecial(ids[1]) {
		t.Errorf("IsSpecial wrong for %v", ids)
	}
}

func TestLossyUTF8(t *testing.T) {
	cases := map[string]string{
		"a\xe4\xb8b":      "a\uFFFDb",            // truncated 3-byte sequence: one U+FFFD
		"\xff\xfe":        "\uFFFD\uFFFD",        // two invalid bytes
		"\xf0\x9f\x98":    "\uFFFD",              // truncated 4-byte
		"\xed\xa0\x80x":   "\uFFFD\uFFFD\uFFFDx", // surrogate: each byte
		"ok \xe4\xbd\xa0": "ok 你",
	}
	for in, want := range cases {
		if got := lossyUTF8([]byte(in)); got != want {
			t.Errorf("%q: got %q want %q", in, got, want)
		}
	}
}

// TestConcurrentEncode: one Tokenizer used from several goroutines gives the
// same ids as sequential use (the BPE cache is shared).
func TestConcurrentEncode(t *testing.T) {
	tk := loadCached(t, filepath.Join("testdata", "tokenizers", "qwen2-tiny", "tokenizer.json"))
	texts := []string{"lower newer", "wider lowest 010;}\n", "ϓ <|endoftext|> ###", "l o w e r"}
	want := make([][]int, len(texts))
	for i, s := range texts {
		want[i], _ = tk.Encode(s, false)
	}
	done := make(chan string, 8)
	for g := 0; g < 8; g++ {
		go func() {
			for k := 0; k < 200; k++ {
				i := k % len(texts)
				got, err := tk.Encode(texts[i], false)
				if err != nil || !slicesEqual(got, want[i]) {
					done <- texts[i]
					return
				}
			}
			done <- ""
		}()
	}
	for g := 0; g < 8; g++ {
		if s := <-done; s != "" {
			t.Errorf("concurrent encode of %q differs", s)
		}
	}
}

func slicesEqual(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestStreamDecoderAfter: the text streamed after a primed prompt is the
// decode of prompt plus continuation minus the prompt's decode, leading
// space included.
func TestStreamDecoderAfter(t *testing.T) {
	for _, name := range []string{"qwen3", "llama3", "llama2", "gemma3"} {
		tk := loadCached(t, filepath.Join("testdata", "tokenizers", name, "tokenizer.json.gz"))
		prompt, err := tk.Encode("Once upon a time", false)
		if err != nil {
			t.Fatal(err)
		}
		all, err := tk.Encode("Once upon a time and then", false)
		if err != nil {
			t.Fatal(err)
		}
		if len(all) <= len(prompt) {
			t.Fatalf("%s: %v does not extend %v", name, all, prompt)
		}
		d := tk.StreamDecoderAfter(prompt)
		var b strings.Builder
		for _, id := range all[len(prompt):] {
			b.WriteString(d.Add(id))
		}
		b.WriteString(d.Flush())
		want := strings.TrimPrefix(tk.Decode(all, true), tk.Decode(prompt, true))
		if b.String() != want || !strings.HasPrefix(want, " ") {
			t.Errorf("%s: streamed %q after the prompt, want %q (with its leading space)", name, b.String(), want)
		}
	}
}
