package minimax

// MiniMax-Text-01 and MiniMax-M1 (456B parameters, 45.9B active), after
// transformers' models/minimax (MiniMaxForCausalLM, the -hf releases) and
// the releases' own code (MiniMaxText01ForCausalLM, MiniMaxM1ForCausalLM).
//
// Layers are lightning (linear) attention or softmax attention, seven to
// one in the releases (layer_types, or the original attn_type_list: 0
// lightning, 1 softmax), each followed by Mixtral's sparse block (the
// softmax's top num_experts_per_tok of num_local_experts, renormalized;
// SwiGLU experts w1, w3, w2 under block_sparse_moe). Lightning attention
// (MiniMaxLightningAttention) projects the normed input to q, k and v per
// head (qkv_proj [heads·3·head_dim, hidden], each head's q, k, v in
// turn) through hidden_act, and runs linear attention with a fixed decay
// per head and layer:
//
//	S_t = exp(-s)·S_{t-1} + k_tᵀ v_t,   o_t = q_t S_t,
//	s_h = 2^(-8(h+1)/heads) · (1 - l/(layers-1+1e-5) + 1e-5)
//
// then an RMSNorm over all heads at once (norm, eps 1e-6), a sigmoid
// gate from the layer's input (output_gate) and out_proj. That is
// Mamba-2's state space recurrence with dt 1, A = -s, B = k, C = q and
// x = v, so it runs nn.ChunkSSD for prompts and nn.RecurrentSSD for a
// step; the state is [heads, head_dim, head_dim] float32 per sequence,
// whatever the context. Softmax attention is Llama's grouped-query
// attention with the rotary embedding on the first rotary_dim dims of
// each head (the releases turn 64 of 128; transformers' MiniMaxConfig
// drops rotary_dim and turns every dim, as its MiniMax-M2 did before
// transformers#48486: tputool follows the releases and vLLM).
//
// Each residual is weighed: after the attention, x·alpha + attn·beta
// with the full_attn_ or linear_attn_ factors, after the experts with
// the mlp_ factors (the releases: alpha 3.5566, beta 1). With postnorm,
// as transformers always runs it and the releases set it, the x of each
// residual is the sublayer's normed input, not the stream before the
// norm.

import (
	"fmt"
	"math"
	"regexp"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/llama"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/mixtral"
	"github.com/tputool/tputool/pipeline/nn"
	"github.com/tputool/tputool/pipeline/qwen3moe"
)

func init() {
	lm.Register("MiniMaxForCausalLM", NewText01)
	lm.Register("MiniMaxText01ForCausalLM", NewText01)
	lm.Register("MiniMaxM1ForCausalLM", NewText01)
}

// Text01Config is a MiniMax-Text-01 or MiniMax-M1 config.json:
// transformers' fields, and the releases' own names for the same
// things.
type Text01Config struct {
	llama.Config
	RotaryDim        *int `json:"rotary_dim"`
	NumLocalExperts  *int `json:"num_local_experts"`
	NumExperts       *int `json:"num_experts"`
	NumExpertsPerTok *int `json:"num_experts_per_tok"`
	BlockSize        *int `json:"block_size"`
	SlidingWindow    *int `json:"sliding_window"`
	// transformers' residual factors.
	FullAlpha   *float64 `json:"full_attn_alpha_factor"`
	FullBeta    *float64 `json:"full_attn_beta_factor"`
	LinearAlpha *float64 `json:"linear_attn_alpha_factor"`
	LinearBeta  *float64 `json:"linear_attn_beta_factor"`
	MLPAlpha    *float64 `json:"mlp_alpha_factor"`
	MLPBeta     *float64 `json:"mlp_beta_factor"`
	// The releases' names: attn_type_list (0 lightning, 1 softmax), the
	// layernorm_* factors, postnorm, the optional shared expert.
	AttnTypeList           []int    `json:"attn_type_list"`
	LNFullAlpha            *float64 `json:"layernorm_full_attention_alpha"`
	LNFullBeta             *float64 `json:"layernorm_full_attention_beta"`
	LNLinearAlpha          *float64 `json:"layernorm_linear_attention_alpha"`
	LNLinearBeta           *float64 `json:"layernorm_linear_attention_beta"`
	LNMLPAlpha             *float64 `json:"layernorm_mlp_alpha"`
	LNMLPBeta              *float64 `json:"layernorm_mlp_beta"`
	Postnorm               *bool    `json:"postnorm"`
	SharedIntermediateSize *int     `json:"shared_intermediate_size"`
}

