package cmd

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/tputool/tputool/compile"
	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/internal/ui"
	"github.com/tputool/tputool/loader"
	"github.com/tputool/tputool/loader/hub"
	"github.com/tputool/tputool/pipeline/diffusion/pngmeta"
	"github.com/tputool/tputool/pipeline/diffusion/sd"
	"github.com/tputool/tputool/pipeline/schedulers"
	"github.com/tputool/tputool/tpu"
)

// DiffuseOptions holds `tputool diffuse`'s inputs.
type DiffuseOptions struct {
	IO       *ui.IOStreams
	Reporter *ui.Reporter
	// HubClient builds the Hub client (lazily: only Hub ids need it).
	HubClient func() *hub.Client
	// Resolve resolves --model; loader.ResolveRef by default.
	Resolve resolveFunc
	// Device opens the --device backend.
	Device func() (*tpu.Device, error)
	// Version is tputool's version, written into the PNG metadata.
	Version string
	// RandomSeed picks a seed when --seed is not given.
	RandomSeed func() uint64

	Model          string
	Revision       string
	Variant        string
	Prompt         string
	NegativePrompt string
	HasNegative    bool
	Steps          int
	Guidance       float64
	HasGuidance    bool
	Size           string
	Width, Height  int // parsed from Size (0: the model's default)
	Batch          int
	Seed           uint64
	HasSeed        bool
	Scheduler      string
	Mode           compile.Mode // --mode (or --compile)
	Output         string
	Retries        int
	JSON           bool
	// HostMemory is the host's memory in bytes (nil or 0: unknown).
	HostMemory func() int64
}

// DiffuseResult is the --json result.
type DiffuseResult struct {
	Model          string         `json:"model"`
	Pipeline       string         `json:"pipeline"`
	Prompt         string         `json:"prompt"`
	NegativePrompt *string        `json:"negative_prompt"`
	Seed           uint64         `json:"seed"`
	Steps          int            `json:"steps"`
	Guidance       float64        `json:"guidance"`
	Scheduler      string         `json:"scheduler"`
	Width          int            `json:"width"`
	Height         int            `json:"height"`
	Batch          int            `json:"batch"`
	Mode           string         `json:"mode"`
	Device         string         `json:"device"`
	Files          []string       `json:"files"`
	Timings        DiffuseTimings `json:"timings"`
	// Compiles counts the executables built; NewSize is true when this
	// size compiled (always true for the first call of a process).
	Compiles int  `json:"compiles"`
	NewSize  bool `json:"new_size"`
}

// DiffuseTimings are wall times in seconds.
type DiffuseTimings struct {
	Load       float64 `json:"load_s"`
	TextEncode float64 `json:"text_encode_s"`
	Denoise    float64 `json:"denoise_s"`
	// Step is the mean denoising step (one UNet call), compilation
	// excluded; Steps lists every step's wall time.
	Step  float64   `json:"step_s"`
	Steps []float64 `json:"steps_s"`
	// Decode is the VAE decode.
	Decode float64 `json:"decode_s"`
	// Compile is the compile time, included in the phases above.
	Compile         float64 `json:"compile_s"`
	CompileText     float64 `json:"compile_text_encoders_s"`
	CompileDenoiser float64 `json:"compile_denoiser_s"`
	CompileDecode   float64 `json:"compile_vae_s"`
	Total           float64 `json:"total_s"`
}

var sizeRE = regexp.MustCompile(`^([0-9]+)(?:[xX]([0-9]+))?$`)

// parseSize reads one image size of --size (flag is the whole value):
// WIDTHxHEIGHT, or one number for a square, with sides of 8 to 8192.
func parseSize(flag, s string) ([2]int, error) {
	m := sizeRE.FindStringSubmatch(s)
	if m == nil {
		return [2]int{}, errs.Usagef("--size %s: %q is not WIDTHxHEIGHT (e.g. 512x512) or one number for a square", flag, s)
	}
	w, _ := strconv.Atoi(m[1])
	h := w
	if m[2] != "" {
		h, _ = strconv.Atoi(m[2])
	}
	if w < 8 || h < 8 || w > 8192 || h > 8192 {
		return [2]int{}, errs.Usagef("--size %s: sides must be between 8 and 8192 pixels", s)
	}
	return [2]int{w, h}, nil
}

