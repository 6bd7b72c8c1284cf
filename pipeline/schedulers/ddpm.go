package schedulers

// DDPMScheduler and DDPMParallelScheduler (Ho et al. 2020, "Denoising
// Diffusion Probabilistic Models"), following diffusers' scheduling_ddpm.py
// and scheduling_ddpm_parallel.py.

import (
	"fmt"
	"math"

	"github.com/tputool/tputool/pipeline/torchrand"
)

type ddpm struct {
	base
	alphaSchedule
	varianceType string
	clipSample   bool
	clipRange    float64
	thresholding bool
	threshRatio  float64
	sampleMax    float64
	spacing      string
	stepsOffset  int
	prediction   string
	custom       bool
	parallel     bool
}

func newDDPM(class string, cfg Config) (Scheduler, error) {
	r := &cfgReader{class: class, cfg: cfg}
	s := &ddpm{base: newBase(class, cfg), parallel: class == "DDPMParallelScheduler"}
	s.alphaSchedule = readAlphaSchedule(r, true, "linear", "scaled_linear", "squaredcos_cap_v2", "laplace", "sigmoid")
	s.varianceType = r.str("variance_type")
	r.oneOf("variance_type", s.varianceType, "fixed_small", "fixed_small_log", "fixed_large", "fixed_large_log", "learned", "learned_range")
	s.clipSample = r.bool("clip_sample")
	s.clipRange = r.float("clip_sample_range")
	s.thresholding = r.bool("thresholding")
	s.threshRatio = r.float("dynamic_thresholding_ratio")
	s.sampleMax = r.float("sample_max_value")
	s.spacing = r.str("timestep_spacing")
	s.stepsOffset = r.int("steps_offset")
	s.prediction = r.str("prediction_type")
	r.oneOf("prediction_type", s.prediction, "epsilon", "sample", "v_prediction")
	if r.err != nil {
		return nil, r.err
	}
	s.timesteps = make([]float64, s.numTrain)
	for i := range s.timesteps {
		s.timesteps[i] = float64(s.numTrain - 1 - i)
	}
	return s, nil
}

func (s *ddpm) InitNoiseSigma() float64 { return 1 }

func (s *ddpm) ScaleModelInput(sample []float32, t float64) ([]float32, error) { return sample, nil }

func (s *ddpm) SetTimesteps(n int) error {
	return s.SetTimestepsWith(TimestepOptions{NumInferenceSteps: n})
}

// SetTimestepsWith accepts a step count or descending custom timesteps.
func (s *ddpm) SetTimestepsWith(o TimestepOptions) error {
	ts, custom, err := customOrSpaced(s.class, o, s.numTrain, func(n int) ([]float64, error) {
		return spacedTimesteps(s.spacing, s.numTrain, n, s.stepsOffset)
	})
	if err != nil {
		return err
	}
	s.custom = custom
	if custom {
		s.numInfer = 0
	} else {
		s.numInfer = o.NumInferenceSteps
	}
	s.timesteps = ts
	return nil
}

// customOrSpaced implements the set_timesteps(num_inference_steps=None,
// timesteps=None) contract of DDPM, UnCLIP, LCM and TCD: custom timesteps
// must be strictly descending and start below num_train_timesteps.
func customOrSpaced(class string, o TimestepOptions, numTrain int, spaced func(n int) ([]float64, error)) ([]float64, bool, error) {
	if o.NumInferenceSteps != 0 && o.Timesteps != nil {
		return nil, false, fmt.Errorf("%s: pass either num_inference_steps or custom timesteps, not both", class)
	}
	if o.Sigmas != nil {
		return nil, false, fmt.Errorf("%s: custom sigmas are not supported", class)
	}
	if o.Timesteps != nil {
		ts := o.Timesteps
		if len(ts) == 0 {
			return nil, false, fmt.Errorf("%s: empty custom timesteps", class)
		}
		for i := 1; i < len(ts); i++ {
			if ts[i] >= ts[i-1] {
				return nil, false, fmt.Errorf("%s: custom timesteps must be in descending order, got %v", class, ts)
			}
		}
		if ts[0] >= float64(numTrain) {
			return nil, false, fmt.Errorf("%s: custom timesteps must start before num_train_timesteps %d, got %v", class, numTrain, ts[0])
		}
		out := make([]float64, len(ts))
		for i, t := range ts {
			out[i] = math.Trunc(t) // np.array(timesteps, dtype=np.int64)
		}
		return out, true, nil
	}
	n := o.NumInferenceSteps
	if n < 1 || n > numTrain {
		return nil, false, fmt.Errorf("%s: num_inference_steps %d must be in [1, %d]", class, n, numTrain)
	}
	ts, err := spaced(n)
	if err != nil {
		return nil, false, fmt.Errorf("%s: %w", class, err)
	}
	return ts, false, nil
}

