// Package dbrx implements DbrxForCausalLM, Databricks' DBRX (dbrx-base
// and dbrx-instruct: 132B parameters, 36B active, 16 experts of which 4
// run on each token), following transformers' models/dbrx and its
// configuration class, DbrxConfig (sizes in attn_config and ffn_config).
//
// A DBRX block is a pre-norm Llama layer whose MLP is a mixture of
// experts on every layer:
//   - norm_attn_norm.norm_1 and norm_2 are LayerNorms without a bias
//     (eps 1e-5);
//   - the attention's query, key and value projections are one matrix,
//     attn.Wqkv [(H + 2·KV)·D, d_model] (no bias), clamped to ±clip_qkv
//     before the split, with the rotary over whole heads (rotate-half,
//     attn_config.rope_theta) and attn.out_proj after;
//   - ffn.router.layer [experts, d_model] chooses the moe_top_k experts
//     by the softmax over all (float32), their weights divided by their
//     sum (moe_normalize_expert_weights 1, the p of a p-norm; null: not
//     divided); each expert is a GLU, w2ᵀ(act(w1·x) · v1·x), act
//     ffn_act_fn's name (SiLU);
//   - transformer.wte, transformer.norm_f (a LayerNorm without a bias)
//     and an untied lm_head.
//
// The experts' matrices are stored three to a layer:
// ffn.experts.mlp.w1 and v1 [experts·ffn, d_model] hold each expert's
// gate and up projections one after another, and w2 [experts·ffn,
// d_model] each expert's down projection transposed. The loader shows
// each as its experts' matrices (lm.Splitter: views of the stored bytes)
// under pipeline/qwen3moe's names, where the experts run in every
// formulation and held form; the other tensors are renamed to Llama's
// (lm.Renamer).
package dbrx

import (
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/loader/safetensors"
	"github.com/tputool/tputool/pipeline/llama"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/nn"
	"github.com/tputool/tputool/pipeline/qwen3moe"
)

// Architecture is the class this package registers.
const Architecture = "DbrxForCausalLM"

func init() { lm.Register(Architecture, New) }

// Config is a DbrxForCausalLM config.json: DbrxConfig's names.
type Config struct {
	DModel     *int  `json:"d_model"`
	NHeads     *int  `json:"n_heads"`
	NLayers    *int  `json:"n_layers"`
	MaxSeqLen  *int  `json:"max_seq_len"`
	VocabSize  *int  `json:"vocab_size"`
	Tie        *bool `json:"tie_word_embeddings"`
	AttnConfig struct {
		ClipQKV   *float64 `json:"clip_qkv"`
		KVNHeads  *int     `json:"kv_n_heads"`
		RopeTheta *float64 `json:"rope_theta"`
	} `json:"attn_config"`
	FFNConfig map[string]json.RawMessage `json:"ffn_config"`
	BOS       config.IDList              `json:"bos_token_id"`
	EOS       config.IDList              `json:"eos_token_id"`
}

// ffnConfig is DbrxFFNConfig's fields.
type ffnConfig struct {
	Act *struct {
		Name *string `json:"name"`
	} `json:"ffn_act_fn"`
	Width   *int `json:"ffn_hidden_size"`
	Experts *int `json:"moe_num_experts"`
	TopK    *int `json:"moe_top_k"`
}

// DbrxConfig's, DbrxAttentionConfig's and DbrxFFNConfig's defaults.
const (
	defaultHidden    = 2048
	defaultHeads     = 16
	defaultLayers    = 24
	defaultPositions = 2048
	defaultVocab     = 32000
	defaultKVHeads   = 1
	defaultTheta     = 10000.0
	defaultWidth     = 3584
	defaultExperts   = 4
	defaultTopK      = 1
	// eps is nn.LayerNorm's default, which DbrxNormAttentionNorm and
	// norm_f keep.
	eps = 1e-5
)

