package inspect_test

import (
	"encoding/json"
	"testing"

	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/inspect"
	"github.com/tputool/tputool/pipeline/testkit/falconh1ref"
)

// TestFalconH1Text: Falcon-H1's config read from config.json alone
// (TextConfig, inspect's fallback when the architecture does not
// build): every layer attention and a Mamba-2 mixer, whose head
// dimension "auto" comes from mamba_d_ssm (1024 when absent), not from
// mamba_expand × hidden_size.
func TestFalconH1Text(t *testing.T) {
	for _, c := range []struct {
		edit    func(map[string]any)
		headDim int
	}{
		{func(map[string]any) {}, 8},
		{func(j map[string]any) { delete(j, "mamba_d_head") }, 8},                                  // "auto": mamba_d_ssm 32 / 4 heads
		{func(j map[string]any) { delete(j, "mamba_d_head"); delete(j, "mamba_d_ssm") }, 1024 / 4}, // FalconH1Config's 1024
	} {
		j := falconh1ref.Tiny().ConfigJSON()
		c.edit(j)
		b, _ := json.Marshal(j)
		cfg, err := config.ParseModel(b)
		if err != nil {
			t.Fatal(err)
		}
		text, err := inspect.TextConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if text.FullAttentionLayers != 2 || text.MambaLayers != 2 || text.Mamba == nil || text.Mamba.Heads != 4 || text.Mamba.HeadDim != c.headDim {
			t.Errorf("full %d, Mamba %d, %+v; want 2, 2 and head_dim %d", text.FullAttentionLayers, text.MambaLayers, text.Mamba, c.headDim)
		}
	}
}
