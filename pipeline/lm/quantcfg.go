package lm

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
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
//     are stored plain. The loader decodes them (encoded.go). Without a
//     weight_block_size key the blocks are 128×128, as transformers'
//     FineGrainedFP8Config defaults them; an explicit null is per-tensor
//     FP8 (Mistral's Ministral 3 and Devstral 2 releases): NAME_scale_inv
//     is then one float, a scalar (shape [], as transformers' FP8Linear
//     registers it), for the whole matrix. activation_scheme "static" stores a scale
//     for each projection's input (PREFIX.input_scale, or transformers'
//     PREFIX.activation_scale): not applied, activations stay float
//     (Spec.UnreadScales).
//   - "mxfp4": only for architectures that declare MXFP4 weights
//     (WeightSpec.MXFP4: GPT-OSS's experts).
//   - "gptq" and "awq": Linear weights packed into int32 words with
//     per-group scales and zero points (packed.go), decoded at load or
//     held as stored; GPTQ's dynamic per-module rules (dynamic.go).
//   - "bitnet": BitNet b1.58's ternary weights, four a byte, with a
//     scale a matrix (bitnet.go), decoded at load; the architecture
//     rounds every projection's input to int8 per token (Spec.BitNet).
//   - "compressed-tensors": pack-quantized, naive-quantized (and its
//     aliases int-quantized and float-quantized) and nvfp4 weights
//     (compressed.go), decoded at load. A kv_cache_scheme's scales
//     (ATTENTION.k_scale, v_scale, q_scale) are not applied: the KV cache
//     stays float (Spec.UnreadScales).

// fp8ScaleSuffix names an FP8 weight's scales.
const fp8ScaleSuffix = "_scale_inv"

// fp8DefaultBlock is weight_block_size when the config has no such key
// (transformers' FineGrainedFP8Config default).
var fp8DefaultBlock = []int{128, 128}

// FP8PerTensor is Spec.FP8Block of a per-tensor FP8 checkpoint
// (weight_block_size null): one scale a matrix, whatever its shape.
var FP8PerTensor = [2]int{-1, -1}

// Name suffixes of the scales a quantization_config declares for
// activations and the KV cache, which the loader does not apply
// (Spec.UnreadScales): fp8's static activation_scheme (vLLM's
// input_scale, transformers' activation_scale, and its fused experts'
// gate_up_proj_activation_scale), and compressed-tensors' kv_cache_scheme
// (compressed-tensors' KVCacheScaleType on the attention module, a query
// scale where the attention itself is quantized, zero points where
// asymmetric).
var (
	fp8StaticScales = []string{".input_scale", ".activation_scale", "_activation_scale"}
	kvCacheScales   = []string{".k_scale", ".v_scale", ".q_scale", ".k_zero_point", ".v_zero_point", ".q_zero_point"}
)

// quantizationConfig is the part of quantization_config loading reads.
type quantizationConfig struct {
	Method string `json:"quant_method"`
	Fmt    string `json:"fmt"`
	// BlockSize is weight_block_size as written: nil when absent, "null"
	// when null (fp8Block).
	BlockSize        json.RawMessage `json:"weight_block_size"`
	ActivationScheme string          `json:"activation_scheme"`
	// KVCacheScheme is compressed-tensors' kv_cache_scheme.
	KVCacheScheme json.RawMessage `json:"kv_cache_scheme"`
	// GPTQ and AWQ.
	Bits             int             `json:"bits"`
	GroupSize        *int            `json:"group_size"`
	CheckpointFormat string          `json:"checkpoint_format"`
	Version          string          `json:"version"`
	ZeroPoint        *bool           `json:"zero_point"`
	Dynamic          json.RawMessage `json:"dynamic"`
	// BitNet.
	NotConvert       []string `json:"modules_to_not_convert"`
	LinearClass      string   `json:"linear_class"`
	QuantizationMode string   `json:"quantization_mode"`
	UseRMSNorm       bool     `json:"use_rms_norm"`
}

