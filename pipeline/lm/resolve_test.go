package lm_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/pipeline/lm"
)

func TestCheckSizesNamesFirstBadField(t *testing.T) {
	ok := lm.Spec{VocabSize: 8, Hidden: 8, Intermediate: 8, Layers: 1, Heads: 4, KVHeads: 2, HeadDim: 2, MaxPositions: 8}
	if err := ok.CheckSizes("c.json"); err != nil {
		t.Fatalf("valid spec: %v", err)
	}
	// Several bad sizes: the error names the first in config order, every time.
	bad := ok
	bad.Hidden, bad.Layers, bad.HeadDim = 0, -1, 0
	for range 20 {
		if err := bad.CheckSizes("c.json"); err == nil || err.Error() != "c.json: hidden_size must be positive, got 0" {
			t.Fatalf("error %v", err)
		}
	}
	gqa := ok
	gqa.KVHeads = 3
	if err := gqa.CheckSizes("c.json"); err == nil || !strings.Contains(err.Error(), "num_attention_heads 4 is not a multiple of num_key_value_heads 3") {
		t.Errorf("error %v", err)
	}
}

func TestLayerTypes(t *testing.T) {
	got, err := lm.LayerTypes("c.json", nil, 3, lm.KindFull)
	if got != nil || err != nil {
		t.Errorf("no layer_types: %v, %v", got, err)
	}
	in := []string{lm.KindFull, lm.KindSliding}
	got, err = lm.LayerTypes("c.json", in, 2, lm.KindFull, lm.KindSliding)
	if err != nil || len(got) != 2 || got[1] != lm.KindSliding {
		t.Fatalf("%v, %v", got, err)
	}
	got[0] = "changed"
	if in[0] != lm.KindFull {
		t.Error("LayerTypes returned the config's slice, not a copy")
	}
	if _, err := lm.LayerTypes("c.json", in, 3, lm.KindFull, lm.KindSliding); err == nil || !strings.Contains(err.Error(), "layer_types has 2 entries for 3 layers") {
		t.Errorf("wrong count: %v", err)
	}
	_, err = lm.LayerTypes("c.json", in, 2, lm.KindFull)
	if !errors.Is(err, errs.ErrUnsupported) || !strings.Contains(err.Error(), `layer_types[1] is "sliding_attention" (supported: full_attention)`) {
		t.Errorf("unsupported kind: %v", err)
	}
}
