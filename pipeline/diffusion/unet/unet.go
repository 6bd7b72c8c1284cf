// Package unet is diffusers' UNet2DConditionModel (Stable Diffusion 1.x/2.x
// and SDXL, including SDXL's addition_embed_type "text_time") as GoMLX graph
// code.
//
// It follows diffusers' models/unets/unet_2d_condition.py and
// unet_2d_blocks.py (Rombach et al., "High-Resolution Image Synthesis with
// Latent Diffusion Models", 2022; Podell et al., "SDXL", 2023). Weights are
// loaded strictly by their diffusers names; the forward pass is written once
// over blocks.Engine, so it runs either as one whole-model graph (compiled)
// or block by block (eager).
package unet

import (
	"fmt"

	"github.com/gomlx/gomlx/backends"
	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive
	"github.com/gomlx/gomlx/pkg/core/tensors"

	"github.com/tputool/tputool/pipeline/diffusion/blocks"
	"github.com/tputool/tputool/pipeline/nn"
)

// Model is a loaded UNet2DConditionModel.
type Model struct {
	Cfg     *Resolved
	Weights *blocks.Weights

	timeEmb *TimeEmbedding
	convIn  *blocks.NormActConv
	down    []*downBlock
	mid     *midBlock
	up      []*upBlock
	convOut *blocks.NormActConv
}

type downBlock struct {
	resnets []*blocks.Resnet
	attns   []*blocks.Transformer2D // nil entries for DownBlock2D
	down    *blocks.Downsample
}

type midBlock struct {
	resnets []*blocks.Resnet
	attns   []*blocks.Transformer2D
}

type upBlock struct {
	resnets []*blocks.Resnet
	attns   []*blocks.Transformer2D
	up      *blocks.Upsample
}

