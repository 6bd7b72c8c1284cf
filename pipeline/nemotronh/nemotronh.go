// Package nemotronh implements NemotronHForCausalLM, following
// transformers' models/nemotron_h (NVIDIA's Nemotron-H 8B/47B, Nemotron
// Nano 2 9B/12B, and the mixture-of-experts Nemotron 3 Nano 30B-A3B): a
// hybrid decoder whose every layer is one block, x + mixer(RMSNorm(x)),
// the mixer by the layer's type:
//
//   - "mamba" (M): a Mamba-2 mixer (transformers' Zamba2MambaMixer,
//     nn.Mamba2) of mamba_num_heads × mamba_head_dim channels, whose gated
//     RMSNorm normalizes each of n_groups groups apart;
//   - "attention" (*): grouped-query attention of head_dim, without a
//     positional embedding (JambaAttention);
//   - "mlp" (-): down_proj(relu²(up_proj(x))), no gate (NemotronMLP);
//   - "moe" (E): DeepSeek-V3's router (sigmoid scores, the correction
//     bias choosing, n_group groups, norm_topk_prob, routed_scaling_factor;
//     nn.GroupRouter) over relu² experts without a gate (stacked, or one
//     tensor per expert as the releases store them), optionally through a
//     latent projection (moe_latent_size: fc1_latent_proj before the
//     experts, fc2_latent_proj after), plus a relu² shared expert.
//
// The layer types come from layers_block_type (transformers' names
// "linear_attention", "full_attention", "mlp", "moe", or the older
// "mamba" and "attention"), else from hybrid_override_pattern (the
// releases: "M", "*", "-", "E" per layer), as NemotronHConfig reads
// them. The releases name their tensors backbone.*
// (backbone.embeddings, backbone.layers.N.mixer, backbone.norm_f); a
// transformers v5 save's model.* is read under those names.
package nemotronh

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/nn"
)

func init() {
	lm.Register("NemotronHForCausalLM", New)
}

// The kinds of NemotronH's layers besides nn.KindMamba and lm.KindFull.
const (
	KindMLP = "mlp"
	KindMoE = "moe"
)

// Config is a NemotronHForCausalLM config.json, with the older spellings
// NemotronHConfig still reads.
type Config struct {
	VocabSize             *int            `json:"vocab_size"`
	HiddenSize            *int            `json:"hidden_size"`
	NumHiddenLayers       *int            `json:"num_hidden_layers"`
	LayersBlockType       []string        `json:"layers_block_type"`
	LayerTypes            []string        `json:"layer_types"`
	Pattern               *string         `json:"hybrid_override_pattern"`
	NumAttentionHeads     *int            `json:"num_attention_heads"`
	NumKeyValueHeads      *int            `json:"num_key_value_heads"`
	HeadDim               *int            `json:"head_dim"`
	MaxPositionEmbeddings *int            `json:"max_position_embeddings"`
	SlidingWindow         json.RawMessage `json:"sliding_window"`
	IntermediateSize      *int            `json:"intermediate_size"`
	MLPHiddenAct          *string         `json:"mlp_hidden_act"`
	MLPBias               bool            `json:"mlp_bias"`
	SSMStateSize          *int            `json:"ssm_state_size"`
	MambaNumHeads         *int            `json:"mamba_num_heads"`
	MambaHeadDim          *int            `json:"mamba_head_dim"`
	MambaHiddenAct        *string         `json:"mamba_hidden_act"`
	NGroups               *int            `json:"n_groups"`
	MambaNGroups          *int            `json:"mamba_n_groups"`
	ConvKernel            *int            `json:"conv_kernel"`
	MambaDConv            *int            `json:"mamba_d_conv"`
	UseConvBias           *bool           `json:"use_conv_bias"`
	MambaConvBias         *bool           `json:"mamba_conv_bias"`
	UseBias               bool            `json:"use_bias"`
	NRoutedExperts        *int            `json:"n_routed_experts"`
	NSharedExperts        *int            `json:"n_shared_experts"`
	MoEIntermediateSize   *int            `json:"moe_intermediate_size"`
	SharedIntermediate    *int            `json:"moe_shared_expert_intermediate_size"`
	MoELatentSize         *int            `json:"moe_latent_size"`
	NumExpertsPerTok      *int            `json:"num_experts_per_tok"`
	RoutedScalingFactor   *float64        `json:"routed_scaling_factor"`
	NGroup                *int            `json:"n_group"`
	TopKGroup             *int            `json:"topk_group"`
	NormTopKProb          *bool           `json:"norm_topk_prob"`
	LayerNormEpsilon      *float64        `json:"layer_norm_epsilon"`
	TieWordEmbeddings     *bool           `json:"tie_word_embeddings"`
	ResidualInFP32        bool            `json:"residual_in_fp32"`
	BOSTokenID            config.IDList   `json:"bos_token_id"`
	EOSTokenID            config.IDList   `json:"eos_token_id"`
	NumNextNPredictLayers *int            `json:"num_nextn_predict_layers"`
}

