// Package phi3 implements Microsoft's Phi-3 family: Phi3ForCausalLM
// (Phi-3 and Phi-3.5 mini and medium, "Phi-3 Technical Report", Abdin et
// al., 2024, arXiv:2404.14219; Phi-4, arXiv:2412.08905; Phi-4-mini,
// arXiv:2503.01743; and their reasoning builds), following transformers'
// models/phi3/modeling_phi3.py, and PhimoeForCausalLM (Phi-3.5-MoE, 42B
// parameters of which 6.6B active; its config.json spells it
// PhiMoEForCausalLM), following models/phimoe/modeling_phimoe.py.
// LongRoPE is "LongRoPE: Extending LLM Context Window Beyond 2 Million
// Tokens" (Ding et al., 2024, arXiv:2402.13753); sparsemixer is GRIN's
// ("GRIN: GRadient-INformed MoE", Liu et al., 2024, arXiv:2409.12136).
//
// Phi-3 is Mistral's decoder (pipeline/llama's, with Mistral's sliding
// window on every layer when sliding_window is set) reading two fused
// projections: self_attn.qkv_proj, whose product is split into queries,
// keys and values in that order, and mlp.gate_up_proj, whose first half is
// the gate. Its rotary embedding may be partial (partial_rotary_factor,
// Phi-4-mini's 0.75) and is LongRoPE on the 128k-context builds
// (rope_type "longrope", which older configs call "su"; nn.Rope): plain
// RoPE's frequencies divided by short_factor, or by long_factor on a
// sequence longer than original_max_position_embeddings, and cos and sin
// scaled by sqrt(1 + ln(max/original)/ln(original)).
//
// Phi-3.5-MoE is Mixtral's decoder (pipeline/qwen3moe's in Mixtral's
// layout: block_sparse_moe, experts w1, w3, w2) with LayerNorms (weight
// and bias) in place of RMSNorms, biases on q, k, v and o
// (attention_bias) and on lm_head (lm_head_bias), LongRoPE whose cos and
// sin are scaled by the config's short_mscale or long_mscale, and
// sparsemixer routing (nn.SparseMixerRouter): two experts per token, each
// weighed by a softmax over the logits within 2·router_jitter_noise of it,
// not renormalized.
package phi3

import (
	"encoding/json"
	"fmt"
	"maps"

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/llama"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/mistral"
	"github.com/tputool/tputool/pipeline/nn"
)

func init() {
	lm.Register("Phi3ForCausalLM", New)
}

// Config is a Phi3ForCausalLM config.json: the Llama fields plus
// Mistral's window (original_max_position_embeddings and
// partial_rotary_factor reach the rotary embedding from the raw config).
type Config struct {
	llama.Config
	SlidingWindow *int `json:"sliding_window"`
}

// Defaults are Phi3Config's (Phi-3-mini-4k's sizes).
var Defaults = llama.Defaults{
	VocabSize: 32064, Hidden: 3072, Intermediate: 8192, Layers: 32, Heads: 32,
	MaxPositions: 4096, Eps: 1e-5, RopeTheta: 10000, Tie: false, Act: "silu",
	LongRope: true,
}

// defaultOriginalMax is Phi3Config's original_max_position_embeddings.
const defaultOriginalMax = 4096

// Resolve reads a Phi-3 config.json into the options of pipeline/llama's
// decoder.
func Resolve(cfg *config.File) (llama.Options, error) {
	var c Config
	if err := cfg.Decode(&c); err != nil {
		return llama.Options{}, err
	}
	rc, err := ropeConfig(cfg, []string{"default", "longrope"}, map[string]string{"su": "longrope", "yarn": "longrope"})
	if err != nil {
		return llama.Options{}, err
	}
	if !cfg.Has("original_max_position_embeddings") {
		rc.Raw["original_max_position_embeddings"] = json.RawMessage(fmt.Sprint(defaultOriginalMax))
	}
	o, err := c.Resolve(rc, Defaults)
	if err != nil {
		return llama.Options{}, err
	}
	o.QKVBias, o.OBias, o.MLPBias = false, false, false
	o.FusedQKV, o.FusedGateUp = true, true
	if err := mistral.Window(cfg, c.SlidingWindow, 0, c.LayerTypes, &o.Spec); err != nil {
		return llama.Options{}, err
	}
	return o, nil
}

// New builds a Phi3ForCausalLM from its config.json.
func New(cfg *config.File) (lm.Model, error) {
	o, err := Resolve(cfg)
	if err != nil {
		return nil, err
	}
	return llama.NewModel(o), nil
}

// ropeConfig checks the rope_scaling (or rope_parameters) type of cfg
// against the family's (its configuration class refuses others) and
// returns cfg with the aliases the class renames (Phi3Config reads "su"
// and "yarn" as "longrope") spelled as nn.NewRope reads them. cfg itself
// is not changed.
func ropeConfig(cfg *config.File, types []string, aliases map[string]string) (*config.File, error) {
	where := lm.ConfigName(cfg)
	out := *cfg
	out.Raw = maps.Clone(cfg.Raw)
	for _, key := range []string{"rope_scaling", "rope_parameters"} {
		m, err := nn.ParseRopeScaling(cfg.Raw[key])
		if err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		if m == nil {
			continue
		}
		typ, _ := m["rope_type"].(string)
		if typ == "" {
			typ, _ = m["type"].(string)
		}
		if typ == "" {
			typ = "default"
		}
		if to, ok := aliases[typ]; ok {
			typ = to
		}
		known := false
		for _, t := range types {
			known = known || t == typ
		}
		if !known {
			return nil, errs.Unsupportedf("%s: %s type %q is not one %s reads (%v)", where, key, typ, cfg.Architecture(), types)
		}
		m["rope_type"] = typ
		delete(m, "type")
		b, err := json.Marshal(m)
		if err != nil {
			return nil, fmt.Errorf("%s: %s: %w", where, key, err)
		}
		out.Raw[key] = b
	}
	return &out, nil
}
