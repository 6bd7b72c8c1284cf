package tokenizer

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/dlclark/regexp2/v2"
	"golang.org/x/text/unicode/norm"

	"github.com/tputool/tputool/internal/errs"
)

// tiktokenCorpus trains the test's ranks: English with contractions and
// capitals, Chinese, accented and combining letters, Cyrillic, digits,
// punctuation and whitespace runs.
const tiktokenCorpus = `The quick brown fox jumps over the lazy dog. It's the dog's day; they'll see, we've won, I'm here, you'd go.
HELLO World, HeLLo again: 12345 apples, 67 pears and 8901234 plums!   Spaces   and	tabs
	and newlines.

你好世界，今天天气很好。我们在学习机器学习和深度学习。中文分词测试。
café naïve résumé coöperate déjà vu — “quotes” and ‘single’ — e` + "\u0301" + `t a` + "\u0308" + `
Привет мир, как дела? Всё хорошо.  ΑΒΓ αβγ Ωmega.
function main() { return x + y * 2; } // comment
    indented line with trailing spaces    
The the THE tHe. Don'T WON'T Can'T.
`

// trainRanks learns merges over the corpus as a BPE trainer would: the
// 256 bytes first, in a shuffled order so that a rank is never its byte,
// then the most frequent adjacent pair within the pattern's pieces, n
// times.
func trainRanks(t *testing.T, pattern string, n int) [][]byte {
	t.Helper()
	rng := rand.New(rand.NewPCG(1, 2))
	var byRank [][]byte
	for _, b := range rng.Perm(256) {
		byRank = append(byRank, []byte{byte(b)})
	}
	words := map[string]int{}
	for _, p := range refSplit(t, pattern, tiktokenCorpus) {
		words[p]++
	}
	type word struct {
		parts []string
		count int
	}
	var ws []*word
	for w, c := range words {
		var parts []string
		for i := 0; i < len(w); i++ {
			parts = append(parts, w[i:i+1])
		}
		ws = append(ws, &word{parts, c})
	}
	for range n {
		pairs := map[[2]string]int{}
		for _, w := range ws {
			for i := 0; i+1 < len(w.parts); i++ {
				pairs[[2]string{w.parts[i], w.parts[i+1]}] += w.count
			}
		}
		var best [2]string
		bestN := 0
		for p, c := range pairs {
			if c > bestN || c == bestN && p[0]+"\x00"+p[1] < best[0]+"\x00"+best[1] {
				best, bestN = p, c
			}
		}
		if bestN < 2 {
			break
		}
		merged := best[0] + best[1]
		byRank = append(byRank, []byte(merged))
		for _, w := range ws {
			var out []string
			for i := 0; i < len(w.parts); i++ {
				if i+1 < len(w.parts) && w.parts[i] == best[0] && w.parts[i+1] == best[1] {
					out = append(out, merged)
					i++
				} else {
					out = append(out, w.parts[i])
				}
			}
			w.parts = out
		}
	}
	return byRank
}

// refSplit is the pattern's pieces of s by regexp2 itself.
func refSplit(t *testing.T, pattern, s string) []string {
	t.Helper()
	// regexp2 writes fancy-regex's class intersection with a negated
	// class as a subtraction.
	re, err := regexp2.Compile(strings.ReplaceAll(pattern, `&&[^\p{Han}]`, `-[\p{Han}]`), regexp2.Multiline)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	m, err := re.FindStringMatch(s)
	for ; m != nil && err == nil; m, err = re.FindNextMatch(m) {
		out = append(out, m.String())
	}
	if err != nil {
		t.Fatal(err)
	}
	// Every character is in some piece: the patterns end with \s+ and
	// cover the rest, so the pieces rebuild s.
	if strings.Join(out, "") != s {
		t.Fatalf("pieces of %q do not rebuild it: %q", s, out)
	}
	return out
}