// Options are the resolved hyperparameters.
type Options struct {
	Spec lm.Spec
	// Eps is layer_norm_epsilon (every RMSNorm's and the gated norm's).
	Eps float64
	// Mamba are the Mamba-2 mixers' sizes; ConvBias use_conv_bias (the
	// older mamba_conv_bias first, as NemotronHConfig reads it) and
	// ProjBias use_bias (in_proj and out_proj biases; mamba_proj_bias is
	// not read by transformers' mixer, nor here).
	Mamba              nn.Mamba2Dims
	ConvBias, ProjBias bool
	// MLPBias is mlp_bias (the MLPs', the shared expert's). The
	// attention has no biases whatever attention_bias says, as
	// transformers builds it.
	MLPBias bool
	// Router is the MoE layers' routing (n_routed_experts,
	// num_experts_per_tok, n_group, topk_group, norm_topk_prob,
	// routed_scaling_factor).
	Router nn.GroupRouter
	// MoEIntermediate is the experts' width, Shared the shared expert's
	// (0: none), Latent moe_latent_size (0: the experts read the hidden
	// states themselves).
	MoEIntermediate, Shared, Latent int
	// Chunk is the chunk of the Mamba-2 recurrence in several-token steps.
	Chunk int
}

// NemotronHConfig's defaults (its class's: Nemotron 3 Nano's sizes are
// the release's config).
const (
	defVocab      = 131072
	defHidden     = 4096
	defHeads      = 32
	defKVHeads    = 8
	defHeadDim    = 128
	defMaxPos     = 4096
	defInter      = 21504
	defState      = 128
	defMambaHeads = 128
	defMambaHead  = 64
	defGroups     = 8
	defConv       = 4
	defExperts    = 8
	defShared     = 1
	defMoEInter   = 7688
	defTopK       = 2
	defEps        = 1e-5
	defBOS        = 1
	defEOS        = 2
	chunk         = 64
)

// mambaNames are NemotronHConfig's names of the Mamba-2 sizes.
var mambaNames = nn.Mamba2Names{Heads: "mamba_num_heads", HeadDim: "mamba_head_dim", State: "ssm_state_size", Groups: "n_groups", ConvKernel: "conv_kernel"}

// patternKinds maps hybrid_override_pattern's letters to layer kinds.
var patternKinds = map[rune]string{'M': nn.KindMamba, '*': lm.KindFull, '-': KindMLP, 'E': KindMoE}

// typeKinds maps layers_block_type's names (transformers' and the older
// ones) to layer kinds.
var typeKinds = map[string]string{
	"linear_attention": nn.KindMamba, "mamba": nn.KindMamba,
	"full_attention": lm.KindFull, "attention": lm.KindFull,
	"mlp": KindMLP, "moe": KindMoE,
}

