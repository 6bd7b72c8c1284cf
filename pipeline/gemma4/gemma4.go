// Package gemma4 implements the text model of Gemma 4
// (Gemma4ForConditionalGeneration, whose vision and audio towers are
// skipped, and Gemma4ForCausalLM), following transformers'
// models/gemma4/modeling_gemma4.py. It covers every size: the dense 31B,
// the mixture-of-experts 26B-A4B, and the E2B/E4B models with per-layer
// embeddings and KV sharing.
//
// Compared with Gemma 3 (pipeline/gemma3):
//
//   - RMSNorm scales by w (not 1 + w), in float32; v_norm and the
//     router's norm have no weight.
//   - Attention is unscaled (scale 1.0), with per-head q/k norms before
//     the rotary embedding. Sliding layers use head_dim (256) and plain
//     RoPE (θ 1e4); full layers use global_head_dim (512), their own KV
//     heads and "proportional" RoPE (nn.NewRope: a quarter of the pairs
//     turn, θ 1e6). With attention_k_eq_v, full layers have no v_proj:
//     the values are the k_proj output through v_norm.
//   - KV sharing: the last num_kv_shared_layers layers have no k/v
//     projections and no cache: they attend over the cache of the last
//     unshared layer of their kind (lm.StateSharer), after that layer
//     wrote the step's keys and values.
//   - Per-layer embeddings (PLE, E2B/E4B): a second embedding table and a
//     projection of the input embedding give every layer a small input,
//     gated into the residual after the MLP.
//   - The 26B-A4B adds, beside the dense MLP, routed experts
//     (Gemma4TextRouter: norm, × scale × H^-½, proj, softmax, top-k,
//     renormalised, × per_expert_scale) with their own pre/post norms.
//   - Each layer's output is scaled by layer_scalar; the logits are
//     soft-capped (final_logit_softcapping).
//
// The hidden states handed from layer to layer are [B, T, W] with W =
// Hidden + Layers·PLE: the residual stream, then every layer's per-layer
// input (each layer takes the first PLE values and rotates them to the
// end, so that a layer's graph does not depend on its index). Head reads
// the residual stream only.
package gemma4

import (
	"fmt"
	"math"
	"strings"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive

	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/nn"
)

func init() {
	lm.Register("Gemma4ForConditionalGeneration", New)
	lm.Register("Gemma4ForCausalLM", New)
}

// New builds the model from its config.json.
func New(cfg *config.File) (lm.Model, error) {
	o, err := Resolve(cfg)
	if err != nil {
		return nil, err
	}
	return NewModel(o), nil
}

// Model is the Gemma 4 text decoder; it implements lm.Model, lm.Skipper
// and lm.StateSharer.
type Model struct {
	o Options
}

// NewModel returns the decoder for resolved options.
func NewModel(o Options) *Model { return &Model{o: o} }

// Options returns the resolved options.
func (m *Model) Options() Options { return m.o }

// Spec implements lm.Model.
func (m *Model) Spec() *lm.Spec { return &m.o.Spec }

// LayerKind implements lm.Model: the attention kind, marked "+shared" on
// the layers that read another layer's cache (their graphs differ from
// their kind's others).
func (m *Model) LayerKind(i int) string {
	l := m.o.Layer[i]
	if l.Source >= 0 {
		return l.Kind + "+shared"
	}
	return l.Kind
}

// LayerState implements lm.Model: a key and a value cache of the layer's
// head size; none for a layer that shares another's (SharedState).
func (m *Model) LayerState(i int, batch, cacheLen int) []lm.StateSpec {
	l := m.o.Layer[i]
	if l.Source >= 0 {
		return nil
	}
	return nn.KVCacheState(batch, l.KVHeads, cacheLen, l.HeadDim)
}

// SharedState implements lm.StateSharer: a KV-sharing layer reads the
// cache of the last unshared layer of its kind.
func (m *Model) SharedState(i int) int { return m.o.Layer[i].Source }

// SkipWeight implements lm.Skipper: the vision and audio towers and their
// embedders are not read, nor the k/v projections that a checkpoint may
// still hold for KV-sharing layers (transformers ignores them too).
func (m *Model) SkipWeight(name string) (string, bool) {
	if why, ok := SkipTower(name); ok {
		return why, true
	}
	for i, l := range m.o.Layer {
		if l.Source < 0 {
			continue
		}
		p := fmt.Sprintf("%slayers.%d.self_attn.", m.o.Prefix, i)
		for _, w := range []string{"k_proj.weight", "v_proj.weight", "k_norm.weight", "v_norm.weight"} {
			if name == p+w {
				return "k/v projections of KV-sharing layers: unused, as in transformers", true
			}
		}
	}
	return "", false
}

