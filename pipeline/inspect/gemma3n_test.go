package inspect_test

import (
	"context"
	"strings"
	"testing"

	"github.com/tputool/tputool/loader"
	_ "github.com/tputool/tputool/pipeline/gemma3n"
	"github.com/tputool/tputool/pipeline/inspect"
	"github.com/tputool/tputool/pipeline/testkit/gemma3nref"
)

// TestGemma3n inspects a tiny Gemma 3n: 5 sliding and 2 full layers,
// the KV cache of the 5 that keep one (2 KV heads × 16, keys and values,
// bf16), the towers and the sharing layers' k/v weights not loaded, and
// the MLP widths given one a layer.
func TestGemma3n(t *testing.T) {
	dir := t.TempDir()
	if err := gemma3nref.Tiny().Write(dir); err != nil {
		t.Fatal(err)
	}
	m, err := resolve(context.Background(), dir, loader.Options{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := inspect.Run(context.Background(), m, inspect.Options{Batch: 1, Context: 64, DType: "bf16"})
	if err != nil {
		t.Fatal(err)
	}
	if r.Text.FullAttentionLayers != 2 || r.Text.SlidingAttentionLayers != 5 {
		t.Errorf("layers: %+v", r.Text)
	}
	if want := int64(5 * 2 * 2 * 16 * 2 * 64); r.Memory.KVCache != want {
		t.Errorf("KV cache %d, want %d", r.Memory.KVCache, want)
	}
	notes := strings.Join(r.Notes, "\n")
	for _, want := range []string{"2 of 7 layers read an earlier layer's KV cache", "one a layer", "not loaded"} {
		if !strings.Contains(notes, want) {
			t.Errorf("notes lack %q:\n%s", want, notes)
		}
	}
}
