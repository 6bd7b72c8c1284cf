package cpu_test

import (
	"testing"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"

	"github.com/tputool/tputool/compile"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
	"github.com/tputool/tputool/tpu"
	"github.com/tputool/tputool/tpu/cpu"
)

// In bf16 compute a tiny Llama's projections, stored as block-wise FP8,
// GPTQ and AWQ 4-bit (groups of 32) or NVFP4, are held as stored, and
// every one of the 14 is multiplied as held: the prefill program's
// products over them are rewritten (cpu.Wide16Rewrites; eager runs one
// layer's program for both layers), compiled and eager, none left to dequantise the whole weight at every call (which
// gives the same logits, 35x to 3500x slower: the model tests cannot
// tell).
func TestHeldCheckpointsRewrittenInBF16(t *testing.T) {
	src := t.TempDir()
	if err := lmckpt.LlamaShape(64, 2, 4, 128, 256).Write(src); err != nil {
		t.Fatal(err)
	}
	be, err := backends.NewWithConfig(cpu.BackendName)
	if err != nil {
		t.Fatal(err)
	}
	defer be.Finalize()
	caps := tpu.CapabilitiesOf(be)
	for _, c := range []struct {
		name  string
		write func(dir string) error
	}{
		{"fp8", func(dir string) error { return lmckpt.WriteFP8Copy(src, dir, lmckpt.FP8Options{Block: 16}) }},
		{"gptq", func(dir string) error {
			return lmckpt.WriteInt4Copy(src, dir, lmckpt.Int4Options{Format: "gptq", Group: 32})
		}},
		{"awq", func(dir string) error {
			return lmckpt.WriteInt4Copy(src, dir, lmckpt.Int4Options{Format: "awq", Group: 32})
		}},
		{"nvfp4", func(dir string) error { return lmckpt.WriteInt4Copy(src, dir, lmckpt.Int4Options{Format: "nvfp4"}) }},
	} {
		dir := t.TempDir()
		if err := c.write(dir); err != nil {
			t.Fatal(err)
		}
		l, err := lmckpt.Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, mode := range []compile.Mode{compile.Compiled, compile.Eager} {
			opts := compile.Options{Mode: mode, DType: dtypes.BFloat16, Caps: &caps}
			if h := compile.HoldingOf(caps, opts); !h.FP8 || !h.Int4Groups || !h.NVFP4 {
				t.Fatalf("%s: bf16 compute holds FP8 %v, grouped int4 %v, NVFP4 %v: want all as stored", c.name, h.FP8, h.Int4Groups, h.NVFP4)
			}
			before := cpu.Wide16Rewrites()
			r, err := compile.NewRunner(be, l, opts)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := r.NewState().Prefill([][]int{{1, 7, 21, 33, 4}}, 1); err != nil {
				t.Fatal(err)
			}
			r.Close()
			want := int64(14)
			if mode == compile.Eager {
				want = 7 // one layer's program, run for both layers
			}
			if n := cpu.Wide16Rewrites() - before; n < want {
				t.Errorf("%s, %v: %d products read their weight as held in bf16, want %d", c.name, mode, n, want)
			}
		}
		l.Close()
	}
}