// Text01Defaults are MiniMaxConfig's (Mixtral's sizes; rope_theta 1e6).
var Text01Defaults = llama.Defaults{
	VocabSize: 32000, Hidden: 4096, Intermediate: 14336, Layers: 32, Heads: 32,
	MaxPositions: 4096 * 32, Eps: 1e-5, RopeTheta: 1e6, Tie: false, Act: "silu",
	KVHeads: 8, BOS: []int{1}, EOS: []int{2},
}

// MiniMaxConfig's other defaults.
const (
	text01Experts   = 8
	text01TopK      = 2
	text01BlockSize = 256
	// lightningNormEps is the lightning attention's RMSNorm's eps,
	// MiniMaxRMSNorm's default (not rms_norm_eps).
	lightningNormEps = 1e-6
	// maxLightningChunk caps the prefill's chunk: with the releases'
	// block_size of 256 a 4096-token prompt of a scaled-down model took
	// 12% longer on the CPU engine than with 64 (docs/moe.md).
	maxLightningChunk = 64
)

// Text01Options are the resolved hyperparameters: qwen3moe's decoder
// (Mixtral's block on every layer) plus the lightning layers' and the
// residuals'.
type Text01Options struct {
	qwen3moe.Options
	// Chunk is the lightning prefill's chunk of tokens: block_size, at
	// most maxLightningChunk (the result does not depend on it).
	Chunk int
	// Residual factors: x·Alpha + sublayer·Beta.
	FullAlpha, FullBeta, LinearAlpha, LinearBeta, MLPAlpha, MLPBeta float64
	// Postnorm takes each residual's x after the sublayer's norm.
	Postnorm bool
	// ReleaseSlopes computes the decays as the releases' code does
	// (MiniMaxText01ForCausalLM, MiniMaxM1ForCausalLM): ALiBi's slopes,
	// which differ from transformers' where the head count is no power of
	// two, and a layer factor without transformers' 1e-5 in its
	// denominator.
	ReleaseSlopes bool
}

// ResolveText01 reads a MiniMax-Text-01 or MiniMax-M1 config.json.
func ResolveText01(cfg *config.File) (Text01Options, error) {
	where := lm.ConfigName(cfg)
	var c Text01Config
	if err := cfg.Decode(&c); err != nil {
		return Text01Options{}, err
	}
	if n := lm.Or(c.SharedIntermediateSize, 0); n != 0 {
		return Text01Options{}, errs.Unsupportedf("%s: shared_intermediate_size %d: MiniMax's shared expert is not supported (the releases have none)", where, n)
	}
	if w := c.SlidingWindow; w != nil && *w > 0 {
		return Text01Options{}, errs.Unsupportedf("%s: sliding_window %d is not supported (MiniMax's releases attend in full)", where, *w)
	}
	release := cfg.Architecture() != "MiniMaxForCausalLM"
	layerTypes, attnTypes := c.LayerTypes, c.AttnTypeList
	c.LayerTypes = nil // llama's resolve knows no lightning layers
	base, err := c.Resolve(cfg, Text01Defaults)
	if err != nil {
		return Text01Options{}, err
	}
	s := &base.Spec
	if s.LayerKinds, err = text01Kinds(where, layerTypes, attnTypes, s.Layers, release); err != nil {
		return Text01Options{}, err
	}
	if rot := c.RotaryDim; rot != nil {
		if *rot <= 0 || *rot > s.HeadDim || *rot%2 != 0 {
			return Text01Options{}, fmt.Errorf("%s: rotary_dim %d must be even and in [2, head_dim %d]", where, *rot, s.HeadDim)
		}
		raw, err := withPartialRotary(cfg.Raw, *rot, s.HeadDim)
		if err != nil {
			return Text01Options{}, fmt.Errorf("%s: %w", where, err)
		}
		if base.Rope, err = nn.ConfigRope(raw, Text01Defaults.RopeTheta, s.HeadDim, s.MaxPositions); err != nil {
			return Text01Options{}, fmt.Errorf("%s: rotary_dim %d: %w", where, *rot, err)
		}
	}
	base.QKVBias, base.OBias, base.MLPBias = false, false, false
	o := Text01Options{
		Options: qwen3moe.Options{
			Options:         base,
			Experts:         lm.Or(c.NumLocalExperts, lm.Or(c.NumExperts, text01Experts)),
			TopK:            lm.Or(c.NumExpertsPerTok, text01TopK),
			MoEIntermediate: s.Intermediate,
			NormTopK:        true,
			Sparse:          make([]bool, s.Layers),
		},
		Chunk:       lm.Or(c.BlockSize, text01BlockSize),
		FullAlpha:   factor(c.FullAlpha, c.LNFullAlpha),
		FullBeta:    factor(c.FullBeta, c.LNFullBeta),
		LinearAlpha: factor(c.LinearAlpha, c.LNLinearAlpha),
		LinearBeta:  factor(c.LinearBeta, c.LNLinearBeta),
		MLPAlpha:    factor(c.MLPAlpha, c.LNMLPAlpha),
		MLPBeta:     factor(c.MLPBeta, c.LNMLPBeta),
		// transformers' slopes for its class; the releases' code's for
		// theirs.
		ReleaseSlopes: release,
	}
	// transformers' MiniMaxDecoderLayer always takes the normed input as
	// the residual; the releases' code does when postnorm is set.
	switch arch := cfg.Architecture(); {
	case arch == "MiniMaxForCausalLM" && c.Postnorm != nil && !*c.Postnorm:
		return Text01Options{}, errs.Unsupportedf("%s: postnorm is false, which transformers' MiniMaxForCausalLM does not read (it always adds the normed input); name the architecture MiniMaxText01ForCausalLM to run the releases' pre-norm residual", where)
	case arch == "MiniMaxForCausalLM":
		o.Postnorm = true
	default:
		o.Postnorm = lm.Or(c.Postnorm, false)
	}
	if o.Chunk <= 0 {
		return Text01Options{}, fmt.Errorf("%s: block_size must be positive, got %d", where, o.Chunk)
	}
	o.Chunk = min(o.Chunk, maxLightningChunk)
	if o.Experts <= 0 || o.TopK <= 0 || o.TopK > o.Experts {
		return Text01Options{}, fmt.Errorf("%s: num_local_experts %d must be positive and num_experts_per_tok %d in [1, num_local_experts]", where, o.Experts, o.TopK)
	}
	if err := lm.CheckExperts(where, "num_local_experts", o.Experts, s.Layers); err != nil {
		return Text01Options{}, err
	}
	for i := range o.Sparse {
		o.Sparse[i] = true
	}
	return o, nil
}

