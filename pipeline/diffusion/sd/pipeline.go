// Package sd runs diffusers' StableDiffusionPipeline and
// StableDiffusionXLPipeline: it reads a pipeline folder (model_index.json
// and the unet/, vae/, text_encoder[_2]/, tokenizer[_2]/, scheduler/
// subfolders), encodes prompts with the CLIP text encoders, runs the
// denoising loop with classifier-free guidance and a diffusers scheduler,
// and decodes the latents with the VAE.
//
// It follows diffusers' pipelines/stable_diffusion/pipeline_stable_diffusion.py
// and pipelines/stable_diffusion_xl/pipeline_stable_diffusion_xl.py (and
// pipelines/stable_diffusion_3/pipeline_stable_diffusion_3.py). The initial
// latents come from pipeline/torchrand, so a seed gives the same starting
// noise as a float32 diffusers pipeline with a CPU torch.Generator (a
// float16 or bfloat16 pipeline draws its noise in that dtype, with other
// values). The safety checker and SDXL's invisible watermark are not applied.
package sd

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/gomlx/gomlx/backends"

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/loader/safetensors"
	"github.com/tputool/tputool/pipeline/diffusion/blocks"
	"github.com/tputool/tputool/pipeline/diffusion/clip"
	"github.com/tputool/tputool/pipeline/diffusion/mmdit"
	"github.com/tputool/tputool/pipeline/diffusion/unet"
	"github.com/tputool/tputool/pipeline/diffusion/vae"
	"github.com/tputool/tputool/pipeline/schedulers"
)

// Pipeline classes this package runs.
const (
	ClassSD   = "StableDiffusionPipeline"
	ClassSDXL = "StableDiffusionXLPipeline"
	ClassSD3  = "StableDiffusion3Pipeline"
)

// Options configure loading.
type Options struct {
	// Backend runs the graphs. Required.
	Backend backends.Backend
	// Variant selects weight files such as *.fp16.safetensors. Empty means
	// the plain files, falling back to the fp16 variant when a component
	// has only that.
	Variant string
	// Layers are backend-dependent layer choices. When nil, ConvGeneral is
	// used on every backend but the pure-Go one ("go"), where im2col +
	// DotGeneral is much faster.
	Layers *blocks.Options
	// Executor compiles and runs the graphs on Backend. Required; the
	// caller owns it (compile.GraphExecutor, which cmd/ passes). When it
	// is also a blocks.Precompiler the denoiser is compiled before the
	// loop, and when it is a blocks.CompileCounter Generate reports the
	// compile times.
	Executor blocks.Executor
	// OnLoad, when set, is called as each component finishes loading.
	OnLoad func(component string, params int64, took time.Duration)
	// Warn, when set, receives warnings (a new image size that makes the
	// models compile again).
	Warn func(format string, args ...any)
	// OnNonFinite, when set, is called for each weight loaded that holds
	// NaN or infinite values, found while it is converted (no separate
	// pass); Name is component/tensor, e.g. vae/decoder.conv_out.weight.
	// The pipeline still loads.
	OnNonFinite func(safetensors.NonFiniteTensor)
}

// textEncoder is one CLIP text encoder with its tokenizer.
type textEncoder struct {
	name  string // "text_encoder" or "text_encoder_2"
	model *clip.Model
	tok   *promptTokenizer
}

// Pipeline is a loaded Stable Diffusion (1.x/2.x) or SDXL pipeline.
type Pipeline struct {
	Dir   string
	Class string
	// XL is true for StableDiffusionXLPipeline.
	XL bool
	// SD3 is true for StableDiffusion3Pipeline: Transformer instead of
	// UNet, flow matching, no T5 (its prompt embeddings are zeros).
	SD3 bool
	// UNet (SD, SDXL) or Transformer (SD3) is the denoiser.
	UNet        *unet.Model
	Transformer *mmdit.Model
	VAE         *vae.Model
	texts       []*textEncoder
	// SchedulerConfig is scheduler/scheduler_config.json.
	SchedulerConfig schedulers.Config
	// ForceZerosForEmptyPrompt is SDXL's force_zeros_for_empty_prompt.
	ForceZerosForEmptyPrompt bool
	// VAEScaleFactor is 2^(len(vae block_out_channels)-1).
	VAEScaleFactor int

	exec  blocks.Executor
	warn  func(format string, args ...any)
	sizes map[[3]int]bool // (height, width, unet batch) run so far
}

