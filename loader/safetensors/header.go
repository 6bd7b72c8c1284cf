// Package safetensors reads and writes the safetensors checkpoint format
// (https://github.com/huggingface/safetensors): an 8-byte little-endian header
// length, a JSON header mapping tensor names to dtype, shape and data offsets
// (plus an optional "__metadata__" string map), then the raw little-endian
// tensor bytes.
//
// Files are memory-mapped, so opening a checkpoint costs a header read and
// tensor bytes are only touched when a model converts them. Headers are
// validated strictly before any tensor is used: unknown dtypes, shape/size
// mismatches, offsets outside the data section and overlapping tensors are
// errors that name the file and the tensor. Pickle checkpoints (.bin, .pt,
// .ckpt) are never loaded.
package safetensors

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
	"slices"
	"strconv"
	"strings"
)

// MaxHeaderSize is the largest JSON header accepted (100 MB, the limit the
// reference implementation uses).
const MaxHeaderSize = 100 << 20

// TensorInfo describes one tensor of a safetensors file.
type TensorInfo struct {
	Name  string `json:"name"`
	DType DType  `json:"dtype"`
	Shape []int  `json:"shape"`
	// Begin and End are byte offsets relative to the start of the data
	// section (the first byte after the header).
	Begin int64 `json:"begin"`
	End   int64 `json:"end"`
	// File is the path of the file holding the tensor.
	File string `json:"file,omitempty"`
}

// NumElements returns the product of the shape (1 for a scalar).
func (t TensorInfo) NumElements() int64 {
	n := int64(1)
	for _, d := range t.Shape {
		n *= int64(d)
	}
	return n
}

// NumBytes returns End-Begin.
func (t TensorInfo) NumBytes() int64 { return t.End - t.Begin }

// Header is a parsed and validated safetensors header.
type Header struct {
	// Tensors in file order (ascending Begin).
	Tensors  []TensorInfo
	Metadata map[string]string
	// DataOffset is where the data section starts in the file (8 + header length).
	DataOffset int64
	// DataSize is the length of the data section the header was validated against.
	DataSize int64
}

// ReadHeaderLength reads the 8-byte prefix and checks it against
// MaxHeaderSize and the file size (pass fileSize < 0 when unknown).
func ReadHeaderLength(prefix []byte, fileSize int64) (int64, error) {
	if len(prefix) < 8 {
		return 0, fmt.Errorf("file too short for a safetensors header length: %d bytes, want at least 8", len(prefix))
	}
	n := binary.LittleEndian.Uint64(prefix)
	if n > MaxHeaderSize {
		return 0, fmt.Errorf("header length %d exceeds the %d-byte limit (not a safetensors file?)", n, MaxHeaderSize)
	}
	if n < 2 {
		return 0, fmt.Errorf("header length %d is too small for a JSON object", n)
	}
	if fileSize >= 0 && int64(n) > fileSize-8 {
		return 0, fmt.Errorf("header length %d exceeds the file size %d", n, fileSize)
	}
	return int64(n), nil
}

type rawEntry struct {
	DType       string        `json:"dtype"`
	Shape       []json.Number `json:"shape"`
	DataOffsets []json.Number `json:"data_offsets"`
}

// ParseHeader parses and validates the JSON header bytes. dataSize is the
// size of the data section (file size - 8 - header length); every tensor must
// lie inside it and no two tensors may overlap.
func ParseHeader(headerJSON []byte, dataSize int64) (*Header, error) {
	// The JSON may be padded with trailing spaces for alignment.
	headerJSON = bytes.TrimRight(headerJSON, " \x00")
	if h, ok := parseHeaderFast(headerJSON, dataSize); ok {
		return h, nil
	}
	return parseHeaderStrict(headerJSON, dataSize)
}

