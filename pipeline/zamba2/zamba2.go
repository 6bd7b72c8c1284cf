// Package zamba2 implements Zyphra's Zamba2 (Zamba2ForCausalLM:
// Zamba2-1.2B, 2.7B and 7B, base and instruct), following transformers'
// models/zamba2/modeling_zamba2.py.
//
// Most layers are Mamba-2 mixers alone (input_layernorm, the mixer, the
// residual; no MLP). The hybrid layers (layers_block_type "hybrid") first
// run a transformer block shared between them (num_mem_blocks of them,
// taken in turn by the hybrid layers' order) on the concatenation of the
// hidden states and the original embeddings (2·hidden wide):
// input_layernorm over 2H, attention with heads of 2H/heads scaled by
// (head_dim/2)^-½ (the rotary over whole heads with use_mem_rope), the
// output back to H, pre_ff_layernorm, the fused gate_up GELU MLP, with no
// residual anywhere in the block; per hybrid layer, LoRA adapters on the
// MLP's gate_up (and with use_shared_attention_adapter on q, k and v) and
// a linear projection of the block's output, which joins the hidden
// states only at the input of the layer's own Mamba-2 mixer:
// h + mamba(norm(h + linear(block))). The final norm is
// model.final_layernorm; the head is tied by default.
//
// A shared block's weights are stored once, under its first hybrid
// layer (model.layers.O.shared_transformer.*), with the adapters of every
// hybrid layer that runs it (…_adapter_list.P.{0,1}); each hybrid layer
// lists those names, and lm.Weights reads each once.
//
// The hidden states handed from layer to layer are [B, T, 2H]: the
// residual stream, then the original embeddings.
package zamba2

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"

	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/nn"
)

func init() {
	lm.Register("Zamba2ForCausalLM", New)
}

// Config is a Zamba2ForCausalLM config.json.
type Config struct {
	ModelType                 string          `json:"model_type"`
	VocabSize                 *int            `json:"vocab_size"`
	HiddenSize                *int            `json:"hidden_size"`
	IntermediateSize          *int            `json:"intermediate_size"`
	NumHiddenLayers           *int            `json:"num_hidden_layers"`
	LayersBlockType           []string        `json:"layers_block_type"`
	NumAttentionHeads         *int            `json:"num_attention_heads"`
	NumKeyValueHeads          *int            `json:"num_key_value_heads"`
	MambaDState               *int            `json:"mamba_d_state"`
	MambaDConv                *int            `json:"mamba_d_conv"`
	MambaExpand               *int            `json:"mamba_expand"`
	MambaNGroups              *int            `json:"mamba_ngroups"`
	NMambaHeads               *int            `json:"n_mamba_heads"`
	AddBiasLinear             *bool           `json:"add_bias_linear"`
	ChunkSize                 *int            `json:"chunk_size"`
	TimeStepMin               *float64        `json:"time_step_min"`
	TimeStepLimit             []float64       `json:"time_step_limit"`
	NumMemBlocks              *int            `json:"num_mem_blocks"`
	UseSharedAttentionAdapter *bool           `json:"use_shared_attention_adapter"`
	AdapterRank               *int            `json:"adapter_rank"`
	UseMemRope                *bool           `json:"use_mem_rope"`
	UseLongContext            bool            `json:"use_long_context"`
	RopeTheta                 *float64        `json:"rope_theta"`
	HiddenAct                 string          `json:"hidden_act"`
	RMSNormEps                *float64        `json:"rms_norm_eps"`
	MaxPositionEmbeddings     *int            `json:"max_position_embeddings"`
	TieWordEmbeddings         *bool           `json:"tie_word_embeddings"`
	BOSTokenID                config.IDList   `json:"bos_token_id"`
	EOSTokenID                config.IDList   `json:"eos_token_id"`
	RopeParameters            json.RawMessage `json:"rope_parameters"`
}

