// Command fp8-checkpoint writes a block-wise FP8 copy of a Hugging Face
// checkpoint, as the Hub's FP8 releases store theirs (quant_method "fp8",
// E4M3 weights and one f32 weight_scale_inv per block): every Linear
// projection (a 2-D tensor whose name ends in "proj.weight") becomes
// E4M3 with scale max|w|/448 per block of -block×-block; everything else
// (embeddings, norms, the head) is copied as it is. For benchmarks of
// tputool's FP8 path on machines that cannot download a real FP8
// release:
//
//	go run ./scripts/fp8-checkpoint -m /tmp/llama-110m -o /tmp/llama-110m-fp8
//
// With -fbgemm it writes Meta's fbgemm_fp8 form instead: one scale per
// output channel, PREFIX.weight_scale f32 [out, 1]. With -per-tensor, one
// scale a matrix (weight_block_size null, a scalar weight_scale_inv, and
// activation_scheme "static" with a scalar activation_scale per
// projection), as Mistral's FP8 releases (Ministral 3) store them.
//
// The whole checkpoint is held in memory while it is written.
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
	block := flag.Int("block", 128, "weight_block_size: rows and columns that share one scale")
	fbgemm := flag.Bool("fbgemm", false, "write fbgemm_fp8: a scale per output channel")
	perTensor := flag.Bool("per-tensor", false, "write per-tensor fp8: one scale a matrix (weight_block_size null)")
	flag.Parse()
	if *src == "" || *out == "" || *block <= 0 {
		fmt.Fprintln(os.Stderr, "fp8-checkpoint: -m and -o are required, -block must be positive")
		os.Exit(2)
	}
	if err := lmckpt.WriteFP8Copy(*src, *out, lmckpt.FP8Options{Block: *block, FBGEMM: *fbgemm, PerTensor: *perTensor}); err != nil {
		fmt.Fprintln(os.Stderr, "fp8-checkpoint:", err)
		os.Exit(1)
	}
}
