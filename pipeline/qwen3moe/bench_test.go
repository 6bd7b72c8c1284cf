package qwen3moe_test

import (
	"fmt"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gomlx/gomlx/backends"

	"github.com/tputool/tputool/compile"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
	"github.com/tputool/tputool/pipeline/testkit/qwenref"
	"github.com/tputool/tputool/pipeline/testkit/refcheck"
)

var (
	benchOnce sync.Once
	benchDir  string
	benchErr  error
)

// benchModelDir returns the MoE benchmark model (qwenref.BenchMoE: hidden
// 512, 4 layers, 64 experts of 256, top 8, f32, ~110M parameters of which
// 96% are experts), from $TPUTOOL_BENCH_MOE_MODEL or generated once into a
// temporary directory.
func benchModelDir(b *testing.B) string {
	if d := os.Getenv("TPUTOOL_BENCH_MOE_MODEL"); d != "" {
		return d
	}
	benchOnce.Do(func() {
		benchDir, benchErr = os.MkdirTemp("", "tputool-bench-moe-")
		if benchErr == nil {
			benchErr = qwenref.BenchMoE().Write(benchDir)
		}
	})
	if benchErr != nil {
		b.Fatal(benchErr)
	}
	return benchDir
}

// cpuTime is the process's user+system CPU time: on a shared machine it
// moves less than wall-clock time when other work competes for the cores.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func TestMain(m *testing.M) {
	code := m.Run()
	if benchDir != "" {
		os.RemoveAll(benchDir)
	}
	os.Exit(code)
}

// BenchmarkMoEDecode measures decode throughput (tokens produced per
// second, all rows) of the MoE benchmark model at batch 1 and 64 on
// tputool's cpu backend and on the pure-Go one, for each experts
// formulation: in the graph (the chosen experts gathered by index, which
// the cpu backend runs as its grouped kernel), grouped on the host
// (compiled and eager), and dense (every expert on every token).
// Prompts are 8 tokens; the cache holds 512. cpu_ms/step is the process
// CPU time per decode step (both cores count), steadier than tok/s when
// other work shares the machine. Select cases with -bench, e.g.
// 'MoEDecode/cpu/batch1'. Run it with scripts/bench-moe.sh.
func BenchmarkMoEDecode(b *testing.B) {
	dir := benchModelDir(b)
	l, err := lmckpt.Load(dir)
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	b.Logf("model %s: %.0f MB of weights", dir, float64(l.WeightBytes())/1e6)
	for _, backend := range []string{"cpu", "go"} {
		be := refcheck.GoBackend(b)
		if backend == "cpu" {
			be = refcheck.CPUBackend(b)
		}
		b.Run(backend, func(b *testing.B) { benchMoEDecode(b, be, l) })
	}
}

func benchMoEDecode(b *testing.B, be backends.Backend, l *lm.Loaded) {
	for _, batch := range []int{1, 64} {
		for _, v := range []struct {
			name string
			opts compile.Options
		}{
			{"graph-compiled", compile.Options{Mode: compile.Compiled, CacheLen: 512}},
			{"host-compiled", compile.Options{Mode: compile.Compiled, CacheLen: 512, Experts: compile.ExpertsHost}},
			{"host-eager", compile.Options{Mode: compile.Eager, CacheLen: 512, Experts: compile.ExpertsHost}},
			{"dense-compiled", compile.Options{Mode: compile.Compiled, CacheLen: 512, Experts: compile.ExpertsDense}},
		} {
			r, err := compile.NewRunner(be, l, v.opts)
			if err != nil {
				b.Fatal(err)
			}
			gen := r.NewState()
			prompts := make([][]int, batch)
			for i := range prompts {
				prompts[i] = make([]int, 8)
				for j := range prompts[i] {
					prompts[i][j] = 1 + (i*131+j*17)%4095
				}
			}
			b.Run(fmt.Sprintf("batch%d/%s", batch, v.name), func(b *testing.B) {
				next := make([]int, batch)
				logits, err := gen.Prefill(prompts, 8)
				if err != nil {
					b.Fatal(err)
				}
				used := 8
				feed := func() {
					for i := range next {
						next[i] = refcheck.Argmax(logits[i]) // greedy: realistic, varying routing
					}
				}
				// Warm up: compile the shapes the first steps route to.
				for range 4 {
					feed()
					if logits, err = gen.Decode(next); err != nil {
						b.Fatal(err)
					}
					used++
				}
				compiled := r.CompileDuration()
				cpu0 := cpuTime()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					if used >= 512 {
						b.StopTimer()
						if logits, err = gen.Prefill(prompts, 8); err != nil {
							b.Fatal(err)
						}
						used = 8
						b.StartTimer()
					}
					feed()
					if logits, err = gen.Decode(next); err != nil {
						b.Fatal(err)
					}
					used++
				}
				// Shapes first seen inside the loop (a new group capacity)
				// compile there; that time is not decode time.
				recompile := r.CompileDuration() - compiled
				cpu := cpuTime() - cpu0
				sec := (b.Elapsed() - recompile).Seconds() / float64(b.N)
				b.ReportMetric(float64(batch)/sec, "tok/s")
				b.ReportMetric(float64((cpu-recompile).Milliseconds())/float64(b.N), "cpu_ms/step")
				b.ReportMetric(float64(r.Stats().Executables), "executables")
				b.ReportMetric(recompile.Seconds(), "recompile_s")
			})
			r.Close()
		}
	}
}
