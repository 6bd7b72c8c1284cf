//go:build linux

package hub

import (
	"bytes"
	"errors"
	"os"
	"strings"
	"testing"
)

// A disk that fills up during the transfer (ENOSPC; /dev/full answers
// every write with it) is ErrNoSpace with the way to reclaim space, not a
// bare write error.
func TestDiskFullWhileWriting(t *testing.T) {
	f, err := os.OpenFile("/dev/full", os.O_WRONLY, 0)
	if err != nil {
		t.Skip("no /dev/full:", err)
	}
	defer f.Close()
	c := &Client{Cache: Cache{Dir: t.TempDir()}}
	tr := &transfer{c: c, repo: "org/tiny", file: "model.safetensors", meta: &FileMetadata{Size: 1000}, f: f}
	_, err = tr.copyBody(bytes.NewReader(make([]byte, 1000)))
	if !errors.Is(err, ErrNoSpace) {
		t.Fatalf("err = %v, want ErrNoSpace", err)
	}
	for _, want := range []string{"disk filled up while writing /dev/full", "tputool cache rm ORG/NAME", "HF_HUB_CACHE"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("message lacks %q: %v", want, err)
		}
	}
}

// statfs answers for a real folder, and for a cache that does not exist
// yet the nearest folder above it is asked.
func TestDiskFreeStatfs(t *testing.T) {
	dir := t.TempDir()
	n, err := diskFree(dir)
	if err != nil || n <= 0 {
		t.Fatalf("diskFree(%s) = %d, %v", dir, n, err)
	}
	var asked string
	c := &Client{FreeSpace: func(d string) (int64, error) { asked = d; return 1, nil }}
	if _, ok := c.freeSpace(dir + "/not/yet/blobs"); !ok || asked != dir {
		t.Errorf("asked %q, want %q", asked, dir)
	}
}