// Load reads the pipeline in dir.
func Load(dir string, opts Options) (p *Pipeline, err error) {
	if opts.Backend == nil {
		return nil, errors.New("sd.Load: no backend")
	}
	if opts.Executor == nil {
		return nil, errors.New("sd.Load: no executor")
	}
	mi, err := config.ReadModelIndex(filepath.Join(dir, "model_index.json"))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, errs.Unsupportedf("%s: no model_index.json (not a diffusers pipeline folder)", dir)
		}
		return nil, err
	}
	p = &Pipeline{Dir: dir, Class: mi.ClassName, exec: opts.Executor, sizes: map[[3]int]bool{}, warn: opts.Warn}
	switch mi.ClassName {
	case ClassSD:
	case ClassSDXL:
		p.XL = true
		p.ForceZerosForEmptyPrompt = true
		if raw, ok := mi.Raw["force_zeros_for_empty_prompt"]; ok {
			p.ForceZerosForEmptyPrompt = string(raw) != "false"
		}
	case ClassSD3:
		p.SD3 = true
	default:
		return nil, errs.Unsupportedf("%s: pipeline class %q (supported: %s, %s, %s)", dir, mi.ClassName, ClassSD, ClassSDXL, ClassSD3)
	}
	layers := blocks.OptionsFor(opts.Backend)
	if opts.Layers != nil {
		layers = *opts.Layers
	}
	defer func() {
		if err != nil {
			p.Close()
		}
	}()
	want := map[string]string{"vae": "AutoencoderKL", "text_encoder": "", "tokenizer": "", "scheduler": ""}
	if p.SD3 {
		want["transformer"] = "SD3Transformer2DModel"
	} else {
		want["unet"] = "UNet2DConditionModel"
	}
	if p.XL || p.SD3 {
		want["text_encoder_2"] = ""
		want["tokenizer_2"] = ""
	}
	if _, ok := mi.Component("text_encoder_3"); ok && p.SD3 && opts.Warn != nil {
		opts.Warn("%s: text_encoder_3 (T5) is not supported; running without it as diffusers does with text_encoder_3=None (its prompt embeddings are zeros), which lowers prompt adherence", dir)
	}
	if c, ok := mi.Component("safety_checker"); ok && opts.Warn != nil {
		opts.Warn("%s: model_index.json names a safety_checker (%s) that is not run: diffusers would black out images it flags as NSFW, these images are written as generated", dir, c.Class)
	}
	for name, class := range want {
		c, ok := mi.Component(name)
		if !ok {
			return nil, errs.Unsupportedf("%s: model_index.json has no %q component", dir, name)
		}
		if class != "" && c.Class != class {
			return nil, errs.Unsupportedf("%s: component %s is %s, want %s", dir, name, c.Class, class)
		}
	}

	// Scheduler config (the scheduler itself is built per request).
	schedPath := filepath.Join(dir, "scheduler", "scheduler_config.json")
	data, err := os.ReadFile(schedPath)
	if err != nil {
		return nil, fmt.Errorf("scheduler config: %w", err)
	}
	if p.SchedulerConfig, err = schedulers.ParseConfigJSON(data); err != nil {
		return nil, fmt.Errorf("%s: %w", schedPath, err)
	}

	// The denoiser: UNet, or SD3's transformer.
	start := time.Now()
	var ures *unet.Resolved
	if p.SD3 {
		tb, err := os.ReadFile(filepath.Join(dir, "transformer", "config.json"))
		if err != nil {
			return nil, fmt.Errorf("transformer config: %w", err)
		}
		tcfg, err := mmdit.ParseConfig(tb)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", filepath.Join(dir, "transformer", "config.json"), err)
		}
		if err := withCheckpoint(dir, "transformer", opts, func(src blocks.Source) error {
			p.Transformer, err = mmdit.Load(src, tcfg, opts.Backend, layers)
			return err
		}); err != nil {
			return nil, err
		}
		report(opts, "transformer", p.Transformer.Weights, start)
	} else {
		ub, err := os.ReadFile(filepath.Join(dir, "unet", "config.json"))
		if err != nil {
			return nil, fmt.Errorf("unet config: %w", err)
		}
		ucfg, err := unet.ParseConfig(ub)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", filepath.Join(dir, "unet", "config.json"), err)
		}
		if ures, err = ucfg.Resolve(); err != nil {
			return nil, fmt.Errorf("%s: %w", filepath.Join(dir, "unet", "config.json"), err)
		}
		if err := withCheckpoint(dir, "unet", opts, func(src blocks.Source) error {
			p.UNet, err = unet.Load(src, ures, opts.Backend, layers)
			return err
		}); err != nil {
			return nil, err
		}
		report(opts, "unet", p.UNet.Weights, start)
	}

	// VAE (decoder; the encoder is checked but not loaded).
	start = time.Now()
	vb, err := os.ReadFile(filepath.Join(dir, "vae", "config.json"))
	if err != nil {
		return nil, fmt.Errorf("vae config: %w", err)
	}
	vcfg, err := vae.ParseConfig(vb)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, "vae", "config.json"), err)
	}
	if err := withCheckpoint(dir, "vae", opts, func(src blocks.Source) error {
		p.VAE, err = vae.Load(src, vcfg, opts.Backend, false, layers)
		return err
	}); err != nil {
		return nil, err
	}
	p.VAEScaleFactor = vcfg.ScaleFactor()
	if vcfg.LatentChannels != p.LatentChannels() {
		return nil, errs.Unsupportedf("%s: vae latent_channels %d but the denoiser takes %d channels", dir, vcfg.LatentChannels, p.LatentChannels())
	}
	report(opts, "vae", p.VAE.Weights, start)

	// Text encoders and tokenizers.
	names := [][2]string{{"text_encoder", "tokenizer"}}
	if p.XL || p.SD3 {
		names = append(names, [2]string{"text_encoder_2", "tokenizer_2"})
	}
	for _, n := range names {
		start = time.Now()
		te := &textEncoder{name: n[0]}
		cb, err := os.ReadFile(filepath.Join(dir, n[0], "config.json"))
		if err != nil {
			return nil, fmt.Errorf("%s config: %w", n[0], err)
		}
		ccfg, err := clip.ParseConfig(cb)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", filepath.Join(dir, n[0], "config.json"), err)
		}
		if err := withCheckpoint(dir, n[0], opts, func(src blocks.Source) error {
			te.model, err = clip.Load(src, ccfg, opts.Backend)
			return err
		}); err != nil {
			return nil, err
		}
		if te.tok, err = loadPromptTokenizer(filepath.Join(dir, n[1])); err != nil {
			return nil, err
		}
		if te.tok.tok.VocabSize() > ccfg.VocabSize {
			return nil, fmt.Errorf("%s: tokenizer has %d tokens but the text encoder's vocab_size is %d", dir, te.tok.tok.VocabSize(), ccfg.VocabSize)
		}
		p.texts = append(p.texts, te)
		report(opts, n[0], te.model.Weights, start)
	}

	// Conditioning widths must agree with the denoiser.
	ctxDim := 0
	for _, te := range p.texts {
		ctxDim += te.model.Cfg.HiddenSize
	}
	if p.SD3 {
		tc := p.Transformer.Cfg
		pooled := 0
		for _, te := range p.texts {
			if !te.model.Cfg.WithProjection {
				return nil, errs.Unsupportedf("%s: %s must be CLIPTextModelWithProjection", dir, te.name)
			}
			pooled += te.model.Cfg.ProjectionDim
		}
		if ctxDim > tc.JointAttentionDim {
			return nil, errs.Unsupportedf("%s: the CLIP encoders give %d features, more than joint_attention_dim %d", dir, ctxDim, tc.JointAttentionDim)
		}
		if pooled != tc.PooledProjectionDim {
			return nil, errs.Unsupportedf("%s: pooled text embeddings have %d features, transformer pooled_projection_dim is %d", dir, pooled, tc.PooledProjectionDim)
		}
		return p, nil
	}
	for i, d := range ures.CrossDim {
		if d != ctxDim {
			return nil, errs.Unsupportedf("%s: unet cross_attention_dim[%d]=%d but the text encoders give %d", dir, i, d, ctxDim)
		}
	}
	if p.XL {
		if !ures.AdditionTextTime {
			return nil, errs.Unsupportedf("%s: SDXL pipeline whose unet has no text_time conditioning", dir)
		}
		pooled := p.texts[1].model.Cfg.ProjectionDim
		if !p.texts[1].model.Cfg.WithProjection {
			return nil, errs.Unsupportedf("%s: text_encoder_2 must be CLIPTextModelWithProjection", dir)
		}
		if want := pooled + 6*ures.AdditionTimeEmbedDim; want != ures.ProjectionClassDim {
			return nil, errs.Unsupportedf("%s: unet projection_class_embeddings_input_dim %d, but pooled %d + 6 time ids x %d = %d",
				dir, ures.ProjectionClassDim, pooled, ures.AdditionTimeEmbedDim, want)
		}
	} else if ures.AdditionTextTime {
		return nil, errs.Unsupportedf("%s: StableDiffusionPipeline with a text_time unet", dir)
	}
	return p, nil
}

