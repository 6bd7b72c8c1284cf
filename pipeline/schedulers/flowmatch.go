package schedulers

// FlowMatchEulerDiscreteScheduler and FlowMatchHeunDiscreteScheduler for
// rectified-flow models (SD3, Flux, ...; Esser et al. 2024), following
// diffusers' scheduling_flow_match_euler_discrete.py and
// scheduling_flow_match_heun_discrete.py. Sigmas run from ~1 (noise) to 0
// and the model predicts the velocity; t = sigma * num_train_timesteps.

import (
	"fmt"
	"math"

	"github.com/tputool/tputool/pipeline/torchrand"
)

type flowMatch struct {
	base
	heun            bool
	numTrain        int
	shift           float64
	dynamicShifting bool
	baseShift       float64
	maxShift        float64
	baseSeqLen      int
	maxSeqLen       int
	invertSigmas    bool
	shiftTerminal   float64
	sigmaKind       string
	timeShiftType   string
	stochastic      bool
	bounds          sigmaBounds
	sigmas          []float32
	sigmaMin        float64
	sigmaMax        float64

	// Heun second-order state.
	prevDerivative []float32
	dt             float32
	haveDt         bool
	prevSample     []float32
}

func newFlowMatch(class string, cfg Config) (Scheduler, error) {
	r := &cfgReader{class: class, cfg: cfg}
	s := &flowMatch{base: newBase(class, cfg), heun: class == "FlowMatchHeunDiscreteScheduler"}
	s.numTrain = r.int("num_train_timesteps")
	s.shift = r.float("shift")
	has := func(k string) bool { _, ok := cfg[k]; return ok }
	if !s.heun {
		s.dynamicShifting = r.bool("use_dynamic_shifting")
		if v, ok := r.optFloat("base_shift"); ok {
			s.baseShift = v
		}
		if v, ok := r.optFloat("max_shift"); ok {
			s.maxShift = v
		}
		s.baseSeqLen = r.int("base_image_seq_len")
		s.maxSeqLen = r.int("max_image_seq_len")
		s.invertSigmas = r.bool("invert_sigmas")
		if v, ok := r.optFloat("shift_terminal"); ok {
			s.shiftTerminal = v
		}
		kinds := 0
		for _, k := range []string{"karras", "exponential", "beta"} {
			if r.bool("use_" + k + "_sigmas") {
				s.sigmaKind = k
				kinds++
			}
		}
		if kinds > 1 {
			r.invalid("only one of use_beta_sigmas, use_exponential_sigmas, use_karras_sigmas can be used")
		}
		s.timeShiftType = r.str("time_shift_type")
		r.oneOf("time_shift_type", s.timeShiftType, "exponential", "linear")
		s.stochastic = r.bool("stochastic_sampling")
		if has("sigma_min") || has("sigma_max") {
			s.bounds = readSigmaBounds(r)
		}
	}
	if r.err != nil {
		return nil, r.err
	}
	if s.numTrain < 1 {
		return nil, fmt.Errorf("%s config: num_train_timesteps %d must be at least 1", class, s.numTrain)
	}
	N := s.numTrain
	lin := f32Values(reversed64(npLinspace(1, float64(N), N, true)))
	s.sigmas = make([]float32, N)
	s.timesteps = make([]float64, N)
	sh := float32(s.shift)
	for i, t := range lin {
		sg := float32(t) / float32(N)
		if !s.dynamicShifting {
			sg = float32(sh*sg) / (1 + float32((sh-1)*sg))
		}
		s.sigmas[i] = sg
		s.timesteps[i] = float64(sg * float32(N))
	}
	s.sigmaMin = float64(s.sigmas[N-1])
	s.sigmaMax = float64(s.sigmas[0])
	return s, nil
}

func (s *flowMatch) InitNoiseSigma() float64 { return 1 }

// ScaleModelInput is the identity: flow-matching models take the sample as
// is (the Python classes have no scale_model_input).
func (s *flowMatch) ScaleModelInput(sample []float32, t float64) ([]float32, error) {
	return sample, nil
}

func (s *flowMatch) Sigmas() []float64 { return toF64(s.sigmas) }

// Mu returns the dynamic-shifting mu for an image sequence length, as the
// Flux/SD3 pipelines compute it (calculate_shift): a line through
// (base_image_seq_len, base_shift) and (max_image_seq_len, max_shift).
func (s *flowMatch) Mu(imageSeqLen int) float64 {
	m := (s.maxShift - s.baseShift) / float64(s.maxSeqLen-s.baseSeqLen)
	b := s.baseShift - m*float64(s.baseSeqLen)
	return float64(imageSeqLen)*m + b
}