// Options are the resolved hyperparameters.
type Options struct {
	Spec lm.Spec
	Eps  float64
	// Hybrid lists the hybrid layers in order; a hybrid layer's ordinal
	// picks its adapters and, modulo Blocks, its shared block.
	Hybrid []int
	Blocks int
	// AttnHeadDim is 2·hidden/heads; Scale the attention's,
	// (AttnHeadDim/2)^-½.
	AttnHeadDim int
	Scale       float64
	// Rope is the rotary over whole heads (use_mem_rope), or nil.
	Rope *nn.Rope
	// AttnAdapters says whether q, k and v have LoRA adapters; Rank is
	// adapter_rank.
	AttnAdapters bool
	Rank         int
	// Bias is add_bias_linear: biases on in_proj, out_proj, gate_up_proj
	// and down_proj.
	Bias  bool
	Mamba nn.Mamba2Dims
	Mixer nn.Mamba2Options
}

// Resolve reads a Zamba2ForCausalLM config.json.
func Resolve(cfg *config.File) (Options, error) {
	where := lm.ConfigName(cfg)
	var c Config
	if err := cfg.Decode(&c); err != nil {
		return Options{}, err
	}
	s := lm.Spec{
		Architecture: cfg.Architecture(),
		ModelType:    c.ModelType,
		VocabSize:    lm.Or(c.VocabSize, 32000),
		Hidden:       lm.Or(c.HiddenSize, 2560),
		Layers:       lm.Or(c.NumHiddenLayers, 54),
		Heads:        lm.Or(c.NumAttentionHeads, 32),
		MaxPositions: lm.Or(c.MaxPositionEmbeddings, 4096),
		EOS:          c.EOSTokenID,
		BOS:          1,
	}
	s.KVHeads = lm.Or(c.NumKeyValueHeads, s.Heads)
	s.Intermediate = lm.Or(c.IntermediateSize, 4*s.Hidden)
	if len(s.EOS) == 0 {
		s.EOS = []int{2}
	}
	if len(c.BOSTokenID) > 0 {
		s.BOS = c.BOSTokenID[0]
	}
	s.TieEmbeddings = lm.Or(c.TieWordEmbeddings, true)
	if s.Heads <= 0 || 2*s.Hidden%s.Heads != 0 {
		return Options{}, fmt.Errorf("%s: num_attention_heads %d must divide the attention's width 2 × hidden_size %d", where, s.Heads, 2*s.Hidden)
	}
	s.HeadDim = 2 * s.Hidden / s.Heads
	if err := s.CheckSizes(where); err != nil {
		return Options{}, err
	}
	o := Options{Spec: s, Eps: lm.Or(c.RMSNormEps, 1e-5), Blocks: lm.Or(c.NumMemBlocks, 1), Rank: lm.Or(c.AdapterRank, 128),
		AttnAdapters: lm.Or(c.UseSharedAttentionAdapter, false), Bias: lm.Or(c.AddBiasLinear, false)}
	o.AttnHeadDim = s.HeadDim
	o.Scale = 1 / math.Sqrt(float64(o.AttnHeadDim)/2)
	types := c.LayersBlockType
	if types == nil {
		types = defaultBlockTypes()
	}
	if len(types) != s.Layers {
		return Options{}, fmt.Errorf("%s: layers_block_type has %d entries for %d layers", where, len(types), s.Layers)
	}
	s.LayerKinds = make([]string, s.Layers)
	for i, t := range types {
		switch t {
		case "mamba":
			s.LayerKinds[i] = nn.KindMamba
		case "hybrid":
			s.LayerKinds[i] = lm.KindFull
			o.Hybrid = append(o.Hybrid, i)
		default:
			return Options{}, fmt.Errorf("%s: layers_block_type[%d] is %q; want \"mamba\" or \"hybrid\"", where, i, t)
		}
	}
	o.Spec.LayerKinds = s.LayerKinds
	o.Spec.Carried = 2 * s.Hidden // the stream, then the original embeddings
	switch {
	case o.Blocks <= 0:
		return Options{}, fmt.Errorf("%s: num_mem_blocks must be positive, got %d", where, o.Blocks)
	case o.Blocks > len(o.Hybrid) && len(o.Hybrid) > 0:
		return Options{}, fmt.Errorf("%s: num_mem_blocks %d is more than the %d hybrid layers", where, o.Blocks, len(o.Hybrid))
	case o.Rank <= 0:
		return Options{}, fmt.Errorf("%s: adapter_rank must be positive, got %d", where, o.Rank)
	case o.AttnAdapters && s.KVHeads != s.Heads:
		return Options{}, fmt.Errorf("%s: use_shared_attention_adapter needs num_key_value_heads equal to num_attention_heads (the adapters map 2 × hidden_size to itself)", where)
	case c.UseLongContext:
		return Options{}, errs.Unsupportedf("%s: use_long_context (the rotary's rescaled base for 16K positions) is not supported", where)
	}
	if act := c.HiddenAct; act != "" && act != "gelu" {
		return Options{}, errs.Unsupportedf("%s: hidden_act %q; Zamba2's shared MLP runs GELU", where, act)
	}
	if lm.Or(c.UseMemRope, false) {
		theta := lm.Or(c.RopeTheta, 10000)
		var rp struct {
			Theta *float64 `json:"rope_theta"`
			Type  string   `json:"rope_type"`
		}
		if len(c.RopeParameters) > 0 && string(c.RopeParameters) != "null" {
			if err := json.Unmarshal(c.RopeParameters, &rp); err != nil {
				return Options{}, fmt.Errorf("%s: rope_parameters: %w", where, err)
			}
			if rp.Type != "" && rp.Type != "default" {
				return Options{}, errs.Unsupportedf("%s: rope_parameters' rope_type %q; Zamba2's rotary is read as the default one only", where, rp.Type)
			}
			theta = lm.Or(rp.Theta, theta)
		}
		r, err := nn.NewRope(nn.RopeParams{Theta: theta, HeadDim: o.AttnHeadDim, MaxPositions: s.MaxPositions})
		if err != nil {
			return Options{}, fmt.Errorf("%s: the rotary: %w", where, err)
		}
		o.Rope = r
	}
	inner := lm.Or(c.MambaExpand, 2) * s.Hidden
	heads := lm.Or(c.NMambaHeads, 8)
	if heads <= 0 || inner%heads != 0 {
		return Options{}, fmt.Errorf("%s: n_mamba_heads %d must divide mamba_expand × hidden_size %d", where, heads, inner)
	}
	d := nn.Mamba2Dims{Heads: heads, HeadDim: inner / heads, State: lm.Or(c.MambaDState, 64), Groups: lm.Or(c.MambaNGroups, 1), ConvKernel: lm.Or(c.MambaDConv, 4)}
	if err := d.Validate(where, nn.Mamba2Names{Heads: "n_mamba_heads", HeadDim: "mamba_headdim", State: "mamba_d_state", Groups: "mamba_ngroups", ConvKernel: "mamba_d_conv"}); err != nil {
		return Options{}, err
	}
	o.Mamba = d
	// Zamba2MambaMixer: the gated norm (eps 1e-5, in groups) after the
	// gate, dt floored at time_step_min as transformers' torch_forward
	// clamps it (its CUDA path and vLLM clamp to time_step_limit, none by
	// default; a set time_step_limit is refused).
	if l := c.TimeStepLimit; len(l) > 0 && !(len(l) == 2 && l[0] == 0 && l[1] >= math.MaxFloat64) {
		return Options{}, errs.Unsupportedf("%s: time_step_limit %v; transformers' torch path floors dt at time_step_min whatever it says, its CUDA path clamps to it, and tputool reads neither", where, l)
	}
	o.Mixer = nn.Mamba2Options{Eps: 1e-5, NormGroups: d.Groups, Chunk: lm.Or(c.ChunkSize, 256), DtMin: lm.Or(c.TimeStepMin, 0.001)}
	if o.Mixer.Chunk <= 0 || !(o.Mixer.DtMin >= 0) {
		return Options{}, fmt.Errorf("%s: chunk_size must be positive and time_step_min at least 0", where)
	}
	return o, nil
}

