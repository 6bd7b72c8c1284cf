// Package gemma3 implements Gemma3ForCausalLM (the text-only Gemma 3
// models, model_type gemma3_text) and the text model of
// Gemma3ForConditionalGeneration (4B and up, model_type gemma3: the
// settings of its text_config; the SigLIP vision tower and the
// multimodal projector are skipped), following transformers'
// models/gemma3/modeling_gemma3.py: "Gemma 3 Technical Report" (Gemma Team,
// 2025, arXiv:2503.19786).
//
// Compared with Llama it has: embeddings scaled by sqrt(hidden_size) in the
// compute dtype; RMSNorm with a (1 + w) scale computed in float32; sandwich
// norms (post_attention_layernorm after attention, pre_ and
// post_feedforward_layernorm around the MLP); per-head q/k norms; GeGLU
// (tanh GELU) MLPs; attention scaled by query_pre_attn_scalar^-0.5;
// interleaved local (sliding-window, rope_local_base_freq) and global
// (rope_theta, rope_scaling) layers; optional attention and final logit
// soft-capping.
//
// Gemma3ForConditionalGeneration's tensors are model.language_model.* and
// lm_head.weight; the first uploads (google/gemma-3-4b-it and its
// siblings) name them language_model.model.* and language_model.lm_head.*,
// which the model renames as transformers' _checkpoint_conversion_mapping
// does (lm.Renamer). Its head applies no final logit soft-capping:
// transformers' Gemma3ForConditionalGeneration.forward does not.
//
// Gemma2ForCausalLM (Gemma 2 2B, 9B, 27B; models/gemma2/modular_gemma2.py)
// is the same decoder without the q/k norms, with Gemma2Config's defaults:
// every second layer global, one rope_theta (10000) for both kinds, and
// attention and final logits soft-capped at 50 and 30.
//
// Gemma3TextForSequenceClassification is the text model with
// GenericForSequenceClassification's head instead of lm_head
// (lm.Classifier: score.weight on the last token's final normed hidden
// states, no soft-capping).
package gemma3

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"

	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/nn"
)

// Conditional is the multimodal class, run text-only; Gemma2 is Gemma 2's
// causal LM.
const (
	Conditional = "Gemma3ForConditionalGeneration"
	Gemma2      = "Gemma2ForCausalLM"
)

func init() {
	lm.Register("Gemma3ForCausalLM", New)
	lm.Register(Gemma2, New)
	lm.Register(Conditional, New)
	// transformers' Gemma3TextForSequenceClassification: the text model
	// with GenericForSequenceClassification's head (lm.Classifier).
	lm.Register("Gemma3TextForSequenceClassification", lm.ClassifierOf(New))
}

// Config is a Gemma3ForCausalLM (gemma3_text) config.json, or the
// text_config of a Gemma3ForConditionalGeneration one. Pointer fields are
// nil when absent; resolve applies Gemma3TextConfig's defaults.
type Config struct {
	Architectures             []string        `json:"architectures"`
	ModelType                 string          `json:"model_type"`
	VocabSize                 *int            `json:"vocab_size"`
	HiddenSize                *int            `json:"hidden_size"`
	IntermediateSize          *int            `json:"intermediate_size"`
	NumHiddenLayers           *int            `json:"num_hidden_layers"`
	NumAttentionHeads         *int            `json:"num_attention_heads"`
	NumKeyValueHeads          *int            `json:"num_key_value_heads"`
	HeadDim                   *int            `json:"head_dim"`
	HiddenActivation          string          `json:"hidden_activation"`
	MaxPositionEmbeddings     *int            `json:"max_position_embeddings"`
	RMSNormEps                *float64        `json:"rms_norm_eps"`
	RopeTheta                 *float64        `json:"rope_theta"`
	RopeLocalBaseFreq         *float64        `json:"rope_local_base_freq"`
	RopeScaling               json.RawMessage `json:"rope_scaling"`
	RopeParameters            json.RawMessage `json:"rope_parameters"`
	AttentionBias             bool            `json:"attention_bias"`
	QueryPreAttnScalar        *float64        `json:"query_pre_attn_scalar"`
	SlidingWindow             *int            `json:"sliding_window"`
	SlidingWindowPattern      *int            `json:"sliding_window_pattern"`
	LayerTypes                []string        `json:"layer_types"`
	FinalLogitSoftcapping     *float64        `json:"final_logit_softcapping"`
	AttnLogitSoftcapping      *float64        `json:"attn_logit_softcapping"`
	TieWordEmbeddings         *bool           `json:"tie_word_embeddings"`
	UseBidirectionalAttention bool            `json:"use_bidirectional_attention"`
	BOSTokenID                config.IDList   `json:"bos_token_id"`
	EOSTokenID                config.IDList   `json:"eos_token_id"`
}

