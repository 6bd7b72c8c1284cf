package schedulers

// LCMScheduler (Luo et al. 2023, "Latent Consistency Models") and
// TCDScheduler (Zheng et al. 2024, "Trajectory Consistency Distillation"),
// following diffusers' scheduling_lcm.py and scheduling_tcd.py.

import (
	"fmt"
	"math"

	"github.com/tputool/tputool/pipeline/torchrand"
)

type lcm struct {
	base
	alphaSchedule
	tcd           bool
	finalAlpha    float32
	originalSteps int
	clipSample    bool
	clipRange     float64
	thresholding  bool
	threshRatio   float64
	sampleMax     float64
	prediction    string
	timestepScale float64
	custom        bool
}

func newLCM(class string, cfg Config) (Scheduler, error) {
	r := &cfgReader{class: class, cfg: cfg}
	s := &lcm{base: newBase(class, cfg), tcd: class == "TCDScheduler"}
	s.alphaSchedule = readAlphaSchedule(r, true, "linear", "scaled_linear", "squaredcos_cap_v2")
	s.originalSteps = r.int("original_inference_steps")
	s.clipSample = r.bool("clip_sample")
	s.clipRange = r.float("clip_sample_range")
	setAlphaToOne := r.bool("set_alpha_to_one")
	s.prediction = r.str("prediction_type")
	r.oneOf("prediction_type", s.prediction, "epsilon", "sample", "v_prediction")
	s.thresholding = r.bool("thresholding")
	s.threshRatio = r.float("dynamic_thresholding_ratio")
	s.sampleMax = r.float("sample_max_value")
	s.timestepScale = r.float("timestep_scaling")
	if r.err != nil {
		return nil, r.err
	}
	s.finalAlpha = s.acp[0]
	if setAlphaToOne {
		s.finalAlpha = 1
	}
	s.timesteps = make([]float64, s.numTrain)
	for i := range s.timesteps {
		s.timesteps[i] = float64(s.numTrain - 1 - i)
	}
	return s, nil
}

func (s *lcm) InitNoiseSigma() float64 { return 1 }

func (s *lcm) ScaleModelInput(sample []float32, t float64) ([]float32, error) { return sample, nil }

func (s *lcm) SetTimesteps(n int) error {
	return s.SetTimestepsWith(TimestepOptions{NumInferenceSteps: n})
}

// SetTimestepsWith accepts a step count or custom timesteps, plus strength
// and original_inference_steps.
func (s *lcm) SetTimestepsWith(o TimestepOptions) error {
	if o.Sigmas != nil || o.Mu != nil {
		return fmt.Errorf("%s: custom sigmas and mu are not supported", s.class)
	}
	if (o.NumInferenceSteps == 0) == (o.Timesteps == nil) {
		return fmt.Errorf("%s: pass exactly one of num_inference_steps or custom timesteps", s.class)
	}
	strength := o.Strength
	if strength == 0 {
		strength = 1
	}
	N := s.numTrain
	origSteps := s.originalSteps
	if o.OriginalInferenceSteps != 0 {
		origSteps = o.OriginalInferenceSteps
	}
	var origin []int
	if s.tcd && o.OriginalInferenceSteps != 0 {
		// TCD: an explicit original_inference_steps uses every training step.
		for i := 0; i < int(float64(N)*strength); i++ {
			origin = append(origin, i)
		}
	} else {
		if origSteps > N {
			return fmt.Errorf("%s: original_inference_steps %d cannot exceed num_train_timesteps %d", s.class, origSteps, N)
		}
		if origSteps < 1 {
			return fmt.Errorf("%s: original_inference_steps %d must be at least 1", s.class, origSteps)
		}
		k := N / origSteps
		for i := 1; i <= int(float64(origSteps)*strength); i++ {
			origin = append(origin, i*k-1)
		}
	}
	if o.Timesteps != nil {
		ts := o.Timesteps
		if len(ts) == 0 {
			return fmt.Errorf("%s: empty custom timesteps", s.class)
		}
		for i := 1; i < len(ts); i++ {
			if ts[i] >= ts[i-1] {
				return fmt.Errorf("%s: custom timesteps must be in descending order, got %v", s.class, ts)
			}
		}
		if ts[0] >= float64(N) {
			return fmt.Errorf("%s: custom timesteps must start before num_train_timesteps %d, got %v", s.class, N, ts[0])
		}
		n := len(ts)
		s.numInfer = n
		s.custom = true
		initT := min(int(float64(n)*strength), n)
		start := max(n-initT, 0)
		s.timesteps = truncInts(ts[start*s.Order():])
		s.resetIndices()
		return nil
	}
	n := o.NumInferenceSteps
	if n < 1 || n > N {
		return fmt.Errorf("%s: num_inference_steps %d must be in [1, %d]", s.class, n, N)
	}
	if len(origin)/n < 1 {
		return fmt.Errorf("%s: original_inference_steps x strength (%d x %v) is smaller than num_inference_steps %d", s.class, origSteps, strength, n)
	}
	if n > origSteps {
		return fmt.Errorf("%s: num_inference_steps %d cannot exceed original_inference_steps %d", s.class, n, origSteps)
	}
	rev := make([]int, len(origin))
	for i, v := range origin {
		rev[len(origin)-1-i] = v
	}
	idx := npLinspace(0, float64(len(rev)), n, false)
	s.timesteps = make([]float64, n)
	for i, v := range idx {
		s.timesteps[i] = float64(rev[int(math.Floor(v))])
	}
	s.numInfer = n
	s.custom = false
	s.resetIndices()
	return nil
}

