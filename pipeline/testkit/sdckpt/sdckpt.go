// Package sdckpt generates small diffusers pipelines (Stable Diffusion and
// SDXL layouts with tiny channel counts and random weights) for tests and
// benchmarks, so that no binary checkpoint is committed: tests call
// Generate into t.TempDir(), and scripts/gen-tiny-sd writes them to disk.
//
// The tensor names are enumerated here from diffusers' and transformers'
// module trees (UNet2DConditionModel, AutoencoderKL, CLIPTextModel[
// WithProjection]), independently of the model packages that load them, so
// a naming mistake in either shows up as a strict-loading error.
package sdckpt

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"

	"github.com/tputool/tputool/loader/safetensors"
)

// UNetSpec sizes a UNet2DConditionModel.
type UNetSpec struct {
	BlockOut          []int
	LayersPerBlock    int
	Heads             []int // attention_head_dim (= number of heads, diffusers' quirk)
	TransformerLayers []int // per down block
	Down, Up          []string
	CrossDim          int
	Groups            int
	LinearProjection  bool
	// TextTime adds SDXL's addition_embed_type "text_time".
	TextTime        bool
	AddTimeEmbedDim int
	PooledDim       int // text_encoder_2 projection_dim
	SampleSize      int
}

// VAESpec sizes an AutoencoderKL.
type VAESpec struct {
	BlockOut       []int
	LayersPerBlock int
	Groups         int
	ScalingFactor  float64
	SampleSize     int
	// LatentChannels defaults to 4 (SD3 uses 16).
	LatentChannels int
	// NoQuantConv drops quant_conv and post_quant_conv (SD3's VAE).
	NoQuantConv bool
	// ShiftFactor is SD3's shift_factor (0: none).
	ShiftFactor float64
}

// TransformerSpec sizes an SD3Transformer2DModel (MMDiT).
type TransformerSpec struct {
	PatchSize, Layers, Heads, HeadDim int
	JointDim, PooledDim, PosMax       int
	InChannels, SampleSize            int
	// QKNorm adds SD3.5's RMS norm of queries and keys.
	QKNorm bool
}

// TextSpec sizes a CLIP text encoder.
type TextSpec struct {
	Hidden, Intermediate, Layers, Heads int
	Projection                          int // > 0: CLIPTextModelWithProjection
	Act                                 string
	MaxPositions                        int
	// PadToken is the tokenizer's pad token: "<|endoftext|>" (SD) or "!"
	// (SDXL's tokenizer_2).
	PadToken string
}

// Spec describes a pipeline to generate.
type Spec struct {
	// Name is a label (the preset name).
	Name string
	// XL selects StableDiffusionXLPipeline (two text encoders).
	XL bool
	// SD3 selects StableDiffusion3Pipeline (MMDiT, two CLIP text
	// encoders with projection, no T5).
	SD3         bool
	Transformer TransformerSpec
	UNet        UNetSpec
	VAE         VAESpec
	Text        TextSpec
	Text2       TextSpec // SDXL only
	// Scheduler is the scheduler class; its config is diffusers' SD one.
	Scheduler string
	Seed      uint64
	// DType is the stored dtype: "F32" (default), "F16" or "BF16".
	DType string
	// Variant writes *.VARIANT.safetensors (e.g. "fp16") instead of the
	// plain file names.
	Variant string
}

// Presets returns the named specs: tiny-sd, tiny-sdxl, tiny-sd3 (tests),
// and sd-100m (a ~100M-parameter SD-like UNet for benchmarks).
func Presets() map[string]Spec {
	return map[string]Spec{"tiny-sd": TinySD(), "tiny-sdxl": TinySDXL(), "tiny-sd3": TinySD3(), "sd-100m": SD100M()}
}

