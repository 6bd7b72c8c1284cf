package blocks

import (
	"fmt"
	"slices"
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
// (see FromCheckpoint) or anything else with names, shapes and float32
// data.
type Source interface {
	safetensors.Shapes
	// Float32 returns the tensor converted to float32 on the host.
	Float32(name string) ([]float32, error)
}

// Loader collects the tensors a model declares while it is built, so that
// loading is strict (safetensors.Strict): a missing tensor, a tensor with
// the wrong shape, and a tensor in the checkpoint that nothing reads are
// all errors naming the tensor, reported together by Finish.
type Loader struct {
	component string
	src       Source
	strict    *safetensors.Strict
	params    []*Param
	// skipFrom: params with index >= skipFrom are checked but not loaded.
	skipFrom int
}

// NewLoader starts loading component (e.g. "unet") from src. A linear
// weight stored as a 1x1 convolution ([out, in, 1, 1] for [out, in]) and
// the reverse are accepted, as diffusers converts them silently for
// attention projections.
func NewLoader(component string, src Source) *Loader {
	strict := safetensors.NewStrict(src)
	strict.LinearAsConv = true
	return &Loader{component: component, src: src, strict: strict, skipFrom: -1}
}

// Len returns the number of tensors declared so far.
func (l *Loader) Len() int { return len(l.params) }

// SkipLoadingFrom marks the tensors declared from index mark on (see Len)
// as checked but not loaded: their Weights entries stay nil. Use it for
// parts of a checkpoint a run does not need (the VAE encoder when only
// decoding). It must be called after those tensors are declared.
func (l *Loader) SkipLoadingFrom(mark int) { l.skipFrom = mark }

// Ignore marks a checkpoint tensor that may be present but is not a weight
// (e.g. text_model.embeddings.position_ids). Its shape is still checked when
// shape is not nil.
func (l *Loader) Ignore(name string, shape ...int) { l.strict.Ignore(name, shape...) }

// Alias lets the tensor declared as name be read from old when the
// checkpoint has no tensor called name (deprecated diffusers layouts).
func (l *Loader) Alias(name, old string) { l.strict.Alias(name, old) }

// Take declares a tensor the model reads. Problems are collected and
// reported together by Finish.
func (l *Loader) Take(name string, shape ...int) *Param {
	i := l.strict.Expect(name, shape...)
	if i < len(l.params) {
		return l.params[i]
	}
	p := &Param{Name: name, Shape: slices.Clone(shape), index: i}
	l.params = append(l.params, p)
	return p
}

// Errorf records a configuration problem found while building.
func (l *Loader) Errorf(format string, args ...any) { l.strict.Errorf(format, args...) }

// Finish checks that every checkpoint tensor was declared, reads the
// tensors as float32 and places them on the backend. The returned Weights
// holds them in declaration order.
func (l *Loader) Finish(backend backends.Backend) (*Weights, error) {
	if problems := l.strict.Problems(); len(problems) > 0 {
		const max = 20
		return nil, errs.Unsupportedf("%s: checkpoint does not match its config (%d problem(s)):\n  %s",
			l.component, len(problems), strings.Join(problems.Lines(max), "\n  "))
	}
	w := &Weights{Params: l.params, Tensors: make([]*tensors.Tensor, len(l.params))}
	for i, p := range l.params {
		if l.skipFrom >= 0 && i >= l.skipFrom {
			continue
		}
		data, err := l.src.Float32(l.strict.Stored(i))
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

func (s checkpointSource) Names() []string                 { return s.c.Names() }
func (s checkpointSource) Shape(name string) ([]int, bool) { return s.c.Shape(name) }
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