// NewCmdDiffuse builds `tputool diffuse`.
func NewCmdDiffuse(f *Factory, runF func(context.Context, *DiffuseOptions) error) *cobra.Command {
	opts := &DiffuseOptions{IO: f.IOStreams, Resolve: loader.ResolveRef, Device: f.Device,
		RandomSeed: func() uint64 { return uint64(rand.Uint32()) }}
	var (
		compileFlag bool
		mode        string
	)
	c := &cobra.Command{
		Use:   "diffuse --model MODEL --prompt TEXT [-o out.png]",
		Short: "Generate images with a diffusion pipeline",
		Long: `Generate images from a text prompt with a diffusers pipeline: Stable Diffusion
1.x/2.x (StableDiffusionPipeline), SDXL (StableDiffusionXLPipeline) and
Stable Diffusion 3 (StableDiffusion3Pipeline, without its T5 text encoder),
read from a Hub id or a local folder with model_index.json.

The initial noise comes from a reimplementation of torch's CPU generator, so a
seed gives the same starting latents as a float32 diffusers pipeline with
torch.Generator().manual_seed(seed) (one loaded with torch_dtype=float16 or
bfloat16 draws its noise in that dtype and starts elsewhere); with --batch N
the N images are drawn from that one generator, as diffusers does.
Classifier-free guidance runs the unconditional and conditional inputs as one
batch. The SD 1.x safety checker is not run (a warning says so) and SDXL
images are not watermarked.

--mode compiled (the default, also --compile) builds each model (UNet or
transformer, VAE decoder, text encoders) into one executable; --mode eager
builds one executable per block (ResNet block, transformer block, ...),
shared by blocks of the same shapes, and runs them one by one. The first call
at a size compiles; the time is reported apart from the denoising steps.

Images are written as PNG with the prompt, negative prompt, seed, steps,
guidance, scheduler, model, size and tputool version in tEXt chunks; the same
command writes the same bytes. With --batch > 1 the files are OUT-0.png,
OUT-1.png, ... or, when -o holds a %d verb (img-%02d.png), that pattern.
The paths are printed on stdout (or a JSON document with timings under --json).`,
		Example: `  tputool diffuse --model stabilityai/sd-turbo --prompt "a red fox" --steps 1 --guidance 0 -o fox.png
  tputool diffuse -m runwayml/stable-diffusion-v1-5 -p "a lighthouse at dusk" --seed 42 --size 512x512
  tputool diffuse -m ./tiny-sdxl -p "a cat" --batch 4 -o "cat-%02d.png" --scheduler dpmpp_2m_karras
  tputool diffuse -m ./tiny-sd -p "a dog" --mode eager --json`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, args []string) error {
			fl := c.Flags()
			if opts.Model == "" {
				return errs.Usagef("--model is required (a Hub id ORG/NAME[@revision] or a local directory)")
			}
			if !fl.Changed("prompt") {
				return errs.Usagef("--prompt is required")
			}
			opts.HasNegative = fl.Changed("negative-prompt")
			opts.HasGuidance = fl.Changed("guidance")
			opts.HasSeed = fl.Changed("seed")
			if opts.Steps < 1 || opts.Steps > 1000 {
				return errs.Usagef("--steps %d: want 1 to 1000", opts.Steps)
			}
			if opts.Batch < 1 || opts.Batch > 64 {
				return errs.Usagef("--batch %d: want 1 to 64", opts.Batch)
			}
			if opts.HasGuidance && (opts.Guidance < 0 || opts.Guidance > 100 || opts.Guidance != opts.Guidance) {
				return errs.Usagef("--guidance %v: want 0 to 100 (<= 1 turns classifier-free guidance off)", opts.Guidance)
			}
			if err := checkRetries(opts.Retries); err != nil {
				return err
			}
			if opts.Size != "" {
				wh, err := parseSize(opts.Size, opts.Size)
				if err != nil {
					return err
				}
				opts.Width, opts.Height = wh[0], wh[1]
			}
			var err error
			if opts.Mode, err = compile.ParseMode(mode); err != nil {
				return err
			}
			if compileFlag && fl.Changed("mode") && opts.Mode != compile.Compiled {
				return errs.Usagef("--compile and --mode %s contradict each other", opts.Mode)
			}
			if opts.Scheduler != "" && !schedulers.Known(opts.Scheduler) {
				return errs.Usagef("--scheduler %q: want one of %s, or a diffusers class name (%s)", opts.Scheduler, strings.Join(schedulers.Names(), ", "), strings.Join(schedulers.Classes(), ", "))
			}
			if err := checkOutput(opts.Output); err != nil {
				return err
			}
			opts.JSON = f.Global.JSON
			opts.Reporter = f.Reporter()
			opts.Version = f.Build.Version
			opts.HubClient = f.retryingHubClient(opts.Retries)
			opts.HostMemory = f.HostMemory
			if runF != nil {
				return runF(c.Context(), opts)
			}
			return diffuseRun(c.Context(), opts)
		},
	}
	fl := c.Flags()
	fl.StringVarP(&opts.Model, "model", "m", "", "Hub id (ORG/NAME[@revision]) or local diffusers pipeline directory")
	fl.StringVar(&opts.Revision, "revision", "", "branch, tag or commit of a Hub model (default main)")
	fl.StringVar(&opts.Variant, "variant", "", `weight variant, e.g. "fp16" for *.fp16.safetensors (default: plain files, else fp16)`)
	fl.StringVarP(&opts.Prompt, "prompt", "p", "", "text prompt (required)")
	fl.StringVarP(&opts.NegativePrompt, "negative-prompt", "n", "", "negative prompt (SDXL: without it the unconditional input is zeros)")
	fl.IntVar(&opts.Steps, "steps", 25, "denoising steps")
	fl.Float64VarP(&opts.Guidance, "guidance", "g", 0, "classifier-free guidance scale; <= 1 turns it off (default 7.5, SDXL 5.0, SD3 7.0)")
	fl.StringVar(&opts.Size, "size", "", "image size WIDTHxHEIGHT (default: the model's, e.g. 512x512 for SD 1.5)")
	fl.IntVarP(&opts.Batch, "batch", "b", 1, "images to generate from the prompt")
	fl.Uint64Var(&opts.Seed, "seed", 0, "random seed (default: a random one, reported); torch uses its low 32 bits")
	fl.StringVar(&opts.Scheduler, "scheduler", "", "scheduler: "+strings.Join(schedulers.Names(), ", ")+", or a diffusers class name such as EulerDiscreteScheduler (default: the model's)")
	fl.StringVar(&mode, "mode", compile.Compiled.String(), "execution: compiled (one executable per model) or eager (one per block)")
	fl.BoolVar(&compileFlag, "compile", false, "same as --mode compiled")
	fl.StringVarP(&opts.Output, "output", "o", "out.png", "output PNG; with --batch > 1: OUT-0.png, ... or a %d pattern")
	addRetriesFlag(c, &opts.Retries)
	_ = c.RegisterFlagCompletionFunc("scheduler", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return append(schedulers.Names(), schedulers.Classes()...), cobra.ShellCompDirectiveNoFileComp
	})
	_ = c.RegisterFlagCompletionFunc("mode", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return []string{compile.Compiled.String(), compile.Eager.String()}, cobra.ShellCompDirectiveNoFileComp
	})
	return c
}

