package kimilinear

import (
	"fmt"
	"math"
	"slices"

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/deepseek"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/nn"
)

// Config is a KimiLinearForCausalLM config.json (KimiLinearConfig,
// configuration_kimi.py of the releases).
type Config struct {
	ModelType               string        `json:"model_type"`
	VocabSize               *int          `json:"vocab_size"`
	HiddenSize              *int          `json:"hidden_size"`
	IntermediateSize        *int          `json:"intermediate_size"`
	NumHiddenLayers         *int          `json:"num_hidden_layers"`
	NumAttentionHeads       *int          `json:"num_attention_heads"`
	MaxPositionEmbeddings   *int          `json:"max_position_embeddings"`
	HiddenAct               string        `json:"hidden_act"`
	RMSNormEps              *float64      `json:"rms_norm_eps"`
	TieWordEmbeddings       *bool         `json:"tie_word_embeddings"`
	BOSTokenID              config.IDList `json:"bos_token_id"`
	EOSTokenID              config.IDList `json:"eos_token_id"`
	MoEIntermediateSize     *int          `json:"moe_intermediate_size"`
	MoERenormalize          *bool         `json:"moe_renormalize"`
	MoERouterActivationFunc string        `json:"moe_router_activation_func"`
	NumExperts              *int          `json:"num_experts"`
	NumExpertsPerToken      *int          `json:"num_experts_per_token"`
	NumSharedExperts        *int          `json:"num_shared_experts"`
	RoutedScalingFactor     *float64      `json:"routed_scaling_factor"`
	FirstKDenseReplace      *int          `json:"first_k_dense_replace"`
	MoELayerFreq            *int          `json:"moe_layer_freq"`
	NumExpertGroup          *int          `json:"num_expert_group"`
	TopKGroup               *int          `json:"topk_group"`
	QLoraRank               *int          `json:"q_lora_rank"`
	KVLoraRank              *int          `json:"kv_lora_rank"`
	QKNopeHeadDim           *int          `json:"qk_nope_head_dim"`
	QKRopeHeadDim           *int          `json:"qk_rope_head_dim"`
	VHeadDim                *int          `json:"v_head_dim"`
	MLAUseNoPE              *bool         `json:"mla_use_nope"`
	NumNextNPredictLayers   *int          `json:"num_nextn_predict_layers"`
	LinearAttnConfig        *LinearConfig `json:"linear_attn_config"`

	// Kimi K3's additions to the text config, refused by name.
	MLAUseOutputGate       *bool `json:"mla_use_output_gate"`
	AttnResBlockSize       *int  `json:"attn_res_block_size"`
	RoutedExpertHiddenSize *int  `json:"routed_expert_hidden_size"`
	LatentMoEUseNorm       *bool `json:"latent_moe_use_norm"`
}

// LinearConfig is linear_attn_config: which layers are Kimi Delta
// Attention (1-based, as KimiLinearConfig.is_kda_layer reads them) and
// the KDA's sizes.
type LinearConfig struct {
	KDALayers           []int    `json:"kda_layers"`
	FullAttnLayers      []int    `json:"full_attn_layers"`
	HeadDim             *int     `json:"head_dim"`
	NumHeads            *int     `json:"num_heads"`
	ShortConvKernelSize *int     `json:"short_conv_kernel_size"`
	GateLowerBound      *float64 `json:"gate_lower_bound"`
	UseFullRankGate     *bool    `json:"use_full_rank_gate"`
}

// KimiLinearConfig's defaults. The MLA sizes, the experts and the
// linear attention's have none (null): a config must give them.
const (
	defaultVocab        = 163840
	defaultHidden       = 4096
	defaultIntermediate = 11008
	defaultLayers       = 32
	defaultHeads        = 32
	defaultEps          = 1e-6
	defaultBOS          = 1
	defaultEOS          = 2
	// defaultMaxPositions bounds generation where the config names no
	// max_position_embeddings (KimiLinearConfig has none; the MLA layers
	// have no position embedding): Kimi Linear's 1M-token context.
	defaultMaxPositions = 1 << 20
	// maxKDA bounds linear_attn_config's sizes, which lm's dimLimits do
	// not see inside the object.
	maxKDA = 1 << 16
)

