package lmckpt

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"

	"github.com/tputool/tputool/loader/safetensors"
)

// Int4Options say how WriteInt4Copy quantises.
type Int4Options struct {
	// Format is "gptq" (v1: zero points stored minus one), "awq" (gemm)
	// or "nvfp4" (compressed-tensors' nvfp4-pack-quantized: E2M1 codes,
	// E4M3 scales by 16 and a global scale; Group, Bits and Asym unused).
	Format string
	// Group is the input columns that share a scale and zero point.
	Group int
	// Asym gives GPTQ a zero point per group (AWQ always has them);
	// without it every zero point is 8.
	Asym bool
	// DescAct writes GPTQ in activation order: each group's columns
	// spread over the row by a fixed shuffle, with g_idx.
	DescAct bool
	// Bits is GPTQ's width, 4 (the default) or 8; AWQ is 4-bit only.
	Bits int
}

// WriteInt4Copy writes a 4-bit copy of the checkpoint in src to out in
// the layout of the Hub's GPTQ or AWQ releases: every projection becomes
// PREFIX.qweight, PREFIX.qzeros and f16 PREFIX.scales, quantised by
// rounding to nearest (not by GPTQ's or AWQ's own algorithms: the layout
// is what matters to the tests and benchmarks, not the quality).
// Projections that are not whole groups and words of 8 values stay plain
// (f32).
func WriteInt4Copy(src, out string, o Int4Options) error {
	if o.Format == "nvfp4" {
		return writeNVFP4(src, out)
	}
	bits := o.Bits
	if bits == 0 {
		bits = 4
	}
	if o.Group <= 0 || (o.Format != "gptq" && o.Format != "awq") || (bits != 4 && bits != 8) || (o.Format == "awq" && bits != 4) {
		return fmt.Errorf("lmckpt: int4 copy: format %q, group %d, %d bits: want gptq (4 or 8 bits) or awq (4) and a positive group", o.Format, o.Group, bits)
	}
	return writeInt4(src, out, o.Format, o.Group, bits, o.Asym || o.Format == "awq", o.DescAct && o.Format == "gptq")
}

func writeInt4(src, out, format string, group, bits int, asym, descAct bool) error {
	cfg, err := ReadConfig(src)
	if err != nil {
		return err
	}
	if format == "gptq" {
		cfg["quantization_config"] = map[string]any{"quant_method": "gptq", "bits": bits, "group_size": group, "desc_act": descAct,
			"sym": !asym, "checkpoint_format": "gptq"}
	} else {
		cfg["quantization_config"] = map[string]any{"quant_method": "awq", "bits": 4, "group_size": group, "version": "gemm",
			"zero_point": true, "modules_to_not_convert": []string{"lm_head"}}
	}
	return CopyProjections(src, out, cfg, func(name string, shape []int, vals []float32) ([]safetensors.Tensor, error) {
		nOut, in := shape[0], shape[1]
		if in%group != 0 || in%8 != 0 || nOut%8 != 0 {
			// Not whole groups and words of 8: left plain (f32), as a
			// quantiser leaves a module it does not convert.
			t, err := safetensors.Float32Tensor(name, safetensors.F32, shape, vals)
			return []safetensors.Tensor{t}, err
		}
		var ts []safetensors.Tensor
		gOf := make([]int, in)
		for i := range gOf {
			gOf[i] = i / group
		}
		if descAct { // a fixed shuffle: equal groups spread over the row
			rng := rand.New(rand.NewPCG(uint64(in), uint64(nOut)))
			rng.Shuffle(in, func(i, j int) { gOf[i], gOf[j] = gOf[j], gOf[i] })
		}
		q, zeros, scales := quantize(vals, nOut, in, group, bits, asym, gOf)
		per := 32 / bits
		groups := in / group
		prefix := strings.TrimSuffix(name, ".weight")
		st, err := safetensors.Float32Tensor(prefix+".scales", safetensors.F16, []int{groups, nOut}, scales)
		if err != nil {
			return nil, err
		}
		if format == "awq" {
			ts = append(ts, words(prefix+".qweight", in, nOut/8, func(i, c int) uint32 { return awqWord(func(j int) int { return q[(c*8+j)*in+i] }) }),
				words(prefix+".qzeros", groups, nOut/8, func(g, c int) uint32 { return awqWord(func(j int) int { return zeros[g*nOut+c*8+j] }) }))
		} else {
			ts = append(ts, words(prefix+".qweight", in/per, nOut, func(w, o int) uint32 {
				var v uint32
				for k := 0; k < per; k++ {
					v |= uint32(q[o*in+per*w+k]) << (bits * k)
				}
				return v
			}), words(prefix+".qzeros", groups, nOut/per, func(g, c int) uint32 {
				var v, ones uint32
				for k := 0; k < per; k++ {
					v |= uint32(zeros[g*nOut+per*c+k]) << (bits * k)
					ones |= 1 << (bits * k)
				}
				return v - ones // v1, as GPTQModel writes it: the word minus one in every value
			}))
		}
		if descAct {
			ts = append(ts, words(prefix+".g_idx", 1, in, func(_, i int) uint32 { return uint32(gOf[i]) }))
			ts[len(ts)-1].Shape = []int{in}
		}
		return append(ts, st), nil
	})
}

// awqOrder is AWQ's packing order: nibble k of a word holds value
// awqOrder[k] of its 8.
var awqOrder = [8]int{0, 2, 4, 6, 1, 3, 5, 7}

// awqWord packs the 8 values v(0..7) in AWQ's order.
func awqWord(v func(j int) int) uint32 {
	var w uint32
	for k, j := range awqOrder {
		w |= uint32(v(j)) << (4 * k)
	}
	return w
}

