package llama_test

import (
	"encoding/binary"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"

	"github.com/tputool/tputool/compile"
	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/loader/safetensors"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
	"github.com/tputool/tputool/pipeline/testkit/refcheck"
	"github.com/tputool/tputool/tpu"
)

// fp8Value decodes an OCP FP8 E4M3 byte the long way: sign, 4 exponent
// bits (bias 7), 3 mantissa bits, subnormals at exponent 0.
func fp8Value(b byte) float64 {
	sign := 1.0
	if b&0x80 != 0 {
		sign = -1
	}
	e, m := int(b>>3)&15, float64(b&7)
	if e == 0 {
		return sign * m / 8 * math.Ldexp(1, -6)
	}
	return sign * (1 + m/8) * math.Ldexp(1, e-7)
}

// fp8Checkpoints writes a tiny Llama twice: with its projections in
// block-wise FP8 (random E4M3 codes and one f32 scale per 16×8 block,
// quant_method fp8; the embedding and head plain, as
// modules_to_not_convert leaves them), and in f32 with those projections
// dequantised by the test (code · scale_inv of its block, as transformers'
// FP8 dequantisation does). shift moves every scale one block along the
// columns in the FP8 checkpoint only (a mutation).
func fp8Checkpoints(t *testing.T, shift bool) (fp8Dir, f32Dir string) {
	t.Helper()
	return fp8CheckpointsOf(t, fp8Layout{shift: shift, block: [2]int{16, 8}})
}

// fp8Layout is how fp8CheckpointsOf writes the FP8 checkpoint.
type fp8Layout struct {
	shift bool
	block [2]int // weight_block_size
	// noBlockKey leaves weight_block_size out of the config (block
	// must then be transformers' default, 128×128).
	noBlockKey bool
	// perTensor: weight_block_size null, one scale a matrix stored as a
	// scalar (shape []), as transformers' FP8Linear registers it.
	perTensor bool
	// static: activation_scheme "static", with a scale for each
	// projection's input, PREFIX.input_scale [1] (vLLM's name) for the
	// attention's, PREFIX.activation_scale [] (transformers') for the MLP's.
	static bool
}

// fp8CheckpointsOf is fp8Checkpoints in layout l.
func fp8CheckpointsOf(t *testing.T, l fp8Layout) (fp8Dir, f32Dir string) {
	t.Helper()
	shift := l.shift
	tiny := lmckpt.LlamaShape(32, 2, 4, 48, 64)
	tiny.Seed = 8
	var plain, fp8 []safetensors.Tensor
	code := uint64(12345)
	next := func() byte {
		for {
			code = code*6364136223846793005 + 1442695040888963407
			b := byte(code >> 56)
			if b&0x7f != 0x7f { // not NaN
				return b
			}
		}
	}
	b0, b1 := l.block[0], l.block[1]
	for _, w := range tiny.Tensors() {
		n := 1
		for _, d := range w.Shape {
			n *= d
		}
		if len(w.Shape) != 2 || w.Kind != "linear" || strings.Contains(w.Name, "lm_head") {
			v := make([]float32, n)
			for i := range v {
				v[i] = 1
				if w.Kind == "embed" || w.Kind == "linear" {
					v[i] = float32(fp8Value(next())) / 448
				}
			}
			st, err := safetensors.Float32Tensor(w.Name, safetensors.F32, w.Shape, v)
			if err != nil {
				t.Fatal(err)
			}
			plain, fp8 = append(plain, st), append(fp8, st)
			continue
		}
		rows, cols := w.Shape[0], w.Shape[1]
		if l.perTensor {
			b0, b1 = rows, cols
		}
		sr, sc := (rows+b0-1)/b0, (cols+b1-1)/b1
		codes := make([]byte, n)
		for i := range codes {
			codes[i] = next()
		}
		scales := make([]float32, sr*sc)
		for i := range scales {
			scales[i] = float32(1+(i+len(fp8))%5) / (448 * float32(math.Sqrt(float64(cols))))
		}
		deq := make([]float32, n)
		for i := 0; i < rows; i++ {
			for j := 0; j < cols; j++ {
				deq[i*cols+j] = float32(fp8Value(codes[i*cols+j])) * scales[(i/b0)*sc+j/b1]
			}
		}
		st, err := safetensors.Float32Tensor(w.Name, safetensors.F32, w.Shape, deq)
		if err != nil {
			t.Fatal(err)
		}
		plain = append(plain, st)
		if shift && l.perTensor {
			scales[0] *= 2
		} else if shift {
			scales = append(scales[1:], scales[0])
		}
		scaleShape := []int{sr, sc}
		if l.perTensor {
			scaleShape = []int{}
		}
		sb := make([]byte, 4*len(scales))
		for i, s := range scales {
			binary.LittleEndian.PutUint32(sb[4*i:], math.Float32bits(s))
		}
		fp8 = append(fp8,
			safetensors.Tensor{Name: w.Name, DType: safetensors.F8E4M3, Shape: w.Shape, Data: codes},
			safetensors.Tensor{Name: w.Name + "_scale_inv", DType: safetensors.F32, Shape: scaleShape, Data: sb})
		if prefix := strings.TrimSuffix(w.Name, ".weight"); l.static && strings.Contains(prefix, "self_attn") {
			addF32(t, &fp8, prefix+".input_scale", safetensors.F32, []int{1}, []float32{0.02})
		} else if l.static {
			addF32(t, &fp8, prefix+".activation_scale", safetensors.F32, []int{}, []float32{0.02})
		}
	}
	cfg := tiny.ConfigJSON()
	f32Dir = t.TempDir()
	if err := lmckpt.WriteCheckpoint(f32Dir, cfg, plain); err != nil {
		t.Fatal(err)
	}
	qc := map[string]any{"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
		"weight_block_size": []int{b0, b1}, "modules_to_not_convert": []string{"lm_head"}}
	if l.noBlockKey {
		delete(qc, "weight_block_size")
	}
	if l.perTensor {
		qc["weight_block_size"] = nil
	}
	if l.static {
		qc["activation_scheme"] = "static"
	}
	cfg["quantization_config"] = qc
	fp8Dir = t.TempDir()
	if err := lmckpt.WriteCheckpoint(fp8Dir, cfg, fp8); err != nil {
		t.Fatal(err)
	}
	return fp8Dir, f32Dir
}

