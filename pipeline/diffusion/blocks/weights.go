package blocks

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/tensors"

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/loader/safetensors"
)

// Param is one checkpoint tensor a block reads, by its diffusers (or
// transformers) name and the shape the configuration implies.
type Param struct {
	Name  string
	Shape []int
	index int // position in the owning Weights
}

// Index returns the parameter's position in the model's weight list.
func (p *Param) Index() int { return p.index }

// Source is what a model loads its tensors from: a safetensors checkpoint
// (loader/safetensors.Checkpoint satisfies it) or anything else with names,
// shapes and float32 data.
type Source interface {
	Names() []string
	// Shape returns the tensor's shape and whether it exists.
	Shape(name string) ([]int, bool)
	// Float32 returns the tensor converted to float32 on the host.
	Float32(name string) ([]float32, error)
}

// Loader collects the tensors a model declares while it is built, checking
// each against the source, so that loading is strict: a missing tensor, a
// tensor with the wrong shape, and a tensor in the checkpoint that nothing
// reads are all errors naming the tensor.
type Loader struct {
	component string
	src       Source
	params    []*Param
	byName    map[string]*Param
	problems  []string
	// ignored are checkpoint tensors that may be present and are not used
	// (non-persistent buffers that older exports saved).
	ignored map[string]bool
	// aliases maps a declared name to an older name it may be stored under.
	aliases map[string]string
	// skipFrom: params with index >= skipFrom are checked but not loaded.
	skipFrom int
}

// NewLoader starts loading component (e.g. "unet") from src.
func NewLoader(component string, src Source) *Loader {
	return &Loader{component: component, src: src, byName: map[string]*Param{}, ignored: map[string]bool{},
		aliases: map[string]string{}, skipFrom: -1}
}

// Len returns the number of tensors declared so far.
func (l *Loader) Len() int { return len(l.params) }

// SkipLoadingFrom marks the tensors declared from index mark on (see Len)
// as checked but not loaded: their Weights entries stay nil. Use it for
// parts of a checkpoint a run does not need (the VAE encoder when only
// decoding). It must be called after those tensors are declared.
func (l *Loader) SkipLoadingFrom(mark int) { l.skipFrom = mark }

// Component returns the component name given to NewLoader.
func (l *Loader) Component() string { return l.component }

// Ignore marks a checkpoint tensor that may be present but is not a weight
// (e.g. text_model.embeddings.position_ids). Its shape is still checked when
// shape is not nil.
func (l *Loader) Ignore(name string, shape ...int) {
	l.ignored[name] = true
	if got, ok := l.src.Shape(name); ok && shape != nil && !slices.Equal(got, shape) {
		l.problems = append(l.problems, fmt.Sprintf("tensor %q has shape %v, want %v", name, got, shape))
	}
}

// Alias lets the tensor declared as name be read from old when the
// checkpoint has no tensor called name (deprecated diffusers layouts).
func (l *Loader) Alias(name, old string) { l.aliases[name] = old }

// Take declares a tensor the model reads. Problems are collected and
// reported together by Finish.
func (l *Loader) Take(name string, shape ...int) *Param {
	if p, ok := l.byName[name]; ok {
		if !slices.Equal(p.Shape, shape) {
			l.problems = append(l.problems, fmt.Sprintf("tensor %q declared twice with shapes %v and %v (bug in the model code)", name, p.Shape, shape))
		}
		return p
	}
	p := &Param{Name: name, Shape: slices.Clone(shape), index: len(l.params)}
	l.params = append(l.params, p)
	l.byName[name] = p
	stored := l.stored(p)
	got, ok := l.src.Shape(stored)
	switch {
	case !ok:
		l.problems = append(l.problems, fmt.Sprintf("missing tensor %q (shape %v)", name, shape))
	case !sameShape(got, shape):
		l.problems = append(l.problems, fmt.Sprintf("tensor %q has shape %v, want %v", stored, got, shape))
	}
	return p
}

// stored returns the name p is stored under in the source.
func (l *Loader) stored(p *Param) string {
	if _, ok := l.src.Shape(p.Name); !ok {
		if old, ok := l.aliases[p.Name]; ok {
			if _, ok := l.src.Shape(old); ok {
				return old
			}
		}
	}
	return p.Name
}

// sameShape compares shapes, accepting a linear layer stored as a 1x1
// convolution ([out, in, 1, 1] for [out, in]) and the reverse, which
// diffusers converts silently for attention projections.
func sameShape(got, want []int) bool {
	if slices.Equal(got, want) {
		return true
	}
	squeeze := func(s []int) []int {
		if len(s) == 4 && s[2] == 1 && s[3] == 1 {
			return s[:2]
		}
		return s
	}
	return slices.Equal(squeeze(got), squeeze(want))
}

