package schedulers

// DEISMultistepScheduler (Zhang & Chen 2022, "Fast Sampling of Diffusion
// Models with Exponential Integrator"), log-rho variant, following diffusers'
// scheduling_deis_multistep.py.

import (
	"fmt"
	"math"
	"slices"

	"github.com/tputool/tputool/pipeline/torchrand"
)

type deis struct {
	base
	dpmCommon
}

func newDEIS(class string, cfg Config) (Scheduler, error) {
	r := &cfgReader{class: class, cfg: cfg}
	s := &deis{base: newBase(class, cfg)}
	s.dpmCommon = readDPMCommon(r, false, []string{"linear", "scaled_linear", "squaredcos_cap_v2"})
	if r.err != nil {
		return nil, r.err
	}
	switch s.algorithm {
	case "deis":
	case "dpmsolver", "dpmsolver++":
		s.algorithm = "deis"
		s.cfg["algorithm_type"] = s.algorithm
	default:
		r.unsupported("algorithm_type %q", s.algorithm)
	}
	switch s.solverType {
	case "logrho":
	case "midpoint", "heun", "bh1", "bh2":
		s.solverType = "logrho"
		s.cfg["solver_type"] = s.solverType
	default:
		r.unsupported("solver_type %q", s.solverType)
	}
	r.oneOf("prediction_type", s.prediction, "epsilon", "sample", "v_prediction", "flow_prediction")
	if r.err != nil {
		return nil, r.err
	}
	n := s.numTrain
	s.timesteps = make([]float64, n)
	for i := range s.timesteps {
		s.timesteps[i] = float64(n - 1 - i)
	}
	s.sigmas = slices.Clone(s.trainSigmas)
	s.modelOutputs = make([][]float32, s.solverOrder)
	return s, nil
}

func (s *deis) SetTimesteps(n int) error {
	return s.SetTimestepsWith(TimestepOptions{NumInferenceSteps: n})
}

// SetTimestepsWith accepts a step count and mu.
func (s *deis) SetTimestepsWith(o TimestepOptions) error {
	if o.Timesteps != nil || o.Sigmas != nil {
		return fmt.Errorf("%s: custom timesteps or sigmas are not supported", s.class)
	}
	if o.Mu != nil {
		if !s.dynamicShifting || s.timeShiftType != "exponential" {
			return fmt.Errorf("%s: mu needs use_dynamic_shifting with time_shift_type exponential", s.class)
		}
		s.flowShift = math.Exp(*o.Mu)
		s.cfg["flow_shift"] = s.flowShift
	}
	n := o.NumInferenceSteps
	if n < 1 {
		return fmt.Errorf("%s: num_inference_steps %d must be at least 1", s.class, n)
	}
	ts, err := nPlusOneSpacing(s.spacing, s.numTrain, s.numTrain, n, s.stepsOffset)
	if err != nil {
		return fmt.Errorf("%s: %w", s.class, err)
	}
	sig, ts, interpolated := s.scheduleSigmas(ts, n, reversed64(toF64(s.trainSigmas)), true)
	if interpolated {
		sig = append(sig, float64(sqrt32((1-s.acp[0])/s.acp[0])))
	} else {
		sig = append(sig, sig[len(sig)-1])
	}
	s.sigmas = toF32(sig)
	s.timesteps = truncInts(ts)
	s.numInfer = len(ts)
	s.modelOutputs = make([][]float32, s.solverOrder)
	s.lowerOrderNums = 0
	s.resetIndices()
	return nil
}

// convertModelOutput predicts x0, then returns the implied noise.
func (s *deis) convertModelOutput(modelOutput, sample []float32, shape []int) ([]float32, error) {
	sigma := s.sigmas[s.stepIndex]
	x0, err := s.dataPrediction(s.class, modelOutput, sample, shape, sigma)
	if err != nil {
		return nil, err
	}
	alpha, sigmaT := alphaSigmaT(sigma, s.useFlowSigmas)
	out := make([]float32, len(sample))
	for i := range out {
		out[i] = (sample[i] - float32(alpha*x0[i])) / sigmaT
	}
	return out, nil
}

