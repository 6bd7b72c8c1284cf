// Package gemma3n implements the text model of Gemma 3n
// (Gemma3nForConditionalGeneration, whose vision and audio towers are
// skipped, and Gemma3nForCausalLM: gemma-3n-E2B and E4B, base and -it),
// following transformers' models/gemma3n/modeling_gemma3n.py.
//
// Its decoder is Gemma 4's E-model decoder (pipeline/gemma4: RMSNorms
// scaling by w in float32, unscaled attention with q/k norms before the
// rotary and a weightless v norm, per-layer embeddings, KV sharing, a
// soft-capped tied head) with three more parts:
//
//   - AltUp: the residual is Streams (4) streams. The first is the
//     scaled embedding; the others altup_projections of it, rescaled to
//     its RMS. Each layer predicts every stream from all of them
//     (prediction_coefs of a router over the first: router_norm, × 1/H,
//     modality_router, tanh), runs on the first stream's prediction, and
//     corrects every stream by its output (correction_coefs of the
//     router over the output, clipped, + 1, times the innovation). The per-layer
//     input is gated from the corrected first stream (× correct_output_scale)
//     and added to the other streams. The head averages the first stream
//     with altup_unembed_projections of the others, rescaled to its RMS.
//   - LAuReL: a rank-r residual beside the attention (linear_left,
//     linear_right, post_laurel_norm, over the normed input), the two
//     summed and divided by √2 before the MLP.
//   - Activation sparsity: on the layers activation_sparsity_pattern
//     names (the first 10 in the releases), the MLP's gate keeps only
//     what exceeds its mean + std · Φ⁻¹(sparsity) (a Gaussian top-k),
//     before the activation.
//
// Both layer kinds rotate whole heads by the default rotary (full θ 1e6,
// sliding θ 1e4); the layers go 4 sliding to 1 full; final logits are
// soft-capped at 30.
//
// The hidden states handed from layer to layer are [B, T, W] with W =
// Streams·Hidden + Layers·PLE: the streams, then every layer's per-layer
// input (each layer takes the first PLE values and rotates them to the
// end, so that a layer's graph does not depend on its index).
package gemma3n

import (
	"fmt"
	"math"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive

	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/gemma4"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/nn"
)

func init() {
	lm.Register("Gemma3nForConditionalGeneration", New)
	lm.Register("Gemma3nForCausalLM", New)
}

// New builds the model from its config.json.
func New(cfg *config.File) (lm.Model, error) {
	o, err := Resolve(cfg)
	if err != nil {
		return nil, err
	}
	return NewModel(o), nil
}

// Model is the Gemma 3n text decoder; it implements lm.Model,
// lm.Finisher, lm.Skipper and lm.StateSharer.
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
// the layers that read another layer's cache, "+sparse" on those whose
// MLP cuts its gate, and the MLP's width where layers differ in it.
func (m *Model) LayerKind(i int) string {
	l := m.o.Layer[i]
	k := l.Kind
	if l.Source >= 0 {
		k += "+shared"
	}
	if l.Sparsity > 0 {
		k += fmt.Sprintf("+sparse%g", l.Sparsity)
	}
	if l.Intermediate != m.o.Spec.Intermediate {
		k += fmt.Sprintf("+mlp%d", l.Intermediate)
	}
	return k
}

// LayerState implements lm.Model: a key and a value cache; none for a
// layer that shares another's (SharedState).
func (m *Model) LayerState(i int, batch, cacheLen int) []lm.StateSpec {
	if m.o.Layer[i].Source >= 0 {
		return nil
	}
	s := &m.o.Spec
	return nn.KVCacheState(batch, s.KVHeads, cacheLen, s.HeadDim)
}

// SharedState implements lm.StateSharer: a KV-sharing layer reads the
// cache of the last unshared layer of its kind.
func (m *Model) SharedState(i int) int { return m.o.Layer[i].Source }

