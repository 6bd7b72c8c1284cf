package schedulers

// KDPM2DiscreteScheduler and KDPM2AncestralDiscreteScheduler
// (k-diffusion's sample_dpm_2 / sample_dpm_2_ancestral, Karras et al. 2022),
// following diffusers' scheduling_k_dpm_2_discrete.py and
// scheduling_k_dpm_2_ancestral_discrete.py. Each step takes two model calls:
// one at sigma and one at the log-midpoint sigma_interpol.

import (
	"fmt"

	"github.com/tputool/tputool/pipeline/torchrand"
)

type kdpm2 struct {
	base
	sigmaDiscrete
	ancestral bool
	interpol  []float32 // sigmas_interpol, expanded like sigmas
	up, down  []float32 // ancestral only
	firstDone bool      // self.sample is not None
	stepStart []float32 // self.sample
}

func newKDPM2(class string, cfg Config) (Scheduler, error) {
	r := &cfgReader{class: class, cfg: cfg}
	s := &kdpm2{base: newBase(class, cfg), ancestral: class == "KDPM2AncestralDiscreteScheduler"}
	s.sigmaDiscrete = readSigmaDiscrete(r, class, false, []string{"linear", "scaled_linear", "squaredcos_cap_v2"})
	r.oneOf("prediction_type", s.prediction, "epsilon", "v_prediction")
	if r.err != nil {
		return nil, r.err
	}
	if err := s.SetTimesteps(s.numTrain); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *kdpm2) InitNoiseSigma() float64 { return s.initNoiseSigma() }

// expand is cat([x[:1], x[1:].repeat_interleave(2), x[-1:]]).
func expand(x []float32) []float32 {
	out := []float32{x[0]}
	for _, v := range x[1:] {
		out = append(out, v, v)
	}
	return append(out, x[len(x)-1])
}

func (s *kdpm2) SetTimesteps(n int) error {
	if n < 1 {
		return fmt.Errorf("%s: num_inference_steps %d must be at least 1", s.class, n)
	}
	ts, err := floatSpacedTimesteps(s.spacing, s.numTrain, n, s.stepsOffset)
	if err != nil {
		return fmt.Errorf("%s: %w", s.class, err)
	}
	sig := interpSigmas(ts, s.trainSigmas)
	if cs, cts, ok := s.convertSigmas(sig, n); ok {
		sig, ts = cs, cts
		if s.sigmaKind == "karras" {
			ts = roundAll(ts)
		}
	} else {
		ts = f32Values(ts)
	}
	sg := append(toF32(sig), 0)
	m := len(sg)
	logs := make([]float32, m)
	for i, v := range sg {
		logs[i] = log32(v)
	}
	interp := make([]float32, m)
	if s.ancestral {
		next := make([]float32, m)
		copy(next, sg[1:])
		next[m-1] = 0
		up := make([]float32, m)
		down := make([]float32, m)
		for i := range sg {
			up[i] = sqrt32(sq32(next[i]) * (sq32(sg[i]) - sq32(next[i])) / sq32(sg[i]))
			down[i] = sqrt32(sq32(next[i]) - sq32(up[i]))
		}
		down[m-1] = 0
		for i := range sg {
			interp[i] = exp32(torchLerpF32(logs[i], log32(down[i]), 0.5))
		}
		interp[m-2], interp[m-1] = 0, 0
		s.up, s.down = expand(up), expand(down)
	} else {
		for i := range sg {
			prev := logs[(i+m-1)%m] // roll(1)
			interp[i] = exp32(torchLerpF32(logs[i], prev, 0.5))
		}
	}
	s.sigmas = expand(sg)
	s.interpol = expand(interp)
	// timesteps_interpol: _sigma_to_t on torch float32 tensors.
	tInterp := make([]float64, m)
	for i, v := range interp {
		tInterp[i] = float64(sigmaToTF32(v, s.logSigmas))
		if s.sigmaKind == "karras" {
			// .to(timesteps.dtype): the karras timesteps are float64.
			tInterp[i] = float64(float32(tInterp[i]))
		}
	}
	s.timesteps = []float64{ts[0]}
	var interpPart []float64
	if s.ancestral {
		interpPart = tInterp[:m-2]
	} else {
		interpPart = tInterp[1 : m-1]
	}
	for i, t := range ts[1:] {
		s.timesteps = append(s.timesteps, interpPart[i], t)
	}
	s.numInfer = n
	s.firstDone, s.stepStart = false, nil
	s.resetIndices()
	return nil
}

func (s *kdpm2) ScaleModelInput(sample []float32, t float64) ([]float32, error) {
	if err := s.initStepIndex(t, false); err != nil {
		return nil, err
	}
	i := s.stepIndex
	var sigma float32
	switch {
	case !s.firstDone:
		sigma = s.sigmas[i]
	case s.ancestral:
		sigma = s.interpol[i-1]
	default:
		sigma = s.interpol[i]
	}
	return scaleBySigma(sample, sigma), nil
}

func (s *kdpm2) Step(modelOutput []float32, t float64, sample []float32, shape []int, gen *torchrand.Generator) ([]float32, error) {
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
	first := !s.firstDone
	if !first {
		if err := historyErr(s.class, i, 1); err != nil {
			return nil, err
		}
	}
	at := func(x []float32, k int) float32 { // Python indexing, -1 = last
		if k < 0 {
			k += len(x)
		}
		return x[k]
	}
	var sigma, interp, next, up, down float32
	if s.ancestral {
		if first {
			sigma, interp, up, down = s.sigmas[i], s.interpol[i], s.up[i], at(s.down, i-1)
		} else {
			sigma, interp, up, down = s.sigmas[i-1], s.interpol[i-1], s.up[i-1], s.down[i-1]
		}
	} else {
		if first {
			sigma, interp, next = s.sigmas[i], s.interpol[i+1], s.sigmas[i+1]
		} else {
			sigma, interp, next = s.sigmas[i-1], s.interpol[i], s.sigmas[i]
		}
	}
	sigmaHat := sigma // gamma = 0
	sigmaInput := sigmaHat
	if !first {
		sigmaInput = interp
	}
	x0, err := x0FromSigma(s.class, s.prediction, sigmaInput, sample, modelOutput)
	if err != nil {
		return nil, err
	}
	out := make([]float32, len(sample))
	if first {
		dt := interp - sigmaHat
		for j := range out {
			d := (sample[j] - x0[j]) / sigmaHat
			out[j] = sample[j] + float32(d*dt)
		}
		s.firstDone, s.stepStart = true, sample
	} else {
		var dt float32
		if s.ancestral {
			dt = down - sigmaHat
		} else {
			dt = next - sigmaHat
		}
		base := s.stepStart
		for j := range out {
			d := (sample[j] - x0[j]) / interp
			out[j] = base[j] + float32(d*dt)
		}
		s.firstDone, s.stepStart = false, nil
		if s.ancestral {
			noise := noiseLike(gen, shape)
			for j := range out {
				out[j] += float32(noise[j] * up)
			}
		}
	}
	s.stepIndex++
	return out, nil
}

func (s *kdpm2) AddNoise(original, noise []float32, shape []int, t float64) ([]float32, error) {
	i, err := s.noiseStepIndex(t, false)
	if err != nil {
		return nil, err
	}
	return addNoiseSigma(s.class, original, noise, shape, s.sigmas[i])
}
