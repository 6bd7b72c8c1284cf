// Package vae is diffusers' AutoencoderKL (the latent autoencoder of Stable
// Diffusion and SDXL) as GoMLX graph code: the decoder that turns latents
// into images, and the encoder.
//
// It follows diffusers' models/autoencoders/autoencoder_kl.py and vae.py
// (Kingma and Welling, "Auto-Encoding Variational Bayes"; the KL-regularised
// autoencoder of Rombach et al., 2022).
package vae

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

// Config is vae/config.json of an AutoencoderKL.
type Config struct {
	ClassName            string    `json:"_class_name"`
	InChannels           int       `json:"in_channels"`
	OutChannels          int       `json:"out_channels"`
	DownBlockTypes       []string  `json:"down_block_types"`
	UpBlockTypes         []string  `json:"up_block_types"`
	BlockOutChannels     []int     `json:"block_out_channels"`
	LayersPerBlock       int       `json:"layers_per_block"`
	ActFn                string    `json:"act_fn"`
	LatentChannels       int       `json:"latent_channels"`
	NormNumGroups        int       `json:"norm_num_groups"`
	SampleSize           any       `json:"sample_size"`
	ScalingFactor        *float64  `json:"scaling_factor"`
	ShiftFactor          *float64  `json:"shift_factor"`
	LatentsMean          []float64 `json:"latents_mean"`
	LatentsStd           []float64 `json:"latents_std"`
	ForceUpcast          *bool     `json:"force_upcast"`
	UseQuantConv         *bool     `json:"use_quant_conv"`
	UsePostQuantConv     *bool     `json:"use_post_quant_conv"`
	MidBlockAddAttention *bool     `json:"mid_block_add_attention"`
}

// ParseConfig decodes config.json bytes and applies diffusers' defaults.
func ParseConfig(b []byte) (*Config, error) {
	c := &Config{}
	if err := json.Unmarshal(b, c); err != nil {
		return nil, fmt.Errorf("vae config: %w", err)
	}
	if err := c.resolve(); err != nil {
		return nil, err
	}
	return c, nil
}

func boolOr(p *bool, def bool) bool {
	if p == nil {
		return def
	}
	return *p
}

func (c *Config) resolve() error {
	if c.ClassName != "" && c.ClassName != "AutoencoderKL" {
		return errs.Unsupportedf("vae config: _class_name %q (want AutoencoderKL)", c.ClassName)
	}
	if c.InChannels == 0 {
		c.InChannels = 3
	}
	if c.OutChannels == 0 {
		c.OutChannels = 3
	}
	if len(c.BlockOutChannels) == 0 {
		c.BlockOutChannels = []int{64}
	}
	n := len(c.BlockOutChannels)
	if len(c.DownBlockTypes) == 0 {
		c.DownBlockTypes = []string{"DownEncoderBlock2D"}
	}
	if len(c.UpBlockTypes) == 0 {
		c.UpBlockTypes = []string{"UpDecoderBlock2D"}
	}
	if len(c.DownBlockTypes) != n || len(c.UpBlockTypes) != n {
		return fmt.Errorf("vae config: %d down_block_types, %d up_block_types and %d block_out_channels must match",
			len(c.DownBlockTypes), len(c.UpBlockTypes), n)
	}
	for _, t := range c.DownBlockTypes {
		if t != "DownEncoderBlock2D" {
			return errs.Unsupportedf("vae config: down block type %q (want DownEncoderBlock2D)", t)
		}
	}
	for _, t := range c.UpBlockTypes {
		if t != "UpDecoderBlock2D" {
			return errs.Unsupportedf("vae config: up block type %q (want UpDecoderBlock2D)", t)
		}
	}
	if c.LayersPerBlock == 0 {
		c.LayersPerBlock = 1
	}
	if c.LayersPerBlock < 0 || c.LayersPerBlock > 256 { // 2^40 built layers until memory ran out
		return fmt.Errorf("vae config: layers_per_block %d must be between 1 and 256", c.LayersPerBlock)
	}
	if c.NormNumGroups < 0 {
		return fmt.Errorf("vae config: norm_num_groups %d must be positive", c.NormNumGroups)
	}
	if c.ActFn == "" {
		c.ActFn = "silu"
	}
	if !nn.KnownActivation(c.ActFn) {
		return errs.Unsupportedf("vae config: act_fn %q", c.ActFn)
	}
	if c.LatentChannels == 0 {
		c.LatentChannels = 4
	}
	if c.NormNumGroups == 0 {
		c.NormNumGroups = 32
	}
	for i, ch := range c.BlockOutChannels {
		if ch <= 0 || ch%c.NormNumGroups != 0 {
			return fmt.Errorf("vae config: block_out_channels[%d]=%d is not a positive multiple of norm_num_groups %d", i, ch, c.NormNumGroups)
		}
	}
	if c.ScalingFactor == nil {
		sf := 0.18215
		c.ScalingFactor = &sf
	}
	// latents_mean and latents_std are used (by the SDXL pipeline) only
	// when both are set; either may be set alone, as diffusers allows.
	for _, f := range []struct {
		name string
		v    []float64
	}{{"latents_mean", c.LatentsMean}, {"latents_std", c.LatentsStd}} {
		if f.v != nil && len(f.v) != c.LatentChannels {
			return fmt.Errorf("vae config: %s has %d entries, want latent_channels=%d", f.name, len(f.v), c.LatentChannels)
		}
	}
	return nil
}