// SkipWeight implements lm.Skipper: the vision and audio towers and their
// embedders are not read, nor the k/v projections that the checkpoints
// hold for KV-sharing layers (transformers computes nothing from them).
func (m *Model) SkipWeight(name string) (string, bool) {
	if why, ok := gemma4.SkipTower(name); ok {
		return why, true
	}
	for i, l := range m.o.Layer {
		if l.Source < 0 {
			continue
		}
		p := fmt.Sprintf("%slayers.%d.self_attn.", m.o.Prefix, i)
		for _, w := range []string{"k_proj.weight", "v_proj.weight", "k_norm.weight"} {
			if name == p+w {
				return "k/v projections of KV-sharing layers: unused, as in transformers", true
			}
		}
	}
	return "", false
}

func (m *Model) name(rel string) string { return m.o.Prefix + rel }

// EmbedWeights implements lm.Model.
func (m *Model) EmbedWeights() []lm.WeightSpec {
	s := &m.o.Spec
	lp := s.Layers * m.o.PLE
	ws := []lm.WeightSpec{
		{Name: m.name("embed_tokens.weight"), Shape: []int{s.VocabSize, s.Hidden}, Matmul: true},
		{Name: m.name("embed_tokens_per_layer.weight"), Shape: []int{m.o.PLEVocab, lp}, Matmul: true},
		{Name: m.name("per_layer_model_projection.weight"), Shape: []int{lp, s.Hidden}, Matmul: true},
		{Name: m.name("per_layer_projection_norm.weight"), Shape: []int{m.o.PLE}},
	}
	for k := range m.o.Streams - 1 {
		ws = append(ws, lm.WeightSpec{Name: m.name(fmt.Sprintf("altup_projections.%d.weight", k)), Shape: []int{s.Hidden, s.Hidden}, Matmul: true})
	}
	return ws
}

// HeadWeights implements lm.Model: the unembedding projections of the
// streams, the final norm and the (tied) head.
func (m *Model) HeadWeights() []lm.WeightSpec {
	s := &m.o.Spec
	var ws []lm.WeightSpec
	for k := range m.o.Streams - 1 {
		ws = append(ws, lm.WeightSpec{Name: m.name(fmt.Sprintf("altup_unembed_projections.%d.weight", k)), Shape: []int{s.Hidden, s.Hidden}, Matmul: true})
	}
	head, tp := "lm_head.weight", lm.Vocab
	if s.TieEmbeddings {
		head, tp = m.name("embed_tokens.weight"), lm.Replicated
	}
	return append(ws,
		lm.WeightSpec{Name: m.name("norm.weight"), Shape: []int{s.Hidden}},
		lm.WeightSpec{Name: head, Shape: []int{s.VocabSize, s.Hidden}, Matmul: true, TP: tp})
}

// LayerWeights implements lm.Model.
func (m *Model) LayerWeights(i int) []lm.WeightSpec {
	s := &m.o.Spec
	l := m.o.Layer[i]
	h, n := s.Hidden, m.o.Streams
	p := fmt.Sprintf("%slayers.%d.", m.o.Prefix, i)
	var ws []lm.WeightSpec
	add := func(name string, matmul bool, tp lm.TPSplit, shape ...int) {
		ws = append(ws, lm.WeightSpec{Name: p + name, Shape: shape, Matmul: matmul, TP: tp})
	}
	q, kv := s.Heads*s.HeadDim, s.KVHeads*s.HeadDim
	add("altup.correct_output_scale", false, lm.Replicated, h)
	add("altup.correction_coefs.weight", false, lm.Replicated, n, n)
	add("altup.prediction_coefs.weight", false, lm.Replicated, n*n, n)
	add("altup.modality_router.weight", true, lm.Replicated, n, h)
	add("altup.router_norm.weight", false, lm.Replicated, h)
	add("input_layernorm.weight", false, lm.Replicated, h)
	add("laurel.linear_left.weight", true, lm.Replicated, m.o.Laurel, h)
	add("laurel.linear_right.weight", true, lm.Replicated, h, m.o.Laurel)
	add("laurel.post_laurel_norm.weight", false, lm.Replicated, h)
	add("self_attn.q_proj.weight", true, lm.Column, q, h)
	add("self_attn.q_norm.weight", false, lm.Replicated, s.HeadDim)
	if l.Source < 0 {
		add("self_attn.k_proj.weight", true, lm.KVColumn, kv, h)
		add("self_attn.v_proj.weight", true, lm.KVColumn, kv, h)
		add("self_attn.k_norm.weight", false, lm.Replicated, s.HeadDim)
	}
	add("self_attn.o_proj.weight", true, lm.Row, h, q)
	add("post_attention_layernorm.weight", false, lm.Replicated, h)
	add("pre_feedforward_layernorm.weight", false, lm.Replicated, h)
	add("mlp.gate_proj.weight", true, lm.Column, l.Intermediate, h)
	add("mlp.up_proj.weight", true, lm.Column, l.Intermediate, h)
	add("mlp.down_proj.weight", true, lm.Row, h, l.Intermediate)
	add("post_feedforward_layernorm.weight", false, lm.Replicated, h)
	add("per_layer_input_gate.weight", true, lm.Replicated, m.o.PLE, h)
	add("per_layer_projection.weight", true, lm.Replicated, h, m.o.PLE)
	add("post_per_layer_input_norm.weight", false, lm.Replicated, h)
	return ws
}

