package tokenizer

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tputool/tputool/internal/errs"
)

// pairFile is a file of testdata/pairs, written by gen-pair-vectors.js
// there with the official Node binding of HF tokenizers.
type pairFile struct {
	Tokenizer         string `json:"tokenizer"`
	PairSpecialTokens int    `json:"pair_special_tokens"`
	Pairs             []struct {
		A, B      string
		Plain     pairEncoding `json:"plain"`
		Special   pairEncoding `json:"special"`
		Truncated []struct {
			MaxLength int `json:"max_length"`
			pairEncoding
		} `json:"truncated"`
	} `json:"pairs"`
}

type pairEncoding struct {
	IDs     []int `json:"ids"`
	TypeIDs []int `json:"type_ids"`
}

func samePair(ids, types []int, want pairEncoding) bool {
	eq := func(a, b []int) bool { return slices.Equal(a, b) || len(a) == 0 && len(b) == 0 }
	return eq(ids, want.IDs) && eq(types, want.TypeIDs)
}

// hasPairTemplate is what HasPairTemplate answers for each fixture of
// testdata/pairs: gpt2-tiny's post-processor is ByteLevel only.
var hasPairTemplate = map[string]bool{
	"bert-pair": true, "bert-processing": true, "xlmr-tiny": true, "odd-template": true,
	"roberta-tiny": true, "llama31-tiny": true, "clip-tiny": true, "gpt2-tiny": false,
	"unigram-tiny": true, "t5-sp": true, "llama2": true, "metaspace-first": true,
}

// TestPairVectors checks EncodePair and EncodePairTruncated against HF
// tokenizers' own output (encode(a, b) with and without special tokens, and
// with truncation {max_length, LongestFirst}), ids and type ids, for
// BertProcessing, RobertaProcessing, TemplateProcessing (BERT's, XLM-R's,
// T5's, Llama 2's, a Sequence with ByteLevel, an odd template with $B
// first and a two-id special token) and ByteLevel-only post-processors.
//
// EncodePairTruncated refuses a maximum length that leaves no room for one
// token of each text besides the special tokens, where tokenizers keeps
// none of one text: those vectors must give an error.
func TestPairVectors(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "pairs", "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < len(hasPairTemplate) {
		t.Fatalf("%d pair vector files, want %d", len(files), len(hasPairTemplate))
	}
	for _, file := range files {
		name := strings.TrimSuffix(filepath.Base(file), ".json")
		t.Run(name, func(t *testing.T) {
			data, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			var pf pairFile
			if err := json.Unmarshal(data, &pf); err != nil {
				t.Fatal(err)
			}
			if len(pf.Pairs) == 0 {
				t.Fatal("no pairs")
			}
			tk := loadCached(t, filepath.Join(filepath.Dir(file), pf.Tokenizer))
			want, known := hasPairTemplate[name]
			if !known {
				t.Fatalf("no HasPairTemplate expectation for %s", name)
			}
			if got := tk.HasPairTemplate(); got != want {
				t.Errorf("HasPairTemplate = %v, want %v", got, want)
			}
			added, err := tk.PairSpecialTokens()
			if err != nil || added != pf.PairSpecialTokens {
				t.Errorf("PairSpecialTokens = %d, %v; want %d", added, err, pf.PairSpecialTokens)
			}
			n := 0
			for _, p := range pf.Pairs {
				ids, types, err := tk.EncodePair(p.A, p.B, false)
				if err != nil || !samePair(ids, types, p.Plain) {
					t.Errorf("EncodePair(%q, %q, false):\n got %v %v %v\nwant %v %v", p.A, p.B, ids, types, err, p.Plain.IDs, p.Plain.TypeIDs)
				}
				ids, types, err = tk.EncodePair(p.A, p.B, true)
				if err != nil || !samePair(ids, types, p.Special) {
					t.Errorf("EncodePair(%q, %q, true):\n got %v %v %v\nwant %v %v", p.A, p.B, ids, types, err, p.Special.IDs, p.Special.TypeIDs)
				}
				ea, _ := tk.Encode(p.A, false)
				eb, _ := tk.Encode(p.B, false)
				need := min(len(ea), 1) + min(len(eb), 1)
				for _, c := range p.Truncated {
					n++
					ids, types, err := tk.EncodePairTruncated(p.A, p.B, c.MaxLength)
					if len(p.Special.IDs) > c.MaxLength && c.MaxLength-added < need {
						if err == nil {
							t.Errorf("EncodePairTruncated(%q, %q, %d) = %v: want an error (tokenizers gives %v)", p.A, p.B, c.MaxLength, ids, c.IDs)
						}
						continue
					}
					if err != nil || !samePair(ids, types, c.pairEncoding) {
						t.Errorf("EncodePairTruncated(%q, %q, %d):\n got %v %v %v\nwant %v %v", p.A, p.B, c.MaxLength, ids, types, err, c.IDs, c.TypeIDs)
					}
				}
			}
			if n == 0 {
				t.Error("no truncation vectors")
			}
		})
	}
}

