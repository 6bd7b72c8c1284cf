package safetensors

import (
	"context"
	"fmt"
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

// openRegular opens a weight file, refusing pickle files and anything
// but a regular file, and returns its size.
func openRegular(path string) (*os.File, int64, error) {
	if err := RejectPickle(path); err != nil {
		return nil, 0, err
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, err
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, 0, fmt.Errorf("%s: not a regular file", path)
	}
	return f, st.Size(), nil
}

// OpenFile memory-maps a safetensors file and validates its header.
func OpenFile(path string) (*File, error) {
	f, size, err := openRegular(path)
	if err != nil {
		return nil, err
	}
	h, _, err := ReadHeaderRange(context.Background(), fileRanges{f, size}, path)
	if err != nil {
		f.Close()
		return nil, err
	}
	sf := &File{Path: path, Header: h, f: f, byName: make(map[string]int, len(h.Tensors))}
	for i := range h.Tensors {
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
	return sf.raw(info), nil
}

// raw is the bytes info places in the mapping.
func (sf *File) raw(info TensorInfo) []byte {
	off := sf.Header.DataOffset
	return sf.data[off+info.Begin : off+info.End : off+info.End]
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
