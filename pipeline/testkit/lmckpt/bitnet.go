package lmckpt

import (
	"math"
	"strings"

	"github.com/tputool/tputool/loader/safetensors"
)

// WriteBitNetCopy writes a BitNet b1.58 copy of the checkpoint in src to
// out, as transformers' integrations/bitnet.py stores one (quant_method
// "bitnet", quantization_mode "offline"): every projection W [out, in]
// becomes its ternary code t = clamp(round(W/m), -1, 1) with m the mean
// of |W| (transformers' WeightQuant, rounding half to even as torch
// does), packed four to a byte along the output axis as pack_weights
// packs it (output row s·P + j in bits 2s..2s+1 of stored row j, P =
// ceil(out/4), each code plus one), beside PREFIX.weight_scale [1] bf16
// (as the releases store it, rounded to nearest even):
// m for AutoBitLinear (autoBitLinear, linear_class "autobitlinear",
// which multiplies by it), 1/m for BitLinear ("bitlinear", which
// divides). Everything else is copied as it is; the head stays float
// (modules_to_not_convert).
func WriteBitNetCopy(src, out string, autoBitLinear bool) error {
	cfg, err := ReadConfig(src)
	if err != nil {
		return err
	}
	class := "bitlinear"
	if autoBitLinear {
		class = "autobitlinear"
	}
	cfg["quantization_config"] = map[string]any{"quant_method": "bitnet", "linear_class": class, "quantization_mode": "offline",
		"modules_to_not_convert": []string{"lm_head"}}
	return CopyProjections(src, out, cfg, func(name string, shape []int, vals []float32) ([]safetensors.Tensor, error) {
		packed, mean := PackTernary(vals, shape[0], shape[1])
		scale := float32(mean)
		if !autoBitLinear {
			scale = float32(1 / mean)
		}
		st, err := safetensors.Float32Tensor(strings.TrimSuffix(name, "weight")+"weight_scale", safetensors.BF16, []int{1}, []float32{scale})
		if err != nil {
			return nil, err
		}
		return []safetensors.Tensor{{Name: name, DType: safetensors.U8, Shape: []int{(shape[0] + 3) / 4, shape[1]}, Data: packed}, st}, nil
	})
}

// PackTernary is WriteBitNetCopy's code of w [out, in]: the packed bytes
// [ceil(out/4), in] and the mean |w| it divides by.
func PackTernary(w []float32, out, in int) (packed []byte, mean float64) {
	for _, v := range w {
		mean += math.Abs(float64(v))
	}
	mean = max(mean/float64(len(w)), 1e-5)
	rows := (out + 3) / 4
	packed = make([]byte, rows*in)
	for o := 0; o < out; o++ {
		s, j := o/rows, o%rows
		for c := 0; c < in; c++ {
			t := max(-1, min(1, math.RoundToEven(float64(w[o*in+c])/mean)))
			packed[j*in+c] |= byte(int(t)+1) << (2 * s)
		}
	}
	return packed, mean
}
