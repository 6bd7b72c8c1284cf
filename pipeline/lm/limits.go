package lm

import (
	"encoding/json"
	"fmt"
	"sort"

	"github.com/tputool/tputool/loader/config"
)

// dimLimits bound the config.json sizes architectures allocate tables
// from while resolving a config (per-layer kinds, per-expert flags, rotary
// frequencies), far above any real model. A hostile or corrupt value
// (num_hidden_layers: 2^40) would otherwise make that allocation abort
// the whole process with a Go out-of-memory error, which no recover
// catches, before a single tensor is compared with the config.
var dimLimits = map[string]int64{
	"num_hidden_layers":               1 << 16,
	"num_attention_heads":             1 << 16,
	"num_key_value_heads":             1 << 16,
	"head_dim":                        1 << 16,
	"hidden_size":                     1 << 24,
	"intermediate_size":               1 << 24,
	"moe_intermediate_size":           1 << 24,
	"shared_expert_intermediate_size": 1 << 24,
	"vocab_size":                      1 << 26,
	"num_experts":                     1 << 16,
	"num_local_experts":               1 << 16,
	"num_experts_per_tok":             1 << 16,
	"linear_num_key_heads":            1 << 16,
	"linear_num_value_heads":          1 << 16,
	"linear_key_head_dim":             1 << 16,
	"linear_value_head_dim":           1 << 16,
	"linear_conv_kernel_dim":          1 << 16,
	"sliding_window_pattern":          1 << 16,
	"full_attention_interval":         1 << 16,
	// GPT-2's names (GPT-J, NomicBERT) and DBRX's.
	"n_layer":  1 << 16,
	"n_layers": 1 << 16,
	"n_head":   1 << 16,
	"n_heads":  1 << 16,
	"n_embd":   1 << 24,
	"d_model":  1 << 24,
	"n_inner":  1 << 24,
}

// checkDims refuses config sizes above dimLimits, at the top level and in
// text_config, before an architecture resolves them.
func checkDims(cfg *config.File) error {
	where := ConfigName(cfg)
	for _, m := range []*config.File{cfg, cfg.Text} {
		if m == nil {
			continue
		}
		keys := make([]string, 0, len(dimLimits))
		for k := range dimLimits {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			raw, ok := m.Raw[k]
			if !ok {
				continue
			}
			var v float64
			if json.Unmarshal(raw, &v) != nil {
				continue // not a number: the architecture's decoder says so
			}
			if limit := dimLimits[k]; v > float64(limit) {
				field := k
				if m != cfg {
					field = "text_config." + k
				}
				return fmt.Errorf("%s: %s is %.0f, beyond any real model (at most %d here); the config is corrupt", where, field, v, limit)
			}
		}
	}
	return nil
}

// MaxExpertMLPs bounds a config's routed experts over all its layers
// (num_hidden_layers × num_experts): the architectures list each
// expert's matrices (lm.StackedExperts' parts) for the loader, and at
// 2^30 of them that list alone takes minutes and gigabytes. The largest
// releases have about 31K (Qwen3.5-397B-A17B: 60 layers of 512 experts;
// Qwen3-Next-80B-A3B 48 of 512, DeepSeek-V3 58 of 256).
const MaxExpertMLPs = 1 << 17

// CheckExperts refuses a model of layers layers with experts routed
// experts each beyond MaxExpertMLPs; where names the config, field the
// experts' field.
func CheckExperts(where, field string, experts, layers int) error {
	if experts > 0 && layers > 0 && int64(experts)*int64(layers) > MaxExpertMLPs {
		return fmt.Errorf("%s: %d layers of %s %d make %d expert MLPs, beyond any real model (at most %d here; the largest releases have about 31K); the config is corrupt",
			where, layers, field, experts, int64(experts)*int64(layers), MaxExpertMLPs)
	}
	return nil
}
