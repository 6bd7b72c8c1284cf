package llama_test

import (
	"slices"
	"testing"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"

	"github.com/tputool/tputool/compile"
	"github.com/tputool/tputool/loader/safetensors"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
	"github.com/tputool/tputool/pipeline/testkit/refcheck"
	"github.com/tputool/tputool/tpu"
	"github.com/tputool/tputool/tpu/cpu/kernels"
)

// TestPackedHeld: on the cpu backend (tpu.Capabilities.Int4Groups) the
// 4-bit projections of GPTQ (v1 symmetric, v2 with zero points), AWQ and
// compressed-tensors (symmetric, and with zero points) checkpoints are
// held at their stored width as grouped int4, exactly the bytes
// lm.Loaded.HeldBytes estimates and under a third of decoded, and the
// logits match the f32 checkpoint of the dequantised weights up to the
// order of f32 sums, compiled and eager. Groups of 64 over the 96 inputs
// of down_proj, and an activation-order g_idx, leave those weights
// decoded (StoredInt4Groups refuses them), held in f16 as before: the
// logits then match to f16's rounding of the weights. Under --quantize
// int4 the 4-bit weights stay as stored and the others are quantised.
// Symmetric 8-bit GPTQ and compressed-tensors weights (pack-quantized
// and naive int8) are held as int8 with their scales (--quantize int8's
// layout), and so are NVFP4 (twice its values, in groups of 16) and
// 4-bit weights in groups of 16 over rows that are not whole blocks of 32
// (q − z); asymmetric 8-bit ones are decoded, and so is every weight
// whose group_size leaves a short last group. In bf16 compute every form
// is held the same way, and the logits are as near the f32 ones as bf16
// compute of the f32 checkpoint's (checkNearBF16).
func TestPackedHeld(t *testing.T) {
	prompts := [][]int{{1, 7, 21, 33, 4}, {1, 9, 14, 60, 3, 5, 41, 27}}
	type tc struct {
		name   string
		dirs   func(t *testing.T) (string, string)
		held   int // projections held as grouped int4 (of 14)
		held8  int // projections held as int8 (symmetric 8-bit)
		heldNV int // projections held as NVFP4 as stored
		gIdx   bool
		asMins bool
		bound  float64 // when not 1e-5 (all held) or 1e-3 (some decoded to f16)
	}
	packed := func(f packedFormat) func(t *testing.T) (string, string) {
		f.hidden, f.inter, f.f32Ref = 64, 96, true
		return func(t *testing.T) (string, string) { return packedCheckpoints(t, f) }
	}
	ct := func(f ctFormat) func(t *testing.T) (string, string) {
		f.hidden, f.inter, f.f32Ref, f.format = 64, 96, true, "pack-quantized"
		if f.bits == 0 {
			f.bits = 4
		}
		return func(t *testing.T) (string, string) { return ctCheckpoints(t, f) }
	}
	for _, c := range []tc{
		{name: "gptq-v1-sym-g32", dirs: packed(packedFormat{method: "gptq", bits: 4, group: 32, sym: true}), held: 14},
		{name: "gptq-v2-g64", dirs: packed(packedFormat{method: "gptq", bits: 4, v2: true, group: 64}), held: 12, asMins: true},
		{name: "gptq-desc_act", dirs: packed(packedFormat{method: "gptq", bits: 4, group: 32, gIdx: true}), held: 14, gIdx: true, asMins: true},
		{name: "awq-g32", dirs: packed(packedFormat{method: "awq", bits: 4, group: 32}), held: 14, asMins: true},
		{name: "ct-w4a16-sym-g32", dirs: ct(ctFormat{sym: true, strategy: "group", group: 32}), held: 14},
		{name: "ct-w4a16-asym-g32", dirs: ct(ctFormat{strategy: "group", group: 32}), held: 14, asMins: true},
		{name: "ct-w4a16-channel", dirs: ct(ctFormat{sym: true, strategy: "channel"}), held: 14},
		// Groups of 16: grouped int4 with two scale codes a block; where a
		// row is not whole blocks of 32 (down_proj over 80 inputs), held
		// as int8, q − z in groups of 16, exactly.
		{name: "gptq-v2-g16", dirs: packed(packedFormat{method: "gptq", bits: 4, v2: true, group: 16}), held: 14, asMins: true},
		{name: "ct-w4a16-asym-g16", dirs: ct(ctFormat{strategy: "group", group: 16}), held: 14, asMins: true},
		{name: "ct-w4a16-asym-g16-inter80", dirs: func(t *testing.T) (string, string) {
			return ctCheckpoints(t, ctFormat{format: "pack-quantized", bits: 4, strategy: "group", group: 16, hidden: 64, inter: 80, f32Ref: true})
		}, held: 12, held8: 2, asMins: true},
		{name: "gptq-8bit-sym-g32", dirs: packed(packedFormat{method: "gptq", bits: 8, group: 32, sym: true}), held8: 14},
		{name: "gptq-8bit-asym", dirs: packed(packedFormat{method: "gptq", bits: 8, v2: true, group: 32})},
		{name: "ct-w8a16-sym-g32", dirs: ct(ctFormat{sym: true, strategy: "group", group: 32, bits: 8}), held8: 14},
		// A group_size that divides neither input width (40 over 64 and
		// 96: a short last group) is held in neither form: decoded.
		{name: "gptq-g40", dirs: packed(packedFormat{method: "gptq", bits: 4, v2: true, group: 40})},
		// Dynamic rules: layer 1's seven projections in 4 bits by groups
		// of 32 and layer 0's five in groups of 16 are held as grouped
		// int4; its asymmetric 8-bit down_proj and plain q_proj are not.
		// naive-quantized int8 by channel (W8A8 releases): held as int8.
		{name: "ct-w8a8-naive-channel", dirs: func(t *testing.T) (string, string) {
			return ctCheckpoints(t, ctFormat{format: "naive-quantized", bits: 8, sym: true, strategy: "channel", hidden: 64, inter: 96, f32Ref: true, inScale: true})
		}, held8: 14},
		// With zero points: decoded, to bf16 (compressed-tensors' releases
		// keep bf16 scales).
		{name: "ct-int8-naive-asym", dirs: func(t *testing.T) (string, string) {
			return ctCheckpoints(t, ctFormat{format: "naive-quantized", bits: 8, strategy: "channel", hidden: 64, inter: 96, f32Ref: true})
		}, bound: 1e-2},
		// NVFP4 (E2M1 codes, E4M3 scales by 16): held as stored, the
		// codes and scale bytes, with a table of half-scales; where a row
		// is not whole blocks of 32 (down_proj over 80 inputs), as int8,
		// twice each value with half the scale.
		{name: "ct-nvfp4", dirs: func(t *testing.T) (string, string) {
			return ctCheckpoints(t, ctFormat{format: "nvfp4-pack-quantized", bits: 4, sym: true, strategy: "group", hidden: 64, inter: 96, f32Ref: true})
		}, heldNV: 14},
		{name: "ct-nvfp4-inter80", dirs: func(t *testing.T) (string, string) {
			return ctCheckpoints(t, ctFormat{format: "nvfp4-pack-quantized", bits: 4, sym: true, strategy: "group", hidden: 64, inter: 80, f32Ref: true})
		}, heldNV: 12, held8: 2},
		{name: "gptq-dynamic", dirs: packed(packedFormat{method: "gptq", bits: 4, dynamic: dynamicRules, module: dynamicModules}), held: 12, asMins: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			qDir, fDir := c.dirs(t)
			be := refcheck.CPUBackend(t)
			caps := tpu.CapabilitiesOf(be)
			for _, mode := range []compile.Mode{compile.Compiled, compile.Eager} {
				want := prefillLogits(t, fDir, mode, prompts)
				l, err := lmckpt.Load(qDir)
				if err != nil {
					t.Fatal(err)
				}
				held, held8, heldNV, mins, perm := 0, 0, 0, false, false
				for _, w := range l.Weights() {
					_, i8 := l.StoredInt8Groups(w.Name)
					switch {
					case l.StoredNVFP4(w.Name):
						heldNV++
					case i8:
						held8++
					}
					if lay, ok := l.StoredInt4Groups(w.Name); ok {
						held++
						mins, perm = mins || lay.Mins, perm || lay.Permuted
						if !lm.Int4GroupsFit(w.Shape[1], lay.Group) || kernels.CheckInt4Groups(w.Shape[1], lay.Group) != nil {
							t.Errorf("%s: groups of %d over %d inputs held", w.Name, lay.Group, w.Shape[1])
						}
					}
				}
				if perm != c.gIdx {
					t.Errorf("%v: held in activation order: %v, want %v", mode, perm, c.gIdx)
				}
				if held != c.held || mins != c.asMins || held8 != c.held8 || heldNV != c.heldNV {
					t.Errorf("%v: %d weights held as grouped int4 (mins %v), %d as int8 and %d as NVFP4, want %d (%v), %d and %d",
						mode, held, mins, held8, heldNV, c.held, c.asMins, c.held8, c.heldNV)
				}
				r := heldRunner(t, be, caps, l, compile.Options{Mode: mode, Caps: &caps}, held+held8+heldNV > 0)
				got, err := r.NewState().Prefill(prompts, 1)
				if err != nil {
					t.Fatal(err)
				}
				plainBytes := r.WeightBytes()
				r.Close()
				// --quantize int4 leaves the 4-bit weights as stored and
				// quantises the rest (here the embedding).
				rq := heldRunner(t, be, caps, l, compile.Options{Mode: mode, Caps: &caps, Quantize: "int4"}, false)
				if held8 == 0 && rq.WeightBytes() >= plainBytes {
					t.Errorf("%v, int4: holds %d bytes, without --quantize %d", mode, rq.WeightBytes(), plainBytes)
				}
				rq.Close()
				// In bf16 compute the same weights stay as stored (the
				// products read them as held: tpu/cpu's wide16), as near
				// the f32 logits as bf16 compute of the f32 checkpoint.
				rb := heldRunner(t, be, caps, l, compile.Options{Mode: mode, Caps: &caps, DType: dtypes.BFloat16}, held+held8+heldNV > 0)
				gotBF, err := rb.NewState().Prefill(prompts, 1)
				if err != nil {
					t.Fatal(err)
				}
				rb.Close()
				checkNearBF16(t, mode.String()+" bf16", gotBF, want, prefillLogitsWith(t, fDir, compile.Options{Mode: mode, DType: dtypes.BFloat16}, prompts))
				l.Close()
				bound := 1e-5
				if held+held8+heldNV < 14 {
					bound = 1e-3 // weights decoded to f16
				}
				if c.bound > 0 {
					bound = c.bound
				}
				checkLogits(t, mode.String(), got, want, bound)
			}
		})
	}
}