// norm is Gemma3nRMSNorm, Gemma 4's.
func (m *Model) norm(x, w *Node) *Node { return gemma4.Norm(x, w, m.o.Eps) }

// scale is x times v in float32, rounded once, as torch multiplies a
// tensor by a Python float.
func scale(x *Node, v float64) *Node {
	return ConvertDType(MulScalar(ConvertDType(x, dtypes.Float32), v), x.DType())
}

// rescaled is y times the RMS of x over y's, y's mean square floored at
// 1e-5 (Gemma3nTextModel's magnitude matching of the streams).
func rescaled(y, x *Node) *Node {
	f32 := dtypes.Float32
	xf, yf := ConvertDType(x, f32), ConvertDType(y, f32)
	target := Sqrt(ReduceAndKeep(Square(xf), ReduceMean, -1))
	mag := Sqrt(MaxScalar(ReduceAndKeep(Square(yf), ReduceMean, -1), 1e-5))
	return ConvertDType(Div(Mul(yf, target), mag), y.DType())
}

// Embed implements lm.Model: the scaled embedding and the streams AltUp
// projects from it, then every layer's per-layer input.
func (m *Model) Embed(w *lm.Params, tokens *Node) *Node {
	s := &m.o.Spec
	pl := m.o.PLE
	x := nn.Embedding(w.Get(m.name("embed_tokens.weight")), tokens) // [B, T, H]
	dtype := x.DType()
	x = MulScalar(x, nn.RoundTo(math.Sqrt(float64(s.Hidden)), dtype))
	dims := x.Shape().Dimensions
	b, t := dims[0], dims[1]

	// Per-layer inputs. Ids from vocab_size_per_layer_input on (the
	// image and audio tokens) read row 0, as Gemma3nModel masks them.
	in := LessThan(tokens, Scalar(tokens.Graph(), tokens.DType(), m.o.PLEVocab))
	pleTok := Where(in, tokens, ZerosLike(tokens))
	tok := nn.Embedding(w.Get(m.name("embed_tokens_per_layer.weight")), pleTok) // [B, T, L·P]
	tok = ConvertDType(MulScalar(tok, nn.RoundTo(math.Sqrt(float64(pl)), tok.DType())), dtype)
	proj := MulScalar(nn.Linear(x, w.Get(m.name("per_layer_model_projection.weight")), nil), nn.RoundTo(1/math.Sqrt(float64(s.Hidden)), dtype))
	proj = m.norm(Reshape(proj, b, t, s.Layers, pl), w.Get(m.name("per_layer_projection_norm.weight")))
	ple := MulScalar(Add(proj, Reshape(tok, b, t, s.Layers, pl)), nn.RoundTo(1/math.Sqrt2, dtype))

	parts := []*Node{x}
	for k := range m.o.Streams - 1 {
		y := nn.Linear(x, w.Get(m.name(fmt.Sprintf("altup_projections.%d.weight", k))), nil)
		parts = append(parts, rescaled(y, x))
	}
	return Concatenate(append(parts, Reshape(ple, b, t, s.Layers*pl)), 2)
}

