// Command draft-pair writes a model and a draft model for it from one
// checkpoint of a decoder whose layers are model.layers.N (Llama, Qwen,
// Qwen3-MoE), for benchmarks of speculative decoding with a draft model
// (tputool generate --draft-model) where no trained pair can be
// downloaded. The draft is the checkpoint's first -layers layers with
// its final norm and head; the model is the whole checkpoint with the
// output projections (o_proj, a linear attention's out_proj, down_proj,
// the experts' stacked down_proj) of the later layers scaled by -scale:
// those layers cost what they cost but move the text only as much as
// -scale lets them, so -scale 0 gives a model the draft always agrees
// with, and larger values one it agrees with less often. -layers 0
// writes the model alone, every layer scaled: with -scale 0 and tied
// embeddings its greedy text repeats its last token, prompt lookup's
// best case at the full model's cost.
//
//	go run ./scripts/draft-pair -m /tmp/llama-110m -layers 1 -scale 0.3 -o /tmp/pair
//	tputool generate -m /tmp/pair/model --draft-model /tmp/pair/draft -p ...
//
// -mtp-echo makes a multi-token-prediction head (Qwen3.5's mtp.*) in the
// checkpoint predict what the model with every layer's output zeroed
// predicts (lmckpt.EchoMTP): with -layers 0 -scale 0, a head whose every
// draft is confirmed (tputool generate --mtp).
//
// Every file of -m but the weights and config.json (the tokenizer) is
// copied into both. The whole checkpoint is held in memory while it is
// written.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"

	"github.com/tputool/tputool/loader/safetensors"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
)

func main() {
	src := flag.String("m", "", "source model folder (a Llama-shaped checkpoint: config.json and model.safetensors)")
	out := flag.String("o", "", "output folder: the model goes to OUT/model, the draft to OUT/draft")
	layers := flag.Int("layers", 1, "the draft's layers: the model's first ones (0: no draft, every layer of the model scaled)")
	scale := flag.Float64("scale", 0, "the factor on the later layers' o_proj and down_proj in the model")
	echo := flag.Bool("mtp-echo", false, "make the checkpoint's multi-token-prediction head (mtp.*) predict what the model with every layer's output zeroed predicts")
	flag.Parse()
	if *src == "" || *out == "" || *layers < 0 {
		fmt.Fprintln(os.Stderr, "draft-pair: -m and -o are required, -layers must be 0 or more")
		os.Exit(2)
	}
	if err := run(*src, *out, *layers, float32(*scale), *echo); err != nil {
		fmt.Fprintln(os.Stderr, "draft-pair:", err)
		os.Exit(1)
	}
}

var (
	layerName = regexp.MustCompile(`^model\.layers\.(\d+)\.`)
	output    = regexp.MustCompile(`\.(o_proj|out_proj|down_proj)(\.weight)?$`)
)

func run(src, out string, keep int, scale float32, echo bool) error {
	var cfg map[string]any
	b, err := os.ReadFile(filepath.Join(src, "config.json"))
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, &cfg); err != nil {
		return fmt.Errorf("%s/config.json: %w", src, err)
	}
	n, _ := cfg["num_hidden_layers"].(float64)
	if int(n) <= keep {
		return fmt.Errorf("%s has %v layers: -layers must be fewer", src, cfg["num_hidden_layers"])
	}
	ck, err := safetensors.OpenDir(src, "")
	if err != nil {
		return err
	}
	defer ck.Close()
	var model, draft []safetensors.Tensor
	for _, name := range ck.Names() {
		info, _ := ck.Info(name)
		raw, err := ck.Raw(name)
		if err != nil {
			return err
		}
		t := safetensors.Tensor{Name: name, DType: info.DType, Shape: info.Shape, Data: raw}
		layer := -1
		if m := layerName.FindStringSubmatch(name); m != nil {
			layer, _ = strconv.Atoi(m[1])
		}
		if layer < keep {
			draft = append(draft, t)
		}
		if layer >= keep && output.MatchString(name) {
			v, err := ck.Float32(name)
			if err != nil {
				return err
			}
			for i := range v {
				v[i] *= scale
			}
			if t, err = safetensors.Float32Tensor(name, info.DType, info.Shape, v); err != nil {
				return err
			}
		}
		model = append(model, t)
	}
	if echo {
		if err := lmckpt.EchoMTP(model); err != nil {
			return fmt.Errorf("-mtp-echo: %w", err)
		}
	}
	if err := lmckpt.WriteCheckpoint(filepath.Join(out, "model"), cfg, model); err != nil {
		return err
	}
	dirs := []string{"model"}
	if keep > 0 {
		dcfg := map[string]any{}
		for k, v := range cfg {
			dcfg[k] = v
		}
		dcfg["num_hidden_layers"] = keep
		if err := lmckpt.WriteCheckpoint(filepath.Join(out, "draft"), dcfg, draft); err != nil {
			return err
		}
		dirs = append(dirs, "draft")
	}
	// The tokenizer and the rest, into both.
	entries, err := os.ReadDir(src)
	if err != nil {
		return err
	}
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || name == "config.json" || filepath.Ext(name) == ".safetensors" || name == "model.safetensors.index.json" {
			continue
		}
		b, err := os.ReadFile(filepath.Join(src, name))
		if err != nil {
			return err
		}
		for _, dir := range dirs {
			if err := os.WriteFile(filepath.Join(out, dir, name), b, 0o644); err != nil {
				return err
			}
		}
	}
	return nil
}