// defaultBlockTypes is Zamba2Config's layers_block_type (Zamba2-2.7B's).
func defaultBlockTypes() []string {
	t := []string{"mamba"}
	for range 7 {
		t = append(t, "mamba", "mamba", "mamba", "mamba", "mamba", "hybrid")
	}
	t = append(t, "mamba", "mamba", "mamba", "mamba", "hybrid", "mamba", "mamba", "mamba", "hybrid", "mamba", "mamba")
	return t
}

// New builds the model from its config.json.
func New(cfg *config.File) (lm.Model, error) {
	o, err := Resolve(cfg)
	if err != nil {
		return nil, err
	}
	return &Model{o: o}, nil
}

// Model is a Zamba2 decoder.
type Model struct {
	o Options
}

// Options returns the resolved options.
func (m *Model) Options() Options { return m.o }

// Spec implements lm.Model.
func (m *Model) Spec() *lm.Spec { return &m.o.Spec }

// ordinal is layer i's place among the hybrid layers, -1 for a Mamba
// layer.
func (m *Model) ordinal(i int) int { return slices.Index(m.o.Hybrid, i) }

// LayerKind implements lm.Model: Mamba-2 layers; hybrid layers (a KV
// cache and a Mamba-2 state) by the shared block they run, whose weights
// they name.
func (m *Model) LayerKind(i int) string {
	p := m.ordinal(i)
	if p < 0 {
		return nn.KindMamba
	}
	return fmt.Sprintf("hybrid%d", p%m.o.Blocks)
}

