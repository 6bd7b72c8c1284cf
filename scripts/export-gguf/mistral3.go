package main

import (
	"fmt"

	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/mistral3"
)

// runMistral3 writes a Ministral3ForCausalLM, or the Ministral 3 text
// model of a Mistral3ForConditionalGeneration, as llama.cpp's "mistral3":
// Llama's tensors (q and k paired for its NORM rope), the YaRN rotary as
// rope.scaling.*, and the query scaling's β as
// attention.temperature_scale (llama.cpp divides positions by the YaRN
// original context, with no offset, as Ministral3Attention does).
//
// llama.cpp's YaRN scales attention by get_mscale(factor, 1) /
// get_mscale(factor, yarn_log_multiplier) (mscale taken as 1): written as
// mscale_all_dim, that is transformers' ratio when mscale is 1, and 0
// gives its get_mscale(factor) when the config does not set both; other
// mscales, an attention_factor, untruncated bounds, a window or biases
// are refused.
func runMistral3(l *lm.Loaded, dir, out string, m *mistral3.Model) error {
	o, s := m.Options(), m.Spec()
	rp := m.RopeParameters()
	if rp == nil {
		return fmt.Errorf("%s: a Mistral text model (model_type mistral); export-gguf writes Ministral 3's", dir)
	}
	if o.QKVBias || o.OBias || o.MLPBias || s.SlidingWindow > 0 {
		return fmt.Errorf("%s: export-gguf writes Ministral 3 without biases or a sliding window", dir)
	}
	const a = "mistral3."
	meta, err := header(l, dir, "mistral3")
	if err != nil {
		return err
	}
	theta, _ := rp["rope_theta"].(float64)
	meta = append(meta, llamaMeta(a, s, o.Eps, theta, s.HeadDim)...)
	switch o.Rope.Type {
	case "default":
	case "yarn":
		num := func(k string, def float64) (float64, bool) {
			v, ok := rp[k].(float64)
			if !ok {
				return def, false
			}
			return v, true
		}
		factor, _ := num("factor", 0)
		orig, _ := num("original_max_position_embeddings", 0)
		fast, _ := num("beta_fast", 32)
		slow, _ := num("beta_slow", 1)
		ms, _ := num("mscale", 0)
		msAll, _ := num("mscale_all_dim", 0)
		_, hasAtt := rp["attention_factor"]
		if t, ok := rp["truncate"].(bool); ok && !t || hasAtt || factor <= 1 || orig <= 0 {
			return fmt.Errorf("%s: YaRN with truncate false, an attention_factor, or no factor and original_max_position_embeddings; llama.cpp's has none of these", dir)
		}
		// transformers: get_mscale(factor, mscale) / get_mscale(factor,
		// mscale_all_dim) when both are set and not 0, else
		// get_mscale(factor): llama.cpp's with no multiplier.
		logMul := 0.0
		if ms != 0 && msAll != 0 {
			if ms != 1 {
				return fmt.Errorf("%s: YaRN mscale %g; llama.cpp's mistral3 takes mscale 1", dir, ms)
			}
			logMul = msAll
		}
		meta = append(meta, []kv{
			{a + "rope.scaling.type", "yarn"},
			{a + "rope.scaling.factor", float32(factor)},
			{a + "rope.scaling.original_context_length", uint32(orig)},
			{a + "rope.scaling.yarn_beta_fast", float32(fast)},
			{a + "rope.scaling.yarn_beta_slow", float32(slow)},
			{a + "rope.scaling.yarn_log_multiplier", float32(logMul)},
		}...)
	default:
		return fmt.Errorf("%s: rope scaling %s; export-gguf writes Ministral 3 with YaRN or none", dir, o.Rope.Type)
	}
	if o.TempEvery {
		if orig, _ := rp["original_max_position_embeddings"].(float64); o.Rope.Type != "yarn" || orig != o.TempFloor {
			return fmt.Errorf("%s: llama.cpp's mistral3 scales queries over YaRN's original context only", dir)
		}
		meta = append(meta, kv{a + "attention.temperature_scale", float32(o.TempScale)})
	}
	ts, err := llamaTensors(l, s)
	if err != nil {
		return err
	}
	return write(out, meta, ts)
}
