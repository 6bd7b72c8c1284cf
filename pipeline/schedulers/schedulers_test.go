package schedulers

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/pipeline/torchrand"
)

// parsePyLiteral reads the Python default literals of class_defaults.json.
func parsePyLiteral(s string) (any, error) {
	s = strings.TrimSpace(s)
	switch s {
	case "None":
		return nil, nil
	case "True":
		return true, nil
	case "False":
		return false, nil
	case "-float('inf')":
		return math.Inf(-1), nil
	case "[]":
		return []any{}, nil
	}
	if strings.HasPrefix(s, "'") && strings.HasSuffix(s, "'") {
		return s[1 : len(s)-1], nil
	}
	return strconv.ParseFloat(s, 64)
}

func TestClassDefaultsMatchFixture(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "testdata", "schedulers", "class_defaults.json"))
	if err != nil {
		t.Fatal(err)
	}
	var fixture map[string]struct {
		Order        string            `json:"order"`
		InitDefaults map[string]string `json:"init_defaults"`
	}
	if err := json.Unmarshal(data, &fixture); err != nil {
		t.Fatal(err)
	}
	for class, f := range fixture {
		if strings.HasPrefix(class, "_") {
			continue
		}
		got, ok := classDefaults[class]
		if !ok {
			t.Errorf("%s: no defaults in the Go table", class)
			continue
		}
		for k, lit := range f.InitDefaults {
			want, err := parsePyLiteral(lit)
			if err != nil {
				t.Fatalf("%s.%s: %v", class, k, err)
			}
			if !reflect.DeepEqual(got[k], want) {
				t.Errorf("%s.%s = %#v, want %#v", class, k, got[k], want)
			}
		}
		if len(got) != len(f.InitDefaults) {
			t.Errorf("%s: %d defaults, fixture has %d", class, len(got), len(f.InitDefaults))
		}
		wantOrder := 1
		if f.Order != "" {
			wantOrder, _ = strconv.Atoi(f.Order)
		}
		if max(classOrder[class], 1) != wantOrder {
			t.Errorf("%s: order %d, want %d", class, classOrder[class], wantOrder)
		}
	}
}

func TestNewUnknownClassIsUnsupported(t *testing.T) {
	_, err := New("NoSuchScheduler", nil)
	if !errors.Is(err, errs.ErrUnsupported) {
		t.Fatalf("err = %v, want ErrUnsupported", err)
	}
	if !strings.Contains(err.Error(), "NoSuchScheduler") {
		t.Fatalf("error %q does not name the class", err)
	}
}

func TestConfigErrors(t *testing.T) {
	cases := []struct {
		class    string
		cfg      map[string]any
		want     string
		sentinel error
	}{
		{"DDIMScheduler", map[string]any{"num_train_timesteps": "many"}, `"num_train_timesteps"`, nil},
		{"DDIMScheduler", map[string]any{"num_train_timesteps": 10.5}, "integer", nil},
		{"DDIMScheduler", map[string]any{"clip_sample": "yes"}, `"clip_sample"`, nil},
		{"DDIMScheduler", map[string]any{"beta_schedule": "cubic"}, "cubic", errs.ErrUnsupported},
		{"EulerDiscreteScheduler", map[string]any{"prediction_type": "noise"}, "noise", errs.ErrUnsupported},
		{"EulerDiscreteScheduler", map[string]any{"use_karras_sigmas": true, "use_beta_sigmas": true}, "only one", nil},
		{"DPMSolverMultistepScheduler", map[string]any{"algorithm_type": "dpmsolver", "final_sigmas_type": "zero"}, "sigma_min", nil},
		{"DPMSolverMultistepScheduler", map[string]any{"algorithm_type": "magic"}, "magic", errs.ErrUnsupported},
		{"UnCLIPScheduler", map[string]any{"beta_schedule": "linear"}, "squaredcos_cap_v2", errs.ErrUnsupported},
		{"SASolverScheduler", map[string]any{"tau_func": "lambda t: 1"}, "tau_func", errs.ErrUnsupported},
	}
	for _, c := range cases {
		_, err := New(c.class, c.cfg)
		if err == nil {
			t.Errorf("%s %v: no error", c.class, c.cfg)
			continue
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s %v: error %q does not mention %q", c.class, c.cfg, err, c.want)
		}
		if c.sentinel != nil && !errors.Is(err, c.sentinel) {
			t.Errorf("%s %v: error %q is not %v", c.class, c.cfg, err, c.sentinel)
		}
	}
}

