// Package longcat implements Meituan's LongCat-Flash
// (LongcatFlashForCausalLM: LongCat-Flash-Chat and -Thinking, 560B
// parameters of which 18.6B to 31.3B active), following transformers'
// models/longcat_flash/modular_longcat_flash.py.
//
// Each of its num_layers layers holds two sublayers of DeepSeek-V3's
// multi-head latent attention (self_attn.0 and self_attn.1, each with a
// latent cache of its own), two dense SwiGLU MLPs of ffn_hidden_size
// (mlps.0, mlps.1) and one mixture of experts, the shortcut-connected
// MoE: it reads the first MLP's input (post_attention_layernorm.0 of the
// stream) and its output joins the stream only at the end of the layer,
// beside the second MLP's:
//
//	x += attn0(norm_in0(x)); g = norm_post0(x); moe = MoE(g); x += mlp0(g)
//	x += attn1(norm_in1(x)); x += mlp1(norm_post1(x)) + moe
//
// The MLA scales its query by √(hidden/q_lora_rank) and its normed latent
// by √(hidden/kv_lora_rank) (deepseek.Options.QLoraScale, KVLoraScale),
// and turns interleaved rope pairs. The router (mlp.router.classifier,
// float32; a router_bias, which implementations read differently, is
// refused) scores n_routed_experts real experts and zero_expert_num
// zero-computation experts by a softmax; the scores plus
// e_score_correction_bias choose moe_topk, weighed by their unbiased
// scores times routed_scaling_factor, not renormalized. A real expert is
// a SwiGLU of expert_ffn_hidden_size (mlp.experts.E.{gate,up,down}_proj);
// a zero expert returns its input, so a token's zero experts add its
// input times their weights, which Route folds into the residual, their
// pairs given weight 0 and expert -1 (lm.Routing's pair that runs no
// expert): every experts formulation runs the real experts alone, and
// the host grouping and the cpu backend skip those pairs. The
// multi-token-prediction module (model.mtp.*) is skipped.
package longcat

import (
	"encoding/json"
	"fmt"
	"math"
	"regexp"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/deepseek"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/nn"
)

func init() {
	lm.Register("LongcatFlashForCausalLM", New)
}

// Config is the part of a LongcatFlashForCausalLM config.json that is its
// own; the attention's fields are DeepSeek-V3's names.
type Config struct {
	NumLayers           *int     `json:"num_layers"`
	FFNHiddenSize       *int     `json:"ffn_hidden_size"`
	ExpertFFNHiddenSize *int     `json:"expert_ffn_hidden_size"`
	NRoutedExperts      *int     `json:"n_routed_experts"`
	ZeroExpertNum       *int     `json:"zero_expert_num"`
	ZeroExpertType      string   `json:"zero_expert_type"`
	MoETopK             *int     `json:"moe_topk"`
	RoutedScale         *float64 `json:"routed_scaling_factor"`
	RouterBias          *bool    `json:"router_bias"`
	ScaleQLora          *bool    `json:"mla_scale_q_lora"`
	ScaleKVLora         *bool    `json:"mla_scale_kv_lora"`
	QKHeadDim           *int     `json:"qk_head_dim"`
	AttentionBias       bool     `json:"attention_bias"`
	NormTopKProb        *bool    `json:"norm_topk_prob"`
	AttentionMethod     string   `json:"attention_method"`
	// LongcatFlashConfig's attribute_map aliases.
	IntermediateSize *int `json:"intermediate_size"`
	NumExpertsPerTok *int `json:"num_experts_per_tok"`
	NumLocalExperts  *int `json:"num_local_experts"`
}

// defaults are LongcatFlashConfig's (LongCat-Flash's sizes), written into
// the DeepSeek-V3 config the attention is resolved from where the config
// has no such field.
var defaults = map[string]any{
	"vocab_size": 131072, "hidden_size": 6144, "num_attention_heads": 64, "max_position_embeddings": 131072,
	"rms_norm_eps": 1e-5, "bos_token_id": 1, "eos_token_id": 2, "tie_word_embeddings": false,
	"q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
	"rope_theta": 1e7, "hidden_act": "silu",
}

