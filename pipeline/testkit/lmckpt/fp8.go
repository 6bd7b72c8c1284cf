package lmckpt

import (
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/tputool/tputool/loader/safetensors"
)

// FP8Options say how WriteFP8Copy quantises.
type FP8Options struct {
	// Block is weight_block_size: the rows and columns that share one
	// scale (quant_method fp8).
	Block int
	// FBGEMM writes Meta's fbgemm_fp8 form instead: one scale per output
	// channel, PREFIX.weight_scale f32 [out, 1].
	FBGEMM bool
	// PerTensor writes one scale a matrix instead (weight_block_size
	// null, NAME_scale_inv a scalar, as Mistral's FP8 releases store it),
	// with activation_scheme "static" and an activation_scale scalar per
	// projection (1, not applied by tputool).
	PerTensor bool
}

// WriteFP8Copy writes an FP8 copy of the checkpoint in src to out, as the
// Hub's FP8 releases store theirs: every projection becomes E4M3 with
// scale max|w|/448 per block (weight_scale_inv, quant_method fp8) or per
// output channel (fbgemm_fp8); everything else is copied as it is.
func WriteFP8Copy(src, out string, o FP8Options) error {
	if o.Block <= 0 && !o.FBGEMM && !o.PerTensor {
		return fmt.Errorf("lmckpt: FP8 copy: block %d: want a positive block", o.Block)
	}
	return writeFP8(src, out, o)
}

func writeFP8(src, out string, o FP8Options) error {
	cfg, err := ReadConfig(src)
	if err != nil {
		return err
	}
	cfg["quantization_config"] = map[string]any{"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
		"weight_block_size": []int{o.Block, o.Block}, "modules_to_not_convert": []string{"lm_head"}}
	switch {
	case o.FBGEMM:
		cfg["quantization_config"] = map[string]any{"quant_method": "fbgemm_fp8", "activation_scale_ub": 1200,
			"modules_to_not_convert": []string{"lm_head"}}
	case o.PerTensor:
		cfg["quantization_config"] = map[string]any{"quant_method": "fp8", "activation_scheme": "static",
			"weight_block_size": nil, "modules_to_not_convert": []string{"lm_head"}}
	}
	return CopyProjections(src, out, cfg, func(name string, shape []int, vals []float32) ([]safetensors.Tensor, error) {
		b0, b1 := o.Block, o.Block
		switch {
		case o.FBGEMM:
			b0, b1 = 1, shape[1]
		case o.PerTensor:
			b0, b1 = shape[0], shape[1]
		}
		codes, scales := quantizeFP8(vals, shape[0], shape[1], b0, b1)
		scaleShape := []int{(shape[0] + b0 - 1) / b0, (shape[1] + b1 - 1) / b1}
		scaleName := strings.TrimSuffix(name, "weight") + "weight_scale_inv"
		switch {
		case o.FBGEMM:
			scaleName = strings.TrimSuffix(name, "weight") + "weight_scale"
		case o.PerTensor:
			scaleShape = []int{}
		}
		st, err := safetensors.Float32Tensor(scaleName, safetensors.F32, scaleShape, scales)
		if err != nil {
			return nil, err
		}
		ts := []safetensors.Tensor{{Name: name, DType: safetensors.F8E4M3, Shape: shape, Data: codes}, st}
		if o.PerTensor {
			act, err := safetensors.Float32Tensor(strings.TrimSuffix(name, "weight")+"activation_scale", safetensors.F32, []int{}, []float32{1})
			if err != nil {
				return nil, err
			}
			ts = append(ts, act)
		}
		return ts, nil
	})
}

// e4m3 is the finite non-negative E4M3 magnitudes (codes 0..0x7E) in
// increasing order, which is code order.
var e4m3 = func() []float64 {
	v := make([]float64, 0x7f)
	for c := range v {
		e, m := c>>3, float64(c&7)
		if e == 0 {
			v[c] = m / 8 * math.Ldexp(1, -6)
		} else {
			v[c] = (1 + m/8) * math.Ldexp(1, e-7)
		}
	}
	return v
}()

// encodeE4M3 is the E4M3 code nearest x (ties to the even code), saturating
// at ±448.
func encodeE4M3(x float64) byte {
	var sign byte
	if x < 0 {
		sign, x = 0x80, -x
	}
	i := sort.SearchFloat64s(e4m3, x) // first magnitude >= x
	switch {
	case i == len(e4m3):
		i = len(e4m3) - 1
	case i > 0 && (x-e4m3[i-1] < e4m3[i]-x || (x-e4m3[i-1] == e4m3[i]-x && (i-1)%2 == 0)):
		i--
	}
	return sign | byte(i)
}

// quantizeFP8 codes w [n, k] in blocks of b0×b1, each with scale
// max|w|/448.
func quantizeFP8(w []float32, n, k, b0, b1 int) (codes []byte, scales []float32) {
	sr, sc := (n+b0-1)/b0, (k+b1-1)/b1
	scales = make([]float32, sr*sc)
	for j := 0; j < n; j++ {
		for p := 0; p < k; p++ {
			s := &scales[(j/b0)*sc+p/b1]
			*s = max(*s, float32(math.Abs(float64(w[j*k+p]))))
		}
	}
	for i, s := range scales {
		if s == 0 {
			scales[i] = 1
		} else {
			scales[i] = s / 448
		}
	}
	codes = make([]byte, n*k)
	for j := 0; j < n; j++ {
		for p := 0; p < k; p++ {
			codes[j*k+p] = encodeE4M3(float64(w[j*k+p]) / float64(scales[(j/b0)*sc+p/b1]))
		}
	}
	return codes, scales
}