// router is Gemma3nTextAltUp's compute_router_modalities: tanh of
// modality_router over router_norm(x) / H, the tanh in float32. [B, T, N]
func (m *Model) router(p *lm.Params, x *Node) *Node {
	r := scale(m.norm(x, p.Get("router_norm.weight")), 1/float64(m.o.Spec.Hidden))
	y := nn.Linear(r, p.Get("modality_router.weight"), nil)
	return ConvertDType(Tanh(ConvertDType(y, dtypes.Float32)), x.DType())
}

// Layer implements lm.Model: Gemma3nTextDecoderLayer on the streams,
// carrying the per-layer inputs. A sharing layer's state is its source's
// cache, read and not returned.
func (m *Model) Layer(i int, w *lm.Params, x *Node, state []*Node, step *lm.Step) (*Node, []*Node) {
	s := &m.o.Spec
	l := m.o.Layer[i]
	h, n, pl := s.Hidden, m.o.Streams, m.o.PLE
	p := w.Scope(fmt.Sprintf("%slayers.%d", m.o.Prefix, i))
	alt := p.Scope("altup")
	dims := x.Shape().Dimensions
	b, t := dims[0], dims[1]
	streams := Reshape(SliceAxis(x, 2, AxisRange(0, n*h)), b, t, n, h) // [B, T, N, H]
	first := func(v *Node) *Node { return Reshape(SliceAxis(v, 2, AxisRange(0, 1)), b, t, h) }

	// Predict: stream j gains Σ_i c[j·N + i] · stream i.
	c := nn.Linear(m.router(alt, first(streams)), alt.Get("prediction_coefs.weight"), nil) // [B, T, N²]
	pred := Add(streams, Einsum("btji,btih->btjh", Reshape(c, b, t, n, n), streams))
	active := first(pred)

	an := m.norm(active, p.Get("input_layernorm.weight"))
	lr := p.Scope("laurel")
	laurel := Add(an, m.norm(nn.Linear(nn.Linear(an, lr.Get("linear_left.weight"), nil), lr.Get("linear_right.weight"), nil), lr.Get("post_laurel_norm.weight")))
	a, kv := m.attention(p, l, an, state, step)
	gated := Add(active, m.norm(a, p.Get("post_attention_layernorm.weight")))
	mixed := ConvertDType(DivScalar(ConvertDType(Add(gated, laurel), dtypes.Float32), math.Sqrt2), gated.DType())
	f := m.mlp(p.Scope("mlp"), l, m.norm(mixed, p.Get("pre_feedforward_layernorm.weight")))
	out := Add(mixed, m.norm(f, p.Get("post_feedforward_layernorm.weight")))

	// Correct: every stream gains (1 + coef_j) · (out − its first prediction).
	coef := AddScalar(nn.Linear(m.router(alt, out), m.clipped(alt.Get("correction_coefs.weight")), nil), 1) // [B, T, N]
	cor := Add(pred, Mul(Reshape(coef, b, t, n, 1), Reshape(Sub(out, active), b, t, 1, h)))

	// The per-layer input, gated from the corrected first stream, joins
	// the other streams.
	ple := SliceAxis(x, 2, AxisRange(n*h, n*h+s.Layers*pl))
	mine := SliceAxis(ple, 2, AxisRange(0, pl))
	g := first(cor)
	if m.o.CorrectScale {
		g = Mul(g, ExpandLeftToRank(ConvertDType(alt.Get("correct_output_scale"), g.DType()), 3))
	}
	g = Mul(nn.Activate(m.o.Act, nn.Linear(g, p.Get("per_layer_input_gate.weight"), nil)), mine)
	g = m.norm(nn.Linear(g, p.Get("per_layer_projection.weight"), nil), p.Get("post_per_layer_input_norm.weight"))
	cor = Concatenate([]*Node{SliceAxis(cor, 2, AxisRange(0, 1)), Add(SliceAxis(cor, 2, AxisRange(1, n)), Reshape(g, b, t, 1, h))}, 2)

	rest := Concatenate([]*Node{SliceAxis(ple, 2, AxisRange(pl, s.Layers*pl)), mine}, 2)
	var newState []*Node
	if l.Source < 0 {
		newState = kv.State()
	}
	return Concatenate([]*Node{Reshape(cor, b, t, n*h), rest}, 2), newState
}