// words is an I32 tensor [rows, cols] of word(r, c).
func words(name string, rows, cols int, word func(r, c int) uint32) safetensors.Tensor {
	b := make([]byte, 4*rows*cols)
	for r := 0; r < rows; r++ {
		for c := 0; c < cols; c++ {
			binary.LittleEndian.PutUint32(b[4*(r*cols+c):], word(r, c))
		}
	}
	return safetensors.Tensor{Name: name, DType: safetensors.I32, Shape: []int{rows, cols}, Data: b}
}

// quantize rounds w [n, k] to codes of bits bits q [n, k] in groups of g
// input columns (column p in group gOf[p]), each group with an
// f16-representable scale and a zero point ([k/g, n], the checkpoints'
// order): symmetric, zero 2^(bits−1) and scale max|w|/(2^(bits−1) − 0.5)
// rounded to f16; asymmetric, scale (max − min)/(2^bits − 1) and the zero
// that maps min to 0. W ≈ scale · (q − zero).
func quantize(w []float32, n, k, g, bits int, asym bool, gOf []int) (q, zeros []int, scales []float32) {
	top, mid := 1<<bits-1, 1<<(bits-1)
	groups := k / g
	q, zeros, scales = make([]int, n*k), make([]int, groups*n), make([]float32, groups*n)
	members := make([][]int, groups)
	for p, gi := range gOf {
		members[gi] = append(members[gi], p)
	}
	for j := 0; j < n; j++ {
		for gi := 0; gi < groups; gi++ {
			x := make([]float32, 0, g)
			for _, p := range members[gi] {
				x = append(x, w[j*k+p])
			}
			lo, hi := float64(x[0]), float64(x[0])
			for _, v := range x {
				lo, hi = min(lo, float64(v)), max(hi, float64(v))
			}
			s, z := max(-lo, hi)/(float64(mid)-0.5), mid
			if asym {
				s = (hi - lo) / float64(top)
			}
			if s == 0 {
				s = 1
			}
			s = float64(safetensors.HalfToFloat32(safetensors.Float32ToHalf(float32(s))))
			if asym {
				z = int(math.Round(-lo / s))
				z = min(max(z, 1), top) // from 1 (v1's zero points of 0, with their borrow, are pipeline/llama's TestPackedCheckpoints')
			}
			scales[gi*n+j], zeros[gi*n+j] = float32(s), z
			for i, p := range members[gi] {
				q[j*k+p] = min(max(int(math.Round(float64(x[i])/s))+z, 0), top)
			}
		}
	}
	return q, zeros, scales
}

// writeNVFP4 writes the projections as compressed-tensors NVFP4, as
// llm-compressor quantises them (rounded to nearest): a global scale
// 448·6 / max|W|, each group of 16 a scale max|group| / 6 times it coded
// in E4M3, and each value the E2M1 code nearest it over its group's
// effective scale (the E4M3 scale over the global one).
func writeNVFP4(src, out string) error {
	cfg, err := ReadConfig(src)
	if err != nil {
		return err
	}
	scheme := map[string]any{"num_bits": 4, "type": "float", "symmetric": true, "strategy": "tensor_group", "group_size": 16, "dynamic": false}
	cfg["quantization_config"] = map[string]any{"quant_method": "compressed-tensors", "format": "nvfp4-pack-quantized",
		"quantization_status": "compressed", "ignore": []string{"lm_head"},
		"config_groups": map[string]any{"group_0": map[string]any{"targets": []string{"Linear"}, "weights": scheme}}}
	fp4 := []float64{0, 0.5, 1, 1.5, 2, 3, 4, 6}
	nearest := func(x float64) byte {
		var sign byte
		if x < 0 {
			sign, x = 8, -x
		}
		best := 0
		for i, v := range fp4 {
			if math.Abs(v-x) < math.Abs(fp4[best]-x) {
				best = i
			}
		}
		return sign | byte(best)
	}
	return CopyProjections(src, out, cfg, func(name string, shape []int, vals []float32) ([]safetensors.Tensor, error) {
		nOut, in := shape[0], shape[1]
		if in%16 != 0 {
			t, err := safetensors.Float32Tensor(name, safetensors.F32, shape, vals)
			return []safetensors.Tensor{t}, err
		}
		amax := 0.0
		for _, v := range vals {
			amax = max(amax, math.Abs(float64(v)))
		}
		global := float32(448 * 6 / max(amax, 1e-12))
		groups := in / 16
		scales := make([]byte, nOut*groups)
		packed := make([]byte, nOut*in/2)
		for o := range nOut {
			for g := range groups {
				row := vals[o*in+16*g : o*in+16*g+16]
				gmax := 0.0
				for _, v := range row {
					gmax = max(gmax, math.Abs(float64(v)))
				}
				sb := encodeE4M3(gmax / 6 * float64(global))
				scales[o*groups+g] = sb
				s := e4m3[sb&0x7f] / float64(global)
				for i, v := range row {
					c := byte(0)
					if s > 0 {
						c = nearest(float64(v) / s)
					}
					at := o*in + 16*g + i
					packed[at/2] |= c << (4 * (at % 2))
				}
			}
		}
		prefix := strings.TrimSuffix(name, ".weight")
		gt, err := safetensors.Float32Tensor(prefix+".weight_global_scale", safetensors.F32, []int{1}, []float32{global})
		if err != nil {
			return nil, err
		}
		return []safetensors.Tensor{
			{Name: prefix + ".weight_packed", DType: safetensors.U8, Shape: []int{nOut, in / 2}, Data: packed},
			{Name: prefix + ".weight_scale", DType: safetensors.F8E4M3, Shape: []int{nOut, groups}, Data: scales},
			gt,
		}, nil
	})
}