// Options are the resolved hyperparameters: DeepSeek's (MLA without
// rotary, the sigmoid router) plus the KDA layers'.
type Options struct {
	deepseek.Options
	// KDA holds the delta-attention sizes: KHeads = VHeads = num_heads,
	// KDim = VDim = head_dim, ConvKernel = short_conv_kernel_size.
	KDA nn.DeltaNetDims
	// ChunkSize is the chunk length of the chunked delta rule in prefill.
	ChunkSize int
}

// defaultChunk is the chunk length of the chunked KDA: its products over
// the key channels cost chunk·head_dim exponentials a token and head
// (nn.ChunkGatedDeltaRule), so it is kept shorter than Gated DeltaNet's
// 64. On the Kimi-Linear-shaped model of docs/moe.md, a 512-token
// prefill ran at 608 and 603 tok/s with chunks of 8 against 520 and 526
// with 16, and 558 and 567 with 4.
const defaultChunk = 8

// Resolve reads a KimiLinearForCausalLM config.json.
func Resolve(cfg *config.File) (Options, error) {
	where := lm.ConfigName(cfg)
	var c Config
	if err := cfg.Decode(&c); err != nil {
		return Options{}, err
	}
	if err := refuseK3(where, c); err != nil {
		return Options{}, err
	}
	s := lm.Spec{
		Architecture: cfg.Architecture(),
		ModelType:    c.ModelType,
		VocabSize:    lm.Or(c.VocabSize, defaultVocab),
		Hidden:       lm.Or(c.HiddenSize, defaultHidden),
		Intermediate: lm.Or(c.IntermediateSize, defaultIntermediate),
		Layers:       lm.Or(c.NumHiddenLayers, defaultLayers),
		Heads:        lm.Or(c.NumAttentionHeads, defaultHeads),
		KVHeads:      1, // MLA: one latent a token
		MaxPositions: lm.Or(c.MaxPositionEmbeddings, defaultMaxPositions),
		EOS:          c.EOSTokenID,
		BOS:          defaultBOS,
		// KimiLinearConfig's default, which the released configs keep.
		TieEmbeddings: lm.Or(c.TieWordEmbeddings, false),
	}
	if len(c.BOSTokenID) > 0 {
		s.BOS = c.BOSTokenID[0]
	} else if cfg.Has("bos_token_id") {
		s.BOS = -1 // null
	}
	if len(c.EOSTokenID) == 0 && !cfg.Has("eos_token_id") {
		s.EOS = []int{defaultEOS}
	}
	for _, f := range []struct {
		name string
		v    *int
	}{{"kv_lora_rank", c.KVLoraRank}, {"qk_nope_head_dim", c.QKNopeHeadDim}, {"qk_rope_head_dim", c.QKRopeHeadDim}, {"v_head_dim", c.VHeadDim}} {
		if f.v == nil {
			return Options{}, fmt.Errorf("%s: %s is missing; KimiLinearConfig has no default for it (the MLA layers need it)", where, f.name)
		}
		if *f.v <= 0 {
			return Options{}, fmt.Errorf("%s: %s must be positive, got %d", where, f.name, *f.v)
		}
	}
	if !lm.Or(c.MLAUseNoPE, false) {
		return Options{}, errs.Unsupportedf("%s: mla_use_nope is not true; Kimi Linear's MLA layers have no rotary embedding (KimiMLAAttention asserts mla_use_nope)", where)
	}
	o := Options{ChunkSize: defaultChunk}
	o.Options = deepseek.Options{
		QLoraRank:  lm.Or(c.QLoraRank, 0), // null: q_proj, as every release
		KVLoraRank: *c.KVLoraRank,
		QKNope:     *c.QKNopeHeadDim,
		QKRope:     *c.QKRopeHeadDim,
		VHead:      *c.VHeadDim,
		NoPE:       true,
	}
	if o.QLoraRank < 0 {
		return Options{}, fmt.Errorf("%s: q_lora_rank must not be negative, got %d", where, o.QLoraRank)
	}
	s.HeadDim = o.KVLoraRank + o.QKRope
	if err := s.CheckSizes(where); err != nil {
		return Options{}, err
	}
	kinds, kda, err := layerKinds(where, c.LinearAttnConfig, s.Layers)
	if err != nil {
		return Options{}, err
	}
	s.LayerKinds, o.KDA = kinds, kda
	o.Spec = s
	o.Eps = lm.Or(c.RMSNormEps, defaultEps)
	act := c.HiddenAct
	if act == "" {
		act = "silu"
	}
	if o.Act = nn.Activation(act); o.Act == nil {
		return Options{}, errs.Unsupportedf("%s: hidden_act %q is not supported", where, act)
	}
	// KimiMLAAttention.scaling: q_head_dim^-0.5, no YaRN correction (no
	// rotary at all).
	o.Scale = 1 / math.Sqrt(float64(o.QKNope+o.QKRope))
	if err := resolveMoE(where, c, cfg.Has("moe_renormalize"), &o.Options); err != nil {
		return Options{}, err
	}
	return o, nil
}