// Build declares every tensor of the model against l. Call l.Finish to
// check the checkpoint and load the weights.
func Build(l *blocks.Loader, r *Resolved, o blocks.Options) *Model {
	m := &Model{Cfg: r}
	n := len(r.BlockOut)
	temb := r.TimeEmbedDim
	m.timeEmb = newTimeEmbedding(l, r)
	m.convIn = blocks.NewNormActConv(nil, "", blocks.NewConv(l, "conv_in", r.InChannels, r.BlockOut[0], r.ConvInKernel,
		nn.SamePad(1, (r.ConvInKernel-1)/2), o))

	resnet := func(prefix string, in, out, skip int, scale float64) *blocks.Resnet {
		return blocks.NewResnet(l, prefix, blocks.ResnetConfig{In: in + skip, Out: out, TembChannels: temb, Groups: r.Groups,
			Eps: r.Eps, Act: r.Act, OutputScale: scale, SkipChannels: skip}, o)
	}
	transformer := func(prefix string, ch, heads, layers, cross int, onlyCross bool) *blocks.Transformer2D {
		return blocks.NewTransformer2D(l, prefix, blocks.TransformerConfig{Channels: ch, Heads: heads, HeadDim: ch / heads,
			Layers: layers, CrossDim: cross, Groups: r.Groups, LinearProj: r.LinearProjection, OnlyCross: onlyCross}, o)
	}

	// Down blocks: layers_per_block (resnet [+ transformer]) pairs, then a
	// stride-2 downsampler except in the last block.
	out := r.BlockOut[0]
	for i, typ := range r.Down {
		in := out
		out = r.BlockOut[i]
		b := &downBlock{}
		for j := 0; j < r.LayersPerBlock[i]; j++ {
			rin := out
			if j == 0 {
				rin = in
			}
			b.resnets = append(b.resnets, resnet(fmt.Sprintf("down_blocks.%d.resnets.%d", i, j), rin, out, 0, r.OutputScale))
			var t *blocks.Transformer2D
			if typ == "CrossAttnDownBlock2D" {
				t = transformer(fmt.Sprintf("down_blocks.%d.attentions.%d", i, j), out, r.Heads[i], r.TransformerLayers[i], r.CrossDim[i], r.OnlyCross[i])
			}
			b.attns = append(b.attns, t)
		}
		if i < n-1 {
			b.down = blocks.NewDownsample(l, fmt.Sprintf("down_blocks.%d.downsamplers.0", i), out, out, r.DownsamplePadding, o)
		}
		m.down = append(m.down, b)
	}

	// Mid block: resnet, (transformer, resnet).
	if r.MidBlock != "" {
		ch := r.BlockOut[n-1]
		m.mid = &midBlock{}
		m.mid.resnets = append(m.mid.resnets, resnet("mid_block.resnets.0", ch, ch, 0, r.MidBlockScale))
		m.mid.attns = append(m.mid.attns, transformer("mid_block.attentions.0", ch, r.Heads[n-1], r.TransformerLayers[n-1], r.CrossDim[n-1], false))
		m.mid.resnets = append(m.mid.resnets, resnet("mid_block.resnets.1", ch, ch, 0, r.MidBlockScale))
	}

	// Up blocks: layers_per_block+1 resnets, each concatenating one skip
	// connection, [+ transformer], then a 2x upsampler except in the last.
	out = r.BlockOut[n-1]
	for i, typ := range r.Up {
		prevOut := out
		out = r.BlockOut[n-1-i]
		in := r.BlockOut[max(n-2-i, 0)]
		ri := n - 1 - i // index into the per-down-block lists, reversed
		b := &upBlock{}
		layers := r.LayersPerBlock[ri] + 1
		if len(r.ReverseTransformer[i]) < layers && typ == "CrossAttnUpBlock2D" {
			l.Errorf("up_blocks.%d: reverse_transformer_layers_per_block has %d entries, want %d", i, len(r.ReverseTransformer[i]), layers)
		}
		for j := 0; j < layers; j++ {
			skip := out
			if j == layers-1 {
				skip = in
			}
			rin := out
			if j == 0 {
				rin = prevOut
			}
			b.resnets = append(b.resnets, resnet(fmt.Sprintf("up_blocks.%d.resnets.%d", i, j), rin, out, skip, r.OutputScale))
			var t *blocks.Transformer2D
			if typ == "CrossAttnUpBlock2D" && j < len(r.ReverseTransformer[i]) {
				t = transformer(fmt.Sprintf("up_blocks.%d.attentions.%d", i, j), out, r.Heads[ri], r.ReverseTransformer[i][j], r.CrossDim[ri], r.OnlyCross[ri])
			}
			b.attns = append(b.attns, t)
		}
		if i < n-1 {
			b.up = blocks.NewUpsample(l, fmt.Sprintf("up_blocks.%d.upsamplers.0", i), out, out, o)
		}
		m.up = append(m.up, b)
	}

	m.convOut = blocks.NewNormActConv(
		blocks.NewGroupNorm(l, "conv_norm_out", r.BlockOut[0], r.Groups, r.Eps), r.Act,
		blocks.NewConv(l, "conv_out", r.BlockOut[0], r.OutChannels, r.ConvOutKernel, nn.SamePad(1, (r.ConvOutKernel-1)/2), o))
	return m
}

// Load builds the model from a resolved config and a weight source.
func Load(src blocks.Source, r *Resolved, backend backends.Backend, o blocks.Options) (*Model, error) {
	l := blocks.NewLoader("unet", src)
	m := Build(l, r, o)
	w, err := l.Finish(backend)
	if err != nil {
		return nil, err
	}
	m.Weights = w
	return m, nil
}

// Inputs of one UNet evaluation. Shapes: Sample [B, in, h, w]; Timesteps
// [B] (float32); Context [B, T, cross_attention_dim]; for text_time models
// also TextEmbeds [B, P] and TimeIDs [B, K] with P + K*addition_time_embed_dim
// = projection_class_embeddings_input_dim.
type Inputs[V any] struct {
	Sample, Timesteps, Context V
	TextEmbeds, TimeIDs        V
}

func (in Inputs[V]) list(textTime bool) []V {
	l := []V{in.Sample, in.Timesteps, in.Context}
	if textTime {
		l = append(l, in.TextEmbeds, in.TimeIDs)
	}
	return l
}

