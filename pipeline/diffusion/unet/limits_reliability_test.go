package unet

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestHostileConfigSizes: sizes that crashed the process while the config
// was resolved (a division by a zero norm_num_groups, per-block tables of
// 2^40 layers) or later (a default image of sample_size*8 pixels a side)
// are errors naming the field.
func TestHostileConfigSizes(t *testing.T) {
	base := map[string]any{
		"block_out_channels": []int{32, 64}, "down_block_types": []string{"CrossAttnDownBlock2D", "DownBlock2D"},
		"up_block_types": []string{"UpBlock2D", "CrossAttnUpBlock2D"}, "norm_num_groups": 8, "cross_attention_dim": 32,
		"attention_head_dim": 2, "layers_per_block": 1, "sample_size": 8,
	}
	check := func(name string, edit map[string]any, want string) {
		cfg := map[string]any{}
		for k, v := range base {
			cfg[k] = v
		}
		for k, v := range edit {
			cfg[k] = v
		}
		b, _ := json.Marshal(cfg)
		c, err := ParseConfig(b)
		if err == nil {
			_, err = c.Resolve()
		}
		if want == "" {
			if err != nil {
				t.Errorf("%s: %v", name, err)
			}
			return
		}
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v, want an error about %s", name, err, want)
		}
	}
	check("base", nil, "")
	check("zero groups", map[string]any{"norm_num_groups": 0}, "norm_num_groups 0")
	check("huge layers", map[string]any{"layers_per_block": int64(1) << 40}, "layers_per_block[0]=1099511627776")
	check("huge transformer layers", map[string]any{"transformer_layers_per_block": []int64{1, 1 << 40}}, "transformer_layers_per_block[1]")
	check("huge sample", map[string]any{"sample_size": 1000000000}, "sample_size 1000000000")
	check("SDXL-sized", map[string]any{"sample_size": 128, "layers_per_block": 2, "transformer_layers_per_block": []int{1, 10}}, "")
}