// Resolve reads a NemotronHForCausalLM config.json.
func Resolve(cfg *config.File) (Options, error) {
	where := lm.ConfigName(cfg)
	var c Config
	if err := cfg.Decode(&c); err != nil {
		return Options{}, err
	}
	kinds, err := c.kinds(where)
	if err != nil {
		return Options{}, err
	}
	s := lm.Spec{
		Architecture: cfg.Architecture(), ModelType: "nemotron_h",
		VocabSize: lm.Or(c.VocabSize, defVocab), Hidden: lm.Or(c.HiddenSize, defHidden),
		Intermediate: lm.Or(c.IntermediateSize, defInter), Layers: len(kinds),
		Heads: lm.Or(c.NumAttentionHeads, defHeads), KVHeads: lm.Or(c.NumKeyValueHeads, defKVHeads),
		HeadDim: lm.Or(c.HeadDim, defHeadDim), MaxPositions: lm.Or(c.MaxPositionEmbeddings, defMaxPos),
		TieEmbeddings: lm.Or(c.TieWordEmbeddings, false), LayerKinds: kinds, BOS: defBOS, EOS: []int{defEOS},
	}
	if !slices.Contains(kinds, KindMLP) {
		// Without MLP layers intermediate_size is unread; Spec's is the
		// width --tp splits, the experts'.
		s.Intermediate = lm.Or(c.MoEIntermediateSize, defMoEInter)
	}
	if len(c.BOSTokenID) > 0 {
		s.BOS = c.BOSTokenID[0]
	} else if cfg.Has("bos_token_id") {
		s.BOS = -1
	}
	if len(c.EOSTokenID) > 0 || cfg.Has("eos_token_id") {
		s.EOS = c.EOSTokenID
	}
	if err := s.CheckSizes(where); err != nil {
		return Options{}, err
	}
	if n := lm.Or(c.NumHiddenLayers, s.Layers); n != s.Layers {
		return Options{}, fmt.Errorf("%s: num_hidden_layers %d, but the layer types name %d layers", where, n, s.Layers)
	}
	if raw := strings.TrimSpace(string(c.SlidingWindow)); raw != "" && raw != "null" {
		return Options{}, errs.Unsupportedf("%s: sliding_window %s: NemotronH's attention layers attend in full", where, raw)
	}
	for _, a := range []struct {
		name, want string
		v          *string
	}{{"mlp_hidden_act", "relu2", c.MLPHiddenAct}, {"mamba_hidden_act", "silu", c.MambaHiddenAct}} {
		if got := lm.Or(a.v, a.want); got != a.want {
			return Options{}, errs.Unsupportedf("%s: %s %q is not supported (NemotronH's is %s)", where, a.name, got, a.want)
		}
	}
	if c.ResidualInFP32 {
		return Options{}, errs.Unsupportedf("%s: residual_in_fp32 is true; tputool keeps the residual in the compute dtype", where)
	}
	o := Options{
		Spec: s, Eps: lm.Or(c.LayerNormEpsilon, defEps), Chunk: chunk,
		ConvBias: lm.Or(c.MambaConvBias, lm.Or(c.UseConvBias, true)), ProjBias: c.UseBias, MLPBias: c.MLPBias,
		Mamba: nn.Mamba2Dims{
			Heads: lm.Or(c.MambaNumHeads, defMambaHeads), HeadDim: lm.Or(c.MambaHeadDim, defMambaHead),
			State: lm.Or(c.SSMStateSize, defState), Groups: lm.Or(c.MambaNGroups, lm.Or(c.NGroups, defGroups)),
			ConvKernel: lm.Or(c.MambaDConv, lm.Or(c.ConvKernel, defConv)),
		},
		Router: nn.GroupRouter{
			Experts: lm.Or(c.NRoutedExperts, defExperts), TopK: lm.Or(c.NumExpertsPerTok, defTopK),
			Groups: lm.Or(c.NGroup, 1), TopKGroup: lm.Or(c.TopKGroup, 1),
			NormTopK: lm.Or(c.NormTopKProb, true), Scale: lm.Or(c.RoutedScalingFactor, 1),
		},
		MoEIntermediate: lm.Or(c.MoEIntermediateSize, defMoEInter), Latent: lm.Or(c.MoELatentSize, 0),
	}
	if lm.Or(c.NSharedExperts, defShared) > 0 {
		o.Shared = lm.Or(c.SharedIntermediate, defMoEInter)
	}
	if err := o.check(where); err != nil {
		return Options{}, err
	}
	return o, nil
}

