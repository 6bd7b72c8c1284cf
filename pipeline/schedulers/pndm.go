package schedulers

// PNDMScheduler (Liu et al. 2022, "Pseudo Numerical Methods for Diffusion
// Models on Manifolds"), following diffusers' scheduling_pndm.py: four
// Runge-Kutta (PRK) warm-up steps then linear multistep (PLMS).

import (
	"fmt"
	"slices"

	"github.com/tputool/tputool/pipeline/torchrand"
)

type pndm struct {
	base
	alphaSchedule
	finalAlpha  float32
	skipPRK     bool
	prediction  string
	spacing     string
	stepsOffset int

	prkTimesteps  []float64
	plmsTimesteps []float64
	ets           [][]float32
	counter       int
	curModelOut   []float32 // nil stands for the Python int 0
	curSample     []float32
}

func newPNDM(class string, cfg Config) (Scheduler, error) {
	r := &cfgReader{class: class, cfg: cfg}
	s := &pndm{base: newBase(class, cfg)}
	s.alphaSchedule = readAlphaSchedule(r, false, "linear", "scaled_linear", "squaredcos_cap_v2")
	s.skipPRK = r.bool("skip_prk_steps")
	setAlphaToOne := r.bool("set_alpha_to_one")
	s.prediction = r.str("prediction_type")
	r.oneOf("prediction_type", s.prediction, "epsilon", "v_prediction")
	s.spacing = r.str("timestep_spacing")
	s.stepsOffset = r.int("steps_offset")
	if r.err != nil {
		return nil, r.err
	}
	s.finalAlpha = s.acp[0]
	if setAlphaToOne {
		s.finalAlpha = 1
	}
	return s, nil
}

func (s *pndm) InitNoiseSigma() float64 { return 1 }

func (s *pndm) ScaleModelInput(sample []float32, t float64) ([]float32, error) { return sample, nil }

func (s *pndm) SetTimesteps(n int) error {
	if n < 1 {
		return fmt.Errorf("%s: num_inference_steps %d must be at least 1", s.class, n)
	}
	N := s.numTrain
	var ts []float64 // ascending _timesteps
	switch s.spacing {
	case "linspace":
		ts = truncInts(roundAll(npLinspace(0, float64(N-1), n, true)))
	case "leading":
		ratio := N / n
		ts = make([]float64, n)
		for i := range ts {
			ts[i] = float64(i*ratio + s.stepsOffset)
		}
	case "trailing":
		ratio := float64(N) / float64(n)
		ts = truncInts(reversed64(roundAll(npArange(float64(N), 0, -ratio))))
		for i := range ts {
			ts[i]--
		}
	default:
		return fmt.Errorf("%s: timestep_spacing %q is not supported (want linspace, leading or trailing)", s.class, s.spacing)
	}
	if s.skipPRK {
		s.prkTimesteps = nil
		// concat(ts[:-1], ts[-2:-1], ts[-1:])[::-1]
		plms := slices.Clone(ts[:len(ts)-1])
		if len(ts) >= 2 {
			plms = append(plms, ts[len(ts)-2])
		}
		plms = append(plms, ts[len(ts)-1])
		s.plmsTimesteps = reversed64(plms)
	} else {
		const order = 4
		if len(ts) < order {
			return fmt.Errorf("%s: %d inference steps is too few for the PRK warm-up (need at least %d, or skip_prk_steps)", s.class, n, order)
		}
		half := float64(N / n / 2)
		var prk []float64
		for _, t := range ts[len(ts)-order:] {
			prk = append(prk, t, t+half)
		}
		// prk[:-1].repeat(2)[1:-1][::-1]
		var rep []float64
		for _, t := range prk[:len(prk)-1] {
			rep = append(rep, t, t)
		}
		s.prkTimesteps = reversed64(rep[1 : len(rep)-1])
		if len(ts) > 3 {
			s.plmsTimesteps = reversed64(ts[:len(ts)-3])
		} else {
			s.plmsTimesteps = nil
		}
	}
	s.timesteps = append(slices.Clone(s.prkTimesteps), s.plmsTimesteps...)
	s.numInfer = n
	s.ets = nil
	s.counter = 0
	s.curModelOut = nil
	s.curSample = nil
	return nil
}

func (s *pndm) Step(modelOutput []float32, t float64, sample []float32, shape []int, _ *torchrand.Generator) ([]float32, error) {
	if err := checkShapes(s.class, shape, modelOutput, sample); err != nil {
		return nil, err
	}
	if s.numInfer == 0 {
		return nil, fmt.Errorf("%s: call SetTimesteps before Step", s.class)
	}
	if s.counter < len(s.prkTimesteps) && !s.skipPRK {
		return s.stepPRK(modelOutput, t, sample)
	}
	return s.stepPLMS(modelOutput, t, sample)
}