// Model is a Gemma 3 text decoder; it implements lm.Model.
type Model struct {
	spec          lm.Spec
	eps           float64
	scale         float64 // query_pre_attn_scalar^-0.5
	attnSoftcap   float64
	finalSoftcap  float64
	bias          bool
	qkNorm        bool // Gemma 3's q_norm and k_norm (Gemma 2 has none)
	act           func(*Node) *Node
	global, local *nn.Rope
	// prefix is the text model's tensor prefix: "model." for
	// Gemma3ForCausalLM, "model.language_model." for the multimodal class
	// (multimodal set).
	prefix     string
	multimodal bool
}

// resolve applies Gemma3TextConfig's defaults and checks the config. cfg
// is config.json, text the object c was read from (cfg, or its
// text_config).
func (c *Config) resolve(cfg, text *config.File) (*Model, error) {
	where := lm.ConfigName(cfg)
	multimodal := text != cfg
	if multimodal {
		where += " text_config"
	}
	gemma2 := cfg.Architecture() == Gemma2
	d := gemma3Defaults
	if gemma2 {
		d = gemma2Defaults
	}
	if c.UseBidirectionalAttention {
		return nil, errs.Unsupportedf("%s: use_bidirectional_attention is not supported for generation", where)
	}
	s := lm.Spec{
		Architecture: cfg.Architecture(),
		ModelType:    c.ModelType,
		VocabSize:    lm.Or(c.VocabSize, d.vocab),
		Hidden:       lm.Or(c.HiddenSize, 2304),
		Intermediate: lm.Or(c.IntermediateSize, 9216),
		Layers:       lm.Or(c.NumHiddenLayers, 26),
		Heads:        lm.Or(c.NumAttentionHeads, 8),
		KVHeads:      lm.Or(c.NumKeyValueHeads, 4),
		HeadDim:      lm.Or(c.HeadDim, 256),
		MaxPositions: lm.Or(c.MaxPositionEmbeddings, d.maxPositions),
		EOS:          c.EOSTokenID,
		BOS:          2,
	}
	switch {
	case text.Has("eos_token_id"): // c.EOSTokenID, null included
	case multimodal && cfg.Has("eos_token_id"): // Gemma3Config's own, which generation_config.json repeats
		s.EOS = cfg.ModelEOS()
	default:
		s.EOS = []int{1}
	}
	bos := c.BOSTokenID
	if multimodal && !text.Has("bos_token_id") {
		var w struct {
			BOS config.IDList `json:"bos_token_id"`
		}
		if err := cfg.Decode(&w); err != nil {
			return nil, err
		}
		bos = w.BOS
	}
	if len(bos) > 0 {
		s.BOS = bos[0]
	}
	if err := s.CheckSizes(where); err != nil {
		return nil, err
	}
	tie := c.TieWordEmbeddings
	if tie == nil && multimodal { // the wrapper's field decides when text_config has none
		var w struct {
			Tie *bool `json:"tie_word_embeddings"`
		}
		if err := cfg.Decode(&w); err != nil {
			return nil, err
		}
		tie = w.Tie
	}
	s.TieEmbeddings = lm.Or(tie, true)
	s.SlidingWindow = lm.Or(c.SlidingWindow, 4096)
	var err error
	if s.LayerKinds, err = lm.LayerTypes(where, c.LayerTypes, s.Layers, lm.KindFull, lm.KindSliding); err != nil {
		return nil, err
	}
	if s.LayerKinds == nil {
		// Every sliding_window_pattern-th layer is global, the others local.
		pattern := lm.Or(c.SlidingWindowPattern, d.pattern)
		if pattern <= 0 {
			return nil, fmt.Errorf("%s: sliding_window_pattern must be positive, got %d", where, pattern)
		}
		s.LayerKinds = make([]string, s.Layers)
		lm.SlidingPattern(s.LayerKinds, pattern)
	}
	for i, k := range s.LayerKinds {
		if k == lm.KindSliding && s.SlidingWindow <= 0 {
			return nil, fmt.Errorf("%s: layer %d is %s but sliding_window is %d", where, i, k, s.SlidingWindow)
		}
	}
	m := &Model{
		spec:         s,
		eps:          lm.Or(c.RMSNormEps, 1e-6),
		scale:        1 / math.Sqrt(lm.Or(c.QueryPreAttnScalar, 256)),
		attnSoftcap:  softcap(text, "attn_logit_softcapping", c.AttnLogitSoftcapping, d.attnSoftcap),
		finalSoftcap: softcap(text, "final_logit_softcapping", c.FinalLogitSoftcapping, d.finalSoftcap),
		bias:         c.AttentionBias,
		qkNorm:       !gemma2,
		prefix:       "model.",
		multimodal:   multimodal,
	}
	if multimodal {
		m.prefix = "model.language_model."
		m.finalSoftcap = 0 // Gemma3ForConditionalGeneration's head does not soft-cap
	}
	act := c.HiddenActivation
	if act == "" {
		act = "gelu_pytorch_tanh"
	}
	if m.act = nn.Activation(act); m.act == nil {
		return nil, errs.Unsupportedf("%s: hidden_activation %q is not supported (supported: %s)", where, act, strings.Join(nn.ActivationNames(), ", "))
	}
	if err := c.resolveRope(text, m, d); err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	return m, nil
}

