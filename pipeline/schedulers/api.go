// Package schedulers implements diffusers' noise schedulers in Go for the
// diffusion pipelines: DDIM, PNDM, Euler, Euler Ancestral, DPM-Solver++
// (multistep, singlestep, inverse, SDE variants, Karras/exponential/beta/Lu
// sigmas), LMS, Heun, KDPM2, UniPC, DEIS, LCM, TCD, EDM, consistency models,
// IPNDM, SA-Solver, UnCLIP, score-SDE VE, flow matching and more.
//
// Each scheduler follows its diffusers source file
// (src/diffusers/schedulers/scheduling_*.py, diffusers 0.40.0.dev0) line by
// line, including the float32/float64 mix of torch and numpy, so that a
// schedule and a denoising loop give the same numbers as diffusers on the
// CPU. Latents are host []float32 tensors in row-major (NCHW) order with an
// explicit shape. Noise comes from torchrand generators, which reproduce
// torch's CPU RNG.
//
// docs/schedulers.md lists the classes, config fields, numerics and the test
// vectors they are checked against.
package schedulers

import (
	"github.com/tputool/tputool/pipeline/torchrand"
)

// Scheduler is one diffusers scheduler instance. It is stateful, like its
// Python counterpart: SetTimesteps starts a new schedule and Step advances
// it. It is not safe for concurrent use.
type Scheduler interface {
	// Name returns the diffusers class name, e.g. "EulerDiscreteScheduler".
	Name() string
	// Config returns the resolved configuration (class defaults overlaid
	// with the given fields, including unknown ones).
	Config() Config
	// SetTimesteps builds the inference schedule for n steps.
	SetTimesteps(numInferenceSteps int) error
	// Timesteps returns the values the pipeline passes to the model as t,
	// in order (integer-valued for most schedulers, fractional for some).
	Timesteps() []float64
	// InitNoiseSigma is the factor the initial noise is multiplied by.
	InitNoiseSigma() float64
	// Order is the class's order attribute (2 for Heun/KDPM2, where each
	// step takes two model calls, so Timesteps has about 2N entries).
	Order() int
	// ScaleModelInput returns the model input for timestep t (a no-op for
	// most schedulers; sigma-based ones divide by sqrt(sigma^2+1)).
	ScaleModelInput(sample []float32, t float64) ([]float32, error)
	// Step computes the previous sample from the model output at t. shape is
	// the tensor shape (batch first); gen supplies noise for stochastic
	// schedulers (nil uses a randomly seeded generator).
	Step(modelOutput []float32, t float64, sample []float32, shape []int, gen *torchrand.Generator) ([]float32, error)
	// AddNoise noises clean samples to timestep t (img2img, tests). For
	// flow-matching schedulers this is scale_noise.
	AddNoise(original, noise []float32, shape []int, t float64) ([]float32, error)
}

// TimestepOptions are the keyword arguments of diffusers' set_timesteps.
// Exactly one of NumInferenceSteps, Timesteps or Sigmas is usually given;
// each scheduler accepts the subset its Python class accepts.
type TimestepOptions struct {
	NumInferenceSteps int       // 0 when not given
	Timesteps         []float64 // custom timesteps
	Sigmas            []float64 // custom sigmas
	Mu                *float64  // dynamic shifting (flow models)
	// Strength and OriginalInferenceSteps are LCM/TCD options (0 = default).
	Strength               float64
	OriginalInferenceSteps int
}

// TimestepSetter is implemented by schedulers whose set_timesteps takes
// more than a step count.
type TimestepSetter interface {
	SetTimestepsWith(opts TimestepOptions) error
}

// StepOptions are the optional keyword arguments of step().
type StepOptions struct {
	// Eta is DDIM's eta (0 = deterministic DDIM) and TCD's gamma.
	Eta float64
	// UseClippedModelOutput is DDIM's use_clipped_model_output.
	UseClippedModelOutput bool
	// SChurn, STMin, STMax and SNoise are the Euler/EDM churn settings; a
	// zero STMax means +Inf and a zero SNoise means 1.
	SChurn, STMin, STMax, SNoise float64
	// VarianceNoise, when non-nil, is used instead of drawing noise.
	VarianceNoise []float32
	// PrevTimestep is UnCLIP's prev_timestep (nil: t - 1).
	PrevTimestep *float64
}

// OptionStepper is implemented by schedulers whose step() has options.
type OptionStepper interface {
	StepWithOptions(modelOutput []float32, t float64, sample []float32, shape []int, gen *torchrand.Generator, opts StepOptions) ([]float32, error)
}

// SigmaProvider is implemented by sigma-based schedulers.
type SigmaProvider interface {
	Sigmas() []float64
}

// StepIndexer exposes the diffusers step-index state (step_index,
// begin_index).
type StepIndexer interface {
	// StepIndex returns the current step index, or -1 before the first step.
	StepIndex() int
	// SetBeginIndex is diffusers' set_begin_index (img2img pipelines and
	// the SDXL pipeline call it so that repeated timesteps resolve by
	// position). Pipelines should go through the package function
	// SetBeginIndex, which skips the classes without set_begin_index.
	SetBeginIndex(i int)
	// ResetStepIndex clears the step index (scheduler._step_index = None).
	ResetStepIndex()
}

// PreviousTimesteper is implemented by schedulers with previous_timestep().
type PreviousTimesteper interface {
	PreviousTimestep(t float64) (float64, error)
}

// BatchStepper is implemented by the *Parallel schedulers: one noise-free
// step for a batch where every element has its own timestep.
type BatchStepper interface {
	BatchStepNoNoise(modelOutput []float32, timesteps []float64, sample []float32, shape []int, eta float64) ([]float32, error)
}

// VarianceCalculator exposes diffusers' _get_variance for tests and
// diagnostics. args are the positional arguments (timestep, and for DDIM and
// UnCLIP the previous timestep); predictedVariance may be nil.
type VarianceCalculator interface {
	Variance(args []float64, predictedVariance *float64) (float64, error)
}
