package safetensors_test

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/tputool/tputool/loader/safetensors"
)

// write1GB writes a ~1 GiB checkpoint shaped like a 0.5B-parameter bf16
// model (24 layers of 7 matrices plus embeddings), streaming the data so the
// benchmark itself does not need 1 GiB of heap.
func write1GB(b *testing.B) string {
	b.Helper()
	p := filepath.Join(b.TempDir(), "model.safetensors")
	type entry struct {
		DType   string  `json:"dtype"`
		Shape   []int   `json:"shape"`
		Offsets []int64 `json:"data_offsets"`
	}
	header := map[string]entry{}
	var off int64
	add := func(name string, shape ...int) {
		n := int64(2)
		for _, d := range shape {
			n *= int64(d)
		}
		header[name] = entry{"BF16", shape, []int64{off, off + n}}
		off += n
	}
	add("model.embed_tokens.weight", 151936, 1024)
	for i := 0; i < 24; i++ {
		p := fmt.Sprintf("model.layers.%d.", i)
		add(p+"self_attn.q_proj.weight", 2048, 1024)
		add(p+"self_attn.k_proj.weight", 1024, 1024)
		add(p+"self_attn.v_proj.weight", 1024, 1024)
		add(p+"self_attn.o_proj.weight", 1024, 2048)
		add(p+"mlp.gate_proj.weight", 3072, 1024)
		add(p+"mlp.up_proj.weight", 3072, 1024)
		add(p+"mlp.down_proj.weight", 1024, 3072)
	}
	hj, _ := json.Marshal(header)
	for len(hj)%8 != 0 {
		hj = append(hj, ' ')
	}
	f, err := os.Create(p)
	if err != nil {
		b.Fatal(err)
	}
	var prefix [8]byte
	binary.LittleEndian.PutUint64(prefix[:], uint64(len(hj)))
	f.Write(prefix[:])
	f.Write(hj)
	chunk := make([]byte, 8<<20)
	for i := range chunk {
		chunk[i] = byte(i * 31)
	}
	for left := off; left > 0; {
		n := min(left, int64(len(chunk)))
		if _, err := f.Write(chunk[:n]); err != nil {
			b.Fatal(err)
		}
		left -= n
	}
	if err := f.Close(); err != nil {
		b.Fatal(err)
	}
	return p
}

// BenchmarkOpen1GB measures opening (header parse + mmap) a 1 GiB file:
// independent of its size, since no tensor byte is read.
//
//	go test ./loader/safetensors -run '^$' -bench 1GB -benchtime 20x
func BenchmarkOpen1GB(b *testing.B) {
	p := write1GB(b)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		f, err := safetensors.OpenFile(p)
		if err != nil {
			b.Fatal(err)
		}
		f.Close()
	}
}

// BenchmarkRead1GB reads every byte of every tensor of a 1 GiB file (from
// the page cache after the first pass), reported as MB/s:
//
//   - mmap: OpenFile, then the zero-copy Raw views, as the loader does;
//   - readfile: os.ReadFile of the whole file, the copying baseline.
func BenchmarkRead1GB(b *testing.B) {
	p := write1GB(b)
	st, _ := os.Stat(p)
	b.Run("mmap", func(b *testing.B) {
		b.SetBytes(st.Size())
		var sink uint64
		for i := 0; i < b.N; i++ {
			f, err := safetensors.OpenFile(p)
			if err != nil {
				b.Fatal(err)
			}
			for _, t := range f.Header.Tensors {
				raw, err := f.Raw(t.Name)
				if err != nil {
					b.Fatal(err)
				}
				sink ^= xorWords(raw)
			}
			f.Close()
		}
		_ = sink
	})
	b.Run("readfile", func(b *testing.B) {
		b.SetBytes(st.Size())
		var sink uint64
		for i := 0; i < b.N; i++ {
			data, err := os.ReadFile(p)
			if err != nil {
				b.Fatal(err)
			}
			sink ^= xorWords(data)
		}
		_ = sink
	})
}

// xorWords reads every byte, 8 at a time.
func xorWords(b []byte) uint64 {
	var x uint64
	for len(b) >= 8 {
		x ^= binary.LittleEndian.Uint64(b)
		b = b[8:]
	}
	for _, c := range b {
		x ^= uint64(c)
	}
	return x
}

// BenchmarkConvert converts every weight of a 32 MiB-per-dtype checkpoint
// (F32 and BF16 tensors of 1M elements) through Checkpoint.Convert with
// the NaN/Inf check, into float32 (DecodeFloat32) and into bfloat16
// (DecodeBFloat16): the host side of lm.Loaded.Tensor and of the diffusion
// loader, reported as MB/s of checkpoint bytes.
//
//	go test ./loader/safetensors -run '^$' -bench Convert
func BenchmarkConvert(b *testing.B) {
	const n, count = 1 << 20, 8
	vals := make([]float32, n)
	for i := range vals {
		vals[i] = float32(i%1999)*1e-3 - 1
	}
	var ts []safetensors.Tensor
	for _, d := range []safetensors.DType{safetensors.F32, safetensors.BF16} {
		for k := 0; k < count; k++ {
			t, err := safetensors.Float32Tensor(fmt.Sprintf("%s.%d", d, k), d, []int{1024, n / 1024}, vals)
			if err != nil {
				b.Fatal(err)
			}
			ts = append(ts, t)
		}
	}
	p := filepath.Join(b.TempDir(), "model.safetensors")
	if err := safetensors.WriteFile(p, ts, nil); err != nil {
		b.Fatal(err)
	}
	c, err := safetensors.Open(p)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	f32 := make([]float32, n)
	bf16 := make([]uint16, n)
	for _, d := range []safetensors.DType{safetensors.F32, safetensors.BF16} {
		for _, out := range []string{"float32", "bfloat16"} {
			b.Run(fmt.Sprintf("%s-to-%s", d, out), func(b *testing.B) {
				b.SetBytes(int64(count * n * d.Size()))
				for b.Loop() {
					for k := 0; k < count; k++ {
						convert := func(at int, piece []byte) { safetensors.DecodeFloat32(f32[at:], d, piece) }
						if out == "bfloat16" {
							convert = func(at int, piece []byte) { safetensors.DecodeBFloat16(bf16[at:], d, piece) }
						}
						nf, err := c.Convert(fmt.Sprintf("%s.%d", d, k), true, convert)
						if err != nil || nf.Count != 0 {
							b.Fatal(err, nf)
						}
					}
				}
			})
		}
	}
}
