package schedulers

// DDIMScheduler, DDIMParallelScheduler and DDIMInverseScheduler
// (Song et al. 2020, "Denoising Diffusion Implicit Models"), following
// diffusers' scheduling_ddim.py, scheduling_ddim_parallel.py and
// scheduling_ddim_inverse.py.

import (
	"fmt"

	"github.com/tputool/tputool/pipeline/torchrand"
)

// alphaSchedule is the state shared by the alphas_cumprod schedulers.
type alphaSchedule struct {
	numTrain int
	acp      []float32 // alphas_cumprod
	betas    []float32
}

// readAlphaSchedule reads the beta fields and builds alphas_cumprod,
// optionally rescaled to zero terminal SNR.
func readAlphaSchedule(r *cfgReader, rescaleKey bool, allowed ...string) alphaSchedule {
	betas := makeBetas(r, allowed...)
	if r.err != nil {
		return alphaSchedule{}
	}
	if rescaleKey && r.bool("rescale_betas_zero_snr") {
		betas = rescaleZeroTerminalSNR(betas)
	}
	return alphaSchedule{numTrain: len(betas), acp: alphasCumprod(betas), betas: betas}
}

// alphaAt indexes alphas_cumprod with a timestep, with a clear error for
// timesteps outside the training range.
func (a *alphaSchedule) alphaAt(class string, t float64) (float32, error) {
	if !isInt(t) || t < 0 || int(t) >= len(a.acp) {
		return 0, fmt.Errorf("%s: timestep %v outside [0, %d)", class, t, len(a.acp))
	}
	return a.acp[int(t)], nil
}

// leadingTrailingTimesteps is the int64 timestep spacing shared by DDIM, DDPM
// and friends (set_timesteps for num_inference_steps).
func spacedTimesteps(spacing string, numTrain, n, stepsOffset int) ([]float64, error) {
	var ts []float64
	switch spacing {
	case "linspace":
		ts = reversed64(truncInts(roundAll(npLinspace(0, float64(numTrain-1), n, true))))
	case "leading":
		ratio := numTrain / n
		ts = make([]float64, n)
		for i := range ts {
			ts[n-1-i] = float64(i*ratio + stepsOffset)
		}
	case "trailing":
		ratio := float64(numTrain) / float64(n)
		ts = truncInts(roundAll(npArange(float64(numTrain), 0, -ratio)))
		for i := range ts {
			ts[i]--
		}
	default:
		return nil, fmt.Errorf("timestep_spacing %q is not supported (want linspace, leading or trailing)", spacing)
	}
	return ts, nil
}

// predictX0Eps converts a model output to (x0, epsilon) for the alpha
// schedulers. mode is prediction_type.
func predictX0Eps(mode string, alphaProd float32, sample, modelOutput []float32) (x0, eps []float32) {
	betaProd := 1 - alphaProd
	sa, sb := sqrt32(alphaProd), sqrt32(betaProd)
	x0 = make([]float32, len(sample))
	eps = make([]float32, len(sample))
	for i := range sample {
		s, m := sample[i], modelOutput[i]
		switch mode {
		case "epsilon":
			x0[i] = (s - float32(sb*m)) / sa
			eps[i] = m
		case "sample":
			x0[i] = m
			eps[i] = (s - float32(sa*m)) / sb
		case "v_prediction":
			x0[i] = float32(sa*s) - float32(sb*m)
			eps[i] = float32(sa*m) + float32(sb*s)
		}
	}
	return x0, eps
}

// ---- DDIM --------------------------------------------------------------------

type ddim struct {
	base
	alphaSchedule
	finalAlpha       float32
	clipSample       bool
	clipRange        float64
	thresholding     bool
	threshRatio      float64
	sampleMax        float64
	stepsOffset      int
	spacing          string
	prediction       string
	inverse          bool // DDIMInverseScheduler
	parallel         bool // DDIMParallelScheduler
	initialAlphaProd float32
}

func newDDIM(class string, cfg Config) (Scheduler, error) {
	r := &cfgReader{class: class, cfg: cfg}
	s := &ddim{base: newBase(class, cfg)}
	s.inverse = class == "DDIMInverseScheduler"
	s.parallel = class == "DDIMParallelScheduler"
	s.alphaSchedule = readAlphaSchedule(r, true, "linear", "scaled_linear", "squaredcos_cap_v2")
	s.clipSample = r.bool("clip_sample")
	s.clipRange = r.float("clip_sample_range")
	if !s.inverse {
		s.thresholding = r.bool("thresholding")
		s.threshRatio = r.float("dynamic_thresholding_ratio")
		s.sampleMax = r.float("sample_max_value")
	}
	s.stepsOffset = r.int("steps_offset")
	s.spacing = r.str("timestep_spacing")
	s.prediction = r.str("prediction_type")
	r.oneOf("prediction_type", s.prediction, "epsilon", "sample", "v_prediction")
	setAlphaToOne := r.bool("set_alpha_to_one")
	if s.inverse {
		if v, ok := cfg["set_alpha_to_zero"]; ok && v != nil {
			// Deprecated alias kept by diffusers.
			setAlphaToOne = r.bool("set_alpha_to_zero")
		}
	}
	if r.err != nil {
		return nil, r.err
	}
	s.finalAlpha = s.acp[0]
	if setAlphaToOne {
		s.finalAlpha = 1
	}
	s.initialAlphaProd = s.finalAlpha
	s.timesteps = make([]float64, s.numTrain)
	for i := range s.timesteps {
		if s.inverse {
			s.timesteps[i] = float64(i)
		} else {
			s.timesteps[i] = float64(s.numTrain - 1 - i)
		}
	}
	return s, nil
}

