package lmckpt

// Spec is one tensor of a float64 reference's tiny checkpoint: its name,
// its shape, and Init, the kind of values the reference draws for it
// ("embed", "norm", "bias", ... as its value function reads them).
type Spec struct {
	Name  string
	Shape []int
	Init  string
}

// DrawSpecs draws the tensors of specs in order from NewRand(seed), each
// value value(spec.Init, u, fan) (Fill's u and fan): what a reference's
// Write hands to WriteF32.
func DrawSpecs(seed uint64, specs []Spec, value func(init string, u float64, fan int) float64) []F32Tensor {
	r := NewRand(seed)
	ts := make([]F32Tensor, 0, len(specs))
	for _, s := range specs {
		v := Fill(r, s.Shape, func(u float64, fan int) float64 { return value(s.Init, u, fan) })
		ts = append(ts, F32Tensor{Name: s.Name, Shape: s.Shape, Values: v})
	}
	return ts
}

// ReadSpecs reads a checkpoint as float64 (ReadFloat64), checking that
// every tensor of specs is there with its size; kit names the reference
// in the error.
func ReadSpecs(dir, kit string, specs []Spec) (map[string][]float64, error) {
	w, err := ReadFloat64(dir)
	if err != nil {
		return nil, err
	}
	chk := Weights64{M: w, Kit: kit}
	for _, s := range specs {
		chk.Shaped(s.Name, s.Shape)
	}
	if chk.Err != nil {
		return nil, chk.Err
	}
	return w, nil
}

// NewSpec is the Spec of tensor name, of shape, drawn as init.
func NewSpec(name string, shape []int, init string) Spec {
	return Spec{Name: name, Shape: shape, Init: init}
}
