package schedulers

// DPMSolverSinglestepScheduler (Lu et al. 2022), following diffusers'
// scheduling_dpmsolver_singlestep.py: each k-th order step spends k model
// calls at intermediate timesteps, all anchored at the sample where the step
// started.

import (
	"fmt"
	"math"
	"slices"

	"github.com/tputool/tputool/pipeline/torchrand"
)

type dpmSinglestep struct {
	base
	dpmCommon
	orderList  []int
	stepSample []float32 // self.sample
}

func newDPMSinglestep(class string, cfg Config) (Scheduler, error) {
	r := &cfgReader{class: class, cfg: cfg}
	s := &dpmSinglestep{base: newBase(class, cfg)}
	s.dpmCommon = readDPMCommon(r, false, []string{"linear", "scaled_linear", "squaredcos_cap_v2"})
	if r.err != nil {
		return nil, r.err
	}
	switch s.algorithm {
	case "dpmsolver", "dpmsolver++", "sde-dpmsolver++":
	case "deis":
		s.algorithm = "dpmsolver++"
		s.cfg["algorithm_type"] = s.algorithm
	default:
		r.unsupported("algorithm_type %q", s.algorithm)
	}
	switch s.solverType {
	case "midpoint", "heun":
	case "logrho", "bh1", "bh2":
		s.solverType = "midpoint"
		s.cfg["solver_type"] = s.solverType
	default:
		r.unsupported("solver_type %q", s.solverType)
	}
	if s.algorithm != "dpmsolver++" && s.algorithm != "sde-dpmsolver++" && s.finalSigmasType == "zero" {
		r.invalid("final_sigmas_type zero is not supported for algorithm_type %s; use sigma_min", s.algorithm)
	}
	r.oneOf("prediction_type", s.prediction, "epsilon", "sample", "v_prediction", "flow_prediction")
	if s.solverOrder > 3 {
		r.unsupported("solver_order %d (at most 3)", s.solverOrder)
	}
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
	s.orderList = s.getOrderList(n)
	return s, nil
}

// getOrderList is get_order_list: the solver order of each step.
func (s *dpmSinglestep) getOrderList(steps int) []int {
	order := s.solverOrder
	rep := func(pattern []int, times int) []int {
		var out []int
		for i := 0; i < times; i++ {
			out = append(out, pattern...)
		}
		return out
	}
	var orders []int
	if s.lowerOrderFinal {
		switch order {
		case 3:
			switch steps % 3 {
			case 0:
				orders = append(rep([]int{1, 2, 3}, steps/3-1), 1, 2, 1)
			case 1:
				orders = append(rep([]int{1, 2, 3}, steps/3), 1)
			default:
				orders = append(rep([]int{1, 2, 3}, steps/3), 1, 2)
			}
		case 2:
			if steps%2 == 0 {
				orders = append(rep([]int{1, 2}, steps/2-1), 1, 1)
			} else {
				orders = append(rep([]int{1, 2}, steps/2), 1)
			}
		case 1:
			orders = rep([]int{1}, steps)
		}
	} else {
		switch order {
		case 3:
			orders = rep([]int{1, 2, 3}, steps/3)
		case 2:
			orders = rep([]int{1, 2}, steps/2)
		case 1:
			orders = rep([]int{1}, steps)
		}
	}
	if s.finalSigmasType == "zero" && len(orders) > 0 {
		orders[len(orders)-1] = 1
	}
	return orders
}

func (s *dpmSinglestep) SetTimesteps(n int) error {
	return s.SetTimestepsWith(TimestepOptions{NumInferenceSteps: n})
}

