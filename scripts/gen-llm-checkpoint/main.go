// Command gen-llm-checkpoint writes a Llama-shape checkpoint with
// deterministic pseudo-random weights (config.json, generation_config.json,
// model.safetensors) for benchmarks and manual runs of tputool generate.
// It is not a trained model: its text is gibberish.
//
//	go run ./scripts/gen-llm-checkpoint -o /tmp/llama-110m            # the benchmark model
//	go run ./scripts/gen-llm-checkpoint -o /tmp/m -hidden 256 -layers 4 -vocab 4096
//	go run ./scripts/gen-llm-checkpoint -o /tmp/q9b -dtype BF16 -config testdata/configs/qwen3_5_9b/config.json
//	go run ./scripts/gen-llm-checkpoint -o /tmp/gptoss20b -dtype BF16 -config testdata/configs/gpt_oss_20b/config.json  # MXFP4 experts
//
// With -config it writes every tensor the architecture of that config.json
// reads (any architecture tputool runs; with a multi-token-prediction head
// where the config declares one, mtp_num_hidden_layers), streaming, so an 18 GB checkpoint
// needs a few MiB of memory.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/tputool/tputool/loader/safetensors"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
)

func main() {
	out := flag.String("o", "", "output directory (required)")
	hidden := flag.Int("hidden", 768, "hidden_size")
	layers := flag.Int("layers", 12, "num_hidden_layers")
	heads := flag.Int("heads", 12, "num_attention_heads (= num_key_value_heads)")
	inter := flag.Int("intermediate", 2048, "intermediate_size")
	vocab := flag.Int("vocab", 32000, "vocab_size")
	dtype := flag.String("dtype", "F32", "stored dtype: F32, F16 or BF16")
	cfg := flag.String("config", "", "config.json of any architecture tputool runs: write its tensors (streaming) instead of a Llama shape")
	apart := flag.Bool("experts-apart", false, "with -config: write expert stacks as one tensor per expert projection")
	flag.Parse()
	if *out == "" {
		fmt.Fprintln(os.Stderr, "gen-llm-checkpoint: -o is required")
		os.Exit(2)
	}
	if *cfg != "" {
		if err := writeFromConfig(*cfg, *out, safetensors.DType(*dtype), *apart); err != nil {
			fmt.Fprintln(os.Stderr, "gen-llm-checkpoint:", err)
			os.Exit(1)
		}
		return
	}
	t := lmckpt.LlamaShape(*hidden, *layers, *heads, *inter, *vocab)
	t.DType = safetensors.DType(*dtype)
	if err := t.Write(*out); err != nil {
		fmt.Fprintln(os.Stderr, "gen-llm-checkpoint:", err)
		os.Exit(1)
	}
}