// TinySD3 is a Stable Diffusion 3 layout with tiny widths: a 2-layer MMDiT
// (the last block context_pre_only) with qk RMS norm, two CLIP text
// encoders with projection (no T5: text_encoder_3 is left out, as
// diffusers allows), a 16-channel VAE without quant convs, and
// FlowMatchEulerDiscreteScheduler with shift 3.
func TinySD3() Spec {
	return Spec{
		Name: "tiny-sd3", SD3: true,
		Transformer: TransformerSpec{PatchSize: 2, Layers: 2, Heads: 2, HeadDim: 8, JointDim: 48, PooledDim: 32,
			PosMax: 16, InChannels: 16, SampleSize: 8, QKNorm: true},
		VAE: VAESpec{BlockOut: []int{8, 8, 16, 16}, LayersPerBlock: 1, Groups: 4, ScalingFactor: 1.5305, ShiftFactor: 0.0609,
			SampleSize: 64, LatentChannels: 16, NoQuantConv: true},
		Text:      TextSpec{Hidden: 16, Intermediate: 32, Layers: 2, Heads: 2, Projection: 16, Act: "quick_gelu", MaxPositions: 77, PadToken: "<|endoftext|>"},
		Text2:     TextSpec{Hidden: 16, Intermediate: 32, Layers: 3, Heads: 2, Projection: 16, Act: "gelu", MaxPositions: 77, PadToken: "!"},
		Scheduler: "FlowMatchEulerDiscreteScheduler",
		Seed:      4,
	}
}

// TinySD is a Stable Diffusion 1.x layout with tiny channel counts:
// CrossAttnDownBlock2D + DownBlock2D, a 4-level VAE (8x spatial
// reduction), one quick_gelu CLIP text encoder.
func TinySD() Spec {
	return Spec{
		Name: "tiny-sd",
		UNet: UNetSpec{BlockOut: []int{16, 32}, LayersPerBlock: 1, Heads: []int{2, 2}, TransformerLayers: []int{1, 1},
			Down: []string{"CrossAttnDownBlock2D", "DownBlock2D"}, Up: []string{"UpBlock2D", "CrossAttnUpBlock2D"},
			CrossDim: 32, Groups: 4, SampleSize: 8},
		VAE:       VAESpec{BlockOut: []int{8, 8, 16, 16}, LayersPerBlock: 1, Groups: 4, ScalingFactor: 0.18215, SampleSize: 64},
		Text:      TextSpec{Hidden: 32, Intermediate: 64, Layers: 2, Heads: 2, Act: "quick_gelu", MaxPositions: 77, PadToken: "<|endoftext|>"},
		Scheduler: "PNDMScheduler",
		Seed:      1,
	}
}

// TinySDXL is an SDXL layout with tiny channel counts: DownBlock2D then
// CrossAttnDownBlock2D with 2 transformer layers, linear projections, two
// text encoders (quick_gelu, and gelu with projection) and text_time
// conditioning.
func TinySDXL() Spec {
	return Spec{
		Name: "tiny-sdxl", XL: true,
		UNet: UNetSpec{BlockOut: []int{16, 32}, LayersPerBlock: 1, Heads: []int{2, 4}, TransformerLayers: []int{1, 2},
			Down: []string{"DownBlock2D", "CrossAttnDownBlock2D"}, Up: []string{"CrossAttnUpBlock2D", "UpBlock2D"},
			CrossDim: 32 + 32, Groups: 4, LinearProjection: true, TextTime: true, AddTimeEmbedDim: 8, PooledDim: 16, SampleSize: 8},
		VAE:       VAESpec{BlockOut: []int{8, 8, 16, 16}, LayersPerBlock: 1, Groups: 4, ScalingFactor: 0.13025, SampleSize: 64},
		Text:      TextSpec{Hidden: 32, Intermediate: 64, Layers: 2, Heads: 2, Act: "quick_gelu", MaxPositions: 77, PadToken: "<|endoftext|>"},
		Text2:     TextSpec{Hidden: 32, Intermediate: 64, Layers: 3, Heads: 2, Projection: 16, Act: "gelu", MaxPositions: 77, PadToken: "!"},
		Scheduler: "EulerDiscreteScheduler",
		Seed:      2,
	}
}

