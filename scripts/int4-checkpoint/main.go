// Command int4-checkpoint writes a 4-bit copy of a Hugging Face
// checkpoint in the layout of the Hub's GPTQ or AWQ releases: every Linear
// projection (a 2-D tensor whose name ends in "proj.weight") becomes
// PREFIX.qweight, PREFIX.qzeros and f16 PREFIX.scales per group of -group
// input columns, quantised by rounding to nearest (not by GPTQ's or AWQ's
// own algorithms: the layout, the memory and the speed are what the
// benchmarks measure, not the quality); everything else (embeddings,
// norms, the head) is copied as it is. For benchmarks of tputool's
// grouped int4 path on machines that cannot download a real release:
//
//	go run ./scripts/int4-checkpoint -m /tmp/llama-110m -o /tmp/llama-110m-gptq
//	go run ./scripts/int4-checkpoint -m /tmp/llama-110m -o /tmp/llama-110m-awq -format awq
//	go run ./scripts/int4-checkpoint -m /tmp/llama-110m -o /tmp/llama-110m-nvfp4 -format nvfp4
//
// -format gptq writes GPTQ v1 (zero points stored minus one), symmetric
// (every zero point 8) unless -asym, and with -desc-act an activation
// order: each group's columns spread over the row by a fixed shuffle, as
// g_idx; awq writes AutoAWQ's gemm layout, always with zero points;
// nvfp4 writes compressed-tensors' nvfp4-pack-quantized (E2M1 codes, E4M3
// scales by 16, a global scale; -group and -asym do not apply)
// (lmckpt.WriteInt4Copy). The whole checkpoint is held in memory while it
// is written.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
)

func main() {
	src := flag.String("m", "", "source model folder (config.json and safetensors)")
	out := flag.String("o", "", "output folder")
	format := flag.String("format", "gptq", "gptq, awq or nvfp4")
	group := flag.Int("group", 128, "input columns that share a scale and zero point")
	asym := flag.Bool("asym", false, "gptq: zero points per group (awq always has them)")
	descAct := flag.Bool("desc-act", false, "gptq: groups in a shuffled column order, with g_idx")
	flag.Parse()
	if *src == "" || *out == "" || *group <= 0 || (*format != "gptq" && *format != "awq" && *format != "nvfp4") {
		fmt.Fprintln(os.Stderr, "int4-checkpoint: -m and -o are required, -format is gptq, awq or nvfp4, -group must be positive")
		os.Exit(2)
	}
	if err := lmckpt.WriteInt4Copy(*src, *out, lmckpt.Int4Options{Format: *format, Group: *group, Asym: *asym, DescAct: *descAct}); err != nil {
		fmt.Fprintln(os.Stderr, "int4-checkpoint:", err)
		os.Exit(1)
	}
}
