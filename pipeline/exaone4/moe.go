package exaone4

// K-EXAONE (ExaoneMoeForCausalLM: LGAI-EXAONE/K-EXAONE-236B-A23B), after
// transformers' models/exaone_moe/modular_exaone_moe.py: EXAONE 4.0's
// attention (q/k RMSNorms per head before the rotary; sliding layers
// within sliding_window, the others in full without the rotary) in
// OLMoE's pre-norm layer (input_layernorm before the attention,
// post_attention_layernorm before the MLP, not EXAONE 4.0's post norms),
// and DeepSeek-V3's mixture of experts: the router's sigmoid scores plus
// the correction bias (stored beside the router, mlp.e_score_correction_
// bias) choose num_experts_per_tok of num_experts within the topk_group
// best of n_group groups, weighed by the unbiased scores, renormalized
// with norm_topk_prob and scaled by routed_scaling_factor, plus
// num_shared_experts always-on experts (one SwiGLU of
// moe_intermediate_size × n). The layers below first_k_dense_replace, or
// those mlp_layer_types calls "dense", have a SwiGLU of
// intermediate_size. The decoder is pipeline/deepseek's with llama's
// attention (deepseek.Options.GQA); the multi-token-prediction module
// (mtp.*) is skipped.

import (
	"fmt"
	"regexp"

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/deepseek"
	"github.com/tputool/tputool/pipeline/llama"
	"github.com/tputool/tputool/pipeline/lm"
)

func init() {
	lm.Register("ExaoneMoeForCausalLM", NewMoE)
	lm.Register("ExaoneMoEForCausalLM", NewMoE) // the releases' spelling (vLLM, llama.cpp read it)
}

// MoEConfig is the mixture's part of an ExaoneMoeForCausalLM config.json.
type MoEConfig struct {
	NumExperts          *int     `json:"num_experts"`
	NumExpertsPerTok    *int     `json:"num_experts_per_tok"`
	MoEIntermediateSize *int     `json:"moe_intermediate_size"`
	NumSharedExperts    *int     `json:"num_shared_experts"`
	FirstKDenseReplace  *int     `json:"first_k_dense_replace"`
	NGroup              *int     `json:"n_group"`
	TopKGroup           *int     `json:"topk_group"`
	NormTopKProb        *bool    `json:"norm_topk_prob"`
	RoutedScalingFactor *float64 `json:"routed_scaling_factor"`
	MLPLayerTypes       []string `json:"mlp_layer_types"`
	// Older and newer configs' keys, checked against the model's reading:
	// is_moe_layer (a flag a layer), K-EXAONE 2's per-layer
	// sliding_windows and swiglu_limits.
	IsMoELayer     []bool    `json:"is_moe_layer"`
	SlidingWindows []int     `json:"sliding_windows"`
	SwigluLimits   []float64 `json:"swiglu_limits"`
}

// ExaoneMoeConfig's defaults beyond Exaone4Config's.
const (
	moeExperts      = 64
	moeTopK         = 8
	moeIntermediate = 1024
	moeShared       = 1
	moeFirstDense   = 1
	moeScale        = 2.5
	moeBOS          = 1
	moeEOS          = 53
)

// moeLayout is K-EXAONE's sparse block: mlp, the correction bias beside
// the router, Qwen's expert names.
var moeLayout = deepseek.Layout{Block: "mlp", Bias: "e_score_correction_bias", Experts: lm.QwenExperts}

