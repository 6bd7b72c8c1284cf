// Command bitnet-checkpoint writes a BitNet b1.58 copy of a Hugging Face
// checkpoint, as transformers' BitNet integration stores one
// (quant_method "bitnet", quantization_mode "offline"): every Linear
// projection (a 2-D tensor whose name ends in "proj.weight") becomes its
// ternary code round(w / mean|w|) clamped to [-1, 1], packed four a byte
// along the output axis, with a bf16 weight_scale beside it (mean|w| for
// -class autobitlinear, which multiplies by it, as
// microsoft/bitnet-b1.58-2B-4T stores its; 1/mean|w| for bitlinear, which
// divides); everything else (embeddings, norms, the head) is copied as it
// is. For tests and benchmarks of tputool's BitNet path on machines that
// cannot download a release:
//
//	go run ./scripts/gen-llm-checkpoint -config bitnet.json -dtype BF16 -o /tmp/bitnet-bf16
//	go run ./scripts/bitnet-checkpoint -m /tmp/bitnet-bf16 -o /tmp/bitnet
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
	class := flag.String("class", "autobitlinear", "linear_class: autobitlinear (weight_scale multiplies) or bitlinear (it divides)")
	flag.Parse()
	if *src == "" || *out == "" || (*class != "autobitlinear" && *class != "bitlinear") {
		fmt.Fprintln(os.Stderr, "bitnet-checkpoint: -m and -o are required, -class must be autobitlinear or bitlinear")
		os.Exit(2)
	}
	if err := lmckpt.WriteBitNetCopy(*src, *out, *class == "autobitlinear"); err != nil {
		fmt.Fprintln(os.Stderr, "bitnet-checkpoint:", err)
		os.Exit(1)
	}
}