// SkipTower says why a Gemma 4 or Gemma 3n checkpoint's tensor outside
// the text model (the vision and audio towers, their embedders) is not
// read.
func SkipTower(name string) (string, bool) {
	for _, p := range []string{"model.vision_tower.", "model.embed_vision.", "model.audio_tower.", "model.embed_audio."} {
		if strings.HasPrefix(name, p) {
			return "vision and audio towers (model.vision_tower.*, model.audio_tower.*, their embedders): tputool runs the text model only", true
		}
	}
	return "", false
}

func (m *Model) name(rel string) string { return m.o.Prefix + rel }

// EmbedWeights implements lm.Model.
func (m *Model) EmbedWeights() []lm.WeightSpec {
	s := &m.o.Spec
	ws := []lm.WeightSpec{{Name: m.name("embed_tokens.weight"), Shape: []int{s.VocabSize, s.Hidden}, Matmul: true}}
	if p := m.o.PLE; p > 0 {
		lp := s.Layers * p
		ws = append(ws,
			lm.WeightSpec{Name: m.name("embed_tokens_per_layer.weight"), Shape: []int{m.o.PLEVocab, lp}, Matmul: true},
			lm.WeightSpec{Name: m.name("per_layer_model_projection.weight"), Shape: []int{lp, s.Hidden}, Matmul: true},
			lm.WeightSpec{Name: m.name("per_layer_projection_norm.weight"), Shape: []int{p}})
	}
	return ws
}

// HeadWeights implements lm.Model.
func (m *Model) HeadWeights() []lm.WeightSpec {
	s := &m.o.Spec
	head, tp := "lm_head.weight", lm.Vocab
	if s.TieEmbeddings {
		head, tp = m.name("embed_tokens.weight"), lm.Replicated
	}
	return []lm.WeightSpec{
		{Name: m.name("norm.weight"), Shape: []int{s.Hidden}},
		{Name: head, Shape: []int{s.VocabSize, s.Hidden}, Matmul: true, TP: tp},
	}
}

// LayerWeights implements lm.Model.
func (m *Model) LayerWeights(i int) []lm.WeightSpec {
	s := &m.o.Spec
	l := m.o.Layer[i]
	h := s.Hidden
	p := fmt.Sprintf("%slayers.%d.", m.o.Prefix, i)
	var ws []lm.WeightSpec
	add := func(name string, matmul bool, tp lm.TPSplit, shape ...int) {
		ws = append(ws, lm.WeightSpec{Name: p + name, Shape: shape, Matmul: matmul, TP: tp})
	}
	q, kv := s.Heads*l.HeadDim, l.KVHeads*l.HeadDim
	add("input_layernorm.weight", false, lm.Replicated, h)
	add("self_attn.q_proj.weight", true, lm.Column, q, h)
	add("self_attn.q_norm.weight", false, lm.Replicated, l.HeadDim)
	if l.Source < 0 {
		add("self_attn.k_proj.weight", true, lm.KVColumn, kv, h)
		if !l.KEqV {
			add("self_attn.v_proj.weight", true, lm.KVColumn, kv, h)
		}
		add("self_attn.k_norm.weight", false, lm.Replicated, l.HeadDim)
	}
	add("self_attn.o_proj.weight", true, lm.Row, h, q)
	add("post_attention_layernorm.weight", false, lm.Replicated, h)
	add("pre_feedforward_layernorm.weight", false, lm.Replicated, h)
	add("mlp.gate_proj.weight", true, lm.Column, l.Intermediate, h)
	add("mlp.up_proj.weight", true, lm.Column, l.Intermediate, h)
	add("mlp.down_proj.weight", true, lm.Row, h, l.Intermediate)
	add("post_feedforward_layernorm.weight", false, lm.Replicated, h)
	if m.o.Experts > 0 {
		e := m.o.Experts
		add("router.proj.weight", true, lm.Replicated, e, h)
		ws[len(ws)-1].Router = true
		add("router.scale", false, lm.Replicated, h)
		add("router.per_expert_scale", false, lm.Replicated, e)
		ws = append(ws, lm.StackedExperts(p+"experts", e, m.o.MoEIntermediate, h)...)
		add("pre_feedforward_layernorm_2.weight", false, lm.Replicated, h)
		add("post_feedforward_layernorm_1.weight", false, lm.Replicated, h)
		add("post_feedforward_layernorm_2.weight", false, lm.Replicated, h)
	}
	if pl := m.o.PLE; pl > 0 {
		add("per_layer_input_gate.weight", true, lm.Replicated, pl, h)
		add("per_layer_projection.weight", true, lm.Replicated, h, pl)
		add("post_per_layer_input_norm.weight", false, lm.Replicated, h)
	}
	add("layer_scalar", false, lm.Replicated, 1)
	return ws
}

