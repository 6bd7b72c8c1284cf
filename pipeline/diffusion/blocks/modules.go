package blocks

import (
	"fmt"

	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive

	"github.com/tputool/tputool/pipeline/nn"
)

// ---- ResnetBlock2D ----------------------------------------------------------

// ResnetConfig are ResnetBlock2D's hyper-parameters.
type ResnetConfig struct {
	In, Out      int
	TembChannels int // 0: no time embedding (the VAE)
	Groups       int
	Eps          float64
	Act          string
	OutputScale  float64 // output_scale_factor, 1 by default
	// SkipChannels > 0 makes the block take a skip connection that is
	// concatenated after the input (UNet up blocks); In counts both.
	SkipChannels int
}

// Resnet is diffusers' ResnetBlock2D (time_embedding_norm "default"):
// norm1, act, conv1, + time_emb_proj(act(temb)), norm2, act, conv2, plus
// the (1x1 conv_shortcut when channels change) input, / output_scale.
//
// Inputs: x [B, C, H, W], then skip [B, Cs, H, W] when SkipChannels > 0,
// then temb [B, T] when TembChannels > 0.
type Resnet struct {
	Cfg          ResnetConfig
	Norm1, Norm2 *GroupNormLayer
	Conv1, Conv2 *ConvLayer
	TimeProj     *LinearLayer
	Shortcut     *ConvLayer
	ps           []*Param
}

// NewResnet declares a ResnetBlock2D under prefix.
func NewResnet(l *Loader, prefix string, c ResnetConfig, o Options) *Resnet {
	if c.OutputScale == 0 {
		c.OutputScale = 1
	}
	r := &Resnet{Cfg: c}
	r.Norm1 = NewGroupNorm(l, prefix+".norm1", c.In, c.Groups, c.Eps)
	r.Conv1 = NewConv(l, prefix+".conv1", c.In, c.Out, 3, nn.SamePad(1, 1), o)
	if c.TembChannels > 0 {
		r.TimeProj = NewLinear(l, prefix+".time_emb_proj", c.TembChannels, c.Out, true)
	}
	r.Norm2 = NewGroupNorm(l, prefix+".norm2", c.Out, c.Groups, c.Eps)
	r.Conv2 = NewConv(l, prefix+".conv2", c.Out, c.Out, 3, nn.SamePad(1, 1), o)
	if c.In != c.Out {
		r.Shortcut = NewConv(l, prefix+".conv_shortcut", c.In, c.Out, 1, nn.SamePad(1, 0), o)
	}
	r.ps = concatParams(r.Norm1.Params(), r.Conv1.Params(), r.Norm2.Params(), r.Conv2.Params())
	if r.TimeProj != nil {
		r.ps = append(r.ps, r.TimeProj.Params()...)
	}
	if r.Shortcut != nil {
		r.ps = append(r.ps, r.Shortcut.Params()...)
	}
	return r
}

// Key implements Block.
func (r *Resnet) Key() string {
	c := r.Cfg
	return fmt.Sprintf("resnet(%s,%s,%s,temb%v,skip%v,short%v,%g)", r.Norm1.Key(), c.Act, r.Conv1.Key(),
		r.TimeProj != nil, c.SkipChannels > 0, r.Shortcut != nil, c.OutputScale)
}

// Params implements Block.
func (r *Resnet) Params() []*Param { return r.ps }

// Apply implements Block.
func (r *Resnet) Apply(w Bind, in []*Node) []*Node {
	x := in[0]
	rest := in[1:]
	if r.Cfg.SkipChannels > 0 {
		x = Concatenate([]*Node{x, rest[0]}, 1) // [B, C + Cs, H, W]
		rest = rest[1:]
	}
	h := nn.Activate(r.Cfg.Act, r.Norm1.Apply(w, x))
	h = r.Conv1.Apply(w, h)
	if r.TimeProj != nil {
		t := r.TimeProj.Apply(w, nn.Activate(r.Cfg.Act, rest[0])) // [B, Out]
		d := t.Shape().Dimensions
		h = Add(h, Reshape(t, d[0], d[1], 1, 1))
	}
	h = nn.Activate(r.Cfg.Act, r.Norm2.Apply(w, h))
	h = r.Conv2.Apply(w, h)
	if r.Shortcut != nil {
		x = r.Shortcut.Apply(w, x)
	}
	out := Add(x, h)
	if r.Cfg.OutputScale != 1 {
		out = DivScalar(out, r.Cfg.OutputScale)
	}
	return []*Node{out}
}

// ---- Transformer2DModel (continuous input) ----------------------------------

