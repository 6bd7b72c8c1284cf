package inspect

import (
	"slices"

	"github.com/gomlx/gomlx/pkg/core/dtypes"

	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/loader/safetensors"
	"github.com/tputool/tputool/pipeline/lm"
	_ "github.com/tputool/tputool/pipeline/models" // the architectures tputool runs
)

// Mismatch is one reason the checkpoint does not load with its config.
type Mismatch struct {
	// Kind is "config", "missing", "misshapen", "dtype" or "unused".
	Kind string `json:"kind"`
	// Tensor is the tensor's name ("" for a config problem).
	Tensor string `json:"tensor,omitempty"`
	// Shape is the stored shape (misshapen); Want the shape the config
	// implies (missing, misshapen).
	Shape []int `json:"shape,omitempty"`
	Want  []int `json:"want,omitempty"`
	// DType is the stored dtype of a tensor of a dtype the model refuses.
	DType string `json:"dtype,omitempty"`
	// Message says it in a sentence that names the tensor.
	Message string `json:"message"`
}

var problemKinds = map[safetensors.ProblemKind]string{
	safetensors.Config: "config", safetensors.Missing: "missing", safetensors.Misshapen: "misshapen",
	safetensors.BadDType: "dtype", safetensors.Unused: "unused",
}

// checkArchitecture builds the model tputool would run for the checkpoint
// and checks the tensors against it, as loading does (lm.Expect). It
// returns the model, or nil when the architecture is not one tputool runs
// (the report then rests on config.json alone) or its config is refused
// (then the refusal is the report's mismatch).
func checkArchitecture(r *Report, tensors []safetensors.TensorInfo, cfg *config.File) lm.Model {
	if !slices.Contains(lm.Supported(), cfg.Architecture()) {
		arch := cfg.Architecture()
		if arch == "" {
			arch = "a config without architectures"
		}
		r.Notes = append(r.Notes, "tputool does not run "+arch+"; the figures come from config.json alone and no tensor was checked")
		return nil
	}
	r.Supported = true
	model, err := lm.New(cfg)
	if err != nil {
		r.Mismatches = append(r.Mismatches, Mismatch{Kind: "config", Message: err.Error()})
		return nil
	}
	for _, p := range lm.Expect(model, newTensorSet(tensors)).Problems() {
		mm := Mismatch{Kind: problemKinds[p.Kind], Tensor: p.Name, Shape: p.Shape, Want: p.Want, Message: p.String()}
		if p.Kind == safetensors.BadDType {
			mm.DType = string(p.DType)
		}
		r.Mismatches = append(r.Mismatches, mm)
	}
	return model
}

// archStateBytes is the state the model allocates for batch sequences of
// context tokens, split into the caches that grow with the context (KV)
// and the fixed recurrent state, with elem bytes per entry for states in
// the compute dtype and the KV caches held as kv (InvalidDType: the
// compute dtype; Int8 adds their scales, lm.HeldState), and the part of
// it every device holds whole under tensor parallelism (State.whole: all
// but the caches split by KV head, lm.StateSpec.ByKVHead). Sizes saturate
// at math.MaxInt64.
func archStateBytes(m lm.Model, batch, context, elem int, kv dtypes.DType) State {
	var s State
	heads := m.Spec().KVHeads
	for i := 0; i < m.Spec().Layers; i++ {
		for _, st := range lm.HeldState(m, i, batch, context, kv) {
			n := int64(elem)
			switch {
			case st.DType != dtypes.InvalidDType:
				n = int64(st.DType.Size())
			case st.KV && kv != dtypes.InvalidDType:
				n = int64(kv.Size())
			}
			for _, d := range st.Shape {
				n = satMul(n, int64(d))
			}
			if st.SlotAxis != lm.NoSlots {
				s.KVCache = satAdd(s.KVCache, n)
			} else {
				s.Recurrent = satAdd(s.Recurrent, n)
			}
			if !st.ByKVHead(heads) {
				s.whole = satAdd(s.whole, n)
			}
		}
	}
	return s
}

// sharedStateLayers counts the layers of m that read another layer's
// state (lm.StateSharer), of its layers.
func sharedStateLayers(m lm.Model) (shared, layers int) {
	layers = m.Spec().Layers
	for i := range layers {
		if lm.StateSource(m, i) != i {
			shared++
		}
	}
	return shared, layers
}

// tensorSet presents header tensors to safetensors.Strict.
type tensorSet struct {
	names  []string
	byName map[string]safetensors.TensorInfo
}

func newTensorSet(ts []safetensors.TensorInfo) *tensorSet {
	s := &tensorSet{names: make([]string, len(ts)), byName: make(map[string]safetensors.TensorInfo, len(ts))}
	for i, t := range ts {
		s.names[i] = t.Name
		s.byName[t.Name] = t
	}
	return s
}

func (s *tensorSet) Names() []string { return s.names }

func (s *tensorSet) Shape(name string) ([]int, bool) {
	t, ok := s.byName[name]
	return t.Shape, ok
}

func (s *tensorSet) Info(name string) (safetensors.TensorInfo, bool) {
	t, ok := s.byName[name]
	return t, ok
}
