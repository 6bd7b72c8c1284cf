package lm

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/loader/safetensors"
)

// Quantized checkpoints. config.json's quantization_config names how the
// checkpoint stores its weights; a method tputool does not read is an
// error naming it (exit 3), never a silent load of the raw tensors:
//
//   - "fp8" (block-wise, as Qwen's and DeepSeek's FP8 releases and
//     transformers' FineGrainedFP8 store it): every Matmul weight of the
//     architecture may be stored as NAME (F8_E4M3, or F8_E5M2) with
//     NAME_scale_inv, one float per weight_block_size block, and stands
//     for NAME · scale_inv[block]; the weights left in modules_to_not_convert
//     are stored plain. The loader decodes them (encoded.go).
//   - "mxfp4": only for architectures that declare MXFP4 weights
//     (WeightSpec.MXFP4: GPT-OSS's experts).
//   - "gptq" and "awq": Linear weights packed into int32 words with
//     per-group scales and zero points (packed.go), decoded at load or
//     held as stored; GPTQ's dynamic per-module rules (dynamic.go).
//   - "compressed-tensors": pack-quantized, naive-quantized and
//     float-quantized weights (compressed.go), decoded at load.

// fp8ScaleSuffix names an FP8 weight's scales.
const fp8ScaleSuffix = "_scale_inv"

// quantizationConfig is the part of quantization_config loading reads.
type quantizationConfig struct {
	Method    string `json:"quant_method"`
	Fmt       string `json:"fmt"`
	BlockSize []int  `json:"weight_block_size"`
	// GPTQ and AWQ.
	Bits             int             `json:"bits"`
	GroupSize        *int            `json:"group_size"`
	CheckpointFormat string          `json:"checkpoint_format"`
	Version          string          `json:"version"`
	ZeroPoint        *bool           `json:"zero_point"`
	Dynamic          json.RawMessage `json:"dynamic"`
}

// applyQuantization checks cfg's quantization_config against what m reads
// and records an FP8 checkpoint's block size in m's Spec.
func applyQuantization(cfg *config.File, m Model) error {
	var c struct {
		Q *quantizationConfig `json:"quantization_config"`
	}
	if err := cfg.Decode(&c); err != nil {
		return err
	}
	if c.Q == nil || c.Q.Method == "" {
		return nil
	}
	where := ConfigName(cfg) + " quantization_config"
	switch strings.ToLower(c.Q.Method) {
	case "fp8":
		if len(c.Q.BlockSize) != 2 || c.Q.BlockSize[0] <= 0 || c.Q.BlockSize[1] <= 0 {
			return errs.Unsupportedf("%s: quant_method fp8 with weight_block_size %v: tputool reads block-wise FP8 (two positive block sizes, e.g. [128, 128]); per-tensor FP8 is not read", where, c.Q.BlockSize)
		}
		if f := strings.ToLower(c.Q.Fmt); f != "" && f != "e4m3" && f != "e5m2" {
			return errs.Unsupportedf("%s: fmt %q: want e4m3 or e5m2", where, c.Q.Fmt)
		}
		m.Spec().FP8Block = [2]int{c.Q.BlockSize[0], c.Q.BlockSize[1]}
		return nil
	case "compressed-tensors", "gptq", "awq":
		layout, err := ReadQuantLayout(cfg)
		if err != nil {
			return err
		}
		m.Spec().Packed, m.Spec().Compressed = layout.packed, layout.compressed
		return nil
	case "fbgemm_fp8":
		// FBGEMM's FP8: NAME F8_E4M3 with PREFIX.weight_scale [out, 1] per
		// output channel, compressed-tensors' float-quantized by channel.
		m.Spec().Compressed = &CompressedQuant{Format: "float-quantized", Bits: 8, Symmetric: true, Strategy: "channel"}
		return nil
	case "mxfp4":
		for _, w := range Weights(m) {
			if w.MXFP4 {
				return nil
			}
		}
		return errs.Unsupportedf("%s: quant_method mxfp4 is read for the architectures that declare MXFP4 weights (GPT-OSS), not %s", where, cfg.Architecture())
	}
	return errs.Unsupportedf("%s: quant_method %q is not supported (tputool reads block-wise fp8, fbgemm_fp8, GPTQ, AWQ (gemm), compressed-tensors and GPT-OSS's mxfp4; bitsandbytes, HQQ and EXL2 checkpoints are not read)", where, c.Q.Method)
}