// SetTimestepsWith accepts a step count, custom timesteps and mu.
func (s *dpmSinglestep) SetTimestepsWith(o TimestepOptions) error {
	if o.Sigmas != nil {
		return fmt.Errorf("%s: custom sigmas are not supported", s.class)
	}
	if o.Mu != nil {
		if !s.dynamicShifting || s.timeShiftType != "exponential" {
			return fmt.Errorf("%s: mu needs use_dynamic_shifting with time_shift_type exponential", s.class)
		}
		s.flowShift = math.Exp(*o.Mu)
		s.cfg["flow_shift"] = s.flowShift
	}
	if (o.NumInferenceSteps == 0) == (o.Timesteps == nil) {
		return fmt.Errorf("%s: pass exactly one of num_inference_steps or custom timesteps", s.class)
	}
	if o.Timesteps != nil && s.sigmaKind != "" && s.sigmaKind != "lu" {
		return fmt.Errorf("%s: custom timesteps cannot be used with use_%s_sigmas", s.class, s.sigmaKind)
	}
	n := o.NumInferenceSteps
	var ts []float64
	if o.Timesteps != nil {
		ts = truncInts(o.Timesteps)
		n = len(ts)
	} else {
		if n < 1 {
			return fmt.Errorf("%s: num_inference_steps %d must be at least 1", s.class, n)
		}
		l := reversed64(roundAll(npLinspace(0, float64(s.numTrain-1-s.clippedIndex()), n+1, true)))
		ts = truncInts(l[:len(l)-1])
	}
	sig, ts, _ := s.scheduleSigmas(ts, n, reversed64(toF64(s.trainSigmas)), true)
	var last float32
	switch s.finalSigmasType {
	case "sigma_min":
		last = sqrt32((1 - s.acp[0]) / s.acp[0])
	case "zero":
	default:
		return fmt.Errorf("%s: final_sigmas_type %q is not supported (want zero or sigma_min)", s.class, s.finalSigmasType)
	}
	s.sigmas = append(toF32(sig), last)
	s.timesteps = truncInts(ts)
	s.numInfer = n
	s.modelOutputs = make([][]float32, s.solverOrder)
	s.stepSample = nil
	// diffusers switches lower_order_final on (in the config) for uneven
	// step counts and for a zero final sigma.
	if !s.lowerOrderFinal && (n%s.solverOrder != 0 || s.finalSigmasType == "zero") {
		s.lowerOrderFinal = true
		s.cfg["lower_order_final"] = true
	}
	s.orderList = s.getOrderList(n)
	s.resetIndices()
	return nil
}

func (s *dpmSinglestep) Step(modelOutput []float32, t float64, sample []float32, shape []int, gen *torchrand.Generator) ([]float32, error) {
	if err := checkShapes(s.class, shape, sample); err != nil {
		return nil, err
	}
	if s.numInfer == 0 {
		return nil, fmt.Errorf("%s: call SetTimesteps before Step", s.class)
	}
	if err := s.initStepIndex(t, true); err != nil {
		return nil, err
	}
	i := s.stepIndex
	if i+1 >= len(s.sigmas) || i >= len(s.orderList) {
		return nil, fmt.Errorf("%s: step %d is past the end of the schedule", s.class, i)
	}
	m, err := s.convertModelOutputDPM(s.class, modelOutput, sample, shape, s.sigmas[i])
	if err != nil {
		return nil, err
	}
	copy(s.modelOutputs, s.modelOutputs[1:])
	s.modelOutputs[len(s.modelOutputs)-1] = m
	var noise []float32
	if s.algorithm == "sde-dpmsolver++" {
		noise = noiseLike(gen, shape)
	}
	order := s.orderList[i]
	for order > 1 && s.modelOutputs[len(s.modelOutputs)-order] == nil {
		order--
	}
	if order == 1 {
		s.stepSample = sample
	}
	c := dpmStepCtx{algorithm: s.algorithm, solverType: s.solverType, flow: s.useFlowSigmas}
	mo := s.modelOutputs
	k := len(mo)
	var prev []float32
	switch order {
	case 1:
		prev, err = c.firstOrder(s.sigmas[i+1], s.sigmas[i], mo[k-1], s.stepSample, noise)
	case 2:
		prev, err = s.secondOrder(c, i, mo[k-1], mo[k-2], noise)
	case 3:
		prev, err = s.thirdOrder(c, i, mo[k-1], mo[k-2], mo[k-3], noise)
	default:
		err = fmt.Errorf("order must be 1, 2 or 3, got %d", order)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", s.class, err)
	}
	s.stepIndex++
	return prev, nil
}

