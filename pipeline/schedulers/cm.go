package schedulers

// CMStochasticIterativeScheduler (Song et al. 2023, "Consistency Models",
// multistep sampling), following diffusers' scheduling_consistency_models.py.

import (
	"fmt"
	"math"

	"github.com/tputool/tputool/pipeline/torchrand"
)

type consistency struct {
	base
	numTrain     int
	sigmaMin     float64
	sigmaMax     float64
	sigmaData    float64
	sNoise       float64
	rho          float64
	clipDenoised bool
	sigmas       []float64 // float64 before set_timesteps, float32 values after
	f64          bool      // sigmas are still the float64 __init__ tensor
	custom       bool
}

func newConsistency(class string, cfg Config) (Scheduler, error) {
	r := &cfgReader{class: class, cfg: cfg}
	s := &consistency{base: newBase(class, cfg)}
	s.numTrain = r.int("num_train_timesteps")
	s.sigmaMin = r.float("sigma_min")
	s.sigmaMax = r.float("sigma_max")
	s.sigmaData = r.float("sigma_data")
	s.sNoise = r.float("s_noise")
	s.rho = r.float("rho")
	s.clipDenoised = r.bool("clip_denoised")
	if r.err != nil {
		return nil, r.err
	}
	if s.numTrain < 2 {
		return nil, fmt.Errorf("%s config: num_train_timesteps %d must be at least 2", class, s.numTrain)
	}
	s.sigmas = s.karras(npLinspace(0, 1, s.numTrain, true))
	s.timesteps = sigmaToTCM(s.sigmas)
	s.f64 = true
	return s, nil
}

func (s *consistency) karras(ramp []float64) []float64 {
	minInv := math.Pow(s.sigmaMin, 1/s.rho)
	maxInv := math.Pow(s.sigmaMax, 1/s.rho)
	out := make([]float64, len(ramp))
	for i, r := range ramp {
		out[i] = math.Pow(maxInv+r*(minInv-maxInv), s.rho)
	}
	return out
}

// sigmaToTCM is 1000 * 0.25 * log(sigma + 1e-44).
func sigmaToTCM(sigmas []float64) []float64 {
	out := make([]float64, len(sigmas))
	for i, v := range sigmas {
		out[i] = 1000 * 0.25 * math.Log(v+1e-44)
	}
	return out
}

func (s *consistency) InitNoiseSigma() float64 { return s.sigmaMax }

func (s *consistency) Sigmas() []float64 { return append([]float64(nil), s.sigmas...) }

func (s *consistency) sigmaAt(i int) float32 { return float32(s.sigmas[i]) }

func (s *consistency) ScaleModelInput(sample []float32, t float64) ([]float32, error) {
	if err := s.initStepIndex(t, false); err != nil {
		return nil, err
	}
	var d float32
	if s.f64 {
		sg := s.sigmas[s.stepIndex]
		d = float32(math.Sqrt(sg*sg + s.sigmaData*s.sigmaData))
	} else {
		d = sqrt32(sq32(s.sigmaAt(s.stepIndex)) + float32(s.sigmaData*s.sigmaData))
	}
	out := make([]float32, len(sample))
	for i, v := range sample {
		out[i] = v / d
	}
	return out, nil
}

func (s *consistency) SetTimesteps(n int) error {
	return s.SetTimestepsWith(TimestepOptions{NumInferenceSteps: n})
}

// SetTimestepsWith accepts a step count or descending integer custom
// timesteps (indices into the training Karras schedule).
func (s *consistency) SetTimestepsWith(o TimestepOptions) error {
	if o.Sigmas != nil || o.Mu != nil {
		return fmt.Errorf("%s: custom sigmas and mu are not supported", s.class)
	}
	if (o.NumInferenceSteps == 0) == (o.Timesteps == nil) {
		return fmt.Errorf("%s: pass exactly one of num_inference_steps or custom timesteps", s.class)
	}
	N := s.numTrain
	var ts []float64
	if o.Timesteps != nil {
		ts = o.Timesteps
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
		ts = truncInts(ts)
		s.custom = true
	} else {
		n := o.NumInferenceSteps
		if n < 1 || n > N {
			return fmt.Errorf("%s: num_inference_steps %d must be in [1, %d]", s.class, n, N)
		}
		ratio := N / n
		ts = make([]float64, n)
		for i := range ts {
			ts[n-1-i] = float64(i * ratio)
		}
		s.numInfer = n
		s.custom = false
	}
	// ramp = timesteps[::-1] / (N - 1), ascending: sigmas come out descending.
	ramp := make([]float64, len(ts))
	for i := range ts {
		ramp[i] = ts[len(ts)-1-i] / float64(N-1)
	}
	sig := s.karras(ramp)
	s.timesteps = sigmaToTCM(sig)
	sig = append(sig, s.sigmaMin)
	s.sigmas = f32Values(sig)
	s.f64 = false
	if s.numInfer == 0 {
		s.numInfer = len(ts)
	}
	s.resetIndices()
	return nil
}

func (s *consistency) Step(modelOutput []float32, t float64, sample []float32, shape []int, gen *torchrand.Generator) ([]float32, error) {
	if err := checkShapes(s.class, shape, modelOutput, sample); err != nil {
		return nil, err
	}
	if err := s.initStepIndex(t, false); err != nil {
		return nil, err
	}
	i := s.stepIndex
	next := len(s.sigmas) - 1
	if i+1 < s.numTrain {
		next = i + 1
	}
	if next >= len(s.sigmas) {
		return nil, fmt.Errorf("%s: step %d is past the end of the schedule", s.class, i)
	}
	var cSkip, cOut, noiseScale float32
	sd := s.sigmaData
	if s.f64 {
		sg := s.sigmas[i]
		d := sg - s.sigmaMin
		cSkip = float32(sd * sd / (d*d + sd*sd))
		cOut = float32(d * sd / math.Sqrt(sg*sg+sd*sd))
		sh := math.Min(math.Max(s.sigmas[next], s.sigmaMin), s.sigmaMax)
		noiseScale = float32(math.Sqrt(sh*sh - s.sigmaMin*s.sigmaMin))
	} else {
		sg := s.sigmaAt(i)
		d := sg - float32(s.sigmaMin)
		sd2 := float32(sd * sd)
		cSkip = sd2 / (sq32(d) + sd2)
		cOut = d * float32(sd) / sqrt32(sq32(sg)+sd2)
		sigmaHat := min(max(s.sigmaAt(next), float32(s.sigmaMin)), float32(s.sigmaMax))
		noiseScale = sqrt32(sq32(sigmaHat) - float32(s.sigmaMin*s.sigmaMin))
	}
	out := make([]float32, len(sample))
	for j := range out {
		v := float32(cOut*modelOutput[j]) + float32(cSkip*sample[j])
		if s.clipDenoised {
			v = min(max(v, -1), 1)
		}
		out[j] = v
	}
	if len(s.timesteps) > 1 {
		noise := noiseLike(gen, shape)
		sn := float32(s.sNoise)
		for j := range out {
			z := noise[j] * sn
			out[j] += float32(z * noiseScale)
		}
	}
	s.stepIndex++
	return out, nil
}

func (s *consistency) AddNoise(original, noise []float32, shape []int, t float64) ([]float32, error) {
	i, err := s.noiseStepIndex(t, false)
	if err != nil {
		return nil, err
	}
	return addNoiseSigma(s.class, original, noise, shape, float32(s.sigmas[i]))
}
