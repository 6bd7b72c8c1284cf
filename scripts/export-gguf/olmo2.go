package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"

	"github.com/tputool/tputool/pipeline/llama"
	"github.com/tputool/tputool/pipeline/lm"
)

// runOlmo2 writes an Olmo2ForCausalLM or Olmo3ForCausalLM as llama.cpp's
// "olmo2": attn_q, attn_k, attn_v and attn_output, attn_q_norm and
// attn_k_norm over the whole projections, post_attention_norm and
// post_ffw_norm (no norm before either sublayer), the SwiGLU MLP,
// output_norm and output (which llama.cpp's olmo2 requires: a tied model
// is refused). The rotary turns halves (llama.cpp's NEOX rope for olmo2),
// so no rows are permuted. OLMo 3's window is attention.sliding_window:
// llama.cpp then makes three layers of four sliding and turns them by the
// plain rotary, the rope scaling the full-attention layers only, as
// transformers does; only that layer pattern is written. Of the scalings,
// linear (rope.scaling.type, rope.scaling.factor) and YaRN, the OLMo 3
// releases' (yarnMeta).
func runOlmo2(l *lm.Loaded, dir, out string, m *llama.Model) error {
	o, s := m.Options(), m.Spec()
	switch {
	case o.QKVBias || o.OBias || (o.Rope.Type != "default" && o.Rope.Type != "linear" && o.Rope.Type != "yarn"):
		return fmt.Errorf("%s: export-gguf writes OLMo 2 and 3 without biases, and with linear or YaRN rope scaling or none", dir)
	case s.TieEmbeddings:
		return fmt.Errorf("%s: tie_word_embeddings; llama.cpp's olmo2 requires its own output", dir)
	}
	if s.SlidingWindow > 0 {
		if err := threeOfFour(dir, "olmo2", s); err != nil {
			return err
		}
	}
	factor := 0.0
	if o.Rope.Type == "linear" {
		var c struct {
			Scaling struct {
				Factor float64 `json:"factor"`
			} `json:"rope_scaling"`
		}
		raw, err := os.ReadFile(filepath.Join(dir, "config.json"))
		if err != nil {
			return err
		}
		if err := json.Unmarshal(raw, &c); err != nil || c.Scaling.Factor <= 0 {
			return fmt.Errorf("%s: config.json: linear rope_scaling without a positive factor (rope_parameters is not read here)", dir)
		}
		factor = c.Scaling.Factor
	}
	// The resolved rotary's base (rope_parameters included): the ratio of
	// two frequencies, which a linear scaling divides alike; with OLMo 3's
	// windows, the sliding layers' plain rotary of the same base (YaRN
	// moves some frequencies by other factors than others).
	r := o.Rope
	if o.SlidingRope != nil {
		r = o.SlidingRope
	}
	theta := math.Pow(r.InvFreq[1]/r.InvFreq[0], -float64(r.RotaryDim)/2)
	const a = "olmo2."
	meta, err := header(l, dir, "olmo2")
	if err != nil {
		return err
	}
	meta = append(meta, llamaMeta(a, s, o.Eps, theta, s.HeadDim)...)
	if s.SlidingWindow > 0 {
		meta = append(meta, kv{a + "attention.sliding_window", uint32(s.SlidingWindow)})
	}
	if factor > 0 {
		meta = append(meta, kv{a + "rope.scaling.type", "linear"}, kv{a + "rope.scaling.factor", float32(factor)})
	}
	if o.Rope.Type == "yarn" {
		ym, err := yarnMeta(dir, a)
		if err != nil {
			return err
		}
		meta = append(meta, ym...)
	}
	ts, err := postNormTensors(l, s)
	if err != nil {
		return err
	}
	return write(out, meta, ts)
}

// yarnMeta is the rope.scaling.* metadata of the YaRN scaling in
// dir/config.json (rope_parameters whole or for "full_attention", else
// rope_scaling: the precedence of nn.ConfigRope), keys prefixed by a. llama.cpp's YaRN scales the
// rotated q and k by get_mscale(factor) = 1 + 0.1·ln(factor), times
// rope.scaling.attn_factor: transformers' attention_factor (by default
// that same get_mscale) is written as its ratio to it. mscale,
// mscale_all_dim, truncate false and a beta_fast or beta_slow other than
// 32 and 1 (llama.cpp's olmo2 reads none of them; 32 and 1 are its
// defaults) are refused.
func yarnMeta(dir, a string) ([]kv, error) {
	raw, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		return nil, err
	}
	var c struct {
		Scaling map[string]any `json:"rope_scaling"`
		Params  map[string]any `json:"rope_parameters"`
	}
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, fmt.Errorf("%s: config.json: %w", dir, err)
	}
	rp := c.Params
	if full, ok := rp["full_attention"].(map[string]any); ok {
		rp = full
	}
	if rp == nil {
		rp = c.Scaling
	}
	num := func(k string, def float64) float64 {
		if v, ok := rp[k].(float64); ok {
			return v
		}
		return def
	}
	factor, orig := num("factor", 0), num("original_max_position_embeddings", 0)
	for _, k := range []string{"mscale", "mscale_all_dim"} {
		if _, ok := rp[k]; ok {
			return nil, fmt.Errorf("%s: config.json: YaRN's %s, which llama.cpp's olmo2 does not read", dir, k)
		}
	}
	if t, ok := rp["truncate"].(bool); ok && !t {
		return nil, fmt.Errorf("%s: config.json: YaRN's truncate false; llama.cpp truncates the correction range", dir)
	}
	if b, s := num("beta_fast", 32), num("beta_slow", 1); b != 32 || s != 1 {
		return nil, fmt.Errorf("%s: config.json: YaRN's beta_fast %g and beta_slow %g; llama.cpp's olmo2 takes 32 and 1", dir, b, s)
	}
	if factor <= 1 || orig <= 0 {
		return nil, fmt.Errorf("%s: config.json: YaRN's factor %g must exceed 1 and original_max_position_embeddings %g be positive", dir, factor, orig)
	}
	mscale := 1 + 0.1*math.Log(factor)
	return []kv{
		{a + "rope.scaling.type", "yarn"},
		{a + "rope.scaling.factor", float32(factor)},
		{a + "rope.scaling.original_context_length", uint32(orig)},
		{a + "rope.scaling.attn_factor", float32(num("attention_factor", mscale) / mscale)},
	}, nil
}