// Errorf records a configuration problem found while building.
func (l *Loader) Errorf(format string, args ...any) {
	l.problems = append(l.problems, fmt.Sprintf(format, args...))
}

// Finish checks that every checkpoint tensor was declared, reads the
// tensors as float32 and places them on the backend. The returned Weights
// holds them in declaration order.
func (l *Loader) Finish(backend backends.Backend) (*Weights, error) {
	used := map[string]bool{}
	for _, p := range l.params {
		used[l.stored(p)] = true
	}
	var unused []string
	for _, name := range l.src.Names() {
		if !used[name] && !l.ignored[name] {
			unused = append(unused, name)
		}
	}
	problems := l.problems
	if len(unused) > 0 {
		sort.Strings(unused)
		for _, n := range unused {
			problems = append(problems, fmt.Sprintf("unused tensor %q", n))
		}
	}
	if len(problems) > 0 {
		const max = 20
		msg := problems
		if len(msg) > max {
			msg = append(slices.Clone(msg[:max]), fmt.Sprintf("... and %d more", len(problems)-max))
		}
		return nil, errs.Unsupportedf("%s: checkpoint does not match its config (%d problem(s)):\n  %s",
			l.component, len(problems), strings.Join(msg, "\n  "))
	}
	w := &Weights{Params: l.params, Tensors: make([]*tensors.Tensor, len(l.params))}
	for i, p := range l.params {
		if l.skipFrom >= 0 && i >= l.skipFrom {
			continue
		}
		data, err := l.src.Float32(l.stored(p))
		if err != nil {
			w.Finalize()
			return nil, fmt.Errorf("%s: %w", l.component, err)
		}
		t := tensors.FromFlatDataAndDimensions(data, p.Shape...)
		if backend != nil {
			if err := t.MaterializeOnDevice(backend, false, 0); err != nil {
				w.Finalize()
				return nil, fmt.Errorf("%s: tensor %q to device: %w", l.component, p.Name, err)
			}
			t.FinalizeLocal()
		}
		w.Tensors[i] = t
	}
	return w, nil
}

// Weights are a component's loaded tensors in declaration order.
type Weights struct {
	Params  []*Param
	Tensors []*tensors.Tensor
}

// NumParameters returns the total element count.
func (w *Weights) NumParameters() int64 {
	var n int64
	for _, p := range w.Params {
		e := int64(1)
		for _, d := range p.Shape {
			e *= int64(d)
		}
		n += e
	}
	return n
}

// Select returns the tensors of params, in that order.
func (w *Weights) Select(params []*Param) []*tensors.Tensor {
	out := make([]*tensors.Tensor, len(params))
	for i, p := range params {
		out[i] = w.Tensors[p.index]
	}
	return out
}

// Finalize frees the tensors.
func (w *Weights) Finalize() {
	if w == nil {
		return
	}
	for _, t := range w.Tensors {
		if t != nil {
			_ = t.FinalizeAll()
		}
	}
}

// checkpointSource adapts a safetensors checkpoint to Source.
type checkpointSource struct {
	c           *safetensors.Checkpoint
	onNonFinite func(safetensors.NonFiniteTensor)
}

// FromCheckpoint returns a Source reading a safetensors checkpoint
// (F16/BF16 tensors are converted to float32 on the host).
func FromCheckpoint(c *safetensors.Checkpoint) Source { return checkpointSource{c: c} }

// FromCheckpointChecked is FromCheckpoint that also calls onNonFinite for
// each tensor read that holds NaN or infinite values, found while it is
// converted (safetensors.Checkpoint.Float32Checked), so the check costs
// no pass of its own over the weights. Tensors a model does not load (the
// VAE encoder when decoding) are not read, so not checked.
func FromCheckpointChecked(c *safetensors.Checkpoint, onNonFinite func(safetensors.NonFiniteTensor)) Source {
	return checkpointSource{c: c, onNonFinite: onNonFinite}
}

func (s checkpointSource) Names() []string { return s.c.Names() }
func (s checkpointSource) Shape(name string) ([]int, bool) {
	info, ok := s.c.Info(name)
	if !ok {
		return nil, false
	}
	return info.Shape, true
}
func (s checkpointSource) Float32(name string) ([]float32, error) {
	if s.onNonFinite == nil {
		return s.c.Float32(name)
	}
	out, nf, err := s.c.Float32Checked(name)
	if err == nil && nf.Count > 0 {
		s.onNonFinite(nf)
	}
	return out, err
}