// LayerState implements lm.Model: the Mamba-2 state; before it, on a
// hybrid layer, its own KV cache (the weights are shared, the caches not).
func (m *Model) LayerState(i int, batch, cacheLen int) []lm.StateSpec {
	st := nn.Mamba2State(m.o.Mamba, batch)
	if m.ordinal(i) < 0 {
		return st
	}
	s := &m.o.Spec
	return append(nn.KVCacheState(batch, s.KVHeads, cacheLen, m.o.AttnHeadDim), st...)
}

// block is the weight prefix of hybrid ordinal p's shared block: under
// its owner, the first hybrid layer that runs it.
func (m *Model) block(p int) string {
	return fmt.Sprintf("model.layers.%d.shared_transformer.", m.o.Hybrid[p%m.o.Blocks])
}

// EmbedWeights implements lm.Model.
func (m *Model) EmbedWeights() []lm.WeightSpec {
	s := &m.o.Spec
	return []lm.WeightSpec{{Name: "model.embed_tokens.weight", Shape: []int{s.VocabSize, s.Hidden}, Matmul: true}}
}

// HeadWeights implements lm.Model.
func (m *Model) HeadWeights() []lm.WeightSpec {
	s := &m.o.Spec
	head, tp := "lm_head.weight", lm.Vocab
	if s.TieEmbeddings {
		head, tp = "model.embed_tokens.weight", lm.Replicated
	}
	return []lm.WeightSpec{{Name: "model.final_layernorm.weight", Shape: []int{s.Hidden}},
		{Name: head, Shape: []int{s.VocabSize, s.Hidden}, Matmul: true, TP: tp}}
}