// TestCompressedFP8Held: FP8 weights of compressed-tensors checkpoints
// (float-quantized by channel, tensor, group and block) and of fbgemm_fp8
// are held as stored on the cpu backend, a byte a weight and their
// scales, exactly the bytes lm.Loaded.HeldBytes estimates, and the logits
// match the f32 checkpoint of the dequantised weights up to the order of
// f32 sums, compiled and eager.
func TestCompressedFP8Held(t *testing.T) {
	prompts := [][]int{{1, 7, 21, 33, 4}, {1, 9, 14, 60, 3, 5, 41, 27}}
	for _, f := range []ctFormat{
		{name: "channel", strategy: "channel"},
		{name: "tensor", strategy: "tensor"},
		{name: "group", strategy: "group", group: 32},
		{name: "block", strategy: "block"},
		{name: "fbgemm", strategy: "channel", fbgemm: true},
	} {
		t.Run(f.name, func(t *testing.T) {
			f.format, f.bits, f.sym, f.hidden, f.inter, f.f32Ref = "float-quantized", 8, true, 64, 96, true
			qDir, fDir := ctCheckpoints(t, f)
			be := refcheck.CPUBackend(t)
			caps := tpu.CapabilitiesOf(be)
			for _, mode := range []compile.Mode{compile.Compiled, compile.Eager} {
				want := prefillLogits(t, fDir, mode, prompts)
				l, err := lmckpt.Load(qDir)
				if err != nil {
					t.Fatal(err)
				}
				held := 0
				for _, w := range l.Weights() {
					if _, ok := l.StoredFP8(w.Name); ok {
						held++
					}
				}
				if held != 14 {
					t.Errorf("%v: %d weights held as FP8, want 14", mode, held)
				}
				r := heldRunner(t, be, caps, l, compile.Options{Mode: mode, Caps: &caps}, true)
				got, err := r.NewState().Prefill(prompts, 1)
				if err != nil {
					t.Fatal(err)
				}
				r.Close()
				l.Close()
				checkLogits(t, mode.String(), got, want, 1e-5)
			}
		})
	}
}

