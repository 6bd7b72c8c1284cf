package phi3

import (
	"fmt"
	"regexp"
	"slices"

	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/llama"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/mistral"
	"github.com/tputool/tputool/pipeline/mixtral"
	"github.com/tputool/tputool/pipeline/nn"
	"github.com/tputool/tputool/pipeline/qwen3moe"
)

func init() {
	lm.Register("PhimoeForCausalLM", NewMoE)
	lm.Register("PhiMoEForCausalLM", NewMoE) // the release's config.json (its remote code's class)
}

// MoEConfig is a Phi-3.5-MoE config.json: the Llama fields, Mistral's
// window, the experts' and lm_head_bias.
type MoEConfig struct {
	llama.Config
	SlidingWindow     *int     `json:"sliding_window"`
	NumLocalExperts   *int     `json:"num_local_experts"`
	NumExpertsPerTok  *int     `json:"num_experts_per_tok"`
	RouterJitterNoise *float64 `json:"router_jitter_noise"`
	LMHeadBias        bool     `json:"lm_head_bias"`
}

// MoEDefaults are PhimoeConfig's (Phi-3.5-MoE's sizes).
var MoEDefaults = llama.Defaults{
	VocabSize: 32064, Hidden: 4096, Intermediate: 6400, Layers: 32, Heads: 32,
	MaxPositions: 4096 * 32, Eps: 1e-5, RopeTheta: 1e6, Tie: false, Act: "silu",
	LongRope: true,
}

// PhimoeConfig's expert and router defaults.
const (
	defaultMoEKVHeads = 8
	defaultExperts    = 16
	defaultJitter     = 0.01
	sparseMixerTopK   = 2 // sparsemixer picks two experts, whatever num_experts_per_tok says
)

// ResolveMoE reads a Phi-3.5-MoE config.json into the options of
// qwen3moe's decoder.
func ResolveMoE(cfg *config.File) (qwen3moe.Options, error) {
	where := lm.ConfigName(cfg)
	var c MoEConfig
	if err := cfg.Decode(&c); err != nil {
		return qwen3moe.Options{}, err
	}
	if c.NumKeyValueHeads == nil && !cfg.Has("num_key_value_heads") {
		kv := defaultMoEKVHeads
		c.NumKeyValueHeads = &kv
	}
	rc, err := ropeConfig(cfg, []string{"default", "longrope"}, nil)
	if err != nil {
		return qwen3moe.Options{}, err
	}
	base, err := c.Resolve(rc, MoEDefaults)
	if err != nil {
		return qwen3moe.Options{}, err
	}
	if base.Rope.LongInvFreq != nil {
		// PhimoeRotaryEmbedding scales cos and sin by the config's
		// mscales, which PhimoeConfig requires, in place of the
		// attention factor.
		key := "rope_scaling"
		s, _ := nn.ParseRopeScaling(rc.Raw[key])
		if s == nil {
			key = "rope_parameters"
			s, _ = nn.ParseRopeScaling(rc.Raw[key])
		}
		short, ok1 := s["short_mscale"].(float64)
		long, ok2 := s["long_mscale"].(float64)
		if !ok1 || !ok2 || !(short > 0) || !(long > 0) {
			return qwen3moe.Options{}, fmt.Errorf("%s: %s needs positive numbers short_mscale and long_mscale (got %v and %v)", where, key, s["short_mscale"], s["long_mscale"])
		}
		base.Rope = base.Rope.WithScales(short, long)
	}
	base.MLPBias = false // attention_bias covers q, k, v and o
	base.LayerNorm = true
	base.HeadBias = c.LMHeadBias
	if err := mistral.Window(cfg, c.SlidingWindow, 0, c.LayerTypes, &base.Spec); err != nil {
		return qwen3moe.Options{}, err
	}
	o := qwen3moe.Options{
		Options:         base,
		Experts:         lm.Or(c.NumLocalExperts, defaultExperts),
		TopK:            lm.Or(c.NumExpertsPerTok, sparseMixerTopK),
		MoEIntermediate: base.Spec.Intermediate,
		Sparse:          slices.Repeat([]bool{true}, base.Spec.Layers),
		SparseMixer:     true,
		JitterEps:       lm.Or(c.RouterJitterNoise, defaultJitter),
	}
	if o.TopK != sparseMixerTopK {
		return qwen3moe.Options{}, fmt.Errorf("%s: num_experts_per_tok is %d; Phi-3.5-MoE's sparsemixer routes every token to 2 experts", where, o.TopK)
	}
	if o.Experts < sparseMixerTopK {
		return qwen3moe.Options{}, fmt.Errorf("%s: num_local_experts must be at least 2 for sparsemixer routing, got %d", where, o.Experts)
	}
	if !(o.JitterEps >= 0) {
		return qwen3moe.Options{}, fmt.Errorf("%s: router_jitter_noise must not be negative, got %v", where, o.JitterEps)
	}
	if err := lm.CheckExperts(where, "num_local_experts", o.Experts, base.Spec.Layers); err != nil {
		return qwen3moe.Options{}, err
	}
	return o, nil
}

// NewMoE builds a Phi-3.5-MoE from its config.json.
func NewMoE(cfg *config.File) (lm.Model, error) {
	o, err := ResolveMoE(cfg)
	if err != nil {
		return nil, err
	}
	return &MoEModel{qwen3moe.NewModelIn(o, mixtral.Layout)}, nil // the releases' layout is Mixtral's
}

// MoEModel is a Phi-3.5-MoE decoder: qwen3moe's in Mixtral's layout,
// reading transformers v5's saves too. It implements lm.Routed and
// lm.Renamer.
type MoEModel struct{ *qwen3moe.Model }

// v5MoE matches a transformers v5 save's sparse block: mlp.router.weight
// and the stacks mlp.experts.gate_up_proj and mlp.experts.down_proj.
var v5MoE = regexp.MustCompile(`^(model\.layers\.\d+\.)mlp\.(router\.weight|experts\.gate_up_proj|experts\.down_proj)$`)

// RenameWeight implements lm.Renamer: a transformers v5 save's
// model.layers.L.mlp.router.weight is read as the release's
// block_sparse_moe.gate.weight, and its expert stacks under
// block_sparse_moe.experts.
func (m *MoEModel) RenameWeight(stored string) string {
	sub := v5MoE.FindStringSubmatch(stored)
	if sub == nil {
		return stored
	}
	if sub[2] == "router.weight" {
		return sub[1] + "block_sparse_moe.gate.weight"
	}
	return sub[1] + "block_sparse_moe." + sub[2]
}

var (
	_ lm.Routed  = (*MoEModel)(nil)
	_ lm.Renamer = (*MoEModel)(nil)
)