// Resolve reads a DbrxForCausalLM config.json into the options of
// pipeline/qwen3moe's decoder.
func Resolve(cfg *config.File) (qwen3moe.Options, error) {
	where := lm.ConfigName(cfg)
	var c Config
	if err := cfg.Decode(&c); err != nil {
		return qwen3moe.Options{}, err
	}
	var f ffnConfig
	if c.FFNConfig != nil {
		raw, _ := json.Marshal(c.FFNConfig)
		if err := json.Unmarshal(raw, &f); err != nil {
			return qwen3moe.Options{}, fmt.Errorf("%s: ffn_config: %w", where, err)
		}
	}
	if lm.Or(c.Tie, false) {
		return qwen3moe.Options{}, fmt.Errorf("%s: tie_word_embeddings is true; DbrxConfig refuses it (DBRX's lm_head is its own)", where)
	}
	s := lm.Spec{
		Architecture: Architecture,
		VocabSize:    lm.Or(c.VocabSize, defaultVocab),
		Hidden:       lm.Or(c.DModel, defaultHidden),
		Layers:       lm.Or(c.NLayers, defaultLayers),
		Heads:        lm.Or(c.NHeads, defaultHeads),
		KVHeads:      lm.Or(c.AttnConfig.KVNHeads, defaultKVHeads),
		MaxPositions: lm.Or(c.MaxSeqLen, defaultPositions),
		Intermediate: lm.Or(f.Width, defaultWidth),
		EOS:          c.EOS,
		BOS:          -1,
	}
	if len(c.BOS) > 0 {
		s.BOS = c.BOS[0]
	}
	experts, topK := lm.Or(f.Experts, defaultExperts), lm.Or(f.TopK, defaultTopK)
	// DbrxConfig's own names, each positive and, where a table or the
	// layer list is sized by it, within what any real model has (the top
	// level's are bounded before New is called: lm's dimLimits).
	for _, d := range []struct {
		field string
		v     int
		max   int
	}{
		{"vocab_size", s.VocabSize, 1 << 26}, {"d_model", s.Hidden, 1 << 24}, {"n_layers", s.Layers, 1 << 16},
		{"n_heads", s.Heads, 1 << 16}, {"attn_config.kv_n_heads", s.KVHeads, 1 << 16}, {"max_seq_len", s.MaxPositions, math.MaxInt32},
		{"ffn_config.ffn_hidden_size", s.Intermediate, 1 << 24}, {"ffn_config.moe_num_experts", experts, 1 << 16},
	} {
		if d.v <= 0 || d.v > d.max {
			return qwen3moe.Options{}, fmt.Errorf("%s: %s is %d; want a positive size of at most %d", where, d.field, d.v, d.max)
		}
	}
	if s.Hidden%s.Heads != 0 {
		return qwen3moe.Options{}, fmt.Errorf("%s: d_model %d is not a multiple of n_heads %d", where, s.Hidden, s.Heads)
	}
	if s.Heads%s.KVHeads != 0 {
		return qwen3moe.Options{}, fmt.Errorf("%s: n_heads %d is not a multiple of attn_config.kv_n_heads %d", where, s.Heads, s.KVHeads)
	}
	s.HeadDim = s.Hidden / s.Heads
	if err := lm.CheckExperts(where, "ffn_config.moe_num_experts", experts, s.Layers); err != nil {
		return qwen3moe.Options{}, err
	}
	if err := s.CheckSizes(where); err != nil { // the checks above cover it; a guard
		return qwen3moe.Options{}, err
	}
	s.LayerKinds = make([]string, s.Layers)
	for i := range s.LayerKinds {
		s.LayerKinds[i] = lm.KindFull
	}
	o := llama.Options{Spec: s, Eps: eps, LayerNorm: true, NormNoBias: true, FusedQKV: true}
	if v := c.AttnConfig.ClipQKV; v != nil {
		if !(*v > 0) {
			return qwen3moe.Options{}, fmt.Errorf("%s: attn_config.clip_qkv is %g; want a positive bound or null", where, *v)
		}
		o.ClipQKV = *v
	}
	act := "silu" // DbrxExpertGLU: ffn_act_fn's name, SiLU without one
	if f.Act != nil && f.Act.Name != nil {
		act = *f.Act.Name
	}
	if o.Act = nn.Activation(act); o.Act == nil {
		return qwen3moe.Options{}, errs.Unsupportedf("%s: ffn_config.ffn_act_fn's name %q is not supported (supported: %s)", where, act, strings.Join(nn.ActivationNames(), ", "))
	}
	var err error
	if o.Rope, err = nn.NewRope(nn.RopeParams{Theta: lm.Or(c.AttnConfig.RopeTheta, defaultTheta), HeadDim: s.HeadDim, MaxPositions: s.MaxPositions}); err != nil {
		return qwen3moe.Options{}, fmt.Errorf("%s: attn_config: %w", where, err)
	}
	m := qwen3moe.Options{Options: o, MoEIntermediate: s.Intermediate, Experts: experts, TopK: topK}
	if m.TopK <= 0 || m.TopK > m.Experts {
		return qwen3moe.Options{}, fmt.Errorf("%s: ffn_config.moe_top_k %d must be in [1, moe_num_experts %d]", where, m.TopK, m.Experts)
	}
	// moe_normalize_expert_weights is the p of the p-norm the top weights
	// are divided by: 1 (the default and every release's) their sum, null
	// none. Other norms are refused.
	switch p, ok := c.FFNConfig["moe_normalize_expert_weights"]; {
	case !ok:
		m.NormTopK = true
	case string(p) == "null":
	default:
		v, err := strconv.ParseFloat(string(p), 64)
		if err != nil || v != 1 {
			return qwen3moe.Options{}, errs.Unsupportedf("%s: ffn_config.moe_normalize_expert_weights is %s; only 1 (the weights over their sum) and null are supported", where, p)
		}
		m.NormTopK = true
	}
	m.Sparse = make([]bool, s.Layers)
	for i := range m.Sparse {
		m.Sparse[i] = true
	}
	return m, nil
}