// factor is a residual factor: transformers' name, else the releases',
// else 1.
func factor(hf, orig *float64) float64 {
	switch {
	case hf != nil:
		return *hf
	case orig != nil:
		return *orig
	}
	return 1
}

// text01Kinds are the layers' kinds: layer_types, else attn_type_list,
// else MiniMaxConfig's default (even layers softmax, odd lightning), or
// for the releases' architectures (release) vLLM's (every layer softmax;
// the releases' code has none).
func text01Kinds(where string, layerTypes []string, attnTypes []int, layers int, release bool) ([]string, error) {
	if len(layerTypes) > 0 {
		return lm.LayerTypes(where, layerTypes, layers, nn.KindLinearAttention, lm.KindFull)
	}
	kinds := make([]string, layers)
	if len(attnTypes) > 0 {
		if len(attnTypes) != layers {
			return nil, fmt.Errorf("%s: attn_type_list has %d entries for %d layers", where, len(attnTypes), layers)
		}
		for i, t := range attnTypes {
			switch t {
			case 0:
				kinds[i] = nn.KindLinearAttention
			case 1:
				kinds[i] = lm.KindFull
			default:
				return nil, fmt.Errorf("%s: attn_type_list[%d] is %d, want 0 (lightning) or 1 (softmax)", where, i, t)
			}
		}
		return kinds, nil
	}
	for i := range kinds {
		kinds[i] = lm.KindFull
		if i%2 == 1 && !release {
			kinds[i] = nn.KindLinearAttention
		}
	}
	return kinds, nil
}

// NewText01 builds the model from its config.json.
func NewText01(cfg *config.File) (lm.Model, error) {
	o, err := ResolveText01(cfg)
	if err != nil {
		return nil, err
	}
	return &Text01Model{Model: qwen3moe.NewModelIn(o.Options, mixtral.Layout), o: o}, nil
}

// Text01Model is a MiniMax-Text-01 decoder: pipeline/qwen3moe's in
// Mixtral's layout (embedding, head, softmax attention, experts), its
// layers' attention half its own. It implements lm.Routed, lm.Renamer,
// lm.Skipper and lm.Varianter.
type Text01Model struct {
	*qwen3moe.Model
	o Text01Options
}

// Text01Options returns the resolved options.
func (m *Text01Model) Text01Options() Text01Options { return m.o }