// PreviousTimestep is previous_timestep(t).
func (s *lcm) PreviousTimestep(t float64) (float64, error) {
	if s.custom || s.numInfer > 0 {
		return previousTimestepIn(s.class, s.timesteps, t)
	}
	return t - 1, nil
}

// scalings is get_scalings_for_boundary_condition_discrete (sigma_data 0.5).
func (s *lcm) scalings(t float64) (cSkip, cOut float32) {
	scaled := float32(t) * float32(s.timestepScale)
	const sd = float32(0.25) // sigma_data ** 2
	cSkip = sd / (sq32(scaled) + sd)
	cOut = scaled / sqrt32(sq32(scaled)+sd)
	return cSkip, cOut
}

func (s *lcm) Step(modelOutput []float32, t float64, sample []float32, shape []int, gen *torchrand.Generator) ([]float32, error) {
	eta := 0.0
	if s.tcd {
		eta = 0.3 // TCDScheduler.step's default gamma
	}
	return s.StepWithOptions(modelOutput, t, sample, shape, gen, StepOptions{Eta: eta})
}

// StepWithOptions uses opts.Eta as TCD's gamma (LCM ignores it).
func (s *lcm) StepWithOptions(modelOutput []float32, t float64, sample []float32, shape []int, gen *torchrand.Generator, opts StepOptions) ([]float32, error) {
	if err := checkShapes(s.class, shape, modelOutput, sample); err != nil {
		return nil, err
	}
	if s.numInfer == 0 {
		return nil, fmt.Errorf("%s: call SetTimesteps before Step", s.class)
	}
	if err := s.initStepIndex(t, false); err != nil {
		return nil, err
	}
	if !isInt(t) || t < 0 || int(t) >= s.numTrain {
		return nil, fmt.Errorf("%s: timestep %v outside [0, %d)", s.class, t, s.numTrain)
	}
	if s.tcd {
		return s.stepTCD(modelOutput, t, sample, shape, gen, opts.Eta)
	}
	i := s.stepIndex
	prevT := t
	if i+1 < len(s.timesteps) {
		prevT = s.timesteps[i+1]
	}
	a := s.acp[int(t)]
	ap := s.finalAlpha
	if prevT >= 0 {
		ap = s.acp[int(prevT)]
	}
	cSkip, cOut := s.scalings(t)
	x0, _ := predictX0Eps(s.prediction, a, sample, modelOutput)
	if s.thresholding {
		x0 = thresholdSample(x0, shape, s.threshRatio, s.sampleMax)
	} else if s.clipSample {
		x0 = clampF32(x0, s.clipRange)
	}
	denoised := make([]float32, len(sample))
	for j := range denoised {
		denoised[j] = float32(cOut*x0[j]) + float32(cSkip*sample[j])
	}
	out := denoised
	if i != s.numInfer-1 {
		noise := noiseLike(gen, shape)
		sa, sb := sqrt32(ap), sqrt32(1-ap)
		out = make([]float32, len(sample))
		for j := range out {
			out[j] = float32(sa*denoised[j]) + float32(sb*noise[j])
		}
	}
	s.stepIndex++
	return out, nil
}

func (s *lcm) stepTCD(modelOutput []float32, t float64, sample []float32, shape []int, gen *torchrand.Generator, eta float64) ([]float32, error) {
	if eta < 0 || eta > 1 {
		return nil, fmt.Errorf("%s: gamma (eta) %v must be in [0, 1]", s.class, eta)
	}
	i := s.stepIndex
	prevT := 0.0
	if i+1 < len(s.timesteps) {
		prevT = s.timesteps[i+1]
	}
	ts := int(math.Floor(float64(float32(1-eta) * float32(prevT))))
	a := s.acp[int(t)]
	ap := s.finalAlpha
	if prevT >= 0 {
		ap = s.acp[int(prevT)]
	}
	as := s.acp[ts]
	x0, eps := predictX0Eps(s.prediction, a, sample, modelOutput)
	sas, sbs := sqrt32(as), sqrt32(1-as)
	noised := make([]float32, len(sample))
	for j := range noised {
		noised[j] = float32(sas*x0[j]) + float32(sbs*eps[j])
	}
	out := noised
	if eta > 0 && i != s.numInfer-1 {
		noise := noiseLike(gen, shape)
		c1 := sqrt32(ap / as)
		c2 := sqrt32(1 - ap/as)
		out = make([]float32, len(sample))
		for j := range out {
			out[j] = float32(c1*noised[j]) + float32(c2*noise[j])
		}
	}
	s.stepIndex++
	return out, nil
}

func (s *lcm) AddNoise(original, noise []float32, shape []int, t float64) ([]float32, error) {
	return addNoiseAlpha(s.class, &s.alphaSchedule, original, noise, shape, t)
}
