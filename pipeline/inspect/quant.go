package inspect

import (
	"fmt"
	"strings"

	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/loader/safetensors"
	"github.com/tputool/tputool/pipeline/lm"
)

// quantParts tells the tensors of a quantized checkpoint (config.json's
// quantization_config) apart: GPTQ's and AWQ's qweight and
// compressed-tensors' weight_packed hold 32/bits values an int32 word
// (NVFP4's, two E2M1 values a byte), the bits read per module as the
// loader reads them (lm.QuantLayout: GPTQ's dynamic rules,
// compressed-tensors' groups); scales, zero points, group indices and
// activation scales hold no parameters of their own and, once the weights
// are decoded to a compute dtype, no memory. A nil *quantParts (no
// quantization_config) counts every tensor by its elements.
type quantParts struct {
	layout *lm.QuantLayout // nil when the config declares no packing
}

// quantAux are the name suffixes of the tensors that serve quantized
// weights (the formats pipeline/lm reads).
var quantAux = []string{".qzeros", ".scales", ".g_idx", ".weight_scale", ".weight_zero_point", ".weight_g_idx",
	".weight_shape", ".weight_scale_inv", ".input_scale", ".input_scale_ub", ".weight_global_scale", ".input_global_scale", ".activation_scale"}

// quantPartsOf reads cfg's quantization_config (nil without one). A
// config the loader refuses packs nothing here: the check against the
// architecture reports it.
func quantPartsOf(cfg *config.File) *quantParts {
	if cfg == nil || !cfg.Has("quantization_config") {
		return nil
	}
	layout, _ := lm.ReadQuantLayout(cfg)
	return &quantParts{layout: layout}
}

// packing is the values t packs a stored element and their dtype's name
// ("INT4", "FP4"), when t is a tensor of packed weights.
func (q *quantParts) packing(t safetensors.TensorInfo) (per int64, name string, ok bool) {
	if q == nil || q.layout == nil {
		return 0, "", false
	}
	if q.layout.BitNet() {
		if strings.HasSuffix(t.Name, ".weight") && t.DType == safetensors.U8 {
			return 4, "TERNARY", true // four values a byte, the rows packed
		}
		return 0, "", false
	}
	prefix, cut := strings.CutSuffix(t.Name, ".qweight")
	if !cut {
		if prefix, cut = strings.CutSuffix(t.Name, ".weight_packed"); !cut {
			return 0, "", false
		}
	}
	bits, float, ok := q.layout.Packing(prefix)
	switch {
	case !ok:
		return 0, "", false
	case float && t.DType == safetensors.U8:
		return int64(8 / bits), fmt.Sprintf("FP%d", bits), true
	case !float && t.DType == safetensors.I32 && 32%bits == 0:
		return int64(32 / bits), fmt.Sprintf("INT%d", bits), true
	}
	return 0, "", false
}

// packed reports a tensor of packed weights.
func (q *quantParts) packed(t safetensors.TensorInfo) bool {
	_, _, ok := q.packing(t)
	return ok
}

// aux reports a tensor that serves quantized weights.
func (q *quantParts) aux(t safetensors.TensorInfo) bool {
	if q == nil {
		return false
	}
	for _, s := range quantAux {
		if strings.HasSuffix(t.Name, s) {
			return true
		}
	}
	return false
}

// params is the number of parameters t holds: paramsOf's, the values a
// packed weight's elements hold, none in the tensors that serve it.
func (q *quantParts) params(t safetensors.TensorInfo) int64 {
	if per, _, ok := q.packing(t); ok {
		return t.NumElements() * per
	}
	if q.aux(t) {
		return 0
	}
	return paramsOf(t)
}

// dtype is the name t's parameters are counted under by dtype: "INT4"
// (or the width, or "FP4") for packed weights, the stored dtype
// otherwise.
func (q *quantParts) dtype(t safetensors.TensorInfo) string {
	if _, name, ok := q.packing(t); ok {
		return name
	}
	return string(t.DType)
}