// heldRunner makes a Runner over l on the cpu backend be (capabilities
// caps) with opts, and checks that it holds exactly the bytes
// lm.Loaded.HeldBytes estimates and, where smaller, fewer than decoded
// at load would take.
func heldRunner(t *testing.T, be backends.Backend, caps tpu.Capabilities, l *lm.Loaded, opts compile.Options, smaller bool) *compile.Runner {
	t.Helper()
	r, err := compile.NewRunner(be, l, opts)
	if err != nil {
		t.Fatal(err)
	}
	est, decoded := l.HeldBytes(compile.HoldingOf(caps, opts)), l.HeldBytes(compile.HoldingOf(tpu.Capabilities{NarrowWeights: true}, opts))
	if got := r.WeightBytes(); got != est || smaller && est >= decoded {
		t.Errorf("%v (quantize %q): holds %d bytes, HeldBytes estimates %d held and %d decoded", opts.Mode, opts.Quantize, got, est, decoded)
	}
	return r
}

// checkNearBF16 fails t where a row of got, logits in bf16 compute, is
// further from want (f32 compute) than 1.25 times, plus 0.005, the row of
// bf16, the same model's bf16 compute from f32 weights: a weight held
// compact in bf16 compute costs no more than bf16 compute itself.
func checkNearBF16(t *testing.T, label string, got, want, bf16 [][]float32) {
	t.Helper()
	for b := range want {
		w := make([]float64, len(want[b]))
		for i, v := range want[b] {
			w[i] = float64(v)
		}
		if e, e0 := refcheck.RelErr(got[b], w), refcheck.RelErr(bf16[b], w); e > 1.25*e0+0.005 {
			t.Errorf("%s row %d: relative error %.3g against f32 compute, bf16 compute of the f32 weights %.3g", label, b, e, e0)
		}
	}
}