// Layout is DBRX's sparse blocks as the loader shows them: the router
// ffn.router.layer as mlp.gate, and each expert's split matrices as
// mlp.experts.E.{gate,up,down}_proj.weight, the down projection
// transposed as w2 stores it.
var Layout = qwen3moe.Layout{
	Block:   "mlp",
	Experts: lm.ExpertNames{Gate: "gate_proj.weight", Up: "up_proj.weight", Down: "down_proj.weight", DownTransposed: true},
}

// New builds a DbrxForCausalLM from its config.json.
func New(cfg *config.File) (lm.Model, error) {
	o, err := Resolve(cfg)
	if err != nil {
		return nil, err
	}
	return &Model{Model: qwen3moe.NewModelIn(o, Layout)}, nil
}

// Model is DBRX's decoder over its checkpoints' tensors: it splits the
// experts' matrices (lm.Splitter) and renames the rest (lm.Renamer).
type Model struct{ *qwen3moe.Model }

var (
	_ lm.Renamer      = (*Model)(nil)
	_ lm.Splitter     = (*Model)(nil)
	_ lm.StoredLayout = (*Model)(nil)
	_ lm.Routed       = (*Model)(nil)
)

// StoredWeights implements lm.StoredLayout: the tensors a DBRX release
// stores, in its names and shapes (the experts three to a layer).
func (m *Model) StoredWeights() []lm.WeightSpec {
	o, s := m.Options(), m.Spec()
	h, kv := s.Hidden, s.KVHeads*s.HeadDim
	ws := []lm.WeightSpec{{Name: "transformer.wte.weight", Shape: []int{s.VocabSize, h}}}
	for i := range s.Layers {
		p := fmt.Sprintf("transformer.blocks.%d.", i)
		ws = append(ws,
			lm.WeightSpec{Name: p + "norm_attn_norm.norm_1.weight", Shape: []int{h}},
			lm.WeightSpec{Name: p + "norm_attn_norm.attn.Wqkv.weight", Shape: []int{h + 2*kv, h}},
			lm.WeightSpec{Name: p + "norm_attn_norm.attn.out_proj.weight", Shape: []int{h, h}},
			lm.WeightSpec{Name: p + "norm_attn_norm.norm_2.weight", Shape: []int{h}},
			lm.WeightSpec{Name: p + "ffn.router.layer.weight", Shape: []int{o.Experts, h}})
		for _, w := range []string{"w1", "v1", "w2"} {
			ws = append(ws, lm.WeightSpec{Name: p + "ffn.experts.mlp." + w, Shape: []int{o.Experts * o.MoEIntermediate, h}})
		}
	}
	return append(ws, lm.WeightSpec{Name: "transformer.norm_f.weight", Shape: []int{h}}, lm.WeightSpec{Name: "lm_head.weight", Shape: []int{s.VocabSize, h}})
}

