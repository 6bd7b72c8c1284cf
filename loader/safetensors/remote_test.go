package safetensors_test

import (
	"context"
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tputool/tputool/loader/hub"
	"github.com/tputool/tputool/loader/hub/hubtest"
	"github.com/tputool/tputool/loader/safetensors"
)

func testTensors(t *testing.T) []byte {
	t.Helper()
	a, err := safetensors.Float32Tensor("model.embed_tokens.weight", safetensors.BF16, []int{64, 16}, make([]float32, 64*16))
	if err != nil {
		t.Fatal(err)
	}
	b, err := safetensors.Float32Tensor("lm_head.weight", safetensors.F32, []int{64, 16}, make([]float32, 64*16))
	if err != nil {
		t.Fatal(err)
	}
	data, err := safetensors.Encode([]safetensors.Tensor{a, b}, map[string]string{"format": "pt"})
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func TestReadHeaderRangeOverHTTP(t *testing.T) {
	data := testTensors(t)
	srv := hubtest.New(t)
	commit := srv.AddRepo(hubtest.Repo{ID: "org/m", Files: []hubtest.File{{Path: "model.safetensors", Data: data, LFS: true}}})
	c := &hub.Client{Endpoint: srv.URL(), Cache: hub.Cache{Dir: t.TempDir()}, Retries: 1,
		Sleep: func(context.Context, time.Duration) error { return nil }}
	h, size, err := safetensors.ReadHeaderRange(context.Background(), c.Remote("org/m", commit, "model.safetensors"), "model.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	if size != int64(len(data)) || len(h.Tensors) != 2 || h.Metadata["format"] != "pt" {
		t.Fatalf("header = %+v, size %d", h, size)
	}
	var ranges []string
	for _, r := range srv.Requests() {
		if r.Server == "cdn" {
			ranges = append(ranges, r.Range)
		}
	}
	n := binary.LittleEndian.Uint64(data)
	if len(ranges) != 2 || ranges[0] != "bytes=0-7" || ranges[1] != "bytes=8-"+itoa(int(8+n-1)) {
		t.Errorf("CDN ranges = %q, want the 8-byte length then the header", ranges)
	}
	// The remote header equals the local one.
	p := filepath.Join(t.TempDir(), "model.safetensors")
	os.WriteFile(p, data, 0o644)
	lh, lsize, err := safetensors.ReadHeaderFile(p)
	if err != nil || lsize != size || len(lh.Tensors) != 2 || lh.Tensors[1].Name != h.Tensors[1].Name || lh.DataOffset != h.DataOffset {
		t.Errorf("local header %+v, %v", lh, err)
	}
}

func itoa(n int) string {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
		if n == 0 {
			return string(b[i:])
		}
	}
}

// memRanges serves ranges of a byte slice and counts reads.
type memRanges struct {
	data  []byte
	reads int
}

func (m *memRanges) ReadRange(_ context.Context, off, n int64) ([]byte, int64, error) {
	m.reads++
	end := min(off+n, int64(len(m.data)))
	return m.data[off:end], int64(len(m.data)), nil
}

func TestReadHeaderRangeValidates(t *testing.T) {
	data := testTensors(t)
	m := &memRanges{data: data}
	if _, _, err := safetensors.ReadHeaderRange(context.Background(), m, "ok.safetensors"); err != nil || m.reads != 2 {
		t.Fatalf("reads %d, %v", m.reads, err)
	}
	// Truncated file: tensors run past the end.
	m = &memRanges{data: data[:len(data)-10]}
	if _, _, err := safetensors.ReadHeaderRange(context.Background(), m, "cut.safetensors"); err == nil || !strings.Contains(err.Error(), "cut.safetensors") {
		t.Errorf("truncated: %v", err)
	}
	// Absurd header length.
	bad := make([]byte, 16)
	binary.LittleEndian.PutUint64(bad, 1<<40)
	if _, _, err := safetensors.ReadHeaderRange(context.Background(), &memRanges{data: bad}, "x.safetensors"); err == nil {
		t.Error("huge header length accepted")
	}
	if _, _, err := safetensors.ReadHeaderRange(context.Background(), m, "pytorch_model.bin"); err == nil || !strings.Contains(err.Error(), "pickle") {
		t.Errorf("pickle: %v", err)
	}
}
