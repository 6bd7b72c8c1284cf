package safetensors

import (
	"context"
	"fmt"
	"io"
	"os"
)

// RangeReader reads byte ranges of a file that need not be local; the Hub
// client's RemoteFile implements it with HTTP Range requests.
type RangeReader interface {
	// ReadRange returns n bytes at off (fewer only at the end of the
	// file) and the file's total size.
	ReadRange(ctx context.Context, off, n int64) (data []byte, total int64, err error)
}

// ReadHeaderRange reads and validates the header of a safetensors file
// through r with exactly two reads: the 8-byte length, then the JSON. No
// tensor data is transferred. name is used in errors and for the pickle
// check.
func ReadHeaderRange(ctx context.Context, r RangeReader, name string) (*Header, int64, error) {
	if err := RejectPickle(name); err != nil {
		return nil, 0, err
	}
	prefix, size, err := r.ReadRange(ctx, 0, 8)
	if err != nil {
		return nil, 0, fmt.Errorf("%s: reading header length: %w", name, err)
	}
	if size < 0 {
		return nil, 0, fmt.Errorf("%s: the server did not report the file size", name)
	}
	n, err := ReadHeaderLength(prefix, size)
	if err != nil {
		return nil, 0, fmt.Errorf("%s: %w", name, err)
	}
	hjson, _, err := r.ReadRange(ctx, 8, n)
	if err != nil {
		return nil, 0, fmt.Errorf("%s: reading header: %w", name, err)
	}
	if int64(len(hjson)) != n {
		return nil, 0, fmt.Errorf("%s: header is %d bytes, got %d", name, n, len(hjson))
	}
	h, err := ParseHeader(hjson, size-8-n)
	if err != nil {
		return nil, 0, fmt.Errorf("%s: %w", name, err)
	}
	h.DataOffset = 8 + n
	for i := range h.Tensors {
		h.Tensors[i].File = name
	}
	return h, size, nil
}

// ReadHeaderFile reads and validates only the header of a local file,
// without mapping it: the cheap path for `inspect`. It returns the header
// and the file size.
func ReadHeaderFile(path string) (*Header, int64, error) {
	f, size, err := openRegular(path)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	return ReadHeaderRange(context.Background(), fileRanges{f, size}, path)
}

// fileRanges adapts a local file to RangeReader.
type fileRanges struct {
	f    *os.File
	size int64
}

func (fr fileRanges) ReadRange(_ context.Context, off, n int64) ([]byte, int64, error) {
	if off >= fr.size {
		return nil, fr.size, io.ErrUnexpectedEOF
	}
	n = min(n, fr.size-off)
	b := make([]byte, n)
	if _, err := fr.f.ReadAt(b, off); err != nil {
		return nil, fr.size, err
	}
	return b, fr.size, nil
}