func (s *pndm) stepPRK(modelOutput []float32, t float64, sample []float32) ([]float32, error) {
	diff := s.numTrain / s.numInfer / 2
	if s.counter%2 != 0 {
		diff = 0
	}
	prevT := int(t) - diff
	t = s.prkTimesteps[s.counter/4*4]
	addScaled := func(c float32, m []float32) {
		if s.curModelOut == nil {
			s.curModelOut = make([]float32, len(m))
		}
		for i := range m {
			s.curModelOut[i] += float32(c * m[i])
		}
	}
	switch s.counter % 4 {
	case 0:
		addScaled(float32(1.0/6), modelOutput)
		s.ets = append(s.ets, modelOutput)
		s.curSample = sample
	case 1, 2:
		addScaled(float32(1.0/3), modelOutput)
	case 3:
		out := make([]float32, len(modelOutput))
		c := float32(1.0 / 6)
		for i := range out {
			v := float32(c * modelOutput[i])
			if s.curModelOut != nil {
				out[i] = s.curModelOut[i] + v
			} else {
				out[i] = v
			}
		}
		modelOutput = out
		s.curModelOut = nil
	}
	cur := sample
	if s.curSample != nil {
		cur = s.curSample
	}
	prev, err := s.prevSample(cur, int(t), prevT, modelOutput)
	if err != nil {
		return nil, err
	}
	s.counter++
	return prev, nil
}

func (s *pndm) stepPLMS(modelOutput []float32, t float64, sample []float32) ([]float32, error) {
	if !s.skipPRK && len(s.ets) < 3 {
		return nil, fmt.Errorf("%s: PLMS steps need at least 12 PRK steps first", s.class)
	}
	ratio := s.numTrain / s.numInfer
	ti := int(t)
	prevT := ti - ratio
	if s.counter != 1 {
		if len(s.ets) > 3 {
			s.ets = s.ets[len(s.ets)-3:]
		}
		s.ets = append(s.ets, modelOutput)
	} else {
		prevT = ti
		ti = ti + ratio
	}
	e := s.ets
	n := len(e)
	out := make([]float32, len(modelOutput))
	switch {
	case n == 1 && s.counter == 0:
		copy(out, modelOutput)
		s.curSample = sample
	case n == 1 && s.counter == 1:
		for i := range out {
			out[i] = (modelOutput[i] + e[n-1][i]) / 2
		}
		sample = s.curSample
		s.curSample = nil
	case n == 2:
		for i := range out {
			out[i] = (float32(3*e[n-1][i]) - e[n-2][i]) / 2
		}
	case n == 3:
		for i := range out {
			out[i] = (float32(float32(23*e[n-1][i])-float32(16*e[n-2][i])) + float32(5*e[n-3][i])) / 12
		}
	default:
		c := float32(1.0 / 24)
		for i := range out {
			v := float32(55*e[n-1][i]) - float32(59*e[n-2][i])
			v += float32(37 * e[n-3][i])
			v -= float32(9 * e[n-4][i])
			out[i] = c * v
		}
	}
	prev, err := s.prevSample(sample, ti, prevT, out)
	if err != nil {
		return nil, err
	}
	s.counter++
	return prev, nil
}

// prevSample is _get_prev_sample (formula (9) of the PNDM paper).
func (s *pndm) prevSample(sample []float32, t, prevT int, modelOutput []float32) ([]float32, error) {
	if t < 0 || t >= s.numTrain || prevT >= s.numTrain {
		return nil, fmt.Errorf("%s: timestep %d outside [0, %d)", s.class, t, s.numTrain)
	}
	a := s.acp[t]
	ap := s.finalAlpha
	if prevT >= 0 {
		ap = s.acp[prevT]
	}
	b, bp := 1-a, 1-ap
	if s.prediction == "v_prediction" {
		sa, sb := sqrt32(a), sqrt32(b)
		mo := make([]float32, len(modelOutput))
		for i := range mo {
			mo[i] = float32(sa*modelOutput[i]) + float32(sb*sample[i])
		}
		modelOutput = mo
	}
	sampleCoeff := sqrt32(ap / a)
	denom := float32(a*sqrt32(bp)) + sqrt32(a*b*ap)
	diff := ap - a
	out := make([]float32, len(sample))
	for i := range out {
		out[i] = float32(sampleCoeff*sample[i]) - float32(diff*modelOutput[i])/denom
	}
	return out, nil
}

func (s *pndm) AddNoise(original, noise []float32, shape []int, t float64) ([]float32, error) {
	return addNoiseAlpha(s.class, &s.alphaSchedule, original, noise, shape, t)
}