// bertPair loads the BERT WordPiece fixture (bertref.WriteTokenizer's with
// 110 tokens): [CLS] 2, [SEP] 3, "the" 9, "a" 10, "is" 12, "what" 13,
// "model" 18, "text" 84, "of" 76, "and" 77, "query" 88, "document" 89.
func bertPair(t *testing.T, post string) *Tokenizer {
	t.Helper()
	tk := loadCached(t, filepath.Join("testdata", "tokenizers", post, "tokenizer.json"))
	for tok, id := range map[string]int{"[CLS]": 2, "[SEP]": 3, "the": 9, "a": 10, "is": 12, "what": 13, "model": 18,
		"text": 84, "of": 76, "and": 77, "query": 88, "document": 89} {
		if got, ok := tk.TokenToID(tok); !ok || got != id {
			t.Fatalf("%s: id %d, want %d", tok, got, id)
		}
	}
	return tk
}

// TestEncodePairBERT works out BERT's pair form by hand, for its
// TemplateProcessing ("[CLS]:0 $A:0 [SEP]:0 $B:1 [SEP]:1") and for
// BertProcessing, which must agree.
func TestEncodePairBERT(t *testing.T) {
	for _, post := range []string{"bert-pair", "bert-processing"} {
		tk := bertPair(t, post)
		a, b := "What is the query?", "The document is a text of the model."
		ids, types, err := tk.EncodePair(a, b, true)
		if err != nil {
			t.Fatal(err)
		}
		// [CLS] what is the query ? [SEP] the document is a text of the model . [SEP]
		wantIDs := []int{2, 13, 12, 9, 88, 6, 3, 9, 89, 12, 10, 84, 76, 9, 18, 5, 3}
		wantTypes := []int{0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}
		if !slices.Equal(ids, wantIDs) || !slices.Equal(types, wantTypes) {
			t.Errorf("%s: EncodePair with special tokens:\n got %v %v\nwant %v %v", post, ids, types, wantIDs, wantTypes)
		}
		// Without special tokens: A then B, type ids 0 then 1 (the
		// template's $A:0 and $B:1; BertProcessing keeps tokenizers' own
		// 0 for the first sequence and 1 for the second).
		ids, types, err = tk.EncodePair(a, b, false)
		wantIDs = []int{13, 12, 9, 88, 6, 9, 89, 12, 10, 84, 76, 9, 18, 5}
		wantTypes = []int{0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1}
		if err != nil || !slices.Equal(ids, wantIDs) || !slices.Equal(types, wantTypes) {
			t.Errorf("%s: EncodePair without special tokens:\n got %v %v %v\nwant %v %v", post, ids, types, err, wantIDs, wantTypes)
		}
		if n, err := tk.PairSpecialTokens(); n != 3 || err != nil {
			t.Errorf("%s: PairSpecialTokens = %d, %v; want 3", post, n, err)
		}
		if !tk.HasPairTemplate() {
			t.Errorf("%s: HasPairTemplate false", post)
		}
	}
}