// previousTimestepIn is previous_timestep for schedulers that look the
// timestep up in a custom or inference schedule: the next entry, or -1 after
// the last one.
func previousTimestepIn(class string, ts []float64, t float64) (float64, error) {
	for i, v := range ts {
		if v == t {
			if i == len(ts)-1 {
				return -1, nil
			}
			return ts[i+1], nil
		}
	}
	return 0, fmt.Errorf("%s: timestep %v is not in the schedule", class, t)
}

// PreviousTimestep is previous_timestep(t).
func (s *ddpm) PreviousTimestep(t float64) (float64, error) {
	if s.custom || s.numInfer > 0 {
		return previousTimestepIn(s.class, s.timesteps, t)
	}
	return t - 1, nil
}

// varianceAt is _get_variance(t, predicted_variance, variance_type) for one
// element; pv is the predicted variance (learned types only).
type ddpmVar struct {
	variance float32 // clamped posterior variance
	curBeta  float32
}

func (s *ddpm) posterior(t int) (ddpmVar, error) {
	prevT, err := s.PreviousTimestep(float64(t))
	if err != nil {
		return ddpmVar{}, err
	}
	a := s.acp[t]
	ap := float32(1)
	if prevT >= 0 {
		ap = s.acp[int(prevT)]
	}
	curBeta := 1 - a/ap
	v := (1 - ap) / (1 - a) * curBeta
	v = max(v, float32(1e-20))
	return ddpmVar{variance: v, curBeta: curBeta}, nil
}

// varianceValue applies variance_type to the posterior for one predicted
// variance value.
func varianceValue(vt string, p ddpmVar, pv float32) float32 {
	switch vt {
	case "fixed_small":
		return p.variance
	case "fixed_small_log":
		return exp32(0.5 * log32(p.variance))
	case "fixed_large":
		return p.curBeta
	case "fixed_large_log":
		return log32(p.curBeta)
	case "learned":
		return pv
	case "learned_range":
		minLog := log32(p.variance)
		maxLog := log32(p.curBeta)
		frac := (pv + 1) / 2
		return float32(frac*maxLog) + float32((1-frac)*minLog)
	}
	return p.variance
}

// Variance implements VarianceCalculator: args are (timestep).
func (s *ddpm) Variance(args []float64, pv *float64) (float64, error) {
	if len(args) != 1 {
		return 0, fmt.Errorf("%s: _get_variance takes one timestep, got %d arguments", s.class, len(args))
	}
	t := int(args[0])
	if t < 0 || t >= s.numTrain {
		return 0, fmt.Errorf("%s: timestep %d outside [0, %d)", s.class, t, s.numTrain)
	}
	p, err := s.posterior(t)
	if err != nil {
		return 0, err
	}
	if s.varianceType == "learned_range" || s.varianceType == "learned" {
		if pv == nil {
			return 0, fmt.Errorf("%s: variance_type %s needs a predicted variance", s.class, s.varianceType)
		}
		if s.varianceType == "learned" {
			return *pv, nil
		}
		frac := (*pv + 1) / 2
		minLog, maxLog := log32(p.variance), log32(p.curBeta)
		return float64(float32(float32(frac)*maxLog) + float32(float32(1-frac)*minLog)), nil
	}
	return float64(varianceValue(s.varianceType, p, 0)), nil
}

