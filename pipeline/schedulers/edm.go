package schedulers

// EDMEulerScheduler and EDMDPMSolverMultistepScheduler (Karras et al. 2022,
// "Elucidating the Design Space of Diffusion-Based Generative Models"),
// following diffusers' scheduling_edm_euler.py and
// scheduling_edm_dpmsolver_multistep.py. Timesteps are the EDM noise
// conditioning c_noise = 0.25 * log(sigma) and the model output is
// preconditioned with c_skip/c_out.

import (
	"fmt"
	"math"
	"slices"

	"github.com/tputool/tputool/pipeline/torchrand"
)

type edmParams struct {
	sigmaMin, sigmaMax, sigmaData, rho float64
	schedule, prediction, finalType    string
	numTrain                           int
}

func readEDM(r *cfgReader, predictions ...string) edmParams {
	var p edmParams
	p.sigmaMin = r.float("sigma_min")
	p.sigmaMax = r.float("sigma_max")
	p.sigmaData = r.float("sigma_data")
	p.rho = r.float("rho")
	p.schedule = r.str("sigma_schedule")
	r.oneOf("sigma_schedule", p.schedule, "karras", "exponential")
	p.prediction = r.str("prediction_type")
	r.oneOf("prediction_type", p.prediction, predictions...)
	p.finalType = r.str("final_sigmas_type")
	r.oneOf("final_sigmas_type", p.finalType, "zero", "sigma_min")
	p.numTrain = r.int("num_train_timesteps")
	return p
}

// torchLinspaceF64 is torch.linspace in float64 on the CPU.
func torchLinspaceF64(start, end float64, n int) []float64 {
	out := make([]float64, n)
	if n == 1 {
		out[0] = start
		return out
	}
	step := (end - start) / float64(n-1)
	half := n / 2
	for i := range out {
		if i < half {
			out[i] = start + step*float64(i)
		} else {
			out[i] = end - step*float64(n-i-1)
		}
	}
	return out
}

// sigmasF64 is _compute_karras_sigmas / _compute_exponential_sigmas on a
// float64 ramp (EDM Euler), rounded to float32.
func (p edmParams) sigmasF64(ramp []float64) []float32 {
	out := make([]float32, len(ramp))
	if p.schedule == "exponential" {
		l := torchLinspaceF32(math.Log(p.sigmaMin), math.Log(p.sigmaMax), len(ramp))
		for i := range l {
			out[len(l)-1-i] = exp32(l[i])
		}
		return out
	}
	minInv := math.Pow(p.sigmaMin, 1/p.rho)
	maxInv := math.Pow(p.sigmaMax, 1/p.rho)
	for i, r := range ramp {
		out[i] = float32(math.Pow(maxInv+r*(minInv-maxInv), p.rho))
	}
	return out
}

// sigmasF32 is the same on a float32 ramp (EDM DPM-Solver).
func (p edmParams) sigmasF32(ramp []float32) []float32 {
	out := make([]float32, len(ramp))
	if p.schedule == "exponential" {
		l := torchLinspaceF32(math.Log(p.sigmaMin), math.Log(p.sigmaMax), len(ramp))
		for i := range l {
			out[len(l)-1-i] = exp32(l[i])
		}
		return out
	}
	minInv := math.Pow(p.sigmaMin, 1/p.rho)
	maxInv := math.Pow(p.sigmaMax, 1/p.rho)
	d := float32(minInv - maxInv)
	mx := float32(maxInv)
	for i, r := range ramp {
		out[i] = pow32(mx+float32(r*d), float32(p.rho))
	}
	return out
}

// cNoise is precondition_noise: 0.25 * log(sigma).
func cNoise(sigmas []float32) []float64 {
	out := make([]float64, len(sigmas))
	for i, s := range sigmas {
		out[i] = float64(0.25 * log32(s))
	}
	return out
}