// BitNetArchitectures are the architectures whose graph quantizes a
// BitNet checkpoint's activations (nn.ActQuant8, Spec.BitNet): BitNet's
// own and the dense Llama decoder the Llama-architecture 1.58-bit
// releases use.
var BitNetArchitectures = []string{"BitNetForCausalLM", "LlamaForCausalLM"}

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
		b, ok := c.Q.fp8Block()
		if !ok {
			return errs.Unsupportedf("%s: quant_method fp8 with weight_block_size %s: want two positive block sizes (e.g. [128, 128], the default when the key is absent), or null for one scale a tensor", where, bytes.TrimSpace(c.Q.BlockSize))
		}
		if f := strings.ToLower(c.Q.Fmt); f != "" && f != "e4m3" && f != "e5m2" {
			return errs.Unsupportedf("%s: fmt %q: want e4m3 or e5m2", where, c.Q.Fmt)
		}
		m.Spec().FP8Block = b
		if strings.EqualFold(c.Q.ActivationScheme, "static") {
			m.Spec().UnreadScales = fp8StaticScales
		}
		return nil
	case "compressed-tensors", "gptq", "awq":
		layout, err := ReadQuantLayout(cfg)
		if err != nil {
			return err
		}
		m.Spec().Packed, m.Spec().Compressed = layout.packed, layout.compressed
		if layout.compressed != nil && c.Q.kvCache() {
			m.Spec().UnreadScales = kvCacheScales
		}
		return nil
	case "bitnet":
		if !slices.Contains(BitNetArchitectures, cfg.Architecture()) {
			return errs.Unsupportedf("%s: quant_method bitnet is read for %s, not %s", where, strings.Join(BitNetArchitectures, " and "), cfg.Architecture())
		}
		lc, mode := strings.ToLower(c.Q.LinearClass), strings.ToLower(c.Q.QuantizationMode)
		switch {
		case lc != "" && lc != "bitlinear" && lc != "autobitlinear":
			return errs.Unsupportedf("%s: linear_class %q: want bitlinear or autobitlinear", where, c.Q.LinearClass)
		case mode != "" && mode != "offline":
			return errs.Unsupportedf("%s: quantization_mode %q: tputool reads offline BitNet checkpoints (ternary weights stored packed), not online quantization of float weights", where, c.Q.QuantizationMode)
		case c.Q.UseRMSNorm:
			return errs.Unsupportedf("%s: use_rms_norm true (an RMSNorm inside every BitLinear) is not supported", where)
		}
		for _, k := range c.Q.NotConvert {
			for _, mod := range bitnetModules(m.Spec().Layers) {
				if k != "" && strings.Contains(mod, k) {
					return errs.Unsupportedf("%s: modules_to_not_convert %q leaves %s float; tputool reads BitNet checkpoints whose projections are all quantized (the head aside)", where, k, mod)
				}
			}
		}
		var b struct {
			AttentionBias bool `json:"attention_bias"`
			MLPBias       bool `json:"mlp_bias"`
		}
		if err := cfg.Decode(&b); err != nil {
			return err
		}
		if lc == "autobitlinear" && (b.AttentionBias || b.MLPBias) {
			return errs.Unsupportedf("%s: linear_class autobitlinear with attention_bias or mlp_bias: AutoBitLinear scales its bias with the product, which tputool does not", where)
		}
		m.Spec().BitNet = &BitNetQuant{Divide: lc != "autobitlinear"}
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
	return errs.Unsupportedf("%s: quant_method %q is not supported (tputool reads block-wise fp8, fbgemm_fp8, GPTQ, AWQ (gemm), compressed-tensors, BitNet and GPT-OSS's mxfp4; bitsandbytes, HQQ and EXL2 checkpoints are not read)", where, c.Q.Method)
}

// fp8Block is an fp8 config's weight_block_size, [128, 128] without the
// key, FP8PerTensor when null; false when not two positive sizes.
func (c *quantizationConfig) fp8Block() ([2]int, bool) {
	b := fp8DefaultBlock
	if bs := bytes.TrimSpace(c.BlockSize); bytes.Equal(bs, []byte("null")) {
		return FP8PerTensor, true
	} else if len(bs) > 0 {
		b = nil
		if json.Unmarshal(c.BlockSize, &b) != nil {
			return [2]int{}, false
		}
	}
	if len(b) != 2 || b[0] <= 0 || b[1] <= 0 {
		return [2]int{}, false
	}
	return [2]int{b[0], b[1]}, true
}

// kvCache reports a kv_cache_scheme that is there and not null.
func (c *quantizationConfig) kvCache() bool {
	s := string(bytes.TrimSpace(c.KVCacheScheme))
	return s != "" && s != "null"
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
			q.V1 = true
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
	return spec.FP8Block != [2]int{} && w.stored() && len(w.Shape) == 2 && has(w.Name) && has(w.Name+fp8ScaleSuffix)
}

// fp8ScaleShape is the shape of w's scales as stored: one per block,
// rounding up; a scalar when per tensor.
func (w WeightSpec) fp8ScaleShape(spec *Spec) []int {
	if spec.FP8Block == FP8PerTensor {
		return []int{}
	}
	b := spec.FP8Block
	return []int{(w.Shape[0] + b[0] - 1) / b[0], (w.Shape[1] + b[1] - 1) / b[1]}
}

// fp8BlockOf is the block one of w's scales covers: the whole matrix
// when per tensor.
func (w WeightSpec) fp8BlockOf(spec *Spec) [2]int {
	if spec.FP8Block == FP8PerTensor {
		return [2]int{w.Shape[0], w.Shape[1]}
	}
	return spec.FP8Block
}

// fp8DTypes are the dtypes an FP8 weight may be stored as.
var fp8DTypes = []safetensors.DType{safetensors.F8E4M3, safetensors.F8E5M2}

// checkFP8Shapes guards decodeEncoded against scales that do not cover w.
func checkFP8Scales(name string, scales, want []int) error {
	if !slices.Equal(scales, want) {
		return fmt.Errorf("tensor %q: scales %v, want %v (one per weight_block_size block; a scalar when null)", name+fp8ScaleSuffix, scales, want)
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
	bitnet     bool
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
	case "bitnet":
		return &QuantLayout{bitnet: true}, nil
	}
	return nil, nil
}

// BitNet reports a BitNet b1.58 checkpoint: a quantized projection's
// NAME is U8 [ceil(out/4), in], four ternary values a byte (bitnet.go).
func (q *QuantLayout) BitNet() bool { return q != nil && q.bitnet }

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
		if b, ok := c.Q.fp8Block(); ok {
			s := fmt.Sprintf("fp8, blocks of %d×%d", b[0], b[1])
			if b == FP8PerTensor {
				s = "fp8, a scale a tensor"
			}
			if strings.EqualFold(c.Q.ActivationScheme, "static") {
				s += "; static activation scales not applied (activations stay float)"
			}
			return s
		}
	case "fbgemm_fp8":
		return "fbgemm_fp8, a scale per output channel"
	case "mxfp4":
		return "mxfp4 (GPT-OSS experts)"
	case "bitnet":
		return "bitnet b1.58: ternary weights, four a byte, a scale a matrix (decoded at load); activations rounded to int8 per token"
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
	for _, sc := range q.schemes {
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
	if c.Q.kvCache() {
		s += "; KV-cache scales not applied (the KV cache stays float)"
	}
	return s
}