func (s *ddim) InitNoiseSigma() float64 { return 1 }

func (s *ddim) ScaleModelInput(sample []float32, t float64) ([]float32, error) { return sample, nil }

func (s *ddim) SetTimesteps(n int) error {
	if n < 1 || n > s.numTrain {
		return fmt.Errorf("%s: num_inference_steps %d must be in [1, %d]", s.class, n, s.numTrain)
	}
	if s.inverse {
		var ts []float64
		switch s.spacing {
		case "leading":
			ratio := s.numTrain / n
			ts = make([]float64, n)
			for i := range ts {
				ts[i] = float64(i*ratio + s.stepsOffset)
			}
		case "trailing":
			ratio := float64(s.numTrain) / float64(n)
			ts = truncInts(roundAll(reversed64(npArange(float64(s.numTrain), 0, -ratio))))
			for i := range ts {
				ts[i]--
			}
		default:
			return fmt.Errorf("%s: timestep_spacing %q is not supported (want leading or trailing)", s.class, s.spacing)
		}
		s.numInfer = n
		s.timesteps = ts
		return nil
	}
	ts, err := spacedTimesteps(s.spacing, s.numTrain, n, s.stepsOffset)
	if err != nil {
		return fmt.Errorf("%s: %w", s.class, err)
	}
	s.numInfer = n
	s.timesteps = ts
	return nil
}

// variance is _get_variance(timestep, prev_timestep).
func (s *ddim) variance(t, prev int) float32 {
	a := s.acp[t]
	ap := s.finalAlpha
	if prev >= 0 {
		ap = s.acp[prev]
	}
	b, bp := 1-a, 1-ap
	return bp / b * (1 - a/ap)
}

// Variance implements VarianceCalculator: args are (timestep[, prev]).
func (s *ddim) Variance(args []float64, _ *float64) (float64, error) {
	if len(args) == 0 || len(args) > 2 {
		return 0, fmt.Errorf("%s: _get_variance takes (timestep, prev_timestep), got %d arguments", s.class, len(args))
	}
	t := int(args[0])
	var prev int
	if len(args) == 2 {
		prev = int(args[1])
	} else {
		if s.numInfer == 0 {
			return 0, fmt.Errorf("%s: _get_variance without prev_timestep needs set_timesteps", s.class)
		}
		prev = t - s.numTrain/s.numInfer
	}
	if t < 0 || t >= s.numTrain || prev >= s.numTrain {
		return 0, fmt.Errorf("%s: timestep %d/%d outside [0, %d)", s.class, t, prev, s.numTrain)
	}
	return float64(s.variance(t, prev)), nil
}

func (s *ddim) Step(modelOutput []float32, t float64, sample []float32, shape []int, gen *torchrand.Generator) ([]float32, error) {
	return s.StepWithOptions(modelOutput, t, sample, shape, gen, StepOptions{})
}

func (s *ddim) StepWithOptions(modelOutput []float32, t float64, sample []float32, shape []int, gen *torchrand.Generator, opts StepOptions) ([]float32, error) {
	if err := checkShapes(s.class, shape, modelOutput, sample); err != nil {
		return nil, err
	}
	if s.numInfer == 0 {
		return nil, fmt.Errorf("%s: call SetTimesteps before Step", s.class)
	}
	if !isInt(t) {
		return nil, fmt.Errorf("%s: timestep %v is not an integer", s.class, t)
	}
	if s.inverse {
		return s.stepInverse(modelOutput, int(t), sample)
	}
	ti := int(t)
	prev := ti - s.numTrain/s.numInfer
	if ti < 0 || ti >= s.numTrain || prev >= s.numTrain {
		return nil, fmt.Errorf("%s: timestep %d outside [0, %d)", s.class, ti, s.numTrain)
	}
	a := s.acp[ti]
	ap := s.finalAlpha
	if prev >= 0 {
		ap = s.acp[prev]
	}
	x0, eps := predictX0Eps(s.prediction, a, sample, modelOutput)
	if s.thresholding {
		x0 = thresholdSample(x0, shape, s.threshRatio, s.sampleMax)
	} else if s.clipSample {
		x0 = clampF32(x0, s.clipRange)
	}
	variance := s.variance(ti, prev)
	std := float32(opts.Eta) * sqrt32(variance)
	if opts.UseClippedModelOutput {
		sa, sb := sqrt32(a), sqrt32(1-a)
		for i := range eps {
			eps[i] = (sample[i] - float32(sa*x0[i])) / sb
		}
	}
	dirCoef := sqrt32(1 - ap - sq32(std))
	sap := sqrt32(ap)
	prevSample := make([]float32, len(sample))
	for i := range prevSample {
		prevSample[i] = float32(sap*x0[i]) + float32(dirCoef*eps[i])
	}
	if opts.Eta > 0 {
		if opts.VarianceNoise != nil && gen != nil {
			return nil, fmt.Errorf("%s: pass either a generator or variance noise, not both", s.class)
		}
		noise, err := stepNoise(opts, gen, shape)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", s.class, err)
		}
		for i := range prevSample {
			prevSample[i] += float32(std * noise[i])
		}
	}
	return prevSample, nil
}

