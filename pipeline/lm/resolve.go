package lm

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/loader/config"
)

// Helpers the architectures share while resolving a config.json into a
// Spec. Each architecture still applies its own transformers defaults.

// Or returns *v, or def when v is nil (the field is absent from
// config.json).
func Or[T any](v *T, def T) T {
	if v != nil {
		return *v
	}
	return def
}

// ConfigName names a config in errors: its path, or "config.json" when it
// was not read from a file.
func ConfigName(cfg *config.File) string {
	if cfg.Path == "" {
		return "config.json"
	}
	return cfg.Path
}

// CheckSizes reports the first of the spec's sizes that is not positive,
// by its config.json field name, in a fixed order (vocab_size,
// hidden_size, intermediate_size, num_hidden_layers, num_attention_heads,
// num_key_value_heads, head_dim, max_position_embeddings), and attention
// heads that are not a multiple of the KV heads. where names the config.
func (s *Spec) CheckSizes(where string) error {
	for _, f := range []struct {
		name string
		v    int
	}{
		{"vocab_size", s.VocabSize}, {"hidden_size", s.Hidden}, {"intermediate_size", s.Intermediate},
		{"num_hidden_layers", s.Layers}, {"num_attention_heads", s.Heads}, {"num_key_value_heads", s.KVHeads},
		{"head_dim", s.HeadDim}, {"max_position_embeddings", s.MaxPositions},
	} {
		if f.v <= 0 {
			return fmt.Errorf("%s: %s must be positive, got %d", where, f.name, f.v)
		}
	}
	if s.Heads%s.KVHeads != 0 {
		return fmt.Errorf("%s: num_attention_heads %d is not a multiple of num_key_value_heads %d", where, s.Heads, s.KVHeads)
	}
	return nil
}

// LayerTypes checks config.json's layer_types against a model of layers
// layers: one entry per layer, each one of supported (errs.ErrUnsupported
// otherwise). It returns a copy, or nil when the config has no layer_types.
func LayerTypes(where string, types []string, layers int, supported ...string) ([]string, error) {
	if len(types) == 0 {
		return nil, nil
	}
	if len(types) != layers {
		return nil, fmt.Errorf("%s: layer_types has %d entries for %d layers", where, len(types), layers)
	}
	for i, t := range types {
		if !slices.Contains(supported, t) {
			return nil, errs.Unsupportedf("%s: layer_types[%d] is %q (supported: %s)", where, i, t, strings.Join(supported, ", "))
		}
	}
	return slices.Clone(types), nil
}

// SlidingPattern sets kinds to KindSliding but for every p-th layer
// (i+1 a multiple of p), KindFull: sliding_window_pattern p as Gemma 2
// and 3, Cohere 2, EXAONE 4.0 and OLMo 3 (p 4) read it. p must be
// positive.
func SlidingPattern(kinds []string, p int) {
	for i := range kinds {
		kinds[i] = KindSliding
		if (i+1)%p == 0 {
			kinds[i] = KindFull
		}
	}
}

// NoRopeUnlessSliding is NoRope for the layers that do not slide: the
// hybrid layouts whose windowed layers alone turn by the rotary (EXAONE
// 4.0's, Cohere 2's).
func NoRopeUnlessSliding(kinds []string) []bool {
	out := make([]bool, len(kinds))
	for i, k := range kinds {
		out[i] = k != KindSliding
	}
	return out
}

// NoRopeLayers reads no_rope_layers (1: layer i turns by the rotary, 0: it
// does not; at least layers entries, as transformers reads entry i for
// layer i) or, when it is absent or empty, makes every interval-th layer
// NoPE (no_rope_layer_interval, def when absent): Llama 4's and SmolLM3's
// configs. Returns NoRope per layer.
func NoRopeLayers(where string, list []int, interval *int, def, layers int) ([]bool, error) {
	out := make([]bool, layers)
	if len(list) > 0 {
		if len(list) < layers {
			return nil, fmt.Errorf("%s: no_rope_layers has %d entries for %d layers", where, len(list), layers)
		}
		for i, v := range list[:layers] {
			if v != 0 && v != 1 {
				return nil, fmt.Errorf("%s: no_rope_layers[%d] is %d, want 1 (rotary) or 0 (none)", where, i, v)
			}
			out[i] = v == 0
		}
		return out, nil
	}
	every := Or(interval, def)
	if every <= 0 {
		return nil, fmt.Errorf("%s: no_rope_layer_interval must be positive, got %d", where, every)
	}
	for i := range out {
		out[i] = (i+1)%every == 0
	}
	return out, nil
}

// ThinkerText is the text config of an Omni model's thinker (Qwen2.5-Omni,
// Qwen3-Omni: thinker_config.text_config), named in errors as such and
// under the wrapper's architecture, its bos_token_id, eos_token_id and
// tie_word_embeddings taken from the thinker's config, else the
// wrapper's, where it has none (or null).
func ThinkerText(cfg *config.File) (*config.File, error) {
	where := ConfigName(cfg)
	raw, ok := cfg.Raw["thinker_config"]
	if !ok || string(raw) == "null" {
		return nil, fmt.Errorf("%s: %s needs a thinker_config object", where, cfg.Architecture())
	}
	thinker, err := config.ParseModel(raw)
	if err != nil {
		return nil, fmt.Errorf("%s: thinker_config: %w", where, err)
	}
	if thinker.Text == nil {
		return nil, fmt.Errorf("%s: thinker_config needs a text_config object", where)
	}
	text := *thinker.Text
	text.Path = where + " thinker_config.text_config"
	text.Architectures = cfg.Architectures
	text.Raw = maps.Clone(thinker.Text.Raw)
	for _, k := range []string{"bos_token_id", "eos_token_id", "tie_word_embeddings"} {
		for _, from := range []map[string]json.RawMessage{thinker.Raw, cfg.Raw} {
			if v, ok := from[k]; ok && string(v) != "null" {
				if old, ok := text.Raw[k]; !ok || string(old) == "null" {
					text.Raw[k] = v
				}
			}
		}
	}
	return &text, nil
}