func (m *Text01Model) lightning(i int) bool { return m.LayerKind(i) == nn.KindLinearAttention }

// LayerState implements lm.Model: a KV cache for a softmax layer, the
// [heads, head_dim, head_dim] float32 state of a lightning layer.
func (m *Text01Model) LayerState(i int, batch, cacheLen int) []lm.StateSpec {
	if !m.lightning(i) {
		return m.Model.LayerState(i, batch, cacheLen)
	}
	s := m.Spec()
	return []lm.StateSpec{{Name: "lightning", Shape: []int{batch, s.Heads, s.HeadDim, s.HeadDim}, DType: dtypes.Float32, SlotAxis: lm.NoSlots}}
}

// LayerWeights implements lm.Model: the attention or the lightning
// attention, the norms, the router and the experts.
func (m *Text01Model) LayerWeights(i int) []lm.WeightSpec {
	ws := m.Model.LayerWeights(i)
	if !m.lightning(i) {
		return ws
	}
	s := m.Spec()
	p := fmt.Sprintf("model.layers.%d.self_attn.", i)
	inner := s.Heads * s.HeadDim
	out := []lm.WeightSpec{
		// Replicated: the norm spans every head, so the heads stay together.
		{Name: p + "qkv_proj.weight", Shape: []int{3 * inner, s.Hidden}, Matmul: true},
		{Name: p + "output_gate.weight", Shape: []int{inner, s.Hidden}, Matmul: true},
		{Name: p + "norm.weight", Shape: []int{inner}},
		{Name: p + "out_proj.weight", Shape: []int{s.Hidden, inner}, Matmul: true},
	}
	for _, w := range ws {
		if len(w.Name) < len(p) || w.Name[:len(p)] != p { // the softmax attention's projections
			out = append(out, w)
		}
	}
	return out
}

// LayerVariant implements lm.Varianter: each lightning layer decays at
// rates of its own, built into its graph ("lightning" and the layer's
// index), so eager executables are not shared among them.
func (m *Text01Model) LayerVariant(i int) string {
	if m.lightning(i) {
		return fmt.Sprintf("lightning%d", i)
	}
	return m.Model.LayerVariant(i)
}

// slopes are lightning layer i's decay rates per head: transformers'
// MiniMaxLightningAttention.get_slope_rate, base^(h+1) with base
// 2^(-8/heads), times 1 - i/(layers-1+1e-5) + 1e-5; or the releases'
// (ReleaseSlopes), ALiBi's slopes times 1 - i/(layers-1) + 1e-5.
func (m *Text01Model) slopes(i int) []float32 {
	s := m.Spec()
	rates := make([]float64, s.Heads)
	var f float64
	if m.o.ReleaseSlopes {
		rates = nn.ALiBiSlopes(s.Heads)
		f = 1 + 1e-5
		if s.Layers > 1 {
			f -= float64(i) / float64(s.Layers-1)
		}
	} else {
		base := 1 / math.Pow(2, 8/float64(s.Heads))
		for h := range rates {
			rates[h] = math.Pow(base, float64(h+1))
		}
		f = 1 - float64(i)/(float64(s.Layers-1)+1e-5) + 1e-5
	}
	out := make([]float32, s.Heads)
	for h, r := range rates {
		out[h] = float32(r * f)
	}
	return out
}

// lightningAttention is layer i's MiniMaxLightningAttention on h [B, T,
// hidden], the layer's normed input, continued from state [B, heads,
// head_dim (v), head_dim (k)] float32; padding tokens neither decay nor
// add to the state.
func (m *Text01Model) lightningAttention(i int, p *lm.Params, h, state *Node, step *lm.Step) (*Node, *Node) {
	s := m.Spec()
	dims := h.Shape().Dimensions
	b, t := dims[0], dims[1]
	heads, d := s.Heads, s.HeadDim
	dtype := h.DType()
	isReal := nn.RealTokens(step, dtype) // [B, T, 1]
	qkv := Mul(m.o.Act(nn.Linear(h, p.Get("qkv_proj.weight"), nil)), isReal)
	qkv = Reshape(qkv, b, t, heads, 3*d)
	q := SliceAxis(qkv, 3, AxisRange(0, d))
	k := SliceAxis(qkv, 3, AxisRange(d, 2*d))
	v := SliceAxis(qkv, 3, AxisRange(2*d, 3*d))
	g := h.Graph()
	dt := BroadcastToDims(ConvertDType(isReal, dtypes.Float32), b, t, heads) // a step of 1 per real token
	a := Neg(Const(g, m.slopes(i)))
	var y *Node
	if t == 1 {
		y, state = nn.RecurrentSSD(v, dt, a, k, q, state)
	} else {
		y, state = nn.ChunkSSD(v, dt, a, k, q, state, m.o.Chunk)
	}
	y = ConvertDType(Reshape(y, b, t, heads*d), dtype)
	y = nn.RMSNorm(y, p.Get("norm.weight"), lightningNormEps, false)
	y = Mul(Sigmoid(nn.Linear(h, p.Get("output_gate.weight"), nil)), y)
	return nn.Linear(y, p.Get("out_proj.weight"), nil), state
}