func (m *Model) norm(x, w *Node) *Node { return Norm(x, w, m.o.Eps) }

// Norm is Gemma4RMSNorm (Gemma3nRMSNorm alike): x / rms(x), times w when
// w is not nil, in float32, cast back to x's dtype.
func Norm(x, w *Node, eps float64) *Node {
	dtype := x.DType()
	xf := ConvertDType(x, dtypes.Float32)
	y := Mul(xf, Rsqrt(AddScalar(ReduceAndKeep(Square(xf), ReduceMean, -1), eps)))
	if w != nil {
		y = Mul(y, ExpandLeftToRank(ConvertDType(w, dtypes.Float32), x.Rank()))
	}
	return ConvertDType(y, dtype)
}

// Embed implements lm.Model: the scaled embedding, then (PLE) every
// layer's per-layer input.
func (m *Model) Embed(w *lm.Params, tokens *Node) *Node {
	s := &m.o.Spec
	x := nn.Embedding(w.Get(m.name("embed_tokens.weight")), tokens) // [B, T, H]
	x = MulScalar(x, nn.RoundTo(math.Sqrt(float64(s.Hidden)), x.DType()))
	dims := x.Shape().Dimensions
	b, t := dims[0], dims[1]
	if pl := m.o.PLE; pl > 0 {
		tok := nn.Embedding(w.Get(m.name("embed_tokens_per_layer.weight")), tokens) // [B, T, L·P]
		tok = MulScalar(tok, nn.RoundTo(math.Sqrt(float64(pl)), tok.DType()))
		proj := MulScalar(nn.Linear(x, w.Get(m.name("per_layer_model_projection.weight")), nil), 1/math.Sqrt(float64(s.Hidden)))
		proj = m.norm(Reshape(proj, b, t, s.Layers, pl), w.Get(m.name("per_layer_projection_norm.weight")))
		ple := MulScalar(Add(proj, Reshape(ConvertDType(tok, x.DType()), b, t, s.Layers, pl)), 1/math.Sqrt2)
		return Concatenate([]*Node{x, Reshape(ple, b, t, s.Layers*pl)}, 2)
	}
	return x
}

// Layer implements lm.Model: Gemma4TextDecoderLayer on the residual
// stream, carrying the per-layer inputs. A sharing layer's state is its
// source's cache, read and not returned.
func (m *Model) Layer(i int, w *lm.Params, x *Node, state []*Node, step *lm.Step) (*Node, []*Node) {
	s := &m.o.Spec
	l := m.o.Layer[i]
	p := w.Scope(fmt.Sprintf("%slayers.%d", m.o.Prefix, i))
	h := SliceAxis(x, 2, AxisRange(0, s.Hidden)) // the residual stream

	residual := h
	a, c := m.attention(p, l, m.norm(h, p.Get("input_layernorm.weight")), state, step)
	h = Add(residual, m.norm(a, p.Get("post_attention_layernorm.weight")))

	residual = h
	f := nn.GatedMLP(m.norm(h, p.Get("pre_feedforward_layernorm.weight")), p.Get("mlp.gate_proj.weight"), nil,
		p.Get("mlp.up_proj.weight"), nil, p.Get("mlp.down_proj.weight"), nil, nn.Activation(m.o.Act))
	if m.o.Experts > 0 {
		f = Add(m.norm(f, p.Get("post_feedforward_layernorm_1.weight")), m.experts(p, residual, step))
	}
	h = Add(residual, m.norm(f, p.Get("post_feedforward_layernorm.weight")))

	var rest *Node // the remaining layers' per-layer inputs
	if pl := m.o.PLE; pl > 0 {
		ple := SliceAxis(x, 2, AxisRange(s.Hidden, s.Hidden+s.Layers*pl))
		mine := SliceAxis(ple, 2, AxisRange(0, pl)) // this layer's input; the next layer's follows
		g := Mul(nn.Activate(m.o.Act, nn.Linear(h, p.Get("per_layer_input_gate.weight"), nil)), mine)
		h = Add(h, m.norm(nn.Linear(g, p.Get("per_layer_projection.weight"), nil), p.Get("post_per_layer_input_norm.weight")))
		rest = Concatenate([]*Node{SliceAxis(ple, 2, AxisRange(pl, s.Layers*pl)), mine}, 2)
	}
	h = Mul(h, ExpandLeftToRank(ConvertDType(p.Get("layer_scalar"), h.DType()), h.Rank()))
	var newState []*Node
	if l.Source < 0 {
		newState = c.State()
	}
	if rest != nil {
		h = Concatenate([]*Node{h, rest}, 2)
	}
	return h, newState
}

