// Package clip is transformers' CLIPTextModel and
// CLIPTextModelWithProjection, the text encoders of Stable Diffusion and
// SDXL, as GoMLX graph code.
//
// It follows transformers' models/clip/modeling_clip.py (Radford et al.,
// "Learning Transferable Visual Models From Natural Language Supervision",
// 2021): token + position embeddings, pre-norm causal self-attention
// layers with quick_gelu or gelu MLPs, a final layer norm, the pooled
// output at the end-of-text token and, with projection, text_projection.
package clip

import (
	"encoding/json"
	"fmt"

	"github.com/gomlx/gomlx/backends"
	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive
	"github.com/gomlx/gomlx/pkg/core/tensors"

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/pipeline/diffusion/blocks"
	"github.com/tputool/tputool/pipeline/nn"
)

// Config is text_encoder/config.json (a transformers CLIPTextConfig).
type Config struct {
	Architectures         []string `json:"architectures"`
	VocabSize             int      `json:"vocab_size"`
	HiddenSize            int      `json:"hidden_size"`
	IntermediateSize      int      `json:"intermediate_size"`
	ProjectionDim         int      `json:"projection_dim"`
	NumHiddenLayers       int      `json:"num_hidden_layers"`
	NumAttentionHeads     int      `json:"num_attention_heads"`
	MaxPositionEmbeddings int      `json:"max_position_embeddings"`
	HiddenAct             string   `json:"hidden_act"`
	LayerNormEps          float64  `json:"layer_norm_eps"`
	BosTokenID            *int     `json:"bos_token_id"`
	EosTokenID            *int     `json:"eos_token_id"`
	PadTokenID            *int     `json:"pad_token_id"`
	// WithProjection is true for CLIPTextModelWithProjection.
	WithProjection bool `json:"-"`
}

// ParseConfig decodes config.json and applies transformers' defaults.
func ParseConfig(b []byte) (*Config, error) {
	c := &Config{}
	if err := json.Unmarshal(b, c); err != nil {
		return nil, fmt.Errorf("text encoder config: %w", err)
	}
	arch := "CLIPTextModel"
	if len(c.Architectures) > 0 {
		arch = c.Architectures[0]
	}
	switch arch {
	case "CLIPTextModel":
	case "CLIPTextModelWithProjection":
		c.WithProjection = true
	default:
		return nil, errs.Unsupportedf("text encoder architecture %q (supported: CLIPTextModel, CLIPTextModelWithProjection)", arch)
	}
	def := func(p *int, v int) {
		if *p == 0 {
			*p = v
		}
	}
	def(&c.VocabSize, 49408)
	def(&c.HiddenSize, 512)
	def(&c.IntermediateSize, 2048)
	def(&c.ProjectionDim, 512)
	def(&c.NumHiddenLayers, 12)
	def(&c.NumAttentionHeads, 8)
	def(&c.MaxPositionEmbeddings, 77)
	if c.HiddenAct == "" {
		c.HiddenAct = "quick_gelu"
	}
	if !nn.KnownActivation(c.HiddenAct) {
		return nil, errs.Unsupportedf("text encoder hidden_act %q", c.HiddenAct)
	}
	if c.LayerNormEps == 0 {
		c.LayerNormEps = 1e-5
	}
	if c.EosTokenID == nil {
		eos := 49407
		c.EosTokenID = &eos
	}
	if c.HiddenSize%c.NumAttentionHeads != 0 {
		return nil, fmt.Errorf("text encoder config: hidden_size %d is not divisible into %d heads", c.HiddenSize, c.NumAttentionHeads)
	}
	if c.NumHiddenLayers < 2 {
		return nil, fmt.Errorf("text encoder config: num_hidden_layers %d (need at least 2 for the penultimate hidden state)", c.NumHiddenLayers)
	}
	if c.NumHiddenLayers > 1024 { // per-layer tables are built from it: 2^40 ran out of memory
		return nil, fmt.Errorf("text encoder config: num_hidden_layers %d is over the limit 1024", c.NumHiddenLayers)
	}
	return c, nil
}

// Model is a loaded CLIP text encoder.
type Model struct {
	Cfg     *Config
	Weights *blocks.Weights

	embed  *embeddings
	layers []*layer
	head   *head
}

