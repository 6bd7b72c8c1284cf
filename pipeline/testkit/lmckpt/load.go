package lmckpt

import (
	"context"

	"github.com/tputool/tputool/loader"
	"github.com/tputool/tputool/pipeline/lm"
)

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