// LongcatFlashConfig's other defaults.
const (
	defaultLayers      = 28
	defaultFFN         = 12288
	defaultExpertFFN   = 2048
	defaultExperts     = 512
	defaultZeroExperts = 256
	defaultTopK        = 12
	defaultScale       = 6.0
)

// Options are the resolved hyperparameters: pipeline/deepseek's for the
// attention, the embedding and the head (its Spec's Layers the logical
// layers, its Intermediate the dense MLPs'), and the mixture's.
type Options struct {
	deepseek.Options
	// Experts real experts of ExpertIntermediate and Zero zero experts;
	// TopK chosen a token among both, weighed by their scores times
	// RoutedScale.
	Experts, Zero, TopK, ExpertIntermediate int
	RoutedScale                             float64
}

// Resolve reads a LongcatFlashForCausalLM config.json.
func Resolve(cfg *config.File) (Options, error) {
	where := lm.ConfigName(cfg)
	var c Config
	if err := cfg.Decode(&c); err != nil {
		return Options{}, err
	}
	if c.AttentionBias {
		return Options{}, errs.Unsupportedf("%s: attention_bias is true; LongCat-Flash's projections have no biases", where)
	}
	if t := c.ZeroExpertType; t != "" && t != "identity" {
		return Options{}, errs.Unsupportedf("%s: zero_expert_type %q is not supported (LongCat-Flash's zero experts are the identity)", where, t)
	}
	if m := c.AttentionMethod; m != "" && m != "MLA" {
		return Options{}, errs.Unsupportedf("%s: attention_method %q is not supported (LongCat-Flash's attention is MLA)", where, m)
	}
	// transformers' and Meituan's routers compute the logits without
	// classifier.bias, vLLM's with it: a config with one is refused
	// rather than read one way. Nor does either renormalize.
	if lm.Or(c.RouterBias, false) {
		return Options{}, errs.Unsupportedf("%s: router_bias is true; implementations differ on whether the router adds its bias (transformers' does not), so it is not read", where)
	}
	if lm.Or(c.NormTopKProb, false) {
		return Options{}, errs.Unsupportedf("%s: norm_topk_prob is true; LongCat-Flash's router (transformers', vLLM's) does not renormalize", where)
	}
	zero := defaultZeroExperts
	if c.ZeroExpertNum != nil {
		zero = *c.ZeroExpertNum
	} else if cfg.Has("zero_expert_num") {
		zero = 0 // null: transformers' `config.zero_expert_num or 0`
	}
	o := Options{
		Experts:            lm.Or(c.NRoutedExperts, lm.Or(c.NumLocalExperts, defaultExperts)),
		Zero:               zero,
		TopK:               lm.Or(c.MoETopK, lm.Or(c.NumExpertsPerTok, defaultTopK)),
		ExpertIntermediate: lm.Or(c.ExpertFFNHiddenSize, defaultExpertFFN),
		RoutedScale:        lm.Or(c.RoutedScale, defaultScale),
	}
	layers := lm.Or(c.NumLayers, defaultLayers)
	if o.Experts <= 0 || o.Zero < 0 || o.TopK <= 0 || o.TopK > o.Experts+o.Zero || o.ExpertIntermediate <= 0 {
		return Options{}, fmt.Errorf("%s: n_routed_experts %d and expert_ffn_hidden_size %d must be positive, zero_expert_num %d not negative, moe_topk %d in [1, n_routed_experts + zero_expert_num]",
			where, o.Experts, o.ExpertIntermediate, o.Zero, o.TopK)
	}
	if layers <= 0 {
		return Options{}, fmt.Errorf("%s: num_layers must be positive, got %d", where, layers)
	}
	if err := lm.CheckExperts(where, "n_routed_experts + zero_expert_num", o.Experts+o.Zero, layers); err != nil {
		return Options{}, err
	}
	// The attention, embedding and head are DeepSeek-V3's: resolve them
	// from a DeepseekV3ForCausalLM config of the same fields.
	raw := map[string]json.RawMessage{}
	for k, v := range defaults {
		raw[k], _ = json.Marshal(v)
	}
	for _, k := range []string{"vocab_size", "hidden_size", "num_attention_heads", "max_position_embeddings", "rms_norm_eps",
		"bos_token_id", "eos_token_id", "tie_word_embeddings", "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim",
		"qk_rope_head_dim", "v_head_dim", "rope_theta", "rope_scaling", "rope_parameters", "hidden_act", "torch_dtype", "dtype"} {
		if v, ok := cfg.Raw[k]; ok {
			raw[k] = v
		}
	}
	set := func(k string, v any) { raw[k], _ = json.Marshal(v) }
	set("architectures", []string{"DeepseekV3ForCausalLM"})
	set("model_type", "deepseek_v3")
	set("num_hidden_layers", layers)
	set("intermediate_size", lm.Or(c.FFNHiddenSize, lm.Or(c.IntermediateSize, defaultFFN)))
	set("first_k_dense_replace", layers) // every layer's "MLP" is its own (below): no DeepSeek experts
	set("n_routed_experts", 1)
	set("num_experts_per_tok", 1)
	set("n_shared_experts", 0)
	set("n_group", 1)
	set("topk_group", 1)
	set("rope_interleave", true) // apply_rotary_pos_emb_interleave, always
	set("num_nextn_predict_layers", 0)
	js, err := json.Marshal(raw)
	if err != nil {
		return Options{}, err
	}
	dcfg, err := config.ParseModel(js)
	if err != nil {
		return Options{}, fmt.Errorf("%s: %w", where, err)
	}
	dcfg.Path = cfg.Path
	d, err := deepseek.Resolve(dcfg)
	if err != nil {
		return Options{}, err
	}
	if qk := c.QKHeadDim; qk != nil && *qk != d.QKNope+d.QKRope {
		return Options{}, fmt.Errorf("%s: qk_head_dim %d, want qk_nope_head_dim + qk_rope_head_dim = %d", where, *qk, d.QKNope+d.QKRope)
	}
	if d.QLoraRank <= 0 {
		return Options{}, errs.Unsupportedf("%s: q_lora_rank is null; LongCat-Flash's query always comes through its LoRA", where)
	}
	d.Spec.Architecture, d.Spec.ModelType = cfg.Architecture(), "longcat_flash"
	if lm.Or(c.ScaleQLora, true) {
		d.QLoraScale = math.Sqrt(float64(d.Spec.Hidden) / float64(d.QLoraRank))
	}
	if lm.Or(c.ScaleKVLora, true) {
		d.KVLoraScale = math.Sqrt(float64(d.Spec.Hidden) / float64(d.KVLoraRank))
	}
	o.Options = d
	return o, nil
}