// ResolveMoE reads a K-EXAONE config.json into pipeline/deepseek's
// options.
func ResolveMoE(cfg *config.File) (deepseek.Options, error) {
	where := lm.ConfigName(cfg)
	var c MoEConfig
	if err := cfg.Decode(&c); err != nil {
		return deepseek.Options{}, err
	}
	base, err := Resolve(cfg)
	if err != nil {
		return deepseek.Options{}, err
	}
	// OLMoE's layer: the norms before the sublayers.
	base.Norms = llama.LlamaNorms
	if !cfg.Has("bos_token_id") {
		base.Spec.BOS = moeBOS
	}
	if !cfg.Has("eos_token_id") {
		base.Spec.EOS = []int{moeEOS}
	}
	o := deepseek.Options{
		Options:         base,
		GQA:             true,
		Experts:         lm.Or(c.NumExperts, moeExperts),
		TopK:            lm.Or(c.NumExpertsPerTok, moeTopK),
		MoEIntermediate: lm.Or(c.MoEIntermediateSize, moeIntermediate),
		Shared:          lm.Or(c.NumSharedExperts, moeShared),
		Groups:          lm.Or(c.NGroup, 1),
		TopKGroup:       lm.Or(c.TopKGroup, 1),
		NormTopK:        lm.Or(c.NormTopKProb, true),
		RoutedScale:     lm.Or(c.RoutedScalingFactor, moeScale),
		// transformers' ExaoneMoe router closes the groups it does not
		// keep with −∞ (masked_fill), not 0.
		MaskInf: true,
	}
	switch {
	case o.Experts <= 0 || o.TopK <= 0 || o.TopK > o.Experts || o.MoEIntermediate <= 0:
		return deepseek.Options{}, fmt.Errorf("%s: num_experts %d and moe_intermediate_size %d must be positive and num_experts_per_tok %d in [1, num_experts]", where, o.Experts, o.MoEIntermediate, o.TopK)
	case o.Shared < 0:
		return deepseek.Options{}, fmt.Errorf("%s: num_shared_experts must not be negative, got %d", where, o.Shared)
	case o.Groups <= 0 || o.Experts%o.Groups != 0 || o.TopKGroup <= 0 || o.TopKGroup > o.Groups:
		return deepseek.Options{}, fmt.Errorf("%s: n_group %d must divide num_experts %d and topk_group %d be in [1, n_group]", where, o.Groups, o.Experts, o.TopKGroup)
	}
	if err := lm.CheckExperts(where, "num_experts", o.Experts, base.Spec.Layers); err != nil {
		return deepseek.Options{}, err
	}
	layers := base.Spec.Layers
	o.Sparse = make([]bool, layers)
	if c.MLPLayerTypes != nil {
		if len(c.MLPLayerTypes) != layers {
			return deepseek.Options{}, fmt.Errorf("%s: mlp_layer_types has %d entries for %d layers", where, len(c.MLPLayerTypes), layers)
		}
		for i, t := range c.MLPLayerTypes {
			switch t {
			case "dense", "sparse":
				o.Sparse[i] = t == "sparse"
			default:
				return deepseek.Options{}, errs.Unsupportedf("%s: mlp_layer_types[%d] is %q, want \"dense\" or \"sparse\"", where, i, t)
			}
		}
	} else {
		first := lm.Or(c.FirstKDenseReplace, moeFirstDense)
		if first < 0 {
			return deepseek.Options{}, fmt.Errorf("%s: first_k_dense_replace must not be negative, got %d", where, first)
		}
		for i := range o.Sparse {
			o.Sparse[i] = i >= first
		}
	}
	if c.IsMoELayer != nil {
		if len(c.IsMoELayer) != layers {
			return deepseek.Options{}, fmt.Errorf("%s: is_moe_layer has %d entries for %d layers", where, len(c.IsMoELayer), layers)
		}
		for i, sparse := range c.IsMoELayer {
			if sparse != o.Sparse[i] {
				return deepseek.Options{}, fmt.Errorf("%s: is_moe_layer (%d entries) disagrees with the sparse layers mlp_layer_types or first_k_dense_replace give at layer %d", where, len(c.IsMoELayer), i)
			}
		}
	}
	if c.SlidingWindows != nil && len(c.SlidingWindows) != layers {
		return deepseek.Options{}, fmt.Errorf("%s: sliding_windows has %d entries for %d layers", where, len(c.SlidingWindows), layers)
	}
	for i, w := range c.SlidingWindows {
		want := 0
		if i < layers && base.Spec.LayerKinds[i] == lm.KindSliding {
			want = base.Spec.SlidingWindow
		}
		if w != want {
			return deepseek.Options{}, errs.Unsupportedf("%s: sliding_windows[%d] is %d where the layer kinds give %d: a window a layer (K-EXAONE 2's) is not supported", where, i, w, want)
		}
	}
	for i, v := range c.SwigluLimits {
		if v > 0 {
			return deepseek.Options{}, errs.Unsupportedf("%s: swiglu_limits[%d] is %g: clamped SwiGLUs (K-EXAONE 2's) are not supported", where, i, v)
		}
	}
	return o, nil
}

// NewMoE builds a K-EXAONE from its config.json.
func NewMoE(cfg *config.File) (lm.Model, error) {
	o, err := ResolveMoE(cfg)
	if err != nil {
		return nil, err
	}
	return &MoEModel{deepseek.NewModelIn(o, moeLayout)}, nil
}

// MoEModel is a K-EXAONE decoder: pipeline/deepseek's with llama's
// attention, in K-EXAONE's layout. It implements lm.Routed and
// lm.Skipper.
type MoEModel struct{ *deepseek.Model }

// mtpModule matches the multi-token-prediction module's tensors.
var mtpModule = regexp.MustCompile(`^(model\.)?mtp\.`)

// SkipWeight implements lm.Skipper: the multi-token-prediction module
// (mtp.*), which transformers does not load.
func (m *MoEModel) SkipWeight(name string) (string, bool) {
	if mtpModule.MatchString(name) {
		return "multi-token-prediction module (mtp.*): not used", true
	}
	return m.Model.SkipWeight(name)
}

// MTPLayers implements lm.MultiToken: none that tputool reads.
func (m *MoEModel) MTPLayers() int { return 0 }

// WithMTP implements lm.MultiToken: refused.
func (m *MoEModel) WithMTP() (lm.MTPModel, error) {
	return nil, errs.Unsupportedf("K-EXAONE's multi-token-prediction module (mtp.*) is not read")
}

var (
	_ lm.Routed     = (*MoEModel)(nil)
	_ lm.Skipper    = (*MoEModel)(nil)
	_ lm.MultiToken = (*MoEModel)(nil)
)
