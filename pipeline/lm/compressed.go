package lm

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strings"
	"unicode"

	"github.com/tputool/tputool/loader/quant"
	"github.com/tputool/tputool/loader/safetensors"
)

// compressed-tensors checkpoints (llm-compressor's, vLLM's format of
// choice: the "quantized.w4a16", "w8a8", "FP8-dynamic" releases) store a
// quantized Linear W [out, in] beside per-strategy scales:
//
//   - format "pack-quantized" (int, 2 to 8 bits): PREFIX.weight_packed I32
//     [out, ceil(in·bits/32)], packed along the input (value i of a word
//     at bits·(i mod 32/bits)), each value stored unsigned as the signed
//     code plus 2^(bits−1); PREFIX.weight_shape [2]; asymmetric schemes add
//     PREFIX.weight_zero_point I32 [ceil(out·bits/32), groups], packed along
//     the output the same way;
//   - "naive-quantized", "int-quantized" and "float-quantized", which
//     compressed-tensors registers as one compressor: NAME in the dtype of
//     the weights' type, int8 (I8 [out, in], zero point
//     PREFIX.weight_zero_point I8 when asymmetric: read as
//     "naive-quantized") or 8-bit float (F8_E4M3 [out, in]: read as
//     "float-quantized"), whichever of the three names the config writes
//     (llm-compressor's W8A8 int8 releases write int-quantized);
//   - "nvfp4-pack-quantized" (NVIDIA's FP4): PREFIX.weight_packed U8 [out,
//     ceil(in/2)], two E2M1 values a byte (column 2k in the low nibble,
//     2k+1 in the high; bit 3 the sign, bits 0–2 index 0, 0.5, 1, 1.5, 2,
//     3, 4, 6), PREFIX.weight_scale F8_E4M3 [out, in/16] and
//     PREFIX.weight_global_scale F32 [1]: W = value · (scale /
//     global_scale), the scale divided first, in f32, as compressed-tensors'
//     decompressor and vLLM's emulation do;
//
// with PREFIX.weight_scale of the strategy's shape (tensor [1], channel
// [out, 1], group [out, in/group_size], block [ceil(out/b0), ceil(in/b1)])
// and, for activation order, PREFIX.weight_g_idx I32 [in]. W[o, i] =
// scale · (code − zero point). The loader decodes them at load like FP8
// and GPTQ (decodeEncoded); activation quantization (input_activations:
// W8A8) is not applied: the weights run with float activations.

// CompressedQuant is a compressed-tensors checkpoint's weight scheme
// (Spec.Compressed).
type CompressedQuant struct {
	Format    string // pack-quantized, naive-quantized (int8), float-quantized (fp8), nvfp4-pack-quantized; "mixed" for several groups' root
	Bits      int
	Symmetric bool
	Strategy  string // tensor, channel, group, block
	Group     int    // group_size (strategy group)
	Block     [2]int // block_structure (strategy block)
	// targets and ignore, on the config's root, say which modules take
	// which group's scheme (For); targets are in the order For tries
	// them (ctTargetOrder). schemes are the groups', in their order.
	targets, ignore []ctTarget
	schemes         []*CompressedQuant
}

const (
	ctPacked    = ".weight_packed"
	ctScale     = ".weight_scale"
	ctZeroPoint = ".weight_zero_point"
	ctGIdx      = ".weight_g_idx"
	ctShape     = ".weight_shape"
	ctGlobal    = ".weight_global_scale"
)

// ctNVFP4 is the NVFP4 format's name.
const ctNVFP4 = "nvfp4-pack-quantized"

// compressed reports a weight the checkpoint stores in compressed-tensors
// form: its scales beside it, and the packed tensor or NAME.
func (w WeightSpec) compressed(spec *Spec, has func(string) bool) bool {
	if spec.Compressed == nil || !w.stored() || len(w.Shape) != 2 {
		return false
	}
	p, ok := packedPrefix(w.Name)
	if !ok || !has(p+ctScale) {
		return false
	}
	c, quantized := spec.Compressed.For(p)
	if !quantized {
		return false
	}
	if c.Format == "pack-quantized" || c.Format == ctNVFP4 {
		return !has(w.Name) && has(p+ctPacked)
	}
	return has(w.Name)
}

