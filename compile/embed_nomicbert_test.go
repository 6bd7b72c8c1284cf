package compile

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/backends"

	"github.com/tputool/tputool/internal/errs"
	_ "github.com/tputool/tputool/pipeline/nomicbert" // NomicBertModel
	"github.com/tputool/tputool/pipeline/testkit/bertref"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
	"github.com/tputool/tputool/pipeline/testkit/nomicbertref"
)

// TestEmbedNomicBert: NomicBERT encoders, written with the Hub's tensor
// names (nomicbertref), give through Embed the pooled last hidden states
// of the float64 reference written from contrastors'
// modeling_hf_nomic_bert.py, for a batch of inputs of unequal lengths
// (left-padded together: each row's rotary positions and padding mask its
// own), by the mean, the first and the last token, in both modes on both
// CPU backends. The configs cover nomic-embed-text-v1.5's (SwiGLU, no
// biases, base 1000, two token types), a gated MLP whose n_inner the
// reference rounds up to 256 rows, biases everywhere with a pooler stored
// (skipped), half the head dims rotated, GeGLU, and a plain MLP under
// gelu_new (exact gelu in the reference) without token types.
func TestEmbedNomicBert(t *testing.T) {
	v15 := nomicbertref.Config{Vocab: 64, Hidden: 32, Inner: 256, Layers: 3, Heads: 4, MaxPositions: 64}
	rounded := nomicbertref.Config{Vocab: 64, Hidden: 32, Inner: 40, Layers: 2, Heads: 2, MaxPositions: 64,
		QKVBias: true, FC1Bias: true, FC2Bias: true, Pooler: true, RotaryFraction: 0.5, RotaryBase: 10000, Eps: 1e-5}
	geglu := nomicbertref.Config{Vocab: 64, Hidden: 32, Inner: 256, Layers: 2, Heads: 4, MaxPositions: 64, Act: "geglu", FC2Bias: true}
	plain := nomicbertref.Config{Vocab: 64, Hidden: 32, Inner: 48, Layers: 2, Heads: 4, MaxPositions: 64, Act: "gelu_new", TypeVocab: -1, FC1Bias: true}
	for n, c := range []nomicbertref.Config{v15, rounded, geglu, plain} {
		dir := t.TempDir()
		if err := nomicbertref.Write(dir, c, uint64(7+n)); err != nil {
			t.Fatal(err)
		}
		l := loadDir(t, dir)
		if s := l.Model.Spec(); !s.Encoder || s.MaxPositions != 64 || s.TokenTypes != c.TypeVocabSize() || s.Intermediate != c.MLPWidth() {
			t.Fatalf("config %d: spec %+v: want an encoder of 64 positions, %d token types, MLP width %d", n, s, c.TypeVocabSize(), c.MLPWidth())
		}
		prompts := modernInputs(uint64(3+n), c.Vocab, 9, 1, 23, 5)
		want := map[Pooling][][]float64{}
		for _, p := range prompts {
			h, err := nomicbertref.Forward(dir, c, p)
			if err != nil {
				t.Fatal(err)
			}
			want[PoolMean] = append(want[PoolMean], bertref.Pool(h, "mean", false))
			want[PoolCLS] = append(want[PoolCLS], bertref.Pool(h, "cls", false))
			want[PoolLast] = append(want[PoolLast], bertref.Pool(h, "last", false))
		}
		for _, be := range []backends.Backend{cpuBackend(t), goBackend(t)} {
			for _, mode := range []Mode{Compiled, Eager} {
				t.Run(fmt.Sprintf("config%d/%s/%s", n, be.Name(), mode), func(t *testing.T) {
					run, err := NewRunner(be, l, Options{Mode: mode})
					if err != nil {
						t.Fatal(err)
					}
					defer run.Close()
					checkPoolings(t, run, prompts, want)
				})
			}
		}
	}
}

// TestNomicBertRefuses: nomic-embed-text-v2-moe's experts and native
// transformers' config layout are refused by name (exit 3), as are the
// features the embedding models do not use.
func TestNomicBertRefuses(t *testing.T) {
	c := nomicbertref.Config{Vocab: 64, Hidden: 32, Inner: 256, Layers: 2, Heads: 4, MaxPositions: 64}
	for key, val := range map[string]any{"num_experts": 8, "prenorm": true, "rotary_emb_interleaved": true, "rotary_emb_fraction": 0.0} {
		dir := t.TempDir()
		if err := nomicbertref.Write(dir, c, 1); err != nil {
			t.Fatal(err)
		}
		cfg := c.ConfigJSON()
		cfg[key] = val
		writeJSONFile(t, dir+"/config.json", cfg)
		if _, err := lmckpt.Load(dir); !errors.Is(err, errs.ErrUnsupported) || !strings.Contains(err.Error(), key) {
			t.Errorf("%s %v: %v, want ErrUnsupported naming it", key, val, err)
		}
	}
	dir := t.TempDir()
	if err := nomicbertref.Write(dir, c, 1); err != nil {
		t.Fatal(err)
	}
	cfg := c.ConfigJSON()
	cfg["hidden_size"] = cfg["n_embd"]
	delete(cfg, "n_embd")
	writeJSONFile(t, dir+"/config.json", cfg)
	if _, err := lmckpt.Load(dir); !errors.Is(err, errs.ErrUnsupported) || !strings.Contains(err.Error(), "native") {
		t.Errorf("native layout: %v, want ErrUnsupported naming it", err)
	}
}

// writeJSONFile writes v as JSON to path.
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