// TransformerConfig are Transformer2DModel's hyper-parameters.
type TransformerConfig struct {
	Channels      int // in_channels = out_channels
	Heads         int
	HeadDim       int
	Layers        int
	CrossDim      int
	Groups        int
	LinearProj    bool // use_linear_projection
	NormEps       float64
	OnlyCross     bool
	DoubleSelf    bool
	ActivationFFN string // "geglu"
}

// TransformerIn is the entry of Transformer2DModel: GroupNorm (eps 1e-6),
// proj_in (1x1 conv or linear) and the reshape to tokens [B, H*W, inner].
type TransformerIn struct {
	Norm       *GroupNormLayer
	ProjInConv *ConvLayer
	ProjInLin  *LinearLayer
	ps         []*Param
}

// TransformerOut is the exit: proj_out back to [B, C, H, W] plus the
// residual. Inputs: tokens [B, H*W, inner], residual [B, C, H, W].
type TransformerOut struct {
	ProjOutConv *ConvLayer
	ProjOutLin  *LinearLayer
	ps          []*Param
}

// BasicTransformerBlock is diffusers' BasicTransformerBlock with
// layer_norm: self-attention, cross-attention to the text embeddings and a
// GEGLU feed-forward, each pre-normed and residual. Inputs: tokens
// [B, S, D], context [B, T, Dc].
type BasicTransformerBlock struct {
	Norm1, Norm2, Norm3 *LayerNormLayer
	Attn1, Attn2        *AttentionLayer
	FFProj, FFOut       *LinearLayer // ff.net.0.proj (to 2*inner), ff.net.2
	onlyCross           bool
	ps                  []*Param
}

// Transformer2D groups the three kinds of blocks of one Transformer2DModel.
type Transformer2D struct {
	In     *TransformerIn
	Blocks []*BasicTransformerBlock
	Out    *TransformerOut
}

// NewTransformer2D declares a Transformer2DModel under prefix.
func NewTransformer2D(l *Loader, prefix string, c TransformerConfig, o Options) *Transformer2D {
	inner := c.Heads * c.HeadDim
	if c.NormEps == 0 {
		c.NormEps = 1e-5
	}
	t := &Transformer2D{In: &TransformerIn{}, Out: &TransformerOut{}}
	t.In.Norm = NewGroupNorm(l, prefix+".norm", c.Channels, c.Groups, 1e-6)
	if c.LinearProj {
		t.In.ProjInLin = NewLinear(l, prefix+".proj_in", c.Channels, inner, true)
		t.In.ps = concatParams(t.In.Norm.Params(), t.In.ProjInLin.Params())
	} else {
		t.In.ProjInConv = NewConv(l, prefix+".proj_in", c.Channels, inner, 1, nn.SamePad(1, 0), o)
		t.In.ps = concatParams(t.In.Norm.Params(), t.In.ProjInConv.Params())
	}
	switch c.ActivationFFN {
	case "", "geglu":
	default:
		l.Errorf("%s: unsupported feed-forward activation %q (want geglu)", prefix, c.ActivationFFN)
	}
	if c.DoubleSelf {
		l.Errorf("%s: double_self_attention is not supported", prefix)
	}
	for i := 0; i < c.Layers; i++ {
		p := fmt.Sprintf("%s.transformer_blocks.%d", prefix, i)
		b := &BasicTransformerBlock{onlyCross: c.OnlyCross}
		b.Norm1 = NewLayerNorm(l, p+".norm1", inner, c.NormEps)
		attn1KV := inner
		if c.OnlyCross {
			attn1KV = c.CrossDim
		}
		b.Attn1 = NewAttention(l, p+".attn1", DiffusersAttnNames, inner, attn1KV, inner, c.Heads, false, true)
		b.Norm2 = NewLayerNorm(l, p+".norm2", inner, c.NormEps)
		b.Attn2 = NewAttention(l, p+".attn2", DiffusersAttnNames, inner, c.CrossDim, inner, c.Heads, false, true)
		b.Norm3 = NewLayerNorm(l, p+".norm3", inner, c.NormEps)
		b.FFProj = NewLinear(l, p+".ff.net.0.proj", inner, 2*4*inner, true)
		b.FFOut = NewLinear(l, p+".ff.net.2", 4*inner, inner, true)
		b.ps = concatParams(b.Norm1.Params(), b.Attn1.Params(), b.Norm2.Params(), b.Attn2.Params(),
			b.Norm3.Params(), b.FFProj.Params(), b.FFOut.Params())
		t.Blocks = append(t.Blocks, b)
	}
	if c.LinearProj {
		t.Out.ProjOutLin = NewLinear(l, prefix+".proj_out", inner, c.Channels, true)
		t.Out.ps = t.Out.ProjOutLin.Params()
	} else {
		t.Out.ProjOutConv = NewConv(l, prefix+".proj_out", inner, c.Channels, 1, nn.SamePad(1, 0), o)
		t.Out.ps = t.Out.ProjOutConv.Params()
	}
	return t
}