// postNormTensors are the GGUF tensors of OLMo 2's layer (llama.cpp's
// olmo2 and exaone4): the projections as stored (a NEOX rope turns
// halves), the q and k norms, post_attention_norm and post_ffw_norm, the
// SwiGLU MLP; the final norm and the head (left out when tied), or the
// first error reading them.
func postNormTensors(l *lm.Loaded, s *lm.Spec) ([]tensor, error) {
	g := &ggufTensors{l: l}
	g.add("token_embd.weight", false, "model.embed_tokens.weight")
	for i := range s.Layers {
		p, b := fmt.Sprintf("model.layers.%d.", i), fmt.Sprintf("blk.%d.", i)
		g.pairs(b, append([]ggufPair{
			{"attn_q.weight", p + "self_attn.q_proj.weight", false},
			{"attn_k.weight", p + "self_attn.k_proj.weight", false},
			{"attn_v.weight", p + "self_attn.v_proj.weight", false},
			{"attn_output.weight", p + "self_attn.o_proj.weight", false},
			{"attn_q_norm.weight", p + "self_attn.q_norm.weight", true},
			{"attn_k_norm.weight", p + "self_attn.k_norm.weight", true},
			{"post_attention_norm.weight", p + "post_attention_layernorm.weight", true},
			{"post_ffw_norm.weight", p + "post_feedforward_layernorm.weight", true},
		}, denseMLP(p)...))
	}
	g.final(s.TieEmbeddings, true)
	return g.ts, g.err
}

// threeOfFour checks that s's layers slide three of four, the fourth in
// full, the one layout llama.cpp's arch (olmo2, exaone4, cohere2) windows.
func threeOfFour(dir, arch string, s *lm.Spec) error {
	for i, k := range s.LayerKinds {
		if sliding := (i+1)%4 != 0; sliding != (k == lm.KindSliding) {
			return fmt.Errorf("%s: layer %d is %s; llama.cpp's %s windows three layers of four, the fourth in full", dir, i, k, arch)
		}
	}
	return nil
}

// runOlmo1 writes an OlmoForCausalLM (OLMo 1) as llama.cpp's "olmo": no
// norm tensors (its LayerNorms have no parameters), q and k paired for its
// NORM rope (a clamp is elementwise, so clamp_kqv reads the permuted rows
// alike), v, attn_output and the SwiGLU MLP; output unless tied.
// llama.cpp's olmo reads no biases: attention_bias is refused, as is rope
// scaling.
func runOlmo1(l *lm.Loaded, dir, out string, m *llama.Model) error {
	o, s := m.Options(), m.Spec()
	if o.QKVBias || o.OBias || o.Rope.Type != "default" || o.Rope.RotaryDim != s.HeadDim {
		return fmt.Errorf("%s: export-gguf writes OLMo 1 without attention_bias, rope scaling or a partial rotary (llama.cpp's olmo)", dir)
	}
	const a = "olmo."
	meta, err := header(l, dir, "olmo")
	if err != nil {
		return err
	}
	meta = append(meta, llamaMeta(a, s, o.Eps, ropeBase(o.Rope), s.HeadDim)...)
	meta = append(meta, kv{a + "attention.layer_norm_epsilon", float32(o.Eps)})
	if o.ClipQKV > 0 {
		meta = append(meta, kv{a + "attention.clamp_kqv", float32(o.ClipQKV)})
	}
	g := &ggufTensors{l: l}
	g.add("token_embd.weight", false, "model.embed_tokens.weight")
	for i := range s.Layers {
		p, b := fmt.Sprintf("model.layers.%d.", i), fmt.Sprintf("blk.%d.", i)
		g.addPaired(b+"attn_q.weight", s.Heads, p+"self_attn.q_proj.weight")
		g.addPaired(b+"attn_k.weight", s.KVHeads, p+"self_attn.k_proj.weight")
		g.pairs(b, append([]ggufPair{
			{"attn_v.weight", p + "self_attn.v_proj.weight", false},
			{"attn_output.weight", p + "self_attn.o_proj.weight", false},
		}, denseMLP(p)...))
	}
	if !s.TieEmbeddings {
		g.add("output.weight", false, "lm_head.weight")
	}
	if g.err != nil {
		return g.err
	}
	return write(out, meta, g.ts)
}
