package qwen3

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/loader/safetensors"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
)

// seqClsConfig is Qwen3-0.6B's config.json as a
// Qwen3ForSequenceClassification's (the Qwen3-Reranker-0.6B conversion
// keeps the base config and adds the labels), with edit applied.
func seqClsConfig(t *testing.T, edit func(map[string]any)) *config.File {
	t.Helper()
	raw, err := os.ReadFile("testdata/Qwen3-0.6B.config.json")
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	v["architectures"] = []string{"Qwen3ForSequenceClassification"}
	edit(v)
	raw, err = json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.ParseModel(raw)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestQwen3ForSequenceClassification: the classifier is Qwen3's decoder
// (the same layer weights) with score.weight [Labels, Hidden] and the
// final norm as its head, no lm_head even though the config ties the
// embeddings, scoring on the last token; it is marked a classifier that
// does not generate; its labels are id2label's, else num_labels, else 2.
func TestQwen3ForSequenceClassification(t *testing.T) {
	m, err := lm.New(seqClsConfig(t, func(v map[string]any) { v["id2label"] = map[string]string{"0": "LABEL_0"} }))
	if err != nil {
		t.Fatal(err)
	}
	s := m.Spec()
	if !s.Classifier || s.Generates() || s.Encoder || s.TieEmbeddings || s.Hidden != 1024 || s.HeadDim != 128 || s.Layers != 28 {
		t.Fatalf("spec %+v", s)
	}
	sc, ok := m.(lm.Scorer)
	if !ok || sc.Labels() != 1 || sc.ScorePool() != lm.PoolLast {
		t.Fatalf("scorer %v: labels, pool = %d, %q; want 1, last", ok, sc.Labels(), sc.ScorePool())
	}
	if _, ok := m.(lm.Finisher); !ok {
		t.Error("not an lm.Finisher: Embed could not pool its hidden states")
	}
	head := m.HeadWeights()
	if len(head) != 2 || head[0].Name != "model.norm.weight" || head[1].Name != "score.weight" || !slices.Equal(head[1].Shape, []int{1, 1024}) || head[1].Matmul {
		t.Errorf("head weights %+v, want model.norm.weight and score.weight [1, 1024], not Matmul", head)
	}
	for _, w := range lm.Weights(m) {
		if strings.HasPrefix(w.Name, "lm_head") || (w.Name == "model.embed_tokens.weight" && w.TP != lm.Replicated) {
			t.Errorf("weight %s (%v): a classifier reads no language-model head", w.Name, w.TP)
		}
	}
	causal, err := lm.New(seqClsConfig(t, func(v map[string]any) { v["architectures"] = []string{"Qwen3ForCausalLM"} }))
	if err != nil {
		t.Fatal(err)
	}
	if a, b := causal.LayerWeights(3), m.LayerWeights(3); len(a) != len(b) || a[0].Name != b[0].Name {
		t.Errorf("layer weights differ from the causal LM's: %v vs %v", a, b)
	}
	if !causal.Spec().Generates() {
		t.Error("Qwen3ForCausalLM does not generate")
	}

	for _, c := range []struct {
		edit func(map[string]any)
		want int
	}{
		{func(map[string]any) {}, 2}, // PretrainedConfig's default
		{func(v map[string]any) { v["num_labels"] = 3 }, 3},
		{func(v map[string]any) {
			v["num_labels"] = 3
			v["id2label"] = map[string]string{"0": "no", "1": "yes"}
		}, 2},
	} {
		m, err := lm.New(seqClsConfig(t, c.edit))
		if err != nil {
			t.Fatal(err)
		}
		if got := m.(lm.Scorer).Labels(); got != c.want {
			t.Errorf("labels %d, want %d", got, c.want)
		}
	}
	if _, err := lm.New(seqClsConfig(t, func(v map[string]any) { v["num_labels"] = 0 })); err == nil {
		t.Error("num_labels 0: no error")
	}
}

// TestQwen3ClassifierCheckpoint: a Qwen3ForSequenceClassification
// checkpoint loads strictly: one that kept the causal LM's lm_head.weight
// loads with it skipped, and one without score.weight is refused naming
// it (errs.ErrUnsupported).
func TestQwen3ClassifierCheckpoint(t *testing.T) {
	tiny := lmckpt.Tiny{Arch: "Qwen3ForSequenceClassification", Seed: 3, Labels: 1, Config: lmckpt.Config{
		Vocab: 32, Hidden: 16, Intermediate: 24, Layers: 1, Heads: 2, KVHeads: 1, HeadDim: 8, Eps: 1e-6, QKNorm: true,
		RopeTheta: []float64{10000}, Window: []int{0}}}
	write := func(keep func(name string) bool, extra ...safetensors.Tensor) string {
		t.Helper()
		dir := t.TempDir()
		if err := tiny.Write(dir); err != nil {
			t.Fatal(err)
		}
		ck, err := safetensors.Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		var ts []safetensors.Tensor
		for _, n := range ck.Names() {
			if !keep(n) {
				continue
			}
			v, err := ck.Float32(n)
			if err != nil {
				t.Fatal(err)
			}
			info, _ := ck.Info(n)
			st, err := safetensors.Float32Tensor(n, safetensors.F32, info.Shape, v)
			if err != nil {
				t.Fatal(err)
			}
			ts = append(ts, st)
		}
		ck.Close()
		ts = append(ts, extra...)
		if err := safetensors.WriteFile(filepath.Join(dir, "model.safetensors"), ts, map[string]string{"format": "pt"}); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	head, err := safetensors.Float32Tensor("lm_head.weight", safetensors.F32, []int{32, 16}, make([]float32, 32*16))
	if err != nil {
		t.Fatal(err)
	}
	l, err := lmckpt.Load(write(func(string) bool { return true }, head))
	if err != nil {
		t.Fatalf("a checkpoint that kept lm_head.weight: %v", err)
	}
	skipped := l.Skipped()
	l.Close()
	if len(skipped) != 1 || skipped[0].Tensors != 1 || !strings.Contains(skipped[0].Reason, "lm_head") {
		t.Errorf("skipped %+v, want lm_head.weight", skipped)
	}
	_, err = lmckpt.Load(write(func(n string) bool { return n != "score.weight" }))
	if !errors.Is(err, errs.ErrUnsupported) || !strings.Contains(err.Error(), "score.weight") {
		t.Errorf("without score.weight: %v, want ErrUnsupported naming score.weight", err)
	}
}