// renamed maps the modules of a DBRX block to Llama's and Qwen-MoE's.
var renamed = strings.NewReplacer(
	".norm_attn_norm.norm_1.", ".input_layernorm.",
	".norm_attn_norm.attn.Wqkv.", ".self_attn.qkv_proj.",
	".norm_attn_norm.attn.out_proj.", ".self_attn.o_proj.",
	".norm_attn_norm.norm_2.", ".post_attention_layernorm.",
	".ffn.router.layer.", ".mlp.gate.",
)

// RenameWeight implements lm.Renamer: transformer.wte is
// model.embed_tokens, transformer.blocks model.layers
// (norm_attn_norm.norm_1 input_layernorm, norm_attn_norm.attn self_attn
// with Wqkv as qkv_proj and out_proj as o_proj, norm_attn_norm.norm_2
// post_attention_layernorm, ffn.router.layer mlp.gate),
// transformer.norm_f model.norm.
func (m *Model) RenameWeight(stored string) string {
	switch {
	case stored == "transformer.wte.weight":
		return "model.embed_tokens.weight"
	case stored == "transformer.norm_f.weight":
		return "model.norm.weight"
	case strings.HasPrefix(stored, "transformer.blocks."):
		return renamed.Replace("model.layers." + strings.TrimPrefix(stored, "transformer.blocks."))
	}
	return stored
}

// experts matches a layer's stored expert matrices.
var experts = regexp.MustCompile(`^transformer\.blocks\.(\d+)\.ffn\.experts\.mlp\.(w1|v1|w2)$`)

// SplitWeight implements lm.Splitter: a layer's ffn.experts.mlp.w1, v1
// and w2 [experts·ffn, d_model] are its experts' gate, up and (transposed,
// [ffn, d_model]) down projections one after another, shown as
// model.layers.L.mlp.experts.E.{gate,up,down}_proj.weight. A shape
// other than the config's is an error naming both.
func (m *Model) SplitWeight(name string, shape []int) ([]safetensors.Piece, error) {
	g := experts.FindStringSubmatch(name)
	if g == nil {
		return nil, nil
	}
	layer, err := strconv.Atoi(g[1])
	if err != nil || layer >= m.Spec().Layers {
		return nil, nil // not a layer the model has: reported unused
	}
	o, h := m.Options(), m.Spec().Hidden
	if len(shape) != 2 || shape[0] != o.Experts*o.MoEIntermediate || shape[1] != h {
		return nil, fmt.Errorf("tensor %s has shape %v; the config implies [%d, %d] (moe_num_experts %d × ffn_hidden_size %d, d_model %d)",
			name, shape, o.Experts*o.MoEIntermediate, h, o.Experts, o.MoEIntermediate, h)
	}
	proj := map[string]string{"w1": Layout.Experts.Gate, "v1": Layout.Experts.Up, "w2": Layout.Experts.Down}[g[2]]
	pieces := make([]safetensors.Piece, o.Experts)
	for e := range pieces {
		pieces[e] = safetensors.Piece{Name: fmt.Sprintf("model.layers.%d.mlp.experts.%d.%s", layer, e, proj), Shape: []int{o.MoEIntermediate, h}}
	}
	return pieces, nil
}
