package schedulers

// LMSDiscreteScheduler (linear multistep, k-diffusion's sample_lms) and
// HeunDiscreteScheduler (Karras et al. 2022, Algorithm 1), following
// diffusers' scheduling_lms_discrete.py and scheduling_heun_discrete.py.

import (
	"fmt"

	"github.com/tputool/tputool/pipeline/torchrand"
)

// ---- LMS ---------------------------------------------------------------------

type lms struct {
	base
	sigmaDiscrete
	derivatives [][]float32
}

func newLMS(class string, cfg Config) (Scheduler, error) {
	r := &cfgReader{class: class, cfg: cfg}
	s := &lms{base: newBase(class, cfg)}
	s.sigmaDiscrete = readSigmaDiscrete(r, class, false, []string{"linear", "scaled_linear", "squaredcos_cap_v2"})
	r.oneOf("prediction_type", s.prediction, "epsilon", "sample", "v_prediction")
	if r.err != nil {
		return nil, r.err
	}
	// __init__ calls set_timesteps(num_train_timesteps).
	if err := s.SetTimesteps(s.numTrain); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *lms) InitNoiseSigma() float64 { return s.initNoiseSigma() }

func (s *lms) ScaleModelInput(sample []float32, t float64) ([]float32, error) {
	if err := s.initStepIndex(t, false); err != nil {
		return nil, err
	}
	return scaleBySigma(sample, s.sigmas[s.stepIndex]), nil
}

func (s *lms) SetTimesteps(n int) error {
	if n < 1 {
		return fmt.Errorf("%s: num_inference_steps %d must be at least 1", s.class, n)
	}
	ts, err := floatSpacedTimesteps(s.spacing, s.numTrain, n, s.stepsOffset)
	if err != nil {
		return fmt.Errorf("%s: %w", s.class, err)
	}
	s.numInfer = n
	sig := interpSigmas(ts, s.trainSigmas)
	if s.sigmaKind == "karras" {
		// LMS's _convert_to_karras ignores any config sigma range.
		sig = karrasSigmas(sig[len(sig)-1], sig[0], n, 7)
		ts = make([]float64, len(sig))
		for i, v := range sig {
			ts[i] = sigmaToT(v, s.logSigmas)
		}
	} else if cs, cts, ok := s.convertSigmas(sig, n); ok {
		sig, ts = cs, cts
	}
	s.sigmas = append(toF32(sig), 0)
	s.timesteps = f32Values(ts)
	s.resetIndices()
	s.derivatives = nil
	return nil
}

// lmsCoefficient is get_lms_coefficient: the integral over [sigma_t,
// sigma_{t+1}] of the Lagrange basis polynomial for current_order, with the
// integrand evaluated in float32 as diffusers does with torch scalars.
func (s *lms) lmsCoefficient(order, t, cur int) float64 {
	sig := s.sigmas
	f := func(tau float64) float64 {
		prod := float32(1)
		tau32 := float32(tau)
		for k := 0; k < order; k++ {
			if k == cur {
				continue
			}
			prod *= (tau32 - sig[t-k]) / (sig[t-cur] - sig[t-k])
		}
		return float64(prod)
	}
	return quadGK21(f, float64(sig[t]), float64(sig[t+1]))
}

func (s *lms) Step(modelOutput []float32, t float64, sample []float32, shape []int, _ *torchrand.Generator) ([]float32, error) {
	if err := checkShapes(s.class, shape, modelOutput, sample); err != nil {
		return nil, err
	}
	if err := s.initStepIndex(t, false); err != nil {
		return nil, err
	}
	if s.stepIndex+1 >= len(s.sigmas) {
		return nil, fmt.Errorf("%s: step %d is past the end of the schedule", s.class, s.stepIndex)
	}
	const maxOrder = 4
	sigma := s.sigmas[s.stepIndex]
	x0, err := x0FromSigma(s.class, s.prediction, sigma, sample, modelOutput)
	if err != nil {
		return nil, err
	}
	d := make([]float32, len(sample))
	for i := range d {
		d[i] = (sample[i] - x0[i]) / sigma
	}
	s.derivatives = append(s.derivatives, d)
	if len(s.derivatives) > maxOrder {
		s.derivatives = s.derivatives[1:]
	}
	order := min(s.stepIndex+1, maxOrder)
	coeffs := make([]float32, order)
	for c := range coeffs {
		coeffs[c] = float32(s.lmsCoefficient(order, s.stepIndex, c))
	}
	sum := make([]float32, len(sample))
	for c := 0; c < order && c < len(s.derivatives); c++ {
		der := s.derivatives[len(s.derivatives)-1-c]
		for i := range sum {
			sum[i] += float32(coeffs[c] * der[i])
		}
	}
	out := make([]float32, len(sample))
	for i := range out {
		out[i] = sample[i] + sum[i]
	}
	s.stepIndex++
	return out, nil
}

func (s *lms) AddNoise(original, noise []float32, shape []int, t float64) ([]float32, error) {
	i, err := s.noiseStepIndex(t, false)
	if err != nil {
		return nil, err
	}
	return addNoiseSigma(s.class, original, noise, shape, s.sigmas[i])
}

// ---- Heun ----------------------------------------------------------------------

type heun struct {
	base
	sigmaDiscrete
	clipSample bool
	clipRange  float64
	// second-order state
	prevDerivative []float32
	dt             float32
	haveDt         bool
	prevSample     []float32
}

