package safetensors

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// IndexFile is the JSON index of a sharded checkpoint
// (model.safetensors.index.json).
type IndexFile struct {
	Metadata  map[string]any    `json:"metadata"`
	WeightMap map[string]string `json:"weight_map"`
}

// MaxIndexSize bounds the index JSON we are willing to parse.
const MaxIndexSize = 64 << 20

// ReadIndex reads and validates an index file. Every shard name must stay
// inside the index's directory: absolute paths and ".." are rejected.
func ReadIndex(path string) (*IndexFile, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if st.Size() > MaxIndexSize {
		return nil, fmt.Errorf("%s: index is %d bytes, over the %d-byte limit", path, st.Size(), MaxIndexSize)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	idx, err := ParseIndex(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return idx, nil
}

// ParseIndex parses index JSON and validates shard names.
func ParseIndex(b []byte) (*IndexFile, error) {
	idx, ok := parseIndexFast(b)
	if !ok {
		idx = &IndexFile{}
		if err := json.Unmarshal(b, idx); err != nil {
			return nil, fmt.Errorf("invalid index JSON: %w", err)
		}
	}
	if len(idx.WeightMap) == 0 {
		return nil, errors.New(`index has no "weight_map" entries`)
	}
	checked := map[string]bool{} // shards repeat for every tensor: check each once
	for name, shard := range idx.WeightMap {
		if checked[shard] {
			continue
		}
		if err := CheckShardName(shard); err != nil {
			return nil, fmt.Errorf("weight_map[%q]: %w", name, err)
		}
		checked[shard] = true
	}
	return idx, nil
}

// CheckShardName rejects shard file names that would escape the checkpoint
// directory or are not safetensors files.
func CheckShardName(shard string) error {
	if shard == "" {
		return errors.New("empty shard name")
	}
	if strings.ContainsRune(shard, '\\') || filepath.IsAbs(shard) || !filepath.IsLocal(shard) {
		return fmt.Errorf("shard %q escapes the checkpoint directory", shard)
	}
	if err := RejectPickle(shard); err != nil {
		return err
	}
	if !strings.HasSuffix(shard, ".safetensors") {
		return fmt.Errorf("shard %q is not a .safetensors file", shard)
	}
	return nil
}

// Shards returns the distinct shard names in sorted order.
func (idx *IndexFile) Shards() []string {
	seen := map[string]bool{}
	var out []string
	for _, s := range idx.WeightMap {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	sort.Strings(out)
	return out
}

// Checkpoint is a set of safetensors files seen as one name -> tensor map.
type Checkpoint struct {
	// Dir is the directory the checkpoint was opened from.
	Dir   string
	Files []*File
	// IndexPath is set for sharded checkpoints.
	IndexPath string
	byName    map[string]*File
	names     []string
	// stored maps a name given by Rename or Split to the tensor's name
	// in its file; nil until then.
	stored map[string]string
	// pieces places the tensors Split made in their stored tensors.
	pieces map[string]piece
}

// file is the file holding tensor name and the tensor's name there.
func (c *Checkpoint) file(name string) (*File, string, bool) {
	f, ok := c.byName[name]
	if !ok {
		return nil, "", false
	}
	if s, renamed := c.stored[name]; renamed {
		return f, s, true
	}
	return f, name, true
}

// Rename gives every tensor the name rename returns for its stored name
// (transformers' base-model checkpoints, saved without the "model."
// prefix the causal-LM class reads), a Split piece the name for the name Split gave it;
// Names, Has, Info, Raw, Convert and Release take the new names from then on. Two tensors renamed to one
// name is an error, and nothing is renamed.
func (c *Checkpoint) Rename(rename func(stored string) string) error {
	byName := make(map[string]*File, len(c.byName))
	stored := make(map[string]string, len(c.byName))
	var pieces map[string]piece
	names := make([]string, 0, len(c.names))
	for _, n := range c.names {
		_, s, _ := c.file(n)
		from := s
		p, split := c.pieces[n]
		if split { // a Split piece is renamed from the name Split gave it
			from = p.name
		}
		to := rename(from)
		if split {
			if pieces == nil {
				pieces = map[string]piece{}
			}
			pieces[to] = p
		}
		if _, dup := byName[to]; dup {
			return fmt.Errorf("checkpoint %s: two tensors renamed to %q", c.Dir, to)
		}
		byName[to], stored[to] = c.byName[n], s
		names = append(names, to)
	}
	sort.Strings(names)
	c.byName, c.stored, c.pieces, c.names = byName, stored, pieces, names
	return nil
}

// Open opens a checkpoint from a .safetensors file, a .safetensors.index.json
// file, or a directory holding one of model.safetensors.index.json,
// model.safetensors, diffusion_pytorch_model.safetensors(.index.json).
func Open(path string) (*Checkpoint, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if st.IsDir() {
		return OpenDir(path, "")
	}
	if strings.HasSuffix(path, ".index.json") {
		return OpenIndex(path)
	}
	f, err := OpenFile(path)
	if err != nil {
		return nil, err
	}
	return newCheckpoint(filepath.Dir(path), "", []*File{f})
}

// weightStems are the file stems tried by OpenDir, transformers first.
var weightStems = []string{"model", "diffusion_pytorch_model"}

// OpenDir finds the checkpoint in dir. variant selects files such as
// model.fp16.safetensors ("" for the plain name).
func OpenDir(dir, variant string) (*Checkpoint, error) {
	for _, name := range CandidateFiles(variant) {
		p := filepath.Join(dir, name)
		if _, err := os.Stat(p); err == nil {
			return Open(p)
		}
	}
	// Explain the failure: a pickle-only checkpoint gets its own message.
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if err := RejectPickle(e.Name()); err != nil {
			return nil, fmt.Errorf("%s: no safetensors weights, only %s: %w", dir, e.Name(), err)
		}
	}
	return nil, fmt.Errorf("%s: no safetensors weights (looked for %s): %w", dir, strings.Join(CandidateFiles(variant), ", "), fs.ErrNotExist)
}

// CandidateFiles lists the weight file names OpenDir tries, in order.
func CandidateFiles(variant string) []string {
	var out []string
	for _, stem := range weightStems {
		base := stem
		if variant != "" {
			base += "." + variant
		}
		out = append(out, base+".safetensors.index.json", base+".safetensors")
	}
	return out
}

// OpenIndex opens every shard named by a sharded checkpoint's index.
func OpenIndex(indexPath string) (*Checkpoint, error) {
	idx, err := ReadIndex(indexPath)
	if err != nil {
		return nil, err
	}
	dir := filepath.Dir(indexPath)
	var files []*File
	byShard := map[string]*File{}
	for _, shard := range idx.Shards() {
		f, err := OpenFile(filepath.Join(dir, shard))
		if err != nil {
			closeAll(files)
			return nil, fmt.Errorf("%s: shard %s: %w", indexPath, shard, err)
		}
		files = append(files, f)
		byShard[shard] = f
	}
	for name, shard := range idx.WeightMap {
		if _, ok := byShard[shard].Info(name); !ok {
			closeAll(files)
			return nil, fmt.Errorf("%s: weight_map says %q is in %s, but that shard has no such tensor", indexPath, name, shard)
		}
	}
	c, err := newCheckpoint(dir, indexPath, files)
	if err != nil {
		return nil, err
	}
	return c, nil
}

func closeAll(files []*File) {
	for _, f := range files {
		f.Close()
	}
}

func newCheckpoint(dir, indexPath string, files []*File) (*Checkpoint, error) {
	c := &Checkpoint{Dir: dir, Files: files, IndexPath: indexPath, byName: map[string]*File{}}
	for _, f := range files {
		for _, t := range f.Header.Tensors {
			if other, dup := c.byName[t.Name]; dup {
				closeAll(files)
				return nil, fmt.Errorf("tensor %q appears in both %s and %s", t.Name, other.Path, f.Path)
			}
			c.byName[t.Name] = f
			c.names = append(c.names, t.Name)
		}
	}
	sort.Strings(c.names)
	return c, nil
}

// Names returns every tensor name, sorted.
func (c *Checkpoint) Names() []string { return c.names }

// Len returns the number of tensors.
func (c *Checkpoint) Len() int { return len(c.names) }

// Info describes a tensor.
func (c *Checkpoint) Info(name string) (TensorInfo, bool) {
	_, info, ok := c.locate(name)
	return info, ok
}

// Has reports whether the checkpoint holds the tensor.
func (c *Checkpoint) Has(name string) bool { _, ok := c.byName[name]; return ok }

// Raw returns a zero-copy view of the tensor's bytes, valid until Close.
func (c *Checkpoint) Raw(name string) ([]byte, error) {
	f, info, ok := c.locate(name)
	if !ok {
		return nil, fmt.Errorf("checkpoint has no tensor %q", name)
	}
	return f.raw(info), nil
}

// Shape returns the tensor's shape and whether the checkpoint holds it.
func (c *Checkpoint) Shape(name string) ([]int, bool) {
	info, ok := c.Info(name)
	return info.Shape, ok
}

// Convert runs convert over the bytes of tensor name, in pieces of whole
// elements: at is the element index of the piece's first element (see
// ConvertChecked). With check, each piece is scanned for NaN and infinite
// values right after it is converted, so the check costs no pass of its
// own over the weights, and nf reports them (nf.Count is 0 when there is
// none); without it, convert gets all the bytes at once.
func (c *Checkpoint) Convert(name string, check bool, convert func(at int, piece []byte)) (nf NonFiniteTensor, err error) {
	info, ok := c.Info(name)
	if !ok {
		return nf, fmt.Errorf("checkpoint has no tensor %q", name)
	}
	raw, err := c.Raw(name)
	if err != nil {
		return nf, err
	}
	if err := checkRaw(info.DType, raw); err != nil {
		return nf, fmt.Errorf("tensor %q: %w", name, err)
	}
	if !check {
		convert(0, raw)
		return nf, nil
	}
	if count, first := ConvertChecked(info.DType, raw, convert); count > 0 {
		nf = NonFiniteTensor{Name: name, DType: info.DType, Count: count, Elements: info.NumElements(), First: first}
	}
	return nf, nil
}

// Float32 returns the tensor converted to float32 on the host (a new slice).
func (c *Checkpoint) Float32(name string) ([]float32, error) {
	out, _, err := c.float32(name, false)
	return out, err
}

// Float32Checked is Float32 that also reports NaN and infinite values,
// counted while converting (Convert), so the check costs no pass of its
// own over the weights: nf.Count is 0 when there is none.
func (c *Checkpoint) Float32Checked(name string) (out []float32, nf NonFiniteTensor, err error) {
	return c.float32(name, true)
}

func (c *Checkpoint) float32(name string, check bool) ([]float32, NonFiniteTensor, error) {
	info, ok := c.Info(name)
	if !ok {
		return nil, NonFiniteTensor{}, fmt.Errorf("checkpoint has no tensor %q", name)
	}
	d := info.DType
	out := make([]float32, info.NumElements())
	nf, err := c.Convert(name, check, func(at int, piece []byte) { DecodeFloat32(out[at:], d, piece) })
	if err != nil {
		return nil, nf, err
	}
	return out, nf, nil
}

// Metadata merges the __metadata__ of every file (first file wins).
func (c *Checkpoint) Metadata() map[string]string {
	out := map[string]string{}
	for i := len(c.Files) - 1; i >= 0; i-- {
		for k, v := range c.Files[i].Header.Metadata {
			out[k] = v
		}
	}
	return out
}

// Close unmaps every file.
func (c *Checkpoint) Close() error {
	var first error
	for _, f := range c.Files {
		if err := f.Close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}
