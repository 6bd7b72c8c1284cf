package compile

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
)

var (
	benchOnce sync.Once
	benchDir  string
	benchErr  error
)

// benchModelDir returns the ~110M-parameter Llama-shape benchmark model
// (dim 768, 12 layers, 12 heads, intermediate 2048, vocab 32000, f32),
// from $TPUTOOL_BENCH_MODEL or generated once into a temporary directory.
func benchModelDir(b *testing.B) string {
	if d := os.Getenv("TPUTOOL_BENCH_MODEL"); d != "" {
		return d
	}
	benchOnce.Do(func() {
		benchDir, benchErr = os.MkdirTemp("", "tputool-bench-llm-")
		if benchErr == nil {
			benchErr = lmckpt.LlamaShape(768, 12, 12, 2048, 32000).Write(benchDir)
		}
	})
	if benchErr != nil {
		b.Fatal(benchErr)
	}
	return benchDir
}

func TestMain(m *testing.M) {
	code := m.Run()
	if benchDir != "" {
		os.RemoveAll(benchDir)
	}
	os.Exit(code)
}

// cpuTime is the CPU time this process used (user + system): with other
// work on the machine, CPU per step shows the cost that wall time hides.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// availableCores runs one busy goroutine per CPU for about half a second
// and returns CPU time over wall time: how many cores this process gets
// while other work shares the machine (wall-clock numbers scale with it).
func availableCores() float64 {
	n := runtime.NumCPU()
	w0, c0 := time.Now(), cpuTime()
	var wg sync.WaitGroup
	sink := make([]int, n)
	for g := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Since(w0) < 500*time.Millisecond {
				for i := range 1 << 16 {
					sink[g] += i & 7
				}
			}
		}()
	}
	wg.Wait()
	return (cpuTime() - c0).Seconds() / time.Since(w0).Seconds()
}

// memcpyGBs measures host memory bandwidth as bytes copied per second by
// Go's copy (memmove) of a 256 MiB buffer, best of 5.
func memcpyGBs() float64 {
	const n = 256 << 20
	src, dst := make([]byte, n), make([]byte, n)
	for i := range src {
		src[i] = byte(i)
	}
	copy(dst, src)
	best := 0.0
	for range 5 {
		start := time.Now()
		copy(dst, src)
		best = max(best, float64(n)/time.Since(start).Seconds()/1e9)
	}
	return best
}

// BenchmarkLLM measures decode and prefill throughput of the benchmark
// model on the pure-Go backend (opened as tpu.Open does). Prompts are 64
// tokens; the cache is fixed at 256 slots, so decode steps attend over 64
// to 256 positions. Metrics: tok/s (tokens produced or consumed per
// second, all rows), and for decode the fraction of the memory-bandwidth
// roofline: weight bytes read per step / step time, divided by the measured
// memcpy bandwidth.
func BenchmarkLLM(b *testing.B) {
	dir := benchModelDir(b)
	be := goBackend(b)
	l, err := lmckpt.Load(dir)
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	weightBytes := float64(l.WeightBytes())
	bw := memcpyGBs()
	b.Logf("model %s: %.0f MB of weights; memcpy %.1f GB/s; %.2f of %d cores available", filepath.Base(dir), weightBytes/1e6, bw, availableCores(), runtime.NumCPU())
	for _, mode := range []Mode{Compiled, Eager} {
		for _, batch := range []int{1, 8} {
			r, err := NewRunner(be, l, Options{Mode: mode, CacheLen: 256})
			gen := r.NewState()
			if err != nil {
				b.Fatal(err)
			}
			prompts := make([][]int, batch)
			for i := range prompts {
				prompts[i] = make([]int, 64)
				for j := range prompts[i] {
					prompts[i][j] = 1 + (i*131+j*17)%31999
				}
			}
			next := make([]int, batch)
			b.Run(fmt.Sprintf("decode/%s/batch%d", mode, batch), func(b *testing.B) {
				if _, err := gen.Prefill(prompts, 8); err != nil {
					b.Fatal(err)
				}
				if _, err := gen.Decode(next); err != nil { // compile
					b.Fatal(err)
				}
				b.ResetTimer()
				cpu0 := cpuTime()
				for i := 0; i < b.N; i++ {
					if gen.next >= gen.cacheLen {
						b.StopTimer()
						if _, err := gen.Prefill(prompts, 8); err != nil {
							b.Fatal(err)
						}
						b.StartTimer()
					}
					if _, err := gen.Decode(next); err != nil {
						b.Fatal(err)
					}
				}
				sec := b.Elapsed().Seconds() / float64(b.N)
				b.ReportMetric(float64(batch)/sec, "tok/s")
				b.ReportMetric(100*weightBytes/sec/1e9/bw, "roofline%")
				b.ReportMetric((cpuTime()-cpu0).Seconds()*1e3/float64(b.N), "cpu-ms/step")
			})
			b.Run(fmt.Sprintf("prefill/%s/batch%d", mode, batch), func(b *testing.B) {
				if _, err := gen.Prefill(prompts, 8); err != nil { // compile
					b.Fatal(err)
				}
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					if _, err := gen.Prefill(prompts, 8); err != nil {
						b.Fatal(err)
					}
				}
				sec := b.Elapsed().Seconds() / float64(b.N)
				b.ReportMetric(float64(batch*len(prompts[0]))/sec, "tok/s")
			})
			r.Close()
		}
	}
}
