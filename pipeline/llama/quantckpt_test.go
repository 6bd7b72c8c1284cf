package llama_test

import (
	"encoding/binary"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/tputool/tputool/compile"
	"github.com/tputool/tputool/loader/safetensors"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
	"github.com/tputool/tputool/pipeline/testkit/refcheck"
	"github.com/tputool/tputool/tpu"
)

// Helpers the quantized-checkpoint tests share (packed_test.go,
// compressed_test.go, fp8_test.go).

// lcg is a linear congruential generator from seed: next(n) draws from
// [0, n).
func lcg(seed uint64) func(n int) int {
	state := seed
	return func(n int) int {
		state = state*6364136223846793005 + 1442695040888963407
		return int(state>>33) % n
	}
}

// addF32 appends the tensor name of dtype d holding v to dst.
func addF32(t *testing.T, dst *[]safetensors.Tensor, name string, d safetensors.DType, shape []int, v []float32) {
	t.Helper()
	st, err := safetensors.Float32Tensor(name, d, shape, v)
	if err != nil {
		t.Fatal(err)
	}
	*dst = append(*dst, st)
}

// i32Tensor is an I32 tensor holding the words v, little-endian.
func i32Tensor(name string, shape []int, v []uint32) safetensors.Tensor {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], x)
	}
	return safetensors.Tensor{Name: name, DType: safetensors.I32, Shape: shape, Data: b}
}

// addTensors rewrites dir/model.safetensors with extra beside its tensors.
func addTensors(t *testing.T, dir string, extra ...safetensors.Tensor) {
	t.Helper()
	path := filepath.Join(dir, "model.safetensors")
	ck, err := safetensors.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	var ts []safetensors.Tensor
	for _, n := range ck.Names() {
		info, _ := ck.Info(n)
		raw, err := ck.Raw(n)
		if err != nil {
			t.Fatal(err)
		}
		ts = append(ts, safetensors.Tensor{Name: n, DType: info.DType, Shape: info.Shape, Data: append([]byte(nil), raw...)})
	}
	ck.Close()
	if err := safetensors.WriteFile(path, append(ts, extra...), map[string]string{"format": "pt"}); err != nil {
		t.Fatal(err)
	}
}

// editConfig rewrites dir's config.json with edit applied.
func editConfig(t *testing.T, dir string, edit func(cfg map[string]any)) {
	t.Helper()
	cfg, err := lmckpt.ReadConfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	edit(cfg)
	b, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// prefillLogits loads dir and returns the logits of prefilling prompts
// in mode on the cpu backend.
func prefillLogits(t *testing.T, dir string, mode compile.Mode, prompts [][]int) [][]float32 {
	t.Helper()
	return prefillLogitsWith(t, dir, compile.Options{Mode: mode}, prompts)
}

// decodedLogits is prefillLogits with the integer and FP8 weights of
// GPTQ, AWQ and compressed-tensors checkpoints decoded at load, as
// backends other than the CPU engine hold them (tpu.Capabilities'
// Int4Groups and FP8 off): the tests of the decoders compare those with
// the dequantised checkpoint's exactly.
func decodedLogits(t *testing.T, dir string, mode compile.Mode, prompts [][]int) [][]float32 {
	t.Helper()
	caps := tpu.CapabilitiesOf(refcheck.CPUBackend(t))
	caps.Int4Groups, caps.FP8, caps.NVFP4 = false, false, false
	return prefillLogitsWith(t, dir, compile.Options{Mode: mode, Caps: &caps}, prompts)
}

// prefillLogitsWith is prefillLogits under opts.
func prefillLogitsWith(t *testing.T, dir string, opts compile.Options, prompts [][]int) [][]float32 {
	t.Helper()
	l, err := lmckpt.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	r, err := compile.NewRunner(refcheck.CPUBackend(t), l, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	lg, err := r.NewState().Prefill(prompts, 1)
	if err != nil {
		t.Fatal(err)
	}
	return lg
}