// packedQuant reads a GPTQ or AWQ quantization_config.
func packedQuant(c *quantizationConfig, where string) (*PackedQuant, error) {
	method := strings.ToLower(c.Method)
	q := &PackedQuant{Method: method, Bits: c.Bits}
	if c.GroupSize != nil && *c.GroupSize > 0 {
		q.Group = *c.GroupSize
	} else if c.GroupSize != nil && *c.GroupSize != -1 {
		return nil, errs.Unsupportedf("%s: group_size %d: want a positive size or -1 (one group per row)", where, *c.GroupSize)
	}
	switch method {
	case "gptq":
		if c.Bits != 4 && c.Bits != 8 {
			return nil, errs.Unsupportedf("%s: GPTQ with %d bits: tputool reads 4 and 8", where, c.Bits)
		}
		switch f := strings.ToLower(c.CheckpointFormat); f {
		case "", "gptq":
			q.ZeroOffset = 1
		case "gptq_v2":
		default:
			return nil, errs.Unsupportedf("%s: checkpoint_format %q: tputool reads gptq and gptq_v2 (not marlin or other repacked forms)", where, c.CheckpointFormat)
		}
		rules, err := parseDynamic(c.Dynamic, where)
		if err != nil {
			return nil, errs.Unsupportedf("%v", err)
		}
		q.Rules = rules
	case "awq":
		if c.Bits != 4 {
			return nil, errs.Unsupportedf("%s: AWQ with %d bits: tputool reads 4", where, c.Bits)
		}
		if v := strings.ToLower(c.Version); v != "" && v != "gemm" {
			return nil, errs.Unsupportedf("%s: AWQ version %q: tputool reads the gemm packing (not gemv, exllama or marlin)", where, c.Version)
		}
		if c.ZeroPoint != nil && !*c.ZeroPoint {
			return nil, errs.Unsupportedf("%s: AWQ without zero points is not supported", where)
		}
	}
	return q, nil
}

// fp8 reports a weight the checkpoint stores in block-wise FP8: a Matmul
// matrix with its scales beside it, in an FP8 checkpoint.
func (w WeightSpec) fp8(spec *Spec, has func(string) bool) bool {
	return spec.FP8Block[0] > 0 && w.Matmul && len(w.Shape) == 2 && has(w.Name) && has(w.Name+fp8ScaleSuffix)
}

// fp8ScaleShape is the shape of w's scales: one per block, rounding up.
func (w WeightSpec) fp8ScaleShape(spec *Spec) []int {
	b := spec.FP8Block
	return []int{(w.Shape[0] + b[0] - 1) / b[0], (w.Shape[1] + b[1] - 1) / b[1]}
}

// fp8DTypes are the dtypes an FP8 weight may be stored as.
var fp8DTypes = []safetensors.DType{safetensors.F8E4M3, safetensors.F8E5M2}

// checkFP8Shapes guards decodeEncoded against scales that do not cover w.
func checkFP8Scales(name string, scales, want []int) error {
	if len(scales) != 2 || scales[0] != want[0] || scales[1] != want[1] {
		return fmt.Errorf("tensor %q: scales %v, want %v (one per weight_block_size block)", name+fp8ScaleSuffix, scales, want)
	}
	return nil
}

// QuantLayout is how a GPTQ, AWQ or compressed-tensors checkpoint packs
// its weights, module by module (GPTQ's dynamic rules, compressed-tensors'
// groups and ignore list), read from config.json alone: the loader's
// Spec.Packed and Spec.Compressed (applyQuantization), and inspect's
// count of a checkpoint's tensors without a model.
type QuantLayout struct {
	packed     *PackedQuant
	compressed *CompressedQuant
}

