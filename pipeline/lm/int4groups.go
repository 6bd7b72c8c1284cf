package lm

import "fmt"

// Grouped int4: the 4-bit weights of GPTQ, AWQ and compressed-tensors'
// pack-quantized checkpoints (intSource) held at their stored width,
// in tpu/cpu/kernels' grouped int4 layout (kernels.GemmInt4GroupsNT):
// packed nibbles [out, in/2] (the low nibble first), an f32 scale per
// group and output [out, in/group] and, where some zero point is not 8,
// mins [in/group, out], so that
//
//	W[o, i] = (q − 8) · s + s · (8 − z) = s · (q − z)
//
// for the stored value q, scale s and zero point z of (o, i)'s group:
// exact in f32 for 16-bit scales.

// MaxInt4Groups is the most groups a row of a grouped int4 matrix may
// have (kernels.MaxInt4Groups: a block's scale code is a byte).
const MaxInt4Groups = 256

// Int4GroupsFit reports whether a matrix of in input columns can be held
// as grouped int4 in groups of group columns (kernels.CheckInt4Groups):
// groups of 16 or of whole blocks of Int4Block, whole blocks and whole
// groups a row, at most MaxInt4Groups of them.
func Int4GroupsFit(in, group int) bool {
	return (group == Int4Block/2 || group > 0 && group%Int4Block == 0) && in%Int4Block == 0 && in%group == 0 && in/group <= MaxInt4Groups
}

// Int4GroupsLayout is how a weight [out, in] is held as grouped int4:
// groups of Group input columns, mins [in/Group, out] where Mins, and,
// where Permuted (GPTQ's activation order: a g_idx that does not keep the
// groups in input order), its columns sorted by group, held with the
// position of each original column, inv [in] int32, so that W[:, i] =
// held[:, inv[i]].
type Int4GroupsLayout struct {
	Group    int
	Mins     bool
	Permuted bool
	// FP4: the values are NVFP4's E2M1 codes and the scales half of each
	// group's effective scale (an NVFP4 expert stack, whose experts each
	// have a global scale of their own: nvfp4.go); no mins.
	FP4 bool
}

// int4Source is the intSource of weight name when the checkpoint stores
// it as integer codes an executor can hold as grouped int4: 4 bits, in
// groups of equal size that Int4GroupsFit takes (in input order, or in
// any order with every group the same size: then order is the columns
// sorted by group, stably), and not a weight the embedding gathers rows
// of (EmbedWeights). It returns nil (and no error) for other weights,
// with the pages it read released; the caller releases src's.
func (l *Loaded) int4Source(name string) (src *intSource, lay Int4GroupsLayout, order []int32, err error) {
	if src, err = l.intSourceOf(name, 4); src == nil {
		return nil, lay, nil, err
	}
	lay.Group = src.in / src.groups
	if !Int4GroupsFit(src.in, lay.Group) {
		src.release()
		return nil, lay, nil, nil
	}
	if !src.sequence {
		// Sort the columns by group (a counting sort, stable), if every
		// group has Group of them.
		start := make([]int, src.groups+1)
		for _, g := range src.groupOf {
			start[g+1]++
		}
		for g := range src.groups {
			if start[g+1] != lay.Group {
				src.release()
				return nil, lay, nil, nil
			}
			start[g+1] += start[g]
		}
		order = make([]int32, src.in)
		for i, g := range src.groupOf {
			order[start[g]] = int32(i)
			start[g]++
		}
		lay.Permuted = true
	}
	lay.Mins = src.hasMins()
	return src, lay, order, nil
}

// hasMins reports whether some zero point of src is not 8 (its weights
// then need mins).
func (src *intSource) hasMins() bool {
	for _, z := range src.zeros {
		if z != 8 {
			return true
		}
	}
	return false
}

