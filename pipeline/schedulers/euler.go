package schedulers

// EulerDiscreteScheduler and EulerAncestralDiscreteScheduler (Karras et al.
// 2022, Algorithm 2; k-diffusion's sample_euler / sample_euler_ancestral),
// following diffusers' scheduling_euler_discrete.py and
// scheduling_euler_ancestral_discrete.py.

import (
	"fmt"

	"github.com/tputool/tputool/pipeline/torchrand"
)

type euler struct {
	base
	sigmaDiscrete
	ancestral     bool
	interpolation string
	continuous    bool // timestep_type continuous with v_prediction
	finalSigmas   string
}

func newEuler(class string, cfg Config) (Scheduler, error) {
	r := &cfgReader{class: class, cfg: cfg}
	s := &euler{base: newBase(class, cfg), ancestral: class == "EulerAncestralDiscreteScheduler"}
	s.sigmaDiscrete = readSigmaDiscrete(r, class, true, []string{"linear", "scaled_linear", "squaredcos_cap_v2"})
	if s.ancestral {
		r.oneOf("prediction_type", s.prediction, "epsilon", "v_prediction")
	} else {
		r.oneOf("prediction_type", s.prediction, "epsilon", "v_prediction", "sample", "original_sample")
		s.interpolation = r.str("interpolation_type")
		r.oneOf("interpolation_type", s.interpolation, "linear", "log_linear")
		tt := r.str("timestep_type")
		r.oneOf("timestep_type", tt, "discrete", "continuous")
		s.continuous = tt == "continuous" && s.prediction == "v_prediction"
		s.finalSigmas = r.str("final_sigmas_type")
		r.oneOf("final_sigmas_type", s.finalSigmas, "zero", "sigma_min")
	}
	if r.err != nil {
		return nil, r.err
	}
	n := s.numTrain
	// __init__: sigmas = flip(train sigmas) + [0]; timesteps = N-1 .. 0.
	s.sigmas = make([]float32, n+1)
	for i := 0; i < n; i++ {
		s.sigmas[i] = s.trainSigmas[n-1-i]
	}
	s.timesteps = make([]float64, n)
	for i := range s.timesteps {
		s.timesteps[i] = float64(n - 1 - i)
	}
	if s.continuous {
		for i := 0; i < n; i++ {
			s.timesteps[i] = float64(0.25 * log32(s.sigmas[i]))
		}
	}
	return s, nil
}

func (s *euler) InitNoiseSigma() float64 { return s.initNoiseSigma() }

func (s *euler) ScaleModelInput(sample []float32, t float64) ([]float32, error) {
	if err := s.initStepIndex(t, false); err != nil {
		return nil, err
	}
	return scaleBySigma(sample, s.sigmas[s.stepIndex]), nil
}

func (s *euler) SetTimesteps(n int) error {
	return s.SetTimestepsWith(TimestepOptions{NumInferenceSteps: n})
}

// SetTimestepsWith accepts a step count, custom timesteps or (Euler only)
// custom sigmas.
func (s *euler) SetTimestepsWith(o TimestepOptions) error {
	if s.ancestral {
		if o.Timesteps != nil || o.Sigmas != nil {
			return fmt.Errorf("%s: custom timesteps or sigmas are not supported", s.class)
		}
		return s.setAncestral(o.NumInferenceSteps)
	}
	if o.Timesteps != nil && o.Sigmas != nil {
		return fmt.Errorf("%s: pass only one of custom timesteps or sigmas", s.class)
	}
	given := 0
	for _, b := range []bool{o.NumInferenceSteps != 0, o.Timesteps != nil, o.Sigmas != nil} {
		if b {
			given++
		}
	}
	if given != 1 {
		return fmt.Errorf("%s: pass exactly one of num_inference_steps, timesteps or sigmas", s.class)
	}
	if o.Timesteps != nil && s.sigmaKind != "" {
		return fmt.Errorf("%s: custom timesteps cannot be used with use_%s_sigmas", s.class, s.sigmaKind)
	}
	if o.Timesteps != nil && s.continuous {
		return fmt.Errorf("%s: custom timesteps cannot be used with continuous timesteps and v_prediction", s.class)
	}
	n := o.NumInferenceSteps
	switch {
	case o.Timesteps != nil:
		n = len(o.Timesteps)
	case o.Sigmas != nil:
		n = len(o.Sigmas) - 1
	}
	if n < 1 {
		return fmt.Errorf("%s: need at least one inference step", s.class)
	}
	var sigmas []float32
	var ts []float64
	if o.Sigmas != nil {
		sigmas = toF32(o.Sigmas)
		ts = make([]float64, len(sigmas)-1)
		for i := range ts {
			ts[i] = sigmaToTNumpyF32(sigmas[i], s.logSigmas)
		}
	} else {
		if o.Timesteps != nil {
			ts = f32Values(o.Timesteps)
		} else {
			var err error
			ts, err = floatSpacedTimesteps(s.spacing, s.numTrain, n, s.stepsOffset)
			if err != nil {
				return fmt.Errorf("%s: %w", s.class, err)
			}
		}
		var sig []float64
		switch s.interpolation {
		case "linear":
			sig = interpSigmas(ts, s.trainSigmas)
		case "log_linear":
			l := torchLinspaceF32(float64(log32(s.trainSigmas[len(s.trainSigmas)-1])), float64(log32(s.trainSigmas[0])), n+1)
			sig = make([]float64, len(l))
			for i, v := range l {
				sig[i] = float64(exp32(v))
			}
		}
		if cs, cts, ok := s.convertSigmas(sig, n); ok {
			sig, ts = cs, cts
		}
		last := float32(0)
		if s.finalSigmas == "sigma_min" {
			last = sqrt32((1 - s.acp[0]) / s.acp[0])
		}
		sigmas = append(toF32(sig), last)
	}
	s.sigmas = sigmas
	if s.continuous {
		ts = make([]float64, len(sigmas)-1)
		for i := range ts {
			ts[i] = float64(0.25 * log32(sigmas[i]))
		}
	} else {
		ts = f32Values(ts)
	}
	s.timesteps = ts
	s.numInfer = n
	s.resetIndices()
	return nil
}

