package lmckpt

import (
	"context"
	"testing"

	"github.com/tputool/tputool/loader"
	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/lm"
)

// ParseConfig parses js, a config.json's text, failing t if it does not:
// the tests' way to a *config.File for a family's resolver.
func ParseConfig(t testing.TB, js string) *config.File {
	t.Helper()
	cfg, err := config.ParseModel([]byte(js))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// Load resolves the model folder dir as `--model dir` does and loads it
// with lm.Load: the tests' one-line way to a checked *lm.Loaded.
func Load(dir string) (*lm.Loaded, error) {
	ref, err := loader.ParseRef(dir)
	if err != nil {
		return nil, err
	}
	m, err := loader.ResolveRef(context.Background(), ref, loader.Options{})
	if err != nil {
		return nil, err
	}
	return lm.Load(m)
}

// WriteLoad writes a checkpoint with write into a temporary directory of
// t's and loads it (Load), closed when the test ends: the tests' way from
// a reference's description (its Write method) to a *lm.Loaded.
func WriteLoad(t testing.TB, write func(dir string) error) (string, *lm.Loaded) {
	t.Helper()
	dir := t.TempDir()
	if err := write(dir); err != nil {
		t.Fatal(err)
	}
	l, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return dir, l
}

// Params counts the parameters of m's weights (lm.Weights), as the model
// cards count them: every element of every tensor.
func Params(m lm.Model) int64 {
	var n int64
	for _, w := range lm.Weights(m) {
		k := int64(1)
		for _, d := range w.Shape {
			k *= int64(d)
		}
		n += k
	}
	return n
}