// TestEncodePairTruncatedBERT works out tokenizers' LongestFirst rule by
// hand. BERT adds 3 tokens to a pair, so max leaves room = max-3 for the
// texts. First each text stops at the end of the word (pre-token) that
// brings it to max tokens or more (tokenizers 0.23's early exit). Then,
// with n1, n2 their lengths and short/long the smaller/larger:
//   - n1+n2 <= room: nothing is cut;
//   - 2*short <= room: the shorter is kept, the longer cut to room-short;
//   - else both are cut: the shorter to room/2, the longer to room/2 plus
//     the odd token of room; on a tie the second sequence keeps the odd
//     token (transformers' slow tokenizers give it to the first instead).
func TestEncodePairTruncatedBERT(t *testing.T) {
	tk := bertPair(t, "bert-pair")
	short := "what is the query"                  // 13 12 9 88: 4 tokens
	long := "the document is a text of the model" // 9 89 12 10 84 76 9 18: 8 tokens
	tieA := "the model of the text"               // 9 18 76 9 84: 5 tokens
	tieB := "a query and a document"              // 10 88 77 10 89: 5 tokens
	cls, sep := 2, 3
	pair := func(a, b []int) ([]int, []int) {
		ids := append(append(append(append([]int{cls}, a...), sep), b...), sep)
		types := make([]int, len(ids))
		for i := len(a) + 2; i < len(ids); i++ {
			types[i] = 1
		}
		return ids, types
	}
	s := []int{13, 12, 9, 88}
	l := []int{9, 89, 12, 10, 84, 76, 9, 18}
	ta := []int{9, 18, 76, 9, 84}
	tb := []int{10, 88, 77, 10, 89}
	for _, c := range []struct {
		why    string
		a, b   string
		max    int
		wa, wb []int // the kept tokens of each text; nil for an error
	}{
		// Long second: 4 + 8 tokens.
		{"fits: 4+8+3 = 15", short, long, 15, s, l},
		{"fits with room to spare", short, long, 40, s, l},
		{"room 11: 2*4 <= 11, B cut to 7", short, long, 14, s, l[:7]},
		{"room 8: 2*4 <= 8, B cut to 4", short, long, 11, s, l[:4]},
		{"room 7: 2*4 > 7, both cut: A 3, the longer B 4", short, long, 10, s[:3], l[:4]},
		{"room 6: A 3, B 3", short, long, 9, s[:3], l[:3]},
		{"room 3: A 1, the longer B 2", short, long, 6, s[:1], l[:2]},
		{"room 2: one of each", short, long, 5, s[:1], l[:1]},
		{"room 1: no room for one of each", short, long, 4, nil, nil},
		{"room 0", short, long, 3, nil, nil},
		{"below the special tokens", short, long, 2, nil, nil},
		// Long first: 8 + 4 tokens, the same cuts on the other side.
		{"room 8: A cut to 4", long, short, 11, l[:4], s},
		{"room 7: the longer A 4, B 3", long, short, 10, l[:4], s[:3]},
		{"room 3: the longer A 2, B 1", long, short, 6, l[:2], s[:1]},
		// Both long, a tie at 5 + 5.
		{"tie, room 7: A 3, B keeps the odd token: 4", tieA, tieB, 10, ta[:3], tb[:4]},
		{"tie, room 8: 4 and 4", tieA, tieB, 11, ta[:4], tb[:4]},
		{"tie, room 9: A 4, B 5", tieA, tieB, 12, ta[:4], tb},
		{"tie, room 5: A 2, B 3", tieA, tieB, 8, ta[:2], tb[:3]},
		// Both long, unequal: 8 + 5 tokens.
		{"room 9: 2*5 > 9, both cut: B 4, the longer A 5", long, tieB, 12, l[:5], tb[:4]},
		{"room 10: 2*5 <= 10, B whole, A 5", long, tieB, 13, l[:5], tb},
		{"room 11: B whole, A 6", long, tieB, 14, l[:6], tb},
		// Both at least max long: the early exit decides which is the
		// longer. 9 + 8 tokens, max 8 (room 5): the first stops at 8
		// tokens, a tie with the second, which keeps the odd token: 2, 3
		// (without the early exit the first, longer, would keep 3).
		{"early exit: a tie at 8", "the document is a text of the model and", long, 8, l[:2], l[:3]},
		// "models" is model ##s: the first stops after it at 9 tokens,
		// longer than the second's 8, and keeps the odd token: 3, 2.
		{"early exit at a word's end", "the document is a text of the models and more", long, 8, l[:3], l[:2]},
		// An empty text needs no room: all of it goes to the other.
		{"empty A, room 1", "", long, 4, nil, l[:1]},
		{"empty B, room 2", long, "", 5, l[:2], nil},
		{"empty A, room 0", "", long, 3, nil, nil},
	} {
		ids, types, err := tk.EncodePairTruncated(c.a, c.b, c.max)
		if c.wa == nil && c.wb == nil {
			if err == nil {
				t.Errorf("%s: EncodePairTruncated(%q, %q, %d) = %v, want an error", c.why, c.a, c.b, c.max, ids)
			}
			continue
		}
		wantIDs, wantTypes := pair(c.wa, c.wb)
		if err != nil || !slices.Equal(ids, wantIDs) || !slices.Equal(types, wantTypes) {
			t.Errorf("%s: EncodePairTruncated(%q, %q, %d):\n got %v %v %v\nwant %v %v", c.why, c.a, c.b, c.max, ids, types, err, wantIDs, wantTypes)
		}
		// The same as EncodePair of the cut texts.
		if err == nil && len(ids) > c.max {
			t.Errorf("%s: %d tokens, more than %d", c.why, len(ids), c.max)
		}
	}
}