// ScaleFactor is the spatial ratio of images to latents:
// 2^(len(block_out_channels)-1), the pipelines' vae_scale_factor.
func (c *Config) ScaleFactor() int { return 1 << (len(c.BlockOutChannels) - 1) }

// MidAttention reports whether the mid blocks have a self-attention layer
// (mid_block_add_attention, default true).
func (c *Config) MidAttention() bool { return boolOr(c.MidBlockAddAttention, true) }

// Model is a loaded AutoencoderKL.
type Model struct {
	Cfg     *Config
	Weights *blocks.Weights

	postQuant *blocks.NormActConv // nil without post_quant_conv
	dec       coder
	quant     *blocks.NormActConv
	enc       *coder // nil when loaded decoder-only
}

// coder is the Encoder or Decoder stack.
type coder struct {
	convIn  *blocks.NormActConv
	stages  []stage
	mid     []blocks.Block // resnet, [attention], resnet
	convOut *blocks.NormActConv
}

type stage struct {
	resnets []*blocks.Resnet
	resize  blocks.Block // Downsample or Upsample; nil in the last stage
}

// Build declares the model's tensors against l. With encoder false the
// encoder's tensors are still checked but not loaded.
func Build(l *blocks.Loader, c *Config, encoder bool, o blocks.Options) *Model {
	m := &Model{Cfg: c}
	boc := c.BlockOutChannels
	n := len(boc)
	g := c.NormNumGroups
	lc := c.LatentChannels
	resnet := func(prefix string, in, out int) *blocks.Resnet {
		return blocks.NewResnet(l, prefix, blocks.ResnetConfig{In: in, Out: out, Groups: g, Eps: 1e-6, Act: c.ActFn}, o)
	}
	mid := func(prefix string) []blocks.Block {
		ch := boc[n-1]
		out := []blocks.Block{resnet(prefix+".resnets.0", ch, ch)}
		if c.MidAttention() {
			out = append(out, blocks.NewSpatialAttention(l, prefix+".attentions.0", ch, ch, g, 1e-6, 1))
		}
		return append(out, resnet(prefix+".resnets.1", ch, ch))
	}

	if boolOr(c.UsePostQuantConv, true) {
		m.postQuant = blocks.NewNormActConv(nil, "", blocks.NewConv(l, "post_quant_conv", lc, lc, 1, nn.SamePad(1, 0), o))
	}
	d := &m.dec
	d.convIn = blocks.NewNormActConv(nil, "", blocks.NewConv(l, "decoder.conv_in", lc, boc[n-1], 3, nn.SamePad(1, 1), o))
	d.mid = mid("decoder.mid_block")
	out := boc[n-1]
	for i := 0; i < n; i++ {
		prev := out
		out = boc[n-1-i]
		var s stage
		for j := 0; j <= c.LayersPerBlock; j++ {
			in := out
			if j == 0 {
				in = prev
			}
			s.resnets = append(s.resnets, resnet(fmt.Sprintf("decoder.up_blocks.%d.resnets.%d", i, j), in, out))
		}
		if i < n-1 {
			s.resize = blocks.NewUpsample(l, fmt.Sprintf("decoder.up_blocks.%d.upsamplers.0", i), out, out, o)
		}
		d.stages = append(d.stages, s)
	}
	d.convOut = blocks.NewNormActConv(blocks.NewGroupNorm(l, "decoder.conv_norm_out", boc[0], g, 1e-6), c.ActFn,
		blocks.NewConv(l, "decoder.conv_out", boc[0], c.OutChannels, 3, nn.SamePad(1, 1), o))

	// Encoder, and quant_conv: declared always so that loading stays
	// strict; their tensors are read only when encoder is set.
	mark := l.Len()
	e := &coder{}
	e.convIn = blocks.NewNormActConv(nil, "", blocks.NewConv(l, "encoder.conv_in", c.InChannels, boc[0], 3, nn.SamePad(1, 1), o))
	out = boc[0]
	for i := 0; i < n; i++ {
		in := out
		out = boc[i]
		var s stage
		for j := 0; j < c.LayersPerBlock; j++ {
			rin := out
			if j == 0 {
				rin = in
			}
			s.resnets = append(s.resnets, resnet(fmt.Sprintf("encoder.down_blocks.%d.resnets.%d", i, j), rin, out))
		}
		if i < n-1 {
			s.resize = blocks.NewDownsample(l, fmt.Sprintf("encoder.down_blocks.%d.downsamplers.0", i), out, out, 0, o)
		}
		e.stages = append(e.stages, s)
	}
	e.mid = mid("encoder.mid_block")
	e.convOut = blocks.NewNormActConv(blocks.NewGroupNorm(l, "encoder.conv_norm_out", boc[n-1], g, 1e-6), c.ActFn,
		blocks.NewConv(l, "encoder.conv_out", boc[n-1], 2*lc, 3, nn.SamePad(1, 1), o))
	if boolOr(c.UseQuantConv, true) {
		m.quant = blocks.NewNormActConv(nil, "", blocks.NewConv(l, "quant_conv", 2*lc, 2*lc, 1, nn.SamePad(1, 0), o))
	}
	if encoder {
		m.enc = e
	} else {
		l.SkipLoadingFrom(mark)
	}
	return m
}

