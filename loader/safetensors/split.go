package safetensors

import (
	"fmt"
	"slices"
	"sort"
)

// Piece is one of the tensors a stored tensor holds back to back (Split):
// its name and shape.
type Piece struct {
	Name  string
	Shape []int
}

// piece places a Split piece in the tensor its file stores: the bytes
// [begin, end) of it, read with shape. name is the name Split gave it,
// which Rename renames.
type piece struct {
	name       string
	begin, end int64
	shape      []int
}

// Split shows stored tensor name as the tensors it holds one after
// another, in row-major order: pieces, each a zero-copy view of its bytes
// (DBRX stores its experts' gate projections [ffn, d_model] as one
// [experts·ffn, d_model] tensor; a single piece is a reshape). From then
// on Names, Has, Info, Raw, Convert, Release and Rename know the pieces
// and not name. The pieces' elements must add up to the tensor's, every
// axis positive, and their names be new; otherwise nothing changes and
// the error says why.
func (c *Checkpoint) Split(name string, pieces []Piece) error {
	f, stored, ok := c.file(name)
	if !ok {
		return fmt.Errorf("checkpoint has no tensor %q", name)
	}
	info, ok := c.Info(name)
	if !ok {
		return fmt.Errorf("checkpoint has no tensor %q", name)
	}
	size := int64(info.DType.Size())
	if size == 0 {
		return fmt.Errorf("tensor %q: dtype %s cannot be split", name, info.DType)
	}
	at := int64(0)
	if p, ok := c.pieces[name]; ok {
		at = p.begin
	}
	whole := at
	views := make(map[string]piece, len(pieces))
	var elems int64
	for _, p := range pieces {
		switch _, dup := views[p.Name]; {
		case p.Name == "":
			return fmt.Errorf("tensor %q: a piece has no name", name)
		case dup || p.Name != name && c.Has(p.Name):
			return fmt.Errorf("tensor %q: piece %q is already a tensor", name, p.Name)
		}
		n := int64(1)
		for _, d := range p.Shape {
			if d <= 0 {
				return fmt.Errorf("tensor %q: piece %q has shape %v; every axis must be positive", name, p.Name, p.Shape)
			}
			if n > info.NumElements()/int64(d) { // also past the tensor: no product overflows
				return fmt.Errorf("tensor %q: piece %q of shape %v is larger than the tensor %v", name, p.Name, p.Shape, info.Shape)
			}
			n *= int64(d)
		}
		elems += n
		if elems > info.NumElements() {
			return fmt.Errorf("tensor %q of shape %v holds %d elements; its pieces hold more", name, info.Shape, info.NumElements())
		}
		views[p.Name] = piece{name: p.Name, begin: whole, end: whole + n*size, shape: slices.Clone(p.Shape)}
		whole += n * size
	}
	if elems != info.NumElements() {
		return fmt.Errorf("tensor %q of shape %v holds %d elements; its pieces hold %d", name, info.Shape, info.NumElements(), elems)
	}
	if c.stored == nil {
		c.stored = map[string]string{}
	}
	if c.pieces == nil {
		c.pieces = map[string]piece{}
	}
	delete(c.byName, name)
	delete(c.stored, name)
	delete(c.pieces, name)
	names := slices.DeleteFunc(c.names, func(n string) bool { return n == name })
	for n, v := range views {
		c.byName[n], c.stored[n], c.pieces[n] = f, stored, v
		names = append(names, n)
	}
	sort.Strings(names)
	c.names = names
	return nil
}

// locate is the file that holds tensor name and the tensor's place
// there, a Split piece's within its stored tensor, under name.
func (c *Checkpoint) locate(name string) (*File, TensorInfo, bool) {
	f, s, ok := c.file(name)
	if !ok {
		return nil, TensorInfo{}, false
	}
	info, ok := f.Info(s)
	if !ok {
		return nil, TensorInfo{}, false
	}
	if p, ok := c.pieces[name]; ok {
		base := info.Begin
		info.Begin, info.End, info.Shape = base+p.begin, base+p.end, slices.Clone(p.shape)
	}
	info.Name = name
	return f, info, true
}