func (s *ddpm) Step(modelOutput []float32, t float64, sample []float32, shape []int, gen *torchrand.Generator) ([]float32, error) {
	if err := checkShapes(s.class, shape, sample); err != nil {
		return nil, err
	}
	if !isInt(t) || t < 0 || int(t) >= s.numTrain {
		return nil, fmt.Errorf("%s: timestep %v outside [0, %d)", s.class, t, s.numTrain)
	}
	ti := int(t)
	var predVar []float32
	learned := s.varianceType == "learned" || s.varianceType == "learned_range"
	if learned && len(modelOutput) == 2*len(sample) {
		var err error
		modelOutput, predVar, err = splitLearnedVariance(s.class, modelOutput, shape)
		if err != nil {
			return nil, err
		}
	}
	if len(modelOutput) != len(sample) {
		return nil, fmt.Errorf("%s: model output has %d elements, want %d", s.class, len(modelOutput), len(sample))
	}
	prevT, err := s.PreviousTimestep(t)
	if err != nil {
		return nil, err
	}
	a := s.acp[ti]
	ap := float32(1)
	if prevT >= 0 {
		ap = s.acp[int(prevT)]
	}
	b, bp := 1-a, 1-ap
	curAlpha := a / ap
	curBeta := 1 - curAlpha
	x0, _ := predictX0Eps(s.prediction, a, sample, modelOutput)
	if s.thresholding {
		x0 = thresholdSample(x0, shape, s.threshRatio, s.sampleMax)
	} else if s.clipSample {
		x0 = clampF32(x0, s.clipRange)
	}
	x0Coeff := sqrt32(ap) * curBeta / b
	curCoeff := sqrt32(curAlpha) * bp / b
	out := make([]float32, len(sample))
	for i := range out {
		out[i] = float32(x0Coeff*x0[i]) + float32(curCoeff*sample[i])
	}
	if ti > 0 {
		noise := noiseLike(gen, shape)
		p, err := s.posterior(ti)
		if err != nil {
			return nil, err
		}
		if learned && predVar == nil {
			return nil, fmt.Errorf("%s: variance_type %s needs a model output with twice the sample's channels", s.class, s.varianceType)
		}
		switch s.varianceType {
		case "fixed_small_log":
			v := varianceValue(s.varianceType, p, 0)
			for i := range out {
				out[i] += float32(v * noise[i])
			}
		case "learned_range":
			for i := range out {
				v := varianceValue(s.varianceType, p, predVar[i])
				out[i] += float32(exp32(0.5*v) * noise[i])
			}
		case "learned":
			for i := range out {
				out[i] += float32(sqrt32(predVar[i]) * noise[i])
			}
		default:
			v := sqrt32(varianceValue(s.varianceType, p, 0))
			for i := range out {
				out[i] += float32(v * noise[i])
			}
		}
	}
	return out, nil
}

func (s *ddpm) AddNoise(original, noise []float32, shape []int, t float64) ([]float32, error) {
	return addNoiseAlpha(s.class, &s.alphaSchedule, original, noise, shape, t)
}

// BatchStepNoNoise is DDPMParallelScheduler.batch_step_no_noise: the
// posterior mean for a batch where element i is at timesteps[i].
func (s *ddpm) BatchStepNoNoise(modelOutput []float32, timesteps []float64, sample []float32, shape []int, _ float64) ([]float32, error) {
	if !s.parallel {
		return nil, fmt.Errorf("%s has no batch_step_no_noise", s.class)
	}
	if err := checkShapes(s.class, shape, sample); err != nil {
		return nil, err
	}
	learned := s.varianceType == "learned" || s.varianceType == "learned_range"
	if learned && len(modelOutput) == 2*len(sample) {
		var err error
		if modelOutput, _, err = splitLearnedVariance(s.class, modelOutput, shape); err != nil {
			return nil, err
		}
	}
	if len(modelOutput) != len(sample) {
		return nil, fmt.Errorf("%s: model output has %d elements, want %d", s.class, len(modelOutput), len(sample))
	}
	b := shape[0]
	if len(timesteps) != b {
		return nil, fmt.Errorf("%s: %d timesteps for batch %d", s.class, len(timesteps), b)
	}
	nInf := s.numInfer
	if nInf == 0 {
		nInf = s.numTrain
	}
	per := len(sample) / b
	out := make([]float32, 0, len(sample))
	for i := 0; i < b; i++ {
		t := int(timesteps[i])
		if t < 0 || t >= s.numTrain {
			return nil, fmt.Errorf("%s: timestep %d outside [0, %d)", s.class, t, s.numTrain)
		}
		prev := t - s.numTrain/nInf
		a := s.acp[t]
		ap := float32(1)
		if prev >= 0 {
			ap = s.acp[prev]
		}
		bt, bp := 1-a, 1-ap
		curAlpha := a / ap
		curBeta := 1 - curAlpha
		rs := sample[i*per : (i+1)*per]
		x0, _ := predictX0Eps(s.prediction, a, rs, modelOutput[i*per:(i+1)*per])
		if s.thresholding {
			x0 = thresholdSample(x0, append([]int{1}, shape[1:]...), s.threshRatio, s.sampleMax)
		} else if s.clipSample {
			x0 = clampF32(x0, s.clipRange)
		}
		x0Coeff := sqrt32(ap) * curBeta / bt
		curCoeff := sqrt32(curAlpha) * bp / bt
		for j := range rs {
			out = append(out, float32(x0Coeff*x0[j])+float32(curCoeff*rs[j]))
		}
	}
	return out, nil
}