func (s *euler) setAncestral(n int) error {
	if n < 1 {
		return fmt.Errorf("%s: num_inference_steps %d must be at least 1", s.class, n)
	}
	ts, err := floatSpacedTimesteps(s.spacing, s.numTrain, n, s.stepsOffset)
	if err != nil {
		return fmt.Errorf("%s: %w", s.class, err)
	}
	s.sigmas = append(toF32(interpSigmas(ts, s.trainSigmas)), 0)
	s.timesteps = ts
	s.numInfer = n
	s.resetIndices()
	return nil
}

func (s *euler) Step(modelOutput []float32, t float64, sample []float32, shape []int, gen *torchrand.Generator) ([]float32, error) {
	return s.StepWithOptions(modelOutput, t, sample, shape, gen, StepOptions{})
}

func (s *euler) StepWithOptions(modelOutput []float32, t float64, sample []float32, shape []int, gen *torchrand.Generator, opts StepOptions) ([]float32, error) {
	if err := checkShapes(s.class, shape, modelOutput, sample); err != nil {
		return nil, err
	}
	if err := s.initStepIndex(t, false); err != nil {
		return nil, err
	}
	if s.stepIndex+1 >= len(s.sigmas) {
		return nil, fmt.Errorf("%s: step %d is past the end of the schedule", s.class, s.stepIndex)
	}
	if s.ancestral {
		return s.stepAncestral(modelOutput, sample, shape, gen)
	}
	sigma := s.sigmas[s.stepIndex]
	sigmaHat, sample := churn(opts, sigma, len(s.sigmas), sample, shape, gen)
	mode := s.prediction
	var x0 []float32
	var err error
	if mode == "v_prediction" {
		x0, err = x0FromSigma(s.class, mode, sigma, sample, modelOutput)
	} else {
		x0, err = x0FromSigma(s.class, mode, sigmaHat, sample, modelOutput)
	}
	if err != nil {
		return nil, err
	}
	dt := s.sigmas[s.stepIndex+1] - sigmaHat
	out := make([]float32, len(sample))
	for i := range out {
		d := (sample[i] - x0[i]) / sigmaHat
		out[i] = sample[i] + float32(d*dt)
	}
	s.stepIndex++
	return out, nil
}

func (s *euler) stepAncestral(modelOutput, sample []float32, shape []int, gen *torchrand.Generator) ([]float32, error) {
	sigma := s.sigmas[s.stepIndex]
	x0, err := x0FromSigma(s.class, s.prediction, sigma, sample, modelOutput)
	if err != nil {
		return nil, err
	}
	sFrom, sTo := sigma, s.sigmas[s.stepIndex+1]
	sigmaUp := sqrt32(sq32(sTo) * (sq32(sFrom) - sq32(sTo)) / sq32(sFrom))
	sigmaDown := sqrt32(sq32(sTo) - sq32(sigmaUp))
	dt := sigmaDown - sigma
	noise := noiseLike(gen, shape)
	out := make([]float32, len(sample))
	for i := range out {
		d := (sample[i] - x0[i]) / sigma
		v := sample[i] + float32(d*dt)
		out[i] = v + float32(noise[i]*sigmaUp)
	}
	s.stepIndex++
	return out, nil
}

func (s *euler) AddNoise(original, noise []float32, shape []int, t float64) ([]float32, error) {
	i, err := s.noiseStepIndex(t, false)
	if err != nil {
		return nil, err
	}
	return addNoiseSigma(s.class, original, noise, shape, s.sigmas[i])
}

// sigmaToTNumpyF32 is _sigma_to_t for a numpy float32 sigma (custom sigmas):
// the log and interpolation weight are float32 and the final blend is in
// float64 (np.float32 times np.int64 promotes to float64).
func sigmaToTNumpyF32(sigma float32, logSigmas []float32) float64 {
	logSigma := log32(max(sigma, float32(1e-10)))
	lowIdx := lowIndex(len(logSigmas), func(i int) bool { return logSigma-logSigmas[i] >= 0 })
	low, high := logSigmas[lowIdx], logSigmas[lowIdx+1]
	w := (low - logSigma) / (low - high)
	if w < 0 {
		w = 0
	} else if w > 1 {
		w = 1
	}
	return float64(1-w)*float64(lowIdx) + float64(w)*float64(lowIdx+1)
}