// refTiktoken is tiktoken's encoding written out plainly: split on the
// special tokens (leftmost first), split the rest with the pattern, and
// merge each piece's bytes, the lowest-ranked adjacent pair first and the
// leftmost of equal ones, after looking the whole piece up.
func refTiktoken(t *testing.T, pattern string, byRank [][]byte, specials map[string]int, text string) []int {
	t.Helper()
	ranks := map[string]int{}
	for r, tok := range byRank {
		ranks[string(tok)] = r
	}
	var ids []int
	for text != "" {
		at, name := len(text), ""
		for s := range specials {
			if i := strings.Index(text, s); i >= 0 && (i < at || i == at && len(s) > len(name)) {
				at, name = i, s
			}
		}
		for _, p := range refSplit0(t, pattern, text[:at]) {
			if r, ok := ranks[p]; ok {
				ids = append(ids, r)
				continue
			}
			var parts []string
			for i := 0; i < len(p); i++ {
				parts = append(parts, p[i:i+1])
			}
			for {
				best, bestR := -1, 0
				for i := 0; i+1 < len(parts); i++ {
					if r, ok := ranks[parts[i]+parts[i+1]]; ok && (best < 0 || r < bestR) {
						best, bestR = i, r
					}
				}
				if best < 0 {
					break
				}
				parts = slices.Replace(parts, best, best+2, parts[best]+parts[best+1])
			}
			for _, q := range parts {
				ids = append(ids, ranks[q])
			}
		}
		if name == "" {
			break
		}
		ids = append(ids, specials[name])
		text = text[at+len(name):]
	}
	return ids
}

func refSplit0(t *testing.T, pattern, s string) []string {
	if s == "" {
		return nil
	}
	return refSplit(t, pattern, s)
}