// StoredInt4Groups reports whether an executor may hold weight name as
// grouped int4 (int4Source), and how: a matrix, or an expert stack [E,
// out, in] a checkpoint stores as one part per expert projection
// (WeightSpec.Parts), every part held so in groups of one size and in
// input order (the stack has mins where a part has them).
func (l *Loaded) StoredInt4Groups(name string) (Int4GroupsLayout, bool) {
	if h, ok := l.int4Held[name]; ok {
		return h.lay, h.ok
	}
	var h int4Held
	if w, stack := l.assembledStack(name); stack {
		h.ok = true
		for i, p := range w.Parts {
			pl, ok := l.StoredInt4Groups(p.Name)
			if !ok || pl.Permuted || i > 0 && (pl.Group != h.lay.Group || pl.FP4 != h.lay.FP4) {
				h = int4Held{}
				break
			}
			h.lay.Group, h.lay.FP4 = pl.Group, pl.FP4
			h.lay.Mins = h.lay.Mins || pl.Mins
		}
	} else if l.nvfp4Part(name) {
		h = int4Held{Int4GroupsLayout{Group: NVFP4Group, FP4: true}, true}
	} else {
		src, lay, _, err := l.int4Source(name)
		h = int4Held{lay, err == nil && src != nil}
		if src != nil {
			src.release()
		}
	}
	if l.int4Held == nil {
		l.int4Held = map[string]int4Held{}
	}
	l.int4Held[name] = h
	return h.lay, h.ok
}

// int4Held is a remembered StoredInt4Groups answer.
type int4Held struct {
	lay Int4GroupsLayout
	ok  bool
}

// int8Held is a remembered StoredInt8Groups answer.
type int8Held struct {
	group int
	ok    bool
}

// Int4GroupsInto writes weight name (StoredInt4Groups) as grouped int4:
// packed [out, in/2], scales [out, in/group], mins [in/group, out] where
// the layout has them and inv [in] where it is permuted (nil otherwise),
// then releases the mapping's pages; an expert stack as int4StackInto
// says.
func (l *Loaded) Int4GroupsInto(name string, packed []byte, scales, mins []float32, inv []int32) error {
	if _, stack := l.assembledStack(name); stack {
		if inv != nil {
			return fmt.Errorf("tensor %q: an expert stack is held in input order, with no permutation", name)
		}
		return l.int4StackInto(name, packed, scales, mins)
	}
	if l.nvfp4Part(name) {
		if mins != nil || inv != nil {
			return fmt.Errorf("tensor %q: NVFP4 is held with no mins and no permutation", name)
		}
		return l.fp4GroupsInto(name, packed, scales)
	}
	src, lay, order, err := l.int4Source(name)
	if err != nil {
		return err
	}
	if src == nil {
		return fmt.Errorf("tensor %q: the checkpoint does not store it as 4-bit integers in groups tputool holds", name)
	}
	defer src.release()
	out, in := src.out, src.in
	ng := in / lay.Group
	if len(packed) != out*in/2 || len(scales) != out*ng || (mins != nil) != lay.Mins || mins != nil && len(mins) != out*ng ||
		(inv != nil) != lay.Permuted || inv != nil && len(inv) != in {
		return fmt.Errorf("tensor %q: [%d, %d] in groups of %d needs %d bytes, %d scales, mins: %v, a permutation: %v; destination holds %d, %d, %d and %d",
			name, out, in, lay.Group, out*in/2, out*ng, lay.Mins, lay.Permuted, len(packed), len(scales), len(mins), len(inv))
	}
	col := func(j int) int { return j }
	if lay.Permuted {
		for j, i := range order {
			inv[i] = int32(j)
		}
		col = func(j int) int { return int(order[j]) }
	}
	for o := range out {
		row := packed[o*in/2 : (o+1)*in/2]
		for i := range row {
			row[i] = byte(src.value(o, col(2*i))) | byte(src.value(o, col(2*i+1)))<<4
		}
		for g := range ng {
			s, z := src.scales[g*out+o], src.zeros[g*out+o]
			scales[o*ng+g] = s
			if mins != nil {
				mins[g*out+o] = s * (8 - z)
			}
		}
	}
	return nil
}

// Symmetric 8-bit checkpoints (GPTQ with sym, compressed-tensors
// pack-quantized 8-bit symmetric) are --quantize int8's own layout: int8
// values q − 128 with a scale per group of input columns in input order,
// every zero point 128, so that W = s · (q − 128). An executor may hold
// them so (the CPU engine's int8 kernels, nn.DequantizeInt8).
//
// So may it hold the 4-bit weights that grouped int4 does not take
// (Int4GroupsFit: more than MaxInt4Groups groups a row, or groups of 16
// over a row that is not whole blocks of 32) when their groups are in
// input order: q − z, an integer from −16
// to 15 for the stored value q and the integer zero point z, times the
// group's scale is W exactly, a byte and an f32 per group a weight where
// decoding would take two bytes.

