package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/pipeline/diffusion/sd"
)

// Diffuser is a loaded text-to-image pipeline (*sd.Pipeline).
type Diffuser interface {
	// Validate fills the request's defaults (the model's size) and checks it.
	Validate(req *sd.Request) error
	// Generate runs the request, calling req.OnPhase and req.OnStep.
	Generate(ctx context.Context, req sd.Request) (*sd.Result, error)
}

// Diffusion is a loaded pipeline and how it runs.
type Diffusion struct {
	Pipeline Diffuser
	// Counters reads the executor's cumulative statistics; nil reports zeros.
	Counters func() Counters
	// Guidance is the classifier-free guidance scale of every request.
	Guidance float64
	// Close releases the pipeline; may be nil.
	Close func()
}

// DiffuseCase is one batch and shape; a zero Width or Height is the
// model's default.
type DiffuseCase struct {
	Batch, Steps, Width, Height int
}

// Shape is the case's shape label, "512x512/25".
func (c DiffuseCase) Shape() string { return fmt.Sprintf("%dx%d/%d", c.Width, c.Height, c.Steps) }

// DiffuseCases is the product batches × sizes × steps, in that nesting
// order; a size is {width, height}, {0, 0} for the model's default.
func DiffuseCases(batches []int, sizes [][2]int, steps []int) []DiffuseCase {
	var cs []DiffuseCase
	for _, b := range batches {
		for _, sz := range sizes {
			for _, s := range steps {
				cs = append(cs, DiffuseCase{Batch: b, Steps: s, Width: sz[0], Height: sz[1]})
			}
		}
	}
	return cs
}

// DiffuseSpec is a diffusion benchmark.
type DiffuseSpec struct {
	Modes []string
	Cases []DiffuseCase
	// Prompt and Seed of every request.
	Prompt string
	Seed   uint64
	// Load loads the pipeline once; its time is every row's load time.
	Load func() (*Diffusion, error)
}

func (s DiffuseSpec) validate() error {
	if err := validateModes("DiffuseSpec", s.Modes); err != nil {
		return err
	}
	if len(s.Cases) == 0 {
		return errs.Usagef("no batch and shape to measure")
	}
	for _, c := range s.Cases {
		switch {
		case c.Batch < 1:
			return &errs.OptionError{Owner: "DiffuseCase", Option: "Batch", Value: c.Batch, Want: "a positive batch size"}
		case c.Steps < 1:
			return &errs.OptionError{Owner: "DiffuseCase", Option: "Steps", Value: c.Steps, Want: "at least 1"}
		case c.Width < 0 || c.Height < 0:
			return &errs.OptionError{Owner: "DiffuseCase", Option: "Size", Value: fmt.Sprintf("%dx%d", c.Width, c.Height), Reason: "sides must be positive"}
		}
	}
	if s.Load == nil {
		return fmt.Errorf("bench: DiffuseSpec.Load is nil")
	}
	return nil
}

// Diffuse measures text-to-image generation: the pipeline is loaded once,
// then for each mode and case it runs a first (compiling) run, cfg.Warmup
// unmeasured runs and cfg.Repeat measured runs of one request each.
//
// Measured per run: each denoising step (from the start of the denoising
// loop, or the end of the previous step, to the end of the step; the
// UNet's ahead-of-loop compilation is outside the loop) and the whole
// request (text encoding, denoising and VAE decoding). A step is one
// iteration of the pipeline's loop, one UNet call, as diffusers' progress
// bar counts them: schedulers such as PNDM make more calls than Steps.
// s/step is pooled over every step of every measured run; s/image is the
// request time over the batch, summarised over runs.
func Diffuse(ctx context.Context, cfg Config, spec DiffuseSpec) (rows []Row, err error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if err := spec.validate(); err != nil {
		return nil, err
	}
	defer func() { setSpeedups(rows) }()
	cfg.progress(Progress{Phase: PhaseLoad})
	start := cfg.now()
	d, err := spec.Load()
	if err != nil {
		return nil, err
	}
	if d.Close != nil {
		defer d.Close()
	}
	load := cfg.now().Sub(start)
	// Resolve default sizes and check every case before running any.
	cases := make([]DiffuseCase, len(spec.Cases))
	for i, c := range spec.Cases {
		req := sd.Request{Steps: c.Steps, Width: c.Width, Height: c.Height, Batch: c.Batch, Guidance: d.Guidance}
		if err := d.Pipeline.Validate(&req); err != nil {
			return nil, err
		}
		c.Width, c.Height = req.Width, req.Height
		cases[i] = c
	}
	for _, mode := range spec.Modes {
		for _, c := range cases {
			row, err := measureDiffuse(ctx, cfg, d, spec, mode, c)
			if err != nil {
				return rows, err
			}
			row.LoadS = load.Seconds()
			rows = append(rows, row)
			cfg.progress(Progress{Phase: PhaseDone, Label: row.Label(), Row: &rows[len(rows)-1]})
		}
	}
	return rows, nil
}

type diffuseRun struct {
	steps []time.Duration
	total time.Duration
}

func diffuseOnce(ctx context.Context, cfg Config, p Diffuser, req sd.Request, step func(done, total int)) (diffuseRun, error) {
	var out diffuseRun
	start := cfg.now()
	last := start
	req.OnPhase = func(phase string, total int) {
		if phase == sd.PhaseDenoise {
			last = cfg.now()
		}
	}
	req.OnStep = func(done, total int) {
		t := cfg.now()
		out.steps = append(out.steps, t.Sub(last))
		last = t
		step(done, total)
	}
	if _, err := p.Generate(ctx, req); err != nil {
		return out, err
	}
	out.total = cfg.now().Sub(start)
	if len(out.steps) == 0 {
		return out, fmt.Errorf("the pipeline reported no denoising step")
	}
	return out, nil
}

func measureDiffuse(ctx context.Context, cfg Config, d *Diffusion, spec DiffuseSpec, mode string, c DiffuseCase) (Row, error) {
	row := Row{Task: TaskDiffuse, Mode: mode, Batch: c.Batch, Shape: c.Shape(), Steps: c.Steps, Width: c.Width, Height: c.Height,
		Repeat: cfg.Repeat, Warmup: cfg.Warmup}
	req := sd.Request{Prompt: spec.Prompt, Steps: c.Steps, Guidance: d.Guidance, Width: c.Width, Height: c.Height,
		Batch: c.Batch, Seed: spec.Seed, Eager: mode == ModeEager}
	var measured []diffuseRun
	err := measureRuns(ctx, cfg, &row, c.Steps, d.Counters, func(keep bool, step func(done, total int)) (time.Duration, error) {
		res, err := diffuseOnce(ctx, cfg, d.Pipeline, req, step)
		if err != nil {
			return 0, err
		}
		if keep {
			measured = append(measured, res)
		}
		return res.total, nil
	})
	if err != nil {
		return row, err
	}

	var steps, images []float64
	for _, r := range measured {
		for _, s := range r.steps {
			steps = append(steps, s.Seconds())
		}
		images = append(images, r.total.Seconds()/float64(c.Batch))
	}
	row.StepS = Summarize(steps)
	row.ImageS = Summarize(images)
	return row, nil
}
