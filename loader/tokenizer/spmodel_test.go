package tokenizer

import (
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// spVector is one entry of testdata/spm/NAME/vectors.json, written by
// scripts/tokenizer-gen-spm.py from SentencePiece itself.
type spVector struct {
	Input      string `json:"input"`
	IDs        []int  `json:"ids"`
	IDsSpecial []int  `json:"ids_special"`
	Decode     string `json:"decode"`
}

// TestSPModelVectors loads each folder of testdata/spm (a SentencePiece
// model and maybe a tokenizer_config.json, no tokenizer.json) and checks
// its ids against SentencePiece's, with and without BOS/EOS, and its
// decoding of texts without added tokens against SentencePiece's decode.
func TestSPModelVectors(t *testing.T) {
	dirs, err := filepath.Glob(filepath.Join("testdata", "spm", "*"))
	if err != nil || len(dirs) < 5 {
		t.Fatalf("testdata/spm: %v, %d folders", err, len(dirs))
	}
	for _, dir := range dirs {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			tk, err := LoadDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			data, err := os.ReadFile(filepath.Join(dir, "vectors.json"))
			if err != nil {
				t.Fatal(err)
			}
			var vecs []spVector
			if err := json.Unmarshal(data, &vecs); err != nil {
				t.Fatal(err)
			}
			for _, v := range vecs {
				got, err := tk.Encode(v.Input, false)
				if err != nil {
					t.Fatalf("encode %q: %v", v.Input, err)
				}
				if !slices.Equal(got, v.IDs) && len(got)+len(v.IDs) > 0 {
					t.Errorf("encode %q:\n got %v\nwant %v", v.Input, got, v.IDs)
				}
				got, err = tk.Encode(v.Input, true)
				if err != nil {
					t.Fatalf("encode %q: %v", v.Input, err)
				}
				if !slices.Equal(got, v.IDsSpecial) {
					t.Errorf("encode %q with special tokens:\n got %v\nwant %v", v.Input, got, v.IDsSpecial)
				}
				if strings.Contains(v.Input, "<") || slices.Contains(v.IDs, unkID(tk)) {
					// Added tokens decode on their own, where SentencePiece
					// decodes them as text, and unknowns as the unknown
					// piece, where SentencePiece writes " ⁇ ".
					continue
				}
				if dec := tk.Decode(v.IDs, false); dec != v.Decode {
					t.Errorf("decode %v:\n got %q\nwant %q", v.IDs, dec, v.Decode)
				}
			}
		})
	}
}

func unkID(tk *Tokenizer) int {
	id, ok := tk.TokenToID("<unk>")
	if !ok {
		return -1
	}
	return id
}

// pb* write protobuf fields for the hand-made models below.
func pbKey(num, wire int) []byte { return binary.AppendUvarint(nil, uint64(num<<3|wire)) }

func pbBytes(num int, b []byte) []byte {
	return append(binary.AppendUvarint(pbKey(num, 2), uint64(len(b))), b...)
}

func pbVarint(num int, v int64) []byte { return binary.AppendUvarint(pbKey(num, 0), uint64(v)) }

func pbPiece(piece string, score float32, typ int64) []byte {
	var b []byte
	b = append(b, pbBytes(1, []byte(piece))...)
	b = binary.LittleEndian.AppendUint32(append(b, pbKey(2, 5)...), math.Float32bits(score))
	b = append(b, pbVarint(3, typ)...)
	return pbBytes(1, b)
}

// tinySPModel is a BPE model of a few pieces: <unk>, <s>, </s>, ▁, a, b,
// ab, ▁ab.
func tinySPModel(trainer ...[]byte) []byte {
	var b []byte
	for i, p := range []struct {
		s   string
		typ int64
	}{{"<unk>", 2}, {"<s>", 3}, {"</s>", 3}, {"▁", 1}, {"a", 1}, {"b", 1}, {"ab", 1}, {"▁ab", 1}} {
		b = append(b, pbPiece(p.s, -float32(i), p.typ)...)
	}
	spec := pbVarint(3, 2)
	for _, t := range trainer {
		spec = append(spec, t...)
	}
	b = append(b, pbBytes(2, spec)...)
	return append(b, pbBytes(3, append(pbVarint(4, 0), pbVarint(3, 1)...))...)
}