// New builds the model from its config.json.
func New(cfg *config.File) (lm.Model, error) {
	o, err := Resolve(cfg)
	if err != nil {
		return nil, err
	}
	return &Model{Model: deepseek.NewModel(o.Options), o: o}, nil
}

// Model is a LongCat-Flash decoder: pipeline/deepseek's embedding, head
// and MLA, its layers of two sublayers and the shortcut MoE its own. It
// implements lm.Routed and lm.Skipper.
type Model struct {
	*deepseek.Model
	o Options
}

// LongcatOptions returns the resolved options.
func (m *Model) LongcatOptions() Options { return m.o }

// LayerState implements lm.Model: the two attention sublayers' latent
// caches.
func (m *Model) LayerState(i int, batch, cacheLen int) []lm.StateSpec {
	var out []lm.StateSpec
	for j := range 2 {
		for _, s := range m.Model.LayerState(i, batch, cacheLen) {
			s.Name = fmt.Sprintf("%s%d", s.Name, j)
			out = append(out, s)
		}
	}
	return out
}

// sublayerState splits a layer's held state (lm.HeldState's order: the
// two caches, then with an int8 cache their two scales) into each
// sublayer's.
func sublayerState(state []*Node) (a, b []*Node) {
	if len(state) == 4 {
		return []*Node{state[0], state[2]}, []*Node{state[1], state[3]}
	}
	return state[:1], state[1:2]
}

