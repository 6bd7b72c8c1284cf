package tokenizer

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
)

// vector is one entry of a vectors file: a JSON array of these objects. The
// tokenizer path is relative to the vectors file and may end in .json.gz.
type vector struct {
	ID               string  `json:"id"`
	Tokenizer        string  `json:"tokenizer"`
	Input            string  `json:"input"`
	AddSpecialTokens bool    `json:"add_special_tokens"`
	ExpectedIDs      []int   `json:"expected_ids"`
	ExpectedDecode   *string `json:"expected_decode"`
}

var (
	loadedMu sync.Mutex
	loaded   = map[string]*Tokenizer{}
)

func loadCached(t *testing.T, path string) *Tokenizer {
	t.Helper()
	loadedMu.Lock()
	defer loadedMu.Unlock()
	if tk, ok := loaded[path]; ok {
		return tk
	}
	tk, err := Load(path)
	if err != nil {
		t.Fatalf("load %s: %v", path, err)
	}
	loaded[path] = tk
	return tk
}

func vectorFiles(t *testing.T) []string {
	files, err := filepath.Glob(filepath.Join("testdata", "vectors", "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	if extra := os.Getenv("TPUTOOL_TOKENIZER_VECTORS"); extra != "" {
		files = append(files, extra)
	}
	return files
}

// TestVectors runs every vectors file in testdata/vectors and the one named
// by TPUTOOL_TOKENIZER_VECTORS.
func TestVectors(t *testing.T) {
	files := vectorFiles(t)
	if len(files) == 0 {
		t.Fatal("no vector files found")
	}
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		var vecs []vector
		if err := json.Unmarshal(data, &vecs); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if len(vecs) == 0 {
			t.Fatalf("%s: no vectors", file)
		}
		base := filepath.Dir(file)
		t.Run(filepath.Base(file), func(t *testing.T) {
			for i, v := range vecs {
				name := v.ID
				if name == "" {
					name = filepath.Base(file) + "#" + string(rune('0'+i%10))
				}
				path := v.Tokenizer
				if !filepath.IsAbs(path) {
					path = filepath.Join(base, path)
				}
				tk := loadCached(t, path)
				got, err := tk.Encode(v.Input, v.AddSpecialTokens)
				if err != nil {
					t.Errorf("%s: encode %q: %v", name, v.Input, err)
					continue
				}
				if !slices.Equal(got, v.ExpectedIDs) && !(len(got) == 0 && len(v.ExpectedIDs) == 0) {
					t.Errorf("%s: encode %q (special=%v):\n got %v\nwant %v", name, v.Input, v.AddSpecialTokens, got, v.ExpectedIDs)
					continue
				}
				if v.ExpectedDecode != nil {
					if dec := tk.Decode(v.ExpectedIDs, false); dec != *v.ExpectedDecode {
						t.Errorf("%s: decode %v:\n got %q\nwant %q", name, v.ExpectedIDs, dec, *v.ExpectedDecode)
					}
				}
			}
		})
	}
}
