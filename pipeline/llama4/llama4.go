// Package llama4 implements Meta's Llama 4 text model (Llama 4 Scout
// 17B-16E and Maverick 17B-128E, "The Llama 4 herd", Meta, 2025),
// following transformers' models/llama4/modeling_llama4.py:
// Llama4ForCausalLM, and the text model of Llama4ForConditionalGeneration
// (the Hub releases; its vision tower and projector are not read).
//
// A layer is Llama's grouped-query attention (pipeline/llama, its options
// set as below) then a feed-forward block:
//
//   - The rotary embedding rotates adjacent pairs of each head (the
//     complex multiplication of apply_rotary_emb: llama.Options.RopePairs),
//     with Llama 3.1's "llama3" frequency scaling where rope_scaling asks,
//     on every layer but each no_rope_layer_interval-th (no_rope_layers:
//     the NoPE layers, llama.Options.NoRope).
//   - On the rotating layers, use_qk_norm normalizes each query and key
//     head by its root mean square, with no weight, after the rotary
//     (Llama4TextL2Norm). On the NoPE layers, attn_temperature_tuning
//     scales the queries by log1p(floor((position+1)/floor_scale)) ·
//     attn_scale + 1 (nn.TemperatureScale).
//   - The rotating layers attend in chunks of attention_chunk_size
//     positions (layer_types chunked_attention: a token sees the tokens
//     before it in its own chunk, nn.ChunkedAttentionBias), the NoPE
//     layers over the whole context.
//   - The layers moe_layers names (every interleave_moe_layer_step-th:
//     all of Scout's, every other one of Maverick's) hold Llama4TextMoe:
//     the router (feed_forward.router) keeps the top num_experts_per_tok
//     logits, each chosen expert is weighed by the sigmoid of its logit,
//     and that weight scales the expert's input, not its output
//     (nn.ExpertStack.WeighInputs), plus an ungated shared expert of the
//     same width. The other layers hold a SwiGLU of
//     intermediate_size_mlp.
//
// The experts are stored stacked and transposed, as transformers holds
// them (Llama4TextExperts): feed_forward.experts.gate_up_proj [E, hidden,
// 2·intermediate], each expert's gate columns then its up columns, and
// feed_forward.experts.down_proj [E, intermediate, hidden]; the loader
// transposes them into nn.ExpertStack's [E, out, in]
// (lm.WeightSpec.Transposed). A checkpoint holding the experts one by one
// (experts.{e}.{gate,up,down}_proj.weight) is assembled into the same
// stacks. The experts run in the model's graph only (lm.InGraphExperts):
// compile's one-by-one formulations weigh an expert's output.
package llama4

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive

	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/llama"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/nn"
)

// The architectures this package builds.
const (
	CausalLM    = "Llama4ForCausalLM"
	Conditional = "Llama4ForConditionalGeneration"
)

func init() {
	lm.Register(CausalLM, New)
	lm.Register(Conditional, New)
}

// Config is a Llama4ForCausalLM config.json, or the text_config of a
// Llama4ForConditionalGeneration one: the Llama fields plus Llama 4's.
type Config struct {
	llama.Config
	IntermediateSizeMLP    *int            `json:"intermediate_size_mlp"`
	NumLocalExperts        *int            `json:"num_local_experts"`
	NumExpertsPerTok       *int            `json:"num_experts_per_tok"`
	InterleaveMoELayerStep *int            `json:"interleave_moe_layer_step"`
	MoELayers              *[]int          `json:"moe_layers"`
	UseQKNorm              *bool           `json:"use_qk_norm"`
	NoRopeLayers           []int           `json:"no_rope_layers"`
	NoRopeLayerInterval    *int            `json:"no_rope_layer_interval"`
	AttentionChunkSize     json.RawMessage `json:"attention_chunk_size"`
	AttnTemperatureTuning  json.RawMessage `json:"attn_temperature_tuning"`
	FloorScale             *float64        `json:"floor_scale"`
	AttnScale              *float64        `json:"attn_scale"`
}

// Defaults are Llama4TextConfig's (Maverick's sizes: its defaults are
// neither release's whole).
var Defaults = llama.Defaults{
	VocabSize: 202048, Hidden: 5120, Intermediate: 8192, Layers: 48, Heads: 40,
	MaxPositions: 4096 * 32, Eps: 1e-5, RopeTheta: 500000, Tie: false, Act: "silu",
}