// clipped is correction_coefs clipped to ±altup_coef_clip, as
// transformers' correct clamps them at every step (predict clamps
// prediction_coefs only in training, so they are read as stored).
func (m *Model) clipped(w *Node) *Node {
	if m.o.Clip {
		return ClipScalar(w, -m.o.CoefClip, m.o.CoefClip)
	}
	return w
}

// mlp is Gemma3nTextMLP: gate_proj (cut by the Gaussian top-k on a
// sparse layer), the activation, times up_proj, down_proj.
func (m *Model) mlp(p *lm.Params, l Layer, x *Node) *Node {
	gate := nn.Linear(x, p.Get("gate_proj.weight"), nil)
	if l.Sparsity > 0 {
		gate = m.gaussianTopK(gate, l.Sparsity)
	}
	y := Mul(nn.Activate(m.o.Act, gate), nn.Linear(x, p.Get("up_proj.weight"), nil))
	return nn.Linear(y, p.Get("down_proj.weight"), nil)
}

// gaussianTopK is relu(x − (mean + std · Φ⁻¹(sparsity))) over the last
// axis, the std the population's, Φ⁻¹ computed in float32 and rounded to
// x's dtype as transformers does.
func (m *Model) gaussianTopK(x *Node, sparsity float64) *Node {
	f32 := dtypes.Float32
	mult := float64(float32(math.Sqrt2 * math.Erfinv(float64(float32(2*float32(sparsity)-1)))))
	mult = nn.RoundTo(mult, x.DType())
	xf := ConvertDType(x, f32)
	mean := ReduceAndKeep(xf, ReduceMean, -1)
	std := Sqrt(ReduceAndKeep(Square(Sub(xf, mean)), ReduceMean, -1))
	return ConvertDType(nn.ReLU(Sub(xf, Add(mean, MulScalar(std, mult)))), x.DType())
}

// attention is Gemma3nTextAttention on h (normed) for layer l: its output
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
		k := nn.SplitHeads(nn.Linear(h, a.Get("k_proj.weight"), nil), s.KVHeads) // [B, T, KV, D]
		v := nn.SplitHeads(nn.Linear(h, a.Get("v_proj.weight"), nil), s.KVHeads)
		k = nn.ApplyRope(m.norm(k, a.Get("k_norm.weight")), cos, sin)
		c = nn.WriteKV(c, k, m.norm(v, nil), step)
	}
	window := 0
	if l.Kind == lm.KindSliding {
		window = s.SlidingWindow
	}
	o := nn.Attention(q, c, nn.AttentionBias(step, window), 1, 0) // [B, T, H·D]
	return nn.Linear(o, a.Get("o_proj.weight"), nil), c
}

// Final implements lm.Finisher: the first stream averaged with the
// others' unembedding projections (each rescaled to its RMS), then the
// final norm.
func (m *Model) Final(w *lm.Params, x *Node) *Node {
	h, n := m.o.Spec.Hidden, m.o.Streams
	stream := func(j int) *Node { return SliceAxis(x, -1, AxisRange(j*h, (j+1)*h)) }
	x0 := stream(0)
	sum := ConvertDType(x0, dtypes.Float32)
	for k := range n - 1 {
		y := nn.Linear(stream(k+1), w.Get(m.name(fmt.Sprintf("altup_unembed_projections.%d.weight", k))), nil)
		sum = Add(sum, ConvertDType(rescaled(y, x0), dtypes.Float32))
	}
	avg := ConvertDType(DivScalar(sum, float64(n)), x.DType())
	return m.norm(avg, w.Get(m.name("norm.weight")))
}

// Head implements lm.Model: Final, the (tied) head and the final
// soft-cap.
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