// SD100M is an SD 1.x block layout with fewer channels (block_out_channels
// 160, 320, 384, 384; about 103M UNet parameters) and a small VAE and text
// encoder, for benchmarks.
func SD100M() Spec {
	return Spec{
		Name: "sd-100m",
		UNet: UNetSpec{BlockOut: []int{160, 320, 384, 384}, LayersPerBlock: 2, Heads: []int{8, 8, 8, 8}, TransformerLayers: []int{1, 1, 1, 1},
			Down:     []string{"CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "DownBlock2D"},
			Up:       []string{"UpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D"},
			CrossDim: 512, Groups: 32, SampleSize: 32},
		VAE:       VAESpec{BlockOut: []int{32, 32, 64, 64}, LayersPerBlock: 1, Groups: 32, ScalingFactor: 0.18215, SampleSize: 256},
		Text:      TextSpec{Hidden: 512, Intermediate: 1024, Layers: 2, Heads: 8, Act: "quick_gelu", MaxPositions: 77, PadToken: "<|endoftext|>"},
		Scheduler: "PNDMScheduler",
		Seed:      3,
	}
}

// tensor is one generated tensor: name, shape and initialisation.
type tensor struct {
	name  string
	shape []int
	init  initKind
}

type initKind int

const (
	initWeight   initKind = iota // N(0, 1/fan_in)
	initBias                     // N(0, 0.02^2)
	initNormW                    // 1 + N(0, 0.1^2)
	initEmbed                    // N(0, 0.5^2)
	initPosEmbed                 // the 2D sin-cos table (not random)
)

type tensorList []tensor

func (l *tensorList) add(name string, k initKind, shape ...int) {
	*l = append(*l, tensor{name: name, shape: shape, init: k})
}
func (l *tensorList) linear(p string, in, out int, bias bool) {
	l.add(p+".weight", initWeight, out, in)
	if bias {
		l.add(p+".bias", initBias, out)
	}
}
func (l *tensorList) conv(p string, in, out, k int) {
	l.add(p+".weight", initWeight, out, in, k, k)
	l.add(p+".bias", initBias, out)
}
func (l *tensorList) norm(p string, c int) {
	l.add(p+".weight", initNormW, c)
	l.add(p+".bias", initBias, c)
}

// resnet lists ResnetBlock2D's tensors.
func (l *tensorList) resnet(p string, in, out, temb int) {
	l.norm(p+".norm1", in)
	l.conv(p+".conv1", in, out, 3)
	if temb > 0 {
		l.linear(p+".time_emb_proj", temb, out, true)
	}
	l.norm(p+".norm2", out)
	l.conv(p+".conv2", out, out, 3)
	if in != out {
		l.conv(p+".conv_shortcut", in, out, 1)
	}
}

// transformer lists Transformer2DModel's tensors.
func (l *tensorList) transformer(p string, ch, layers, cross int, linear bool) {
	l.norm(p+".norm", ch)
	if linear {
		l.linear(p+".proj_in", ch, ch, true)
	} else {
		l.conv(p+".proj_in", ch, ch, 1)
	}
	for i := 0; i < layers; i++ {
		b := fmt.Sprintf("%s.transformer_blocks.%d", p, i)
		for _, a := range []struct {
			name string
			kv   int
		}{{"attn1", ch}, {"attn2", cross}} {
			l.linear(b+"."+a.name+".to_q", ch, ch, false)
			l.linear(b+"."+a.name+".to_k", a.kv, ch, false)
			l.linear(b+"."+a.name+".to_v", a.kv, ch, false)
			l.linear(b+"."+a.name+".to_out.0", ch, ch, true)
		}
		l.norm(b+".norm1", ch)
		l.norm(b+".norm2", ch)
		l.norm(b+".norm3", ch)
		l.linear(b+".ff.net.0.proj", ch, 8*ch, true)
		l.linear(b+".ff.net.2", 4*ch, ch, true)
	}
	if linear {
		l.linear(p+".proj_out", ch, ch, true)
	} else {
		l.conv(p+".proj_out", ch, ch, 1)
	}
}

func unetTensors(u UNetSpec, inCh int) tensorList {
	var l tensorList
	b0 := u.BlockOut[0]
	temb := 4 * b0
	n := len(u.BlockOut)
	l.conv("conv_in", inCh, b0, 3)
	l.linear("time_embedding.linear_1", b0, temb, true)
	l.linear("time_embedding.linear_2", temb, temb, true)
	if u.TextTime {
		l.linear("add_embedding.linear_1", u.PooledDim+6*u.AddTimeEmbedDim, temb, true)
		l.linear("add_embedding.linear_2", temb, temb, true)
	}
	out := b0
	for i, typ := range u.Down {
		in := out
		out = u.BlockOut[i]
		for j := 0; j < u.LayersPerBlock; j++ {
			rin := out
			if j == 0 {
				rin = in
			}
			l.resnet(fmt.Sprintf("down_blocks.%d.resnets.%d", i, j), rin, out, temb)
			if typ == "CrossAttnDownBlock2D" {
				l.transformer(fmt.Sprintf("down_blocks.%d.attentions.%d", i, j), out, u.TransformerLayers[i], u.CrossDim, u.LinearProjection)
			}
		}
		if i < n-1 {
			l.conv(fmt.Sprintf("down_blocks.%d.downsamplers.0.conv", i), out, out, 3)
		}
	}
	last := u.BlockOut[n-1]
	l.resnet("mid_block.resnets.0", last, last, temb)
	l.transformer("mid_block.attentions.0", last, u.TransformerLayers[n-1], u.CrossDim, u.LinearProjection)
	l.resnet("mid_block.resnets.1", last, last, temb)
	out = last
	for i, typ := range u.Up {
		prev := out
		out = u.BlockOut[n-1-i]
		in := u.BlockOut[max(n-2-i, 0)]
		for j := 0; j <= u.LayersPerBlock; j++ {
			skip := out
			if j == u.LayersPerBlock {
				skip = in
			}
			rin := out
			if j == 0 {
				rin = prev
			}
			l.resnet(fmt.Sprintf("up_blocks.%d.resnets.%d", i, j), rin+skip, out, temb)
			if typ == "CrossAttnUpBlock2D" {
				l.transformer(fmt.Sprintf("up_blocks.%d.attentions.%d", i, j), out, u.TransformerLayers[n-1-i], u.CrossDim, u.LinearProjection)
			}
		}
		if i < n-1 {
			l.conv(fmt.Sprintf("up_blocks.%d.upsamplers.0.conv", i), out, out, 3)
		}
	}
	l.norm("conv_norm_out", b0)
	l.conv("conv_out", b0, 4, 3)
	return l
}

func transformerTensors(t TransformerSpec) tensorList {
	var l tensorList
	d := t.Heads * t.HeadDim
	p := t.PatchSize
	l.conv("pos_embed.proj", t.InChannels, d, p)
	l.add("pos_embed.pos_embed", initPosEmbed, 1, t.PosMax*t.PosMax, d)
	l.linear("time_text_embed.timestep_embedder.linear_1", 256, d, true)
	l.linear("time_text_embed.timestep_embedder.linear_2", d, d, true)
	l.linear("time_text_embed.text_embedder.linear_1", t.PooledDim, d, true)
	l.linear("time_text_embed.text_embedder.linear_2", d, d, true)
	l.linear("context_embedder", t.JointDim, d, true)
	for i := 0; i < t.Layers; i++ {
		b := fmt.Sprintf("transformer_blocks.%d", i)
		pre := i == t.Layers-1
		l.linear(b+".norm1.linear", d, 6*d, true)
		if pre {
			l.linear(b+".norm1_context.linear", d, 2*d, true)
		} else {
			l.linear(b+".norm1_context.linear", d, 6*d, true)
		}
		for _, n := range []string{"to_q", "to_k", "to_v", "add_q_proj", "add_k_proj", "add_v_proj", "to_out.0"} {
			l.linear(b+".attn."+n, d, d, true)
		}
		if !pre {
			l.linear(b+".attn.to_add_out", d, d, true)
		}
		if t.QKNorm {
			for _, n := range []string{"norm_q", "norm_k", "norm_added_q", "norm_added_k"} {
				l.add(b+".attn."+n+".weight", initNormW, t.HeadDim)
			}
		}
		l.linear(b+".ff.net.0.proj", d, 4*d, true)
		l.linear(b+".ff.net.2", 4*d, d, true)
		if !pre {
			l.linear(b+".ff_context.net.0.proj", d, 4*d, true)
			l.linear(b+".ff_context.net.2", 4*d, d, true)
		}
	}
	l.linear("norm_out.linear", d, 2*d, true)
	l.linear("proj_out", d, p*p*t.InChannels, true)
	return l
}

func vaeTensors(v VAESpec) tensorList {
	var l tensorList
	n := len(v.BlockOut)
	last := v.BlockOut[n-1]
	mid := func(p string) {
		l.resnet(p+".resnets.0", last, last, 0)
		l.norm(p+".attentions.0.group_norm", last)
		for _, s := range []string{"to_q", "to_k", "to_v", "to_out.0"} {
			l.linear(p+".attentions.0."+s, last, last, true)
		}
		l.resnet(p+".resnets.1", last, last, 0)
	}
	l.conv("encoder.conv_in", 3, v.BlockOut[0], 3)
	out := v.BlockOut[0]
	for i := 0; i < n; i++ {
		in := out
		out = v.BlockOut[i]
		for j := 0; j < v.LayersPerBlock; j++ {
			rin := out
			if j == 0 {
				rin = in
			}
			l.resnet(fmt.Sprintf("encoder.down_blocks.%d.resnets.%d", i, j), rin, out, 0)
		}
		if i < n-1 {
			l.conv(fmt.Sprintf("encoder.down_blocks.%d.downsamplers.0.conv", i), out, out, 3)
		}
	}
	mid("encoder.mid_block")
	lc := v.LatentChannels
	if lc == 0 {
		lc = 4
	}
	l.norm("encoder.conv_norm_out", last)
	l.conv("encoder.conv_out", last, 2*lc, 3)
	if !v.NoQuantConv {
		l.conv("quant_conv", 2*lc, 2*lc, 1)
		l.conv("post_quant_conv", lc, lc, 1)
	}
	l.conv("decoder.conv_in", lc, last, 3)
	mid("decoder.mid_block")
	out = last
	for i := 0; i < n; i++ {
		prev := out
		out = v.BlockOut[n-1-i]
		for j := 0; j <= v.LayersPerBlock; j++ {
			in := out
			if j == 0 {
				in = prev
			}
			l.resnet(fmt.Sprintf("decoder.up_blocks.%d.resnets.%d", i, j), in, out, 0)
		}
		if i < n-1 {
			l.conv(fmt.Sprintf("decoder.up_blocks.%d.upsamplers.0.conv", i), out, out, 3)
		}
	}
	l.norm("decoder.conv_norm_out", v.BlockOut[0])
	l.conv("decoder.conv_out", v.BlockOut[0], 3, 3)
	return l
}

func textTensors(t TextSpec, vocab int) tensorList {
	var l tensorList
	d := t.Hidden
	l.add("text_model.embeddings.token_embedding.weight", initEmbed, vocab, d)
	l.add("text_model.embeddings.position_embedding.weight", initEmbed, t.MaxPositions, d)
	for i := 0; i < t.Layers; i++ {
		p := fmt.Sprintf("text_model.encoder.layers.%d", i)
		for _, s := range []string{"q_proj", "k_proj", "v_proj", "out_proj"} {
			l.linear(p+".self_attn."+s, d, d, true)
		}
		l.norm(p+".layer_norm1", d)
		l.linear(p+".mlp.fc1", d, t.Intermediate, true)
		l.linear(p+".mlp.fc2", t.Intermediate, d, true)
		l.norm(p+".layer_norm2", d)
	}
	l.norm("text_model.final_layer_norm", d)
	if t.Projection > 0 {
		l.linear("text_projection", d, t.Projection, false)
	}
	return l
}

// NumParameters returns the UNet's parameter count for a spec.
func NumParameters(u UNetSpec) int64 { return unetTensors(u, 4).count() }

// DenoiserParameters returns the parameter count of the spec's UNet or
// transformer.
func (s Spec) DenoiserParameters() int64 {
	if s.SD3 {
		return transformerTensors(s.Transformer).count()
	}
	return NumParameters(s.UNet)
}

func (l tensorList) count() int64 {
	var n int64
	for _, t := range l {
		e := int64(1)
		for _, d := range t.shape {
			e *= int64(d)
		}
		n += e
	}
	return n
}

func (l tensorList) write(path string, rng *rand.Rand, dtype string) error {
	sorted := append(tensorList(nil), l...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].name < sorted[j].name })
	var out []safetensors.Tensor
	for _, t := range sorted {
		size := 1
		for _, d := range t.shape {
			size *= d
		}
		vals := make([]float32, size)
		fanIn := 1
		for _, d := range t.shape[1:] {
			fanIn *= d
		}
		if t.init == initPosEmbed {
			copy(vals, sinCosTable(t.shape[2], int(math.Sqrt(float64(t.shape[1]))), 8))
			st, err := safetensors.Float32Tensor(t.name, safetensors.DType(dtype), t.shape, vals)
			if err != nil {
				return err
			}
			out = append(out, st)
			continue
		}
		for i := range vals {
			g := rng.NormFloat64()
			switch t.init {
			case initWeight:
				vals[i] = float32(g / math.Sqrt(float64(fanIn)))
			case initBias:
				vals[i] = float32(0.02 * g)
			case initNormW:
				vals[i] = float32(1 + 0.1*g)
			case initEmbed:
				vals[i] = float32(0.5 * g)
			}
		}
		st, err := safetensors.Float32Tensor(t.name, safetensors.DType(dtype), t.shape, vals)
		if err != nil {
			return err
		}
		out = append(out, st)
	}
	return safetensors.WriteFile(path, out, map[string]string{"format": "pt"})
}