// checkOutput validates -o: a .png file name, and a pattern with exactly
// one integer verb when it holds a '%'.
func checkOutput(out string) error {
	if out == "" {
		return errs.Usagef("-o is empty")
	}
	if !strings.EqualFold(filepath.Ext(out), ".png") {
		return errs.Usagef("-o %s: the output is a PNG file; use a .png name", out)
	}
	if strings.Contains(out, "%") {
		a, b := fmt.Sprintf(out, 0), fmt.Sprintf(out, 1)
		if strings.Contains(a, "%!") || a == b {
			return errs.Usagef("-o %s: a pattern needs exactly one integer verb such as %%d or %%03d", out)
		}
	}
	return nil
}

// outputPaths returns the file names for a batch.
func outputPaths(out string, batch int) []string {
	if strings.Contains(out, "%") {
		paths := make([]string, batch)
		for i := range paths {
			paths[i] = fmt.Sprintf(out, i)
		}
		return paths
	}
	if batch == 1 {
		return []string{out}
	}
	ext := filepath.Ext(out)
	stem := strings.TrimSuffix(out, ext)
	paths := make([]string, batch)
	for i := range paths {
		paths[i] = fmt.Sprintf("%s-%d%s", stem, i, ext)
	}
	return paths
}

// checkOutputPaths fails before any work when an output file cannot be
// written: its directory is missing, not a directory, or not writable.
func checkOutputPaths(paths []string) error {
	seen := map[string]bool{}
	for _, path := range paths {
		dir := filepath.Dir(path)
		if seen[dir] {
			continue
		}
		seen[dir] = true
		st, err := os.Stat(dir)
		if err != nil {
			return errs.Usagef("-o %s: directory %s does not exist", path, dir)
		}
		if !st.IsDir() {
			return errs.Usagef("-o %s: %s is not a directory", path, dir)
		}
		f, err := os.CreateTemp(dir, ".tputool-write-check-*")
		if err != nil {
			return errs.Usagef("-o %s: cannot write in %s: %v", path, dir, err)
		}
		f.Close()
		os.Remove(f.Name())
	}
	return nil
}