// Llama4TextConfig's other defaults.
const (
	defaultIntermediateMLP = 16384
	defaultKVHeads         = 8
	defaultHeadDim         = 128
	defaultExperts         = 16
	defaultTopK            = 1
	defaultNoRopeInterval  = 4
	defaultChunk           = 8192
	defaultFloorScale      = 8192
	defaultAttnScale       = 0.1
)

// Options are the resolved hyperparameters.
type Options struct {
	llama.Options
	// Experts and TopK are num_local_experts and num_experts_per_tok;
	// MoEIntermediate is intermediate_size, the width of each routed
	// expert and of the shared expert. Spec.Intermediate is
	// intermediate_size_mlp, the dense layers' width.
	Experts, TopK, MoEIntermediate int
	// Sparse[i] reports that layer i holds the experts (moe_layers).
	Sparse []bool
}

// Resolve reads a Llama 4 config.json (nested or flat).
func Resolve(cfg *config.File) (Options, error) {
	where := lm.ConfigName(cfg)
	text := cfg
	if cfg.Text != nil {
		text = cfg.Text
		where += " text_config"
	} else if cfg.Architecture() == Conditional {
		return Options{}, fmt.Errorf("%s: %s needs a text_config object", where, Conditional)
	}
	var c Config
	if err := text.Decode(&c); err != nil {
		return Options{}, err
	}
	// Absent fields take Llama4TextConfig's defaults; an explicit null
	// num_key_value_heads is num_attention_heads and a null head_dim
	// hidden_size/num_attention_heads, as its __post_init__ has them.
	if c.NumKeyValueHeads == nil && !text.Has("num_key_value_heads") {
		kv := defaultKVHeads
		c.NumKeyValueHeads = &kv
	}
	if c.HeadDim == nil && !text.Has("head_dim") {
		hd := defaultHeadDim
		c.HeadDim = &hd
	}
	moeWidth := lm.Or(c.IntermediateSize, Defaults.Intermediate)
	c.IntermediateSize = c.IntermediateSizeMLP // the Spec's width is the dense layers'
	d := Defaults
	d.Intermediate = defaultIntermediateMLP
	types := c.LayerTypes
	c.LayerTypes = nil // read below, with chunked_attention
	named := *text
	named.Path = cfg.Path
	named.Architectures = cfg.Architectures
	base, err := c.Resolve(&named, d)
	if err != nil {
		return Options{}, err
	}
	s := &base.Spec
	if len(s.EOS) == 0 {
		s.EOS = cfg.ModelEOS()
	}
	if cfg.Text != nil && c.TieWordEmbeddings == nil { // the text model's own field decides; the wrapper's when it has none
		var top struct {
			Tie *bool `json:"tie_word_embeddings"`
		}
		if err := cfg.Decode(&top); err != nil {
			return Options{}, err
		}
		s.TieEmbeddings = lm.Or(top.Tie, false)
	}
	if !text.Has("bos_token_id") {
		s.BOS = 1 // Llama4TextConfig's
	}
	base.MLPBias = false
	base.RopePairs = true
	o := Options{
		Options:         base,
		Experts:         lm.Or(c.NumLocalExperts, defaultExperts),
		TopK:            lm.Or(c.NumExpertsPerTok, defaultTopK),
		MoEIntermediate: moeWidth,
	}
	n := s.Layers
	if o.Experts <= 0 || o.TopK <= 0 || o.TopK > o.Experts || o.MoEIntermediate <= 0 {
		return Options{}, fmt.Errorf("%s: num_local_experts %d and intermediate_size %d must be positive, and num_experts_per_tok %d in [1, num_local_experts]",
			where, o.Experts, o.MoEIntermediate, o.TopK)
	}
	if err := lm.CheckExperts(where, "num_local_experts", o.Experts, n); err != nil {
		return Options{}, err
	}

	// moe_layers, else every interleave_moe_layer_step-th layer.
	o.Sparse = make([]bool, n)
	if c.MoELayers != nil {
		for _, l := range *c.MoELayers {
			if l < 0 || l >= n {
				return Options{}, fmt.Errorf("%s: moe_layers names layer %d of %d", where, l, n)
			}
			o.Sparse[l] = true
		}
	} else {
		step := lm.Or(c.InterleaveMoELayerStep, 1)
		if step <= 0 {
			return Options{}, fmt.Errorf("%s: interleave_moe_layer_step must be positive, got %d", where, step)
		}
		for l := step - 1; l < n; l += step {
			o.Sparse[l] = true
		}
	}

	// no_rope_layers (1: the layer rotates), else every
	// no_rope_layer_interval-th layer without the rotary; an empty list
	// takes the default, as Llama4TextConfig does.
	if o.NoRope, err = lm.NoRopeLayers(where, c.NoRopeLayers, c.NoRopeLayerInterval, defaultNoRopeInterval, n); err != nil {
		return Options{}, err
	}
	o.QKL2Norm = lm.Or(c.UseQKNorm, true)

	tuning, err := truthy(c.AttnTemperatureTuning, true)
	if err != nil {
		return Options{}, fmt.Errorf("%s: attn_temperature_tuning: %w", where, err)
	}
	if tuning {
		o.TempFloor, o.TempScale = lm.Or(c.FloorScale, defaultFloorScale), lm.Or(c.AttnScale, defaultAttnScale)
		if o.TempFloor <= 0 {
			return Options{}, fmt.Errorf("%s: floor_scale must be positive, got %g", where, o.TempFloor)
		}
	}

	// attention_chunk_size (null: none), and layer_types, else chunked
	// attention on the rotating layers, full on the NoPE ones.
	o.Chunk = defaultChunk
	if raw := bytes.TrimSpace(c.AttentionChunkSize); len(raw) > 0 {
		if bytes.Equal(raw, []byte("null")) {
			o.Chunk = 0
		} else if err := json.Unmarshal(raw, &o.Chunk); err != nil || o.Chunk <= 0 {
			return Options{}, fmt.Errorf("%s: attention_chunk_size must be a positive integer or null, got %s", where, raw)
		}
	}
	kinds, err := lm.LayerTypes(where, types, n, lm.KindFull, lm.KindChunked)
	if err != nil {
		return Options{}, err
	}
	if kinds == nil {
		kinds = make([]string, n)
		for i := range kinds {
			kinds[i] = lm.KindFull
			if !o.NoRope[i] {
				kinds[i] = lm.KindChunked
			}
		}
	}
	if o.Chunk == 0 { // no chunk: vLLM's Llama 4 attends in full; transformers cannot build the chunked mask
		for i, k := range kinds {
			if k == lm.KindChunked {
				kinds[i] = lm.KindFull
			}
		}
	}
	o.Spec.LayerKinds = kinds
	return o, nil
}