func TestParseSPModel(t *testing.T) {
	m, err := parseSPModel(tinySPModel(pbVarint(43, -1)))
	if err != nil {
		t.Fatal(err)
	}
	if len(m.pieces) != 8 || m.modelType != 2 || m.removeExtraWS || !m.addDummyPrefix || !m.escapeWS || m.pieces[7].piece != "▁ab" || m.pieces[7].score != -7 {
		t.Errorf("parsed %+v", m)
	}
	vocab := map[string]int{}
	for i, p := range m.pieces {
		vocab[p.piece] = i
	}
	// ▁ab scores below ab: "a b" comes first; "<s>" splits into no pieces.
	if got, err := m.spMerges(vocab, spSkipNone); err != nil || !slices.Equal(got, []string{"a b", "▁ ab"}) {
		t.Errorf("merges %q, %v", got, err)
	}
	// Long pieces: their splits' work is bounded, the file named.
	var long []byte
	for i := range 1024 {
		long = append(long, pbPiece(strings.Repeat("x", i+1), -float32(i), 1)...)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "tokenizer.model"), append(tinySPModel(), long...), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadDir(dir); err == nil || !strings.Contains(err.Error(), "lengths squared") || !strings.Contains(err.Error(), "tokenizer.model") {
		t.Errorf("1024 pieces of up to 1024 bytes: %v", err)
	}
	for _, c := range []struct {
		name string
		data []byte
		want string
	}{
		{"empty", nil, "no pieces"},
		{"truncated key", []byte{0x80}, "truncated field key"},
		{"length past the end", []byte{0x0a, 0x7f, 0x01}, "length past the end"},
		{"group", append(tinySPModel(), 0x0b), "wire type 3"},
		{"piece as a varint", pbVarint(1, 3), "pieces (field 1): wire type 0"},
		{"empty piece", pbBytes(1, pbVarint(2, 0)), "piece 0"},
		{"bad type", append(tinySPModel(), pbPiece("c", 0, 9)...), "unknown type 9"},
		{"twice", append(tinySPModel(), pbPiece("ab", 0, 1)...), `"ab" appears twice`},
		{"word model", tinySPModel(pbVarint(3, 3)), "model type 3 (word)"},
		{"suffix", tinySPModel(pbVarint(24, 1)), "treat_whitespace_as_suffix"},
		{"unk out of range", tinySPModel(pbVarint(40, 100)), "unk_id 100"},
		{"unk not unknown", tinySPModel(pbVarint(40, 4)), "unk_id 4"},
		{"long piece", append(tinySPModel(), pbPiece(strings.Repeat("x", 1025), 0, 1)...), "1025 bytes"},
		{"nan score", append(tinySPModel(), pbPiece("c", float32(math.NaN()), 1)...), "score NaN"},
	} {
		if _, err := parseSPModel(c.data); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want %q", c.name, err, c.want)
		}
	}
}

// TestSPModelAddedTokens reads added_tokens.json's and the configs' tokens
// past the model's pieces (a pad token many Llama fine-tunes add), and
// prefers tokenizer.json when a folder has both.
func TestSPModelAddedTokens(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "tokenizer.model"), tinySPModel(), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string]string{
		"tokenizer_config.json": `{"tokenizer_class": "LlamaTokenizer", "pad_token": "<pad>", "add_eos_token": true}`,
		"added_tokens.json":     `{"<pad>": 8}`,
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tk, err := LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	got, err := tk.Encode("ab<pad>b", true)
	if err != nil {
		t.Fatal(err)
	}
	// BOS, ▁ab, <pad>, ▁ b (legacy: a prefix after the added token), EOS.
	if want := []int{1, 7, 8, 3, 5, 2}; !slices.Equal(got, want) {
		t.Errorf("ids %v, want %v", got, want)
	}
	if bos, _ := tk.BOS(); bos != 1 || tk.pad != 8 {
		t.Errorf("bos %d pad %d", bos, tk.pad)
	}
	if dec := tk.Decode([]int{7, 5, 4}, false); dec != "abba" {
		t.Errorf("decode %q", dec)
	}
	// A tiktoken ranks file under the name (Llama 3's original release)
	// is named as such.
	ranks := t.TempDir()
	if err := os.WriteFile(filepath.Join(ranks, "tokenizer.model"), []byte("IQ== 0\nIg== 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadDir(ranks); err == nil || !strings.Contains(err.Error(), "holds tiktoken ranks") {
		t.Errorf("a ranks file named tokenizer.model: %v", err)
	}
	// A tokenizer.json beside it wins, as in transformers.
	data, err := readMaybeGzip(filepath.Join("testdata", "tokenizers", "llama2", "tokenizer.json.gz"), maxFileBytes)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tokenizer.json"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), []byte(`{}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if tk, err = LoadDir(dir); err != nil {
		t.Fatal(err)
	}
	if tk.VocabSize() < 32000 {
		t.Errorf("tokenizer.json not preferred: %d tokens", tk.VocabSize())
	}
}

