package schedulers

import (
	"math"
	"strings"
	"testing"
)

// Every registered class says whether its diffusers class has
// set_begin_index, and only those take SetBeginIndex.
func TestSetBeginIndexClasses(t *testing.T) {
	for _, class := range Classes() {
		if _, ok := hasBeginIndex[class]; !ok {
			t.Errorf("%s: not in hasBeginIndex", class)
		}
	}
	for class := range hasBeginIndex {
		if _, ok := registry[class]; !ok {
			t.Errorf("hasBeginIndex lists %s, which is not registered", class)
		}
	}
	for class, want := range map[string]bool{"DDIMScheduler": false, "PNDMScheduler": false,
		"DPMSolverMultistepInverseScheduler": false, "EulerDiscreteScheduler": true, "DPMSolverMultistepScheduler": true} {
		s, err := New(class, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.SetTimesteps(10); err != nil {
			t.Fatal(err)
		}
		if got := SetBeginIndex(s, 0); got != want {
			t.Errorf("SetBeginIndex(%s) = %v, want %v", class, got, want)
		}
	}
}

// Karras sigmas with a sigma_max above the largest training sigma (14.6 for
// SD's scaled_linear betas) map the first sigmas to the same timestep 999.
// Looking the timestep up takes its second occurrence, so the loop starts at
// sigma[1] and runs off the end of the schedule at the last step; with
// begin index 0 (the SDXL pipeline) it starts at sigma[0] and runs every step.
func TestSetBeginIndexRepeatedFirstTimestep(t *testing.T) {
	base := map[string]any{"beta_start": 0.00085, "beta_end": 0.012, "beta_schedule": "scaled_linear",
		"num_train_timesteps": 1000.0, "timestep_spacing": "leading", "steps_offset": 1.0,
		"sigma_min": 0.002, "sigma_max": 80.0}
	shape := []int{1, 4, 2, 2}
	for name, scales := range map[string]bool{"dpmpp_2m_karras": false, "euler_karras": true} {
		t.Run(name, func(t *testing.T) {
			run := func(begin bool) (firstIn float32, firstIndex int, err error) {
				s, err := FromShortName(name, base)
				if err != nil {
					t.Fatal(err)
				}
				if err := s.SetTimesteps(8); err != nil {
					t.Fatal(err)
				}
				ts := s.Timesteps()
				if ts[0] != ts[1] {
					t.Fatalf("timesteps %v: the first does not repeat", ts[:3])
				}
				if begin && !SetBeginIndex(s, 0) {
					t.Fatal("SetBeginIndex: class has no set_begin_index")
				}
				sample := make([]float32, 16)
				for i := range sample {
					sample[i] = 1
				}
				for i, tt := range ts {
					in, err := s.ScaleModelInput(sample, tt)
					if err != nil {
						return 0, 0, err
					}
					if i == 0 {
						firstIn = in[0]
					}
					if sample, err = s.Step(make([]float32, 16), tt, sample, shape, nil); err != nil {
						return 0, 0, err
					}
					if i == 0 {
						firstIndex = s.(StepIndexer).StepIndex() - 1
					}
				}
				return firstIn, firstIndex, nil
			}
			if _, _, err := run(false); err == nil || !strings.Contains(err.Error(), "past the end of the schedule") {
				t.Fatalf("without a begin index: err %v, want past the end of the schedule", err)
			}
			in, idx, err := run(true)
			if err != nil {
				t.Fatalf("with begin index 0: %v", err)
			}
			if idx != 0 {
				t.Errorf("first step at index %d, want 0", idx)
			}
			s, _ := FromShortName(name, base)
			_ = s.SetTimesteps(8)
			sigma0 := s.(SigmaProvider).Sigmas()[0]
			want := 1.0 // DPM-Solver does not scale the model input
			if scales {
				want = 1 / math.Sqrt(sigma0*sigma0+1) // Euler: sample / sqrt(sigma^2 + 1)
			}
			if math.Abs(float64(in)-want) > 1e-6*want {
				t.Errorf("first model input %v, want %v (sigma[0] = %v)", in, want, sigma0)
			}
		})
	}
}