func newHeun(class string, cfg Config) (Scheduler, error) {
	r := &cfgReader{class: class, cfg: cfg}
	s := &heun{base: newBase(class, cfg)}
	s.sigmaDiscrete = readSigmaDiscrete(r, class, false, []string{"linear", "scaled_linear", "squaredcos_cap_v2", "exp"})
	r.oneOf("prediction_type", s.prediction, "epsilon", "v_prediction", "sample")
	s.clipSample = r.bool("clip_sample")
	s.clipRange = r.float("clip_sample_range")
	if r.err != nil {
		return nil, r.err
	}
	if err := s.SetTimesteps(s.numTrain); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *heun) InitNoiseSigma() float64 { return s.initNoiseSigma() }

func (s *heun) ScaleModelInput(sample []float32, t float64) ([]float32, error) {
	if err := s.initStepIndex(t, false); err != nil {
		return nil, err
	}
	return scaleBySigma(sample, s.sigmas[s.stepIndex]), nil
}

func (s *heun) SetTimesteps(n int) error {
	return s.SetTimestepsWith(TimestepOptions{NumInferenceSteps: n})
}

// SetTimestepsWith accepts a step count or custom timesteps.
func (s *heun) SetTimestepsWith(o TimestepOptions) error {
	if (o.NumInferenceSteps == 0) == (o.Timesteps == nil) {
		return fmt.Errorf("%s: pass exactly one of num_inference_steps or custom timesteps", s.class)
	}
	if o.Sigmas != nil {
		return fmt.Errorf("%s: custom sigmas are not supported", s.class)
	}
	if o.Timesteps != nil && s.sigmaKind != "" {
		return fmt.Errorf("%s: custom timesteps cannot be used with use_%s_sigmas", s.class, s.sigmaKind)
	}
	n := o.NumInferenceSteps
	var ts []float64
	if o.Timesteps != nil {
		n = len(o.Timesteps)
		ts = f32Values(o.Timesteps)
	} else {
		if n < 1 {
			return fmt.Errorf("%s: num_inference_steps %d must be at least 1", s.class, n)
		}
		var err error
		ts, err = floatSpacedTimesteps(s.spacing, s.numTrain, n, s.stepsOffset)
		if err != nil {
			return fmt.Errorf("%s: %w", s.class, err)
		}
	}
	s.numInfer = n
	sig := interpSigmas(ts, s.trainSigmas)
	if cs, cts, ok := s.convertSigmas(sig, n); ok {
		sig, ts = cs, cts
	}
	sig32 := append(toF32(sig), 0)
	// cat([s[:1], s[1:-1].repeat_interleave(2), s[-1:]])
	s.sigmas = repeatInterior32(sig32)
	ts32 := f32Values(ts)
	s.timesteps = []float64{ts32[0]}
	for _, t := range ts32[1:] {
		s.timesteps = append(s.timesteps, t, t)
	}
	s.prevDerivative, s.haveDt, s.prevSample = nil, false, nil
	s.resetIndices()
	return nil
}

// repeatInterior32 is cat([x[:1], x[1:-1].repeat_interleave(2), x[-1:]]).
func repeatInterior32(x []float32) []float32 {
	out := []float32{x[0]}
	for _, v := range x[1 : len(x)-1] {
		out = append(out, v, v)
	}
	return append(out, x[len(x)-1])
}

func (s *heun) Step(modelOutput []float32, t float64, sample []float32, shape []int, _ *torchrand.Generator) ([]float32, error) {
	if err := checkShapes(s.class, shape, modelOutput, sample); err != nil {
		return nil, err
	}
	if err := s.initStepIndex(t, false); err != nil {
		return nil, err
	}
	first := !s.haveDt
	var sigma, sigmaNext float32
	if first {
		if s.stepIndex+1 >= len(s.sigmas) {
			return nil, fmt.Errorf("%s: step %d is past the end of the schedule", s.class, s.stepIndex)
		}
		sigma, sigmaNext = s.sigmas[s.stepIndex], s.sigmas[s.stepIndex+1]
	} else {
		if err := historyErr(s.class, s.stepIndex, 1); err != nil {
			return nil, err
		}
		sigma, sigmaNext = s.sigmas[s.stepIndex-1], s.sigmas[s.stepIndex]
	}
	sigmaHat := sigma * 1 // gamma = 0
	sigmaInput := sigmaHat
	if !first {
		sigmaInput = sigmaNext
	}
	x0, err := x0FromSigma(s.class, s.prediction, sigmaInput, sample, modelOutput)
	if err != nil {
		return nil, err
	}
	if s.clipSample {
		x0 = clampF32(x0, s.clipRange)
	}
	out := make([]float32, len(sample))
	if first {
		der := make([]float32, len(sample))
		for i := range der {
			der[i] = (sample[i] - x0[i]) / sigmaHat
		}
		dt := sigmaNext - sigmaHat
		s.prevDerivative, s.dt, s.haveDt, s.prevSample = der, dt, true, sample
		for i := range out {
			out[i] = sample[i] + float32(der[i]*dt)
		}
	} else {
		dt, base := s.dt, s.prevSample
		for i := range out {
			d := (sample[i] - x0[i]) / sigmaNext
			d = (s.prevDerivative[i] + d) / 2
			out[i] = base[i] + float32(d*dt)
		}
		s.prevDerivative, s.haveDt, s.prevSample = nil, false, nil
	}
	s.stepIndex++
	return out, nil
}

func (s *heun) AddNoise(original, noise []float32, shape []int, t float64) ([]float32, error) {
	i, err := s.noiseStepIndex(t, false)
	if err != nil {
		return nil, err
	}
	return addNoiseSigma(s.class, original, noise, shape, s.sigmas[i])
}