// Generate writes the pipeline described by s into dir (created if
// needed): model_index.json and the component folders.
func Generate(dir string, s Spec) error {
	if s.DType == "" {
		s.DType = "F32"
	}
	switch s.DType {
	case "F32", "F16", "BF16":
	default:
		return fmt.Errorf("sdckpt: dtype %q (want F32, F16 or BF16)", s.DType)
	}
	rng := rand.New(rand.NewPCG(s.Seed, 0x5d1ff))
	weights := func(component, stem string) string {
		name := stem + ".safetensors"
		if s.Variant != "" {
			name = stem + "." + s.Variant + ".safetensors"
		}
		return filepath.Join(dir, component, name)
	}
	for _, c := range s.components() {
		if err := os.MkdirAll(filepath.Join(dir, c), 0o755); err != nil {
			return err
		}
	}
	if err := writeJSON(filepath.Join(dir, "model_index.json"), s.modelIndex()); err != nil {
		return err
	}
	if err := writeJSON(filepath.Join(dir, "scheduler", "scheduler_config.json"), s.schedulerConfig()); err != nil {
		return err
	}
	vocab, merges := tinyVocab()
	type te struct {
		comp, tok string
		spec      TextSpec
	}
	encoders := []te{{"text_encoder", "tokenizer", s.Text}}
	if s.XL || s.SD3 {
		encoders = append(encoders, te{"text_encoder_2", "tokenizer_2", s.Text2})
	}
	for _, e := range encoders {
		if err := writeTokenizer(filepath.Join(dir, e.tok), vocab, merges, e.spec); err != nil {
			return err
		}
		if err := writeJSON(filepath.Join(dir, e.comp, "config.json"), textConfig(e.spec, len(vocab))); err != nil {
			return err
		}
		if err := textTensors(e.spec, len(vocab)).write(weights(e.comp, "model"), rng, s.DType); err != nil {
			return err
		}
	}
	if s.SD3 {
		if err := writeJSON(filepath.Join(dir, "transformer", "config.json"), s.transformerConfig()); err != nil {
			return err
		}
		if err := transformerTensors(s.Transformer).write(weights("transformer", "diffusion_pytorch_model"), rng, s.DType); err != nil {
			return err
		}
	} else {
		if err := writeJSON(filepath.Join(dir, "unet", "config.json"), s.unetConfig()); err != nil {
			return err
		}
		if err := unetTensors(s.UNet, 4).write(weights("unet", "diffusion_pytorch_model"), rng, s.DType); err != nil {
			return err
		}
	}
	if err := writeJSON(filepath.Join(dir, "vae", "config.json"), s.vaeConfig()); err != nil {
		return err
	}
	return vaeTensors(s.VAE).write(weights("vae", "diffusion_pytorch_model"), rng, s.DType)
}

