package safetensors

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"
)

// FuzzParseHeader feeds arbitrary header JSON and data sizes to the parser.
// The properties: no panic, and every accepted tensor lies inside the data
// section with a byte span that matches its dtype and shape.
func FuzzParseHeader(f *testing.F) {
	f.Add([]byte(`{"a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}}`), int64(16))
	f.Add([]byte(`{"__metadata__":{"format":"pt"},"b":{"dtype":"BF16","shape":[],"data_offsets":[0,2]}}`), int64(2))
	f.Add([]byte(`{"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]}}`), int64(4))
	f.Add([]byte(`{"a":{"dtype":"I8","shape":[1],"data_offsets":[0,1]},"b":{"dtype":"I8","shape":[1],"data_offsets":[0,1]}}`), int64(1))
	f.Add([]byte(`{}`), int64(0))
	f.Fuzz(func(t *testing.T, header []byte, dataSize int64) {
		if dataSize < 0 {
			dataSize = -dataSize
		}
		h, err := ParseHeader(header, dataSize)
		if err != nil {
			return
		}
		for _, ti := range h.Tensors {
			if ti.Begin < 0 || ti.End < ti.Begin || ti.End > dataSize {
				t.Fatalf("accepted out-of-range tensor %+v (data %d)", ti, dataSize)
			}
			if ti.NumElements()*int64(ti.DType.Size()) != ti.NumBytes() {
				t.Fatalf("accepted size mismatch %+v", ti)
			}
		}
	})
}

// FuzzOpenFile writes arbitrary bytes as a file and opens it: no panic, and
// every tensor of an accepted file can be read and converted.
func FuzzOpenFile(f *testing.F) {
	good, _ := Encode([]Tensor{{Name: "w", DType: F16, Shape: []int{3}, Data: make([]byte, 6)}}, nil)
	f.Add(good)
	f.Add(binary.LittleEndian.AppendUint64(nil, 1<<62))
	f.Add([]byte{})
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		p := filepath.Join(dir, "x.safetensors")
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Skip(err)
		}
		sf, err := OpenFile(p)
		if err != nil {
			return
		}
		defer sf.Close()
		for _, ti := range sf.Header.Tensors {
			raw, err := sf.Raw(ti.Name)
			if err != nil {
				t.Fatalf("Raw(%q): %v", ti.Name, err)
			}
			if _, err := ToFloat32(ti.DType, raw); err != nil {
				t.Fatalf("ToFloat32(%q): %v", ti.Name, err)
			}
		}
	})
}

// FuzzParseIndex checks that no accepted index names a shard outside the
// checkpoint directory.
func FuzzParseIndex(f *testing.F) {
	f.Add([]byte(`{"metadata":{"total_size":8},"weight_map":{"a":"model-00001-of-00002.safetensors"}}`))
	f.Add([]byte(`{"weight_map":{"a":"../x.safetensors"}}`))
	f.Add([]byte(`{"weight_map":{"a":"sub/../../x.safetensors"}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		idx, err := ParseIndex(b)
		if err != nil {
			return
		}
		for _, shard := range idx.Shards() {
			if !filepath.IsLocal(shard) || filepath.IsAbs(shard) {
				t.Fatalf("accepted escaping shard %q", shard)
			}
		}
	})
}