// TestLongestFirst checks the rule on its own, with the cases of
// tokenizers' truncate_encodings worked out by hand.
func TestLongestFirst(t *testing.T) {
	for _, c := range []struct{ n1, n2, room, k1, k2 int }{
		{3, 4, 7, 3, 4},     // fits
		{3, 4, 100, 3, 4},   // fits
		{2, 10, 7, 2, 5},    // the shorter fits in half: kept
		{10, 2, 7, 5, 2},    // the same, first longer
		{3, 3, 6, 3, 3},     // a tie that fits
		{4, 4, 7, 3, 4},     // a tie: the second keeps the odd token
		{9, 9, 7, 3, 4},     // the same, both far over
		{10, 6, 7, 4, 3},    // the longer (first) keeps the odd token
		{6, 10, 7, 3, 4},    // the longer (second) keeps it
		{20, 4, 8, 4, 4},    // 2*4 <= 8: the shorter whole
		{20, 5, 8, 4, 4},    // 2*5 > 8: halves
		{0, 9, 3, 0, 3},     // an empty first
		{9, 0, 3, 3, 0},     // an empty second
		{5, 7, 0, 0, 0},     // no room
		{5, 7, 1, 0, 1},     // one token: the longer's
		{7, 7, 1, 0, 1},     // one token, a tie: the second's
		{100, 1, 50, 49, 1}, // the shorter of one token is kept
	} {
		k1, k2 := LongestFirst(c.n1, c.n2, c.room)
		if k1 != c.k1 || k2 != c.k2 {
			t.Errorf("LongestFirst(%d, %d, %d) = %d, %d; want %d, %d", c.n1, c.n2, c.room, k1, k2, c.k1, c.k2)
		}
	}
}