func report(opts Options, name string, w *blocks.Weights, start time.Time) {
	if opts.OnLoad != nil {
		opts.OnLoad(name, w.NumParameters(), time.Since(start))
	}
}

// withCheckpoint opens dir/component's weights (opts.Variant, or plain
// with an fp16 fallback) and calls fn with them, reporting NaN/Inf weights
// to opts.OnNonFinite as they are read.
func withCheckpoint(dir, component string, opts Options, fn func(blocks.Source) error) error {
	variant := opts.Variant
	cdir := filepath.Join(dir, component)
	ck, err := safetensors.OpenDir(cdir, variant)
	if err != nil && variant == "" && errors.Is(err, fs.ErrNotExist) {
		if ck2, err2 := safetensors.OpenDir(cdir, "fp16"); err2 == nil {
			ck, err = ck2, nil
		}
	}
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return errs.Unsupportedf("%s: %w", component, err)
		}
		return fmt.Errorf("%s: %w", component, err)
	}
	defer ck.Close()
	if opts.OnNonFinite == nil {
		return fn(blocks.FromCheckpoint(ck))
	}
	return fn(blocks.FromCheckpointChecked(ck, func(nf safetensors.NonFiniteTensor) {
		nf.Name = component + "/" + nf.Name
		opts.OnNonFinite(nf)
	}))
}