// kinds reads the layer types: layers_block_type (or layer_types), else
// hybrid_override_pattern, else NemotronHConfig's default four layers.
func (c *Config) kinds(where string) ([]string, error) {
	types := c.LayersBlockType
	if len(types) == 0 {
		types = c.LayerTypes
	}
	if len(types) == 0 && c.Pattern != nil && *c.Pattern != "" { // the list wins, as NemotronHConfig reads them
		var kinds []string
		for i, r := range *c.Pattern {
			k, ok := patternKinds[r]
			if !ok {
				return nil, errs.Unsupportedf("%s: hybrid_override_pattern[%d] is %q (want M, *, - or E)", where, i, string(r))
			}
			kinds = append(kinds, k)
		}
		return kinds, nil
	}
	if len(types) == 0 {
		types = []string{"linear_attention", "moe", "full_attention", "mlp"}
	}
	kinds := make([]string, len(types))
	for i, t := range types {
		k, ok := typeKinds[t]
		if !ok {
			return nil, errs.Unsupportedf("%s: layers_block_type[%d] is %q (want linear_attention, full_attention, mlp or moe)", where, i, t)
		}
		kinds[i] = k
	}
	return kinds, nil
}

// check reports sizes that do not fit together, naming the field.
func (o *Options) check(where string) error {
	s := &o.Spec
	has := map[string]bool{}
	for _, k := range s.LayerKinds {
		has[k] = true
	}
	if has[nn.KindMamba] {
		if err := o.Mamba.Validate(where, mambaNames); err != nil {
			return err
		}
	}
	if has[KindMLP] && s.Intermediate <= 0 {
		return fmt.Errorf("%s: intermediate_size %d must be positive", where, s.Intermediate)
	}
	if !has[KindMoE] {
		return nil
	}
	r := o.Router
	switch {
	case r.Experts <= 0 || r.TopK <= 0 || r.TopK > r.Experts:
		return fmt.Errorf("%s: n_routed_experts %d must be positive and num_experts_per_tok %d in [1, n_routed_experts]", where, r.Experts, r.TopK)
	case r.Groups <= 0 || r.Experts%r.Groups != 0 || r.TopKGroup <= 0 || r.TopKGroup > r.Groups:
		return fmt.Errorf("%s: n_group %d must divide n_routed_experts %d and topk_group %d be in [1, n_group]", where, r.Groups, r.Experts, r.TopKGroup)
	case r.Groups > 1 && r.Experts/r.Groups < 2:
		return fmt.Errorf("%s: n_group %d leaves fewer than 2 experts a group (each group is ranked by its best two)", where, r.Groups)
	case r.Groups > 1 && r.TopK > r.TopKGroup*(r.Experts/r.Groups):
		return fmt.Errorf("%s: num_experts_per_tok %d exceeds the %d experts of topk_group %d groups", where, r.TopK, r.TopKGroup*(r.Experts/r.Groups), r.TopKGroup)
	case o.MoEIntermediate <= 0 || o.Shared < 0 || o.Latent < 0:
		return fmt.Errorf("%s: moe_intermediate_size %d must be positive, moe_shared_expert_intermediate_size %d and moe_latent_size %d not negative", where, o.MoEIntermediate, o.Shared, o.Latent)
	case o.Latent > 0 && o.MLPBias:
		return errs.Unsupportedf("%s: moe_latent_size with mlp_bias: the latent projections' biases are not supported", where)
	}
	return lm.CheckExperts(where, "n_routed_experts", r.Experts, s.Layers)
}

// New builds the model from its config.json.
func New(cfg *config.File) (lm.Model, error) {
	o, err := Resolve(cfg)
	if err != nil {
		return nil, err
	}
	return NewModel(o), nil
}

