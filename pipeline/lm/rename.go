package lm

import (
	"slices"
	"strings"

	"github.com/tputool/tputool/loader/safetensors"
)

// Renamer is implemented by models whose checkpoints come in more than one
// naming layout, read under one set of names as transformers does with a
// class's _checkpoint_conversion_mapping: the first Gemma 3 multimodal
// uploads name the text model language_model.model.*, later saves
// model.language_model.*. Load renames the checkpoint's tensors before it
// checks them, and Expect (so also inspect) sees them renamed.
type Renamer interface {
	// RenameWeight returns the name the model reads the stored tensor
	// under: the name itself when it needs no renaming (every name
	// already in the model's layout).
	RenameWeight(stored string) string
}

// RenamePrefix is stored with the first of pairs' prefixes it starts
// with, {from, to}, replaced by its to; stored itself when none matches
// (the multimodal classes' _checkpoint_conversion_mapping of prefixes).
func RenamePrefix(stored string, pairs [][2]string) string {
	for _, c := range pairs {
		if rest, ok := strings.CutPrefix(stored, c[0]); ok {
			return c[1] + rest
		}
	}
	return stored
}

// renames maps each stored name the model renames to its new name. A name
// whose new name is already stored, or taken by another, keeps its own
// (it is then reported as unused, and its twin read).
func renames(m Model, names []string) map[string]string {
	r, ok := m.(Renamer)
	if !ok {
		return nil
	}
	var out map[string]string
	taken := map[string]bool{}
	for _, n := range names {
		taken[n] = true
	}
	for _, n := range names {
		to := r.RenameWeight(n)
		if to == n || taken[to] {
			continue
		}
		if out == nil {
			out = map[string]string{}
		}
		out[n], taken[to] = to, true
	}
	return out
}

// renameCheckpoint renames ckpt's tensors as the model reads them
// (Renamer). It returns one renamed tensor's stored and new names, both
// "" when none was renamed.
func renameCheckpoint(m Model, ckpt *safetensors.Checkpoint) (from, to string, err error) {
	names := ckpt.Names()
	renamed := renames(m, names)
	if len(renamed) == 0 {
		return "", "", nil
	}
	for _, n := range names {
		if t, ok := renamed[n]; ok {
			from, to = n, t
			break
		}
	}
	err = ckpt.Rename(func(s string) string {
		if t, ok := renamed[s]; ok {
			return t
		}
		return s
	})
	return from, to, err
}

// renamedShapes shows a checkpoint's (or inspect's headers') tensors under
// the names the model reads them by.
type renamedShapes struct {
	src    safetensors.Shapes
	names  []string
	stored map[string]string // new name -> stored name
	moved  map[string]bool   // stored names shown under a new one
}

func (r *renamedShapes) Names() []string { return r.names }

func (r *renamedShapes) storedName(name string) (string, bool) {
	if s, ok := r.stored[name]; ok {
		return s, true
	}
	return name, !r.moved[name]
}

func (r *renamedShapes) Shape(name string) ([]int, bool) {
	s, ok := r.storedName(name)
	if !ok {
		return nil, false
	}
	return r.src.Shape(s)
}

// renamedInfos is renamedShapes over a source that also describes dtypes.
type renamedInfos struct {
	*renamedShapes
	info interface {
		Info(name string) (safetensors.TensorInfo, bool)
	}
}

func (r renamedInfos) Info(name string) (safetensors.TensorInfo, bool) {
	s, ok := r.storedName(name)
	if !ok {
		return safetensors.TensorInfo{}, false
	}
	t, ok := r.info.Info(s)
	t.Name = name
	return t, ok
}

// renamedSource is src with the tensors the model renames under their new
// names (src itself when it renames none).
func renamedSource(m Model, src safetensors.Shapes) safetensors.Shapes {
	names := src.Names()
	to := renames(m, names)
	if len(to) == 0 {
		return src
	}
	r := &renamedShapes{src: src, stored: make(map[string]string, len(to)), moved: make(map[string]bool, len(to))}
	r.names = make([]string, 0, len(names))
	for _, n := range names {
		if t, ok := to[n]; ok {
			r.stored[t], r.moved[n] = n, true
			n = t
		}
		r.names = append(r.names, n)
	}
	slices.Sort(r.names)
	if info, ok := src.(interface {
		Info(name string) (safetensors.TensorInfo, bool)
	}); ok {
		return renamedInfos{renamedShapes: r, info: info}
	}
	return r
}