func (s *flowMatch) SetTimesteps(n int) error {
	return s.SetTimestepsWith(TimestepOptions{NumInferenceSteps: n})
}

// SetTimestepsWith accepts a step count, custom sigmas and/or timesteps, and
// mu (required with use_dynamic_shifting).
func (s *flowMatch) SetTimestepsWith(o TimestepOptions) error {
	if s.heun {
		if o.Sigmas != nil || o.Timesteps != nil || o.Mu != nil {
			return fmt.Errorf("%s: only num_inference_steps is supported", s.class)
		}
		return s.setHeun(o.NumInferenceSteps)
	}
	if s.dynamicShifting && o.Mu == nil {
		return fmt.Errorf("%s: mu must be given when use_dynamic_shifting is set", s.class)
	}
	if o.Sigmas != nil && o.Timesteps != nil && len(o.Sigmas) != len(o.Timesteps) {
		return fmt.Errorf("%s: custom sigmas and timesteps must have the same length", s.class)
	}
	n := o.NumInferenceSteps
	if n != 0 {
		if (o.Sigmas != nil && len(o.Sigmas) != n) || (o.Timesteps != nil && len(o.Timesteps) != n) {
			return fmt.Errorf("%s: custom sigmas/timesteps must have num_inference_steps (%d) entries", s.class, n)
		}
	} else if o.Sigmas != nil {
		n = len(o.Sigmas)
	} else {
		n = len(o.Timesteps)
	}
	if n < 1 {
		return fmt.Errorf("%s: need at least one inference step", s.class)
	}
	N := float64(s.numTrain)
	// f32 tracks numpy's dtype: float32 when custom values were given.
	var sig []float64
	f32 := false
	switch {
	case o.Sigmas != nil:
		sig = f32Values(o.Sigmas)
		f32 = true
	case o.Timesteps != nil:
		ts := f32Values(o.Timesteps)
		sig = make([]float64, n)
		for i, t := range ts {
			sig[i] = float64(float32(t) / float32(N))
		}
		f32 = true
	default:
		ts := npLinspace(s.sigmaMax*N, s.sigmaMin*N, n, true)
		sig = make([]float64, n)
		for i, t := range ts {
			sig[i] = t / N
		}
	}
	if s.dynamicShifting {
		sig = s.timeShift(*o.Mu, 1.0, sig, f32)
	} else {
		for i, v := range sig {
			if f32 {
				x, sh := float32(v), float32(s.shift)
				sig[i] = float64(float32(sh*x) / (1 + float32((sh-1)*x)))
			} else {
				sig[i] = s.shift * v / (1 + (s.shift-1)*v)
			}
		}
	}
	if s.shiftTerminal != 0 {
		sig = stretchToTerminal(sig, s.shiftTerminal)
		if f32 {
			sig = f32Values(sig)
		}
	}
	if s.sigmaKind != "" {
		lo, hi := s.bounds.of(sig)
		sig = spacedSigmas(s.sigmaKind, lo, hi, n)
	}
	sig32 := toF32(sig)
	ts := make([]float64, len(sig32))
	nt := float32(s.numTrain)
	for i, v := range sig32 {
		if s.invertSigmas {
			sig32[i] = 1 - v
		}
		ts[i] = float64(sig32[i] * nt)
	}
	end := float32(0)
	if s.invertSigmas {
		end = 1
	}
	s.sigmas = append(sig32, end)
	s.timesteps = ts
	s.numInfer = n
	s.resetIndices()
	return nil
}

// timeShift is _time_shift_exponential / _time_shift_linear.
func (s *flowMatch) timeShift(mu, sigma float64, t []float64, f32 bool) []float64 {
	if !f32 {
		return timeShift(s.timeShiftType, mu, sigma, t)
	}
	out := make([]float64, len(t))
	em := float32(math.Exp(mu))
	m := float32(mu)
	for i, v := range t {
		p := pow32(1/float32(v)-1, float32(sigma))
		if s.timeShiftType == "linear" {
			out[i] = float64(m / (m + p))
		} else {
			out[i] = float64(em / (em + p))
		}
	}
	return out
}