// writeRanks writes a ranks file as tiktoken's load_tiktoken_bpe reads it.
func writeRanks(t *testing.T, path string, byRank [][]byte) {
	t.Helper()
	var b strings.Builder
	for r, tok := range byRank {
		fmt.Fprintf(&b, "%s %d\n", base64.StdEncoding.EncodeToString(tok), r)
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

func writeJSONFile(t *testing.T, path string, v any) {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// kimiDir writes a Kimi-style tokenizer: tiktoken.model and the
// tokenizer_config.json Moonlight ships (auto_map to TikTokenTokenizer,
// added_tokens_decoder naming some of the reserved ids).
func kimiDir(t *testing.T, byRank [][]byte) string {
	dir := t.TempDir()
	writeRanks(t, filepath.Join(dir, "tiktoken.model"), byRank)
	base := len(byRank)
	added := map[string]any{}
	for i, name := range []string{"[BOS]", "[EOS]", "<|im_end|>", "<|im_user|>", "<|im_assistant|>"} {
		added[fmt.Sprint(base+i)] = map[string]any{"content": name, "special": true, "normalized": false}
	}
	added[fmt.Sprint(base+255)] = map[string]any{"content": "[UNK]", "special": true}
	added[fmt.Sprint(base+256)] = map[string]any{"content": "[PAD]", "special": true}
	writeJSONFile(t, filepath.Join(dir, "tokenizer_config.json"), map[string]any{
		"auto_map":             map[string]any{"AutoTokenizer": []any{"tokenization_moonshot.TikTokenTokenizer", nil}},
		"added_tokens_decoder": added,
		"bos_token":            "[BOS]",
		"eos_token":            "[EOS]",
		"pad_token":            "[PAD]",
		"unk_token":            "[UNK]",
		"chat_template":        "{% for m in messages %}<|im_user|>{{ m.content }}<|im_end|>{% endfor %}",
	})
	return dir
}

// tiktokenTexts are random texts over the corpus's kinds of characters,
// with special tokens among them.
func tiktokenTexts(specials []string, n int) []string {
	atoms := []string{"the", "The", "THE", " ", "  ", "\t", "\n", "\r\n", "\n\n", "'s", "'T", "'ll", "dog", "你好", "世界", "学习", "，", "。",
		"café", "e\u0301", "a\u0308", "Ω", "αβγ", "Привет", "1", "12", "1234567", "!", "...", "“", "—", "{", "}", "x+y", "ÀB", "aB", "Ab", " 你", "\u00a0", "\u3000", "\x1c"}
	atoms = append(atoms, specials...)
	rng := rand.New(rand.NewPCG(3, 4))
	out := make([]string, n)
	for i := range out {
		var b strings.Builder
		for range 1 + rng.IntN(24) {
			b.WriteString(atoms[rng.IntN(len(atoms))])
		}
		out[i] = b.String()
	}
	return out
}

// TestTiktokenKimi loads a Kimi tokenizer from a ranks file and checks it
// against the plain tiktoken encoding on the corpus and random texts.
func TestTiktokenKimi(t *testing.T) {
	byRank := trainRanks(t, kimiPattern, 400)
	dir := kimiDir(t, byRank)
	tok, err := LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	base := len(byRank)
	specials := map[string]int{}
	for i := range kimiSpecials {
		specials[fmt.Sprintf("<|reserved_token_%d|>", base+i)] = base + i
	}
	for i, name := range []string{"[BOS]", "[EOS]", "<|im_end|>", "<|im_user|>", "<|im_assistant|>"} {
		delete(specials, fmt.Sprintf("<|reserved_token_%d|>", base+i))
		specials[name] = base + i
	}
	delete(specials, fmt.Sprintf("<|reserved_token_%d|>", base+255))
	delete(specials, fmt.Sprintf("<|reserved_token_%d|>", base+256))
	specials["[UNK]"], specials["[PAD]"] = base+255, base+256
	if got := tok.VocabSize(); got != base+kimiSpecials {
		t.Errorf("VocabSize = %d, want %d", got, base+kimiSpecials)
	}
	if id, ok := tok.BOS(); !ok || id != base {
		t.Errorf("BOS = %d, %v; want %d", id, ok, base)
	}
	if id, ok := tok.EOS(); !ok || id != base+1 {
		t.Errorf("EOS = %d, %v; want %d", id, ok, base+1)
	}
	if id, ok := tok.Pad(); !ok || id != base+256 {
		t.Errorf("Pad = %d, %v; want %d", id, ok, base+256)
	}
	if _, err := tok.ChatTemplate(""); err != nil {
		t.Errorf("chat template: %v", err)
	}
	names := []string{"[BOS]", "<|im_end|>", "<|im_user|>", fmt.Sprintf("<|reserved_token_%d|>", base+7)}
	texts := append(strings.Split(tiktokenCorpus, "\n"), tiktokenCorpus)
	texts = append(texts, tiktokenTexts(names, 400)...)
	merged := 0
	for _, text := range texts {
		want := refTiktoken(t, kimiPattern, byRank, specials, text)
		got, err := tok.Encode(text, true)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("Encode(%q)\n got %v\nwant %v", text, got, want)
		}
		if dec := tok.Decode(got, false); dec != text {
			t.Fatalf("Decode(Encode(%q)) = %q", text, dec)
		}
		for _, id := range got {
			if id >= 256 && id < base {
				merged++
			}
		}
	}
	if merged < 1000 {
		t.Errorf("only %d merged tokens in the encodings: the test does not exercise the merges", merged)
	}
	// Skipping special tokens drops the named and the reserved ones.
	ids, _ := tok.Encode("[BOS]hi<|im_end|><|reserved_token_"+fmt.Sprint(base+9)+"|>", false)
	if got := tok.Decode(ids, true); got != "hi" {
		t.Errorf("Decode(skip specials) = %q, want \"hi\"", got)
	}
}

// TestKimiPattern checks the Kimi pattern's pieces, as tiktoken's
// fancy-regex splits them, through the tokenizer's own matcher.
func TestKimiPattern(t *testing.T) {
	m, err := compileRegex(kimiPattern, "test")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		in   string
		want []string
	}{
		// Ideographs are never in a letter run: the intersection leaves
		// them out.
		{"Hello世界abc", []string{"Hello", "世界", "abc"}},
		{"你好，世界", []string{"你好", "，", "世界"}},
		{" 你好", []string{" ", "你好"}},
		// Capitals then lower case, with a contraction; all capitals.
		{"HeLLo WORLD's", []string{"He", "LLo", " WORLD's"}},
		{"I'm you'LL", []string{"I'm", " you'LL"}},
		{"12345 x", []string{"123", "45", " x"}},
		{"e\u0301t", []string{"e\u0301t"}},
		{"a  \n\n b", []string{"a", "  \n\n", " b"}},
	} {
		var got []string
		if err := m.findAll(c.in, func(s, e int) { got = append(got, c.in[s:e]) }); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("%q: pieces %q, want %q", c.in, got, c.want)
		}
	}
}