func (s *ddim) stepInverse(modelOutput []float32, t int, sample []float32) ([]float32, error) {
	prevT := t
	cur := min(t-s.numTrain/s.numInfer, s.numTrain-1)
	if prevT < 0 || prevT >= s.numTrain {
		return nil, fmt.Errorf("%s: timestep %d outside [0, %d)", s.class, prevT, s.numTrain)
	}
	a := s.initialAlphaProd
	if cur >= 0 {
		a = s.acp[cur]
	}
	ap := s.acp[prevT]
	x0, eps := predictX0Eps(s.prediction, a, sample, modelOutput)
	if s.clipSample {
		x0 = clampF32(x0, s.clipRange)
	}
	dirCoef := sqrt32(1 - ap)
	sap := sqrt32(ap)
	out := make([]float32, len(sample))
	for i := range out {
		out[i] = float32(sap*x0[i]) + float32(dirCoef*eps[i])
	}
	return out, nil
}

func (s *ddim) AddNoise(original, noise []float32, shape []int, t float64) ([]float32, error) {
	if s.inverse {
		return nil, fmt.Errorf("%s has no add_noise", s.class)
	}
	return addNoiseAlpha(s.class, &s.alphaSchedule, original, noise, shape, t)
}

// addNoiseAlpha is add_noise for the alphas_cumprod schedulers:
// sqrt(acp[t]) * x + sqrt(1 - acp[t]) * noise.
func addNoiseAlpha(class string, a *alphaSchedule, original, noise []float32, shape []int, t float64) ([]float32, error) {
	if err := checkShapes(class, shape, original, noise); err != nil {
		return nil, err
	}
	acp, err := a.alphaAt(class, t)
	if err != nil {
		return nil, err
	}
	sa, sb := sqrt32(acp), sqrt32(1-acp)
	out := make([]float32, len(original))
	for i := range out {
		out[i] = float32(sa*original[i]) + float32(sb*noise[i])
	}
	return out, nil
}

// BatchStepNoNoise is DDIMParallelScheduler.batch_step_no_noise: one eta=0
// DDIM step where batch element i is at timesteps[i] (a previous timestep
// below zero uses alpha 1).
func (s *ddim) BatchStepNoNoise(modelOutput []float32, timesteps []float64, sample []float32, shape []int, eta float64) ([]float32, error) {
	if !s.parallel {
		return nil, fmt.Errorf("%s has no batch_step_no_noise", s.class)
	}
	if err := checkShapes(s.class, shape, modelOutput, sample); err != nil {
		return nil, err
	}
	if s.numInfer == 0 {
		return nil, fmt.Errorf("%s: call SetTimesteps before BatchStepNoNoise", s.class)
	}
	if eta != 0 {
		return nil, fmt.Errorf("%s: batch_step_no_noise needs eta = 0, got %v", s.class, eta)
	}
	b := shape[0]
	if len(timesteps) != b {
		return nil, fmt.Errorf("%s: %d timesteps for batch %d", s.class, len(timesteps), b)
	}
	per := len(sample) / b
	out := make([]float32, 0, len(sample))
	for i := 0; i < b; i++ {
		t := int(timesteps[i])
		if t < 0 || t >= s.numTrain {
			return nil, fmt.Errorf("%s: timestep %d outside [0, %d)", s.class, t, s.numTrain)
		}
		prev := t - s.numTrain/s.numInfer
		a := s.acp[t]
		ap := float32(1)
		if prev >= 0 {
			ap = s.acp[prev]
		}
		rs := sample[i*per : (i+1)*per]
		rm := modelOutput[i*per : (i+1)*per]
		x0, eps := predictX0Eps(s.prediction, a, rs, rm)
		if s.thresholding {
			x0 = thresholdSample(x0, append([]int{1}, shape[1:]...), s.threshRatio, s.sampleMax)
		} else if s.clipSample {
			x0 = clampF32(x0, s.clipRange)
		}
		// _batch_get_variance, times eta = 0.
		variance := (1 - ap) / (1 - a) * (1 - a/ap)
		std := float32(eta) * sqrt32(variance)
		dirCoef := sqrt32(1 - ap - sq32(std))
		sap := sqrt32(ap)
		for j := range rs {
			out = append(out, float32(sap*x0[j])+float32(dirCoef*eps[j]))
		}
	}
	return out, nil
}
