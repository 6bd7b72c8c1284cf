package blocks

import (
	"fmt"

	"github.com/gomlx/gomlx/backends"

	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive

	"github.com/tputool/tputool/pipeline/nn"
)

// The layers below are the weight-holding leaves of the diffusers module
// tree. Each is declared against a Loader under its checkpoint prefix and
// contributes its Params to the Block that owns it.

// Options are backend-dependent choices for how layers are built.
type Options struct {
	// ConvGeneral selects the backend's convolution op instead of im2col +
	// DotGeneral (use it on XLA backends; the pure-Go backend is about 10x
	// faster with im2col).
	ConvGeneral bool
}

// OptionsFor returns the layer choices for a backend: ConvGeneral on every
// backend but GoMLX's pure-Go one, whose String() is "go" (its Name() is
// "SimpleGo (go)").
func OptionsFor(b backends.Backend) Options {
	return Options{ConvGeneral: b.String() != "go"}
}

// GroupNormLayer is torch.nn.GroupNorm (affine).
type GroupNormLayer struct {
	Weight, Bias *Param
	Groups       int
	Eps          float64
}

// NewGroupNorm declares prefix.weight and prefix.bias of shape [c].
func NewGroupNorm(l *Loader, prefix string, c, groups int, eps float64) *GroupNormLayer {
	if groups <= 0 || c%groups != 0 {
		l.Errorf("%s: %d channels are not divisible into %d groups", prefix, c, groups)
		groups = 1
	}
	return &GroupNormLayer{Weight: l.Take(prefix+".weight", c), Bias: l.Take(prefix+".bias", c), Groups: groups, Eps: eps}
}

// Apply normalises x [B, C, ...].
func (n *GroupNormLayer) Apply(w Bind, x *Node) *Node {
	return nn.GroupNorm(x, w(n.Weight), w(n.Bias), n.Groups, n.Eps)
}

// Params lists the layer's tensors.
func (n *GroupNormLayer) Params() []*Param { return []*Param{n.Weight, n.Bias} }

// Key describes the layer's static settings.
func (n *GroupNormLayer) Key() string { return fmt.Sprintf("gn%d,%g", n.Groups, n.Eps) }

// LayerNormLayer is torch.nn.LayerNorm over the last axis (affine).
type LayerNormLayer struct {
	Weight, Bias *Param
	Eps          float64
}

// NewLayerNorm declares prefix.weight and prefix.bias of shape [d].
func NewLayerNorm(l *Loader, prefix string, d int, eps float64) *LayerNormLayer {
	return &LayerNormLayer{Weight: l.Take(prefix+".weight", d), Bias: l.Take(prefix+".bias", d), Eps: eps}
}

// Apply normalises the last axis of x.
func (n *LayerNormLayer) Apply(w Bind, x *Node) *Node {
	return nn.LayerNorm(x, w(n.Weight), w(n.Bias), n.Eps)
}

// Params lists the layer's tensors.
func (n *LayerNormLayer) Params() []*Param { return []*Param{n.Weight, n.Bias} }

// LinearLayer is torch.nn.Linear: weight [out, in], optional bias [out].
type LinearLayer struct {
	Weight, Bias *Param
}

// NewLinear declares prefix.weight [out, in] and, with bias, prefix.bias.
func NewLinear(l *Loader, prefix string, in, out int, bias bool) *LinearLayer {
	lin := &LinearLayer{Weight: l.Take(prefix+".weight", out, in)}
	if bias {
		lin.Bias = l.Take(prefix+".bias", out)
	}
	return lin
}

// Apply computes x W^T + b on the last axis.
func (lin *LinearLayer) Apply(w Bind, x *Node) *Node {
	var b *Node
	if lin.Bias != nil {
		b = w(lin.Bias)
	}
	return nn.Linear(x, w(lin.Weight), b)
}