// Model is the NemotronH decoder; it implements lm.Model, lm.Routed,
// lm.Renamer and lm.FinalWeighter.
type Model struct{ o Options }

// NewModel returns the decoder for resolved options.
func NewModel(o Options) *Model { return &Model{o: o} }

// Options returns the resolved options.
func (m *Model) Options() Options { return m.o }

// Spec implements lm.Model.
func (m *Model) Spec() *lm.Spec { return &m.o.Spec }

// LayerKind implements lm.Model.
func (m *Model) LayerKind(i int) string { return m.o.Spec.LayerKinds[i] }

// LayerState implements lm.Model: a KV cache for an attention layer, the
// Mamba-2 state for a Mamba layer, nothing for an MLP or MoE layer.
func (m *Model) LayerState(i int, batch, cacheLen int) []lm.StateSpec {
	s := &m.o.Spec
	switch m.LayerKind(i) {
	case nn.KindMamba:
		return nn.Mamba2State(m.o.Mamba, batch)
	case lm.KindFull:
		return nn.KVCacheState(batch, s.KVHeads, cacheLen, s.HeadDim)
	}
	return nil
}

// EmbedWeights implements lm.Model.
func (m *Model) EmbedWeights() []lm.WeightSpec {
	s := &m.o.Spec
	return []lm.WeightSpec{{Name: "backbone.embeddings.weight", Shape: []int{s.VocabSize, s.Hidden}, Matmul: true}}
}

// FinalWeights implements lm.FinalWeighter: norm_f.
func (m *Model) FinalWeights() []lm.WeightSpec {
	return []lm.WeightSpec{{Name: "backbone.norm_f.weight", Shape: []int{m.o.Spec.Hidden}}}
}

func (m *Model) headName() string {
	if m.o.Spec.TieEmbeddings {
		return "backbone.embeddings.weight"
	}
	return "lm_head.weight"
}

// HeadWeights implements lm.Model.
func (m *Model) HeadWeights() []lm.WeightSpec {
	s := &m.o.Spec
	tp := lm.Vocab
	if s.TieEmbeddings {
		tp = lm.Replicated
	}
	return append(m.FinalWeights(), lm.WeightSpec{Name: m.headName(), Shape: []int{s.VocabSize, s.Hidden}, Matmul: true, TP: tp})
}

// expertsPrefix is layer i's "….mixer.experts" name prefix.
func expertsPrefix(i int) string { return fmt.Sprintf("backbone.layers.%d.mixer.experts", i) }

// expertWeights are expert e's tensors under prefix (one per projection,
// as the releases store them): up_proj [inter, in] and down_proj [in,
// inter], in the experts' input width.
func expertWeights(prefix string, e, inter, in int) []lm.WeightSpec {
	p := fmt.Sprintf("%s.%d.", prefix, e)
	return []lm.WeightSpec{
		{Name: p + "up_proj.weight", Shape: []int{inter, in}, Matmul: true, TP: lm.Column},
		{Name: p + "down_proj.weight", Shape: []int{in, inter}, Matmul: true, TP: lm.Row},
	}
}

// expertsIn is the experts' input width: moe_latent_size, or hidden_size.
func (m *Model) expertsIn() int {
	if m.o.Latent > 0 {
		return m.o.Latent
	}
	return m.o.Spec.Hidden
}