// Executor returns the executor the pipeline runs on.
func (p *Pipeline) Executor() blocks.Executor { return p.exec }

// NumParameters returns the parameter counts per component.
func (p *Pipeline) NumParameters() map[string]int64 {
	out := map[string]int64{"vae": p.VAE.Weights.NumParameters()}
	if p.SD3 {
		out["transformer"] = p.Transformer.Weights.NumParameters()
	} else {
		out["unet"] = p.UNet.Weights.NumParameters()
	}
	for _, te := range p.texts {
		out[te.name] = te.model.Weights.NumParameters()
	}
	return out
}

// DefaultSize is the pipeline's default image size: the denoiser's
// sample_size times the VAE scale factor (512 for SD 1.5, 1024 for SDXL and
// SD3).
func (p *Pipeline) DefaultSize() (width, height int) {
	s := 64
	if p.SD3 {
		s = p.Transformer.Cfg.SampleSize
	} else if v := p.UNet.Cfg.SampleSize; v > 0 {
		s = v
	}
	return s * p.VAEScaleFactor, s * p.VAEScaleFactor
}

// DefaultGuidance is the pipeline class's default guidance_scale.
func (p *Pipeline) DefaultGuidance() float64 {
	switch {
	case p.SD3:
		return 7.0
	case p.XL:
		return 5.0
	}
	return 7.5
}

// LatentChannels is the denoiser's input channel count.
func (p *Pipeline) LatentChannels() int {
	if p.SD3 {
		return p.Transformer.Cfg.InChannels
	}
	return p.UNet.Cfg.InChannels
}

// SizeMultiple is what image sides must be multiples of: the VAE scale
// factor times 2^(number of UNet downsamplers), or times the transformer's
// patch size.
func (p *Pipeline) SizeMultiple() int {
	if p.SD3 {
		return p.VAEScaleFactor * p.Transformer.Cfg.PatchSize
	}
	return p.VAEScaleFactor << p.UNet.Cfg.NumUpsamplers
}

// Close frees the weights; the executor is the caller's.
func (p *Pipeline) Close() {
	if p == nil {
		return
	}
	if p.UNet != nil {
		p.UNet.Weights.Finalize()
	}
	if p.Transformer != nil {
		p.Transformer.Weights.Finalize()
	}
	if p.VAE != nil {
		p.VAE.Weights.Finalize()
	}
	for _, te := range p.texts {
		if te.model != nil {
			te.model.Weights.Finalize()
		}
	}
}
