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

	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/loader/safetensors"
	"github.com/tputool/tputool/pipeline/lm"
	_ "github.com/tputool/tputool/pipeline/models" // the architectures tputool runs
)

// writeFromConfig writes, next to a copy of the config.json at cfgPath,
// a model.safetensors holding every tensor the architecture that config
// names reads (its lm.Weights), in dtype d, with deterministic
// pseudo-random values: uniform in ±1/sqrt(last axis) for matrices, ±0.02
// for vectors. It streams: the header first (offsets are known from the
// shapes), then each tensor in 1 MiB pieces, so a checkpoint of any size
// takes a few MiB of memory.
func writeFromConfig(cfgPath, dir string, d safetensors.DType) error {
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
	if d != safetensors.F32 && d != safetensors.BF16 && d != safetensors.F16 {
		return fmt.Errorf("dtype %s: want F32, BF16 or F16", d)
	}
	ws := lm.Weights(model)
	sort.Slice(ws, func(i, j int) bool { return ws[i].Name < ws[j].Name })
	header := map[string]any{}
	var offset int64
	for _, w := range ws {
		n := int64(d.Size())
		for _, x := range w.Shape {
			n *= int64(x)
		}
		header[w.Name] = map[string]any{"dtype": d, "shape": w.Shape, "data_offsets": []int64{offset, offset + n}}
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
	for _, w := range ws {
		n := 1
		for _, x := range w.Shape {
			n *= x
		}
		scale := float32(0.02)
		if len(w.Shape) >= 2 {
			scale = float32(1 / math.Sqrt(float64(w.Shape[len(w.Shape)-1])))
		}
		for done := 0; done < n; {
			piece := vals[:min(len(vals), n-done)]
			for i := range piece {
				piece[i] = (2*r.Float32() - 1) * scale
			}
			b, err := safetensors.EncodeFloat32(d, piece)
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