// preconditionOutputs is c_skip * sample + c_out * model_output.
func (p edmParams) preconditionOutputs(sample, modelOutput []float32, sigma float32) []float32 {
	sd2 := float32(p.sigmaData * p.sigmaData)
	sd := float32(p.sigmaData)
	cSkip := sd2 / (sq32(sigma) + sd2)
	cOut := sigma * sd / sqrt32(sq32(sigma)+sd2)
	if p.prediction == "v_prediction" {
		cOut = -sigma * sd / sqrt32(sq32(sigma)+sd2)
	}
	out := make([]float32, len(sample))
	for i := range out {
		out[i] = float32(cSkip*sample[i]) + float32(cOut*modelOutput[i])
	}
	return out
}

// preconditionInputs is sample * c_in with c_in = 1/sqrt(sigma^2 + sigma_data^2).
func (p edmParams) preconditionInputs(sample []float32, sigma float32) []float32 {
	cIn := 1 / sqrt32(sq32(sigma)+float32(p.sigmaData*p.sigmaData))
	out := make([]float32, len(sample))
	for i, v := range sample {
		out[i] = v * cIn
	}
	return out
}

// ---- EDMEulerScheduler -------------------------------------------------------

type edmEuler struct {
	base
	edmParams
	sigmas []float32
}

func newEDMEuler(class string, cfg Config) (Scheduler, error) {
	r := &cfgReader{class: class, cfg: cfg}
	s := &edmEuler{base: newBase(class, cfg)}
	s.edmParams = readEDM(r, "epsilon", "v_prediction")
	if r.err != nil {
		return nil, r.err
	}
	if s.numTrain < 1 {
		return nil, fmt.Errorf("%s config: num_train_timesteps %d must be at least 1", class, s.numTrain)
	}
	ramp := make([]float64, s.numTrain+1)
	for i := range ramp {
		ramp[i] = float64(i) / float64(s.numTrain)
	}
	s.setSigmas(s.sigmasF64(ramp))
	return s, nil
}

func (s *edmEuler) setSigmas(sig []float32) {
	s.timesteps = cNoise(sig)
	last := float32(0)
	if s.finalType == "sigma_min" {
		last = sig[len(sig)-1]
	}
	s.sigmas = append(sig, last)
}

func (s *edmEuler) InitNoiseSigma() float64 { return math.Sqrt(s.sigmaMax*s.sigmaMax + 1) }

func (s *edmEuler) Sigmas() []float64 { return toF64(s.sigmas) }

func (s *edmEuler) ScaleModelInput(sample []float32, t float64) ([]float32, error) {
	if err := s.initStepIndex(t, false); err != nil {
		return nil, err
	}
	return s.preconditionInputs(sample, s.sigmas[s.stepIndex]), nil
}

func (s *edmEuler) SetTimesteps(n int) error {
	return s.SetTimestepsWith(TimestepOptions{NumInferenceSteps: n})
}

// SetTimestepsWith accepts a step count or, as Sigmas, a custom ramp in
// [0, 1] (diffusers passes its `sigmas` argument through the sigma schedule).
func (s *edmEuler) SetTimestepsWith(o TimestepOptions) error {
	if o.Timesteps != nil || o.Mu != nil {
		return fmt.Errorf("%s: custom timesteps and mu are not supported", s.class)
	}
	var ramp []float64
	if o.Sigmas != nil {
		ramp = slices.Clone(o.Sigmas)
	} else {
		if o.NumInferenceSteps < 1 {
			return fmt.Errorf("%s: num_inference_steps %d must be at least 1", s.class, o.NumInferenceSteps)
		}
		ramp = torchLinspaceF64(0, 1, o.NumInferenceSteps)
	}
	s.setSigmas(s.sigmasF64(ramp))
	s.numInfer = len(ramp)
	s.resetIndices()
	return nil
}

func (s *edmEuler) Step(modelOutput []float32, t float64, sample []float32, shape []int, gen *torchrand.Generator) ([]float32, error) {
	return s.StepWithOptions(modelOutput, t, sample, shape, gen, StepOptions{})
}

