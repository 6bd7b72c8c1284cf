package safetensors

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"sort"

	"github.com/tputool/tputool/internal/atomicfile"
)

// Tensor is a tensor to write.
type Tensor struct {
	Name  string
	DType DType
	Shape []int
	Data  []byte // little-endian, len = product(Shape) * DType.Size()
}

// Float32Tensor builds a Tensor from float32 values stored as dtype d
// (F32, F16 or BF16).
func Float32Tensor(name string, d DType, shape []int, values []float32) (Tensor, error) {
	data, err := EncodeFloat32(d, values)
	if err != nil {
		return Tensor{}, fmt.Errorf("tensor %q: %w", name, err)
	}
	return Tensor{Name: name, DType: d, Shape: shape, Data: data}, nil
}

// Encode serialises tensors into safetensors bytes, in name order, with the
// header padded with spaces to an 8-byte boundary as the reference writer does.
func Encode(tensors []Tensor, metadata map[string]string) ([]byte, error) {
	sorted := append([]Tensor(nil), tensors...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	header := map[string]any{}
	if len(metadata) > 0 {
		header["__metadata__"] = metadata
	}
	var offset int64
	for _, t := range sorted {
		if !t.DType.Valid() {
			return nil, fmt.Errorf("tensor %q: unsupported dtype %q", t.Name, t.DType)
		}
		elems := int64(1)
		for _, d := range t.Shape {
			elems *= int64(d)
		}
		if want := elems * int64(t.DType.Size()); want != int64(len(t.Data)) {
			return nil, fmt.Errorf("tensor %q: shape %v of %s needs %d bytes, got %d", t.Name, t.Shape, t.DType, want, len(t.Data))
		}
		if _, dup := header[t.Name]; dup {
			return nil, fmt.Errorf("tensor %q given twice", t.Name)
		}
		shape := t.Shape
		if shape == nil {
			shape = []int{}
		}
		header[t.Name] = map[string]any{
			"dtype":        t.DType,
			"shape":        shape,
			"data_offsets": []int64{offset, offset + int64(len(t.Data))},
		}
		offset += int64(len(t.Data))
	}
	hjson, err := json.Marshal(header)
	if err != nil {
		return nil, err
	}
	for len(hjson)%8 != 0 {
		hjson = append(hjson, ' ')
	}
	out := make([]byte, 8, 8+int64(len(hjson))+offset)
	binary.LittleEndian.PutUint64(out, uint64(len(hjson)))
	out = append(out, hjson...)
	for _, t := range sorted {
		out = append(out, t.Data...)
	}
	return out, nil
}

// WriteFile writes tensors to path atomically (temp file + rename).
func WriteFile(path string, tensors []Tensor, metadata map[string]string) error {
	b, err := Encode(tensors, metadata)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return atomicfile.Write(path, b, 0o644)
}