func FuzzParseSPModel(f *testing.F) {
	f.Add(tinySPModel())
	f.Add(tinySPModel(pbVarint(35, 1)))
	if data, err := readMaybeGzip(filepath.Join("testdata", "spm", "bpe-nobyte", "tokenizer.model.gz"), maxFileBytes); err == nil {
		f.Add(data[:min(len(data), 4096)])
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := parseSPModel(data)
		if err != nil {
			return
		}
		vocab := map[string]int{}
		for i, p := range m.pieces {
			vocab[p.piece] = i
		}
		m.spMerges(vocab, spSkipNone)
		m.spMerges(vocab, spSkipReserved)
	})
}

// TestSPModelLlama2 rebuilds Llama 2's tokenizer.model from its
// tokenizer.json (which transformers made from it): the pieces in id order,
// <unk> unknown, <s> and </s> control, the 256 bytes byte pieces, and as
// scores the rank of each piece's first merge. Read back through
// loadSPModel, its merges must be the tokenizer.json's, in its order, and
// it must encode testdata/vectors/llama2.json as the tokenizer.json does.
func TestSPModelLlama2(t *testing.T) {
	data, err := readMaybeGzip(filepath.Join("testdata", "tokenizers", "llama2", "tokenizer.json.gz"), maxFileBytes)
	if err != nil {
		t.Fatal(err)
	}
	var tj struct {
		Model struct {
			Vocab  map[string]int `json:"vocab"`
			Merges []string       `json:"merges"`
		} `json:"model"`
	}
	if err := json.Unmarshal(data, &tj); err != nil {
		t.Fatal(err)
	}
	pieces := make([]string, len(tj.Model.Vocab))
	for p, id := range tj.Model.Vocab {
		pieces[id] = p
	}
	first := map[string]int{}
	for rank, mg := range tj.Model.Merges {
		p := strings.Replace(mg, " ", "", 1)
		if _, ok := first[p]; !ok {
			first[p] = rank
		}
	}
	var model []byte
	for id, p := range pieces {
		typ, score := int64(spNormal), float32(-1e9)
		switch {
		case id == 0:
			typ, score = spUnknown, 0
		case id <= 2:
			typ, score = spControl, 0
		case id <= 258:
			typ, score = spByte, 0
		}
		if r, ok := first[p]; ok {
			score = -float32(r)
		}
		model = append(model, pbPiece(p, score, typ)...)
	}
	model = append(model, pbBytes(2, append(pbVarint(3, 2), pbVarint(35, 1)...))...)
	model = append(model, pbBytes(3, append(pbBytes(1, []byte("identity")), pbVarint(4, 0)...))...)

	m, err := parseSPModel(model)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := m.spMerges(tj.Model.Vocab, spSkipNone); err != nil || !slices.Equal(got, tj.Model.Merges) {
		n := 0
		for n < min(len(got), len(tj.Model.Merges)) && got[n] == tj.Model.Merges[n] {
			n++
		}
		t.Errorf("%d merges, want %d; first difference at %d", len(got), len(tj.Model.Merges), n)
	}

	dir := t.TempDir()
	cfg, err := os.ReadFile(filepath.Join("testdata", "tokenizers", "llama2", "tokenizer_config.json"))
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{"tokenizer.model": model, "tokenizer_config.json": cfg} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	tk, err := LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("loaded %d pieces in %v", tk.VocabSize(), time.Since(start))
	var vecs []vector
	data, err = os.ReadFile(filepath.Join("testdata", "vectors", "llama2.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &vecs); err != nil {
		t.Fatal(err)
	}
	for _, v := range vecs {
		got, err := tk.Encode(v.Input, v.AddSpecialTokens)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, v.ExpectedIDs) && len(got)+len(v.ExpectedIDs) > 0 {
			t.Errorf("%s: encode %q:\n got %v\nwant %v", v.ID, v.Input, got, v.ExpectedIDs)
		}
		if v.ExpectedDecode != nil {
			if dec := tk.Decode(v.ExpectedIDs, false); dec != *v.ExpectedDecode {
				t.Errorf("%s: decode %v: %q, want %q", v.ID, v.ExpectedIDs, dec, *v.ExpectedDecode)
			}
		}
	}
}