func (s Spec) components() []string {
	c := []string{"scheduler", "text_encoder", "tokenizer", "vae"}
	if s.SD3 {
		c = append(c, "transformer")
	} else {
		c = append(c, "unet")
	}
	if s.XL || s.SD3 {
		c = append(c, "text_encoder_2", "tokenizer_2")
	}
	return c
}

func (s Spec) modelIndex() map[string]any {
	m := map[string]any{
		"_diffusers_version": "0.30.0",
		"scheduler":          []any{"diffusers", s.Scheduler},
		"text_encoder":       []any{"transformers", "CLIPTextModel"},
		"tokenizer":          []any{"transformers", "CLIPTokenizer"},
		"unet":               []any{"diffusers", "UNet2DConditionModel"},
		"vae":                []any{"diffusers", "AutoencoderKL"},
	}
	if s.SD3 {
		delete(m, "unet")
		m["_class_name"] = "StableDiffusion3Pipeline"
		m["transformer"] = []any{"diffusers", "SD3Transformer2DModel"}
		m["text_encoder"] = []any{"transformers", "CLIPTextModelWithProjection"}
		m["text_encoder_2"] = []any{"transformers", "CLIPTextModelWithProjection"}
		m["tokenizer_2"] = []any{"transformers", "CLIPTokenizer"}
		m["text_encoder_3"] = []any{nil, nil}
		m["tokenizer_3"] = []any{nil, nil}
		m["image_encoder"] = []any{nil, nil}
		m["feature_extractor"] = []any{nil, nil}
		return m
	}
	if s.XL {
		m["_class_name"] = "StableDiffusionXLPipeline"
		m["text_encoder_2"] = []any{"transformers", "CLIPTextModelWithProjection"}
		m["tokenizer_2"] = []any{"transformers", "CLIPTokenizer"}
		m["force_zeros_for_empty_prompt"] = true
		m["image_encoder"] = []any{nil, nil}
		m["feature_extractor"] = []any{nil, nil}
	} else {
		m["_class_name"] = "StableDiffusionPipeline"
		m["safety_checker"] = []any{nil, nil}
		m["feature_extractor"] = []any{nil, nil}
		m["requires_safety_checker"] = false
	}
	return m
}