func TestFromConfigFileKeepsUnknownFieldsAndNonFinite(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "scheduler_config.json")
	doc := `{
  "_class_name": "DPMSolverMultistepScheduler",
  "_diffusers_version": "0.27.0",
  "beta_schedule": "scaled_linear",
  "beta_start": 0.00085,
  "beta_end": 0.012,
  "lambda_min_clipped": -Infinity,
  "skip_prk_steps": true,
  "note": "Infinity inside a string stays a string",
  "use_karras_sigmas": true
}`
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := FromConfigFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if s.Name() != "DPMSolverMultistepScheduler" {
		t.Fatalf("Name = %s", s.Name())
	}
	cfg := s.Config()
	if cfg["skip_prk_steps"] != true || cfg["note"] != "Infinity inside a string stays a string" {
		t.Fatalf("unknown fields not kept: %v", cfg)
	}
	if cfg["lambda_min_clipped"] != "-inf" {
		t.Fatalf("lambda_min_clipped = %#v", cfg["lambda_min_clipped"])
	}
	if cfg["solver_order"] != 2.0 || cfg["final_sigmas_type"] != "zero" {
		t.Fatalf("class defaults not applied: %v", cfg)
	}
	if err := s.SetTimesteps(20); err != nil {
		t.Fatal(err)
	}
	if len(s.Timesteps()) != 20 {
		t.Fatalf("%d timesteps", len(s.Timesteps()))
	}

	if err := os.WriteFile(path, []byte(`{"beta_start": 0.1}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := FromConfigFile(path); err == nil || !strings.Contains(err.Error(), "_class_name") {
		t.Fatalf("missing _class_name: err = %v", err)
	}
	if _, err := FromConfigFile(filepath.Join(dir, "missing.json")); err == nil {
		t.Fatal("missing file: no error")
	}
}

func TestNamesAndFromShortName(t *testing.T) {
	names := Names()
	for _, want := range []string{"ddim", "pndm", "euler", "euler_a", "dpmpp_2m", "dpmpp_2m_karras", "lms", "heun", "unipc", "lcm", "flow_euler"} {
		if !slices.Contains(names, want) {
			t.Errorf("Names() lacks %q: %v", want, names)
		}
	}
	base := map[string]any{
		"_class_name": "PNDMScheduler", "beta_start": 0.00085, "beta_end": 0.012,
		"beta_schedule": "scaled_linear", "skip_prk_steps": true, "steps_offset": 1,
		"timestep_spacing": "leading", "num_train_timesteps": 1000,
	}
	s, err := FromShortName("dpmpp_2m_karras", base)
	if err != nil {
		t.Fatal(err)
	}
	cfg := s.Config()
	if s.Name() != "DPMSolverMultistepScheduler" || cfg["use_karras_sigmas"] != true || cfg["beta_schedule"] != "scaled_linear" || cfg["beta_start"] != 0.00085 {
		t.Fatalf("%s config %v", s.Name(), cfg)
	}
	s, err = FromShortName("euler_a", base)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SetTimesteps(4); err != nil {
		t.Fatal(err)
	}
	// leading spacing with steps_offset 1 carried over from the base config.
	if got, want := s.Timesteps(), []float64{751, 501, 251, 1}; !slices.Equal(got, want) {
		t.Fatalf("timesteps %v, want %v", got, want)
	}
	if _, err := FromShortName("nope", base); !errors.Is(err, errs.ErrUsage) {
		t.Fatalf("unknown name: err = %v, want ErrUsage", err)
	}
}

func TestTimestepSpacing(t *testing.T) {
	cases := []struct {
		spacing string
		want    []float64
	}{
		{"leading", []float64{900, 800, 700, 600, 500, 400, 300, 200, 100, 0}},
		{"trailing", []float64{999, 899, 799, 699, 599, 499, 399, 299, 199, 99}},
		{"linspace", []float64{999, 888, 777, 666, 555, 444, 333, 222, 111, 0}},
	}
	for _, c := range cases {
		s, err := New("DDIMScheduler", map[string]any{"timestep_spacing": c.spacing})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.SetTimesteps(10); err != nil {
			t.Fatal(err)
		}
		if got := s.Timesteps(); !slices.Equal(got, c.want) {
			t.Errorf("%s: %v, want %v", c.spacing, got, c.want)
		}
	}
	// DPM-Solver drops the last of n+1 points.
	s, _ := New("DPMSolverMultistepScheduler", nil)
	_ = s.SetTimesteps(5)
	if got, want := s.Timesteps(), []float64{999, 799, 599, 400, 200}; !slices.Equal(got, want) {
		t.Errorf("dpm linspace: %v, want %v", got, want)
	}
}

func TestCustomTimestepErrors(t *testing.T) {
	for _, class := range []string{"DDPMScheduler", "DDPMParallelScheduler", "LCMScheduler", "TCDScheduler", "CMStochasticIterativeScheduler"} {
		cfg := map[string]any{}
		if class == "CMStochasticIterativeScheduler" {
			cfg["num_train_timesteps"] = 201
		}
		s, err := New(class, cfg)
		if err != nil {
			t.Fatal(err)
		}
		ts := s.(TimestepSetter)
		if err := ts.SetTimestepsWith(TimestepOptions{Timesteps: []float64{100, 87, 50, 51, 0}}); err == nil {
			t.Errorf("%s: increasing custom timesteps accepted", class)
		}
		if err := ts.SetTimestepsWith(TimestepOptions{NumInferenceSteps: 5, Timesteps: []float64{100, 0}}); err == nil {
			t.Errorf("%s: both step count and timesteps accepted", class)
		}
		n := float64(1000)
		if class == "CMStochasticIterativeScheduler" {
			n = 201
		}
		if err := ts.SetTimestepsWith(TimestepOptions{Timesteps: []float64{n}}); err == nil {
			t.Errorf("%s: timestep num_train_timesteps accepted", class)
		}
	}
	s, _ := New("DDPMScheduler", nil)
	pt := s.(PreviousTimesteper)
	if p, _ := pt.PreviousTimestep(500); p != 499 {
		t.Errorf("DDPM previous_timestep(500) without a schedule = %v, want 499", p)
	}
}

// runLoop runs the README's sigma-scheduler loop (or the plain one when
// scaled is false) with the dummy model and returns the final sample.
func runLoop(t *testing.T, s Scheduler, scaled bool) []float32 {
	t.Helper()
	shape := []int{4, 3, 8, 8}
	sample := dummySample(shape, false)
	c := float32(s.InitNoiseSigma())
	for i := range sample {
		sample[i] *= c
	}
	gen := torchrand.NewGenerator(0)
	for _, ts := range s.Timesteps() {
		if scaled {
			var err error
			if sample, err = s.ScaleModelInput(sample, ts); err != nil {
				t.Fatal(err)
			}
		}
		out, err := s.Step(dummyModel(sample, shape, []float64{ts}), ts, sample, shape, gen)
		if err != nil {
			t.Fatalf("%s step t=%v: %v", s.Name(), ts, err)
		}
		sample = out
	}
	return sample
}

// diffusers' test_custom_timesteps / test_custom_sigmas for Euler: a
// schedule given back as custom timesteps or sigmas reproduces the loop.
func TestEulerCustomTimestepsAndSigmas(t *testing.T) {
	for _, pred := range []string{"epsilon", "sample", "v_prediction"} {
		for _, interp := range []string{"linear", "log_linear"} {
			for _, final := range []string{"sigma_min", "zero"} {
				cfg := map[string]any{"num_train_timesteps": 1100, "beta_schedule": "linear",
					"prediction_type": pred, "interpolation_type": interp, "final_sigmas_type": final}
				ref, err := New("EulerDiscreteScheduler", cfg)
				if err != nil {
					t.Fatal(err)
				}
				if err := ref.SetTimesteps(10); err != nil {
					t.Fatal(err)
				}
				timesteps := ref.Timesteps()
				sigmas := ref.(SigmaProvider).Sigmas()
				want := runLoop(t, ref, true)
				check := func(name string, o TimestepOptions) {
					s, _ := New("EulerDiscreteScheduler", cfg)
					if err := s.(TimestepSetter).SetTimestepsWith(o); err != nil {
						t.Fatal(err)
					}
					got := runLoop(t, s, true)
					var diff float64
					for i := range got {
						diff += math.Abs(float64(got[i] - want[i]))
					}
					if diff >= 1e-5 {
						t.Errorf("%s %s/%s/%s: sum |diff| = %g", name, pred, interp, final, diff)
					}
				}
				check("timesteps", TimestepOptions{Timesteps: timesteps})
				if interp == "linear" {
					check("sigmas", TimestepOptions{Sigmas: sigmas})
				}
			}
		}
	}
}

// Every class runs a full loop under a range of configurations without
// errors or non-finite values (a smoke test of the option matrix).
func TestConfigMatrixSmoke(t *testing.T) {
	type variant struct {
		class string
		cfg   map[string]any
		n     int
	}
	var vs []variant
	add := func(class string, n int, cfgs ...map[string]any) {
		for _, c := range cfgs {
			vs = append(vs, variant{class, c, n})
		}
	}
	preds := []map[string]any{{"prediction_type": "epsilon"}, {"prediction_type": "v_prediction"}, {"prediction_type": "sample"}}
	spacings := []map[string]any{{"timestep_spacing": "leading", "steps_offset": 1}, {"timestep_spacing": "trailing"}, {"timestep_spacing": "linspace"}}
	for _, c := range []string{"DDIMScheduler", "DDIMParallelScheduler", "DDPMScheduler", "DDPMParallelScheduler", "LCMScheduler", "TCDScheduler"} {
		add(c, 4, preds...)
		add(c, 4, map[string]any{"thresholding": true, "sample_max_value": 2.0}, map[string]any{"rescale_betas_zero_snr": true, "timestep_spacing": "trailing", "prediction_type": "v_prediction"},
			map[string]any{"beta_schedule": "squaredcos_cap_v2"}, map[string]any{"beta_schedule": "scaled_linear", "clip_sample": false})
	}
	add("DDIMScheduler", 5, spacings...)
	add("DDPMScheduler", 5, spacings...)
	add("DDPMScheduler", 5, map[string]any{"variance_type": "fixed_large"}, map[string]any{"variance_type": "fixed_small_log"}, map[string]any{"beta_schedule": "sigmoid"}, map[string]any{"beta_schedule": "laplace"})
	add("DDIMInverseScheduler", 5, append(preds[:2:2], map[string]any{"timestep_spacing": "trailing"})...)
	add("PNDMScheduler", 10, map[string]any{}, map[string]any{"skip_prk_steps": true}, map[string]any{"prediction_type": "v_prediction"}, map[string]any{"timestep_spacing": "trailing", "skip_prk_steps": true})
	sig := []map[string]any{{"use_karras_sigmas": true}, {"use_exponential_sigmas": true}, {"use_beta_sigmas": true}}
	for _, c := range []string{"EulerDiscreteScheduler", "EulerAncestralDiscreteScheduler", "LMSDiscreteScheduler", "HeunDiscreteScheduler", "KDPM2DiscreteScheduler", "KDPM2AncestralDiscreteScheduler"} {
		add(c, 6, preds[:2]...)
		add(c, 6, spacings...)
		if c != "EulerAncestralDiscreteScheduler" {
			add(c, 6, sig...)
		}
	}
	add("EulerDiscreteScheduler", 6, map[string]any{"timestep_type": "continuous", "prediction_type": "v_prediction"}, map[string]any{"rescale_betas_zero_snr": true, "timestep_spacing": "trailing", "prediction_type": "v_prediction"},
		map[string]any{"final_sigmas_type": "sigma_min"}, map[string]any{"interpolation_type": "log_linear"}, map[string]any{"use_karras_sigmas": true, "sigma_min": 0.02, "sigma_max": 100.0})
	for _, c := range []string{"DPMSolverMultistepScheduler", "DPMSolverSinglestepScheduler", "DPMSolverMultistepInverseScheduler"} {
		for _, order := range []int{1, 2, 3} {
			for _, algo := range []string{"dpmsolver++", "dpmsolver", "sde-dpmsolver++", "sde-dpmsolver"} {
				if c == "DPMSolverSinglestepScheduler" && algo == "sde-dpmsolver" {
					continue
				}
				if c != "DPMSolverMultistepScheduler" && order == 3 && strings.HasPrefix(algo, "sde") {
					continue
				}
				if algo == "sde-dpmsolver" && order == 3 {
					continue
				}
				if c == "DPMSolverMultistepInverseScheduler" && strings.HasPrefix(algo, "sde") {
					continue // the SDE noise term is NaN when sigma grows, in diffusers too
				}
				for _, st := range []string{"midpoint", "heun"} {
					add(c, 8, map[string]any{"solver_order": order, "algorithm_type": algo, "solver_type": st, "final_sigmas_type": "sigma_min"})
				}
			}
		}
		add(c, 8, sig...)
		add(c, 8, preds...)
		add(c, 8, map[string]any{"use_flow_sigmas": true, "prediction_type": "flow_prediction", "flow_shift": 3.0}, map[string]any{"thresholding": true}, map[string]any{"lambda_min_clipped": -5.1})
	}
	add("DPMSolverMultistepScheduler", 8, map[string]any{"use_lu_lambdas": true}, map[string]any{"euler_at_final": true}, map[string]any{"timestep_spacing": "trailing"}, map[string]any{"timestep_spacing": "leading", "steps_offset": 1})
	add("DPMSolverSinglestepScheduler", 7, map[string]any{"solver_order": 3, "lower_order_final": false})
	for _, c := range []string{"UniPCMultistepScheduler", "DEISMultistepScheduler", "SASolverScheduler"} {
		add(c, 8, preds...)
		add(c, 8, sig...)
		add(c, 8, spacings...)
		add(c, 8, map[string]any{"use_flow_sigmas": true, "prediction_type": "flow_prediction"}, map[string]any{"thresholding": true, "sample_max_value": 1.5})
	}
	add("UniPCMultistepScheduler", 8, map[string]any{"solver_order": 3}, map[string]any{"solver_type": "bh1"}, map[string]any{"predict_x0": false, "final_sigmas_type": "sigma_min"},
		map[string]any{"disable_corrector": []any{0.0, 1.0}}, map[string]any{"final_sigmas_type": "sigma_min"},
		map[string]any{"use_flow_sigmas": true, "prediction_type": "flow_prediction", "shift_terminal": 0.1, "flow_shift": 3.0})
	add("DEISMultistepScheduler", 8, map[string]any{"solver_order": 3}, map[string]any{"solver_order": 1})
	add("SASolverScheduler", 8, map[string]any{"algorithm_type": "noise_prediction"}, map[string]any{"predictor_order": 3, "corrector_order": 4},
		map[string]any{"predictor_order": 4, "corrector_order": 1}, map[string]any{"algorithm_type": "noise_prediction", "predictor_order": 3, "corrector_order": 3})
	add("EDMEulerScheduler", 6, map[string]any{}, map[string]any{"sigma_schedule": "exponential"}, map[string]any{"prediction_type": "v_prediction", "final_sigmas_type": "sigma_min"})
	add("EDMDPMSolverMultistepScheduler", 6, map[string]any{}, map[string]any{"solver_order": 3}, map[string]any{"algorithm_type": "sde-dpmsolver++"}, map[string]any{"solver_type": "heun", "sigma_schedule": "exponential"})
	add("CMStochasticIterativeScheduler", 3, map[string]any{}, map[string]any{"clip_denoised": false})
	add("IPNDMScheduler", 10, map[string]any{})
	add("UnCLIPScheduler", 10, map[string]any{}, map[string]any{"prediction_type": "sample", "clip_sample": false})
	add("FlowMatchEulerDiscreteScheduler", 6, map[string]any{"shift": 3.0}, map[string]any{"invert_sigmas": true}, map[string]any{"use_karras_sigmas": true}, map[string]any{"use_exponential_sigmas": true},
		map[string]any{"use_beta_sigmas": true}, map[string]any{"shift_terminal": 0.02}, map[string]any{"stochastic_sampling": true}, map[string]any{"time_shift_type": "linear", "shift": 2.0})
	add("FlowMatchHeunDiscreteScheduler", 6, map[string]any{"shift": 3.0})
	add("FlowMapEulerDiscreteScheduler", 6, map[string]any{}, map[string]any{"shift": 5.0})

	for _, v := range vs {
		name := fmt.Sprintf("%s/%v/%d", v.class, v.cfg, v.n)
		s, err := New(v.class, v.cfg)
		if err != nil {
			t.Errorf("%s: New: %v", name, err)
			continue
		}
		if err := s.SetTimesteps(v.n); err != nil {
			t.Errorf("%s: SetTimesteps: %v", name, err)
			continue
		}
		scaled := true
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Errorf("%s: panic %v", name, r)
				}
			}()
			out := runLoop(t, s, scaled)
			for i, x := range out {
				if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
					t.Errorf("%s: element %d = %v", name, i, x)
					break
				}
			}
		}()
	}
}

func TestShapeAndScheduleErrors(t *testing.T) {
	s, _ := New("DDIMScheduler", nil)
	shape := []int{1, 4}
	if _, err := s.Step(make([]float32, 4), 999, make([]float32, 4), shape, nil); err == nil {
		t.Error("DDIM step before set_timesteps: no error")
	}
	_ = s.SetTimesteps(10)
	if _, err := s.Step(make([]float32, 3), 900, make([]float32, 4), shape, nil); err == nil {
		t.Error("wrong model output length: no error")
	}
	e, _ := New("EulerDiscreteScheduler", nil)
	_ = e.SetTimesteps(10)
	if _, err := e.ScaleModelInput(make([]float32, 4), 12.5); err == nil {
		t.Error("Euler: timestep not in schedule: no error")
	}
	for range e.Timesteps() {
		ts := e.Timesteps()
		if _, err := e.ScaleModelInput(make([]float32, 4), ts[0]); err != nil {
			t.Fatal(err)
		}
		if _, err := e.Step(make([]float32, 4), ts[0], make([]float32, 4), shape, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.Step(make([]float32, 4), 0, make([]float32, 4), shape, nil); err == nil {
		t.Error("Euler: step past the end: no error")
	}
	inv, _ := New("DDIMInverseScheduler", nil)
	if _, err := inv.AddNoise(make([]float32, 4), make([]float32, 4), shape, 10); err == nil {
		t.Error("DDIMInverse add_noise: no error")
	}
	f, _ := New("FlowMatchEulerDiscreteScheduler", map[string]any{"use_dynamic_shifting": true})
	if err := f.SetTimesteps(4); err == nil {
		t.Error("dynamic shifting without mu: no error")
	}
	mu := f.(interface{ Mu(int) float64 }).Mu(4096)
	if math.Abs(mu-1.15) > 1e-12 {
		t.Errorf("Mu(4096) = %v, want max_shift 1.15", mu)
	}
	if err := f.(TimestepSetter).SetTimestepsWith(TimestepOptions{NumInferenceSteps: 4, Mu: &mu}); err != nil {
		t.Fatal(err)
	}
}

func TestVarianceNoiseAndEta(t *testing.T) {
	// DDIM with eta > 0 draws noise from the generator; a given variance
	// noise is used instead, and passing both is an error.
	s, _ := New("DDIMScheduler", nil)
	_ = s.SetTimesteps(10)
	shape := []int{1, 16}
	sample := dummySample(shape, false)
	mo := dummyModel(sample, shape, []float64{900})
	os := s.(OptionStepper)
	a, err := os.StepWithOptions(mo, 900, sample, shape, torchrand.NewGenerator(3), StepOptions{Eta: 1})
	if err != nil {
		t.Fatal(err)
	}
	noise := torchrand.NewGenerator(3).Randn(shape...)
	b, err := os.StepWithOptions(mo, 900, sample, shape, nil, StepOptions{Eta: 1, VarianceNoise: noise})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(a, b) {
		t.Fatal("generator noise and the same variance noise give different steps")
	}
	if _, err := os.StepWithOptions(mo, 900, sample, shape, torchrand.NewGenerator(3), StepOptions{Eta: 1, VarianceNoise: noise}); err == nil {
		t.Fatal("generator and variance noise together: no error")
	}
}

// BenchmarkStep measures one scheduler step on SDXL-sized latents
// (1x4x128x128), the per-step host cost a pipeline pays.
func BenchmarkStep(b *testing.B) {
	shape := []int{1, 4, 128, 128}
	sample := torchrand.NewGenerator(1).Randn(shape...)
	eps := torchrand.NewGenerator(2).Randn(shape...)
	for _, name := range []string{"euler", "euler_a", "dpmpp_2m_karras", "unipc", "ddim", "lms"} {
		b.Run(name, func(b *testing.B) {
			s, err := FromShortName(name, map[string]any{"beta_schedule": "scaled_linear", "beta_start": 0.00085, "beta_end": 0.012})
			if err != nil {
				b.Fatal(err)
			}
			gen := torchrand.NewGenerator(0)
			b.SetBytes(int64(len(sample) * 4))
			for i := 0; i < b.N; i++ {
				if i%30 == 0 {
					if err := s.SetTimesteps(30); err != nil {
						b.Fatal(err)
					}
				}
				ts := s.Timesteps()[i%30]
				in, err := s.ScaleModelInput(sample, ts)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := s.Step(eps, ts, in, shape, gen); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestChurn checks the s_churn step shared by Euler, EDM Euler and flow
// matching Heun: gamma from s_churn over the schedule length (capped at
// sqrt(2)-1), noise drawn only inside [s_tmin, s_tmax], scaled by s_noise.
func TestChurn(t *testing.T) {
	sample := []float32{1, 2, 3, 4}
	shape := []int{1, 1, 2, 2}
	// Outside [s_tmin, s_tmax] (and with s_churn 0): no noise, no draw.
	for _, o := range []StepOptions{{}, {SChurn: 1, STMin: 3}, {SChurn: 1, STMax: 1.5}} {
		gen := torchrand.NewGenerator(5)
		hat, out := churn(o, 2, 11, sample, shape, gen)
		if hat != 2 || &out[0] != &sample[0] {
			t.Errorf("%+v: sigma_hat %v, sample moved", o, hat)
		}
		if got, want := gen.Uint32(), torchrand.NewGenerator(5).Uint32(); got != want {
			t.Errorf("%+v: the generator was used", o)
		}
	}
	for _, tc := range []struct {
		o     StepOptions
		gamma float64
		noise float32
	}{
		{StepOptions{SChurn: 1}, 0.1, 1},                            // s_churn / (11 - 1)
		{StepOptions{SChurn: 40, SNoise: 0.5}, math.Sqrt2 - 1, 0.5}, // capped
	} {
		hat, out := churn(tc.o, 2, 11, sample, shape, torchrand.NewGenerator(5))
		wantHat := float32(2) * float32(tc.gamma+1)
		if hat != wantHat {
			t.Errorf("%+v: sigma_hat %v, want %v", tc.o, hat, wantHat)
		}
		noise := torchrand.NewGenerator(5).Randn(shape...)
		c := float32(math.Sqrt(float64(hat*hat - 4)))
		for i := range out {
			want := sample[i] + noise[i]*tc.noise*c
			if math.Abs(float64(out[i]-want)) > 1e-6 {
				t.Errorf("%+v: sample[%d] %v, want %v", tc.o, i, out[i], want)
			}
		}
	}
}