// TestKimiChunks checks the cut of long texts against
// _split_whitespaces_or_nonwhitespaces, and that a long text encodes as
// its parts do one by one.
func TestKimiChunks(t *testing.T) {
	if kimiChunks(strings.Repeat("a", kimiMaxRun)) != nil {
		t.Error("a text of 25,000 bytes is cut")
	}
	long := strings.Repeat("ab", kimiMaxRun/2) + "cd" + strings.Repeat(" ", kimiMaxRun+3) + "é" + strings.Repeat("x", 2*kimiMaxRun+1)
	got := kimiChunks(long)
	want := []string{
		strings.Repeat("ab", kimiMaxRun/2),
		"cd" + strings.Repeat(" ", kimiMaxRun),
		"   é" + strings.Repeat("x", kimiMaxRun-1),
		strings.Repeat("x", kimiMaxRun),
		"xx",
	}
	if !slices.Equal(got, want) {
		var gl, wl []int
		for _, s := range got {
			gl = append(gl, len(s))
		}
		for _, s := range want {
			wl = append(wl, len(s))
		}
		t.Fatalf("chunk lengths %v, want %v", gl, wl)
	}
	// 400,000 characters a slice: a cut there even within a run.
	big := strings.Repeat("é ", kimiMaxChars/2+10)
	parts := kimiChunks(big)
	if len(parts) != 2 || utf8Count(parts[0]) != kimiMaxChars || parts[0]+parts[1] != big {
		t.Fatalf("a text of %d characters cut in %d parts", utf8Count(big), len(parts))
	}
	byRank := trainRanks(t, kimiPattern, 100)
	tok, err := LoadDir(kimiDir(t, byRank))
	if err != nil {
		t.Fatal(err)
	}
	ids, err := tok.Encode(long, false)
	if err != nil {
		t.Fatal(err)
	}
	var joined []int
	for _, p := range want {
		one, _ := tok.Encode(p, false)
		joined = append(joined, one...)
	}
	if !slices.Equal(ids, joined) {
		t.Error("a long text does not encode as its parts")
	}
	// The runs count between special tokens, as transformers' tokenize
	// encodes each piece between them: 20,000 + the token + 20,000 is
	// not cut.
	half := strings.Repeat("x", 20_000)
	base := len(byRank)
	wantIDs := append(append(mustEncode(t, tok, half), base+2), mustEncode(t, tok, half)...)
	if got := mustEncode(t, tok, half+"<|im_end|>"+half); !slices.Equal(got, wantIDs) {
		t.Error("a run is cut across a special token")
	}
}

func utf8Count(s string) int { return len([]rune(s)) }

