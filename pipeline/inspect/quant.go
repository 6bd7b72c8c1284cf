package inspect

import (
	"fmt"
	"strings"

	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/loader/safetensors"
)

// quantParts tells the tensors of a quantized checkpoint (config.json's
// quantization_config) apart: GPTQ's and AWQ's qweight and
// compressed-tensors' weight_packed hold 32/bits values an int32 word;
// scales, zero points, group indices and activation scales hold no
// parameters of their own and, once the weights are decoded to a compute
// dtype, no memory. A nil *quantParts (no quantization_config) counts
// every tensor by its elements.
type quantParts struct {
	perWord int64 // values a packed int32 word holds; 0 when unknown
}

// quantAux are the name suffixes of the tensors that serve quantized
// weights (the formats pipeline/lm reads).
var quantAux = []string{".qzeros", ".scales", ".g_idx", ".weight_scale", ".weight_zero_point", ".weight_g_idx",
	".weight_shape", ".weight_scale_inv", ".input_scale", ".input_scale_ub"}

// quantPartsOf reads cfg's quantization_config (nil without one).
func quantPartsOf(cfg *config.File) *quantParts {
	if cfg == nil || !cfg.Has("quantization_config") {
		return nil
	}
	var c struct {
		Q struct {
			Bits   int `json:"bits"`
			Groups map[string]struct {
				Weights *struct {
					NumBits int `json:"num_bits"`
				} `json:"weights"`
			} `json:"config_groups"`
		} `json:"quantization_config"`
	}
	q := &quantParts{}
	if err := cfg.Decode(&c); err != nil {
		return q
	}
	bits := c.Q.Bits
	for _, g := range c.Q.Groups {
		if g.Weights != nil {
			bits = g.Weights.NumBits
		}
	}
	if bits > 0 && 32%bits == 0 {
		q.perWord = int64(32 / bits)
	}
	return q
}

// packed reports a tensor of packed integer weights.
func (q *quantParts) packed(t safetensors.TensorInfo) bool {
	return q != nil && q.perWord > 0 && t.DType == safetensors.I32 &&
		(strings.HasSuffix(t.Name, ".qweight") || strings.HasSuffix(t.Name, ".weight_packed"))
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
// packed weight's words hold, none in the tensors that serve it.
func (q *quantParts) params(t safetensors.TensorInfo) int64 {
	switch {
	case q.packed(t):
		return t.NumElements() * q.perWord
	case q.aux(t):
		return 0
	}
	return paramsOf(t)
}

// dtype is the name t's parameters are counted under by dtype: "INT4"
// (or the width) for packed weights, the stored dtype otherwise.
func (q *quantParts) dtype(t safetensors.TensorInfo) string {
	if q.packed(t) {
		return fmt.Sprintf("INT%d", 32/q.perWord)
	}
	return string(t.DType)
}