// scaleShape is the shape of a weight's scales (and zero points) under c.
func (c *CompressedQuant) scaleShape(out, in int) []int {
	switch c.Strategy {
	case "tensor":
		return []int{1}
	case "channel":
		return []int{out, 1}
	case "block":
		return []int{(out + c.Block[0] - 1) / c.Block[0], (in + c.Block[1] - 1) / c.Block[1]}
	}
	return []int{out, (in + c.Group - 1) / c.Group}
}

// scaleIndex returns the index, in stored scales of shape ss
// (scaleShape), of output o's scale for input group g: g's column of row
// o for group scales, of o's row of blocks for block scales (g counting
// blocks of Block[1] columns), o's for channel scales, the one of a
// tensor scale.
func (c *CompressedQuant) scaleIndex(ss []int) func(g, o int) int {
	switch c.Strategy {
	case "tensor":
		return func(g, o int) int { return 0 }
	case "channel":
		return func(g, o int) int { return o }
	case "block":
		return func(g, o int) int { return (o/c.Block[0])*ss[1] + g }
	}
	return func(g, o int) int { return o*ss[len(ss)-1] + g }
}

// compressedSources are a compressed weight's tensors (shape nil: as the
// checkpoint has it, checked by decodeCompressed).
func (w WeightSpec) compressedSources(c *CompressedQuant, has func(string) bool) []packedTensor {
	p, _ := packedPrefix(w.Name)
	c = c.ForWeight(w.Name)
	out, in := w.Shape[0], w.Shape[1]
	floats := []safetensors.DType{safetensors.F32, safetensors.F16, safetensors.BF16}
	ss := c.scaleShape(out, in)
	var ts []packedTensor
	switch c.Format {
	case "pack-quantized":
		per := 32 / c.Bits
		ts = append(ts, packedTensor{p + ctPacked, []int{out, (in + per - 1) / per}, []safetensors.DType{safetensors.I32}})
		if has(p + ctShape) {
			ts = append(ts, packedTensor{p + ctShape, []int{2}, []safetensors.DType{safetensors.I32, safetensors.I64}})
		}
		if !c.Symmetric {
			ts = append(ts, packedTensor{p + ctZeroPoint, []int{(out + per - 1) / per, ss[len(ss)-1]}, []safetensors.DType{safetensors.I32}})
		}
	case ctNVFP4:
		ts = append(ts, packedTensor{p + ctPacked, []int{out, (in + 1) / 2}, []safetensors.DType{safetensors.U8}},
			packedTensor{p + ctGlobal, []int{1}, floats})
		floats = append(floats, safetensors.F8E4M3)
	case "naive-quantized":
		ts = append(ts, packedTensor{w.Name, []int{out, in}, []safetensors.DType{safetensors.I8}})
		if !c.Symmetric {
			ts = append(ts, packedTensor{p + ctZeroPoint, ss, []safetensors.DType{safetensors.I8}})
		}
	default: // float-quantized
		ts = append(ts, packedTensor{w.Name, []int{out, in}, fp8DTypes})
	}
	ts = append(ts, packedTensor{p + ctScale, ss, floats})
	if has(p + ctGIdx) {
		ts = append(ts, packedTensor{p + ctGIdx, []int{in}, []safetensors.DType{safetensors.I32}})
	}
	return ts
}