func (s *deis) Step(modelOutput []float32, t float64, sample []float32, shape []int, _ *torchrand.Generator) ([]float32, error) {
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
	lowerFinal := i == nT-1 && s.lowerOrderFinal && nT < 15
	lowerSecond := i == nT-2 && s.lowerOrderFinal && nT < 15
	m, err := s.convertModelOutput(modelOutput, sample, shape)
	if err != nil {
		return nil, err
	}
	copy(s.modelOutputs, s.modelOutputs[1:])
	s.modelOutputs[len(s.modelOutputs)-1] = m
	mo := s.modelOutputs
	k := len(mo)
	flow := s.useFlowSigmas
	var prev []float32
	n := len(sample)
	switch {
	case s.solverOrder == 1 || s.lowerOrderNums < 1 || lowerFinal:
		aT, sT := alphaSigmaT(s.sigmas[i+1], flow)
		aS, sS := alphaSigmaT(s.sigmas[i], flow)
		h := lambdaOf(aT, sT) - lambdaOf(aS, sS)
		prev = lincomb(n, plus(aT/aS, sample), minus(sT*(exp32(h)-1), m))
	case s.solverOrder == 2 || s.lowerOrderNums < 2 || lowerSecond:
		if err := historyErr(s.class, i, 1); err != nil {
			return nil, err
		}
		aT, sT := alphaSigmaT(s.sigmas[i+1], flow)
		a0, s0 := alphaSigmaT(s.sigmas[i], flow)
		a1, s1 := alphaSigmaT(s.sigmas[i-1], flow)
		rhoT, rho0, rho1 := sT/aT, s0/a0, s1/a1
		ind := func(t, b, c float32) float32 {
			return t * (-log32(c) + log32(t) - 1) / (log32(b) - log32(c))
		}
		c1 := ind(rhoT, rho0, rho1) - ind(rho0, rho0, rho1)
		c2 := ind(rhoT, rho1, rho0) - ind(rho0, rho1, rho0)
		prev = make([]float32, n)
		for j := range prev {
			v := sample[j]/a0 + float32(c1*mo[k-1][j])
			v += float32(c2 * mo[k-2][j])
			prev[j] = aT * v
		}
	default:
		if err := historyErr(s.class, i, 2); err != nil {
			return nil, err
		}
		aT, sT := alphaSigmaT(s.sigmas[i+1], flow)
		a0, s0 := alphaSigmaT(s.sigmas[i], flow)
		a1, s1 := alphaSigmaT(s.sigmas[i-1], flow)
		a2, s2 := alphaSigmaT(s.sigmas[i-2], flow)
		rhoT, rho0, rho1, rho2 := sT/aT, s0/a0, s1/a1, s2/a2
		ind := func(t, b, c, d float32) float32 {
			lt, lb, lc, ld := log32(t), log32(b), log32(c), log32(d)
			num := float32(lc*(ld-lt+1)) - float32(ld*lt) + ld + sq32(lt) - float32(2*lt) + 2
			num = t * num
			den := (lb - lc) * (lb - ld)
			return num / den
		}
		c1 := ind(rhoT, rho0, rho1, rho2) - ind(rho0, rho0, rho1, rho2)
		c2 := ind(rhoT, rho1, rho2, rho0) - ind(rho0, rho1, rho2, rho0)
		c3 := ind(rhoT, rho2, rho0, rho1) - ind(rho0, rho2, rho0, rho1)
		prev = make([]float32, n)
		for j := range prev {
			v := sample[j]/a0 + float32(c1*mo[k-1][j])
			v += float32(c2 * mo[k-2][j])
			v += float32(c3 * mo[k-3][j])
			prev[j] = aT * v
		}
	}
	if s.lowerOrderNums < s.solverOrder {
		s.lowerOrderNums++
	}
	s.stepIndex++
	return prev, nil
}

func (s *deis) AddNoise(original, noise []float32, shape []int, t float64) ([]float32, error) {
	if err := checkShapes(s.class, shape, original, noise); err != nil {
		return nil, err
	}
	idx, err := s.noiseStepIndex(t, true)
	if err != nil {
		return nil, err
	}
	return addNoiseAlphaSigma(original, noise, s.sigmas[idx], s.useFlowSigmas), nil
}