// attention is Gemma4TextAttention on h (normed) for layer l: its output
// and the caches it attended over (its own, with the step's keys and
// values written, or for a sharing layer its source's, as given).
func (m *Model) attention(p *lm.Params, l Layer, h *Node, state []*Node, step *lm.Step) (out *Node, c nn.KV) {
	s := &m.o.Spec
	a := p.Scope("self_attn")
	cos, sin := m.o.Rope[l.Kind].CosSin(step, h.DType())
	q := nn.SplitHeads(nn.Linear(h, a.Get("q_proj.weight"), nil), s.Heads) // [B, T, H, D]
	q = nn.ApplyRope(m.norm(q, a.Get("q_norm.weight")), cos, sin)
	c = nn.KVOf(state)
	if l.Source < 0 {
		kp := nn.SplitHeads(nn.Linear(h, a.Get("k_proj.weight"), nil), l.KVHeads) // [B, T, KV, D]
		vp := kp
		if !l.KEqV {
			vp = nn.SplitHeads(nn.Linear(h, a.Get("v_proj.weight"), nil), l.KVHeads)
		}
		k := nn.ApplyRope(m.norm(kp, a.Get("k_norm.weight")), cos, sin)
		c = nn.WriteKV(c, k, m.norm(vp, nil), step)
	}
	window := 0
	if l.Kind == lm.KindSliding {
		window = s.SlidingWindow
	}
	o := nn.Attention(q, c, nn.AttentionBias(step, window), 1, 0) // [B, T, H·D]
	return nn.Linear(o, a.Get("o_proj.weight"), nil), c
}

// experts is the MoE half of the 26B-A4B's feed-forward on the layer's
// input residual [B, T, H]: Gemma4TextRouter's choice, the experts on
// pre_feedforward_layernorm_2 of it, then post_feedforward_layernorm_2.
func (m *Model) experts(p *lm.Params, residual *Node, step *lm.Step) *Node {
	s := &m.o.Spec
	dims := residual.Shape().Dimensions
	b, t, hd := dims[0], dims[1], dims[2]
	x := Reshape(residual, b*t, hd)
	r := MulScalar(Mul(m.norm(x, nil), ExpandLeftToRank(ConvertDType(p.Get("router.scale"), x.DType()), 2)), 1/math.Sqrt(float64(s.Hidden)))
	logits := nn.Linear(r, p.Get("router.proj.weight"), nil) // [N, E]
	ids, weights := nn.TopKRouter(logits, m.o.TopK, true)    // [N, K]
	n, k := b*t, m.o.TopK
	pes := ConvertDType(p.Get("router.per_expert_scale"), dtypes.Float32)
	weights = Mul(weights, Reshape(Gather(pes, Reshape(ids, n*k, 1)), n, k)) // × per_expert_scale of each choice
	e := p.Scope("experts")
	stack := nn.ExpertStack{Gate: e.Get("gate_up_proj"), Down: e.Get("down_proj"), Act: nn.Activation(m.o.Act)}
	y := stack.Routed(m.norm(x, p.Get("pre_feedforward_layernorm_2.weight")), ids, weights, step.GatherExperts)
	return m.norm(Reshape(y, b, t, hd), p.Get("post_feedforward_layernorm_2.weight"))
}

// Final implements lm.Finisher: the final norm of the residual stream
// (its first Hidden values: the layers carry more after them).
func (m *Model) Final(w *lm.Params, x *Node) *Node {
	h := SliceAxis(x, -1, AxisRange(0, m.o.Spec.Hidden))
	return m.norm(h, w.Get(m.name("norm.weight")))
}

// Head implements lm.Model: the final norm of the residual stream, the
// (tied) head and the final soft-cap.
func (m *Model) Head(w *lm.Params, x *Node) *Node {
	s := &m.o.Spec
	h := m.Final(w, x)
	name := "lm_head.weight"
	if s.TieEmbeddings {
		name = m.name("embed_tokens.weight")
	}
	return nn.Softcap(nn.Linear(h, w.Get(name), nil), m.o.FinalSoftcap) // [B, V]
}

var (
	_ lm.Model       = (*Model)(nil)
	_ lm.Finisher    = (*Model)(nil)
	_ lm.Skipper     = (*Model)(nil)
	_ lm.StateSharer = (*Model)(nil)
)