// truthy reads a JSON bool, or a number (the first Llama 4 configs wrote
// attn_temperature_tuning as 4): absent gives def.
func truthy(raw json.RawMessage, def bool) (bool, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return def, nil
	}
	var b bool
	if err := json.Unmarshal(raw, &b); err == nil {
		return b, nil
	}
	var f float64
	if err := json.Unmarshal(raw, &f); err != nil {
		return false, fmt.Errorf("want a bool or a number, got %s", raw)
	}
	return f != 0, nil
}

// New builds the model from its config.json.
func New(cfg *config.File) (lm.Model, error) {
	o, err := Resolve(cfg)
	if err != nil {
		return nil, err
	}
	return NewModel(o, cfg.Architecture() == Conditional), nil
}

// Model is the Llama 4 text decoder: llama.Model's attention with Llama
// 4's options, its own feed-forward blocks.
type Model struct {
	*llama.Model
	o          Options
	multimodal bool
}

// NewModel returns the decoder for resolved options; multimodal reads a
// Llama4ForConditionalGeneration checkpoint (RenameWeight, SkipWeight).
func NewModel(o Options, multimodal bool) *Model {
	return &Model{Model: llama.NewModel(o.Options), o: o, multimodal: multimodal}
}

// Options returns the resolved options.
func (m *Model) Options() Options { return m.o }

// LayerKind implements lm.Model: the attention kind, marked "+nope" on
// the layers without the rotary (whose graphs differ from the rotating
// layers' of the same kind: no rotary, no q/k norm, the temperature), so
// that executors never share one layer's program with the other (the
// attention masks read Spec.LayerKinds).
func (m *Model) LayerKind(i int) string {
	k := m.Model.LayerKind(i)
	if i < len(m.o.NoRope) && m.o.NoRope[i] {
		return k + "+nope"
	}
	return k
}

// ff is layer i's feed-forward block's name prefix.
func ff(i int) string { return fmt.Sprintf("model.layers.%d.feed_forward", i) }