// LayerWeights implements lm.Model, with the releases' names.
func (m *Model) LayerWeights(i int) []lm.WeightSpec {
	s, d := &m.o.Spec, m.o.Mamba
	p := fmt.Sprintf("backbone.layers.%d.", i)
	var ws []lm.WeightSpec
	add := func(name string, matmul bool, tp lm.TPSplit, shape ...int) {
		ws = append(ws, lm.WeightSpec{Name: p + name, Shape: shape, Matmul: matmul, TP: tp})
	}
	add("norm.weight", false, lm.Replicated, s.Hidden)
	switch m.LayerKind(i) {
	case nn.KindMamba:
		ws = append(ws, nn.Mamba2Weights(p+"mixer.", d, s.Hidden, m.o.ConvBias, m.o.ProjBias)...)
	case lm.KindFull:
		q, kv := s.Heads*s.HeadDim, s.KVHeads*s.HeadDim
		add("mixer.q_proj.weight", true, lm.Column, q, s.Hidden)
		add("mixer.k_proj.weight", true, lm.KVColumn, kv, s.Hidden)
		add("mixer.v_proj.weight", true, lm.KVColumn, kv, s.Hidden)
		add("mixer.o_proj.weight", true, lm.Row, s.Hidden, q)
	case KindMLP:
		add("mixer.up_proj.weight", true, lm.Column, s.Intermediate, s.Hidden)
		add("mixer.down_proj.weight", true, lm.Row, s.Hidden, s.Intermediate)
		if m.o.MLPBias {
			add("mixer.up_proj.bias", false, lm.Column, s.Intermediate)
			add("mixer.down_proj.bias", false, lm.Replicated, s.Hidden)
		}
	case KindMoE:
		r := m.o.Router
		add("mixer.gate.weight", true, lm.Replicated, r.Experts, s.Hidden)
		ws[len(ws)-1].Router = true
		ws = append(ws, lm.WeightSpec{Name: p + "mixer.gate.e_score_correction_bias", Shape: []int{r.Experts}, F32: true})
		in, inter := m.expertsIn(), m.o.MoEIntermediate
		prefix := expertsPrefix(i)
		up := lm.WeightSpec{Name: prefix + ".up_proj", Shape: []int{r.Experts, inter, in}, Matmul: true, TP: lm.Column}
		down := lm.WeightSpec{Name: prefix + ".down_proj", Shape: []int{r.Experts, in, inter}, Matmul: true, TP: lm.Row}
		for e := 0; e < r.Experts; e++ {
			ew := expertWeights(prefix, e, inter, in)
			up.Parts = append(up.Parts, ew[0])
			down.Parts = append(down.Parts, ew[1])
		}
		ws = append(ws, up, down)
		if m.o.Latent > 0 {
			add("mixer.fc1_latent_proj.weight", true, lm.Replicated, m.o.Latent, s.Hidden)
			add("mixer.fc2_latent_proj.weight", true, lm.Replicated, s.Hidden, m.o.Latent)
		}
		if sh := m.o.Shared; sh > 0 {
			add("mixer.shared_experts.up_proj.weight", true, lm.Column, sh, s.Hidden)
			add("mixer.shared_experts.down_proj.weight", true, lm.Row, s.Hidden, sh)
			if m.o.MLPBias {
				add("mixer.shared_experts.up_proj.bias", false, lm.Column, sh)
				add("mixer.shared_experts.down_proj.bias", false, lm.Replicated, s.Hidden)
			}
		}
	}
	return ws
}

// SkipWeight implements lm.Skipper: the multi-token-prediction layers
// (mtp.*, num_nextn_predict_layers), which transformers skips on load
// too.
func (m *Model) SkipWeight(name string) (string, bool) {
	if strings.HasPrefix(name, "mtp.") {
		return "multi-token-prediction layers (mtp.*): not used for generation", true
	}
	return "", false
}

// v5Name matches a transformers v5 save's names: model.* for backbone.*.
var v5Name = regexp.MustCompile(`^model\.`)

// RenameWeight implements lm.Renamer: a transformers v5 save's model.*
// is read as the releases' backbone.*.
func (m *Model) RenameWeight(stored string) string {
	return v5Name.ReplaceAllString(stored, "backbone.")
}

// Embed implements lm.Model: the embeddings, unscaled.
func (m *Model) Embed(w *lm.Params, tokens *Node) *Node {
	return nn.Embedding(w.Get("backbone.embeddings.weight"), tokens)
}

