package sd_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tputool/tputool/pipeline/diffusion/sd"
	"github.com/tputool/tputool/pipeline/testkit/sdckpt"
)

// BenchmarkDenoise measures seconds per denoising step (one UNet call with
// classifier-free guidance, batch 2) and the compile time, eager against
// compiled, at 64x64 and 256x256, on the tiny SD pipeline and on a ~100M
// parameter SD-like UNet (sdckpt.SD100M). The 100M pipeline is generated
// into a temporary folder (about 400 MB) unless TPUTOOL_SD100M names an
// existing one (go run ./scripts/gen-tiny-sd -preset sd-100m -o DIR).
//
//	nice go test ./pipeline/diffusion/sd -run '^$' -bench Denoise -benchtime 3x -timeout 60m
//
// cpu-s/step is the process CPU time per step (both cores count): on a
// machine shared with other work it is steadier than the wall time.
//
// Each iteration is one Generate call of benchSteps steps after a one-step
// warm-up call that compiles; metrics: s/step (compile excluded),
// denoiser-compile-s and compile-s (all models) of the warm-up call, and
// first-step-s (the warm-up's step; in eager mode it includes compiling
// each block).
func BenchmarkDenoise(b *testing.B) {
	type model struct {
		name string
		dir  func(b *testing.B) string
	}
	models := []model{
		{"tiny-sd", func(b *testing.B) string {
			dir := b.TempDir()
			require.NoError(b, sdckpt.Generate(dir, sdckpt.TinySD()))
			return dir
		}},
		{"sd-100m", func(b *testing.B) string {
			if dir := os.Getenv("TPUTOOL_SD100M"); dir != "" {
				return dir
			}
			dir := b.TempDir()
			require.NoError(b, sdckpt.Generate(dir, sdckpt.SD100M()))
			return dir
		}},
	}
	const benchSteps = 2
	for _, m := range models {
		b.Run(m.name, func(b *testing.B) {
			dir := m.dir(b)
			for _, size := range []int{64, 256} {
				for _, mode := range []string{"compiled", "eager"} {
					b.Run(fmt.Sprintf("%dx%d/%s", size, size, mode), func(b *testing.B) {
						p, err := sd.Load(dir, goOptions(b))
						require.NoError(b, err)
						defer p.Close()
						req := sd.Request{Prompt: "a red fox", Steps: benchSteps, Guidance: 7.5, Width: size, Height: size,
							Batch: 1, Seed: 1, Eager: mode == "eager"}
						first := req
						first.Steps = 1
						warm, err := p.Generate(context.Background(), first)
						require.NoError(b, err)
						b.ResetTimer()
						var stepSec, cpuSec float64
						for i := 0; i < b.N; i++ {
							// CPU time of the steps alone: OnPhase marks the loop's start and end.
							var cpu0, cpu1 time.Duration
							req.OnPhase = func(phase string, _ int) {
								switch phase {
								case sd.PhaseDenoise:
									cpu0 = cpuTime()
								case sd.PhaseDecode:
									cpu1 = cpuTime()
								}
							}
							r, err := p.Generate(context.Background(), req)
							require.NoError(b, err)
							require.Zero(b, r.Timings.Compiles)
							stepSec += r.Timings.StepSeconds()
							cpuSec += (cpu1 - cpu0).Seconds() / float64(len(r.Timings.Steps))
						}
						b.ReportMetric(stepSec/float64(b.N), "s/step")
						b.ReportMetric(cpuSec/float64(b.N), "cpu-s/step")
						b.ReportMetric(warm.Timings.CompileDenoiser.Seconds(), "denoiser-compile-s")
						b.ReportMetric(warm.Timings.Compile().Seconds(), "compile-s")
						b.ReportMetric(warm.Timings.Steps[0].Seconds(), "first-step-s")
					})
				}
			}
		})
	}
}