// refuseK3 names the fields of Kimi K3's text config (model_type
// kimi_linear under a kimi_k3 wrapper) that change the layer and that
// tputool does not implement.
func refuseK3(where string, c Config) error {
	switch {
	case lm.Or(c.MLAUseOutputGate, false):
		return errs.Unsupportedf("%s: mla_use_output_gate (Kimi K3's gated MLA) is not supported", where)
	case c.AttnResBlockSize != nil:
		return errs.Unsupportedf("%s: attn_res_block_size (Kimi K3's attention residuals) is not supported", where)
	case c.RoutedExpertHiddenSize != nil || c.LatentMoEUseNorm != nil:
		return errs.Unsupportedf("%s: routed_expert_hidden_size / latent_moe_use_norm (Kimi K3's latent experts) are not supported", where)
	}
	if l := c.LinearAttnConfig; l != nil {
		if l.GateLowerBound != nil {
			return errs.Unsupportedf("%s: linear_attn_config.gate_lower_bound (Kimi K3's bounded KDA gate) is not supported", where)
		}
		if lm.Or(l.UseFullRankGate, false) {
			return errs.Unsupportedf("%s: linear_attn_config.use_full_rank_gate (Kimi K3's full-rank KDA gate) is not supported", where)
		}
	}
	return nil
}

// layerKinds places the KDA layers: layer i (0-based) is Kimi Delta
// Attention when i+1 is in kda_layers, MLA otherwise
// (KimiLinearConfig.is_kda_layer). full_attn_layers must be given, as
// the config class asserts; a layer in both lists, or a number outside
// 1..layers, is refused. Without linear_attn_config every layer is MLA.
func layerKinds(where string, l *LinearConfig, layers int) ([]string, nn.DeltaNetDims, error) {
	kinds := make([]string, layers)
	for i := range kinds {
		kinds[i] = lm.KindFull
	}
	if l == nil {
		return kinds, nn.DeltaNetDims{}, nil
	}
	if l.KDALayers == nil || l.FullAttnLayers == nil {
		return nil, nn.DeltaNetDims{}, fmt.Errorf("%s: linear_attn_config needs kda_layers and full_attn_layers (1-based layer numbers)", where)
	}
	check := func(field string, list []int) error {
		for _, n := range list {
			if n < 1 || n > layers {
				return fmt.Errorf("%s: linear_attn_config.%s names layer %d; layers are numbered 1 to %d", where, field, n, layers)
			}
		}
		return nil
	}
	if err := check("kda_layers", l.KDALayers); err != nil {
		return nil, nn.DeltaNetDims{}, err
	}
	if err := check("full_attn_layers", l.FullAttnLayers); err != nil {
		return nil, nn.DeltaNetDims{}, err
	}
	for _, n := range l.KDALayers {
		if slices.Contains(l.FullAttnLayers, n) {
			return nil, nn.DeltaNetDims{}, fmt.Errorf("%s: linear_attn_config lists layer %d in both kda_layers and full_attn_layers", where, n)
		}
		kinds[n-1] = nn.KindLinearAttention
	}
	if len(l.KDALayers) == 0 {
		return kinds, nn.DeltaNetDims{}, nil
	}
	for _, f := range []struct {
		name string
		v    *int
	}{{"head_dim", l.HeadDim}, {"num_heads", l.NumHeads}, {"short_conv_kernel_size", l.ShortConvKernelSize}} {
		if f.v == nil {
			return nil, nn.DeltaNetDims{}, fmt.Errorf("%s: linear_attn_config.%s is missing (the KDA layers need it)", where, f.name)
		}
		if *f.v <= 0 || *f.v > maxKDA {
			return nil, nn.DeltaNetDims{}, fmt.Errorf("%s: linear_attn_config.%s is %d, want 1 to %d", where, f.name, *f.v, maxKDA)
		}
	}
	h, d := *l.NumHeads, *l.HeadDim
	return kinds, nn.DeltaNetDims{KHeads: h, VHeads: h, KDim: d, VDim: d, ConvKernel: *l.ShortConvKernelSize}, nil
}

