package lmckpt

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/tputool/tputool/loader/safetensors"
)

// Copies of a Hugging Face checkpoint folder with its Linear projections
// re-encoded (scripts/fp8-checkpoint, WriteInt4Copy): every 2-D tensor
// whose name ends in "proj.weight" goes through a function of the
// caller's, everything else (embeddings, norms, the head) is copied as it
// is, and so are the tokenizer and generation files.

// ReadConfig reads dir's config.json.
func ReadConfig(dir string) (map[string]any, error) {
	var cfg map[string]any
	b, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(b, &cfg); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, "config.json"), err)
	}
	return cfg, nil
}

// CopyProjections writes src's checkpoint to out with config cfg, each projection
// [out, in] replaced by the tensors proj makes of its f32 values. The
// whole checkpoint is held in memory while it is written. The projections
// are the matrices a quantizer converts: every …proj.weight, and
// Mixtral's experts' w1, w2 and w3 (not the routers, which quantizers
// leave alone).
func CopyProjections(src, out string, cfg map[string]any, proj func(name string, shape []int, vals []float32) ([]safetensors.Tensor, error)) error {
	ck, err := safetensors.OpenDir(src, "")
	if err != nil {
		return err
	}
	defer ck.Close()
	var ts []safetensors.Tensor
	for _, name := range ck.Names() {
		info, _ := ck.Info(name)
		shape, _ := ck.Shape(name)
		if len(shape) != 2 || !isProjection(name) {
			raw, err := ck.Raw(name)
			if err != nil {
				return err
			}
			ts = append(ts, safetensors.Tensor{Name: name, DType: info.DType, Shape: shape, Data: append([]byte(nil), raw...)})
			continue
		}
		vals, err := ck.Float32(name)
		if err != nil {
			return err
		}
		more, err := proj(name, shape, vals)
		if err != nil {
			return err
		}
		ts = append(ts, more...)
	}
	if err := WriteCheckpoint(out, cfg, ts); err != nil {
		return err
	}
	for _, f := range []string{"tokenizer.json", "tokenizer_config.json", "generation_config.json", "special_tokens_map.json"} {
		if b, err := os.ReadFile(filepath.Join(src, f)); err == nil {
			if err := os.WriteFile(filepath.Join(out, f), b, 0o644); err != nil {
				return err
			}
		}
	}
	return nil
}

// isProjection reports a matrix CopyProjections converts. DeepSeek-V3.2's
// indexer is converted as its FP8 releases hold it: wq_b and wk, not
// weights_proj (left unquantized: bf16 in the releases, by DeepSeek's
// inference code).
func isProjection(name string) bool {
	if strings.HasSuffix(name, ".indexer.weights_proj.weight") {
		return false
	}
	if strings.HasSuffix(name, ".indexer.wq_b.weight") || strings.HasSuffix(name, ".indexer.wk.weight") {
		return true
	}
	if strings.HasSuffix(name, "proj.weight") || strings.HasSuffix(name, "proj_with_mqa.weight") { // DeepSeek's kv_a_proj_with_mqa too
		return true
	}
	for _, w := range []string{".w1.weight", ".w2.weight", ".w3.weight"} {
		if strings.HasSuffix(name, w) && strings.Contains(name, ".block_sparse_moe.experts.") {
			return true
		}
	}
	return false
}

// Rewrap returns what a test writes as a release holding the model in
// src inside another (a vision-language or Omni wrapper): src's tensors
// renamed by rename, a 2×2 float32 tensor of zeros for each name in
// extra (the wrapper's other towers), and src's config.json without its
// architectures, to nest in the wrapper's.
func Rewrap(src string, rename func(string) string, extra ...string) ([]safetensors.Tensor, map[string]any, error) {
	ck, err := safetensors.OpenDir(src, "")
	if err != nil {
		return nil, nil, err
	}
	defer ck.Close()
	var ts []safetensors.Tensor
	for _, n := range ck.Names() {
		info, _ := ck.Info(n)
		raw, err := ck.Raw(n)
		if err != nil {
			return nil, nil, err
		}
		ts = append(ts, safetensors.Tensor{Name: rename(n), DType: info.DType, Shape: info.Shape, Data: append([]byte(nil), raw...)})
	}
	for _, n := range extra {
		ts = append(ts, safetensors.Tensor{Name: n, DType: safetensors.F32, Shape: []int{2, 2}, Data: make([]byte, 16)})
	}
	cfg, err := ReadConfig(src)
	if err != nil {
		return nil, nil, err
	}
	delete(cfg, "architectures")
	return ts, cfg, nil
}

// FuseQKV replaces each layer's self_attn.q_proj, k_proj and v_proj
// (weights and biases, Llama's names as Rewrap returns them) with one
// tensor at q_proj's place, named with ".self_attn.q_proj." replaced by
// into: the rows q, then k, then v, or with grouped by key/value head
// (each group's heads/kvHeads query heads, then its key head, then its
// value head, InternLM2's wqkv), heads of headDim rows.
func FuseQKV(ts []safetensors.Tensor, heads, kvHeads, headDim int, grouped bool, into string) []safetensors.Tensor {
	byName := map[string]safetensors.Tensor{}
	for _, x := range ts {
		byName[x.Name] = x
	}
	var out []safetensors.Tensor
	for _, x := range ts {
		switch {
		case strings.Contains(x.Name, ".self_attn.q_proj."):
			k, v := byName[strings.Replace(x.Name, "q_proj", "k_proj", 1)], byName[strings.Replace(x.Name, "q_proj", "v_proj", 1)]
			var data []byte
			if grouped {
				row := len(x.Data) / x.Shape[0] // bytes of one output row
				head := func(t safetensors.Tensor, h int) []byte { return t.Data[h*headDim*row : (h+1)*headDim*row] }
				per := heads / kvHeads
				for g := range kvHeads {
					for j := range per {
						data = append(data, head(x, g*per+j)...)
					}
					data = append(append(data, head(k, g)...), head(v, g)...)
				}
			} else {
				data = append(append(append(data, x.Data...), k.Data...), v.Data...)
			}
			shape := append([]int{x.Shape[0] + k.Shape[0] + v.Shape[0]}, x.Shape[1:]...)
			out = append(out, safetensors.Tensor{Name: strings.Replace(x.Name, ".self_attn.q_proj.", into, 1), DType: x.DType, Shape: shape, Data: data})
		case strings.Contains(x.Name, ".self_attn.k_proj."), strings.Contains(x.Name, ".self_attn.v_proj."):
		default:
			out = append(out, x)
		}
	}
	return out
}
