// Package mmdit is diffusers' SD3Transformer2DModel, the multimodal
// diffusion transformer (MMDiT) of Stable Diffusion 3 and 3.5 (Esser et al.,
// "Scaling Rectified Flow Transformers for High-Resolution Image
// Synthesis", 2024), as GoMLX graph code.
//
// It follows diffusers' models/transformers/transformer_sd3.py with
// JointTransformerBlock (models/attention.py), JointAttnProcessor2_0,
// AdaLayerNormZero/AdaLayerNormContinuous (models/normalization.py) and
// PatchEmbed/CombinedTimestepTextProjEmbeddings (models/embeddings.py):
// patchify with a cropped sin-cos position table, timestep + pooled text
// conditioning, joint attention over image and text tokens with adaLN-Zero
// modulation, and the final adaptive norm and unpatchify. SD3.5's qk RMS
// norm is supported; its dual-attention layers (SD3.5 Medium) are not.
package mmdit

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

// Config is transformer/config.json of an SD3Transformer2DModel.
type Config struct {
	ClassName            string  `json:"_class_name"`
	SampleSize           int     `json:"sample_size"`
	PatchSize            int     `json:"patch_size"`
	InChannels           int     `json:"in_channels"`
	NumLayers            int     `json:"num_layers"`
	AttentionHeadDim     int     `json:"attention_head_dim"`
	NumAttentionHeads    int     `json:"num_attention_heads"`
	JointAttentionDim    int     `json:"joint_attention_dim"`
	CaptionProjectionDim int     `json:"caption_projection_dim"`
	PooledProjectionDim  int     `json:"pooled_projection_dim"`
	OutChannels          int     `json:"out_channels"`
	PosEmbedMaxSize      int     `json:"pos_embed_max_size"`
	DualAttentionLayers  []int   `json:"dual_attention_layers"`
	QKNorm               *string `json:"qk_norm"`
}

// ParseConfig decodes config.json and applies diffusers' defaults.
func ParseConfig(b []byte) (*Config, error) {
	c := &Config{SampleSize: 128, PatchSize: 2, InChannels: 16, NumLayers: 18, AttentionHeadDim: 64,
		NumAttentionHeads: 18, JointAttentionDim: 4096, CaptionProjectionDim: 1152, PooledProjectionDim: 2048,
		OutChannels: 16, PosEmbedMaxSize: 96}
	if err := json.Unmarshal(b, c); err != nil {
		return nil, fmt.Errorf("transformer config: %w", err)
	}
	if c.ClassName != "" && c.ClassName != "SD3Transformer2DModel" {
		return nil, errs.Unsupportedf("transformer config: _class_name %q (want SD3Transformer2DModel)", c.ClassName)
	}
	if len(c.DualAttentionLayers) > 0 {
		return nil, errs.Unsupportedf("transformer config: dual_attention_layers (SD3.5 Medium's MMDiT-X) are not supported")
	}
	if c.QKNorm != nil && *c.QKNorm != "rms_norm" {
		return nil, errs.Unsupportedf("transformer config: qk_norm %q (supported: null, rms_norm)", *c.QKNorm)
	}
	if c.OutChannels == 0 {
		c.OutChannels = c.InChannels
	}
	if c.PatchSize < 1 || c.NumLayers < 1 || c.AttentionHeadDim < 1 || c.NumAttentionHeads < 1 || c.PosEmbedMaxSize < 1 {
		return nil, fmt.Errorf("transformer config: patch_size, num_layers, attention_head_dim, num_attention_heads and pos_embed_max_size must be positive")
	}
	if c.CaptionProjectionDim != c.Inner() {
		return nil, errs.Unsupportedf("transformer config: caption_projection_dim %d differs from the inner width %d", c.CaptionProjectionDim, c.Inner())
	}
	return c, nil
}

// Inner is num_attention_heads * attention_head_dim, the token width.
func (c *Config) Inner() int { return c.NumAttentionHeads * c.AttentionHeadDim }

// Model is a loaded SD3Transformer2DModel.
type Model struct {
	Cfg     *Config
	Weights *blocks.Weights

	patch   *patchEmbed
	cond    *timeTextEmbed
	context *contextEmbed
	layers  []*jointBlock
	out     *outBlock
}