// int8Source is the intSource of weight name when the checkpoint stores
// it as 8-bit codes in groups in input order, every zero point 128, or
// as 4-bit codes in groups in input order that int4Source does not take,
// with integer zero points; not as a weight the embedding gathers rows
// of. The group size comes with it.
func (l *Loaded) int8Source(name string) (*intSource, int, error) {
	bits := 8
	src, err := l.intSourceOf(name, 8)
	if src == nil && err == nil {
		bits = 4
		src, err = l.intSourceOf(name, 4)
	}
	if src == nil {
		return nil, 0, err
	}
	group := src.in / src.groups
	if !src.sequence || bits == 4 && Int4GroupsFit(src.in, group) {
		src.release()
		return nil, 0, nil
	}
	for _, z := range src.zeros {
		if bits == 8 && z != 128 || bits == 4 && (z != float32(int32(z)) || z < -112 || z > 127) {
			src.release()
			return nil, 0, nil
		}
	}
	return src, group, nil
}

// StoredInt8Groups reports whether an executor may hold weight name as
// int8 with a scale per group of group input columns, as the checkpoint
// stores it (int8Source), or, for an expert stack, as its parts are, all
// in groups of one size.
func (l *Loaded) StoredInt8Groups(name string) (group int, ok bool) {
	if h, ok := l.int8Held[name]; ok {
		return h.group, h.ok
	}
	group, ok = l.storedInt8Groups(name)
	if l.int8Held == nil {
		l.int8Held = map[string]int8Held{}
	}
	l.int8Held[name] = int8Held{group, ok}
	return group, ok
}

func (l *Loaded) storedInt8Groups(name string) (group int, ok bool) {
	if w, stack := l.assembledStack(name); stack {
		for i, p := range w.Parts {
			g, ok := l.StoredInt8Groups(p.Name)
			if !ok || i > 0 && g != group {
				return 0, false
			}
			group = g
		}
		return group, true
	}
	src, group, err := l.int8Source(name)
	if src != nil {
		src.release()
	}
	return group, err == nil && src != nil
}

// Int8GroupsInto writes weight name (StoredInt8Groups) as int8 q [out,
// in] (q − 128 of the stored values) and scales [out, in/group], then
// releases the mapping's pages; an expert stack as its parts' one after
// the other ([E, out, in] and [E, out, in/group]).
func (l *Loaded) Int8GroupsInto(name string, q []int8, scales []float32) error {
	if w, stack := l.assembledStack(name); stack {
		group, ok := l.StoredInt8Groups(name)
		if !ok {
			return fmt.Errorf("tensor %q: its parts are not all integers in groups tputool holds as int8", name)
		}
		at, sat := 0, 0
		for _, p := range w.Parts {
			n := elements(p.Shape)
			ns := n / group
			if at+n > len(q) || sat+ns > len(scales) {
				return fmt.Errorf("tensor %q: its parts hold more than the destination's %d values", name, len(q))
			}
			if err := l.Int8GroupsInto(p.Name, q[at:at+n], scales[sat:sat+ns]); err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			at, sat = at+n, sat+ns
		}
		if at != len(q) || sat != len(scales) {
			return fmt.Errorf("tensor %q: its parts hold %d values and %d scales, the destination %d and %d", name, at, sat, len(q), len(scales))
		}
		return nil
	}
	src, group, err := l.int8Source(name)
	if err != nil {
		return err
	}
	if src == nil {
		return fmt.Errorf("tensor %q: the checkpoint does not store it as integers in groups tputool holds as int8", name)
	}
	defer src.release()
	out, in := src.out, src.in
	ng := in / group
	if len(q) != out*in || len(scales) != out*ng {
		return fmt.Errorf("tensor %q: [%d, %d] in groups of %d needs %d values and %d scales; destination holds %d and %d", name, out, in, group, out*in, out*ng, len(q), len(scales))
	}
	for o := range out {
		row := q[o*in : (o+1)*in]
		for g := range ng {
			z := int(src.zeros[g*out+o]) // 128 for 8 bits; int8Source checked that q − z fits
			for i := g * group; i < (g+1)*group; i++ {
				row[i] = int8(int(src.value(o, i)) - z)
			}
			scales[o*ng+g] = src.scales[g*out+o]
		}
	}
	return nil
}