// defaults are the configuration classes' defaults where Gemma3TextConfig
// and Gemma2Config differ.
type defaults struct {
	vocab, maxPositions, pattern int
	// globalTheta and localTheta are the rope bases; localTheta 0 takes
	// rope_theta for both kinds (Gemma 2).
	globalTheta, localTheta   float64
	attnSoftcap, finalSoftcap float64
}

var (
	gemma3Defaults = defaults{vocab: 262208, maxPositions: 131072, pattern: 6, globalTheta: 1e6, localTheta: 1e4}
	gemma2Defaults = defaults{vocab: 256000, maxPositions: 8192, pattern: 2, globalTheta: 1e4, attnSoftcap: 50, finalSoftcap: 30}
)

// softcap is a soft-capping field: its value, the class's default when
// absent, 0 (none) when null.
func softcap(cfg *config.File, key string, v *float64, def float64) float64 {
	switch {
	case v != nil:
		return *v
	case cfg.Has(key): // null
		return 0
	}
	return def
}

// resolveRope builds the global and local rotary embeddings: from
// transformers v5's per-layer-type rope_parameters, or from rope_theta +
// rope_scaling (global) and rope_local_base_freq (local, never scaled).
func (c *Config) resolveRope(cfg *config.File, m *Model, d defaults) error {
	s := &m.spec
	var err error
	if len(c.RopeParameters) > 0 && string(c.RopeParameters) != "null" {
		var per map[string]json.RawMessage
		if err := json.Unmarshal(c.RopeParameters, &per); err != nil {
			return fmt.Errorf("rope_parameters: %w", err)
		}
		if _, byKind := per[lm.KindFull]; !byKind && d.localTheta == 0 { // Gemma 2's one rotary, saved flat by transformers v5
			m.global, err = nn.ConfigRope(map[string]json.RawMessage{"rope_parameters": c.RopeParameters}, d.globalTheta, s.HeadDim, s.MaxPositions)
			m.local = m.global
			return err
		}
		build := func(kind string, theta float64) (*nn.Rope, error) {
			raw, ok := per[kind]
			if !ok {
				return nil, fmt.Errorf("rope_parameters has no %q entry", kind)
			}
			return nn.ConfigRope(map[string]json.RawMessage{"rope_parameters": raw}, theta, s.HeadDim, s.MaxPositions)
		}
		if m.global, err = build(lm.KindFull, d.globalTheta); err != nil {
			return err
		}
		local := d.localTheta
		if local == 0 {
			local = d.globalTheta
		}
		m.local, err = build(lm.KindSliding, local)
		return err
	}
	global := map[string]json.RawMessage{"rope_scaling": c.RopeScaling}
	if c.RopeTheta != nil {
		global["rope_theta"] = cfg.Raw["rope_theta"]
	}
	if m.global, err = nn.ConfigRope(global, d.globalTheta, s.HeadDim, s.MaxPositions); err != nil {
		return err
	}
	if d.localTheta == 0 { // Gemma 2: one rope_theta, one rotary for both kinds
		m.local = m.global
		return nil
	}
	m.local, err = nn.NewRope(nn.RopeParams{Theta: lm.Or(c.RopeLocalBaseFreq, d.localTheta), HeadDim: s.HeadDim, MaxPositions: s.MaxPositions})
	return err
}