// Build declares the model's tensors against l.
func Build(l *blocks.Loader, c *Config, o blocks.Options) *Model {
	d := c.Inner()
	m := &Model{Cfg: c}
	p := c.PatchSize
	m.patch = &patchEmbed{
		proj: blocks.NewConv(l, "pos_embed.proj", c.InChannels, d, p, nn.ConvSpec{Stride: p}, o),
		pos:  l.Take("pos_embed.pos_embed", 1, c.PosEmbedMaxSize*c.PosEmbedMaxSize, d),
		max:  c.PosEmbedMaxSize, patch: p,
	}
	m.cond = &timeTextEmbed{
		t1: blocks.NewLinear(l, "time_text_embed.timestep_embedder.linear_1", 256, d, true),
		t2: blocks.NewLinear(l, "time_text_embed.timestep_embedder.linear_2", d, d, true),
		p1: blocks.NewLinear(l, "time_text_embed.text_embedder.linear_1", c.PooledProjectionDim, d, true),
		p2: blocks.NewLinear(l, "time_text_embed.text_embedder.linear_2", d, d, true),
	}
	m.context = &contextEmbed{lin: blocks.NewLinear(l, "context_embedder", c.JointAttentionDim, c.CaptionProjectionDim, true)}
	for i := 0; i < c.NumLayers; i++ {
		m.layers = append(m.layers, newJointBlock(l, fmt.Sprintf("transformer_blocks.%d", i), c, i == c.NumLayers-1))
	}
	m.out = &outBlock{
		ada:   blocks.NewLinear(l, "norm_out.linear", d, 2*d, true),
		proj:  blocks.NewLinear(l, "proj_out", d, p*p*c.OutChannels, true),
		patch: p, outC: c.OutChannels,
	}
	return m
}

// Load builds and loads the model.
func Load(src blocks.Source, c *Config, backend backends.Backend, o blocks.Options) (*Model, error) {
	l := blocks.NewLoader("transformer", src)
	m := Build(l, c, o)
	w, err := l.Finish(backend)
	if err != nil {
		return nil, err
	}
	m.Weights = w
	return m, nil
}

// Inputs of one evaluation: Latents [B, C, H, W] (H, W multiples of the
// patch size, H/p and W/p at most pos_embed_max_size), Timesteps [B]
// (float32, in [0, 1000]), Context [B, T, joint_attention_dim] and Pooled
// [B, pooled_projection_dim].
type Inputs[V any] struct {
	Latents, Timesteps, Context, Pooled V
}

// Forward predicts the flow (velocity) [B, out, H, W].
func Forward[V any](m *Model, e blocks.Engine[V], in Inputs[V]) V {
	h := blocks.Run1(e, m.patch, in.Latents)
	temb := blocks.Run1(e, m.cond, in.Timesteps, in.Pooled)
	c := blocks.Run1(e, m.context, in.Context)
	for _, b := range m.layers {
		out := e.Run(b, h, c, temb)
		h = out[0]
		if !b.contextPreOnly {
			c = out[1]
		}
	}
	return blocks.Run1(e, m.out, h, temb, in.Latents)
}

// Compiled runs the whole forward pass as one executable keyed
// "transformer".
func (m *Model) Compiled(x blocks.Executor, in Inputs[*tensors.Tensor]) (*tensors.Tensor, error) {
	out, err := blocks.CallTraced(x, "transformer", m.Weights, m.args(in), m.traced)
	if err != nil {
		return nil, err
	}
	return out[0], nil
}

// Precompile compiles the whole-model executable without running it when x
// can (blocks.Precompiler).
func (m *Model) Precompile(x blocks.Executor, in Inputs[*tensors.Tensor]) (bool, error) {
	return blocks.PrecompileTraced(x, "transformer", m.Weights, m.args(in), m.traced)
}

// Eager runs the forward pass block by block.
func (m *Model) Eager(x blocks.Executor, in Inputs[*tensors.Tensor]) (out *tensors.Tensor, err error) {
	defer blocks.Recover(&err)
	return Forward[*tensors.Tensor](m, &blocks.Eager{Exec: x, Weights: m.Weights, Prefix: "transformer/"}, in), nil
}

