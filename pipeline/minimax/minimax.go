// Package minimax implements MiniMaxM2ForCausalLM, following
// transformers' models/minimax_m2 (MiniMax-M2, M2.1 and M2.5: 230B
// parameters, 10B active), and MiniMax-Text-01 and MiniMax-M1
// (MiniMaxForCausalLM; text01.go), whose layers are mostly lightning
// attention.
//
// Each layer is Llama's grouped-query attention, with q_norm and k_norm
// RMSNorms over the whole query and key projections (every head at once,
// before the split into heads: qk_norm_type "per_layer") and the rotary
// embedding on the first rotary_dim dims of each head, followed by a
// sparse block on every layer: the router's sigmoid scores plus the
// block's e_score_correction_bias choose the num_experts_per_tok experts,
// whose unbiased scores, renormalized, weigh them; each expert is a
// SwiGLU of intermediate_size (w1 gate, w3 up, w2 down, as Mixtral names
// them). That router is DeepSeek-V3's with one group, no shared expert
// and no routed scale, so the decoder is pipeline/deepseek's (its GQA
// attention, in Mixtral's names: block_sparse_moe), as transformers
// builds MiniMaxM2 from Mixtral's and GLM-4.5's modules.
//
// The Hub's releases hold the experts one by one
// (block_sparse_moe.experts.E.w1.weight); a transformers v5 save
// (mlp.gate, mlp.e_score_correction_bias, mlp.experts.gate_up_proj) is
// renamed back (lm.Renamer). The multi-token-prediction modules
// (mtp_modules, mtp_transition, or layers past num_hidden_layers) are
// skipped, and --mtp does not draft with them.
package minimax

import (
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"strconv"

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/deepseek"
	"github.com/tputool/tputool/pipeline/llama"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/nn"
)

func init() {
	lm.Register("MiniMaxM2ForCausalLM", New)
}

// Config is a MiniMaxM2ForCausalLM config.json: the Llama fields plus the
// release's own (rotary_dim, the q/k norm's kind, the router's).
type Config struct {
	llama.Config
	RotaryDim              *int   `json:"rotary_dim"`
	NumLocalExperts        *int   `json:"num_local_experts"`
	NumExperts             *int   `json:"num_experts"` // MiniMaxM2Config's attribute_map alias
	NumExpertsPerTok       *int   `json:"num_experts_per_tok"`
	ScoringFunc            string `json:"scoring_func"`
	UseRoutingBias         *bool  `json:"use_routing_bias"`
	UseQKNorm              *bool  `json:"use_qk_norm"`
	QKNormType             string `json:"qk_norm_type"`
	SharedIntermediateSize *int   `json:"shared_intermediate_size"`
	AttnTypeList           []int  `json:"attn_type_list"`
	SlidingWindow          *int   `json:"sliding_window"`
}

// Defaults are MiniMaxM2Config's (MiniMax-M2's sizes).
var Defaults = llama.Defaults{
	VocabSize: 200064, Hidden: 3072, Intermediate: 1536, Layers: 62, Heads: 48,
	MaxPositions: 196608, Eps: 1e-6, RopeTheta: 5e6, Tie: false, Act: "silu",
}

// MiniMaxM2Config's other defaults.
const (
	defaultKVHeads = 8
	defaultHeadDim = 128
	defaultExperts = 256
	defaultTopK    = 8
	defaultBOS     = 200034
	defaultEOS     = 200020
)

// Layout is the releases' sparse block: block_sparse_moe, the correction
// bias a buffer of the block, Mixtral's expert names.
var Layout = deepseek.Layout{Block: "block_sparse_moe", Bias: "e_score_correction_bias", Experts: lm.MixtralExperts}

