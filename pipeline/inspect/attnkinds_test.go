package inspect

import (
	"testing"

	"github.com/tputool/tputool/pipeline/lm"
)

// TestAttentionKinds: the architecture's layer kinds replace the config's
// guess where every layer attends (OLMo 3's default pattern, which its
// config.json does not spell: the config path takes every layer as
// sliding); models with other layer kinds, or kinds the summary does not
// count, keep the config's counts.
func TestAttentionKinds(t *testing.T) {
	f, s := lm.KindFull, lm.KindSliding
	olmo3 := &Text{Layers: 4, SlidingAttentionLayers: 4, SlidingWindow: 4096}
	attentionKinds(olmo3, &lm.Spec{LayerKinds: []string{s, s, s, f}, SlidingWindow: 4096})
	if olmo3.FullAttentionLayers != 1 || olmo3.SlidingAttentionLayers != 3 || olmo3.SlidingWindow != 4096 {
		t.Errorf("OLMo 3: %d full, %d sliding of %d", olmo3.FullAttentionLayers, olmo3.SlidingAttentionLayers, olmo3.SlidingWindow)
	}
	full := &Text{Layers: 2, SlidingAttentionLayers: 2, SlidingWindow: 8}
	attentionKinds(full, &lm.Spec{LayerKinds: []string{f, f}})
	if full.FullAttentionLayers != 2 || full.SlidingAttentionLayers != 0 || full.SlidingWindow != 0 {
		t.Errorf("all full: %+v", full)
	}
	hybrid := &Text{Layers: 2, FullAttentionLayers: 1, MambaLayers: 1}
	attentionKinds(hybrid, &lm.Spec{LayerKinds: []string{f, f}})
	if hybrid.FullAttentionLayers != 1 || hybrid.MambaLayers != 1 {
		t.Errorf("hybrid changed: %+v", hybrid)
	}
	other := &Text{Layers: 2, FullAttentionLayers: 2}
	attentionKinds(other, &lm.Spec{LayerKinds: []string{f, "chunked_attention"}})
	if other.FullAttentionLayers != 2 || other.SlidingAttentionLayers != 0 {
		t.Errorf("other kinds changed: %+v", other)
	}
}
