package lm

import (
	"sort"
	"strings"
	"sync"

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/loader/config"
)

// Constructor builds a Model from a parsed config.json. It returns an error
// (wrapping errs.ErrUnsupported for features it does not implement) naming
// the offending field.
type Constructor func(cfg *config.File) (Model, error)

var (
	registryMu sync.RWMutex
	registry   = map[string]Constructor{}
)

// Register makes an architecture available under its transformers class
// name (config.json architectures[0]). Architecture packages call it from
// init; registering a name twice panics.
func Register(architecture string, c Constructor) {
	registryMu.Lock()
	defer registryMu.Unlock()
	if _, dup := registry[architecture]; dup {
		panic("lm: architecture " + architecture + " registered twice")
	}
	registry[architecture] = c
}

// Supported lists the registered architectures, sorted.
func Supported() []string {
	registryMu.RLock()
	defer registryMu.RUnlock()
	out := make([]string, 0, len(registry))
	for k := range registry {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// New builds the model that config.json describes.
func New(cfg *config.File) (Model, error) {
	arch := cfg.Architecture()
	registryMu.RLock()
	c, ok := registry[arch]
	registryMu.RUnlock()
	if !ok {
		where := ConfigName(cfg)
		if arch == "" {
			return nil, errs.Unsupportedf("%s: no architectures field; supported architectures: %s", where, strings.Join(Supported(), ", "))
		}
		return nil, errs.Unsupportedf("%s: architecture %q is not supported; supported architectures: %s", where, arch, strings.Join(Supported(), ", "))
	}
	if err := checkDims(cfg); err != nil {
		return nil, err
	}
	m, err := c(cfg)
	if err != nil {
		return nil, err
	}
	if err := applyQuantization(cfg, m); err != nil {
		return nil, err
	}
	return m, nil
}