func (m *Model) args(in Inputs[*tensors.Tensor]) []*tensors.Tensor {
	return []*tensors.Tensor{in.Latents, in.Timesteps, in.Context, in.Pooled}
}

func (m *Model) traced(e *blocks.Traced, a []*Node) []*Node {
	return []*Node{Forward[*Node](m, e, Inputs[*Node]{Latents: a[0], Timesteps: a[1], Context: a[2], Pooled: a[3]})}
}

// ---- blocks ---------------------------------------------------------------------

// patchEmbed: proj (kernel = stride = patch) to tokens [B, h*w, D], plus the
// centre crop of the pos_embed table (pos_embed_max_size^2 positions).
type patchEmbed struct {
	proj       *blocks.ConvLayer
	pos        *blocks.Param
	max, patch int
}

func (b *patchEmbed) Key() string {
	return fmt.Sprintf("sd3_patch(%d,%d,%s)", b.max, b.patch, b.proj.Key())
}
func (b *patchEmbed) Params() []*blocks.Param { return append(b.proj.Params(), b.pos) }
func (b *patchEmbed) Apply(w blocks.Bind, in []*Node) []*Node {
	x := b.proj.Apply(w, in[0]) // [B, D, h, w]
	d := x.Shape().Dimensions
	bs, dim, h, wd := d[0], d[1], d[2], d[3]
	if h > b.max || wd > b.max {
		panic(fmt.Errorf("latent grid %dx%d patches exceeds pos_embed_max_size %d", h, wd, b.max))
	}
	tokens := TransposeAllAxes(Reshape(x, bs, dim, h*wd), 0, 2, 1) // [B, h*w, D]
	top, left := (b.max-h)/2, (b.max-wd)/2
	table := Reshape(w(b.pos), b.max, b.max, dim)
	crop := Slice(table, AxisRange(top, top+h), AxisRange(left, left+wd), AxisRange()) // [h, w, D]
	return []*Node{Add(tokens, Reshape(crop, 1, h*wd, dim))}
}

// timeTextEmbed is CombinedTimestepTextProjEmbeddings: sinusoid(256,
// cos first, shift 0) -> TimestepEmbedding, plus the pooled text through
// PixArtAlphaTextProjection (linear, silu, linear).
type timeTextEmbed struct{ t1, t2, p1, p2 *blocks.LinearLayer }

func (b *timeTextEmbed) Key() string { return "sd3_time_text" }
func (b *timeTextEmbed) Params() []*blocks.Param {
	return append(append(append(b.t1.Params(), b.t2.Params()...), b.p1.Params()...), b.p2.Params()...)
}
func (b *timeTextEmbed) Apply(w blocks.Bind, in []*Node) []*Node {
	t := blocks.TimestepSinusoid(in[0], 256, true, 0)
	t = b.t2.Apply(w, nn.SiLU(b.t1.Apply(w, t)))
	p := b.p2.Apply(w, nn.SiLU(b.p1.Apply(w, in[1])))
	return []*Node{Add(t, p)}
}

// contextEmbed is context_embedder: Linear(joint_attention_dim, D).
type contextEmbed struct{ lin *blocks.LinearLayer }

func (b *contextEmbed) Key() string             { return "sd3_context" }
func (b *contextEmbed) Params() []*blocks.Param { return b.lin.Params() }
func (b *contextEmbed) Apply(w blocks.Bind, in []*Node) []*Node {
	return []*Node{b.lin.Apply(w, in[0])}
}

// jointBlock is JointTransformerBlock. Inputs: image tokens [B, N, D], text
// tokens [B, T, D], temb [B, D]. Outputs: image tokens and (unless
// context_pre_only, the last block) text tokens.
type jointBlock struct {
	heads          int
	contextPreOnly bool
	ada, adaCtx    *blocks.LinearLayer // norm1.linear (6D), norm1_context.linear (6D, or 2D when pre-only)
	q, k, v, out   *blocks.LinearLayer
	aq, ak, av     *blocks.LinearLayer // add_q/k/v_proj
	addOut         *blocks.LinearLayer // to_add_out (nil when pre-only)
	nq, nk         *blocks.Param       // qk RMS norm weights (nil without qk_norm)
	naq, nak       *blocks.Param
	ff1, ff2       *blocks.LinearLayer
	cff1, cff2     *blocks.LinearLayer // nil when pre-only
	ps             []*blocks.Param
}

