package safetensors

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	mmap "github.com/edsrzf/mmap-go"
)

// File is one memory-mapped safetensors file.
type File struct {
	Path   string
	Header *Header
	byName map[string]int
	f      *os.File
	data   mmap.MMap // whole file
}

// pickleExts are checkpoint formats that execute code when loaded.
var pickleExts = map[string]bool{".bin": true, ".pt": true, ".pth": true, ".ckpt": true, ".pkl": true}

// RejectPickle returns an error for pickle-based checkpoint files, which can
// run arbitrary code when loaded and are never read by tputool.
func RejectPickle(path string) error {
	if pickleExts[strings.ToLower(filepath.Ext(path))] {
		return fmt.Errorf("%s: pickle checkpoints (.bin/.pt/.ckpt) can run arbitrary code and are never loaded; use a safetensors version of the model (convert it with the safetensors 'convert' Space or `transformers` save_pretrained(safe_serialization=True))", path)
	}
	return nil
}

// OpenFile memory-maps a safetensors file and validates its header.
func OpenFile(path string) (*File, error) {
	if err := RejectPickle(path); err != nil {
		return nil, err
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("%s: not a regular file", path)
	}
	size := st.Size()
	var prefix [8]byte
	if _, err := io.ReadFull(f, prefix[:]); err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: reading header length: %w", path, err)
	}
	n, err := ReadHeaderLength(prefix[:], size)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	hjson := make([]byte, n)
	if _, err := io.ReadFull(f, hjson); err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: reading header: %w", path, err)
	}
	h, err := ParseHeader(hjson, size-8-n)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	h.DataOffset = 8 + n
	sf := &File{Path: path, Header: h, f: f, byName: make(map[string]int, len(h.Tensors))}
	for i := range h.Tensors {
		h.Tensors[i].File = path
		sf.byName[h.Tensors[i].Name] = i
	}
	if size > 0 {
		sf.data, err = mmap.Map(f, mmap.RDONLY, 0)
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("%s: mmap: %w", path, err)
		}
	}
	return sf, nil
}

// Info returns the tensor's description.
func (sf *File) Info(name string) (TensorInfo, bool) {
	i, ok := sf.byName[name]
	if !ok {
		return TensorInfo{}, false
	}
	return sf.Header.Tensors[i], true
}

// Raw returns the tensor's bytes as a zero-copy view of the mapping. The
// slice is valid until Close and must not be modified.
func (sf *File) Raw(name string) ([]byte, error) {
	info, ok := sf.Info(name)
	if !ok {
		return nil, fmt.Errorf("%s: no tensor %q", sf.Path, name)
	}
	off := sf.Header.DataOffset
	return sf.data[off+info.Begin : off+info.End : off+info.End], nil
}

// Close unmaps and closes the file.
func (sf *File) Close() error {
	var err error
	if sf.data != nil {
		err = sf.data.Unmap()
		sf.data = nil
	}
	if sf.f != nil {
		if cerr := sf.f.Close(); err == nil {
			err = cerr
		}
		sf.f = nil
	}
	return err
}