// decodeCompressed decodes a compressed-tensors weight into rows of [out,
// in], calling fn with each piece.
func (l *Loaded) decodeCompressed(w WeightSpec, fn func(at int, vals []float32)) error {
	c := l.Model.Spec().Compressed.ForWeight(w.Name)
	if c.Format == "pack-quantized" {
		src, err := l.compressedInts(w)
		if err != nil {
			return err
		}
		l.decodeInts(src, fn)
		return nil
	}
	p, _ := packedPrefix(w.Name)
	out, in := w.Shape[0], w.Shape[1]
	raw, dtype, scales, err := l.compressedRead(w, c)
	if err != nil {
		return err
	}
	ss := c.scaleShape(out, in)
	groupOf := func(i int) int { return i / max(c.Group, 1) }
	if g, ok := raw[p+ctGIdx]; ok {
		idx := make([]int32, in)
		if _, err := readGIdx(p+ctGIdx, g, idx, ss[len(ss)-1]); err != nil {
			return err
		}
		groupOf = func(i int) int { return int(idx[i]) }
	}
	if c.Strategy == "block" { // scales by blocks of columns, whatever g_idx says
		groupOf = func(i int) int { return i / c.Block[1] }
	}
	// scaleAt is the index of (o, i)'s scale (and zero point).
	index := c.scaleIndex(ss)
	scaleAt := func(o, i int) int { return index(groupOf(i), o) }
	// zero returns (o, i)'s zero point; code returns its code.
	zero := func(o, i int) float32 { return 0 }
	var code func(o, i int) float32
	switch c.Format {
	case ctNVFP4:
		q, half := raw[p+ctPacked], (in+1)/2
		code = func(o, i int) float32 { return quant.FP4[q[o*half+i/2]>>(4*(i%2))&0xf] }
	case "naive-quantized":
		q := raw[w.Name]
		code = func(o, i int) float32 { return float32(int8(q[o*in+i])) }
		if zp, ok := raw[p+ctZeroPoint]; ok {
			zero = func(o, i int) float32 { return float32(int8(zp[scaleAt(o, i)])) }
		}
	default:
		q, d := raw[w.Name], dtype[w.Name]
		row := make([]float32, in)
		cur := -1
		code = func(o, i int) float32 {
			if o != cur {
				safetensors.DecodeFloat32(row, d, q[o*in:(o+1)*in])
				cur = o
			}
			return row[i]
		}
	}
	nf := safetensors.NonFiniteTensor{Name: w.Name, First: -1, DType: dtype[p+ctScale], Elements: int64(out) * int64(in)}
	emitDequantized(&nf, out, in, func(o, i int) float32 {
		return scales[scaleAt(o, i)] * (code(o, i) - zero(o, i))
	}, fn)
	l.releaseSources(raw)
	if nf.Count > 0 && l.OnNonFinite != nil {
		l.OnNonFinite(nf)
	}
	return nil
}

// compressedInts reads a pack-quantized weight's tensors (intSource):
// each value stored unsigned (the signed code plus 2^(bits−1)) is the
// source's value, and the zero point stored the same way (2^(bits−1),
// the signed zero, where symmetric) its zero, so that W = scale · (value
// − zero) = scale · (code − zero point). Scales by block or tensor are
// spread to one per input group and output. A naive-quantized int8
// weight is read the same way, its signed codes and zero points plus
// 128. An NVFP4 weight is read as 8-bit codes too: twice each E2M1 value
// is an integer from −12 to 12, so value 128 + 2·e2m1, zero point 128
// and half the scale (scale / global) give W exactly (halving an f32 is
// exact), and it can be held as int8 in groups of 16 (StoredInt8Groups):
// a byte a weight and an f32 scale a group, where bf16 would take two.
func (l *Loaded) compressedInts(w WeightSpec) (*intSource, error) {
	c := l.Model.Spec().Compressed.ForWeight(w.Name)
	p, _ := packedPrefix(w.Name)
	out, in := w.Shape[0], w.Shape[1]
	raw, dtype, stored, err := l.compressedRead(w, c)
	if err != nil {
		return nil, err
	}
	ss := c.scaleShape(out, in)
	// The input groups: of group_size (or block columns), or one.
	size := in
	switch c.Strategy {
	case "group":
		size = c.Group
	case "block":
		size = c.Block[1]
	}
	groups := (in + size - 1) / size
	groupOf := make([]int32, in)
	for i := range groupOf {
		groupOf[i] = int32(i / size)
	}
	sequence := true
	if g, ok := raw[p+ctGIdx]; ok {
		if sequence, err = readGIdx(p+ctGIdx, g, groupOf, groups); err != nil {
			return nil, err
		}
	}
	scaleAt := c.scaleIndex(ss) // the stored index of (group g, output o)'s scale
	per, mask, offset := 32/c.Bits, uint32(1)<<c.Bits-1, uint32(1)<<(c.Bits-1)
	words := (in + per - 1) / per
	packed := raw[p+ctPacked]
	zp, asym := raw[p+ctZeroPoint]
	cols := ss[len(ss)-1]
	scales, zeros := make([]float32, groups*out), make([]float32, groups*out)
	naive := c.Format == "naive-quantized" // int8 NAME, zero points int8 as the scales
	nvfp4 := c.Format == ctNVFP4
	for g := range groups {
		for o := range out {
			at := scaleAt(g, o)
			scales[g*out+o] = stored[at]
			z := offset
			switch {
			case nvfp4:
				scales[g*out+o], z = stored[at]/2, 128
			case asym && naive:
				z = uint32(int32(int8(zp[at])) + 128)
			case asym:
				z = binary.LittleEndian.Uint32(zp[4*((o/per)*cols+at%cols):]) >> (c.Bits * (o % per)) & mask
			}
			zeros[g*out+o] = float32(z)
		}
	}
	value := func(o, i int) uint32 {
		return binary.LittleEndian.Uint32(packed[4*(o*words+i/per):]) >> (c.Bits * (i % per)) & mask
	}
	switch {
	case naive:
		q := raw[w.Name]
		value = func(o, i int) uint32 { return uint32(int32(int8(q[o*in+i])) + 128) }
	case nvfp4:
		half := (in + 1) / 2
		var twice [16]int32 // twice each E2M1 value: integers
		for c, v := range quant.FP4 {
			twice[c] = int32(2 * v)
		}
		value = func(o, i int) uint32 { return uint32(128 + twice[packed[o*half+i/2]>>(4*(i%2))&0xf]) }
	}
	return &intSource{
		name: w.Name, out: out, in: in, groups: groups, groupOf: groupOf, value: value,
		scales: scales, zeros: zeros, scaleDT: dtype[p+ctScale], sequence: sequence,
		release: func() { l.releaseSources(raw) },
	}, nil
}