// New builds a Gemma3ForCausalLM, or the text model of a
// Gemma3ForConditionalGeneration (from its text_config), from config.json.
func New(cfg *config.File) (lm.Model, error) {
	text := cfg
	if cfg.Architecture() == Conditional {
		if cfg.Text == nil {
			return nil, fmt.Errorf("%s: %s needs a text_config object", lm.ConfigName(cfg), Conditional)
		}
		text = cfg.Text
	}
	var c Config
	if err := text.Decode(&c); err != nil {
		return nil, err
	}
	return c.resolve(cfg, text)
}

// conversion is Gemma3ForConditionalGeneration's
// _checkpoint_conversion_mapping: the first uploads' prefixes and the
// ones transformers reads them as.
var conversion = [][2]string{
	{"language_model.model.", "model.language_model."},
	{"vision_tower.", "model.vision_tower."},
	{"multi_modal_projector.", "model.multi_modal_projector."},
	{"language_model.lm_head.", "lm_head."},
}

var _ lm.Renamer = (*Model)(nil)

// RenameWeight implements lm.Renamer: the multimodal class reads the
// first uploads' language_model.model.* as model.language_model.* (and
// the towers and head likewise), as transformers does.
func (m *Model) RenameWeight(stored string) string {
	if !m.multimodal {
		return stored
	}
	return lm.RenamePrefix(stored, conversion)
}

var _ lm.Skipper = (*Model)(nil)

// SkipWeight implements lm.Skipper: the multimodal class does not read
// the vision tower or the multimodal projector (under either layout's
// names).
func (m *Model) SkipWeight(name string) (string, bool) {
	if !m.multimodal {
		return "", false
	}
	return lm.SkipPrefixed(name, "vision tower and projector (model.vision_tower.*, model.multi_modal_projector.*): tputool runs the text model only",
		"model.vision_tower.", "vision_tower.", "model.multi_modal_projector.", "multi_modal_projector.")
}

// Spec implements lm.Model.
func (m *Model) Spec() *lm.Spec { return &m.spec }

// LayerKind implements lm.Model.
func (m *Model) LayerKind(i int) string { return m.spec.LayerKinds[i] }

// LayerState implements lm.Model: a key and a value cache.
func (m *Model) LayerState(i int, batch, cacheLen int) []lm.StateSpec {
	return nn.KVCacheState(batch, m.spec.KVHeads, cacheLen, m.spec.HeadDim)
}

// Softcaps returns the attention and final logit soft-capping (0: none).
func (m *Model) Softcaps() (attn, final float64) { return m.attnSoftcap, m.finalSoftcap }

