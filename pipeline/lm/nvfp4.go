package lm

import (
	"fmt"
	"math"

	"github.com/tputool/tputool/loader/safetensors"
)

// NVFP4 weights held as compressed-tensors checkpoints store them
// (tpu/cpu/kernels/nvfp4.go, nn.DequantizeNVFP4): the packed E2M1 codes
// [out, in/2] and the E4M3 scale bytes [out, in/16] as stored, which
// index a table of 256 f32 entries, half the effective scale of each
// byte: its E4M3 value over the tensor's global scale, divided in f32 as
// compressed-tensors divides it, then halved (exact). 2·fp4 · half is
// then the checkpoint's W to the bit, at half a byte a weight and a
// sixteenth of scale.

// NVFP4Group is the number of input columns that share an NVFP4 scale.
const NVFP4Group = 16

// nvfp4Stored reports whether a compressed-tensors NVFP4 checkpoint
// stores matrix name (a model weight or an expert's part) whose input
// columns are whole blocks of Int4Block.
func (l *Loaded) nvfp4Stored(name string) bool {
	w, how := l.encoding(name)
	if how != "compressed" || len(w.Shape) != 2 || w.Shape[1]%Int4Block != 0 {
		return false
	}
	c := l.Model.Spec().Compressed.ForWeight(w.Name)
	return c != nil && c.Format == ctNVFP4 && c.Group == NVFP4Group
}

// nvfp4Part reports whether name is an expert's part (of a stack a
// checkpoint stores one matrix per expert) stored as NVFP4: such parts
// are held as grouped FP4 (Int4GroupsLayout.FP4), each expert's
// half-scales decoded, since each has its own global scale.
func (l *Loaded) nvfp4Part(name string) bool {
	l.index()
	if _, part := l.partOf[name]; !part {
		return false
	}
	return l.nvfp4Stored(name)
}

// fp4GroupsInto writes NVFP4 part name (nvfp4Part) as grouped FP4: its
// packed codes [out, in/2] as stored and half [out, in/16], half of each
// group's effective scale (its E4M3 scale over the global one, divided in
// f32 as compressed-tensors divides it), then releases the mapping's
// pages. A NaN scale is refused as NVFP4Into refuses one.
func (l *Loaded) fp4GroupsInto(name string, packed []byte, half []float32) error {
	w, _ := l.encoding(name)
	c := l.Model.Spec().Compressed.ForWeight(w.Name)
	out, in := w.Shape[0], w.Shape[1]
	if len(packed) != out*in/2 || len(half) != out*in/NVFP4Group {
		return fmt.Errorf("tensor %q: [%d, %d] as NVFP4 needs %d bytes and %d scales; destination holds %d and %d",
			name, out, in, out*in/2, out*in/NVFP4Group, len(packed), len(half))
	}
	raw, _, scales, err := l.compressedRead(w, c)
	if err != nil {
		return err
	}
	defer l.releaseSources(raw)
	p, _ := packedPrefix(w.Name)
	copy(packed, raw[p+ctPacked])
	for i, s := range scales {
		if math.IsNaN(float64(s)) {
			return fmt.Errorf("tensor %q: scale %d: %w", p+ctScale, i, errFP8NaN)
		}
		half[i] = s / 2
	}
	return nil
}

// StoredNVFP4 reports whether an executor may hold weight name as NVFP4
// as stored: a model matrix (not an expert stack or part) that a
// compressed-tensors nvfp4-pack-quantized checkpoint stores with F8_E4M3
// scales, its input columns whole blocks of Int4Block, and not a weight
// the embedding gathers rows of.
func (l *Loaded) StoredNVFP4(name string) bool {
	w, ok := l.spec(name)
	if !ok || !w.Matmul || l.gathered(name) || !l.nvfp4Stored(name) {
		return false
	}
	p, _ := packedPrefix(name)
	info, ok := l.ckpt.Info(p + ctScale)
	return ok && info.DType == safetensors.F8E4M3
}

// NVFP4Bytes is the memory an NVFP4 matrix takes as stored: half a byte
// a value, a byte of scale per 16, and its 1 KiB table.
func NVFP4Bytes(w WeightSpec) int64 {
	n := int64(elements(w.Shape))
	return n/2 + n/NVFP4Group + 4*256
}

// NVFP4Into copies weight name's (StoredNVFP4) packed codes [out, in/2]
// and scale bytes [out, in/16] as stored, releasing the mapping's pages
// as it goes, and writes half [256], half the effective scale of each
// scale byte. A scale byte that is NaN in E4M3 (0x7f, 0xff) is refused
// as FP8Into refuses NaN bytes (IsFP8NaN): the weight is then decoded,
// where its non-finite values are reported.
func (l *Loaded) NVFP4Into(name string, packed, codes []byte, half []float32) error {
	if !l.StoredNVFP4(name) {
		return fmt.Errorf("tensor %q: the checkpoint does not store it as NVFP4 with E4M3 scales", name)
	}
	w, _ := l.spec(name)
	n := int64(elements(w.Shape))
	if int64(len(packed)) != n/2 || int64(len(codes)) != n/NVFP4Group || len(half) != 256 {
		return fmt.Errorf("tensor %q: %d values need %d packed bytes, %d scale bytes and a table of 256, got %d, %d and %d",
			name, n, n/2, n/NVFP4Group, len(packed), len(codes), len(half))
	}
	p, _ := packedPrefix(name)
	raw, dtype, err := l.readSources([]packedTensor{{name: p + ctGlobal, shape: []int{1}}})
	if err != nil {
		return err
	}
	var global [1]float32
	safetensors.DecodeFloat32(global[:], dtype[p+ctGlobal], raw[p+ctGlobal])
	l.releaseSources(raw)
	if !(global[0] > 0) || math.IsInf(float64(global[0]), 0) {
		return fmt.Errorf("tensor %q: %v, want a positive finite global scale", p+ctGlobal, global[0])
	}
	if err := l.copyReleasing(p+ctScale, safetensors.F8E4M3, codes); err != nil {
		return err
	}
	if i := fp8NaNAt(codes); i >= 0 {
		return fmt.Errorf("tensor %q: scale %d (E4M3 byte %#02x): %w", p+ctScale, i, codes[i], errFP8NaN)
	}
	if err := l.copyReleasing(p+ctPacked, safetensors.U8, packed); err != nil {
		return err
	}
	for c := range half {
		half[c] = safetensors.F8E4M3ToFloat32(byte(c)) / global[0] / 2
	}
	return nil
}