// Load builds and loads the model.
func Load(src blocks.Source, c *Config, backend backends.Backend, encoder bool, o blocks.Options) (*Model, error) {
	l := blocks.NewLoader("vae", src)
	m := Build(l, c, encoder, o)
	w, err := l.Finish(backend)
	if err != nil {
		return nil, err
	}
	m.Weights = w
	return m, nil
}

// HasEncoder reports whether the encoder was loaded.
func (m *Model) HasEncoder() bool { return m.enc != nil }

func runCoder[V any](e blocks.Engine[V], c *coder, x V, decoder bool) V {
	h := blocks.Run1(e, c.convIn, x)
	if decoder {
		for _, b := range c.mid {
			h = blocks.Run1(e, b, h)
		}
	}
	for _, s := range c.stages {
		for _, r := range s.resnets {
			h = blocks.Run1(e, r, h)
		}
		if s.resize != nil {
			h = blocks.Run1(e, s.resize, h)
		}
	}
	if !decoder {
		for _, b := range c.mid {
			h = blocks.Run1(e, b, h)
		}
	}
	return blocks.Run1(e, c.convOut, h)
}

// DecodeForward maps latents z [B, latent, h, w] (already unscaled by the
// pipeline: scaling_factor, and shift_factor or latents_mean/std depending
// on the pipeline class) to images [B, out, h*f, w*f] in about [-1, 1].
func DecodeForward[V any](m *Model, e blocks.Engine[V], z V) V {
	if m.postQuant != nil {
		z = blocks.Run1(e, m.postQuant, z)
	}
	return runCoder(e, &m.dec, z, true)
}

// EncodeForward maps images [B, in, H, W] in [-1, 1] to the latent
// distribution's moments [B, 2*latent, H/f, W/f] (mean, then log-variance).
func EncodeForward[V any](m *Model, e blocks.Engine[V], x V) V {
	h := runCoder(e, m.enc, x, false)
	if m.quant != nil {
		h = blocks.Run1(e, m.quant, h)
	}
	return h
}

// Decode runs DecodeForward compiled (one executable) or eager.
func (m *Model) Decode(x blocks.Executor, z *tensors.Tensor, eager bool) (out *tensors.Tensor, err error) {
	return m.run(x, "vae_decode", z, eager, DecodeForward[*Node], DecodeForward[*tensors.Tensor])
}

// Encode runs EncodeForward; the encoder must have been loaded.
func (m *Model) Encode(x blocks.Executor, img *tensors.Tensor, eager bool) (out *tensors.Tensor, err error) {
	if m.enc == nil {
		return nil, fmt.Errorf("vae: loaded without the encoder")
	}
	return m.run(x, "vae_encode", img, eager, EncodeForward[*Node], EncodeForward[*tensors.Tensor])
}

func (m *Model) run(x blocks.Executor, key string, in *tensors.Tensor, eager bool,
	traced func(*Model, blocks.Engine[*Node], *Node) *Node,
	eagerFn func(*Model, blocks.Engine[*tensors.Tensor], *tensors.Tensor) *tensors.Tensor) (out *tensors.Tensor, err error) {
	if eager {
		defer blocks.Recover(&err)
		return eagerFn(m, &blocks.Eager{Exec: x, Weights: m.Weights, Prefix: key + "/"}, in), nil
	}
	res, err := blocks.CallTraced(x, key, m.Weights, []*tensors.Tensor{in}, func(e *blocks.Traced, a []*Node) []*Node {
		return []*Node{traced(m, e, a[0])}
	})
	if err != nil {
		return nil, err
	}
	return res[0], nil
}
