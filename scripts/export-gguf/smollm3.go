package main

import (
	"fmt"
	"math"

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
	meta = append(meta, []kv{
		{a + "block_count", uint32(s.Layers)},
		{a + "context_length", uint32(min(s.MaxPositions, math.MaxInt32))},
		{a + "embedding_length", uint32(s.Hidden)},
		{a + "feed_forward_length", uint32(s.Intermediate)},
		{a + "attention.head_count", uint32(s.Heads)},
		{a + "attention.head_count_kv", uint32(s.KVHeads)},
		{a + "attention.key_length", uint32(s.HeadDim)},
		{a + "attention.value_length", uint32(s.HeadDim)},
		{a + "attention.layer_norm_rms_epsilon", float32(o.Eps)},
		{a + "rope.freq_base", float32(ropeBase(o.Rope))}, // the resolved rotary's, rope_parameters (v5) included
		{a + "rope.dimension_count", uint32(s.HeadDim)},
		{a + "vocab_size", uint32(s.VocabSize)},
	}...)
	ts, err := llamaTensors(l, s)
	if err != nil {
		return err
	}
	return write(out, meta, ts)
}
