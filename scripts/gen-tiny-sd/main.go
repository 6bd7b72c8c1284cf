// Command gen-tiny-sd writes a small generated diffusers pipeline (random
// weights, exact diffusers tensor names) for tests and benchmarks:
//
//	go run ./scripts/gen-tiny-sd -preset tiny-sd -o /tmp/tiny-sd
//	go run ./scripts/gen-tiny-sd -preset tiny-sdxl -o /tmp/tiny-sdxl
//	go run ./scripts/gen-tiny-sd -preset tiny-sd3 -o /tmp/tiny-sd3
//	go run ./scripts/gen-tiny-sd -preset sd-100m -o /tmp/sd-100m
//
// Tests generate the same pipelines through the Go package
// pipeline/testkit/sdckpt into t.TempDir(), so no weights are committed.
package main

import (
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/tputool/tputool/pipeline/testkit/sdckpt"
)

func main() {
	presets := sdckpt.Presets()
	var names []string
	for n := range presets {
		names = append(names, n)
	}
	sort.Strings(names)
	preset := flag.String("preset", "tiny-sd", "pipeline to generate: "+strings.Join(names, ", "))
	out := flag.String("o", "", "output directory (required)")
	dtype := flag.String("dtype", "F32", "stored dtype: F32, F16 or BF16")
	variant := flag.String("variant", "", `weight file variant, e.g. "fp16" for *.fp16.safetensors`)
	seed := flag.Uint64("seed", 0, "weight seed (0: the preset's)")
	flag.Parse()
	spec, ok := presets[*preset]
	if !ok || *out == "" {
		fmt.Fprintf(os.Stderr, "usage: gen-tiny-sd -preset {%s} -o DIR\n", strings.Join(names, ","))
		os.Exit(2)
	}
	spec.DType = *dtype
	spec.Variant = *variant
	if *seed != 0 {
		spec.Seed = *seed
	}
	if err := sdckpt.Generate(*out, spec); err != nil {
		fmt.Fprintln(os.Stderr, "gen-tiny-sd:", err)
		os.Exit(1)
	}
	fmt.Printf("%s: %s pipeline, denoiser %.2fM parameters\n", *out, spec.Name, float64(spec.DenoiserParameters())/1e6)
}