func diffuseRun(ctx context.Context, opts *DiffuseOptions) (err error) {
	r := opts.Reporter
	start := time.Now()
	if err := checkOutputPaths(outputPaths(opts.Output, opts.Batch)); err != nil {
		return err
	}
	m, err := resolveCheckpoint(ctx, opts.Resolve, opts.HubClient, opts.Model, loader.Options{Revision: opts.Revision, Variant: opts.Variant})
	if err != nil {
		return err
	}
	if m.Kind != loader.Diffusers {
		return errs.Unsupportedf("--model %s is a %s checkpoint, not a diffusers pipeline (model_index.json); tputool diffuse runs StableDiffusionPipeline, StableDiffusionXLPipeline and StableDiffusion3Pipeline", m.Name(), m.Kind)
	}
	dev, err := opts.Device()
	if err != nil {
		return err
	}
	r.Debugf("device: %s", dev)

	x := compile.NewGraphExecutor(dev.Backend, compile.ExecutorOptions{})
	defer x.Finalize()
	components := int64(3)
	if _, ok := m.Index.Component("text_encoder_2"); ok {
		components++
	}
	loadTask := r.Start("loading "+m.Name(), components, ui.UnitItems)
	nonFinite := newNonFiniteWarnings(r)
	p, err := sd.Load(m.Dir, sd.Options{Backend: dev.Backend, Variant: opts.Variant, Executor: x, Warn: r.Warnf,
		OnNonFinite: nonFinite.note, // weights are checked as they are converted
		OnLoad: func(component string, params int64, took time.Duration) {
			loadTask.Add(1)
			r.Debugf("loaded %s: %.1fM parameters in %s", component, float64(params)/1e6, took.Round(time.Millisecond))
		}})
	loadTask.Done()
	nonFinite.done()
	if err != nil {
		return err
	}
	defer p.Close()
	loadTime := time.Since(start)

	req := sd.Request{Prompt: opts.Prompt, NegativePrompt: opts.NegativePrompt, HasNegative: opts.HasNegative,
		Steps: opts.Steps, Guidance: opts.Guidance, Width: opts.Width, Height: opts.Height, Batch: opts.Batch,
		Seed: opts.Seed, Scheduler: opts.Scheduler, Eager: opts.Mode == compile.Eager}
	if !opts.HasGuidance {
		req.Guidance = p.DefaultGuidance()
	}
	if !opts.HasSeed {
		req.Seed = opts.RandomSeed()
	}
	if err := p.Validate(&req); err != nil {
		return err
	}
	truncated, err := p.TruncatedBy(opts.Prompt)
	if err != nil {
		return err
	}
	for _, name := range truncated {
		r.Warnf("the prompt will be truncated to the %s tokenizer's length", name)
	}
	if opts.HasSeed {
		r.Debugf("seed %d (--seed)", req.Seed)
	} else {
		r.Debugf("seed %d (drawn; --seed %d repeats this image)", req.Seed, req.Seed)
	}
	if dev.Capabilities.HostMemory {
		if err := checkDiffusionFits(p.LargestBuffer(req), req, opts.HostMemory); err != nil {
			return err
		}
	}
	denoiserName := "unet"
	if p.SD3 {
		denoiserName = "transformer"
	}
	var task *ui.Task
	req.OnPhase = func(phase string, total int) {
		if task != nil {
			task.Done()
			task = nil
		}
		switch phase {
		case sd.PhaseCompile:
			task = r.Start(fmt.Sprintf("compiling the %s for %dx%d", denoiserName, req.Width, req.Height), 0, ui.UnitItems)
		case sd.PhaseDenoise:
			if total == req.Steps {
				task = r.Start("denoising", int64(total), ui.UnitSteps)
			} else {
				// PNDM, Heun, KDPM2: more denoiser calls than steps; the
				// bar counts calls and says so.
				task = r.Start(fmt.Sprintf("denoising, %d steps as", req.Steps), int64(total), ui.Unit(denoiserName+" calls"))
			}
		case sd.PhaseEncode:
			r.Debugf("encoding the prompt")
		case sd.PhaseDecode:
			r.Debugf("decoding the latents")
		}
	}
	req.OnStep = func(step, total int) {
		if task != nil {
			task.Set(int64(step))
		}
	}
	res, err := p.Generate(ctx, req)
	if task != nil {
		task.Done()
	}
	if err != nil {
		return err
	}

	// Write the images.
	paths := outputPaths(opts.Output, len(res.Images))
	model := modelLabel(m)
	for i, img := range res.Images {
		meta := []pngmeta.Text{
			{Key: "prompt", Value: opts.Prompt},
			{Key: "negative_prompt", Value: opts.NegativePrompt},
			{Key: "seed", Value: strconv.FormatUint(req.Seed, 10)},
			{Key: "steps", Value: strconv.Itoa(req.Steps)},
			{Key: "guidance", Value: strconv.FormatFloat(req.Guidance, 'g', -1, 64)},
			{Key: "scheduler", Value: schedulerLabel(opts.Scheduler, res.Scheduler)},
			{Key: "model", Value: model},
			{Key: "size", Value: fmt.Sprintf("%dx%d", res.Width, res.Height)},
			{Key: "batch_index", Value: fmt.Sprintf("%d/%d", i, len(res.Images))},
			{Key: "tputool_version", Value: opts.Version},
			{Key: "Software", Value: "tputool " + opts.Version},
		}
		var buf bytes.Buffer
		if err := pngmeta.Encode(&buf, img, meta); err != nil {
			return err
		}
		if err := os.WriteFile(paths[i], buf.Bytes(), 0o644); err != nil {
			return fmt.Errorf("writing %s: %w", paths[i], err)
		}
	}

	t := res.Timings
	out := DiffuseResult{Model: model, Pipeline: p.Class, Prompt: opts.Prompt, Seed: req.Seed, Steps: req.Steps,
		Guidance: req.Guidance, Scheduler: schedulerLabel(opts.Scheduler, res.Scheduler), Width: res.Width, Height: res.Height,
		Batch: req.Batch, Mode: opts.Mode.String(), Device: dev.String(), Files: paths, Compiles: t.Compiles, NewSize: res.NewSize,
		Timings: DiffuseTimings{Load: loadTime.Seconds(), TextEncode: t.TextEncode.Seconds(), Denoise: t.Denoise.Seconds(),
			Step: t.StepSeconds(), Decode: t.Decode.Seconds(), Compile: t.Compile().Seconds(),
			CompileText: t.CompileText.Seconds(), CompileDenoiser: t.CompileDenoiser.Seconds(), CompileDecode: t.CompileDecode.Seconds(),
			Total: time.Since(start).Seconds()}}
	if opts.HasNegative {
		out.NegativePrompt = &opts.NegativePrompt
	}
	for _, s := range t.Steps {
		out.Timings.Steps = append(out.Timings.Steps, s.Seconds())
	}
	calls, per := "", "step"
	if len(t.Steps) != req.Steps {
		calls, per = fmt.Sprintf(" (%d %s calls)", len(t.Steps), denoiserName), denoiserName+" call"
	}
	r.Infof("%d image(s) %dx%d, %d steps%s of %s, %.3f s/%s, compile %.2f s, total %.1f s",
		len(paths), res.Width, res.Height, req.Steps, calls, out.Scheduler, out.Timings.Step, per, out.Timings.Compile, out.Timings.Total)
	if r.Verbose() {
		r.Debugf("load %.2f s, text encoders %.2f s (compile %.2f s), denoise %.2f s (compile %.2f s), vae %.2f s (compile %.2f s), %d executables compiled",
			out.Timings.Load, out.Timings.TextEncode, out.Timings.CompileText, out.Timings.Denoise, out.Timings.CompileDenoiser,
			out.Timings.Decode, out.Timings.CompileDecode, out.Compiles)
	}
	if opts.JSON {
		return opts.IO.WriteJSON(out)
	}
	for _, path := range paths {
		if _, err := fmt.Fprintln(opts.IO.Out, path); err != nil {
			return err
		}
	}
	return nil
}

// schedulerLabel names the scheduler: the short name given, or the class.
func schedulerLabel(short, class string) string {
	if short != "" {
		return short + " (" + class + ")"
	}
	return class
}
