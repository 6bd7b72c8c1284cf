package tpu

import (
	"os"
	"path/filepath"
	"testing"
)

// fakeEnv is a fake machine rooted in a temp dir: <tmp>/root is "/",
// <tmp>/home/u the home directory, and vars the environment.
type fakeEnv struct {
	t    *testing.T
	Root string
	Home string
	Vars map[string]string
}

func newFakeEnv(t *testing.T) *fakeEnv {
	t.Helper()
	dir := t.TempDir()
	f := &fakeEnv{t: t, Root: filepath.Join(dir, "root"), Home: filepath.Join(dir, "home", "u"), Vars: map[string]string{}}
	for _, d := range []string{f.Root, f.Home} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

func (f *fakeEnv) Env() Env {
	return Env{LookupEnv: MapEnv(f.Vars), Home: f.Home, Root: f.Root}
}

// sys returns the fake path of an absolute system path.
func (f *fakeEnv) sys(p string) string { return filepath.Join(f.Root, p) }

// home returns a path under the fake home directory.
func (f *fakeEnv) home(p string) string { return filepath.Join(f.Home, p) }

// touch creates a file (and its parents) with some content.
func (f *fakeEnv) touch(p string) string {
	f.t.Helper()
	writeFile(f.t, p, "fake plugin\n")
	return p
}

func writeFile(t *testing.T, p, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
