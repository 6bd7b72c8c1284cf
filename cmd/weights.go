package cmd

import (
	"fmt"
	"os"
	"runtime/debug"
	"slices"
	"strings"

	"github.com/gomlx/gomlx/pkg/core/dtypes"

	"github.com/tputool/tputool/compile"
	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/internal/humanize"
	"github.com/tputool/tputool/internal/ui"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/tpu"
	"github.com/tputool/tputool/tpu/cpu/kernels"
)

// quantizeHelp is the help of generate's and bench's --quantize.
const quantizeHelp = "weight quantisation, computed at load, embedding table and head included: int8 (weight-only, symmetric, one f32 scale per 64 input columns: about 1.06 bytes per weight), int4 (weight-only, symmetric, one scale per 32 input columns coded in a byte: about 0.53 bytes per weight; expert stacks too; matrices whose inputs are no multiple of 32 as int8), or none"

// parseQuantize reads --quantize: "" or "none" (float weights), "int8"
// or "int4".
func parseQuantize(s string) (string, error) {
	switch q := strings.ToLower(s); q {
	case "", "none":
		return "", nil
	case "int8", "int4":
		return q, nil
	}
	return "", errs.Usagef("--quantize %q: want int8, int4 or none", s)
}

// activationsHelp is the help of generate's, serve's and bench's
// --activations.
const activationsHelp = "activations of the products on the CPU engine: f32 (the default, the reference); int8 with --quantize int4 or int8, or the 4-bit weights of a GPTQ, AWQ or compressed-tensors checkpoint (quantised per 32 values as llama.cpp does, multiplied in integers with AVX512-VNNI: faster with int4 weights, no faster with int8 ones on the machines measured; about 0.5% off each product); bf16 with bf16 weights or weights held compact (--quantize int8 or int4, a checkpoint's FP8 or 4-bit weights: rounded to bfloat16 as llama.cpp does, multiplied by pairs with AVX512_BF16, the compact weights decoded to bf16 block by block: faster prefill and batches, about 0.2% off each product)"

// parseActivations reads --activations: "" or "f32" (as computed),
// "int8", which takes --quantize int4 or int8 or a 4-bit checkpoint
// (checkActivations), or "bf16", which takes bf16 weights and every
// compact form.
func parseActivations(s string) (string, error) {
	switch a := strings.ToLower(s); a {
	case "", "f32", "float32":
		return "", nil
	case "int8":
		// Without --quantize it applies to the 4-bit weights of GPTQ, AWQ
		// and compressed-tensors checkpoints; compileRunner refuses it
		// where the model holds none (checkActivations).
		return a, nil
	case "bf16", "bfloat16":
		return "bf16", nil
	}
	return "", errs.Usagef("--activations %q: want f32, int8 or bf16", s)
}

// checkActivations refuses --activations int8 where no product of the
// model would take it: without --quantize, on a checkpoint none of whose
// weights are held as 4-bit or 8-bit integers (lm.Loaded.HeldForm).
func checkActivations(dev *tpu.Device, l *lm.Loaded, o compile.Options) error {
	if dev.Activations() != "int8" || o.Quantize != "" {
		return nil
	}
	h := holdingOf(dev, o)
	for _, w := range l.Weights() {
		if f := l.HeldForm(h, w.Name); f == lm.FormInt4Groups || f == lm.FormInt8Groups || f == lm.FormNVFP4 {
			return nil
		}
	}
	return errs.Usagef("--activations int8 applies to int4 and int8 weights, and %s holds none: add --quantize int4 or int8", l.Dir)
}

// enableActivations sets the device up for --activations before any
// model is compiled on it.
func enableActivations(rep *ui.Reporter, dev *tpu.Device, activations string) error {
	if activations == "" {
		return nil
	}
	if err := dev.SetActivations(activations); err != nil {
		return fmt.Errorf("--activations %s: %w (use --device cpu:fast)", activations, err)
	}
	switch activations {
	case "int8":
		rep.Debugf("activations: int4 and int8 products quantise their activations to int8 per 32 values (VNNI: %v)", slices.Contains(kernels.Features(), "avx512_vnni"))
	case "bf16":
		rep.Debugf("activations: products with bf16 and compact weights round their activations to bf16 (AVX512_BF16: %v)", slices.Contains(kernels.Features(), "avx512_bf16"))
	}
	return nil
}

// holdingOf is how compile.NewRunner will hold l's weights on dev with o.
func holdingOf(dev *tpu.Device, o compile.Options) lm.Holding {
	return compile.HoldingOf(dev.Capabilities, o)
}

// checkWeightsFit refuses, before anything is converted, weights that
// would not fit in host memory as the backend will hold them (checkpoint
// dtype, compute dtype, or int8 and scales): on a backend that computes in
// host memory the kernel's OOM killer would otherwise end the process
// without a message.
func checkWeightsFit(dev *tpu.Device, l *lm.Loaded, o compile.Options, hostMemory int64) error {
	if !dev.Capabilities.HostMemory {
		return nil
	}
	h := holdingOf(dev, o)
	need := l.HeldBytes(h)
	what := fmt.Sprintf("the weights of %s held as %s", l.Dir, holdingName(h))
	lower := "try --quantize int8 or int4"
	switch o.Quantize {
	case "int8":
		lower = "try --quantize int4, or use a smaller model"
	case "int4":
		lower = "use a smaller model"
	}
	return checkHostMemory(what, need, false, hostMemory, lower)
}