// ReadQuantLayout reads cfg's quantization_config; nil (and no error)
// when it declares none of the packing formats.
func ReadQuantLayout(cfg *config.File) (*QuantLayout, error) {
	var c struct {
		Q *quantizationConfig `json:"quantization_config"`
	}
	if err := cfg.Decode(&c); err != nil || c.Q == nil {
		return nil, err
	}
	where := ConfigName(cfg) + " quantization_config"
	switch strings.ToLower(c.Q.Method) {
	case "gptq", "awq":
		q, err := packedQuant(c.Q, where)
		if err != nil {
			return nil, err
		}
		return &QuantLayout{packed: q}, nil
	case "compressed-tensors":
		var cc struct {
			Q compressedConfig `json:"quantization_config"`
		}
		if err := cfg.Decode(&cc); err != nil {
			return nil, err
		}
		q, err := compressedQuant(cc.Q, where)
		if err != nil {
			return nil, errs.Unsupportedf("%v", err)
		}
		return &QuantLayout{compressed: q}, nil
	}
	return nil, nil
}

// Packing is how module prefix's weight values are packed: bits a value,
// whether they are floats (NVFP4's E2M1), and false for a module stored
// plain or in a form that packs nothing (fp8, int8 a byte).
func (q *QuantLayout) Packing(prefix string) (bits int, float, ok bool) {
	switch {
	case q == nil:
	case q.packed != nil:
		if p, quantized := q.packed.For(prefix); quantized {
			return p.Bits, false, true
		}
	case q.compressed != nil:
		c, quantized := q.compressed.For(prefix)
		switch {
		case !quantized:
		case c.Format == "pack-quantized":
			return c.Bits, false, true
		case c.Format == ctNVFP4:
			return 4, true, true
		}
	}
	return 0, false, false
}

// DescribeQuantization is a line that names cfg's quantization_config as
// the loader reads it ("" without one): the method, the width, the
// groups, and per-module rules (GPTQ's dynamic, compressed-tensors'
// groups and ignore list). A config the loader refuses is described by
// its method and the reason.
func DescribeQuantization(cfg *config.File) string {
	var c struct {
		Q *quantizationConfig `json:"quantization_config"`
	}
	if err := cfg.Decode(&c); err != nil || c.Q == nil || c.Q.Method == "" {
		return ""
	}
	method := strings.ToLower(c.Q.Method)
	groups := func(g int) string {
		if g <= 0 {
			return "one group a row"
		}
		return fmt.Sprintf("groups of %d", g)
	}
	switch method {
	case "fp8":
		if len(c.Q.BlockSize) == 2 {
			return fmt.Sprintf("fp8, blocks of %d×%d", c.Q.BlockSize[0], c.Q.BlockSize[1])
		}
	case "fbgemm_fp8":
		return "fbgemm_fp8, a scale per output channel"
	case "mxfp4":
		return "mxfp4 (GPT-OSS experts)"
	}
	layout, err := ReadQuantLayout(cfg)
	switch {
	case err != nil:
		return fmt.Sprintf("%s (not read: %v)", method, err)
	case layout == nil:
		return method
	case layout.packed != nil:
		q := layout.packed
		s := fmt.Sprintf("%s, %d bits, %s", method, q.Bits, groups(q.Group))
		if len(q.Rules) > 0 {
			s += fmt.Sprintf(", %d dynamic rules", len(q.Rules))
		}
		return s
	}
	q := layout.compressed
	var schemes []string
	seen := map[*CompressedQuant]bool{}
	for _, t := range q.targets {
		if seen[t.scheme] {
			continue
		}
		seen[t.scheme] = true
		sc := t.scheme
		s := fmt.Sprintf("%s %d-bit by %s", sc.Format, sc.Bits, sc.Strategy)
		if sc.Strategy == "group" {
			s += fmt.Sprintf(" of %d", sc.Group)
		}
		schemes = append(schemes, s)
	}
	s := "compressed-tensors: " + strings.Join(schemes, "; ")
	if n := len(q.ignore); n > 0 {
		s += fmt.Sprintf("; %d ignored", n)
	}
	return s
}