// Resolve reads a MiniMax-M2 config.json into pipeline/deepseek's options.
func Resolve(cfg *config.File) (deepseek.Options, error) {
	where := lm.ConfigName(cfg)
	var c Config
	if err := cfg.Decode(&c); err != nil {
		return deepseek.Options{}, err
	}
	if c.ScoringFunc != "" && c.ScoringFunc != "sigmoid" {
		return deepseek.Options{}, errs.Unsupportedf("%s: scoring_func %q is not supported (MiniMax-M2's router scores by sigmoid)", where, c.ScoringFunc)
	}
	if c.UseRoutingBias != nil && !*c.UseRoutingBias {
		return deepseek.Options{}, errs.Unsupportedf("%s: use_routing_bias is false; MiniMax-M2's releases route with e_score_correction_bias", where)
	}
	if n := lm.Or(c.SharedIntermediateSize, 0); n != 0 {
		return deepseek.Options{}, errs.Unsupportedf("%s: shared_intermediate_size %d is not supported (MiniMax-M2 has no shared expert)", where, n)
	}
	for i, t := range c.AttnTypeList {
		if t != 1 {
			return deepseek.Options{}, errs.Unsupportedf("%s: attn_type_list[%d] is %d: lightning (linear) attention layers are MiniMax-Text-01's and MiniMax-M1's, not MiniMax-M2's (their architecture is MiniMaxForCausalLM)", where, i, t)
		}
	}
	if c.SlidingWindow != nil && *c.SlidingWindow > 0 {
		return deepseek.Options{}, errs.Unsupportedf("%s: sliding_window %d is not supported (MiniMax-M2 attends in full)", where, *c.SlidingWindow)
	}
	qkNorm, across := lm.Or(c.UseQKNorm, true), true
	switch c.QKNormType {
	case "", "per_layer":
	case "per_head":
		across = false
	default:
		return deepseek.Options{}, fmt.Errorf("%s: qk_norm_type %q, want \"per_layer\" or \"per_head\"", where, c.QKNormType)
	}
	if c.NumKeyValueHeads == nil {
		kv := defaultKVHeads
		c.NumKeyValueHeads = &kv
	}
	if c.HeadDim == nil {
		d := defaultHeadDim
		c.HeadDim = &d
	}
	if len(c.BOSTokenID) == 0 && !cfg.Has("bos_token_id") {
		c.BOSTokenID = config.IDList{defaultBOS}
	}
	base, err := c.Resolve(cfg, Defaults)
	if err != nil {
		return deepseek.Options{}, err
	}
	if len(c.EOSTokenID) == 0 && !cfg.Has("eos_token_id") {
		base.Spec.EOS = []int{defaultEOS}
	}
	for _, k := range base.Spec.LayerKinds {
		if k != lm.KindFull {
			return deepseek.Options{}, errs.Unsupportedf("%s: layer_types names %q layers; MiniMax-M2's layers all attend in full", where, k)
		}
	}
	// MiniMaxM2Config turns rotary_dim (head_dim/2 when absent) into the
	// partial_rotary_factor of its rope parameters, over any other.
	rot := lm.Or(c.RotaryDim, base.Spec.HeadDim/2)
	raw, err := withPartialRotary(cfg.Raw, rot, base.Spec.HeadDim)
	if err != nil {
		return deepseek.Options{}, fmt.Errorf("%s: %w", where, err)
	}
	if base.Rope, err = nn.ConfigRope(raw, Defaults.RopeTheta, base.Spec.HeadDim, base.Spec.MaxPositions); err != nil {
		return deepseek.Options{}, fmt.Errorf("%s: rotary_dim %d: %w", where, rot, err)
	}
	base.QKVBias, base.OBias, base.MLPBias = false, false, false
	base.QKNorm, base.QKNormAcross = qkNorm, qkNorm && across
	o := deepseek.Options{
		Options:         base,
		GQA:             true,
		Experts:         lm.Or(c.NumLocalExperts, lm.Or(c.NumExperts, defaultExperts)),
		TopK:            lm.Or(c.NumExpertsPerTok, defaultTopK),
		MoEIntermediate: base.Spec.Intermediate,
		Groups:          1,
		TopKGroup:       1,
		NormTopK:        true,
		RoutedScale:     1,
		Sparse:          make([]bool, base.Spec.Layers),
	}
	if o.Experts <= 0 || o.TopK <= 0 || o.TopK > o.Experts {
		return deepseek.Options{}, fmt.Errorf("%s: num_local_experts %d must be positive and num_experts_per_tok %d in [1, num_local_experts]", where, o.Experts, o.TopK)
	}
	if err := lm.CheckExperts(where, "num_local_experts", o.Experts, base.Spec.Layers); err != nil {
		return deepseek.Options{}, err
	}
	for i := range o.Sparse {
		o.Sparse[i] = true
	}
	return o, nil
}