// Layer implements lm.Model: NemotronHBlock, x + mixer(norm(x)).
func (m *Model) Layer(i int, w *lm.Params, x *Node, state []*Node, step *lm.Step) (*Node, []*Node) {
	p := w.Scope(fmt.Sprintf("backbone.layers.%d", i))
	h := nn.RMSNorm(x, p.Get("norm.weight"), m.o.Eps, false)
	mp := p.Scope("mixer")
	var out []*Node
	switch m.LayerKind(i) {
	case nn.KindMamba:
		h, out = m.mamba(mp, h, state, step)
	case lm.KindFull:
		h, out = m.attention(mp, h, state, step)
	case KindMLP:
		h = m.mlp(mp, "", h, m.o.MLPBias)
	case KindMoE:
		ids, weights := m.route(mp, h)
		h = Add(m.shared(mp, h), m.experts(mp, i, h, ids, weights, step.GatherExperts))
	}
	return Add(x, h), out
}

// mamba is the Zamba2MambaMixer of NemotronH: nn.Mamba2 with the gated
// norm per group.
func (m *Model) mamba(mp *lm.Params, h *Node, state []*Node, step *lm.Step) (*Node, []*Node) {
	params := nn.Mamba2ParamsOf(mp, m.o.ConvBias, m.o.ProjBias)
	y, conv, ssm := nn.Mamba2(m.o.Mamba, params, h, state[0], state[1], step, m.o.Eps, m.o.Mamba.Groups, m.o.Chunk)
	return y, []*Node{conv, ssm}
}

// attention is JambaAttention: grouped-query attention of head_dim over
// the KV cache, scaled by 1/sqrt(head_dim), with no positional embedding.
func (m *Model) attention(mp *lm.Params, h *Node, state []*Node, step *lm.Step) (*Node, []*Node) {
	s := &m.o.Spec
	q := nn.SplitHeads(nn.Linear(h, mp.Get("q_proj.weight"), nil), s.Heads)
	k := nn.SplitHeads(nn.Linear(h, mp.Get("k_proj.weight"), nil), s.KVHeads)
	v := nn.SplitHeads(nn.Linear(h, mp.Get("v_proj.weight"), nil), s.KVHeads)
	c := nn.WriteKV(nn.KVOf(state), k, v, step)
	out := nn.Attention(q, c, nn.AttentionBias(step, 0), 0, 0)
	return nn.Linear(out, mp.Get("o_proj.weight"), nil), c.State()
}

// mlp is NemotronMLP under prefix: down_proj(relu²(up_proj(x))).
func (m *Model) mlp(mp *lm.Params, prefix string, x *Node, withBias bool) *Node {
	bias := func(name string) *Node {
		if !withBias {
			return nil
		}
		return mp.Get(prefix + name)
	}
	return nn.Linear(nn.ReLU2(nn.Linear(x, mp.Get(prefix+"up_proj.weight"), bias("up_proj.bias"))), mp.Get(prefix+"down_proj.weight"), bias("down_proj.bias"))
}

// shared is the MoE layer's shared expert on h, or zeros without one.
func (m *Model) shared(mp *lm.Params, h *Node) *Node {
	if m.o.Shared == 0 {
		return ZerosLike(h)
	}
	return m.mlp(mp, "shared_experts.", h, m.o.MLPBias)
}

// route is DeepseekV3TopkRouter and route_tokens_to_experts on h [B, T,
// H]: the float32 router logits' sigmoids, routed by nn.GroupRouter with
// the correction bias. Returns ids and weights [B·T, K].
func (m *Model) route(mp *lm.Params, h *Node) (ids, weights *Node) {
	dims := h.Shape().Dimensions
	h2 := ConvertDType(Reshape(h, dims[0]*dims[1], dims[2]), dtypes.Float32)
	logits := nn.Linear(h2, ConvertDType(mp.Get("gate.weight"), dtypes.Float32), nil) // [N, E]
	return m.o.Router.Route(Sigmoid(logits), mp.Get("gate.e_score_correction_bias"))
}