// QueryScale returns the attention's score scale, query_pre_attn_scalar^-0.5.
func (m *Model) QueryScale() float64 { return m.scale }

// Ropes returns the global and local layers' rotary embeddings (one and
// the same for Gemma 2).
func (m *Model) Ropes() (global, local *nn.Rope) { return m.global, m.local }

// Eps returns rms_norm_eps.
func (m *Model) Eps() float64 { return m.eps }

// EmbedWeights implements lm.Model.
func (m *Model) EmbedWeights() []lm.WeightSpec {
	return []lm.WeightSpec{{Name: m.prefix + "embed_tokens.weight", Shape: []int{m.spec.VocabSize, m.spec.Hidden}, Matmul: true}}
}

// HeadWeights implements lm.Model.
func (m *Model) HeadWeights() []lm.WeightSpec {
	head := "lm_head.weight"
	tp := lm.Vocab // an untied head splits by vocabulary; a tied one is the replicated embedding
	if m.spec.TieEmbeddings {
		head, tp = m.prefix+"embed_tokens.weight", lm.Replicated
	}
	return append(m.FinalWeights(), lm.WeightSpec{Name: head, Shape: []int{m.spec.VocabSize, m.spec.Hidden}, Matmul: true, TP: tp})
}

// FinalWeights implements lm.FinalWeighter: the final norm.
func (m *Model) FinalWeights() []lm.WeightSpec {
	return []lm.WeightSpec{{Name: m.prefix + "norm.weight", Shape: []int{m.spec.Hidden}}}
}

// LayerWeights implements lm.Model.
func (m *Model) LayerWeights(i int) []lm.WeightSpec {
	s := &m.spec
	p := fmt.Sprintf("%slayers.%d.", m.prefix, i)
	q, kv := s.Heads*s.HeadDim, s.KVHeads*s.HeadDim
	var ws []lm.WeightSpec
	add := func(name string, matmul bool, tp lm.TPSplit, shape ...int) {
		ws = append(ws, lm.WeightSpec{Name: p + name, Shape: shape, Matmul: matmul, TP: tp})
	}
	add("input_layernorm.weight", false, lm.Replicated, s.Hidden)
	add("self_attn.q_proj.weight", true, lm.Column, q, s.Hidden)
	add("self_attn.k_proj.weight", true, lm.KVColumn, kv, s.Hidden)
	add("self_attn.v_proj.weight", true, lm.KVColumn, kv, s.Hidden)
	add("self_attn.o_proj.weight", true, lm.Row, s.Hidden, q)
	if m.bias {
		add("self_attn.q_proj.bias", false, lm.Column, q)
		add("self_attn.k_proj.bias", false, lm.KVColumn, kv)
		add("self_attn.v_proj.bias", false, lm.KVColumn, kv)
		add("self_attn.o_proj.bias", false, lm.Replicated, s.Hidden)
	}
	if m.qkNorm {
		add("self_attn.q_norm.weight", false, lm.Replicated, s.HeadDim)
		add("self_attn.k_norm.weight", false, lm.Replicated, s.HeadDim)
	}
	add("post_attention_layernorm.weight", false, lm.Replicated, s.Hidden)
	add("pre_feedforward_layernorm.weight", false, lm.Replicated, s.Hidden)
	add("mlp.gate_proj.weight", true, lm.Column, s.Intermediate, s.Hidden)
	add("mlp.up_proj.weight", true, lm.Column, s.Intermediate, s.Hidden)
	add("mlp.down_proj.weight", true, lm.Row, s.Hidden, s.Intermediate)
	add("post_feedforward_layernorm.weight", false, lm.Replicated, s.Hidden)
	return ws
}

// Embed implements lm.Model: Gemma3TextScaledWordEmbedding, the embedding
// times sqrt(hidden_size) rounded to the compute dtype.
func (m *Model) Embed(w *lm.Params, tokens *Node) *Node {
	x := nn.Embedding(w.Get(m.prefix+"embed_tokens.weight"), tokens) // [B, T, H]
	scale := nn.RoundTo(math.Sqrt(float64(m.spec.Hidden)), x.DType())
	return MulScalar(x, scale)
}

