package tokenizer

import (
	"encoding/base64"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// FuzzLoad: no input makes Parse panic or hang; whatever loads can encode
// and decode a few strings, and encode a pair (or refuse to).
func FuzzLoad(f *testing.F) {
	for _, name := range []string{"qwen2-tiny", "gpt2-tiny", "clip-tiny", "unigram-tiny", "bert-pair", "xlmr-tiny", "odd-template"} {
		data, err := readMaybeGzip(filepath.Join("testdata", "tokenizers", name, "tokenizer.json"), maxFileBytes)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte(`{"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": [["a", "b"]], "byte_fallback": true}}`))
	f.Add([]byte(`{"normalizer": {"type": "Precompiled", "precompiled_charsmap": "CAAAAAAAAAAAAAAAAAAAAA=="}, "model": {"type": "Unigram", "vocab": [["a", -1]], "unk_id": 0}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		tk, err := Parse(data)
		if err != nil {
			return
		}
		for _, s := range []string{"", "hello world", "a  b\n\nc", "ünï 你好 😀", "<|endoftext|>x"} {
			ids, err := tk.Encode(s, true)
			if err != nil {
				continue
			}
			out := tk.Decode(ids, false)
			if !utf8.ValidString(out) {
				t.Fatalf("decode produced invalid UTF-8 %q", out)
			}
		}
		for _, add := range []bool{false, true} {
			if ids, types, err := tk.EncodePair("hello world", "ünï 你好", add); err == nil && len(ids) != len(types) {
				t.Fatalf("EncodePair: %d ids, %d type ids", len(ids), len(types))
			}
		}
		for _, n := range []int{0, 3, 8} {
			if ids, types, err := tk.EncodePairTruncated("hello world again", "a  b\n\nc d e", n); err == nil && (len(ids) != len(types) || len(ids) > n) {
				t.Fatalf("EncodePairTruncated(%d): %d ids, %d type ids", n, len(ids), len(types))
			}
		}
	})
}

var (
	fuzzTokOnce sync.Once
	fuzzToks    []*Tokenizer
)

// FuzzEncode: any text encodes without error or panic with real
// tokenizers, and byte-level tokenizers round-trip it exactly.
func FuzzEncode(f *testing.F) {
	for _, s := range []string{"", "Hello world", "  \n\t x", "你好😀", "<|im_start|>user\nhi<|im_end|>", "'S 'll 123456", "\xff\xfe bad utf8"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		fuzzTokOnce.Do(func() {
			for _, name := range []string{"qwen3", "llama2"} {
				tk, err := Load(filepath.Join("testdata", "tokenizers", name, "tokenizer.json.gz"))
				if err != nil {
					panic(err)
				}
				fuzzToks = append(fuzzToks, tk)
			}
		})
		for i, tk := range fuzzToks {
			ids, err := tk.Encode(s, false)
			if err != nil {
				t.Fatalf("encode %q: %v", s, err)
			}
			out := tk.Decode(ids, false)
			if i == 0 && utf8.ValidString(s) && normalizedNFC(s) && out != s {
				t.Fatalf("qwen3 round trip %q -> %v -> %q", s, ids, out)
			}
		}
	})
}

func normalizedNFC(s string) bool { return norm.NFC.IsNormalString(s) }

// FuzzTiktoken builds both tiktoken flavours from hostile ranks files: an
// error or a tokenizer that encodes, never a panic.
func FuzzTiktoken(f *testing.F) {
	f.Add([]byte("QQ== 0\nQg== 1\nQUI= 2\n"))
	f.Add([]byte("QQ== 99999999\n"))
	f.Add([]byte("\n\n  \nQQ==   1\r\n"))
	var all strings.Builder
	for b := range 256 {
		fmt.Fprintf(&all, "%s %d\n", base64.StdEncoding.EncodeToString([]byte{byte(b)}), b)
	}
	all.WriteString("aGU= 256\naGVs 257\n")
	f.Add([]byte(all.String()))
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, fl := range tiktokenFlavors {
			tk, err := buildTiktoken(data, fl, &tiktokenConfig{})
			if err != nil {
				continue
			}
			ids, err := tk.Encode("hello <|eos|>[BOS] 你好 123", false)
			if err != nil {
				t.Fatal(err)
			}
			_ = tk.Decode(ids, true)
		}
	})
}
