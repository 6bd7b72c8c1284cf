package sd_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tputool/tputool/pipeline/diffusion/sd"
	"github.com/tputool/tputool/pipeline/diffusion/vae"
	"github.com/tputool/tputool/pipeline/schedulers"
	"github.com/tputool/tputool/pipeline/testkit/sdckpt"
	"github.com/tputool/tputool/pipeline/torchrand"
)

// editJSON rewrites the JSON object in dir/name with edit.
func editJSON(t *testing.T, dir, name string, edit func(m map[string]any)) {
	t.Helper()
	path := filepath.Join(dir, name)
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	m := map[string]any{}
	require.NoError(t, json.Unmarshal(b, &m))
	edit(m)
	b, err = json.Marshal(m)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, b, 0o644))
}

// loadEdited generates spec, applies edits (file name -> edit) and loads
// it, on the go backend unless opts names one.
func loadEdited(t *testing.T, spec sdckpt.Spec, opts sd.Options, edits map[string]func(map[string]any)) *sd.Pipeline {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, sdckpt.Generate(dir, spec))
	for name, edit := range edits {
		editJSON(t, dir, name, edit)
	}
	if opts.Backend == nil {
		g := goOptions(t)
		opts.Backend, opts.Executor = g.Backend, g.Executor
	}
	p, err := sd.Load(dir, opts)
	require.NoError(t, err)
	t.Cleanup(p.Close)
	return p
}

// Each pipeline class unscales the latents its own way before vae.decode
// and ignores the VAE config fields it does not read: SD reads only
// scaling_factor; SDXL latents_mean/std (when both are set) with
// scaling_factor, never shift_factor; SD3 scaling_factor and shift_factor,
// never latents_mean/std.
func TestUnscaleFollowsPipelineClass(t *testing.T) {
	cfg := func(js string) *vae.Config {
		c, err := vae.ParseConfig([]byte(`{"block_out_channels": [32], "latent_channels": 2, "scaling_factor": 0.5` + js + `}`))
		require.NoError(t, err)
		return c
	}
	all := cfg(`, "shift_factor": 0.25, "latents_mean": [1, 2], "latents_std": [2, 4]`)
	for _, c := range []struct {
		name    string
		p       *sd.Pipeline
		want    []float32
		because string
	}{
		{"sd", &sd.Pipeline{VAE: &vae.Model{Cfg: all}}, []float32{2, 2, 2, 2}, "latents / scaling_factor"},
		{"sdxl", &sd.Pipeline{XL: true, VAE: &vae.Model{Cfg: all}}, []float32{5, 5, 10, 10}, "latents * std / scaling_factor + mean"},
		{"sdxl shift only", &sd.Pipeline{XL: true, VAE: &vae.Model{Cfg: cfg(`, "shift_factor": 0.25`)}}, []float32{2, 2, 2, 2}, "no shift_factor"},
		{"sdxl mean only", &sd.Pipeline{XL: true, VAE: &vae.Model{Cfg: cfg(`, "latents_mean": [1, 2]`)}}, []float32{2, 2, 2, 2}, "mean/std need both"},
		{"sd3", &sd.Pipeline{SD3: true, VAE: &vae.Model{Cfg: all}}, []float32{2.25, 2.25, 2.25, 2.25}, "latents / scaling_factor + shift_factor"},
	} {
		z := []float32{1, 1, 1, 1} // [1, 2, 1, 2]
		c.p.Unscale(z, 2, 2)
		require.Equal(t, c.want, z, "%s: %s", c.name, c.because)
	}

	// float32 arithmetic, as torch: x / float32(0.18215), not a float64 division.
	z := []float32{0.1, -0.7, 1.3, 2.9}
	want := append([]float32(nil), z...)
	(&sd.Pipeline{VAE: &vae.Model{Cfg: cfg(`, "scaling_factor": 0.18215`)}}).Unscale(z, 2, 2)
	for i := range want {
		want[i] /= float32(0.18215)
	}
	require.Equal(t, want, z)
}

// The VAE fields a class ignores leave its images unchanged end to end.
func TestUnscaleIgnoredVAEFieldsLeaveImagesUnchanged(t *testing.T) {
	for _, c := range []struct {
		spec  sdckpt.Spec
		extra map[string]any
	}{
		{sdckpt.TinySD(), map[string]any{"shift_factor": 0.3, "latents_mean": []float64{1, 2, 3, 4}, "latents_std": []float64{2, 2, 2, 2}}},
		{sdckpt.TinySDXL(), map[string]any{"shift_factor": 0.3}},
	} {
		t.Run(c.spec.Name, func(t *testing.T) {
			req := sd.Request{Prompt: "fox", Steps: 1, Guidance: 1, Width: 32, Height: 32, Batch: 1, Seed: 5}
			plain := loadEdited(t, c.spec, sd.Options{}, nil)
			a, err := plain.Generate(context.Background(), req)
			require.NoError(t, err)
			extra := loadEdited(t, c.spec, sd.Options{}, map[string]func(map[string]any){"vae/config.json": func(m map[string]any) {
				for k, v := range c.extra {
					m[k] = v
				}
			}})
			b, err := extra.Generate(context.Background(), req)
			require.NoError(t, err)
			require.Equal(t, a.Images[0].Pix, b.Images[0].Pix)
		})
	}
}

