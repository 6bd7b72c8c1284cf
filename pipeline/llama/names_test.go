package llama_test

import (
	"strings"
	"testing"

	"github.com/tputool/tputool/pipeline/llama"
)

// TestTransformerNames: a Top name without a final "." is matched whole,
// one with it as a prefix; blocks under h. take the replacements; without
// Optional a name outside transformer. stays, with it the prefix may be
// absent.
func TestTransformerNames(t *testing.T) {
	n := llama.TransformerNames{
		Top:    [][2]string{{"wte.weight", "model.embed_tokens.weight"}, {"ln_f.", "model.norm."}},
		Blocks: strings.NewReplacer(".ln_1.", ".input_layernorm."),
	}
	opt := n
	opt.Optional = true
	for _, c := range []struct {
		n          *llama.TransformerNames
		stored, to string
	}{
		{&n, "transformer.wte.weight", "model.embed_tokens.weight"},
		{&n, "transformer.wte.bias", "transformer.wte.bias"},
		{&n, "transformer.ln_f.bias", "model.norm.bias"},
		{&n, "transformer.h.3.ln_1.weight", "model.layers.3.input_layernorm.weight"},
		{&n, "wte.weight", "wte.weight"},
		{&n, "lm_head.weight", "lm_head.weight"},
		{&opt, "wte.weight", "model.embed_tokens.weight"},
		{&opt, "h.0.ln_1.bias", "model.layers.0.input_layernorm.bias"},
		{&opt, "lm_head.weight", "lm_head.weight"},
	} {
		if got := c.n.Rename(c.stored); got != c.to {
			t.Errorf("optional %v: %s read as %s, want %s", c.n.Optional, c.stored, got, c.to)
		}
	}
}