func newJointBlock(l *blocks.Loader, p string, c *Config, preOnly bool) *jointBlock {
	d := c.Inner()
	b := &jointBlock{heads: c.NumAttentionHeads, contextPreOnly: preOnly}
	b.ada = blocks.NewLinear(l, p+".norm1.linear", d, 6*d, true)
	if preOnly {
		b.adaCtx = blocks.NewLinear(l, p+".norm1_context.linear", d, 2*d, true)
	} else {
		b.adaCtx = blocks.NewLinear(l, p+".norm1_context.linear", d, 6*d, true)
	}
	b.q = blocks.NewLinear(l, p+".attn.to_q", d, d, true)
	b.k = blocks.NewLinear(l, p+".attn.to_k", d, d, true)
	b.v = blocks.NewLinear(l, p+".attn.to_v", d, d, true)
	b.aq = blocks.NewLinear(l, p+".attn.add_q_proj", d, d, true)
	b.ak = blocks.NewLinear(l, p+".attn.add_k_proj", d, d, true)
	b.av = blocks.NewLinear(l, p+".attn.add_v_proj", d, d, true)
	b.out = blocks.NewLinear(l, p+".attn.to_out.0", d, d, true)
	if !preOnly {
		b.addOut = blocks.NewLinear(l, p+".attn.to_add_out", d, d, true)
	}
	if c.QKNorm != nil {
		hd := c.AttentionHeadDim
		b.nq = l.Take(p+".attn.norm_q.weight", hd)
		b.nk = l.Take(p+".attn.norm_k.weight", hd)
		b.naq = l.Take(p+".attn.norm_added_q.weight", hd)
		b.nak = l.Take(p+".attn.norm_added_k.weight", hd)
	}
	b.ff1 = blocks.NewLinear(l, p+".ff.net.0.proj", d, 4*d, true)
	b.ff2 = blocks.NewLinear(l, p+".ff.net.2", 4*d, d, true)
	if !preOnly {
		b.cff1 = blocks.NewLinear(l, p+".ff_context.net.0.proj", d, 4*d, true)
		b.cff2 = blocks.NewLinear(l, p+".ff_context.net.2", 4*d, d, true)
	}
	for _, lin := range []*blocks.LinearLayer{b.ada, b.adaCtx, b.q, b.k, b.v, b.aq, b.ak, b.av, b.out, b.addOut, b.ff1, b.ff2, b.cff1, b.cff2} {
		if lin != nil {
			b.ps = append(b.ps, lin.Params()...)
		}
	}
	for _, n := range []*blocks.Param{b.nq, b.nk, b.naq, b.nak} {
		if n != nil {
			b.ps = append(b.ps, n)
		}
	}
	return b
}

func (b *jointBlock) Key() string {
	return fmt.Sprintf("sd3_joint(h%d,pre%v,qk%v)", b.heads, b.contextPreOnly, b.nq != nil)
}
func (b *jointBlock) Params() []*blocks.Param { return b.ps }

// chunks splits the adaLN projection [B, k*D] into k tensors [B, 1, D].
func chunks(x *Node, k int) []*Node {
	d := x.Shape().Dimensions
	n := d[1] / k
	out := make([]*Node, k)
	for i := range out {
		out[i] = Reshape(Slice(x, AxisRange(), AxisRange(i*n, (i+1)*n)), d[0], 1, n)
	}
	return out
}

// modulate is LayerNorm(x, no affine, eps 1e-6) * (1 + scale) + shift.
func modulate(x, shift, scale *Node) *Node {
	return Add(Mul(nn.LayerNorm(x, nil, nil, 1e-6), OnePlus(scale)), shift)
}