// compressedConfig is the part of a compressed-tensors
// quantization_config loading reads. config_groups is read in its written
// order (ctGroups), which decides which group a target written in two
// groups belongs to (the last).
type compressedConfig struct {
	Format       string          `json:"format"`
	ConfigGroups json.RawMessage `json:"config_groups"`
	Ignore       []string        `json:"ignore"`
}

// compressedGroup is one config group.
type compressedGroup struct {
	Targets []string `json:"targets"`
	// Format is the group's own, under the config's "mixed-precision".
	Format  string `json:"format"`
	Weights *struct {
		NumBits        int    `json:"num_bits"`
		Type           string `json:"type"`
		Symmetric      bool   `json:"symmetric"`
		Strategy       string `json:"strategy"`
		GroupSize      *int   `json:"group_size"`
		BlockStructure []int  `json:"block_structure"`
		Dynamic        bool   `json:"dynamic"`
	} `json:"weights"`
}

// Which scheme a module takes (For), as compressed-tensors decides it
// when it quantizes and compresses the model (apply_quantization_config,
// match_targets), so as the tensors on disk are: a module the ignore
// list names (exactly, or "re:PATTERN" matched from the start of its
// name, as Python's re.match) stays plain. Else every group's targets
// are taken together, each target once (written in several groups, it
// is the last group's), and sorted by the key ("re:" in target,
// target): the exact names first, then the patterns, each kind in
// byte order of the target as written, whatever group or position
// wrote it. The first of them that names the module (exactly or by
// "re:") gives its group's scheme; else the class target "Linear",
// which every projection is; else the module stays plain. (vLLM takes
// the first matching target in the written order instead; the two
// agree unless two name or pattern targets match one module.) Targets
// naming another class (Embedding, Attention…) would quantize tensors
// tputool does not read this way, and are refused.

// ctTarget is one target or ignore entry.
type ctTarget struct {
	raw    string         // as written
	name   string         // an exact module name
	re     *regexp.Regexp // "re:PATTERN"
	linear bool           // the class Linear
	scheme *CompressedQuant
}

func (t ctTarget) matches(prefix string) bool {
	if t.re != nil {
		return t.re.MatchString(prefix)
	}
	return t.name == prefix
}

// parseCTTarget reads a target or ignore entry.
func parseCTTarget(s string) (ctTarget, error) {
	if pat, ok := strings.CutPrefix(s, "re:"); ok {
		re, err := matchFromStart(pat)
		if err != nil {
			return ctTarget{}, fmt.Errorf("%q is %w", s, err)
		}
		return ctTarget{raw: s, re: re}, nil
	}
	if s == "Linear" {
		return ctTarget{raw: s, linear: true}, nil
	}
	return ctTarget{raw: s, name: s}, nil
}

// ctTargetOrder orders targets as compressed-tensors' match_targets
// sorts them, by the key ("re:" in target, target): the ones without
// "re:" first, each kind in byte order (Python compares strings by code
// point, which UTF-8's byte order keeps).
func ctTargetOrder(a, b ctTarget) int {
	ra, rb := strings.Contains(a.raw, "re:"), strings.Contains(b.raw, "re:")
	switch {
	case ra != rb && !ra:
		return -1
	case ra != rb:
		return 1
	}
	return strings.Compare(a.raw, b.raw)
}