func (s *flowMatch) setHeun(n int) error {
	if n < 1 {
		return fmt.Errorf("%s: num_inference_steps %d must be at least 1", s.class, n)
	}
	N := float64(s.numTrain)
	ts := npLinspace(s.sigmaMax*N, s.sigmaMin*N, n, true)
	sig := make([]float32, n)
	for i, t := range ts {
		v := t / N
		sig[i] = float32(s.shift * v / (1 + (s.shift-1)*v))
	}
	nt := float32(s.numTrain)
	s.timesteps = []float64{float64(sig[0] * nt)}
	for _, v := range sig[1:] {
		t := float64(v * nt)
		s.timesteps = append(s.timesteps, t, t)
	}
	s.sigmas = repeatInterior32(append(sig, 0))
	s.prevDerivative, s.haveDt, s.prevSample = nil, false, nil
	s.numInfer = n
	s.resetIndices()
	return nil
}

func (s *flowMatch) Step(modelOutput []float32, t float64, sample []float32, shape []int, gen *torchrand.Generator) ([]float32, error) {
	return s.StepWithOptions(modelOutput, t, sample, shape, gen, StepOptions{})
}

func (s *flowMatch) StepWithOptions(modelOutput []float32, t float64, sample []float32, shape []int, gen *torchrand.Generator, opts StepOptions) ([]float32, error) {
	if err := checkShapes(s.class, shape, modelOutput, sample); err != nil {
		return nil, err
	}
	if err := s.initStepIndex(t, false); err != nil {
		return nil, err
	}
	if s.heun {
		return s.stepHeun(modelOutput, sample, shape, gen, opts)
	}
	i := s.stepIndex
	if i+1 >= len(s.sigmas) {
		return nil, fmt.Errorf("%s: step %d is past the end of the schedule", s.class, i)
	}
	sigma, next := s.sigmas[i], s.sigmas[i+1]
	out := make([]float32, len(sample))
	if s.stochastic {
		noise := noiseLike(gen, shape)
		for j := range out {
			x0 := sample[j] - float32(sigma*modelOutput[j])
			out[j] = float32((1-next)*x0) + float32(next*noise[j])
		}
	} else {
		dt := next - sigma
		for j := range out {
			out[j] = sample[j] + float32(dt*modelOutput[j])
		}
	}
	s.stepIndex++
	return out, nil
}

func (s *flowMatch) stepHeun(modelOutput, sample []float32, shape []int, gen *torchrand.Generator, opts StepOptions) ([]float32, error) {
	first := !s.haveDt
	i := s.stepIndex
	var sigma, next float32
	if first {
		if i+1 >= len(s.sigmas) {
			return nil, fmt.Errorf("%s: step %d is past the end of the schedule", s.class, i)
		}
		sigma, next = s.sigmas[i], s.sigmas[i+1]
	} else {
		if err := historyErr(s.class, i, 1); err != nil {
			return nil, err
		}
		sigma, next = s.sigmas[i-1], s.sigmas[i]
	}
	sigmaHat, sample := churn(opts, sigma, len(s.sigmas), sample, shape, gen)
	out := make([]float32, len(sample))
	if first {
		der := make([]float32, len(sample))
		for j := range der {
			denoised := sample[j] - float32(modelOutput[j]*sigma)
			der[j] = (sample[j] - denoised) / sigmaHat
		}
		dt := next - sigmaHat
		s.prevDerivative, s.dt, s.haveDt, s.prevSample = der, dt, true, sample
		for j := range out {
			out[j] = sample[j] + float32(der[j]*dt)
		}
	} else {
		for j := range out {
			denoised := sample[j] - float32(modelOutput[j]*next)
			d := (sample[j] - denoised) / next
			d = 0.5 * (s.prevDerivative[j] + d)
			out[j] = s.prevSample[j] + float32(d*s.dt)
		}
		s.prevDerivative, s.haveDt, s.prevSample = nil, false, nil
	}
	s.stepIndex++
	return out, nil
}

// AddNoise is scale_noise: sigma * noise + (1 - sigma) * sample.
func (s *flowMatch) AddNoise(original, noise []float32, shape []int, t float64) ([]float32, error) {
	if err := checkShapes(s.class, shape, original, noise); err != nil {
		return nil, err
	}
	var idx int
	if s.heun {
		if err := s.initStepIndex(t, false); err != nil {
			return nil, err
		}
		idx = s.stepIndex
	} else {
		var err error
		if idx, err = s.noiseStepIndex(t, false); err != nil {
			return nil, err
		}
	}
	sigma := s.sigmas[idx]
	out := make([]float32, len(original))
	for j := range out {
		out[j] = float32(sigma*noise[j]) + float32((1-sigma)*original[j])
	}
	return out, nil
}
