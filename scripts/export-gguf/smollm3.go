package main

import (
	"fmt"

	"github.com/tputool/tputool/pipeline/llama"
	"github.com/tputool/tputool/pipeline/lm"
)

// runSmolLM3 writes a SmolLM3ForCausalLM as llama.cpp's "smollm3": Llama's
// tensors, the q and k projections' rows permuted within each head from
// rotate-half order to adjacent pairs (llama.cpp's NORM rope for it). Its
// NoPE layers are fixed to every fourth (n_no_rope_layer_step 4) and it
// attends in full everywhere, so only a model whose no_rope_layers say
// that, without a window, biases or rope scaling, is written.
func runSmolLM3(l *lm.Loaded, dir, out string, m *llama.Model) error {
	o, s := m.Options(), m.Spec()
	if o.QKVBias || o.OBias || o.MLPBias || o.Rope.Type != "default" || s.SlidingWindow > 0 {
		return fmt.Errorf("%s: export-gguf writes SmolLM3 without biases, rope scaling or a sliding window (llama.cpp's smollm3 has none)", dir)
	}
	for i := range s.Layers {
		if nope := m.LayerVariant(i) == "nope"; nope != ((i+1)%4 == 0) {
			return fmt.Errorf("%s: layer %d is NoPE %v; llama.cpp's smollm3 has every fourth layer NoPE and only those", dir, i, nope)
		}
	}
	const a = "smollm3."
	meta, err := header(l, dir, "smollm3")
	if err != nil {
		return err
	}
	meta = append(meta, llamaMeta(a, s, o.Eps, ropeBase(o.Rope), s.HeadDim)...) // the resolved rotary's base, rope_parameters (v5) included
	ts, err := llamaTensors(l, s)
	if err != nil {
		return err
	}
	return write(out, meta, ts)
}