// LayerWeights implements lm.Model.
func (m *Model) LayerWeights(i int) []lm.WeightSpec {
	s := &m.o.Spec
	h, r := s.Hidden, m.o.Rank
	p := fmt.Sprintf("model.layers.%d.", i)
	var ws []lm.WeightSpec
	add := func(name string, matmul bool, shape ...int) {
		ws = append(ws, lm.WeightSpec{Name: name, Shape: shape, Matmul: matmul})
	}
	q := m.ordinal(i)
	if q < 0 {
		add(p+"input_layernorm.weight", false, h)
		return append(ws, nn.Mamba2Weights(p+"mamba.", m.o.Mamba, h, true, m.o.Bias)...)
	}
	add(p+"mamba_decoder.input_layernorm.weight", false, h)
	ws = append(ws, nn.Mamba2Weights(p+"mamba_decoder.mamba.", m.o.Mamba, h, true, m.o.Bias)...)
	add(p+"linear.weight", true, h, h)
	b := m.block(q)
	w2, kv := 2*h, s.KVHeads*m.o.AttnHeadDim
	add(b+"input_layernorm.weight", false, w2)
	add(b+"self_attn.q_proj.weight", true, w2, w2)
	add(b+"self_attn.k_proj.weight", true, kv, w2)
	add(b+"self_attn.v_proj.weight", true, kv, w2)
	add(b+"self_attn.o_proj.weight", true, h, w2)
	if m.o.AttnAdapters {
		for _, n := range []string{"q", "k", "v"} {
			a := fmt.Sprintf("%sself_attn.linear_%s_adapter_list.%d.", b, n, q)
			add(a+"0.weight", true, r, w2)
			add(a+"1.weight", true, w2, r)
		}
	}
	add(b+"pre_ff_layernorm.weight", false, h)
	f := b + "feed_forward."
	add(f+"gate_up_proj.weight", true, 2*s.Intermediate, h)
	add(f+"down_proj.weight", true, h, s.Intermediate)
	if m.o.Bias {
		add(f+"gate_up_proj.bias", false, 2*s.Intermediate)
		add(f+"down_proj.bias", false, h)
	}
	a := fmt.Sprintf("%sgate_up_proj_adapter_list.%d.", f, q)
	add(a+"0.weight", true, r, h)
	add(a+"1.weight", true, 2*s.Intermediate, r)
	return ws
}

// Embed implements lm.Model: the embedding, twice: the residual stream
// and the original embeddings every hybrid layer reads.
func (m *Model) Embed(w *lm.Params, tokens *Node) *Node {
	x := nn.Embedding(w.Get("model.embed_tokens.weight"), tokens) // [B, T, H]
	return Concatenate([]*Node{x, x}, 2)
}

func (m *Model) norm(x, w *Node) *Node { return nn.RMSNorm(x, w, m.o.Eps, false) }

// Layer implements lm.Model: Zamba2MambaDecoderLayer, or
// Zamba2HybridLayer (the shared block, linear, then the Mamba layer).
func (m *Model) Layer(i int, w *lm.Params, x *Node, state []*Node, step *lm.Step) (*Node, []*Node) {
	o := &m.o
	h := o.Spec.Hidden
	stream, orig := SliceAxis(x, 2, AxisRange(0, h)), SliceAxis(x, 2, AxisRange(h, 2*h))
	p := w.Scope(fmt.Sprintf("model.layers.%d", i))
	mamba := func(p *lm.Params, in, conv, ssm *Node) (*Node, *Node, *Node) {
		return nn.Mamba2With(o.Mamba, nn.Mamba2ParamsOf(p.Scope("mamba"), true, o.Bias), m.norm(in, p.Get("input_layernorm.weight")), conv, ssm, step, o.Mixer)
	}
	q := m.ordinal(i)
	if q < 0 {
		y, conv, ssm := mamba(p, stream, state[0], state[1])
		return Concatenate([]*Node{Add(stream, y), orig}, 2), []*Node{conv, ssm}
	}
	// The held state: k, v, conv, ssm, then the caches' int8 scales.
	kvState := []*Node{state[0], state[1]}
	if len(state) > 4 {
		kvState = append(kvState, state[4], state[5])
	}
	tr, kv := m.shared(w, q, Concatenate([]*Node{stream, orig}, 2), kvState, step)
	tr = nn.Linear(tr, p.Get("linear.weight"), nil)
	y, conv, ssm := mamba(p.Scope("mamba_decoder"), Add(stream, tr), state[2], state[3])
	c := kv.State()
	out := []*Node{c[0], c[1], conv, ssm}
	return Concatenate([]*Node{Add(stream, y), orig}, 2), append(out, c[2:]...)
}