// TestEncodePairShapes checks the pair forms of RoBERTa (RobertaProcessing:
// <s> A </s> </s> B </s>, type ids all 0, with or without special tokens),
// XLM-R (its template, the same ids) and BertProcessing against the single
// encodings of the two texts.
func TestEncodePairShapes(t *testing.T) {
	a, b := "what is the query?", "A TPU is a matrix processor."
	for _, c := range []struct {
		dir            string
		cls, sep       int
		roberta        bool
		plainTypesOfB1 bool // without special tokens, B has type id 1
	}{
		{"roberta-tiny", 0, 2, true, false},
		{"xlmr-tiny", 0, 2, true, false},
		{"bert-processing", 2, 3, false, true},
		{"bert-pair", 2, 3, false, true},
	} {
		tk := loadCached(t, filepath.Join("testdata", "tokenizers", c.dir, "tokenizer.json"))
		ea, _ := tk.Encode(a, false)
		eb, _ := tk.Encode(b, false)
		var wantIDs, wantTypes []int
		if c.roberta {
			wantIDs = slices.Concat([]int{c.cls}, ea, []int{c.sep, c.sep}, eb, []int{c.sep})
			wantTypes = make([]int, len(wantIDs))
		} else {
			wantIDs = slices.Concat([]int{c.cls}, ea, []int{c.sep}, eb, []int{c.sep})
			wantTypes = slices.Concat(make([]int, len(ea)+2), filled(len(eb)+1, 1))
		}
		ids, types, err := tk.EncodePair(a, b, true)
		if err != nil || !slices.Equal(ids, wantIDs) || !slices.Equal(types, wantTypes) {
			t.Errorf("%s: EncodePair(true):\n got %v %v %v\nwant %v %v", c.dir, ids, types, err, wantIDs, wantTypes)
		}
		wantTypes = make([]int, len(ea)+len(eb))
		if c.plainTypesOfB1 {
			wantTypes = slices.Concat(make([]int, len(ea)), filled(len(eb), 1))
		}
		ids, types, err = tk.EncodePair(a, b, false)
		if err != nil || !slices.Equal(ids, slices.Concat(ea, eb)) || !slices.Equal(types, wantTypes) {
			t.Errorf("%s: EncodePair(false):\n got %v %v %v\nwant %v %v", c.dir, ids, types, err, slices.Concat(ea, eb), wantTypes)
		}
		want := 3
		if c.roberta {
			want = 4
		}
		if n, err := tk.PairSpecialTokens(); n != want || err != nil {
			t.Errorf("%s: PairSpecialTokens = %d, %v; want %d", c.dir, n, err, want)
		}
		// The single form is unchanged.
		single, _ := tk.Encode(a, true)
		if !slices.Equal(single, slices.Concat([]int{c.cls}, ea, []int{c.sep})) {
			t.Errorf("%s: Encode(true) = %v", c.dir, single)
		}
	}
}

