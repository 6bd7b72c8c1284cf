package cmd

import (
	"github.com/tputool/tputool/loader/tokenizer"
	"github.com/tputool/tputool/pipeline/generate"
	"github.com/tputool/tputool/pipeline/serve"
)

// harmonyDecoder decodes a harmony model's answer (GPT-OSS through its
// chat template) with the special tokens that carry its structure, and
// passes on only the final channel's text: what generate and chat print
// and return. The analysis channel (the model's reasoning) goes to
// reasoning, when set.
type harmonyDecoder struct {
	d         *tokenizer.StreamDecoder
	r         *serve.HarmonyReader
	reasoning func(string)
}

// newHarmonyDecoder returns NewDecoder's function for a harmony model.
func newHarmonyDecoder(tok *tokenizer.Tokenizer, reasoning func(string)) func(prompt []int) generate.StreamDecoder {
	return func(prompt []int) generate.StreamDecoder {
		return &harmonyDecoder{d: tok.StreamDecoderWithSpecialAfter(prompt), r: serve.NewHarmonyReader(), reasoning: reasoning}
	}
}

func (h *harmonyDecoder) Add(id int) string {
	r, c := h.r.Feed(h.d.Add(id))
	h.think(r)
	return c
}

func (h *harmonyDecoder) Flush() string {
	r, c := h.r.Feed(h.d.Flush())
	r2, c2 := h.r.Flush()
	h.think(r + r2)
	return c + c2
}

func (h *harmonyDecoder) think(r string) {
	if r != "" && h.reasoning != nil {
		h.reasoning(r)
	}
}
