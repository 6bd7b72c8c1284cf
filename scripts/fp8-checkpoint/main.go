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
// output channel, PREFIX.weight_scale f32 [out, 1].
//
// The whole checkpoint is held in memory while it is written.
package main

import (
	"flag"
	"fmt"
	"math"
	"os"
	"sort"
	"strings"

	"github.com/tputool/tputool/loader/safetensors"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
)

func main() {
	src := flag.String("m", "", "source model folder (config.json and safetensors)")
	out := flag.String("o", "", "output folder")
	block := flag.Int("block", 128, "weight_block_size: rows and columns that share one scale")
	fbgemm := flag.Bool("fbgemm", false, "write fbgemm_fp8: a scale per output channel")
	flag.Parse()
	if *src == "" || *out == "" || *block <= 0 {
		fmt.Fprintln(os.Stderr, "fp8-checkpoint: -m and -o are required, -block must be positive")
		os.Exit(2)
	}
	if err := run(*src, *out, *block, *fbgemm); err != nil {
		fmt.Fprintln(os.Stderr, "fp8-checkpoint:", err)
		os.Exit(1)
	}
}

func run(src, out string, block int, fbgemm bool) error {
	cfg, err := lmckpt.ReadConfig(src)
	if err != nil {
		return err
	}
	cfg["quantization_config"] = map[string]any{"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
		"weight_block_size": []int{block, block}, "modules_to_not_convert": []string{"lm_head"}}
	if fbgemm {
		cfg["quantization_config"] = map[string]any{"quant_method": "fbgemm_fp8", "activation_scale_ub": 1200,
			"modules_to_not_convert": []string{"lm_head"}}
	}
	return lmckpt.CopyProjections(src, out, cfg, func(name string, shape []int, vals []float32) ([]safetensors.Tensor, error) {
		b0, b1 := block, block
		if fbgemm {
			b0, b1 = 1, shape[1]
		}
		codes, scales := quantize(vals, shape[0], shape[1], b0, b1)
		sb := make([]byte, 4*len(scales))
		for i, s := range scales {
			u := math.Float32bits(s)
			sb[4*i], sb[4*i+1], sb[4*i+2], sb[4*i+3] = byte(u), byte(u>>8), byte(u>>16), byte(u>>24)
		}
		sr, sc := (shape[0]+b0-1)/b0, (shape[1]+b1-1)/b1
		scaleName := strings.TrimSuffix(name, "weight") + "weight_scale_inv"
		if fbgemm {
			scaleName = strings.TrimSuffix(name, "weight") + "weight_scale"
		}
		return []safetensors.Tensor{{Name: name, DType: safetensors.F8E4M3, Shape: shape, Data: codes},
			{Name: scaleName, DType: safetensors.F32, Shape: []int{sr, sc}, Data: sb}}, nil
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

// encode is the E4M3 code nearest x (ties to the even code), saturating
// at ±448.
func encode(x float64) byte {
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

// quantize codes w [n, k] in blocks of b0×b1, each with scale
// max|w|/448.
func quantize(w []float32, n, k, b0, b1 int) (codes []byte, scales []float32) {
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
			codes[j*k+p] = encode(float64(w[j*k+p]) / float64(scales[(j/b0)*sc+p/b1]))
		}
	}
	return codes, scales
}