// shared is hybrid ordinal q's run of its shared block on t [B, T, 2H]:
// input_layernorm, attention (with q's adapters), pre_ff_layernorm and
// the MLP (with q's adapter), no residuals. [B, T, H]
func (m *Model) shared(w *lm.Params, q int, t *Node, state []*Node, step *lm.Step) (*Node, nn.KV) {
	o := &m.o
	s := &o.Spec
	b := w.Scope(strings.TrimSuffix(m.block(q), "."))
	t = m.norm(t, b.Get("input_layernorm.weight"))
	a := b.Scope("self_attn")
	proj := func(n string) *Node {
		y := nn.Linear(t, a.Get(n+"_proj.weight"), nil)
		if o.AttnAdapters {
			ad := a.Scope(fmt.Sprintf("linear_%s_adapter_list.%d", n, q))
			y = Add(y, nn.Linear(nn.Linear(t, ad.Get("0.weight"), nil), ad.Get("1.weight"), nil))
		}
		return y
	}
	qh := nn.SplitHeads(proj("q"), s.Heads)   // [B, T, heads, D]
	kh := nn.SplitHeads(proj("k"), s.KVHeads) // [B, T, KV, D]
	vh := nn.SplitHeads(proj("v"), s.KVHeads)
	if o.Rope != nil {
		cos, sin := o.Rope.CosSin(step, t.DType())
		qh, kh = nn.ApplyRope(qh, cos, sin), nn.ApplyRope(kh, cos, sin)
	}
	c := nn.WriteKV(nn.KVOf(state), kh, vh, step)
	att := nn.Linear(nn.Attention(qh, c, nn.AttentionBias(step, 0), o.Scale, 0), a.Get("o_proj.weight"), nil) // [B, T, H]
	x := m.norm(att, b.Get("pre_ff_layernorm.weight"))
	f := b.Scope("feed_forward")
	var gub, db *Node
	if o.Bias {
		gub, db = f.Get("gate_up_proj.bias"), f.Get("down_proj.bias")
	}
	ad := f.Scope(fmt.Sprintf("gate_up_proj_adapter_list.%d", q))
	gu := Add(nn.Linear(x, f.Get("gate_up_proj.weight"), gub), nn.Linear(nn.Linear(x, ad.Get("0.weight"), nil), ad.Get("1.weight"), nil))
	inter := s.Intermediate
	gate, up := SliceAxis(gu, -1, AxisRange(0, inter)), SliceAxis(gu, -1, AxisRange(inter, 2*inter))
	return nn.Linear(Mul(nn.Activate("gelu", gate), up), f.Get("down_proj.weight"), db), c
}

// Final implements lm.Finisher: the final norm of the residual stream.
func (m *Model) Final(w *lm.Params, x *Node) *Node {
	return m.norm(SliceAxis(x, -1, AxisRange(0, m.o.Spec.Hidden)), w.Get("model.final_layernorm.weight"))
}

// Head implements lm.Model: Final and the (tied) head.
func (m *Model) Head(w *lm.Params, x *Node) *Node {
	name := "lm_head.weight"
	if m.o.Spec.TieEmbeddings {
		name = "model.embed_tokens.weight"
	}
	return nn.Linear(m.Final(w, x), w.Get(name), nil)
}

var (
	_ lm.Model    = (*Model)(nil)
	_ lm.Finisher = (*Model)(nil)
)