func (s *edmEuler) StepWithOptions(modelOutput []float32, t float64, sample []float32, shape []int, gen *torchrand.Generator, opts StepOptions) ([]float32, error) {
	if err := checkShapes(s.class, shape, modelOutput, sample); err != nil {
		return nil, err
	}
	if err := s.initStepIndex(t, false); err != nil {
		return nil, err
	}
	i := s.stepIndex
	if i+1 >= len(s.sigmas) {
		return nil, fmt.Errorf("%s: step %d is past the end of the schedule", s.class, i)
	}
	sigma := s.sigmas[i]
	sigmaHat, sample := churn(opts, sigma, len(s.sigmas), sample, shape, gen)
	x0 := s.preconditionOutputs(sample, modelOutput, sigmaHat)
	dt := s.sigmas[i+1] - sigmaHat
	out := make([]float32, len(sample))
	for j := range out {
		d := (sample[j] - x0[j]) / sigmaHat
		out[j] = sample[j] + float32(d*dt)
	}
	s.stepIndex++
	return out, nil
}

func (s *edmEuler) AddNoise(original, noise []float32, shape []int, t float64) ([]float32, error) {
	i, err := s.noiseStepIndex(t, false)
	if err != nil {
		return nil, err
	}
	return addNoiseSigma(s.class, original, noise, shape, s.sigmas[i])
}

// ---- EDMDPMSolverMultistepScheduler -----------------------------------------

type edmDPM struct {
	base
	edmParams
	sigmas          []float32
	solverOrder     int
	algorithm       string
	solverType      string
	lowerOrderFinal bool
	eulerAtFinal    bool
	thresholding    bool
	threshRatio     float64
	sampleMax       float64
	modelOutputs    [][]float32
	lowerOrderNums  int
}

func newEDMDPM(class string, cfg Config) (Scheduler, error) {
	r := &cfgReader{class: class, cfg: cfg}
	s := &edmDPM{base: newBase(class, cfg)}
	s.edmParams = readEDM(r, "epsilon", "v_prediction")
	s.solverOrder = r.int("solver_order")
	s.thresholding = r.bool("thresholding")
	s.threshRatio = r.float("dynamic_thresholding_ratio")
	s.sampleMax = r.float("sample_max_value")
	s.algorithm = r.str("algorithm_type")
	s.solverType = r.str("solver_type")
	s.lowerOrderFinal = r.bool("lower_order_final")
	s.eulerAtFinal = r.bool("euler_at_final")
	if r.err != nil {
		return nil, r.err
	}
	switch s.algorithm {
	case "dpmsolver++", "sde-dpmsolver++":
	case "deis":
		s.algorithm = "dpmsolver++"
		s.cfg["algorithm_type"] = s.algorithm
	default:
		return nil, r2unsupported(class, "algorithm_type %q", s.algorithm)
	}
	switch s.solverType {
	case "midpoint", "heun":
	case "logrho", "bh1", "bh2":
		s.solverType = "midpoint"
		s.cfg["solver_type"] = s.solverType
	default:
		return nil, r2unsupported(class, "solver_type %q", s.solverType)
	}
	if s.solverOrder < 1 || s.numTrain < 1 {
		return nil, fmt.Errorf("%s config: solver_order and num_train_timesteps must be at least 1", class)
	}
	sig := s.sigmasF32(torchLinspaceF32(0, 1, s.numTrain))
	s.timesteps = cNoise(sig)
	s.sigmas = append(sig, 0)
	s.modelOutputs = make([][]float32, s.solverOrder)
	return s, nil
}

func r2unsupported(class, format string, args ...any) error {
	r := &cfgReader{class: class}
	r.unsupported(format, args...)
	return r.err
}

func (s *edmDPM) InitNoiseSigma() float64 { return math.Sqrt(s.sigmaMax*s.sigmaMax + 1) }

func (s *edmDPM) Sigmas() []float64 { return toF64(s.sigmas) }