// Key implements Block.
func (t *TransformerIn) Key() string {
	if t.ProjInLin != nil {
		return "tf_in(" + t.Norm.Key() + ",linear)"
	}
	return "tf_in(" + t.Norm.Key() + "," + t.ProjInConv.Key() + ")"
}

// Params implements Block.
func (t *TransformerIn) Params() []*Param { return t.ps }

// Apply implements Block.
func (t *TransformerIn) Apply(w Bind, in []*Node) []*Node {
	x := in[0]
	d := x.Shape().Dimensions // [B, C, H, W]
	h := t.Norm.Apply(w, x)
	if t.ProjInConv != nil {
		h = t.ProjInConv.Apply(w, h) // [B, inner, H, W]
		inner := h.Shape().Dimensions[1]
		h = Reshape(TransposeAllAxes(h, 0, 2, 3, 1), d[0], d[2]*d[3], inner) // [B, HW, inner]
	} else {
		h = Reshape(TransposeAllAxes(h, 0, 2, 3, 1), d[0], d[2]*d[3], d[1]) // [B, HW, C]
		h = t.ProjInLin.Apply(w, h)                                         // [B, HW, inner]
	}
	return []*Node{h}
}

// Key implements Block.
func (t *TransformerOut) Key() string {
	if t.ProjOutLin != nil {
		return "tf_out(linear)"
	}
	return "tf_out(" + t.ProjOutConv.Key() + ")"
}

// Params implements Block.
func (t *TransformerOut) Params() []*Param { return t.ps }

// Apply implements Block.
func (t *TransformerOut) Apply(w Bind, in []*Node) []*Node {
	h, residual := in[0], in[1]
	d := residual.Shape().Dimensions // [B, C, H, W]
	inner := h.Shape().Dimensions[2]
	if t.ProjOutConv != nil {
		h = TransposeAllAxes(Reshape(h, d[0], d[2], d[3], inner), 0, 3, 1, 2) // [B, inner, H, W]
		h = t.ProjOutConv.Apply(w, h)
	} else {
		h = t.ProjOutLin.Apply(w, h)                                         // [B, HW, C]
		h = TransposeAllAxes(Reshape(h, d[0], d[2], d[3], d[1]), 0, 3, 1, 2) // [B, C, H, W]
	}
	return []*Node{Add(h, residual)}
}

// Key implements Block.
func (b *BasicTransformerBlock) Key() string {
	return fmt.Sprintf("basic_tf(%s,%s,ln%g,oc%v)", b.Attn1.Key(), b.Attn2.Key(), b.Norm1.Eps, b.onlyCross)
}

// Params implements Block.
func (b *BasicTransformerBlock) Params() []*Param { return b.ps }

// Apply implements Block.
func (b *BasicTransformerBlock) Apply(w Bind, in []*Node) []*Node {
	h, ctx := in[0], in[1]
	n := b.Norm1.Apply(w, h)
	kv := n
	if b.onlyCross {
		kv = ctx
	}
	h = Add(h, b.Attn1.Apply(w, n, kv))
	h = Add(h, b.Attn2.Apply(w, b.Norm2.Apply(w, h), ctx))
	// GEGLU: proj to 2*inner, split into hidden and gate, hidden * gelu(gate).
	ff := b.FFProj.Apply(w, b.Norm3.Apply(w, h))
	half := ff.Shape().Dimensions[2] / 2
	hidden := Slice(ff, AxisRange(), AxisRange(), AxisRange(0, half))
	gate := Slice(ff, AxisRange(), AxisRange(), AxisRange(half, 2*half))
	h = Add(h, b.FFOut.Apply(w, Mul(hidden, nn.GELU(gate))))
	return []*Node{h}
}

// ---- down/upsampling, convolutions --------------------------------------------

// Downsample is Downsample2D with use_conv: a stride-2 3x3 convolution;
// padding 0 means diffusers' asymmetric (0, 1, 0, 1) zero padding.
type Downsample struct{ Conv *ConvLayer }

// NewDownsample declares prefix.conv.
func NewDownsample(l *Loader, prefix string, in, out, padding int, o Options) *Downsample {
	spec := nn.SamePad(2, padding)
	if padding == 0 {
		spec = nn.ConvSpec{Stride: 2, PadBottom: 1, PadRight: 1}
	}
	return &Downsample{Conv: NewConv(l, prefix+".conv", in, out, 3, spec, o)}
}

// Key implements Block.
func (d *Downsample) Key() string { return "down(" + d.Conv.Key() + ")" }

// Params implements Block.
func (d *Downsample) Params() []*Param { return d.Conv.Params() }