// Build declares the model's tensors against l.
func Build(l *blocks.Loader, c *Config) *Model {
	d := c.HiddenSize
	m := &Model{Cfg: c}
	m.embed = &embeddings{
		token: l.Take("text_model.embeddings.token_embedding.weight", c.VocabSize, d),
		pos:   l.Take("text_model.embeddings.position_embedding.weight", c.MaxPositionEmbeddings, d),
	}
	// A non-persistent buffer that older exports saved.
	l.Ignore("text_model.embeddings.position_ids", 1, c.MaxPositionEmbeddings)
	names := [4]string{"q_proj", "k_proj", "v_proj", "out_proj"}
	for i := 0; i < c.NumHiddenLayers; i++ {
		p := fmt.Sprintf("text_model.encoder.layers.%d", i)
		ly := &layer{act: c.HiddenAct}
		ly.ln1 = blocks.NewLayerNorm(l, p+".layer_norm1", d, c.LayerNormEps)
		ly.attn = blocks.NewAttention(l, p+".self_attn", names, d, d, d, c.NumAttentionHeads, true, true)
		ly.attn.Causal = true
		ly.ln2 = blocks.NewLayerNorm(l, p+".layer_norm2", d, c.LayerNormEps)
		ly.fc1 = blocks.NewLinear(l, p+".mlp.fc1", d, c.IntermediateSize, true)
		ly.fc2 = blocks.NewLinear(l, p+".mlp.fc2", c.IntermediateSize, d, true)
		m.layers = append(m.layers, ly)
	}
	m.head = &head{ln: blocks.NewLayerNorm(l, "text_model.final_layer_norm", d, c.LayerNormEps)}
	if c.WithProjection {
		m.head.proj = blocks.NewLinear(l, "text_projection", d, c.ProjectionDim, false)
	}
	return m
}

// Load builds and loads the model.
func Load(src blocks.Source, c *Config, backend backends.Backend) (*Model, error) {
	l := blocks.NewLoader("text encoder", src)
	m := Build(l, c)
	w, err := l.Finish(backend)
	if err != nil {
		return nil, err
	}
	m.Weights = w
	return m, nil
}

// EOSPositions returns, per sequence, the position transformers pools at:
// the first eos_token_id, or with the legacy eos_token_id == 2 the first
// position of the largest id (input_ids.argmax). It returns a one-hot
// [B, S] float32 selector.
func (c *Config) EOSPositions(ids [][]int) []float32 {
	s := len(ids[0])
	out := make([]float32, len(ids)*s)
	for b, row := range ids {
		pos := 0
		if *c.EosTokenID == 2 {
			for i, v := range row {
				if v > row[pos] {
					pos = i
				}
			}
		} else {
			for i, v := range row {
				if v == *c.EosTokenID {
					pos = i
					break
				}
			}
		}
		out[b*s+pos] = 1
	}
	return out
}

// Output holds the encoder's results.
type Output[V any] struct {
	// LastHidden is last_hidden_state [B, S, D] (after the final norm).
	LastHidden V
	// Penultimate is hidden_states[-2] [B, S, D]: the input of the last
	// layer, without the final norm (what SDXL conditions on).
	Penultimate V
	// Pooled is pooler_output [B, D], or text_embeds [B, projection_dim]
	// for CLIPTextModelWithProjection.
	Pooled V
}

// Forward runs the encoder on ids [B, S] (int32) with the one-hot eos
// selector [B, S] (see EOSPositions).
func Forward[V any](m *Model, e blocks.Engine[V], ids, eos V) Output[V] {
	h := blocks.Run1(e, m.embed, ids)
	var penult V
	for i, ly := range m.layers {
		if i == len(m.layers)-1 {
			penult = h
		}
		h = blocks.Run1(e, ly, h)
	}
	out := e.Run(m.head, h, eos)
	return Output[V]{LastHidden: out[0], Penultimate: penult, Pooled: out[1]}
}