// For is the scheme of the module named prefix, and false when the
// module stays plain (above). A scheme without targets (fbgemm_fp8's, a
// group's own) is every module's.
func (c *CompressedQuant) For(prefix string) (*CompressedQuant, bool) {
	if c.targets == nil {
		return c, true
	}
	for _, t := range c.ignore {
		if t.matches(prefix) {
			return nil, false
		}
	}
	for _, t := range c.targets {
		if !t.linear && t.matches(prefix) {
			return t.scheme, true
		}
	}
	for _, t := range c.targets {
		if t.linear {
			return t.scheme, true
		}
	}
	return nil, false
}

// ForWeight is For of weight name's module (name less ".weight"), c
// itself where the module stays plain.
func (c *CompressedQuant) ForWeight(name string) *CompressedQuant {
	p, _ := packedPrefix(name)
	if s, ok := c.For(p); ok {
		return s
	}
	return c
}

// ctGroups reads config_groups in its written order.
func ctGroups(raw json.RawMessage) (names []string, groups []compressedGroup, err error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, nil, fmt.Errorf("config_groups: want an object of groups")
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, nil, fmt.Errorf("config_groups: %w", err)
		}
		name, _ := tok.(string)
		var g compressedGroup
		if err := dec.Decode(&g); err != nil {
			return nil, nil, fmt.Errorf("config group %s: %w", name, err)
		}
		names, groups = append(names, name), append(groups, g)
	}
	return names, groups, nil
}

// compressedQuant reads a compressed-tensors quantization_config: the
// scheme of every config group, its targets and the ignore list, as one
// CompressedQuant whose For gives each module's scheme.
func compressedQuant(c compressedConfig, where string) (*CompressedQuant, error) {
	if len(bytes.TrimSpace(c.ConfigGroups)) == 0 {
		return nil, fmt.Errorf("%s: compressed-tensors without config_groups", where)
	}
	names, groups, err := ctGroups(c.ConfigGroups)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	if len(groups) == 0 {
		return nil, fmt.Errorf("%s: compressed-tensors with no config group", where)
	}
	root := &CompressedQuant{}
	at := map[string]int{} // a target's index in root.targets
	for i, g := range groups {
		format := strings.ToLower(c.Format)
		if g.Format != "" {
			format = strings.ToLower(g.Format)
		}
		q, err := compressedScheme(format, g, where+" config group "+names[i])
		if err != nil {
			return nil, err
		}
		if len(g.Targets) == 0 {
			return nil, fmt.Errorf("%s: config group %s has no targets", where, names[i])
		}
		for _, s := range g.Targets {
			t, err := parseCTTarget(s)
			if err != nil {
				return nil, fmt.Errorf("%s: config group %s: target %w", where, names[i], err)
			}
			if t.name != "" && unicode.IsUpper(rune(t.name[0])) {
				return nil, fmt.Errorf("%s: config group %s targets the class %q: tputool reads the targets Linear, a module's name and \"re:\" patterns over names", where, names[i], s)
			}
			t.scheme = q
			if j, ok := at[s]; ok { // the last group that writes it
				root.targets[j] = t
				continue
			}
			at[s] = len(root.targets)
			root.targets = append(root.targets, t)
		}
		root.schemes = append(root.schemes, q)
		if i == 0 {
			// With one group the root is its scheme too, for what reads
			// the config as a whole (inspect).
			root.Format, root.Bits, root.Symmetric, root.Strategy, root.Group, root.Block = q.Format, q.Bits, q.Symmetric, q.Strategy, q.Group, q.Block
		}
	}
	if len(groups) > 1 {
		root.Format = "mixed"
	}
	slices.SortFunc(root.targets, ctTargetOrder)
	for _, s := range c.Ignore {
		t, err := parseCTTarget(s)
		if err != nil {
			return nil, fmt.Errorf("%s: ignore %w", where, err)
		}
		root.ignore = append(root.ignore, t)
	}
	return root, nil
}