// rmsHeads applies RMSNorm(head_dim, eps 1e-6) with weight to every head of
// x [B, S, H*hd].
func rmsHeads(x, weight *Node, heads int) *Node {
	d := x.Shape().Dimensions
	h := Reshape(x, d[0], d[1], heads, d[2]/heads) // [B, S, H, hd]
	return Reshape(nn.RMSNorm(h, weight, 1e-6, false), d...)
}

func (b *jointBlock) Apply(w blocks.Bind, in []*Node) []*Node {
	h, c, temb := in[0], in[1], in[2]
	act := nn.SiLU(temb)
	m := chunks(b.ada.Apply(w, act), 6) // shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp
	nh := modulate(h, m[0], m[1])
	var nc *Node
	var cm []*Node
	if b.contextPreOnly {
		sc := chunks(b.adaCtx.Apply(w, act), 2) // scale, shift
		nc = modulate(c, sc[1], sc[0])
	} else {
		cm = chunks(b.adaCtx.Apply(w, act), 6)
		nc = modulate(c, cm[0], cm[1])
	}

	// Joint attention over [image tokens; text tokens].
	q, k, v := b.q.Apply(w, nh), b.k.Apply(w, nh), b.v.Apply(w, nh)
	aq, ak, av := b.aq.Apply(w, nc), b.ak.Apply(w, nc), b.av.Apply(w, nc)
	if b.nq != nil {
		q, k = rmsHeads(q, w(b.nq), b.heads), rmsHeads(k, w(b.nk), b.heads)
		aq, ak = rmsHeads(aq, w(b.naq), b.heads), rmsHeads(ak, w(b.nak), b.heads)
	}
	n := h.Shape().Dimensions[1]
	t := c.Shape().Dimensions[1]
	att := nn.MultiHeadAttention(Concatenate([]*Node{q, aq}, 1), Concatenate([]*Node{k, ak}, 1),
		Concatenate([]*Node{v, av}, 1), b.heads, false) // [B, N+T, D]
	ha := b.out.Apply(w, Slice(att, AxisRange(), AxisRange(0, n), AxisRange()))

	h = Add(h, Mul(m[2], ha))
	ff := b.ff2.Apply(w, nn.GELUTanh(b.ff1.Apply(w, modulate(h, m[3], m[4]))))
	h = Add(h, Mul(m[5], ff))
	if b.contextPreOnly {
		return []*Node{h}
	}
	ca := b.addOut.Apply(w, Slice(att, AxisRange(), AxisRange(n, n+t), AxisRange()))
	c = Add(c, Mul(cm[2], ca))
	cff := b.cff2.Apply(w, nn.GELUTanh(b.cff1.Apply(w, modulate(c, cm[3], cm[4]))))
	c = Add(c, Mul(cm[5], cff))
	return []*Node{h, c}
}

// outBlock is norm_out (AdaLayerNormContinuous: scale, shift), proj_out and
// unpatchify. Inputs: tokens [B, N, D], temb [B, D], and the latents (for
// their spatial shape).
type outBlock struct {
	ada, proj   *blocks.LinearLayer
	patch, outC int
}

func (b *outBlock) Key() string             { return fmt.Sprintf("sd3_out(%d,%d)", b.patch, b.outC) }
func (b *outBlock) Params() []*blocks.Param { return append(b.ada.Params(), b.proj.Params()...) }
func (b *outBlock) Apply(w blocks.Bind, in []*Node) []*Node {
	h, temb := in[0], in[1]
	ld := in[2].Shape().Dimensions // [B, C, H, W]
	p := b.patch
	hp, wp := ld[2]/p, ld[3]/p
	sc := chunks(b.ada.Apply(w, nn.SiLU(temb)), 2) // scale, shift
	h = modulate(h, sc[1], sc[0])
	h = b.proj.Apply(w, h) // [B, hp*wp, p*p*C]
	// "nhwpqc->nchpwq"
	h = Reshape(h, ld[0], hp, wp, p, p, b.outC)
	h = TransposeAllAxes(h, 0, 5, 1, 3, 2, 4)
	return []*Node{Reshape(h, ld[0], b.outC, hp*p, wp*p)}
}