// TestPairTemplates covers template forms the HF vectors cannot: the
// string form, a missing pair, a pair without $B, a post-processor with no
// pair form, and the template add_bos_token/add_eos_token make.
func TestPairTemplates(t *testing.T) {
	const model = `"model": {"type": "WordLevel", "vocab": {"[UNK]": 0, "[CLS]": 1, "[SEP]": 2, "x": 3, "y": 4, "z": 5}, "unk_token": "[UNK]"},
		"pre_tokenizer": {"type": "WhitespaceSplit"}`
	parse := func(post string) *Tokenizer {
		t.Helper()
		tk, err := Parse([]byte(`{` + model + `, "post_processor": ` + post + `}`))
		if err != nil {
			t.Fatalf("%s: %v", post, err)
		}
		return tk
	}
	check := func(tk *Tokenizer, what string, add bool, wantIDs, wantTypes []int) {
		t.Helper()
		ids, types, err := tk.EncodePair("x y", "z", add)
		if err != nil || !slices.Equal(ids, wantIDs) || !slices.Equal(types, wantTypes) {
			t.Errorf("%s: got %v %v %v, want %v %v", what, ids, types, err, wantIDs, wantTypes)
		}
	}

	// The string form, read as tokenizers' Piece::try_from: "$B:1" is B with
	// type 1, "$2" is A with type id 2, ":N" sets a special token's type.
	tk := parse(`{"type": "TemplateProcessing", "single": "[CLS] $A [SEP]", "pair": "[CLS] $2 [SEP] $B:1 [SEP]:1",
		"special_tokens": {"[CLS]": {"id": "[CLS]", "ids": [1], "tokens": ["[CLS]"]}, "[SEP]": {"id": "[SEP]", "ids": [2], "tokens": ["[SEP]"]}}}`)
	check(tk, "string template", true, []int{1, 3, 4, 2, 5, 2}, []int{0, 2, 2, 0, 1, 1})
	check(tk, "string template, no special tokens", false, []int{3, 4, 5}, []int{2, 2, 1})
	if ids, _ := tk.Encode("x", true); !slices.Equal(ids, []int{1, 3, 2}) {
		t.Errorf("string template single: %v", ids)
	}

	// $B before $A, a special token of two ids (the special_tokens entry),
	// one found in the vocabulary only.
	tk = parse(`{"type": "TemplateProcessing", "single": [{"Sequence": {"id": "A", "type_id": 0}}],
		"pair": [{"Sequence": {"id": "B", "type_id": 1}}, {"SpecialToken": {"id": "two", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}, {"SpecialToken": {"id": "[SEP]", "type_id": 1}}],
		"special_tokens": {"two": {"id": "two", "ids": [1, 2], "tokens": ["[CLS]", "[SEP]"]}}}`)
	check(tk, "B first", true, []int{5, 1, 2, 3, 4, 2}, []int{1, 0, 0, 0, 0, 1})
	if n, _ := tk.PairSpecialTokens(); n != 3 {
		t.Errorf("B first: PairSpecialTokens %d, want 3", n)
	}

	// No pair template, or one without $B: loading works, pairs fail (an
	// ErrUnsupported but for a pair template that cannot be read).
	for _, c := range []struct {
		what, post  string
		unsupported bool
	}{
		{"no pair", `{"type": "TemplateProcessing", "single": "[CLS] $A [SEP]"}`, true},
		{"null pair", `{"type": "TemplateProcessing", "single": "[CLS] $A [SEP]", "pair": null}`, true},
		{"no $B", `{"type": "TemplateProcessing", "single": "[CLS] $A [SEP]", "pair": "[CLS] $A [SEP] [SEP]"}`, true},
		{"in a sequence", `{"type": "Sequence", "processors": [{"type": "ByteLevel"}, {"type": "TemplateProcessing", "single": "[CLS] $A [SEP]"}]}`, true},
		{"unknown token", `{"type": "TemplateProcessing", "single": "[CLS] $A [SEP]", "pair": "[CLS] $A <nope> $B"}`, false},
		{"bad piece", `{"type": "TemplateProcessing", "single": "[CLS] $A [SEP]", "pair": "[CLS] $A $C $B"}`, false},
	} {
		tk := parse(c.post)
		if ids, _ := tk.Encode("x", true); !slices.Equal(ids, []int{1, 3, 2}) {
			t.Errorf("%s: single %v", c.what, ids)
		}
		if tk.HasPairTemplate() {
			t.Errorf("%s: HasPairTemplate true", c.what)
		}
		for _, add := range []bool{true, false} {
			_, _, err := tk.EncodePair("x", "y", add)
			if err == nil || c.unsupported != errors.Is(err, errs.ErrUnsupported) {
				t.Errorf("%s: EncodePair(add %v) error %v", c.what, add, err)
			}
		}
		if _, _, err := tk.EncodePairTruncated("x", "y", 10); err == nil {
			t.Errorf("%s: EncodePairTruncated: no error", c.what)
		}
		if _, err := tk.PairSpecialTokens(); err == nil {
			t.Errorf("%s: PairSpecialTokens: no error", c.what)
		}
	}

	// No post-processor, or ByteLevel only: tokenizers' default, A then B
	// with type ids 0 and 1, no special tokens; no pair form to use.
	for _, post := range []string{`null`, `{"type": "ByteLevel"}`, `{"type": "Sequence", "processors": [{"type": "ByteLevel"}]}`} {
		tk := parse(post)
		if tk.HasPairTemplate() {
			t.Errorf("%s: HasPairTemplate true", post)
		}
		check(tk, post, true, []int{3, 4, 5}, []int{0, 0, 1})
		check(tk, post, false, []int{3, 4, 5}, []int{0, 0, 1})
		ids, types, err := tk.EncodePairTruncated("x y z x", "y", 3)
		if err != nil || !slices.Equal(ids, []int{3, 4, 4}) || !slices.Equal(types, []int{0, 0, 1}) {
			t.Errorf("%s: truncated %v %v %v", post, ids, types, err)
		}
	}

	// A Sequence with a template: the template's pair form.
	tk = parse(`{"type": "Sequence", "processors": [{"type": "ByteLevel"}, {"type": "BertProcessing", "sep": ["[SEP]", 2], "cls": ["[CLS]", 1]}]}`)
	check(tk, "Sequence[ByteLevel, BertProcessing]", true, []int{1, 3, 4, 2, 5, 2}, []int{0, 0, 0, 0, 1, 1})
	if !tk.HasPairTemplate() {
		t.Error("Sequence[ByteLevel, BertProcessing]: HasPairTemplate false")
	}
}