// joinState is sublayerState's inverse.
func joinState(a, b []*Node) []*Node {
	if len(a) == 2 {
		return []*Node{a[0], b[0], a[1], b[1]}
	}
	return []*Node{a[0], b[0]}
}

// LayerWeights implements lm.Model.
func (m *Model) LayerWeights(i int) []lm.WeightSpec {
	s, o := m.Spec(), m.o
	p := fmt.Sprintf("model.layers.%d.", i)
	var ws []lm.WeightSpec
	for j := range 2 {
		// deepseek's latent weights under self_attn.J, its norms as
		// input_layernorm.J and post_attention_layernorm.J.
		for _, w := range m.LatentWeights(i) {
			w.Name = sublayerName(w.Name, p, j)
			ws = append(ws, w)
		}
		q := fmt.Sprintf("%smlps.%d.", p, j)
		ws = append(ws, lm.SwiGLUWeights(q[:len(q)-1], s.Intermediate, s.Hidden)...)
	}
	r := p + "mlp.router."
	all := o.Experts + o.Zero
	ws = append(ws,
		lm.WeightSpec{Name: r + "classifier.weight", Shape: []int{all, s.Hidden}, F32: true},
		lm.WeightSpec{Name: r + "e_score_correction_bias", Shape: []int{all}, F32: true})
	return append(ws, lm.QwenExperts.Stacked(p+"mlp.experts", o.Experts, o.ExpertIntermediate, s.Hidden)...)
}

// sublayerName is deepseek's latent weight name (prefix p: self_attn.*,
// input_layernorm, post_attention_layernorm) as sublayer j's.
func sublayerName(name, p string, j int) string {
	rest := name[len(p):]
	for _, mod := range []string{"self_attn", "input_layernorm", "post_attention_layernorm"} {
		if len(rest) > len(mod) && rest[:len(mod)+1] == mod+"." {
			return fmt.Sprintf("%s%s.%d.%s", p, mod, j, rest[len(mod)+1:])
		}
	}
	return name
}

// mlp is a SwiGLU of the dense width under scope p.
func (m *Model) mlp(p *lm.Params, h *Node) *Node {
	return nn.GatedMLP(h, p.Get("gate_proj.weight"), nil, p.Get("up_proj.weight"), nil, p.Get("down_proj.weight"), nil, m.o.Act)
}

// Route implements lm.Routed: both sublayers (the MoE's output left
// out), the router's choice on the first MLP's input, and the zero
// experts' share of that input added to the residual (their pairs expert
// -1, weight 0).
func (m *Model) Route(i int, w *lm.Params, x *Node, state []*Node, step *lm.Step) (*lm.Routing, []*Node) {
	o := &m.o
	p := w.Scope(fmt.Sprintf("model.layers.%d", i))
	s0, s1 := sublayerState(state)
	norm := func(name string, v *Node) *Node { return nn.RMSNorm(v, p.Get(name+".weight"), o.Eps, false) }

	a, s0 := m.LatentSelfAttention(p.Scope("self_attn.0"), norm("input_layernorm.0", x), s0, step)
	x = Add(x, a)
	g := norm("post_attention_layernorm.0", x)
	x = Add(x, m.mlp(p.Scope("mlps.0"), g))
	a, s1 = m.LatentSelfAttention(p.Scope("self_attn.1"), norm("input_layernorm.1", x), s1, step)
	x = Add(x, a)
	x = Add(x, m.mlp(p.Scope("mlps.1"), norm("post_attention_layernorm.1", x)))

	dims := g.Shape().Dimensions
	b, t, hd := dims[0], dims[1], dims[2]
	ids, weights := m.route(p.Scope("mlp.router"), Reshape(g, b*t, hd))
	if o.Zero > 0 {
		zero := GreaterOrEqual(ids, Const(g.Graph(), int32(o.Experts))) // [N, K]
		none := ZerosLike(weights)
		share := ReduceSum(Where(zero, weights, none), -1) // [N] float32
		// The input times the weight in float32, then the stream's dtype,
		// as transformers' identity expert rounds it.
		x = Add(x, ConvertDType(Mul(ConvertDType(g, dtypes.Float32), Reshape(share, b, t, 1)), g.DType()))
		weights = Where(zero, none, weights)
		ids = Where(zero, Neg(OnesLike(ids)), ids) // expert -1: no expert (lm.Routing)
	}
	return &lm.Routing{Residual: x, Input: g, Experts: Reshape(ids, b, t, o.TopK), Weights: Reshape(weights, b, t, o.TopK)}, joinState(s0, s1)
}