func (s Spec) schedulerConfig() map[string]any {
	c := map[string]any{
		"_class_name":         s.Scheduler,
		"_diffusers_version":  "0.30.0",
		"beta_end":            0.012,
		"beta_schedule":       "scaled_linear",
		"beta_start":          0.00085,
		"num_train_timesteps": 1000,
		"prediction_type":     "epsilon",
		"steps_offset":        1,
		"clip_sample":         false,
		"set_alpha_to_one":    false,
		"skip_prk_steps":      true,
		"trained_betas":       nil,
	}
	if s.Scheduler == "FlowMatchEulerDiscreteScheduler" {
		return map[string]any{"_class_name": s.Scheduler, "_diffusers_version": "0.30.0",
			"num_train_timesteps": 1000, "shift": 3.0}
	}
	if s.Scheduler == "EulerDiscreteScheduler" {
		c["interpolation_type"] = "linear"
		c["timestep_spacing"] = "leading"
		c["use_karras_sigmas"] = false
		delete(c, "skip_prk_steps")
		delete(c, "set_alpha_to_one")
	}
	return c
}

func (s Spec) unetConfig() map[string]any {
	u := s.UNet
	c := map[string]any{
		"_class_name":                  "UNet2DConditionModel",
		"_diffusers_version":           "0.30.0",
		"act_fn":                       "silu",
		"attention_head_dim":           u.Heads,
		"block_out_channels":           u.BlockOut,
		"center_input_sample":          false,
		"cross_attention_dim":          u.CrossDim,
		"down_block_types":             u.Down,
		"downsample_padding":           1,
		"flip_sin_to_cos":              true,
		"freq_shift":                   0,
		"in_channels":                  4,
		"layers_per_block":             u.LayersPerBlock,
		"mid_block_scale_factor":       1,
		"norm_eps":                     1e-05,
		"norm_num_groups":              u.Groups,
		"out_channels":                 4,
		"sample_size":                  u.SampleSize,
		"up_block_types":               u.Up,
		"use_linear_projection":        u.LinearProjection,
		"transformer_layers_per_block": u.TransformerLayers,
	}
	if u.TextTime {
		c["addition_embed_type"] = "text_time"
		c["addition_time_embed_dim"] = u.AddTimeEmbedDim
		c["projection_class_embeddings_input_dim"] = u.PooledDim + 6*u.AddTimeEmbedDim
	}
	return c
}