// weigh is x·alpha + y·beta.
func weigh(x, y *Node, alpha, beta float64) *Node {
	if alpha != 1 {
		x = MulScalar(x, alpha)
	}
	if beta != 1 {
		y = MulScalar(y, beta)
	}
	return Add(x, y)
}

// Route implements lm.Routed: the attention half of MiniMaxDecoderLayer
// with its weighed residual, the post_attention_layernorm, and the
// router's renormalized top k, the experts' weights times the mlp beta
// and the residual (the normed input with postnorm) times its alpha.
func (m *Text01Model) Route(i int, w *lm.Params, x *Node, state []*Node, step *lm.Step) (*lm.Routing, []*Node) {
	o := &m.o
	p := w.Scope(fmt.Sprintf("model.layers.%d", i))
	h := m.Norm(p, "input_layernorm", x)
	res := x
	if o.Postnorm {
		res = h
	}
	var a *Node
	var out []*Node
	if m.lightning(i) {
		var st *Node
		a, st = m.lightningAttention(i, p.Scope("self_attn"), h, state[0], step)
		x, out = weigh(res, a, o.LinearAlpha, o.LinearBeta), []*Node{st}
	} else {
		a, out = m.SelfAttention(i, w, h, state, step)
		x = weigh(res, a, o.FullAlpha, o.FullBeta)
	}
	h = m.Norm(p, "post_attention_layernorm", x)
	if o.Postnorm {
		x = h
	}
	if o.MLPAlpha != 1 {
		x = MulScalar(x, o.MLPAlpha)
	}
	dims := h.Shape().Dimensions
	bs, t := dims[0], dims[1]
	logits := nn.Linear(Reshape(h, bs*t, dims[2]), p.Get("block_sparse_moe.gate.weight"), nil)
	ids, weights := nn.TopKRouter(logits, o.TopK, true)
	if o.MLPBeta != 1 {
		weights = MulScalar(weights, o.MLPBeta)
	}
	return &lm.Routing{Residual: x, Input: h, Experts: Reshape(ids, bs, t, o.TopK), Weights: Reshape(weights, bs, t, o.TopK)}, out
}

// Layer implements lm.Model: Route, then the chosen experts over the
// stacks.
func (m *Text01Model) Layer(i int, w *lm.Params, x *Node, state []*Node, step *lm.Step) (*Node, []*Node) {
	r, st := m.Route(i, w, x, state, step)
	p := w.Scope(fmt.Sprintf("model.layers.%d.block_sparse_moe.experts", i))
	return nn.FinishRouted(r, p.Get("gate_up_proj"), p.Get("down_proj"), m.o.Act, step.GatherExperts), st
}

// SkipWeight implements lm.Skipper: the lightning layers' buffers a
// transformers save writes (slope_rate, query_decay, key_decay,
// diagonal_decay), which the model computes from the config.
func (m *Text01Model) SkipWeight(name string) (string, bool) {
	if lightningBuffer.MatchString(name) {
		return "lightning attention's decays, computed from the config", true
	}
	return "", false
}

// lightningBuffer matches MiniMaxLightningAttention's registered buffers.
var lightningBuffer = regexp.MustCompile(`\.self_attn\.(slope_rate|query_decay|key_decay|diagonal_decay)$`)

// RenameWeight implements lm.Renamer: a transformers v5 save's
// model.layers.L.mlp.* is read as block_sparse_moe.*.
func (m *Text01Model) RenameWeight(stored string) string {
	return v5Block.ReplaceAllString(stored, "${1}block_sparse_moe.")
}

var (
	_ lm.Routed    = (*Text01Model)(nil)
	_ lm.Renamer   = (*Text01Model)(nil)
	_ lm.Varianter = (*Text01Model)(nil)
	_ lm.Skipper   = (*Text01Model)(nil)
)