// experts is NemotronHMoE's routed part on h [B, T, H]: the chosen relu²
// experts (through the latent projections when the model has them),
// weighed; [B, T, H].
func (m *Model) experts(mp *lm.Params, i int, h, ids, weights *Node, gather bool) *Node {
	dims := h.Shape().Dimensions
	b, t, hd := dims[0], dims[1], dims[2]
	in := Reshape(h, b*t, hd)
	if m.o.Latent > 0 {
		in = nn.Linear(in, mp.Get("fc1_latent_proj.weight"), nil)
	}
	ep := mp.Scope("experts")
	y := nn.ExpertStack{Gate: ep.Get("up_proj"), Down: ep.Get("down_proj"), Act: nn.ReLU2, Ungated: true}.Routed(in, ids, weights, gather)
	if m.o.Latent > 0 {
		y = nn.Linear(y, mp.Get("fc2_latent_proj.weight"), nil)
	}
	return Reshape(y, b, t, hd)
}

// Experts implements lm.Routed: expert e of an MoE layer reads its parts
// of the stacks (and the latent projections, which every expert applies
// in the one-by-one formulations); nil for the other layers.
func (m *Model) Experts(i int) *lm.Experts {
	if m.LayerKind(i) != KindMoE {
		return nil
	}
	prefix := expertsPrefix(i)
	return &lm.Experts{Num: m.o.Router.Experts, TopK: m.o.Router.TopK, Weights: func(e int) []lm.WeightSpec {
		ws := expertWeights(prefix, e, m.o.MoEIntermediate, m.expertsIn())
		if m.o.Latent > 0 {
			lw := m.LayerWeights(i)
			for _, w := range lw {
				if strings.HasSuffix(w.Name, "_latent_proj.weight") {
					ws = append(ws, w)
				}
			}
		}
		return ws
	}}
}

// Expert implements lm.Routed: down_proj(relu²(up_proj(x))), inside the
// latent projections when the model has them (the projections are
// linear and without biases, so the weighted sum of the experts through
// fc2 is fc2 of their weighted sum).
func (m *Model) Expert(i, e int, w *lm.Params, x *Node) *Node {
	mp := w.Scope(fmt.Sprintf("backbone.layers.%d.mixer", i))
	if m.o.Latent > 0 {
		x = nn.Linear(x, mp.Get("fc1_latent_proj.weight"), nil)
	}
	y := m.mlp(mp, fmt.Sprintf("experts.%d.", e), x, false)
	if m.o.Latent > 0 {
		y = nn.Linear(y, mp.Get("fc2_latent_proj.weight"), nil)
	}
	return y
}

// Route implements lm.Routed: an MoE layer up to its routed experts: the
// residual with the shared expert added, the normed input and the
// router's choice.
func (m *Model) Route(i int, w *lm.Params, x *Node, state []*Node, step *lm.Step) (*lm.Routing, []*Node) {
	p := w.Scope(fmt.Sprintf("backbone.layers.%d", i))
	h := nn.RMSNorm(x, p.Get("norm.weight"), m.o.Eps, false)
	mp := p.Scope("mixer")
	ids, weights := m.route(mp, h)
	dims := h.Shape().Dimensions
	b, t, k := dims[0], dims[1], m.o.Router.TopK
	return &lm.Routing{Residual: Add(x, m.shared(mp, h)), Input: h, Experts: Reshape(ids, b, t, k), Weights: Reshape(weights, b, t, k)}, nil
}

// Final implements lm.Finisher: norm_f.
func (m *Model) Final(w *lm.Params, x *Node) *Node {
	return nn.RMSNorm(x, w.Get("backbone.norm_f.weight"), m.o.Eps, false)
}

// Head implements lm.Model: norm_f and lm_head.
func (m *Model) Head(w *lm.Params, x *Node) *Node {
	return nn.Linear(m.Final(w, x), w.Get(m.headName()), nil)
}

var (
	_ lm.Routed        = (*Model)(nil)
	_ lm.Renamer       = (*Model)(nil)
	_ lm.Skipper       = (*Model)(nil)
	_ lm.Finisher      = (*Model)(nil)
	_ lm.FinalWeighter = (*Model)(nil)
)