// A scheduler config whose Karras sigmas start above the largest training
// sigma gives the first timestep (999) several times. diffusers' SDXL
// pipeline calls set_begin_index(0), so it starts at sigma[0] and runs every
// step; looking the timestep up (what the SD pipeline does) takes the second
// occurrence and, in the Euler and DPM-Solver steps, runs off the end of the
// schedule at the last step.
func TestSDXLBeginIndexWithRepeatedFirstTimestep(t *testing.T) {
	karras := map[string]func(map[string]any){"scheduler/scheduler_config.json": func(m map[string]any) {
		m["use_karras_sigmas"] = true
		m["sigma_max"] = 80.0
	}}
	xl := loadEdited(t, sdckpt.TinySDXL(), sd.Options{}, karras)
	const steps = 10
	for _, name := range []string{"", "dpmpp_2m_karras"} {
		s, err := xl.NewScheduler(name)
		require.NoError(t, err)
		require.NoError(t, s.SetTimesteps(steps))
		ts := s.Timesteps()
		require.Equal(t, ts[0], ts[1], "%s timesteps %v", s.Name(), ts)
		calls := 0
		r, err := xl.Generate(context.Background(), sd.Request{Prompt: "fox", Steps: steps, Guidance: 1, Width: 32, Height: 32,
			Batch: 1, Seed: 7, Scheduler: name, OnStep: func(step, total int) { calls++ }})
		require.NoError(t, err, "scheduler %q", name)
		require.Equal(t, steps, calls)
		require.Len(t, r.Images, 1)
	}

	// The first model input is scaled by sigma[0] under SDXL, sigma[1]
	// under SD (whose pipeline does not set the begin index).
	req := sd.Request{Steps: steps}
	firstScale := func(p *sd.Pipeline) (got float32, sigmas []float64) {
		s, err := p.NewScheduler("")
		require.NoError(t, err)
		require.Equal(t, "EulerDiscreteScheduler", s.Name())
		require.NoError(t, sd.StartSchedule(p, s, req))
		ts := s.Timesteps()
		require.Equal(t, ts[0], ts[1], "timesteps %v", ts)
		in, err := s.ScaleModelInput([]float32{1}, ts[0])
		require.NoError(t, err)
		return in[0], s.(schedulers.SigmaProvider).Sigmas()
	}
	got, sigmas := firstScale(xl)
	require.InEpsilon(t, 1/math.Sqrt(sigmas[0]*sigmas[0]+1), got, 1e-6, "SDXL starts at sigma[0]=%v", sigmas[0])
	sdEuler := loadEdited(t, sdckpt.TinySD(), sd.Options{}, map[string]func(map[string]any){"scheduler/scheduler_config.json": func(m map[string]any) {
		m["_class_name"] = "EulerDiscreteScheduler"
		karras["scheduler/scheduler_config.json"](m)
	}})
	got, sigmas = firstScale(sdEuler)
	require.InEpsilon(t, 1/math.Sqrt(sigmas[1]*sigmas[1]+1), got, 1e-6, "SD looks 999 up: sigma[1]=%v", sigmas[1])
}

// diffusers' SD3 prepare_latents does not multiply the noise by
// init_noise_sigma (SD and SDXL do): with a scheduler whose
// init_noise_sigma is not 1 the SD3 starting latents are the plain noise.
func TestSD3InitialNoiseIsNotScaled(t *testing.T) {
	p := load(t, sdckpt.TinySD3(), sd.Options{})
	s, err := p.NewScheduler("euler")
	require.NoError(t, err)
	require.NoError(t, s.SetTimesteps(2))
	require.Greater(t, s.InitNoiseSigma(), 1.0)
	r, err := p.Generate(context.Background(), sd.Request{Prompt: "fox", Steps: 2, Guidance: 1, Width: 32, Height: 32,
		Batch: 1, Seed: 9, Scheduler: "euler"})
	require.NoError(t, err)
	require.Equal(t, torchrand.NewGenerator(9).Randn(1, 16, 4, 4), r.InitialLatents)
}

// A safety_checker in model_index.json (SD 1.x repositories) is not run:
// loading warns, and a [null, null] entry does not.
func TestSafetyCheckerWarns(t *testing.T) {
	var warnings []string
	warn := sd.Options{Warn: func(format string, args ...any) { warnings = append(warnings, fmt.Sprintf(format, args...)) }}
	loadEdited(t, sdckpt.TinySD(), warn, nil)
	require.Empty(t, warnings)
	loadEdited(t, sdckpt.TinySD(), warn, map[string]func(map[string]any){"model_index.json": func(m map[string]any) {
		m["safety_checker"] = []any{"stable_diffusion", "StableDiffusionSafetyChecker"}
		m["requires_safety_checker"] = true
	}})
	require.Len(t, warnings, 1)
	require.Contains(t, warnings[0], "safety_checker (StableDiffusionSafetyChecker) that is not run")
}