// compressedScheme reads one group's weight scheme in format.
func compressedScheme(format string, g compressedGroup, where string) (*CompressedQuant, error) {
	switch format {
	case "pack-quantized", "naive-quantized", "int-quantized", "float-quantized", ctNVFP4:
	default:
		return nil, fmt.Errorf("%s: compressed-tensors format %q: tputool reads pack-quantized, naive-quantized, int-quantized, float-quantized and nvfp4-pack-quantized", where, format)
	}
	wt := g.Weights
	if wt == nil {
		return nil, fmt.Errorf("%s quantizes no weights", where)
	}
	if format == "naive-quantized" || format == "int-quantized" || format == "float-quantized" {
		// One compressor under three names: NAME in the weights' dtype.
		switch {
		case wt.Type == "int" && wt.NumBits == 8:
			format = "naive-quantized"
		case wt.Type == "float" && wt.NumBits == 8:
			format = "float-quantized"
		default:
			return nil, fmt.Errorf("%s: %s weights of type %s with %d bits: tputool reads int8 and 8-bit floats (fp8)", where, format, wt.Type, wt.NumBits)
		}
	}
	q := &CompressedQuant{Format: format, Bits: wt.NumBits, Symmetric: wt.Symmetric, Strategy: strings.ToLower(wt.Strategy)}
	switch {
	case format == "pack-quantized" && (wt.Type != "int" || wt.NumBits < 2 || wt.NumBits > 8 || 32%wt.NumBits != 0):
		return nil, fmt.Errorf("%s: pack-quantized weights of type %s with %d bits: tputool reads ints of 2, 4 or 8 bits", where, wt.Type, wt.NumBits)
	case format == "float-quantized" && !wt.Symmetric:
		return nil, fmt.Errorf("%s: asymmetric fp8 weights are not read", where)
	case format != ctNVFP4 && q.Strategy == "tensor_group":
		return nil, fmt.Errorf("%s: strategy tensor_group is read for nvfp4-pack-quantized weights, not %s", where, format)
	case format == ctNVFP4 && (wt.Type != "float" || wt.NumBits != 4 || !wt.Symmetric || q.Strategy != "tensor_group"):
		return nil, fmt.Errorf("%s: nvfp4 weights of type %s with %d bits, strategy %s: tputool reads symmetric 4-bit floats by tensor_group", where, wt.Type, wt.NumBits, wt.Strategy)
	}
	switch q.Strategy {
	case "tensor", "channel":
	case "group", "tensor_group":
		// tensor_group (NVFP4): groups, and the global scale beside them.
		q.Strategy = "group"
		if wt.GroupSize == nil || *wt.GroupSize <= 0 {
			return nil, fmt.Errorf("%s: strategy group needs a positive group_size", where)
		}
		q.Group = *wt.GroupSize
	case "block":
		if len(wt.BlockStructure) != 2 || wt.BlockStructure[0] <= 0 || wt.BlockStructure[1] <= 0 {
			return nil, fmt.Errorf("%s: strategy block needs a block_structure of two sizes, got %v", where, wt.BlockStructure)
		}
		q.Block = [2]int{wt.BlockStructure[0], wt.BlockStructure[1]}
	default:
		return nil, fmt.Errorf("%s: weight strategy %q: tputool reads tensor, channel, group and block", where, wt.Strategy)
	}
	if !q.Symmetric && format == "pack-quantized" && q.Strategy != "group" && q.Strategy != "channel" {
		return nil, fmt.Errorf("%s: asymmetric pack-quantized weights with strategy %s are not read", where, q.Strategy)
	}
	return q, nil
}

// compressedRead reads compressed weight w's tensors in scheme c and
// decodes its scales (c.scaleShape, row-major), an NVFP4 weight's
// divided by its global scale, in f32, as compressed-tensors divides
// before it multiplies.
func (l *Loaded) compressedRead(w WeightSpec, c *CompressedQuant) (raw map[string][]byte, dtype map[string]safetensors.DType, scales []float32, err error) {
	p, _ := packedPrefix(w.Name)
	raw, dtype, err = l.readSources(w.compressedSources(c, l.ckpt.Has))
	if err != nil {
		return nil, nil, nil, err
	}
	scales = make([]float32, elements(c.scaleShape(w.Shape[0], w.Shape[1])))
	safetensors.DecodeFloat32(scales, dtype[p+ctScale], raw[p+ctScale])
	if c.Format == ctNVFP4 {
		var global [1]float32
		safetensors.DecodeFloat32(global[:], dtype[p+ctGlobal], raw[p+ctGlobal])
		if !(global[0] > 0) || math.IsInf(float64(global[0]), 0) {
			l.releaseSources(raw)
			return nil, nil, nil, fmt.Errorf("tensor %q: %v, want a positive finite global scale", p+ctGlobal, global[0])
		}
		for i := range scales {
			scales[i] /= global[0]
		}
	}
	return raw, dtype, scales, nil
}
