package constrain

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tputool/tputool/loader/tokenizer"
)

// qwenVocab is Qwen3's 151,669-id vocabulary (the tokenizer fixture).
func qwenVocab(b testing.TB) *Vocab {
	path := filepath.Join("..", "..", "loader", "tokenizer", "testdata", "tokenizers", "qwen3", "tokenizer.json.gz")
	if _, err := os.Stat(path); err != nil {
		b.Skip("no qwen3 tokenizer fixture")
	}
	tk, err := tokenizer.Load(path)
	if err != nil {
		b.Fatal(err)
	}
	eos, _ := tk.TokenToID("<|im_end|>")
	v, err := NewVocab(tk.TokenBytes(), []int{eos})
	if err != nil {
		b.Fatal(err)
	}
	return v
}

// The cost of one mask computed afresh (a state met for the first time)
// over Qwen3's vocabulary, in the states a JSON answer passes through;
// a state met again is a map lookup.
func BenchmarkMaskUncached(b *testing.B) {
	v := qwenVocab(b)
	g, err := JSONSchema([]byte(`{"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"}},"required":["name","age"]}`))
	if err != nil {
		b.Fatal(err)
	}
	for _, tc := range []struct{ name, prefix string }{
		{"start", ""},
		{"in-string", `{"name": "Ann`},
		{"after-value", `{"name": "Ann"`},
		{"in-number", `{"name": "Ann", "age": 4`},
	} {
		b.Run(tc.name, func(b *testing.B) {
			for b.Loop() {
				ix := NewIndex(g, v)
				m := ix.NewMatcher()
				if !m.AdvanceBytes([]byte(tc.prefix)) {
					b.Fatal("prefix refused")
				}
				m.Mask()
			}
		})
	}
	b.Run("cached", func(b *testing.B) {
		ix := NewIndex(g, v)
		m := ix.NewMatcher()
		m.AdvanceBytes([]byte(`{"name": "Ann`))
		m.Mask()
		for b.Loop() {
			m.Mask()
		}
	})
	b.Run("allows", func(b *testing.B) {
		ix := NewIndex(g, v)
		m := ix.NewMatcher()
		m.AdvanceBytes([]byte(`{"name": "Ann`))
		id := 0
		for i, t := range v.tokens {
			if string(t) == "ie" {
				id = i
			}
		}
		for b.Loop() {
			if !m.Allows(id) {
				b.Fatal("refused")
			}
		}
	})
}

// Over a real vocabulary, every bit of the mask (walked, or taken whole
// from a plain subtree) agrees with asking about the token alone.
func TestMaskAgreesWithAllowsQwen(t *testing.T) {
	v := qwenVocab(t)
	g, err := JSONSchema([]byte(`{"type":"object","properties":{"name":{"type":"string"},"tag":{"type":"string","maxLength":3},"n":{"type":"number"}},"required":["name"]}`))
	if err != nil {
		t.Fatal(err)
	}
	ix := NewIndex(g, v)
	for _, prefix := range []string{"", `{"name": "An`, `{"name": "日`, "{\"name\": \"\xe6", `{"name": "a\`, `{"name": "a", "tag": "ab`, `{"name": "a", "n": -1.`} {
		m := ix.NewMatcher()
		if !m.AdvanceBytes([]byte(prefix)) {
			t.Fatalf("%q refused", prefix)
		}
		mask := m.Mask()
		n := 0
		for id := range v.size {
			in := mask[id/64]&(1<<(id%64)) != 0
			if in != m.Allows(id) {
				t.Fatalf("after %q: token %d %q: mask %v, Allows %v", prefix, id, v.tokens[id], in, !in)
			}
			if in {
				n++
			}
		}
		t.Logf("after %q: %d tokens allowed", prefix, n)
	}
}

// Indexing Qwen3's vocabulary (once per server and end-of-sequence set).
func BenchmarkNewVocabQwen(b *testing.B) {
	path := filepath.Join("..", "..", "loader", "tokenizer", "testdata", "tokenizers", "qwen3", "tokenizer.json.gz")
	tk, err := tokenizer.Load(path)
	if err != nil {
		b.Skip(err)
	}
	tb := tk.TokenBytes()
	for b.Loop() {
		if _, err := NewVocab(tb, []int{151645}); err != nil {
			b.Fatal(err)
		}
	}
}

// A 50-property schema (strings, integers, enums, nested arrays of
// objects) compiled, indexed over Qwen3's vocabulary, and its first mask
// (the cost before a request's first token; later requests with the same
// schema reuse the index in serve).
func BenchmarkCompile50Properties(b *testing.B) {
	v := qwenVocab(b)
	var props []string
	for i := range 50 {
		var s string
		switch i % 5 {
		case 0:
			s = `{"type":"string"}`
		case 1:
			s = `{"type":"integer","minimum":0,"maximum":1000}`
		case 2:
			s = `{"enum":["low","medium","high"]}`
		case 3:
			s = `{"type":"array","items":{"type":"object","properties":{"k":{"type":"string","maxLength":16},"v":{"type":"number"}},"required":["k","v"]}}`
		default:
			s = `{"type":["boolean","null"]}`
		}
		props = append(props, fmt.Sprintf(`"field_%02d":%s`, i, s))
	}
	schema := []byte(`{"type":"object","properties":{` + strings.Join(props, ",") + `},"additionalProperties":false}`)
	b.Run("compile", func(b *testing.B) {
		for b.Loop() {
			if _, err := JSONSchema(schema); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("compile+first-mask", func(b *testing.B) {
		for b.Loop() {
			g, err := JSONSchema(schema)
			if err != nil {
				b.Fatal(err)
			}
			NewIndex(g, v).NewMatcher().Mask()
		}
	})
}
