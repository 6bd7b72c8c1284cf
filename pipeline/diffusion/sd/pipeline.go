// Package sd runs diffusers' StableDiffusionPipeline and
// StableDiffusionXLPipeline: it reads a pipeline folder (model_index.json
// and the unet/, vae/, text_encoder[_2]/, tokenizer[_2]/, scheduler/
// subfolders), encodes prompts with the CLIP text encoders, runs the
// denoising loop with classifier-free guidance and a diffusers scheduler,
// and decodes the latents with the VAE.
//
// It follows diffusers' pipelines/stable_diffusion/pipeline_stable_diffusion.py
// and pipelines/stable_diffusion_xl/pipeline_stable_diffusion_xl.py. The
// initial latents come from pipeline/torchrand, so a seed gives the same
// starting noise as diffusers with a CPU torch.Generator.
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
	"github.com/tputool/tputool/pipeline/diffusion/unet"
	"github.com/tputool/tputool/pipeline/diffusion/vae"
	"github.com/tputool/tputool/pipeline/schedulers"
)

// Pipeline classes this package runs.
const (
	ClassSD   = "StableDiffusionPipeline"
	ClassSDXL = "StableDiffusionXLPipeline"
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
	// Executor compiles and runs the graphs; nil uses a
	// blocks.GraphExecutor on Backend.
	Executor blocks.Executor
	// OnCompile is called after each compilation by the default executor.
	OnCompile func(blocks.CompileEvent)
	// OnLoad, when set, is called as each component finishes loading.
	OnLoad func(component string, params int64, took time.Duration)
	// Warn, when set, receives warnings (a new image size that makes the
	// models compile again).
	Warn func(format string, args ...any)
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
	XL    bool
	UNet  *unet.Model
	VAE   *vae.Model
	texts []*textEncoder
	// SchedulerConfig is scheduler/scheduler_config.json.
	SchedulerConfig schedulers.Config
	// ForceZerosForEmptyPrompt is SDXL's force_zeros_for_empty_prompt.
	ForceZerosForEmptyPrompt bool
	// VAEScaleFactor is 2^(len(vae block_out_channels)-1).
	VAEScaleFactor int

	exec    blocks.Executor
	ownExec *blocks.GraphExecutor
	warn    func(format string, args ...any)
	sizes   map[[3]int]bool // (height, width, unet batch) run so far
}

// Load reads the pipeline in dir.
func Load(dir string, opts Options) (p *Pipeline, err error) {
	if opts.Backend == nil {
		return nil, errors.New("sd.Load: no backend")
	}
	mi, err := config.ReadModelIndex(filepath.Join(dir, "model_index.json"))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, errs.Unsupportedf("%s: no model_index.json (not a diffusers pipeline folder)", dir)
		}
		return nil, err
	}
	p = &Pipeline{Dir: dir, Class: mi.ClassName, sizes: map[[3]int]bool{}, warn: opts.Warn}
	switch mi.ClassName {
	case ClassSD:
	case ClassSDXL:
		p.XL = true
		p.ForceZerosForEmptyPrompt = true
		if raw, ok := mi.Raw["force_zeros_for_empty_prompt"]; ok {
			p.ForceZerosForEmptyPrompt = string(raw) != "false"
		}
	default:
		return nil, errs.Unsupportedf("%s: pipeline class %q (supported: %s, %s)", dir, mi.ClassName, ClassSD, ClassSDXL)
	}
	layers := blocks.OptionsFor(opts.Backend)
	if opts.Layers != nil {
		layers = *opts.Layers
	}
	p.exec = opts.Executor
	if p.exec == nil {
		p.ownExec = blocks.NewGraphExecutor(opts.Backend, opts.OnCompile)
		p.exec = p.ownExec
	}
	defer func() {
		if err != nil {
			p.Close()
		}
	}()
	want := map[string]string{"unet": "UNet2DConditionModel", "vae": "AutoencoderKL", "text_encoder": "",
		"tokenizer": "", "scheduler": ""}
	if p.XL {
		want["text_encoder_2"] = ""
		want["tokenizer_2"] = ""
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

	// UNet.
	start := time.Now()
	ub, err := os.ReadFile(filepath.Join(dir, "unet", "config.json"))
	if err != nil {
		return nil, fmt.Errorf("unet config: %w", err)
	}
	ucfg, err := unet.ParseConfig(ub)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, "unet", "config.json"), err)
	}
	ures, err := ucfg.Resolve()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, "unet", "config.json"), err)
	}
	if err := withCheckpoint(dir, "unet", opts.Variant, func(src blocks.Source) error {
		p.UNet, err = unet.Load(src, ures, opts.Backend, layers)
		return err
	}); err != nil {
		return nil, err
	}
	report(opts, "unet", p.UNet.Weights, start)

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
	if err := withCheckpoint(dir, "vae", opts.Variant, func(src blocks.Source) error {
		p.VAE, err = vae.Load(src, vcfg, opts.Backend, false, layers)
		return err
	}); err != nil {
		return nil, err
	}
	p.VAEScaleFactor = vcfg.ScaleFactor()
	if vcfg.LatentChannels != ures.InChannels {
		return nil, errs.Unsupportedf("%s: vae latent_channels %d but unet in_channels %d", dir, vcfg.LatentChannels, ures.InChannels)
	}
	report(opts, "vae", p.VAE.Weights, start)

	// Text encoders and tokenizers.
	names := [][2]string{{"text_encoder", "tokenizer"}}
	if p.XL {
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
		if err := withCheckpoint(dir, n[0], opts.Variant, func(src blocks.Source) error {
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

	// Conditioning widths must agree with the UNet.
	ctxDim := 0
	for _, te := range p.texts {
		ctxDim += te.model.Cfg.HiddenSize
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

// withCheckpoint opens dir/component's weights (variant, or plain with an
// fp16 fallback) and calls fn with them.
func withCheckpoint(dir, component, variant string, fn func(blocks.Source) error) error {
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
	return fn(blocks.FromCheckpoint(ck))
}

// Executor returns the executor the pipeline runs on.
func (p *Pipeline) Executor() blocks.Executor { return p.exec }

// NumParameters returns the parameter counts per component.
func (p *Pipeline) NumParameters() map[string]int64 {
	out := map[string]int64{"unet": p.UNet.Weights.NumParameters(), "vae": p.VAE.Weights.NumParameters()}
	for _, te := range p.texts {
		out[te.name] = te.model.Weights.NumParameters()
	}
	return out
}

// DefaultSize is the pipeline's default image size: unet sample_size times
// the VAE scale factor (512 for SD 1.5, 1024 for SDXL).
func (p *Pipeline) DefaultSize() (width, height int) {
	s := 64
	if v := p.unetSampleSize(); v > 0 {
		s = v
	}
	return s * p.VAEScaleFactor, s * p.VAEScaleFactor
}

func (p *Pipeline) unetSampleSize() int { return p.UNet.Cfg.SampleSize }

// SizeMultiple is what image sides must be multiples of: the VAE scale
// factor times 2^(number of UNet downsamplers).
func (p *Pipeline) SizeMultiple() int { return p.VAEScaleFactor << p.UNet.Cfg.NumUpsamplers }

// Close frees the weights and executables.
func (p *Pipeline) Close() {
	if p == nil {
		return
	}
	if p.UNet != nil {
		p.UNet.Weights.Finalize()
	}
	if p.VAE != nil {
		p.VAE.Weights.Finalize()
	}
	for _, te := range p.texts {
		if te.model != nil {
			te.model.Weights.Finalize()
		}
	}
	if p.ownExec != nil {
		p.ownExec.Finalize()
	}
}