// checkLogits fails t where a row of got is further than bound
// (relative) from want's.
func checkLogits(t *testing.T, label string, got, want [][]float32, bound float64) {
	t.Helper()
	for b := range want {
		w := make([]float64, len(want[b]))
		for i, v := range want[b] {
			w[i] = float64(v)
		}
		if e := refcheck.RelErr(got[b], w); e > bound {
			t.Errorf("%s row %d: relative error %.3g against the dequantised f32 checkpoint", label, b, e)
		}
	}
}

// An NVFP4 matrix with a NaN scale byte (E4M3 0x7f) is not held as
// stored: the load goes on, decodes it and reports its non-finite values,
// as an FP8 weight's NaN bytes are; the other matrices stay held.
func TestNVFP4NaNScale(t *testing.T) {
	qDir, _ := ctCheckpoints(t, ctFormat{format: "nvfp4-pack-quantized", bits: 4, sym: true, strategy: "group", hidden: 64, inter: 96, f32Ref: true, nanScale: true})
	be := refcheck.CPUBackend(t)
	caps := tpu.CapabilitiesOf(be)
	l, err := lmckpt.Load(qDir)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var bad []string
	l.OnNonFinite = func(nf safetensors.NonFiniteTensor) { bad = append(bad, nf.Name) }
	r, err := compile.NewRunner(be, l, compile.Options{Caps: &caps})
	if err != nil {
		t.Fatalf("NewRunner: %v, want the NaN-scaled matrix decoded", err)
	}
	defer r.Close()
	const name = "model.layers.0.self_attn.q_proj.weight"
	if !slices.Equal(bad, []string{name}) {
		t.Errorf("non-finite tensors reported: %v, want [%s]", bad, name)
	}
	var w lm.WeightSpec
	for _, x := range l.Weights() {
		if x.Name == name {
			w = x
		}
	}
	h := compile.HoldingOf(caps, compile.Options{})
	want := l.HeldBytes(h) - lm.NVFP4Bytes(w) + h.HeldBytes(w, l.StoredDType(name))
	if got := r.WeightBytes(); got != want {
		t.Errorf("holds %d bytes, want %d: the other 13 matrices as NVFP4, %s decoded", got, want, name)
	}
}