// Params lists the layer's tensors.
func (lin *LinearLayer) Params() []*Param {
	if lin.Bias == nil {
		return []*Param{lin.Weight}
	}
	return []*Param{lin.Weight, lin.Bias}
}

// Key describes the layer's static settings.
func (lin *LinearLayer) Key() string { return fmt.Sprintf("lin%v", lin.Bias != nil) }

// ConvLayer is torch.nn.Conv2d: weight [out, in, k, k], bias [out].
type ConvLayer struct {
	Weight, Bias *Param
	Spec         nn.ConvSpec
}

// NewConv declares prefix.weight [out, in, k, k] and prefix.bias [out].
func NewConv(l *Loader, prefix string, in, out, k int, spec nn.ConvSpec, o Options) *ConvLayer {
	spec.UseConvGeneral = o.ConvGeneral
	return &ConvLayer{Weight: l.Take(prefix+".weight", out, in, k, k), Bias: l.Take(prefix+".bias", out), Spec: spec}
}

// Apply convolves x [B, C, H, W].
func (c *ConvLayer) Apply(w Bind, x *Node) *Node { return nn.Conv2D(x, w(c.Weight), w(c.Bias), c.Spec) }

// Params lists the layer's tensors.
func (c *ConvLayer) Params() []*Param { return []*Param{c.Weight, c.Bias} }

// Key describes the layer's static settings.
func (c *ConvLayer) Key() string { return "conv(" + c.Spec.String() + ")" }

// AttentionLayer is diffusers' Attention (and CLIP's self-attention): q, k,
// v and output projections around multi-head scaled dot-product attention.
type AttentionLayer struct {
	Q, K, V, Out *LinearLayer
	Heads        int
	Causal       bool
}

// NewAttention declares the four projections. qkvBias and outBias select
// the biases; names gives the projection names (to_q, to_k, to_v, to_out.0
// in diffusers; q_proj, k_proj, v_proj, out_proj in CLIP).
func NewAttention(l *Loader, prefix string, names [4]string, queryDim, kvDim, inner, heads int, qkvBias, outBias bool) *AttentionLayer {
	if heads <= 0 || inner%heads != 0 {
		l.Errorf("%s: width %d is not divisible into %d heads", prefix, inner, heads)
		heads = 1
	}
	return &AttentionLayer{
		Q:     NewLinear(l, prefix+"."+names[0], queryDim, inner, qkvBias),
		K:     NewLinear(l, prefix+"."+names[1], kvDim, inner, qkvBias),
		V:     NewLinear(l, prefix+"."+names[2], kvDim, inner, qkvBias),
		Out:   NewLinear(l, prefix+"."+names[3], inner, queryDim, outBias),
		Heads: heads,
	}
}

// DiffusersAttnNames are diffusers' projection names.
var DiffusersAttnNames = [4]string{"to_q", "to_k", "to_v", "to_out.0"}

// Apply attends from x [B, Sq, Dq] to ctx [B, Sk, Dk] (ctx = x for
// self-attention).
func (a *AttentionLayer) Apply(w Bind, x, ctx *Node) *Node {
	q := a.Q.Apply(w, x)
	k := a.K.Apply(w, ctx)
	v := a.V.Apply(w, ctx)
	return a.Out.Apply(w, nn.MultiHeadAttention(q, k, v, a.Heads, a.Causal))
}

// Params lists the layer's tensors.
func (a *AttentionLayer) Params() []*Param {
	return concatParams(a.Q.Params(), a.K.Params(), a.V.Params(), a.Out.Params())
}

// Key describes the layer's static settings.
func (a *AttentionLayer) Key() string {
	return fmt.Sprintf("attn(h%d,c%v,%s,%s)", a.Heads, a.Causal, a.Q.Key(), a.Out.Key())
}

func concatParams(lists ...[]*Param) []*Param {
	var out []*Param
	for _, l := range lists {
		out = append(out, l...)
	}
	return out
}