// TestFP8Checkpoint: a block-wise FP8 checkpoint (quant_method fp8)
// loads, its projections decoded to the compute dtype at load, and gives
// exactly the logits of the f32 checkpoint holding the dequantised
// weights, compiled and eager; with every scale moved one block, it does
// not.
func TestFP8Checkpoint(t *testing.T) {
	prompts := [][]int{{1, 7, 21, 33, 4}, {1, 9, 14, 60, 3, 5, 41, 27}}
	run := func(dir string, mode compile.Mode) [][]float32 { return prefillLogits(t, dir, mode, prompts) }
	fp8Dir, f32Dir := fp8Checkpoints(t, false)
	for _, mode := range []compile.Mode{compile.Compiled, compile.Eager} {
		got, want := run(fp8Dir, mode), run(f32Dir, mode)
		for b := range want {
			for i := range want[b] {
				if got[b][i] != want[b][i] {
					t.Fatalf("%v row %d logit %d: %v from FP8, %v from the dequantised f32", mode, b, i, got[b][i], want[b][i])
				}
			}
		}
	}
	shifted, _ := fp8Checkpoints(t, true)
	doubled, _ := fp8CheckpointsOf(t, fp8Layout{perTensor: true, shift: true})
	for _, dir := range []string{shifted, doubled} {
		got, want := run(dir, compile.Compiled), run(f32Dir, compile.Compiled)
		same := true
		for i := range want[0] {
			same = same && got[0][i] == want[0][i]
		}
		if same {
			t.Error("scales moved by one block, or one per-tensor scale doubled, give the same logits: the test does not see the layout")
		}
	}
}

// TestFP8Layouts: an fp8 config without weight_block_size reads blocks
// of 128×128 (transformers' FineGrainedFP8Config default), one with
// weight_block_size null a scalar scale a matrix (Ministral 3's
// releases), and one with
// activation_scheme "static" loads past its activation scales (not
// applied: activations stay float), each giving exactly the logits of
// the f32 checkpoint of the dequantised weights; the static scales in a
// checkpoint whose config says "dynamic" are unused tensors the load
// names.
func TestFP8Layouts(t *testing.T) {
	prompts := [][]int{{1, 7, 21, 33, 4}, {1, 9, 14, 60, 3, 5, 41, 27}}
	for name, l := range map[string]fp8Layout{
		"default-block": {block: [2]int{128, 128}, noBlockKey: true},
		"static":        {block: [2]int{16, 8}, static: true},
		"per-tensor":    {perTensor: true, static: true},
	} {
		t.Run(name, func(t *testing.T) {
			fp8Dir, f32Dir := fp8CheckpointsOf(t, l)
			got, want := prefillLogits(t, fp8Dir, compile.Compiled, prompts), prefillLogits(t, f32Dir, compile.Compiled, prompts)
			for b := range want {
				for i := range want[b] {
					if got[b][i] != want[b][i] {
						t.Fatalf("row %d logit %d: %v from FP8, %v from the dequantised f32", b, i, got[b][i], want[b][i])
					}
				}
			}
		})
	}
	dir, _ := fp8CheckpointsOf(t, fp8Layout{block: [2]int{16, 8}, static: true})
	editConfig(t, dir, func(cfg map[string]any) {
		cfg["quantization_config"].(map[string]any)["activation_scheme"] = "dynamic"
	})
	l, err := lmckpt.Load(dir)
	if err == nil {
		l.Close()
	}
	if err == nil || !strings.Contains(err.Error(), "unused tensors") || !strings.Contains(err.Error(), "model.layers.0.self_attn.q_proj.input_scale") {
		t.Errorf("static scales under activation_scheme dynamic: got %v, want an error naming the unused input_scale", err)
	}
}