// int4StackInto writes the expert stack name (StoredInt4Groups) as
// grouped int4: its parts' packed values and scales one after the other
// (packed [E, out, in/2], scales [E, out, in/group]) and, when the stack
// has mins, mins [E, in/group, out] (zero for a part without).
func (l *Loaded) int4StackInto(name string, packed []byte, scales, mins []float32) error {
	w, _ := l.spec(name)
	lay, ok := l.StoredInt4Groups(name)
	if !ok {
		return fmt.Errorf("tensor %q: its parts are not all 4-bit integers in groups tputool holds", name)
	}
	e, out, in := w.Shape[0], w.Shape[1], w.Shape[2]
	ng := in / lay.Group
	if len(packed) != e*out*in/2 || len(scales) != e*out*ng || (mins != nil) != lay.Mins || mins != nil && len(mins) != e*ng*out {
		return fmt.Errorf("tensor %q: [%d, %d, %d] in groups of %d needs %d bytes, %d scales and mins: %v; destination holds %d, %d and %d",
			name, e, out, in, lay.Group, e*out*in/2, e*out*ng, lay.Mins, len(packed), len(scales), len(mins))
	}
	row := 0 // the stack's row the part starts at, over all experts
	for _, p := range w.Parts {
		rows := p.Shape[0]
		if p.Shape[1] != in || row%out+rows > out {
			return fmt.Errorf("tensor %q: part %q [%d, %d] does not fit expert %d's rows", name, p.Name, rows, p.Shape[1], row/out)
		}
		pl, _ := l.StoredInt4Groups(p.Name)
		var pm []float32
		if pl.Mins {
			pm = make([]float32, ng*rows)
		}
		if err := l.Int4GroupsInto(p.Name, packed[row*in/2:(row+rows)*in/2], scales[row*ng:(row+rows)*ng], pm, nil); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		if mins != nil {
			x, o := row/out, row%out
			for g := range ng {
				dst := mins[(x*ng+g)*out+o : (x*ng+g)*out+o+rows]
				if pm == nil {
					clear(dst)
				} else {
					copy(dst, pm[g*rows:(g+1)*rows])
				}
			}
		}
		row += rows
	}
	if row != e*out {
		return fmt.Errorf("tensor %q: its parts hold %d rows, the stack %d", name, row, e*out)
	}
	return nil
}

// intSourceOf is the intSource of weight name when the checkpoint stores
// it as integer codes of bits bits (GPTQ, AWQ, compressed-tensors'
// pack-quantized and naive int8; NVFP4 as 8-bit) in whole groups of one
// size, and not as a weight the embedding gathers rows of; nil (and no
// error) for other weights.
func (l *Loaded) intSourceOf(name string, bits int) (*intSource, error) {
	w, how := l.encoding(name)
	spec := l.Model.Spec()
	var src *intSource
	var err error
	var ct *CompressedQuant
	if how == "compressed" {
		ct = spec.Compressed.ForWeight(w.Name)
	}
	switch {
	case how == "packed" && spec.Packed.ForWeight(w.Name).Bits == bits:
		src, err = l.packedSource(w)
	case ct != nil && (ct.Format == "pack-quantized" || ct.Format == "naive-quantized") && ct.Bits == bits,
		ct != nil && ct.Format == ctNVFP4 && bits == 8: // NVFP4 reads as 8-bit codes
		src, err = l.compressedInts(w)
	case how == "bitnet" && bits == 8: // ternary codes read as 8-bit ones, in groups of 64 columns
		src, err = l.bitnetInts(w)
	default:
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if src.groups == 0 || src.in%src.groups != 0 || l.gathered(name) {
		src.release()
		return nil, nil
	}
	// In input order, groups of in/groups columns: not when the last
	// group is short (a group_size that does not divide in).
	if src.sequence {
		size := src.in / src.groups
		for i, g := range src.groupOf {
			if int(g) != i/size {
				src.sequence = false
				break
			}
		}
	}
	return src, nil
}

// gathered reports whether the embedding gathers rows of weight name
// (EmbedWeights; a tied head is one): such weights are held as the
// embedding reads them, never in a form only products read.
func (l *Loaded) gathered(name string) bool {
	for _, e := range l.Model.EmbedWeights() {
		if e.Name == name {
			return true
		}
	}
	return false
}

// assembledStack is weight name's spec when it is an expert stack [E, out,
// in] the checkpoint stores as its parts (one tensor per expert
// projection) rather than whole.
func (l *Loaded) assembledStack(name string) (WeightSpec, bool) {
	w, ok := l.spec(name)
	return w, ok && len(w.Shape) == 3 && len(w.Parts) > 0 && !l.ckpt.Has(name)
}