// LayerWeights implements lm.Model: attention and norms, then the dense
// MLP or the router, the transposed expert stacks and the shared expert.
func (m *Model) LayerWeights(i int) []lm.WeightSpec {
	s := m.Spec()
	ws := m.AttentionWeights(i)
	p := ff(i) + "."
	mlp := func(prefix string, inter int) {
		ws = append(ws,
			lm.WeightSpec{Name: prefix + "gate_proj.weight", Shape: []int{inter, s.Hidden}, Matmul: true, TP: lm.Column},
			lm.WeightSpec{Name: prefix + "up_proj.weight", Shape: []int{inter, s.Hidden}, Matmul: true, TP: lm.Column},
			lm.WeightSpec{Name: prefix + "down_proj.weight", Shape: []int{s.Hidden, inter}, Matmul: true, TP: lm.Row})
	}
	if !m.o.Sparse[i] {
		mlp(p, s.Intermediate)
		return ws
	}
	ws = append(ws, lm.WeightSpec{Name: p + "router.weight", Shape: []int{m.o.Experts, s.Hidden}, Matmul: true, TP: lm.Replicated, Router: true})
	for _, w := range lm.QwenExperts.Stacked(p+"experts", m.o.Experts, m.o.MoEIntermediate, s.Hidden) {
		w.Transposed = true // Llama4TextExperts' [E, in, out]
		ws = append(ws, w)
	}
	mlp(p+"shared_expert.", m.o.MoEIntermediate)
	return ws
}

// Layer implements lm.Model: attention (llama.Model.Attend), then the
// dense MLP or the experts: the router's top k, each weighed by the
// sigmoid of its logit applied to its input, plus the shared expert.
func (m *Model) Layer(i int, w *lm.Params, x *Node, state []*Node, step *lm.Step) (*Node, []*Node) {
	x, h, kv := m.Attend(i, w, x, state, step)
	p := w.Scope(ff(i))
	mlp := func(p *lm.Params) *Node {
		return nn.GatedMLP(h, p.Get("gate_proj.weight"), nil, p.Get("up_proj.weight"), nil, p.Get("down_proj.weight"), nil, m.o.Act)
	}
	if !m.o.Sparse[i] {
		return Add(x, mlp(p)), kv
	}
	dims := h.Shape().Dimensions
	b, t, hd := dims[0], dims[1], dims[2]
	flat := Reshape(h, b*t, hd)
	logits := ConvertDType(nn.Linear(flat, p.Get("router.weight"), nil), dtypes.Float32) // [N, E]
	ids, top := nn.TopKBy(logits, logits, m.o.TopK)                                      // [N, K]
	ep := p.Scope("experts")
	routed := nn.ExpertStack{Gate: ep.Get("gate_up_proj"), Down: ep.Get("down_proj"), Act: m.o.Act, WeighInputs: true}.
		Routed(flat, ids, Sigmoid(top), step.GatherExperts) // [N, H]
	out := Add(mlp(p.Scope("shared_expert")), Reshape(routed, b, t, hd))
	return Add(x, out), kv
}

// InGraphExperts implements lm.InGraphExperts.
func (m *Model) InGraphExperts() string {
	return "experts whose routing weights scale their inputs, held stacked and transposed in the checkpoint"
}

var (
	_ lm.InGraphExperts = (*Model)(nil)
	_ lm.Renamer        = (*Model)(nil)
	_ lm.Skipper        = (*Model)(nil)
)

// conversion maps a Llama4ForConditionalGeneration checkpoint's text
// model names (the releases' language_model.*, and transformers v5's
// model.language_model.*) to Llama4ForCausalLM's.
var conversion = [][2]string{
	{"language_model.model.", "model."},
	{"language_model.lm_head.", "lm_head."},
	{"model.language_model.", "model."},
}

// RenameWeight implements lm.Renamer: the multimodal class reads its text
// model under Llama4ForCausalLM's names.
func (m *Model) RenameWeight(stored string) string {
	if !m.multimodal {
		return stored
	}
	return lm.RenamePrefix(stored, conversion)
}

// SkipWeight implements lm.Skipper: the multimodal class does not read
// the vision tower or the projector.
func (m *Model) SkipWeight(name string) (string, bool) {
	if !m.multimodal {
		return "", false
	}
	return lm.SkipPrefixed(name, "vision tower and projector (vision_model.*, multi_modal_projector.*): tputool runs the text model only",
		"vision_model.", "multi_modal_projector.", "model.vision_model.", "model.multi_modal_projector.")
}
