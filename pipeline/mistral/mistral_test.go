package mistral

import (
	"testing"

	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/lm"
)

func spec(t *testing.T, path string) *lm.Spec {
	t.Helper()
	cfg, err := config.ReadModel(path)
	if err != nil {
		t.Fatal(err)
	}
	m, err := lm.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return m.Spec()
}

func TestMistralConfigs(t *testing.T) {
	s := spec(t, "testdata/Mistral-7B-v0.3.config.json")
	if s.VocabSize != 32768 || s.KVHeads != 8 || s.HeadDim != 128 || s.TieEmbeddings || s.SlidingWindow != 0 || s.LayerKinds[0] != lm.KindFull {
		t.Fatalf("v0.3 spec %+v", s)
	}
	s = spec(t, "testdata/Mistral-7B-v0.1.config.json")
	if s.SlidingWindow != 4096 || s.LayerKinds[0] != lm.KindSliding || s.LayerKinds[31] != lm.KindSliding {
		t.Fatalf("v0.1 spec %+v", s)
	}
}