// withPartialRotary returns raw with the partial_rotary_factor that turns
// rot of headDim dims at the top level and inside rope_parameters when
// the config has that object. The factor is rot/headDim, raised by the
// float64 steps it takes for int(headDim·factor), as the rotary reads
// it, to give rot itself (30/44 alone gives 29).
func withPartialRotary(raw map[string]json.RawMessage, rot, headDim int) (map[string]json.RawMessage, error) {
	f := float64(rot) / float64(headDim)
	for i := 0; i < 4 && int(float64(headDim)*f) < rot; i++ {
		f = math.Nextafter(f, 2)
	}
	out := make(map[string]json.RawMessage, len(raw)+1)
	for k, v := range raw {
		out[k] = v
	}
	num := json.RawMessage(strconv.FormatFloat(f, 'g', -1, 64))
	out["partial_rotary_factor"] = num
	if v, ok := raw["rope_parameters"]; ok && string(v) != "null" {
		var params map[string]json.RawMessage
		if err := json.Unmarshal(v, &params); err != nil {
			return nil, fmt.Errorf("rope_parameters: %w", err)
		}
		params["partial_rotary_factor"] = num
		b, err := json.Marshal(params)
		if err != nil {
			return nil, err
		}
		out["rope_parameters"] = b
	}
	return out, nil
}

// New builds the model from its config.json.
func New(cfg *config.File) (lm.Model, error) {
	o, err := Resolve(cfg)
	if err != nil {
		return nil, err
	}
	return &Model{deepseek.NewModelIn(o, Layout)}, nil
}

// Model is a MiniMax-M2 decoder: pipeline/deepseek's in MiniMax's layout,
// reading transformers v5's saves too. It implements lm.Routed,
// lm.Skipper and lm.Renamer.
type Model struct{ *deepseek.Model }

// v5Block matches a transformers v5 save's sparse block, which it calls
// mlp.
var v5Block = regexp.MustCompile(`^(model\.layers\.\d+\.)mlp\.`)

// mtpModule matches the multi-token-prediction modules' tensors
// (mtp_modules, mtp_transition), which transformers does not load.
var mtpModule = regexp.MustCompile(`(^|\.)mtp_(modules|transition)(\.|$)`)

// SkipWeight implements lm.Skipper: the multi-token-prediction modules,
// by name or as layers past num_hidden_layers.
func (m *Model) SkipWeight(name string) (string, bool) {
	if mtpModule.MatchString(name) {
		return "multi-token-prediction modules (use_mtp): not used", true
	}
	return m.Model.SkipWeight(name)
}

// RenameWeight implements lm.Renamer: a transformers v5 save's
// model.layers.L.mlp.* (mlp.gate.weight, mlp.e_score_correction_bias and
// the stacks mlp.experts.gate_up_proj and mlp.experts.down_proj) is read
// as model.layers.L.block_sparse_moe.* (MiniMax-M2 has no dense MLP the
// name could mean).
func (m *Model) RenameWeight(stored string) string {
	return v5Block.ReplaceAllString(stored, "${1}block_sparse_moe.")
}

// MTPLayers implements lm.MultiToken: none that tputool reads (MiniMax's
// mtp_modules are not DeepSeek-V3's layer).
func (m *Model) MTPLayers() int { return 0 }

// WithMTP implements lm.MultiToken: refused.
func (m *Model) WithMTP() (lm.MTPModel, error) {
	return nil, errs.Unsupportedf("MiniMax-M2's multi-token-prediction modules (mtp_modules) are not read")
}

var (
	_ lm.Routed     = (*Model)(nil)
	_ lm.Skipper    = (*Model)(nil)
	_ lm.Renamer    = (*Model)(nil)
	_ lm.MultiToken = (*Model)(nil)
)