// Forward is the UNet forward pass in diffusers' order, over any engine.
// It returns the predicted noise (or v) [B, out, h, w].
func Forward[V any](m *Model, e blocks.Engine[V], in Inputs[V]) V {
	var emb V
	if m.Cfg.AdditionTextTime {
		emb = blocks.Run1(e, m.timeEmb, in.Timesteps, in.TextEmbeds, in.TimeIDs)
	} else {
		emb = blocks.Run1(e, m.timeEmb, in.Timesteps)
	}
	sample := in.Sample
	if m.Cfg.CenterInputSample {
		sample = blocks.Run1(e, centerBlock{}, sample)
	}
	h := blocks.Run1(e, m.convIn, sample)
	skips := []V{h}
	for _, b := range m.down {
		for j, res := range b.resnets {
			h = blocks.Run1(e, res, h, emb)
			if t := b.attns[j]; t != nil {
				h = runTransformer(e, t, h, in.Context)
			}
			skips = append(skips, h)
		}
		if b.down != nil {
			h = blocks.Run1(e, b.down, h)
			skips = append(skips, h)
		}
	}
	if m.mid != nil {
		h = blocks.Run1(e, m.mid.resnets[0], h, emb)
		for j, t := range m.mid.attns {
			h = runTransformer(e, t, h, in.Context)
			h = blocks.Run1(e, m.mid.resnets[j+1], h, emb)
		}
	}
	for _, b := range m.up {
		for j, res := range b.resnets {
			skip := skips[len(skips)-1]
			skips = skips[:len(skips)-1]
			h = blocks.Run1(e, res, h, skip, emb)
			if t := b.attns[j]; t != nil {
				h = runTransformer(e, t, h, in.Context)
			}
		}
		if b.up != nil {
			h = blocks.Run1(e, b.up, h)
		}
	}
	return blocks.Run1(e, m.convOut, h)
}

func runTransformer[V any](e blocks.Engine[V], t *blocks.Transformer2D, x, ctx V) V {
	h := blocks.Run1(e, t.In, x)
	for _, b := range t.Blocks {
		h = blocks.Run1(e, b, h, ctx)
	}
	return blocks.Run1(e, t.Out, h, x)
}

// centerBlock is center_input_sample: 2*x - 1.
type centerBlock struct{}

func (centerBlock) Key() string             { return "center" }
func (centerBlock) Params() []*blocks.Param { return nil }
func (centerBlock) Apply(_ blocks.Bind, in []*Node) []*Node {
	return []*Node{AddScalar(MulScalar(in[0], 2), -1)}
}

// Compiled runs the whole forward pass as one executable keyed "unet".
func (m *Model) Compiled(x blocks.Executor, in Inputs[*tensors.Tensor]) (*tensors.Tensor, error) {
	out, err := blocks.CallTraced(x, "unet", m.Weights, in.list(m.Cfg.AdditionTextTime), m.traced)
	if err != nil {
		return nil, err
	}
	return out[0], nil
}

// Precompile compiles the whole-model executable for the inputs' shapes
// without running it, when x can (see blocks.Precompiler). It reports
// whether a new executable was built.
func (m *Model) Precompile(x blocks.Executor, in Inputs[*tensors.Tensor]) (bool, error) {
	return blocks.PrecompileTraced(x, "unet", m.Weights, in.list(m.Cfg.AdditionTextTime), m.traced)
}

func (m *Model) traced(e *blocks.Traced, a []*Node) []*Node {
	gi := Inputs[*Node]{Sample: a[0], Timesteps: a[1], Context: a[2]}
	if m.Cfg.AdditionTextTime {
		gi.TextEmbeds, gi.TimeIDs = a[3], a[4]
	}
	return []*Node{Forward[*Node](m, e, gi)}
}

// Eager runs the forward pass block by block.
func (m *Model) Eager(x blocks.Executor, in Inputs[*tensors.Tensor]) (out *tensors.Tensor, err error) {
	defer blocks.Recover(&err)
	e := &blocks.Eager{Exec: x, Weights: m.Weights, Prefix: "unet/"}
	return Forward[*tensors.Tensor](m, e, in), nil
}