// holdingName says how weights are held: "float32", "float32 compute
// (bf16/f16 matmul weights as stored)", "int8 with float32 compute".
func holdingName(h lm.Holding) string {
	switch {
	case h.Quantize != "":
		return fmt.Sprintf("%s with %s compute", h.Quantize, dtypeName(h.Compute))
	case h.Narrow && h.Compute == dtypes.Float32:
		return "float32 compute (bf16/f16 matmul weights as stored)"
	}
	return dtypeName(h.Compute)
}

// gcHeadroom bounds the garbage the Go collector lets pile up between
// collections when a model's weights (about weights bytes) are held in
// process memory: with the default GOGC=100 the heap may grow to twice
// the live heap, which the weights dominate, before a collection; the
// bound is 1/16 of the weights (at least 32 MiB). It is set before the
// weights load, so that the load's temporaries (an f32 copy of each
// weight being quantised) are collected too. GOGC set in the environment
// is left alone.
func gcHeadroom(dev *tpu.Device, weights int64) {
	if !dev.Capabilities.HostMemory || weights <= 0 || os.Getenv("GOGC") != "" {
		return
	}
	room := max(32<<20, weights/16)
	if pct := int(100 * room / weights); pct < 100 {
		debug.SetGCPercent(max(pct, 1))
	}
}

// reportWeights names the held weights under --verbose, and warns when
// --quantize runs on a backend without the fused int8 matmul: the graph
// then dequantises every weight to f32 at every step, which works but is
// slow (GoMLX's go backend: minutes for a 110M model's 128 tokens).
func reportWeights(rep *ui.Reporter, dev *tpu.Device, l *lm.Loaded, r *compile.Runner, o compile.Options) {
	h := holdingOf(dev, o)
	rep.Debugf("weights: %s held as %s (%s in the checkpoint)", humanize.Bytes(r.WeightBytes()), holdingName(h), humanize.Bytes(l.WeightBytes()))
	if o.Quantize != "" && dev.Capabilities.HostMemory && !dev.Capabilities.NarrowWeights {
		rep.Warnf("--quantize %s on the %s backend: weights are dequantised at every step (slow); --device cpu:fast multiplies %s directly", o.Quantize, dev.BackendName, o.Quantize)
	}
	var mx, fp8, i4, i8, nv, nvStacks int
	for _, w := range l.Weights() {
		_, isFP8 := l.StoredFP8(w.Name)
		lay, isI4 := l.StoredInt4Groups(w.Name)
		_, isI8 := l.StoredInt8Groups(w.Name)
		_, isNVStack := l.StoredNVFP4Stack(w.Name)
		switch {
		case l.StoredMXFP4(w.Name):
			mx++
		case isFP8:
			fp8++
		case isNVStack && h.NVFP4:
			nv++
		case isI4 && lay.FP4 && h.NVFP4:
			nvStacks++
		case isI4:
			i4++
		case h.NVFP4 && l.StoredNVFP4(w.Name):
			nv++
		case isI8:
			i8++
		}
	}
	switch {
	case mx == 0:
	case h.MXFP4:
		rep.Debugf("weights: %d MXFP4 tensors held as stored (4.25 bits a weight), multiplied in place", mx)
	default:
		rep.Infof("%d MXFP4 weight tensors are decoded to %s at load: the %s backend does not multiply MXFP4 (tputool's cpu backend on one device does)", mx, dtypeName(h.Compute), dev.BackendName)
	}
	// The checkpoint's FP8, 4-bit and 8-bit integer weights: held as
	// stored where the backend multiplies them (compile.HoldingOf), else
	// decoded at load.
	for _, c := range []struct {
		n    int
		what string
		held bool
		form string
	}{
		{fp8, "FP8", h.FP8 && h.Quantize == "", "as stored (a byte a weight)"},
		{i4, "4-bit", h.Int4Groups, "as stored (half a byte a weight and a scale a group)"},
		{nv, "NVFP4", h.NVFP4, "as stored (half a byte a weight and a byte of scale per 16; expert stacks with a table per part)"},
		{nvStacks, "NVFP4 expert-stack", h.NVFP4, "as grouped FP4 (half a byte a weight and an f32 scale per 16)"},
		// lm.Loaded.StoredInt8Groups: symmetric 8-bit, NVFP4 and 4-bit by
		// 16 not held as stored.
		{i8, "integer", h.Int4Groups && h.Quantize != "int4", "as int8 (a byte a weight and a scale a group)"},
	} {
		switch {
		case c.n == 0:
		case c.held:
			rep.Debugf("weights: %d %s matrices of the checkpoint held %s, multiplied in place", c.n, c.what, c.form)
		case o.Quantize != "":
			rep.Debugf("weights: %d %s matrices of the checkpoint decoded at load and quantised to %s", c.n, c.what, o.Quantize)
		default:
			rep.Infof("%d %s weight matrices of the checkpoint are decoded to %s at load (tputool's cpu backend holds them as stored, on one device)", c.n, c.what, dtypeName(h.Compute))
		}
	}
}
