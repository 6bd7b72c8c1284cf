package main

import (
	"fmt"

	"github.com/tputool/tputool/pipeline/llama"
	"github.com/tputool/tputool/pipeline/lm"
)

// runExaone4 writes an Exaone4ForCausalLM as llama.cpp's "exaone4": OLMo
// 2's tensors (postNormTensors) with per-head q and k norms, the head
// left out when tied. llama.cpp makes the model hybrid only at 64 layers
// (the 32B): three layers of four within attention.sliding_window turning
// by the rotary, the fourth in full without it, as transformers does;
// any other model attends in full and turns everywhere. So a window is
// written only for that layout, and the rope unscaled.
func runExaone4(l *lm.Loaded, dir, out string, m *llama.Model) error {
	o, s := m.Options(), m.Spec()
	if o.Rope.Type != "default" {
		return fmt.Errorf("%s: rope scaling (%s); export-gguf writes EXAONE 4.0 without it", dir, o.Rope.Type)
	}
	if s.SlidingWindow > 0 {
		if s.Layers != 64 {
			return fmt.Errorf("%s: a window over %d layers; llama.cpp's exaone4 is hybrid at 64 layers only", dir, s.Layers)
		}
		if err := threeOfFour(dir, "exaone4", s); err != nil {
			return err
		}
	}
	const a = "exaone4."
	meta, err := header(l, dir, "exaone4")
	if err != nil {
		return err
	}
	meta = append(meta, llamaMeta(a, s, o.Eps, ropeBase(o.Rope), s.HeadDim)...)
	if s.SlidingWindow > 0 {
		meta = append(meta, kv{a + "attention.sliding_window", uint32(s.SlidingWindow)})
	}
	ts, err := postNormTensors(l, s)
	if err != nil {
		return err
	}
	return write(out, meta, ts)
}