// TestTiktokenHunYuan loads HYTokenizer's hy.tiktoken: ranks by line with
// a repeated token skipped, the text in NFC, its 210 special tokens.
func TestTiktokenHunYuan(t *testing.T) {
	byRank := trainRanks(t, patternQwen2, 300)
	// HYTokenizer's files hold 127,957 tokens: fill with tokens of byte
	// 0xff, which no UTF-8 text holds.
	for i := 0; len(byRank) < hySpecialStart; i++ {
		byRank = append(byRank, []byte{0xff, byte(i >> 16), byte(i >> 8), byte(i)})
	}
	dir := t.TempDir()
	// The file's own rank column is ignored: write it wrong, and repeat a
	// token, which HYTokenizer skips.
	var b strings.Builder
	for r, tok := range byRank {
		fmt.Fprintf(&b, "%s %d\n", base64.StdEncoding.EncodeToString(tok), 7*r+1)
		if r == 300 {
			fmt.Fprintf(&b, "%s 0\n", base64.StdEncoding.EncodeToString(byRank[5]))
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "hy.tiktoken"), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	writeJSONFile(t, filepath.Join(dir, "tokenizer_config.json"), map[string]any{
		"tokenizer_class": "HYTokenizer",
		"auto_map":        map[string]any{"AutoTokenizer": []any{"tokenization_hy.HYTokenizer", nil}},
	})
	tok, err := LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	base := len(byRank)
	specials := map[string]int{}
	for i, s := range hySpecials {
		specials[s] = base + i
	}
	if got := tok.VocabSize(); got != base+210 {
		t.Errorf("VocabSize = %d, want %d", got, base+210)
	}
	for name, want := range map[string]int{"bos": base + 2, "eos": base + 3, "pad": base + 4} {
		var id int
		var ok bool
		switch name {
		case "bos":
			id, ok = tok.BOS()
		case "eos":
			id, ok = tok.EOS()
		case "pad":
			id, ok = tok.Pad()
		}
		if !ok || id != want {
			t.Errorf("%s = %d, %v; want %d", name, id, ok, want)
		}
	}
	texts := append(strings.Split(tiktokenCorpus, "\n"), tiktokenTexts([]string{"<|startoftext|>", "<|extra_4|>", "<|eos|>"}, 300)...)
	for _, text := range texts {
		want := refTiktoken(t, patternQwen2, byRank, specials, norm.NFC.String(text))
		got, err := tok.Encode(text, true)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("Encode(%q)\n got %v\nwant %v", text, got, want)
		}
	}
	// NFC: a decomposed é encodes as the composed one; the whole text is
	// normalized before the special tokens are found, so a combining
	// long solidus after one makes its > a ≯.
	a, _ := tok.Encode("cafe\u0301", false)
	c, _ := tok.Encode("café", false)
	if !slices.Equal(a, c) {
		t.Errorf("NFC: %v and %v", a, c)
	}
	text := "<|eos|>\u0338"
	if got, want := mustEncode(t, tok, text), refTiktoken(t, patternQwen2, byRank, specials, norm.NFC.String(text)); !slices.Equal(got, want) || slices.Contains(got, base+3) {
		t.Errorf("Encode(%q) = %v, want %v (no <|eos|>)", text, got, want)
	}
	// Another size is refused, as the class's assert refuses it.
	var short strings.Builder
	for _, tok := range byRank[:hySpecialStart-1] {
		fmt.Fprintf(&short, "%s 0\n", base64.StdEncoding.EncodeToString(tok))
	}
	if err := os.WriteFile(filepath.Join(dir, "hy.tiktoken"), []byte(short.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadDir(dir); err == nil || !strings.Contains(err.Error(), "127956 tokens") {
		t.Errorf("a file of 127,956 tokens: %v", err)
	}
}

// TestTiktokenQwen loads Qwen 1's qwen.tiktoken: the file's own ranks
// (two of its lines swapped), the text in NFC, its 208 special
// tokens from id 151,643, <|endoftext|> the end of text and no BOS.
func TestTiktokenQwen(t *testing.T) {
	byRank := trainRanks(t, patternQwen2, 300)
	for i := 0; len(byRank) < qwenSpecialStart; i++ { // tokens of byte 0xff, which no UTF-8 text holds
		byRank = append(byRank, []byte{0xfe, byte(i >> 16), byte(i >> 8), byte(i)})
	}
	dir := t.TempDir()
	var b strings.Builder
	for r := range byRank { // the rank column, not the line, numbers a token: two lines swapped
		q := r
		switch r {
		case 280:
			q = 281
		case 281:
			q = 280
		}
		fmt.Fprintf(&b, "%s %d\n", base64.StdEncoding.EncodeToString(byRank[q]), q)
	}
	if err := os.WriteFile(filepath.Join(dir, "qwen.tiktoken"), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	writeJSONFile(t, filepath.Join(dir, "tokenizer_config.json"), map[string]any{
		"model_max_length": 8192,
		"auto_map":         map[string]any{"AutoTokenizer": []any{"tokenization_qwen.QWenTokenizer", nil}},
	})
	tok, err := LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	base := len(byRank)
	specials := map[string]int{}
	for i, s := range qwenSpecials {
		specials[s] = base + i
	}
	if got := tok.VocabSize(); got != base+208 {
		t.Errorf("VocabSize = %d, want %d", got, base+208)
	}
	if id, ok := tok.EOS(); !ok || id != base {
		t.Errorf("EOS = %d, %v; want %d", id, ok, base)
	}
	if id, ok := tok.BOS(); ok {
		t.Errorf("BOS = %d; QWenTokenizer has none", id)
	}
	texts := append(strings.Split(tiktokenCorpus, "\n"), tiktokenTexts([]string{"<|im_start|>", "<|im_end|>", "<|extra_204|>", "<|endoftext|>"}, 300)...)
	for _, text := range texts {
		want := refTiktoken(t, patternQwen2, byRank, specials, norm.NFC.String(text))
		got, err := tok.Encode(text, true)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("Encode(%q)\n got %v\nwant %v", text, got, want)
		}
	}
	if got := mustEncode(t, tok, "<|im_start|>user\nhi<|im_end|>"); got[0] != base+1 || got[len(got)-1] != base+2 {
		t.Errorf("ChatML markers: %v", got)
	}
	// Another size is refused.
	var short strings.Builder
	for r, tok := range byRank[:qwenSpecialStart-1] {
		fmt.Fprintf(&short, "%s %d\n", base64.StdEncoding.EncodeToString(tok), r)
	}
	if err := os.WriteFile(filepath.Join(dir, "qwen.tiktoken"), []byte(short.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadDir(dir); err == nil || !strings.Contains(err.Error(), "151642 tokens") {
		t.Errorf("a file of 151,642 tokens: %v", err)
	}
}

func mustEncode(t *testing.T, tok *Tokenizer, text string) []int {
	t.Helper()
	ids, err := tok.Encode(text, false)
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// TestTiktokenRandomRanks holds the merges to tiktoken's on vocabularies
// a trainer would not make: tokens over a, b and c whose ranks are
// shuffled (a token may rank before its parts, split two ways, or have
// halves that are not tokens), on random texts of those letters.
func TestTiktokenRandomRanks(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for seed := range 60 {
		var multi []string
		var grow func(s string)
		grow = func(s string) {
			if len(s) >= 2 && rng.IntN(3) > 0 {
				multi = append(multi, s)
			}
			if len(s) < 5 {
				for _, c := range "abc" {
					grow(s + string(c))
				}
			}
		}
		grow("")
		var byRank [][]byte
		for b := range 256 {
			byRank = append(byRank, []byte{byte(b)})
		}
		for _, m := range multi {
			byRank = append(byRank, []byte(m))
		}
		rng.Shuffle(len(byRank), func(i, j int) { byRank[i], byRank[j] = byRank[j], byRank[i] })
		tok, err := LoadDir(kimiDir(t, byRank))
		if err != nil {
			t.Fatal(err)
		}
		for range 40 {
			var b strings.Builder
			for range 1 + rng.IntN(12) {
				b.WriteByte("abc"[rng.IntN(3)])
			}
			text := b.String()
			if got, want := mustEncode(t, tok, text), refTiktoken(t, kimiPattern, byRank, nil, text); !slices.Equal(got, want) {
				t.Fatalf("seed %d: Encode(%q) = %v, want %v", seed, text, got, want)
			}
		}
	}
}

// TestTiktokenErrors: a broken ranks file or an unknown class fails,
// naming the file.
func TestTiktokenErrors(t *testing.T) {
	byRank := trainRanks(t, kimiPattern, 20)
	good := func() string { return kimiDir(t, byRank) }
	write := func(dir, name, content string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ranksText := func(drop int) string {
		var b strings.Builder
		for r, tok := range byRank {
			if r != drop {
				fmt.Fprintf(&b, "%s %d\n", base64.StdEncoding.EncodeToString(tok), r)
			}
		}
		return b.String()
	}
	cases := map[string]struct {
		edit func(dir string)
		want string
	}{
		"bad base64":     {func(d string) { write(d, "tiktoken.model", "!!! 0\n") }, "line 1: token"},
		"one field":      {func(d string) { write(d, "tiktoken.model", "QQ==\n") }, "expected \"base64-token rank\""},
		"bad rank":       {func(d string) { write(d, "tiktoken.model", "QQ== x\n") }, "rank \"x\""},
		"missing byte":   {func(d string) { write(d, "tiktoken.model", ranksText(3)) }, "has no token"},
		"repeated token": {func(d string) { write(d, "tiktoken.model", ranksText(-1)+"QQ== 999\n") }, "repeats line"},
		"repeated rank": {func(d string) {
			write(d, "tiktoken.model", ranksText(-1)+base64.StdEncoding.EncodeToString([]byte("zzq"))+" 5\n")
		}, "rank 5 is also"},
		"sparse ranks": {func(d string) { write(d, "tiktoken.model", ranksText(-1)+"enpx 9999999\n") }, "nearly"},
		"long tokens": {func(d string) { // Σ length² past the bound: refused at once, not indexed for minutes
			var b strings.Builder
			b.WriteString(ranksText(-1))
			for k := 2; k <= 1500; k++ {
				fmt.Fprintf(&b, "%s %d\n", base64.StdEncoding.EncodeToString([]byte(strings.Repeat("\x01", k))), len(byRank)+k)
			}
			write(d, "tiktoken.model", b.String())
		}, "too long in all"},
		"unknown class": {func(d string) {
			writeJSONFile(t, filepath.Join(d, "tokenizer_config.json"), map[string]any{"tokenizer_class": "QWenTokenizer"})
		}, `tokenizer class is "QWenTokenizer"`},
		"no config": {func(d string) { os.Remove(filepath.Join(d, "tokenizer_config.json")) }, "without a"},
		"no class": {func(d string) {
			writeJSONFile(t, filepath.Join(d, "tokenizer_config.json"), map[string]any{"bos_token": "<s>"})
		}, "names no tokenizer_class"},
		"bos not a token": {func(d string) {
			writeJSONFile(t, filepath.Join(d, "tokenizer_config.json"), map[string]any{"tokenizer_class": "TikTokenTokenizer", "bos_token": "<s>"})
		}, `"<s>" is not in the vocabulary`},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			dir := good()
			c.edit(dir)
			_, err := LoadDir(dir)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want it to contain %q", err, c.want)
			}
			if name == "unknown class" && !errors.Is(err, errs.ErrUnsupported) {
				t.Errorf("an unknown class is not ErrUnsupported: %v", err)
			}
			if !strings.Contains(err.Error(), dir) {
				t.Errorf("the error does not name the folder: %v", err)
			}
		})
	}
	// Neither tokenizer.json nor a ranks file: the message lists both.
	_, err := LoadDir(t.TempDir())
	if err == nil || !strings.Contains(err.Error(), "tiktoken.model (TikTokenTokenizer)") {
		t.Errorf("no tokenizer: %v", err)
	}
}