// route is LongcatFlashTopkRouter on tokens h [N, H]: float32 logits of
// the classifier, their softmax over the real and zero
// experts, the top k of the scores plus the correction bias, weighed by
// their scores times routed_scaling_factor. Returns ids [N, K] int32 and
// weights [N, K] float32.
func (m *Model) route(p *lm.Params, h *Node) (ids, weights *Node) {
	o := &m.o
	f32 := dtypes.Float32
	logits := nn.Linear(ConvertDType(h, f32), ConvertDType(p.Get("classifier.weight"), f32), nil)
	scores := Softmax(logits, -1)
	choice := Add(scores, ExpandLeftToRank(ConvertDType(p.Get("e_score_correction_bias"), f32), 2))
	ids, weights = nn.TopKBy(choice, scores, o.TopK)
	return ids, MulScalar(weights, o.RoutedScale)
}

// Layer implements lm.Model: LongcatFlashDecoderLayer, the real experts
// over the stacks.
func (m *Model) Layer(i int, w *lm.Params, x *Node, state []*Node, step *lm.Step) (*Node, []*Node) {
	r, st := m.Route(i, w, x, state, step)
	p := w.Scope(fmt.Sprintf("model.layers.%d.mlp.experts", i))
	return nn.FinishRouted(r, p.Get("gate_up_proj"), p.Get("down_proj"), m.o.Act, step.GatherExperts), st
}

// Experts implements lm.Routed: the real experts.
func (m *Model) Experts(i int) *lm.Experts {
	return &lm.Experts{Num: m.o.Experts, TopK: m.o.TopK, Weights: func(e int) []lm.WeightSpec {
		return lm.QwenExperts.Weights(fmt.Sprintf("model.layers.%d.mlp.experts", i), e, m.o.ExpertIntermediate, m.Spec().Hidden)
	}}
}

// Expert implements lm.Routed: a SwiGLU of expert_ffn_hidden_size.
func (m *Model) Expert(i, e int, w *lm.Params, x *Node) *Node {
	return m.mlp(w.Scope(fmt.Sprintf("model.layers.%d.mlp.experts.%d", i, e)), x)
}

// mtp matches the multi-token-prediction module's tensors.
var mtp = regexp.MustCompile(`^model\.mtp\.`)

// SkipWeight implements lm.Skipper: the multi-token-prediction module.
func (m *Model) SkipWeight(name string) (string, bool) {
	if mtp.MatchString(name) {
		return "multi-token-prediction module (model.mtp.*): not used", true
	}
	return m.Model.SkipWeight(name)
}

// MTPLayers implements lm.MultiToken: none that tputool reads.
func (m *Model) MTPLayers() int { return 0 }

// WithMTP implements lm.MultiToken: refused.
func (m *Model) WithMTP() (lm.MTPModel, error) {
	return nil, errs.Unsupportedf("LongCat-Flash's multi-token-prediction module (model.mtp.*) is not read")
}

var (
	_ lm.Routed     = (*Model)(nil)
	_ lm.Skipper    = (*Model)(nil)
	_ lm.MultiToken = (*Model)(nil)
)