func (s Spec) transformerConfig() map[string]any {
	t := s.Transformer
	c := map[string]any{
		"_class_name": "SD3Transformer2DModel", "_diffusers_version": "0.30.0",
		"attention_head_dim": t.HeadDim, "caption_projection_dim": t.Heads * t.HeadDim,
		"in_channels": t.InChannels, "joint_attention_dim": t.JointDim, "num_attention_heads": t.Heads,
		"num_layers": t.Layers, "out_channels": t.InChannels, "patch_size": t.PatchSize,
		"pooled_projection_dim": t.PooledDim, "pos_embed_max_size": t.PosMax, "sample_size": t.SampleSize,
		"dual_attention_layers": []int{}, "qk_norm": nil,
	}
	if t.QKNorm {
		c["qk_norm"] = "rms_norm"
	}
	return c
}

// sinCosTable is diffusers' get_2d_sincos_pos_embed(dim, grid, base_size)
// as [grid*grid, dim]: the first half of each row encodes the column (w)
// coordinate, the second half the row (h), each as sines then cosines.
func sinCosTable(dim, grid, baseSize int) []float32 {
	out := make([]float32, grid*grid*dim)
	half, quarter := dim/2, dim/4
	for r := 0; r < grid; r++ {
		for col := 0; col < grid; col++ {
			pos := [2]float64{float64(col) / (float64(grid) / float64(baseSize)), float64(r) / (float64(grid) / float64(baseSize))}
			row := out[(r*grid+col)*dim:]
			for a := 0; a < 2; a++ {
				for i := 0; i < quarter; i++ {
					omega := 1 / math.Pow(10000, float64(i)/float64(quarter))
					row[a*half+i] = float32(math.Sin(pos[a] * omega))
					row[a*half+quarter+i] = float32(math.Cos(pos[a] * omega))
				}
			}
		}
	}
	return out
}