// Apply implements Block.
func (d *Downsample) Apply(w Bind, in []*Node) []*Node { return []*Node{d.Conv.Apply(w, in[0])} }

// Upsample is Upsample2D with use_conv: nearest 2x, then a 3x3 convolution.
type Upsample struct{ Conv *ConvLayer }

// NewUpsample declares prefix.conv.
func NewUpsample(l *Loader, prefix string, in, out int, o Options) *Upsample {
	return &Upsample{Conv: NewConv(l, prefix+".conv", in, out, 3, nn.SamePad(1, 1), o)}
}

// Key implements Block.
func (u *Upsample) Key() string { return "up(" + u.Conv.Key() + ")" }

// Params implements Block.
func (u *Upsample) Params() []*Param { return u.Conv.Params() }

// Apply implements Block.
func (u *Upsample) Apply(w Bind, in []*Node) []*Node {
	return []*Node{u.Conv.Apply(w, nn.UpsampleNearest2x(in[0]))}
}

// NormActConv is an optional GroupNorm and activation followed by a
// convolution: conv_in (no norm), or conv_norm_out + conv_act + conv_out.
type NormActConv struct {
	Norm *GroupNormLayer // may be nil
	Act  string          // "" for none
	Conv *ConvLayer
	ps   []*Param
}

// NewNormActConv builds the block from already declared layers.
func NewNormActConv(norm *GroupNormLayer, act string, conv *ConvLayer) *NormActConv {
	b := &NormActConv{Norm: norm, Act: act, Conv: conv}
	if norm != nil {
		b.ps = norm.Params()
	}
	b.ps = append(b.ps, conv.Params()...)
	return b
}

// Key implements Block.
func (b *NormActConv) Key() string {
	k := "nac("
	if b.Norm != nil {
		k += b.Norm.Key() + ","
	}
	return k + b.Act + "," + b.Conv.Key() + ")"
}

// Params implements Block.
func (b *NormActConv) Params() []*Param { return b.ps }

// Apply implements Block.
func (b *NormActConv) Apply(w Bind, in []*Node) []*Node {
	x := in[0]
	if b.Norm != nil {
		x = b.Norm.Apply(w, x)
	}
	if b.Act != "" {
		x = nn.Activate(b.Act, x)
	}
	return []*Node{b.Conv.Apply(w, x)}
}

// ---- spatial self-attention (VAE mid block) -----------------------------------

// SpatialAttention is the Attention of UNetMidBlock2D in the VAE:
// group_norm, single- or multi-head self-attention over the H*W positions,
// to_out, plus the residual, divided by rescale_output_factor.
type SpatialAttention struct {
	Norm    *GroupNormLayer
	Attn    *AttentionLayer
	Rescale float64
	ps      []*Param
}

// NewSpatialAttention declares prefix.{group_norm,to_q,to_k,to_v,to_out.0}
// (with the deprecated query/key/value/proj_attn names as aliases).
func NewSpatialAttention(l *Loader, prefix string, c, headDim, groups int, eps, rescale float64) *SpatialAttention {
	if headDim <= 0 {
		headDim = c
	}
	heads := c / headDim
	for new, old := range map[string]string{"to_q": "query", "to_k": "key", "to_v": "value", "to_out.0": "proj_attn"} {
		for _, s := range []string{".weight", ".bias"} {
			l.Alias(prefix+"."+new+s, prefix+"."+old+s)
		}
	}
	a := &SpatialAttention{Rescale: rescale}
	a.Norm = NewGroupNorm(l, prefix+".group_norm", c, groups, eps)
	a.Attn = NewAttention(l, prefix, DiffusersAttnNames, c, c, c, heads, true, true)
	a.ps = concatParams(a.Norm.Params(), a.Attn.Params())
	return a
}

// Key implements Block.
func (a *SpatialAttention) Key() string {
	return fmt.Sprintf("spatial_attn(%s,%s,%g)", a.Norm.Key(), a.Attn.Key(), a.Rescale)
}

// Params implements Block.
func (a *SpatialAttention) Params() []*Param { return a.ps }

// Apply implements Block.
func (a *SpatialAttention) Apply(w Bind, in []*Node) []*Node {
	x := in[0]
	d := x.Shape().Dimensions // [B, C, H, W]
	h := a.Norm.Apply(w, x)
	h = TransposeAllAxes(Reshape(h, d[0], d[1], d[2]*d[3]), 0, 2, 1) // [B, HW, C]
	h = a.Attn.Apply(w, h, h)
	h = Reshape(TransposeAllAxes(h, 0, 2, 1), d...) // [B, C, H, W]
	out := Add(h, x)
	if a.Rescale != 0 && a.Rescale != 1 {
		out = DivScalar(out, a.Rescale)
	}
	return []*Node{out}
}
