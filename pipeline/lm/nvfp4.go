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
// as stored: a model matrix, or an expert's part held apart
// (Holding.ExpertsApart), that a compressed-tensors nvfp4-pack-quantized
// checkpoint stores with F8_E4M3 scales, its input columns whole blocks
// of Int4Block, and not a weight the embedding gathers rows of. (Expert
// stacks: StoredNVFP4Stack.)
func (l *Loaded) StoredNVFP4(name string) bool {
	w, ok := l.specOrPart(name)
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
	w, _ := l.specOrPart(name)
	return l.nvfp4Into(name, int64(elements(w.Shape)), packed, codes, half)
}

// nvfp4Into is NVFP4Into for a matrix or an expert's part of n values.
func (l *Loaded) nvfp4Into(name string, n int64, packed, codes []byte, half []float32) error {
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

// StoredNVFP4Stack reports whether an executor may hold expert stack name
// [E, out, in] as NVFP4 with a table per part, and with how many parts a
// matrix: a stack the checkpoint stores as one part per expert
// projection (WeightSpec.Parts, in expert order), every part NVFP4 with
// F8_E4M3 scales (each with its own global scale, hence its own table),
// each expert the same number T of parts of out/T rows (gate_up's gate
// and up: T = 2; down: T = 1).
func (l *Loaded) StoredNVFP4Stack(name string) (parts int, ok bool) {
	if t, ok := l.nvfp4Stacks[name]; ok {
		return t, t > 0
	}
	parts = l.storedNVFP4Stack(name)
	if l.nvfp4Stacks == nil {
		l.nvfp4Stacks = map[string]int{}
	}
	l.nvfp4Stacks[name] = parts
	return parts, parts > 0
}

func (l *Loaded) storedNVFP4Stack(name string) int {
	w, stack := l.assembledStack(name)
	if !stack || len(w.Parts)%w.Shape[0] != 0 || l.gathered(name) {
		return 0
	}
	parts := len(w.Parts) / w.Shape[0]
	out, in := w.Shape[1], w.Shape[2]
	if out%parts != 0 {
		return 0
	}
	for _, p := range w.Parts {
		if len(p.Shape) != 2 || p.Shape[0] != out/parts || p.Shape[1] != in || !l.nvfp4Part(p.Name) {
			return 0
		}
		pre, _ := packedPrefix(p.Name)
		if info, ok := l.ckpt.Info(pre + ctScale); !ok || info.DType != safetensors.F8E4M3 {
			return 0
		}
	}
	return parts
}

// NVFP4StackBytes is the memory an NVFP4 stack with a table per part
// takes as stored (StoredNVFP4Stack): NVFP4Bytes' with a table a part.
func NVFP4StackBytes(w WeightSpec, parts int) int64 {
	return NVFP4Bytes(w) + int64(w.Shape[0]*parts-1)*4*256
}

// NVFP4StackInto writes expert stack name (StoredNVFP4Stack) as its
// parts store it, one after the other: the packed codes [E, out, in/2],
// the scale bytes [E, out, in/16] and each part's table of half-scales
// [E, T, 256] (NVFP4Into's, from the part's own global scale), releasing
// the mapping's pages as it goes. A NaN scale byte is refused as
// NVFP4Into refuses one.
func (l *Loaded) NVFP4StackInto(name string, packed, codes []byte, halves []float32) error {
	parts, ok := l.StoredNVFP4Stack(name)
	if !ok {
		return fmt.Errorf("tensor %q: its parts are not all NVFP4 with E4M3 scales, the same number of equal parts an expert", name)
	}
	w, _ := l.spec(name)
	n := elements(w.Shape)
	if len(packed) != n/2 || len(codes) != n/NVFP4Group || len(halves) != len(w.Parts)*256 {
		return fmt.Errorf("tensor %q: %v as NVFP4 in %d parts an expert needs %d packed bytes, %d scale bytes and %d table entries; destination holds %d, %d and %d",
			name, w.Shape, parts, n/2, n/NVFP4Group, len(w.Parts)*256, len(packed), len(codes), len(halves))
	}
	at := 0 // the part's first value in the stack
	for i, p := range w.Parts {
		m := elements(p.Shape)
		if err := l.nvfp4Into(p.Name, int64(m), packed[at/2:(at+m)/2], codes[at/NVFP4Group:(at+m)/NVFP4Group], halves[i*256:(i+1)*256]); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		at += m
	}
	return nil
}