// resolveMoE reads KimiSparseMoeBlock's fields into o: sparse layers
// from first_k_dense_replace on, every moe_layer_freq-th; the router
// KimiMoEGate (DeepSeek-V3's: sigmoid or softmax scores, the correction
// bias choosing within the best topk_group of num_expert_group groups,
// the unbiased scores weighing, divided by their sum when
// moe_renormalize and more than one expert is chosen, times
// routed_scaling_factor); num_shared_experts experts of
// moe_intermediate_size always on. Without num_experts every layer is
// dense.
func resolveMoE(where string, c Config, hasRenorm bool, o *deepseek.Options) error {
	layers := o.Spec.Layers
	o.Sparse = make([]bool, layers)
	if n := lm.Or(c.NumNextNPredictLayers, 0); n != 0 {
		return errs.Unsupportedf("%s: num_nextn_predict_layers %d: Kimi Linear's releases have no multi-token-prediction layers, and tputool reads none", where, n)
	}
	if c.NumExperts == nil {
		return nil
	}
	switch c.MoERouterActivationFunc {
	case "", "sigmoid":
	case "softmax":
		o.SoftmaxScores = true
	default:
		return errs.Unsupportedf("%s: moe_router_activation_func %q is not supported (sigmoid or softmax)", where, c.MoERouterActivationFunc)
	}
	o.Experts = *c.NumExperts
	if c.NumExpertsPerToken == nil {
		return fmt.Errorf("%s: num_experts_per_token is missing; KimiLinearConfig has no default for it", where)
	}
	o.TopK = *c.NumExpertsPerToken
	if c.MoEIntermediateSize == nil {
		return fmt.Errorf("%s: moe_intermediate_size is missing; KimiLinearConfig has no default for it", where)
	}
	o.MoEIntermediate = *c.MoEIntermediateSize
	o.Shared = lm.Or(c.NumSharedExperts, 0)
	o.RoutedScale = lm.Or(c.RoutedScalingFactor, 1)
	o.Groups = lm.Or(c.NumExpertGroup, 1)
	o.TopKGroup = lm.Or(c.TopKGroup, 1)
	// KimiMoEGate divides only when more than one expert is chosen, and
	// a null moe_renormalize is false (`top_k > 1 and None`).
	renorm := lm.Or(c.MoERenormalize, true)
	if c.MoERenormalize == nil && hasRenorm {
		renorm = false
	}
	o.NormTopK = renorm && o.TopK > 1
	if o.MoEIntermediate <= 0 {
		return fmt.Errorf("%s: moe_intermediate_size must be positive, got %d", where, o.MoEIntermediate)
	}
	if o.Shared < 0 {
		return fmt.Errorf("%s: num_shared_experts must not be negative, got %d", where, o.Shared)
	}
	if o.Experts <= 0 || o.TopK <= 0 || o.TopK > o.Experts {
		return fmt.Errorf("%s: num_experts %d must be positive and num_experts_per_token %d in [1, num_experts]", where, o.Experts, o.TopK)
	}
	if o.Groups <= 0 || o.Experts%o.Groups != 0 || o.TopKGroup <= 0 || o.TopKGroup > o.Groups ||
		(o.Groups > 1 && o.Experts/o.Groups < 2) || o.TopK > o.TopKGroup*(o.Experts/o.Groups) {
		return fmt.Errorf("%s: num_expert_group %d must divide num_experts %d into groups of two or more (one group of any size), topk_group %d be in [1, num_expert_group], and the kept groups hold num_experts_per_token %d",
			where, o.Groups, o.Experts, o.TopKGroup, o.TopK)
	}
	if err := lm.CheckExperts(where, "num_experts", o.Experts, layers); err != nil {
		return err
	}
	first, freq := lm.Or(c.FirstKDenseReplace, 0), lm.Or(c.MoELayerFreq, 1)
	if first < 0 || freq <= 0 {
		return fmt.Errorf("%s: first_k_dense_replace %d must not be negative and moe_layer_freq %d must be positive", where, first, freq)
	}
	for i := range o.Sparse {
		o.Sparse[i] = i >= first && i%freq == 0 // KimiDecoderLayer
	}
	return nil
}