func (s *edmDPM) ScaleModelInput(sample []float32, t float64) ([]float32, error) {
	if err := s.initStepIndex(t, true); err != nil {
		return nil, err
	}
	return s.preconditionInputs(sample, s.sigmas[s.stepIndex]), nil
}

func (s *edmDPM) SetTimesteps(n int) error {
	if n < 1 {
		return fmt.Errorf("%s: num_inference_steps %d must be at least 1", s.class, n)
	}
	sig := s.sigmasF32(torchLinspaceF32(0, 1, n))
	s.timesteps = cNoise(sig)
	last := float32(0)
	if s.finalType == "sigma_min" {
		last = float32(s.sigmaMin)
	}
	s.sigmas = append(sig, last)
	s.numInfer = n
	s.modelOutputs = make([][]float32, s.solverOrder)
	s.lowerOrderNums = 0
	s.resetIndices()
	return nil
}

func (s *edmDPM) Step(modelOutput []float32, t float64, sample []float32, shape []int, gen *torchrand.Generator) ([]float32, error) {
	if err := checkShapes(s.class, shape, modelOutput, sample); err != nil {
		return nil, err
	}
	if s.numInfer == 0 {
		return nil, fmt.Errorf("%s: call SetTimesteps before Step", s.class)
	}
	if err := s.initStepIndex(t, true); err != nil {
		return nil, err
	}
	i := s.stepIndex
	if i+1 >= len(s.sigmas) {
		return nil, fmt.Errorf("%s: step %d is past the end of the schedule", s.class, i)
	}
	nT := len(s.timesteps)
	lowerFinal := i == nT-1 && (s.eulerAtFinal || (s.lowerOrderFinal && nT < 15) || s.finalType == "zero")
	lowerSecond := i == nT-2 && s.lowerOrderFinal && nT < 15
	m := s.preconditionOutputs(sample, modelOutput, s.sigmas[i])
	if s.thresholding {
		m = thresholdSample(m, shape, s.threshRatio, s.sampleMax)
	}
	copy(s.modelOutputs, s.modelOutputs[1:])
	s.modelOutputs[len(s.modelOutputs)-1] = m
	var noise []float32
	if s.algorithm == "sde-dpmsolver++" {
		noise = noiseLike(gen, shape)
	}
	c := dpmStepCtx{algorithm: s.algorithm, solverType: s.solverType, edm: true}
	mo := s.modelOutputs
	k := len(mo)
	var prev []float32
	var err error
	switch {
	case s.solverOrder == 1 || s.lowerOrderNums < 1 || lowerFinal:
		prev, err = c.firstOrder(s.sigmas[i+1], s.sigmas[i], m, sample, noise)
	case s.solverOrder == 2 || s.lowerOrderNums < 2 || lowerSecond:
		if err = historyErr(s.class, i, 1); err != nil {
			return nil, err
		}
		prev, err = c.secondOrder(s.sigmas[i+1], s.sigmas[i], s.sigmas[i-1], mo[k-1], mo[k-2], sample, noise)
	default:
		if s.algorithm != "dpmsolver++" {
			return nil, fmt.Errorf("%s: third-order update is only defined for dpmsolver++", s.class)
		}
		if err = historyErr(s.class, i, 2); err != nil {
			return nil, err
		}
		prev, err = c.thirdOrder(s.sigmas[i+1], s.sigmas[i], s.sigmas[i-1], s.sigmas[i-2], mo[k-1], mo[k-2], mo[k-3], sample, nil)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", s.class, err)
	}
	if s.lowerOrderNums < s.solverOrder {
		s.lowerOrderNums++
	}
	s.stepIndex++
	return prev, nil
}

func (s *edmDPM) AddNoise(original, noise []float32, shape []int, t float64) ([]float32, error) {
	i, err := s.noiseStepIndex(t, true)
	if err != nil {
		return nil, err
	}
	return addNoiseSigma(s.class, original, noise, shape, s.sigmas[i])
}