// secondOrder is singlestep_dpm_solver_second_order_update.
func (s *dpmSinglestep) secondOrder(c dpmStepCtx, i int, m0, m1, noise []float32) ([]float32, error) {
	if i < 1 {
		return nil, fmt.Errorf("second-order step at index %d", i)
	}
	sigT, sig0, sig1 := s.sigmas[i+1], s.sigmas[i], s.sigmas[i-1]
	aT, sT := c.alphaSigma(sigT)
	a0, s0 := c.alphaSigma(sig0)
	a1, s1 := c.alphaSigma(sig1)
	lT, l0, l1 := lambdaOf(aT, sT), lambdaOf(a0, s0), lambdaOf(a1, s1)
	h, h0 := lT-l1, l0-l1
	r0 := h0 / h
	inv := 1.0 / r0
	d1 := make([]float32, len(m0))
	for j := range d1 {
		d1[j] = inv * (m0[j] - m1[j])
	}
	return c.secondCore(sigT, sig1, h, m1, d1, s.stepSample, noise)
}

// thirdOrder is singlestep_dpm_solver_third_order_update.
func (s *dpmSinglestep) thirdOrder(c dpmStepCtx, i int, m0, m1, m2, noise []float32) ([]float32, error) {
	if i < 2 {
		return nil, fmt.Errorf("third-order step at index %d", i)
	}
	sigT, sig0, sig1, sig2 := s.sigmas[i+1], s.sigmas[i], s.sigmas[i-1], s.sigmas[i-2]
	aT, sT := c.alphaSigma(sigT)
	a0, s0 := c.alphaSigma(sig0)
	a1, s1 := c.alphaSigma(sig1)
	a2, s2 := c.alphaSigma(sig2)
	lT, l0, l1, l2 := lambdaOf(aT, sT), lambdaOf(a0, s0), lambdaOf(a1, s1), lambdaOf(a2, s2)
	h, h0, h1 := lT-l2, l0-l2, l1-l2
	r0, r1 := h0/h, h1/h
	n := len(m0)
	d10, d11, d1, d2 := make([]float32, n), make([]float32, n), make([]float32, n), make([]float32, n)
	inv0, inv1 := 1.0/r1, 1.0/r0
	for j := 0; j < n; j++ {
		d10[j] = inv0 * (m1[j] - m2[j])
		d11[j] = inv1 * (m0[j] - m2[j])
		d1[j] = (float32(r0*d10[j]) - float32(r1*d11[j])) / (r0 - r1)
		d2[j] = (2.0 * (d11[j] - d10[j])) / (r0 - r1)
	}
	d0 := m2
	x := s.stepSample
	switch c.algorithm {
	case "dpmsolver++":
		e := exp32(-h) - 1
		if c.solverType == "heun" {
			return lincomb(n, plus(sT/s2, x), minus(aT*e, d0), plus(aT*(e/h+1), d1), minus(aT*((e+h)/sq32(h)-0.5), d2)), nil
		}
		return lincomb(n, plus(sT/s2, x), minus(aT*e, d0), plus(aT*(e/h+1), d11)), nil
	case "dpmsolver":
		e := exp32(h) - 1
		if c.solverType == "heun" {
			return lincomb(n, plus(aT/a2, x), minus(sT*e, d0), minus(sT*(e/h-1), d1), minus(sT*((e-h)/sq32(h)-0.5), d2)), nil
		}
		return lincomb(n, plus(aT/a2, x), minus(sT*e, d0), minus(sT*(e/h-1), d11)), nil
	case "sde-dpmsolver++":
		e2 := 1 - exp32(-2*h)
		nz := plus(sT*sqrt32(1-exp32(-2*h)), noise)
		if c.solverType == "heun" {
			mh := -2 * h
			return lincomb(n, plus(sT/s2*exp32(-h), x), plus(aT*e2, d0), plus(aT*(e2/mh+1), d1),
				plus(aT*((e2+mh)/sq32(mh)-0.5), d2), nz), nil
		}
		return lincomb(n, plus(sT/s2*exp32(-h), x), plus(aT*e2, d0), plus(aT*(e2/(-2*h)+1), d11), nz), nil
	}
	return nil, fmt.Errorf("algorithm_type %q is not supported", c.algorithm)
}

func (s *dpmSinglestep) AddNoise(original, noise []float32, shape []int, t float64) ([]float32, error) {
	if err := checkShapes(s.class, shape, original, noise); err != nil {
		return nil, err
	}
	idx, err := s.noiseStepIndex(t, true)
	if err != nil {
		return nil, err
	}
	return addNoiseAlphaSigma(original, noise, s.sigmas[idx], s.useFlowSigmas), nil
}