// TestPairFromAddBOSEOS: the template transformers' update_post_processor
// writes for add_bos_token/add_eos_token has a pair form, "<s>:0 $A:0
// </s>:0 <s>:1 $B:1 </s>:1" with the tokens it adds.
func TestPairFromAddBOSEOS(t *testing.T) {
	dir := t.TempDir()
	src, err := os.ReadFile(filepath.Join("testdata", "tokenizers", "llama2", "tokenizer.json.gz"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tokenizer.json.gz"), src, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		cfg           string
		before, after []int
	}{
		{`{"bos_token": "<s>", "eos_token": "</s>", "add_bos_token": true, "add_eos_token": true}`, []int{1}, []int{2}},
		{`{"bos_token": "<s>", "eos_token": "</s>", "add_bos_token": false, "add_eos_token": true}`, nil, []int{2}},
		{`{"bos_token": "<s>", "eos_token": "</s>", "add_bos_token": true, "add_eos_token": false}`, []int{1}, nil},
	} {
		if err := os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), []byte(c.cfg), 0o644); err != nil {
			t.Fatal(err)
		}
		tk, err := LoadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		ea, _ := tk.Encode("Hello", false)
		eb, _ := tk.Encode("world", false)
		wantIDs := slices.Concat(c.before, ea, c.after, c.before, eb, c.after)
		wantTypes := slices.Concat(make([]int, len(c.before)+len(ea)+len(c.after)), filled(len(c.before)+len(eb)+len(c.after), 1))
		ids, types, err := tk.EncodePair("Hello", "world", true)
		if err != nil || !slices.Equal(ids, wantIDs) || !slices.Equal(types, wantTypes) {
			t.Errorf("%s:\n got %v %v %v\nwant %v %v", c.cfg, ids, types, err, wantIDs, wantTypes)
		}
		if !tk.HasPairTemplate() {
			t.Errorf("%s: HasPairTemplate false", c.cfg)
		}
	}
}

// TestPairEncoder: one PairEncoder's pairs with several second texts,
// in any order and repeated, are EncodePairTruncated's of each, whether
// the pair fits or is cut: a pair, cut or not, leaves the encoder as it
// found it.
func TestPairEncoder(t *testing.T) {
	tk := bertPair(t, "bert-pair")
	query := "what is the query"
	docs := []string{"the document is a text of the model", "a query", "", "the model of the text", "a query and a document", "a query"}
	for _, maxLen := range []int{40, 14, 9, 7} {
		p, err := tk.NewPairEncoder(query, maxLen)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range docs {
			ids, types, err := p.Encode(d)
			wantIDs, wantTypes, wantErr := tk.EncodePairTruncated(query, d, maxLen)
			if (err == nil) != (wantErr == nil) {
				t.Fatalf("maxLen %d, %q: error %v, want %v", maxLen, d, err, wantErr)
			}
			if !slices.Equal(ids, wantIDs) || !slices.Equal(types, wantTypes) {
				t.Errorf("maxLen %d, %q: %v %v, want %v %v", maxLen, d, ids, types, wantIDs, wantTypes)
			}
		}
	}
}
