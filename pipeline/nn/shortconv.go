package nn

import (
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive

	"github.com/tputool/tputool/pipeline/lm"
)

// LFM2's gated short convolution (Liquid AI's LFM2 and LFM2-MoE; models/
// lfm2's Lfm2ShortConv in transformers, llama.cpp's shortconv): the
// token mixer of its "conv" layers. For each hidden channel,
//
//	B, C, x = in_proj(h)            (thirds of 3·hidden, in that order)
//	y_t     = C_t · Σ_j w_j · (B·x)_{t-K+1+j}   (+ the bias inside the sum)
//	out     = out_proj(y)
//
// a depthwise causal convolution of kernel K (conv_L_cache) over the
// gated input B·x, gated again by C. Its state is the convolution's last
// K-1 inputs, whatever the sequence length.

// KindConv is the layer kind of LFM2's convolution layers (layer_types
// "conv").
const KindConv = "conv"

// ShortConvState returns the fixed-size state of one short-convolution
// layer: "conv", the last kernel-1 gated inputs B·x [B, kernel-1, hidden]
// in the compute dtype (transformers' Lfm2HybridConvCache holds them in
// the model's dtype).
func ShortConvState(hidden, kernel, batch int) []lm.StateSpec {
	return []lm.StateSpec{{Name: "conv", Shape: []int{batch, kernel - 1, hidden}, SlotAxis: lm.NoSlots}}
}

// ShortConvParams are one short convolution's tensors as transformers
// names them under the layer's conv.: in_proj [3·H, H], conv [H, 1, K],
// out_proj [H, H], and their biases when conv_bias (nil otherwise).
type ShortConvParams struct {
	InProj, InProjBias, Conv, ConvBias, OutProj, OutProjBias *Node
}

// ShortConvWeights lists a short convolution's tensors under prefix (the
// layer's scope and "conv.": "model.layers.0.conv."), with the biases
// when bias (conv_bias gives all three). Under --tp the mixer stays whole
// on every device, as the Mamba-2 mixer does: in_proj's thirds would
// each need splitting.
func ShortConvWeights(prefix string, hidden, kernel int, bias bool) []lm.WeightSpec {
	var ws []lm.WeightSpec
	add := func(name string, matmul bool, shape ...int) {
		ws = append(ws, lm.WeightSpec{Name: prefix + name, Shape: shape, Matmul: matmul, TP: lm.Replicated})
	}
	add("in_proj.weight", true, 3*hidden, hidden)
	if bias {
		add("in_proj.bias", false, 3*hidden)
	}
	add("conv.weight", false, hidden, 1, kernel)
	if bias {
		add("conv.bias", false, hidden)
	}
	add("out_proj.weight", true, hidden, hidden)
	if bias {
		add("out_proj.bias", false, hidden)
	}
	return ws
}

// ShortConvParamsOf reads the tensors ShortConvWeights lists from the
// mixer's scope p.
func ShortConvParamsOf(p *lm.Params, bias bool) ShortConvParams {
	w := ShortConvParams{InProj: p.Get("in_proj.weight"), Conv: p.Get("conv.weight"), OutProj: p.Get("out_proj.weight")}
	if bias {
		w.InProjBias, w.ConvBias, w.OutProjBias = p.Get("in_proj.bias"), p.Get("conv.bias"), p.Get("out_proj.bias")
	}
	return w
}

// ShortConv is Lfm2ShortConv on x [B, T, H] continued from its state
// (ShortConvState), returning [B, T, H] and the new state. The gated
// product C·conv(B·x), cubic in in_proj's output, runs in float32 and is
// rounded once for out_proj (transformers rounds B·x, the convolution
// and the product C·y each to the model's dtype; on the go backend, which
// rounds every op's result, that puts a tiny bfloat16 LFM2's logits 8.0%
// off the float64 reference where this puts them 6.6% off);
// the state holds B·x in the compute dtype, as transformers' cache does.
//
// Left padding (step.Positions < 0) is zeroed before in_proj and in B·x,
// so a padded row's state holds zeros until its first token, as it does
// for the same row unpadded.
func ShortConv(w ShortConvParams, x, state *Node, step *lm.Step) (*Node, *Node) {
	dims := x.Shape().Dimensions
	h := dims[2]
	dtype := x.DType()
	isReal := RealTokens(step, dtype) // [B, T, 1]
	x = Mul(x, isReal)
	f32 := dtypes.Float32
	bcx := ConvertDType(Linear(x, w.InProj, w.InProjBias), f32) // [B, T, 3H]
	b := SliceAxis(bcx, 2, AxisRange(0, h))
	c := SliceAxis(bcx, 2, AxisRange(h, 2*h))
	bx := Mul(Mul(b, SliceAxis(bcx, 2, AxisRange(2*h, 3*h))), ConvertDType(isReal, f32))

	y, newState := CausalConv1D(bx, ConvertDType(state, f32), w.Conv)
	if w.ConvBias != nil {
		y = Add(y, ExpandLeftToRank(ConvertDType(w.ConvBias, f32), 3))
	}
	y = ConvertDType(Mul(c, y), dtype)
	return Linear(y, w.OutProj, w.OutProjBias), ConvertDType(newState, state.DType())
}