// Encode runs Forward compiled (one executable) or eager, with ids [B, S].
func (m *Model) Encode(x blocks.Executor, key string, ids [][]int, eager bool) (out Output[*tensors.Tensor], err error) {
	b, s := len(ids), len(ids[0])
	if s > m.Cfg.MaxPositionEmbeddings {
		return out, fmt.Errorf("%s: %d tokens, more than max_position_embeddings %d", key, s, m.Cfg.MaxPositionEmbeddings)
	}
	flat := make([]int32, 0, b*s)
	for _, row := range ids {
		if len(row) != s {
			return out, fmt.Errorf("%s: ragged token batch", key)
		}
		for _, v := range row {
			if v < 0 || v >= m.Cfg.VocabSize {
				return out, fmt.Errorf("%s: token id %d outside the vocabulary (size %d)", key, v, m.Cfg.VocabSize)
			}
			flat = append(flat, int32(v))
		}
	}
	idsT := tensors.FromFlatDataAndDimensions(flat, b, s)
	eosT := tensors.FromFlatDataAndDimensions(m.Cfg.EOSPositions(ids), b, s)
	if eager {
		defer blocks.Recover(&err)
		return Forward[*tensors.Tensor](m, &blocks.Eager{Exec: x, Weights: m.Weights, Prefix: key + "/"}, idsT, eosT), nil
	}
	res, err := blocks.CallTraced(x, key, m.Weights, []*tensors.Tensor{idsT, eosT}, func(e *blocks.Traced, a []*Node) []*Node {
		o := Forward[*Node](m, e, a[0], a[1])
		return []*Node{o.LastHidden, o.Penultimate, o.Pooled}
	})
	if err != nil {
		return out, err
	}
	return Output[*tensors.Tensor]{LastHidden: res[0], Penultimate: res[1], Pooled: res[2]}, nil
}

// ---- blocks -------------------------------------------------------------------

// embeddings: token_embedding[ids] + position_embedding[:S].
type embeddings struct{ token, pos *blocks.Param }

func (b *embeddings) Key() string             { return "clip_embed" }
func (b *embeddings) Params() []*blocks.Param { return []*blocks.Param{b.token, b.pos} }
func (b *embeddings) Apply(w blocks.Bind, in []*Node) []*Node {
	ids := in[0]
	d := ids.Shape().Dimensions                             // [B, S]
	tok := Gather(w(b.token), Reshape(ids, d[0], d[1], 1))  // [B, S, D]
	pos := Slice(w(b.pos), AxisRange(0, d[1]), AxisRange()) // [S, D]
	return []*Node{Add(tok, ExpandAxes(pos, 0))}
}

// layer is CLIPEncoderLayer: pre-norm causal self-attention and MLP, each
// with a residual.
type layer struct {
	act      string
	ln1, ln2 *blocks.LayerNormLayer
	attn     *blocks.AttentionLayer
	fc1, fc2 *blocks.LinearLayer
}

func (ly *layer) Key() string { return "clip_layer(" + ly.act + "," + ly.attn.Key() + ")" }
func (ly *layer) Params() []*blocks.Param {
	var ps []*blocks.Param
	for _, l := range [][]*blocks.Param{ly.ln1.Params(), ly.attn.Params(), ly.ln2.Params(), ly.fc1.Params(), ly.fc2.Params()} {
		ps = append(ps, l...)
	}
	return ps
}
func (ly *layer) Apply(w blocks.Bind, in []*Node) []*Node {
	h := in[0]
	n := ly.ln1.Apply(w, h)
	h = Add(h, ly.attn.Apply(w, n, n))
	m := ly.fc2.Apply(w, nn.Activate(ly.act, ly.fc1.Apply(w, ly.ln2.Apply(w, h))))
	return []*Node{Add(h, m)}
}

// head is final_layer_norm, pooling at the eos selector and the optional
// text_projection. Inputs: h [B, S, D], eos one-hot [B, S]. Outputs:
// last_hidden_state, pooled (or projected) embeddings.
type head struct {
	ln   *blocks.LayerNormLayer
	proj *blocks.LinearLayer
}

func (hd *head) Key() string { return fmt.Sprintf("clip_head(proj%v)", hd.proj != nil) }
func (hd *head) Params() []*blocks.Param {
	ps := hd.ln.Params()
	if hd.proj != nil {
		ps = append(ps, hd.proj.Params()...)
	}
	return ps
}
func (hd *head) Apply(w blocks.Bind, in []*Node) []*Node {
	last := hd.ln.Apply(w, in[0])
	pooled := DotGeneral(in[1], []int{1}, []int{0}, last, []int{1}, []int{0}) // [B, D]
	if hd.proj != nil {
		pooled = hd.proj.Apply(w, pooled)
	}
	return []*Node{last, pooled}
}