// parseHeaderStrict validates entry by entry and names the first problem.
func parseHeaderStrict(headerJSON []byte, dataSize int64) (*Header, error) {
	var raw map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(headerJSON))
	dec.UseNumber()
	if err := dec.Decode(&raw); err != nil {
		return nil, fmt.Errorf("header is not a JSON object: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("header has trailing data after the JSON object")
	}
	h := &Header{DataSize: dataSize}
	for name, msg := range raw {
		if name == "__metadata__" {
			if err := json.Unmarshal(msg, &h.Metadata); err != nil {
				return nil, fmt.Errorf("__metadata__ must be a map of strings to strings: %w", err)
			}
			continue
		}
		info, err := parseEntry(name, msg, dataSize)
		if err != nil {
			return nil, err
		}
		h.Tensors = append(h.Tensors, info)
	}
	if err := sortAndCheckOverlap(h); err != nil {
		return nil, err
	}
	return h, nil
}

// sortAndCheckOverlap orders the tensors by offset and rejects overlaps.
func sortAndCheckOverlap(h *Header) error {
	slices.SortFunc(h.Tensors, func(a, b TensorInfo) int {
		if c := cmp.Compare(a.Begin, b.Begin); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	// Sorted by Begin, a tensor overlaps an earlier one exactly when it
	// starts before the furthest end seen so far. Empty tensors occupy no
	// bytes and cannot overlap anything.
	var last *TensorInfo
	for i := range h.Tensors {
		cur := &h.Tensors[i]
		if cur.End == cur.Begin {
			continue
		}
		if last != nil && cur.Begin < last.End {
			return fmt.Errorf("tensor %q (bytes %d-%d) overlaps tensor %q (bytes %d-%d)",
				cur.Name, cur.Begin, cur.End, last.Name, last.Begin, last.End)
		}
		if last == nil || cur.End > last.End {
			last = cur
		}
	}
	return nil
}

func parseEntry(name string, msg json.RawMessage, dataSize int64) (TensorInfo, error) {
	var e rawEntry
	dec := json.NewDecoder(bytes.NewReader(msg))
	dec.UseNumber()
	if err := dec.Decode(&e); err != nil {
		return TensorInfo{}, fmt.Errorf("tensor %q: invalid entry: %w", name, err)
	}
	info := TensorInfo{Name: name, DType: DType(e.DType)}
	if !info.DType.Valid() {
		return info, fmt.Errorf("tensor %q: unsupported dtype %q (want one of F64, F32, F16, BF16, F8_E4M3, F8_E5M2, I64, I32, I16, I8, U8, BOOL)", name, e.DType)
	}
	if e.Shape == nil {
		return info, fmt.Errorf("tensor %q: missing shape", name)
	}
	// Element count with overflow checks: a hostile header must not make us
	// compute a wrapped-around size.
	elems := uint64(1)
	for _, dn := range e.Shape {
		d, err := strconv.ParseInt(string(dn), 10, 64)
		if err != nil || d < 0 || d > math.MaxInt32*int64(1<<20) {
			return info, fmt.Errorf("tensor %q: invalid dimension %s in shape", name, dn)
		}
		info.Shape = append(info.Shape, int(d))
		hi, lo := bits.Mul64(elems, uint64(d))
		if hi != 0 || lo > math.MaxInt64 {
			return info, fmt.Errorf("tensor %q: shape %v overflows", name, info.Shape)
		}
		elems = lo
	}
	if len(e.DataOffsets) != 2 {
		return info, fmt.Errorf("tensor %q: data_offsets must have 2 entries, got %d", name, len(e.DataOffsets))
	}
	var offs [2]int64
	for i, on := range e.DataOffsets {
		v, err := strconv.ParseInt(string(on), 10, 64)
		if err != nil || v < 0 {
			return info, fmt.Errorf("tensor %q: invalid data offset %s", name, on)
		}
		offs[i] = v
	}
	info.Begin, info.End = offs[0], offs[1]
	if info.End < info.Begin {
		return info, fmt.Errorf("tensor %q: data_offsets [%d, %d] end before they begin", name, info.Begin, info.End)
	}
	if info.End > dataSize {
		return info, fmt.Errorf("tensor %q: data_offsets [%d, %d] run past the data section (%d bytes)", name, info.Begin, info.End, dataSize)
	}
	hi, want := bits.Mul64(elems, uint64(info.DType.Size()))
	if hi != 0 || want != uint64(info.End-info.Begin) {
		return info, fmt.Errorf("tensor %q: %s shape %v needs %d bytes but data_offsets span %d", name, info.DType, info.Shape, want, info.End-info.Begin)
	}
	return info, nil
}
