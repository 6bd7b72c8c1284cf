package lm

import (
	"fmt"
	"slices"

	"github.com/tputool/tputool/loader/safetensors"
)

// Splitter is implemented by models whose checkpoints hold several of the
// tensors the model reads back to back in one stored tensor: DBRX's
// experts.mlp.w1 [experts·ffn, d_model] holds each expert's gate
// projection [ffn, d_model] one after another. Load shows such a tensor as
// its pieces (safetensors.Checkpoint.Split: views of its bytes, nothing
// copied), and Expect (so also inspect) sees them, before the model's
// renames (Renamer).
type Splitter interface {
	// SplitWeight returns the pieces stored tensor name of shape holds,
	// in order, with the names and shapes the model reads them by; nil
	// and no error keep it whole. An error says what the shape should
	// be: Load refuses the checkpoint with it, and Expect (inspect)
	// reports it among the checkpoint's problems.
	SplitWeight(name string, shape []int) ([]safetensors.Piece, error)
}

// StoredLayout is implemented by models whose releases store their
// tensors under other names and shapes than the model reads (a Splitter
// whose pieces no release stores apart): StoredWeights lists the
// tensors a release stores, for tools that write checkpoints in the
// releases' layout (scripts/gen-llm-checkpoint).
type StoredLayout interface {
	StoredWeights() []WeightSpec
}

// splitCheckpoint splits ckpt's tensors as the model reads them
// (Splitter). The tensors the model refuses to split stay whole, and
// refused says why, a sentence each.
func splitCheckpoint(m Model, ckpt *safetensors.Checkpoint) (refused []string, err error) {
	sp, ok := m.(Splitter)
	if !ok {
		return nil, nil
	}
	for _, n := range slices.Clone(ckpt.Names()) {
		shape, _ := ckpt.Shape(n)
		pieces, err := sp.SplitWeight(n, shape)
		if err != nil {
			refused = append(refused, err.Error())
		}
		if err != nil || pieces == nil {
			continue
		}
		if err := ckpt.Split(n, pieces); err != nil {
			return refused, err
		}
	}
	return refused, nil
}

// splitShapes shows a checkpoint's (or inspect's headers') tensors split
// as the model reads them.
type splitShapes struct {
	src    safetensors.Shapes
	names  []string
	pieces map[string]splitPiece
	split  map[string]bool // the stored tensors shown as pieces
}

// splitPiece is a piece's stored tensor and shape.
type splitPiece struct {
	stored string
	shape  []int
}

func (s *splitShapes) Names() []string { return s.names }

func (s *splitShapes) Shape(name string) ([]int, bool) {
	if p, ok := s.pieces[name]; ok {
		return p.shape, true
	}
	if s.split[name] {
		return nil, false
	}
	return s.src.Shape(name)
}

// splitInfos is splitShapes over a source that also describes dtypes.
type splitInfos struct {
	*splitShapes
	info interface {
		Info(name string) (safetensors.TensorInfo, bool)
	}
}

func (s splitInfos) Info(name string) (safetensors.TensorInfo, bool) {
	p, ok := s.pieces[name]
	if !ok {
		if s.split[name] {
			return safetensors.TensorInfo{}, false
		}
		return s.info.Info(name)
	}
	t, ok := s.info.Info(p.stored)
	t.Name, t.Shape = name, p.shape
	return t, ok
}

// splitSource is src with the tensors the model splits shown as their
// pieces (src itself when it splits none), and the model's refusals to
// split, each a sentence naming the tensor.
func splitSource(m Model, src safetensors.Shapes) (safetensors.Shapes, []string) {
	sp, ok := m.(Splitter)
	if !ok {
		return src, nil
	}
	var refused []string
	s := &splitShapes{src: src, pieces: map[string]splitPiece{}, split: map[string]bool{}}
	for _, n := range src.Names() {
		shape, _ := src.Shape(n)
		pieces, err := sp.SplitWeight(n, shape)
		if err == nil { // a piece named as a stored tensor or another piece: Checkpoint.Split refuses it too
			seen := map[string]bool{}
			for _, p := range pieces {
				_, stored := src.Shape(p.Name)
				if _, earlier := s.pieces[p.Name]; seen[p.Name] || earlier || stored && p.Name != n {
					err = fmt.Errorf("tensor %s: piece %q is already a tensor", n, p.Name)
					break
				}
				seen[p.Name] = true
			}
		}
		if err != nil {
			refused = append(refused, err.Error())
		}
		if err != nil || pieces == nil {
			s.names = append(s.names, n)
			continue
		}
		s.split[n] = true
		for _, p := range pieces {
			s.pieces[p.Name] = splitPiece{stored: n, shape: p.Shape}
			s.names = append(s.names, p.Name)
		}
	}
	if len(s.split) == 0 {
		return src, refused
	}
	slices.Sort(s.names)
	if info, ok := src.(interface {
		Info(name string) (safetensors.TensorInfo, bool)
	}); ok {
		return splitInfos{splitShapes: s, info: info}, refused
	}
	return s, refused
}