// TestQuantizationMethods: a method tputool does not read is an
// unsupported error naming it; an FP8 block size that is not two
// positive sizes (nor null) too.
func TestQuantizationMethods(t *testing.T) {
	for _, c := range []struct {
		q    map[string]any
		want string
	}{
		{map[string]any{"quant_method": "bitsandbytes", "load_in_4bit": true}, `quant_method "bitsandbytes" is not supported`},
		{map[string]any{"quant_method": "hqq", "bits": 4}, `quant_method "hqq" is not supported`},
		{map[string]any{"quant_method": "fp8", "weight_block_size": []int{128}}, "want two positive block sizes"},
		{map[string]any{"quant_method": "fp8", "weight_block_size": []int{0, 128}}, "want two positive block sizes"},
		{map[string]any{"quant_method": "mxfp4"}, "quant_method mxfp4 is read for the architectures that declare MXFP4 weights"},
	} {
		tiny := lmckpt.LlamaShape(32, 1, 4, 48, 64)
		cfg := tiny.ConfigJSON()
		cfg["quantization_config"] = c.q
		dir := t.TempDir()
		if err := lmckpt.WriteCheckpoint(dir, cfg, nil); err != nil {
			t.Fatal(err)
		}
		_, err := lmckpt.Load(dir)
		if err == nil || !errors.Is(err, errs.ErrUnsupported) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: got %v, want an unsupported error containing %q", c.q, err, c.want)
		}
	}
}

// TestFP8Held: on the cpu backend (tpu.Capabilities.FP8) the FP8
// projections are held as stored, a byte a weight and a scale a block
// (or a matrix, per tensor),
// exactly what lm.Loaded.HeldBytes estimates and less than decoded, and
// the logits match the f32 checkpoint of the dequantised weights up to
// the order of f32 sums, compiled and eager. In bf16 compute they are
// held as stored too, and the logits are as near the f32 ones as bf16
// compute of the f32 checkpoint's (checkNearBF16).
func TestFP8Held(t *testing.T) {
	for name, lay := range map[string]fp8Layout{"blocks": {block: [2]int{16, 8}}, "per-tensor": {perTensor: true}} {
		t.Run(name, func(t *testing.T) { testFP8Held(t, lay) })
	}
}

func testFP8Held(t *testing.T, lay fp8Layout) {
	prompts := [][]int{{1, 7, 21, 33, 4}, {1, 9, 14, 60, 3, 5, 41, 27}}
	fp8Dir, f32Dir := fp8CheckpointsOf(t, lay)
	be := refcheck.CPUBackend(t)
	caps := tpu.CapabilitiesOf(be)
	for _, mode := range []compile.Mode{compile.Compiled, compile.Eager} {
		want := prefillLogits(t, f32Dir, mode, prompts)
		l, err := lmckpt.Load(fp8Dir)
		if err != nil {
			t.Fatal(err)
		}
		r := heldRunner(t, be, caps, l, compile.Options{Mode: mode, Caps: &caps}, true)
		got, err := r.NewState().Prefill(prompts, 1)
		if err != nil {
			t.Fatal(err)
		}
		r.Close()
		checkLogits(t, mode.String(), got, want, 1e-5)
		// In bf16 compute too, whose products read the FP8 weights as
		// held (tpu/cpu's wide16): as near the f32 logits as bf16
		// compute of the f32 checkpoint.
		bf := compile.Options{Mode: mode, DType: dtypes.BFloat16, Caps: &caps}
		if !compile.HoldingOf(caps, bf).FP8 {
			t.Errorf("%v: FP8 not held as stored in bf16 compute", mode)
		}
		r = heldRunner(t, be, caps, l, bf, true)
		got, err = r.NewState().Prefill(prompts, 1)
		if err != nil {
			t.Fatal(err)
		}
		r.Close()
		l.Close()
		checkNearBF16(t, mode.String()+" bf16", got, want, prefillLogitsWith(t, f32Dir, bf, prompts))
	}
}

// TestFP8PerChannelRefused: AutoFP8's layout also says quant_method fp8
// with no weight_block_size, but stores PREFIX.weight_scale (per tensor
// or per channel): an unsupported error that says so and names a scale,
// not the default blocks' missing scales.
func TestFP8PerChannelRefused(t *testing.T) {
	src, dir := t.TempDir(), t.TempDir()
	if err := lmckpt.LlamaShape(32, 1, 4, 48, 64).Write(src); err != nil {
		t.Fatal(err)
	}
	if err := lmckpt.WriteFP8Copy(src, dir, lmckpt.FP8Options{FBGEMM: true}); err != nil {
		t.Fatal(err)
	}
	editConfig(t, dir, func(cfg map[string]any) {
		cfg["quantization_config"] = map[string]any{"quant_method": "fp8", "activation_scheme": "dynamic"}
	})
	l, err := lmckpt.Load(dir)
	if err == nil {
		l.Close()
	}
	if err == nil || !errors.Is(err, errs.ErrUnsupported) || !strings.Contains(err.Error(), "AutoFP8's layout") || !strings.Contains(err.Error(), ".weight_scale") {
		t.Errorf("got %v, want an unsupported error naming AutoFP8's layout and a weight_scale", err)
	}
}