func (s Spec) vaeConfig() map[string]any {
	v := s.VAE
	n := len(v.BlockOut)
	down := make([]string, n)
	up := make([]string, n)
	for i := range down {
		down[i] = "DownEncoderBlock2D"
		up[i] = "UpDecoderBlock2D"
	}
	c := map[string]any{
		"_class_name":        "AutoencoderKL",
		"_diffusers_version": "0.30.0",
		"act_fn":             "silu",
		"block_out_channels": v.BlockOut,
		"down_block_types":   down,
		"in_channels":        3,
		"latent_channels":    4,
		"layers_per_block":   v.LayersPerBlock,
		"norm_num_groups":    v.Groups,
		"out_channels":       3,
		"sample_size":        v.SampleSize,
		"scaling_factor":     v.ScalingFactor,
		"up_block_types":     up,
	}
	if s.XL {
		c["force_upcast"] = true
	}
	if v.LatentChannels != 0 {
		c["latent_channels"] = v.LatentChannels
	}
	if v.NoQuantConv {
		c["use_quant_conv"] = false
		c["use_post_quant_conv"] = false
	}
	if v.ShiftFactor != 0 {
		c["shift_factor"] = v.ShiftFactor
	}
	return c
}

func textConfig(t TextSpec, vocab int) map[string]any {
	arch := "CLIPTextModel"
	if t.Projection > 0 {
		arch = "CLIPTextModelWithProjection"
	}
	proj := t.Projection
	if proj == 0 {
		proj = t.Hidden
	}
	return map[string]any{
		"architectures":           []string{arch},
		"model_type":              "clip_text_model",
		"attention_dropout":       0.0,
		"bos_token_id":            vocab - 2,
		"eos_token_id":            vocab - 1,
		"pad_token_id":            1,
		"hidden_act":              t.Act,
		"hidden_size":             t.Hidden,
		"initializer_factor":      1.0,
		"initializer_range":       0.02,
		"intermediate_size":       t.Intermediate,
		"layer_norm_eps":          1e-05,
		"max_position_embeddings": t.MaxPositions,
		"num_attention_heads":     t.Heads,
		"num_hidden_layers":       t.Layers,
		"projection_dim":          proj,
		"torch_dtype":             "float32",
		"vocab_size":              vocab,
	}
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}