func (m *Model) norm(p *lm.Params, name string, x *Node) *Node {
	return nn.RMSNorm(x, p.Get(name), m.eps, true)
}

func (m *Model) optional(p *lm.Params, name string) *Node {
	if !m.bias {
		return nil
	}
	return p.Get(name)
}

// Layer implements lm.Model: Gemma3DecoderLayer with sandwich norms.
func (m *Model) Layer(i int, w *lm.Params, x *Node, state []*Node, step *lm.Step) (*Node, []*Node) {
	p := w.Scope(fmt.Sprintf("%slayers.%d", m.prefix, i))
	h := m.norm(p, "input_layernorm.weight", x)
	h, c := m.attention(p.Scope("self_attn"), h, nn.KVOf(state), step, m.LayerKind(i))
	h = m.norm(p, "post_attention_layernorm.weight", h)
	x = Add(x, h)
	h = m.norm(p, "pre_feedforward_layernorm.weight", x)
	mp := p.Scope("mlp")
	h = nn.GatedMLP(h, mp.Get("gate_proj.weight"), nil, mp.Get("up_proj.weight"), nil, mp.Get("down_proj.weight"), nil, m.act)
	h = m.norm(p, "post_feedforward_layernorm.weight", h)
	return Add(x, h), c.State()
}

// attention is Gemma3Attention: projections, (1+w) q/k norms per head, the
// local or global rotary embedding, cache write, soft-capped grouped-query
// attention scaled by query_pre_attn_scalar^-0.5, o_proj.
func (m *Model) attention(p *lm.Params, x *Node, c nn.KV, step *lm.Step, kind string) (*Node, nn.KV) {
	s := &m.spec
	q := nn.SplitHeads(nn.Linear(x, p.Get("q_proj.weight"), m.optional(p, "q_proj.bias")), s.Heads)   // [B, T, H, D]
	k := nn.SplitHeads(nn.Linear(x, p.Get("k_proj.weight"), m.optional(p, "k_proj.bias")), s.KVHeads) // [B, T, KV, D]
	v := nn.SplitHeads(nn.Linear(x, p.Get("v_proj.weight"), m.optional(p, "v_proj.bias")), s.KVHeads) // [B, T, KV, D]
	if m.qkNorm {
		q = m.norm(p, "q_norm.weight", q)
		k = m.norm(p, "k_norm.weight", k)
	}
	rope, window := m.global, 0
	if kind == lm.KindSliding {
		rope, window = m.local, s.SlidingWindow
	}
	cos, sin := rope.CosSin(step, x.DType())
	q, k = nn.ApplyRope(q, cos, sin), nn.ApplyRope(k, cos, sin)
	c = nn.WriteKV(c, k, v, step)
	out := nn.Attention(q, c, nn.AttentionBias(step, window), m.scale, m.attnSoftcap) // [B, T, H*D]
	return nn.Linear(out, p.Get("o_proj.weight"), m.optional(p, "o_proj.bias")), c
}

var _ lm.FinalWeighter = (*Model)(nil)

// Final implements lm.Finisher: the final (1+w) RMSNorm.
func (m *Model) Final(w *lm.Params, x *Node) *Node {
	return nn.RMSNorm(x, w.Get(m.prefix+"norm.weight"), m.eps, true)
}

// Head implements lm.Model: final (1+w) norm, lm_head, final soft-capping
// (none for the multimodal class).
func (m *Model) Head(w *lm.Params, x *Node) *Node {
	x = m.Final(w, x)
	name := "lm_head.weight"
	if m.spec.TieEmbeddings {
		name = m.prefix + "embed_tokens.weight"
	}
	logits := nn.Linear(x, w.Get(name), nil) // [B, V]
	return nn.Softcap(logits, m.finalSoftcap)
}
