package main

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/loader/safetensors"
	"github.com/tputool/tputool/pipeline/lm"
	_ "github.com/tputool/tputool/pipeline/models" // the architectures tputool runs
)

// writeFromConfig writes, next to a copy of the config.json at cfgPath,
// a model.safetensors holding every tensor the architecture that config
// names reads (its lm.Weights), in dtype d, with deterministic
// pseudo-random values: uniform in ±1/sqrt(input axis) for matrices (the
// last, or the one before for the stacks a checkpoint stores transposed,
// lm.WeightSpec.Transposed), ±0.02
// for vectors (around 1 for norm weights, scales and layer scalars,
// scaleLike). It streams: the header first (offsets are known from the
// shapes), then each tensor in 1 MiB pieces, so a checkpoint of any size
// takes a few MiB of memory. When the config's quantization_config says
// mxfp4, the weights the architecture reads in MXFP4 (lm.WeightSpec.MXFP4,
// GPT-OSS's experts) are written as the releases store them: NAME_blocks
// with random nibbles and NAME_scales with the exponent that brings the
// values to about ±1/sqrt(last axis). With apart, weights assembled from
// parts (expert stacks) are written as their parts, one tensor per expert
// projection, as older and quantized MoE releases store them. A model
// whose releases store other tensors than it reads (lm.StoredLayout) is
// written as they are.
func writeFromConfig(cfgPath, dir string, d safetensors.DType, apart bool) error {
	raw, err := os.ReadFile(cfgPath)
	if err != nil {
		return err
	}
	cfg, err := config.ParseModel(raw)
	if err != nil {
		return err
	}
	model, err := lm.New(cfg)
	if err != nil {
		return err
	}
	if mt, ok := model.(lm.MultiToken); ok && mt.MTPLayers() > 0 { // its multi-token-prediction head too
		if model, err = mt.WithMTP(); err != nil {
			return err
		}
	}
	if d != safetensors.F32 && d != safetensors.BF16 && d != safetensors.F16 {
		return fmt.Errorf("dtype %s: want F32, BF16 or F16", d)
	}
	var q struct {
		Q *struct {
			Method string `json:"quant_method"`
		} `json:"quantization_config"`
	}
	if err := json.Unmarshal(raw, &q); err != nil {
		return err
	}
	mxfp4 := q.Q != nil && q.Q.Method == "mxfp4"
	var ws []tensor
	weights := lm.Weights(model)
	if st, ok := model.(lm.StoredLayout); ok { // the releases' own layout (DBRX's experts three to a layer)
		weights = st.StoredWeights()
	}
	for _, w := range weights {
		if apart && len(w.Parts) > 0 && !(mxfp4 && w.MXFP4) {
			for _, p := range w.Parts { // one tensor per expert projection
				ws = append(ws, tensor{name: p.Name, shape: p.Shape, dtype: d})
			}
			continue
		}
		if !mxfp4 || !w.MXFP4 {
			stored := w.Sources(func(string) bool { return true })[0] // as the checkpoint holds it: [..., in, out] when Transposed (Llama 4's expert stacks)
			ws = append(ws, tensor{name: w.Name, shape: stored.Shape, dtype: d, transposed: w.Transposed})
			continue
		}
		r := len(w.Shape)
		lead, in := w.Shape[:r-1], w.Shape[r-1]
		s := 127 + int(math.Round(math.Log2(1/math.Sqrt(float64(in))/3))) // mean |fp4| is about 3
		ws = append(ws,
			tensor{name: w.Name + lm.MXFP4Blocks, shape: append(append([]int(nil), lead...), in/32, 16), dtype: safetensors.U8},
			tensor{name: w.Name + lm.MXFP4Scales, shape: append(append([]int(nil), lead...), in/32), dtype: safetensors.U8, scale: byte(s)})
	}
	sort.Slice(ws, func(i, j int) bool { return ws[i].name < ws[j].name })
	header := map[string]any{}
	var offset int64
	for _, w := range ws {
		n := int64(w.dtype.Size())
		for _, x := range w.shape {
			n *= int64(x)
		}
		shape := w.shape
		if shape == nil { // a scalar: [], not null
			shape = []int{}
		}
		header[w.name] = map[string]any{"dtype": w.dtype, "shape": shape, "data_offsets": []int64{offset, offset + n}}
		offset += n
	}
	hjson, err := json.Marshal(header)
	if err != nil {
		return err
	}
	for len(hjson)%8 != 0 {
		hjson = append(hjson, ' ')
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), raw, 0o644); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(dir, "model.safetensors"))
	if err != nil {
		return err
	}
	defer f.Close()
	bw := bufio.NewWriterSize(f, 4<<20)
	var lenBuf [8]byte
	binary.LittleEndian.PutUint64(lenBuf[:], uint64(len(hjson)))
	bw.Write(lenBuf[:])
	bw.Write(hjson)
	r := rand.New(rand.NewPCG(14, 2026))
	vals := make([]float32, 1<<18)
	bytes := make([]byte, 1<<18)
	for _, w := range ws {
		n := 1
		for _, x := range w.shape {
			n *= x
		}
		if w.dtype == safetensors.U8 { // MXFP4 blocks (random) or scales (one exponent)
			for done := 0; done < n; {
				piece := bytes[:min(len(bytes), n-done)]
				for i := range piece {
					piece[i] = w.scale
					if w.scale == 0 {
						piece[i] = byte(r.Uint32())
					}
				}
				if _, err := bw.Write(piece); err != nil {
					return err
				}
				done += len(piece)
			}
			continue
		}
		scale, offset := float32(0.02), float32(0)
		if len(w.shape) >= 2 {
			in := w.shape[len(w.shape)-1]
			if w.transposed {
				in = w.shape[len(w.shape)-2]
			}
			scale = float32(1 / math.Sqrt(float64(in)))
		} else if scaleLike(w.name) {
			offset = 1 // norm weights, router scales, layer scalars: around 1
		}
		for done := 0; done < n; {
			piece := vals[:min(len(vals), n-done)]
			for i := range piece {
				piece[i] = offset + (2*r.Float32()-1)*scale
			}
			b, err := safetensors.EncodeFloat32(w.dtype, piece)
			if err != nil {
				return err
			}
			if _, err := bw.Write(b); err != nil {
				return err
			}
			done += len(piece)
		}
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	return f.Close()
}

// scaleLike reports a vector that multiplies activations (a norm's
// weight, a router's scale, a layer scalar), written around 1 rather
// than around 0 so that random models keep their activations' size.
func scaleLike(name string) bool {
	for _, s := range []string{"norm", "scale", "layer_scalar"} {
		if strings.Contains(name, s) {
			return true
		}
	}
	return false
}

// tensor is one tensor to write: MXFP4 scales are all scale; a
// transposed matrix is stored [..., in, out].
type tensor struct {
	name       string
	shape      []int
	dtype      safetensors.DType
	scale      byte
	transposed bool
}
