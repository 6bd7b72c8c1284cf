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
// whole blocks of Int4Block a group, whole groups a row, at most
// MaxInt4Groups of them.
func Int4GroupsFit(in, group int) bool {
	return group > 0 && group%Int4Block == 0 && in%group == 0 && in/group <= MaxInt4Groups
}

// int4Source is the intSource of weight name when the checkpoint stores
// it as integer codes an executor can hold as grouped int4: 4 bits, groups
// in input order (no g_idx, or one that keeps the order) whose size
// Int4GroupsFit takes, and not a weight the embedding gathers
// rows of (EmbedWeights). It returns nil (and no error) for other weights.
func (l *Loaded) int4Source(name string) (*intSource, int, error) {
	w, how := l.encoding(name)
	var src *intSource
	var err error
	switch {
	case how == "packed" && l.Model.Spec().Packed.Bits == 4:
		src, err = l.packedSource(w)
	case how == "compressed" && l.Model.Spec().Compressed.Format == "pack-quantized" && l.Model.Spec().Compressed.Bits == 4:
		src, err = l.compressedInts(w)
	default:
		return nil, 0, nil
	}
	if err != nil || !src.sequence || src.groups == 0 || src.in%src.groups != 0 {
		return nil, 0, err
	}
	group := src.in / src.groups
	if !Int4GroupsFit(src.in, group) {
		return nil, 0, nil
	}
	for _, e := range l.Model.EmbedWeights() {
		if e.Name == name {
			return nil, 0, nil
		}
	}
	return src, group, nil
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
// grouped int4 (int4Source), with groups of group input columns, and
// whether it needs mins.
func (l *Loaded) StoredInt4Groups(name string) (group int, mins bool, ok bool) {
	src, group, err := l.int4Source(name)
	if err != nil || src == nil {
		return 0, false, false
	}
	return group, src.hasMins(), true
}

// Int4GroupsInto writes weight name (StoredInt4Groups) as grouped int4:
// packed [out, in/2], scales [out, in/group] and, when it needs them,
// mins [in/group, out] (nil otherwise), then releases the mapping's pages.
func (l *Loaded) Int4GroupsInto(name string, packed []byte, scales, mins []float32) error {
	src, group, err := l.int4Source(name)
	if err != nil {
		return err
	}
	if src == nil {
		return fmt.Errorf("tensor %q: the checkpoint does not store it as 4-bit integers in whole groups of 32", name)
	}
	defer src.release()
	out, in := src.out, src.in
	ng := in / group
	if len(packed) != out*in/2 || len(scales) != out*ng || (mins != nil) != src.hasMins() || mins != nil && len(mins) != out*ng {
		return fmt.Errorf("tensor %q: [%d, %d] in groups of %d needs %d bytes, %d scales and mins: %v; destination holds %d, %d and %d",
			name, out, in, group, out*in/2, out*ng, src.hasMins(), len(packed), len(scales), len(mins))
	}
	for o := range out {
		row := packed[o*in/2 : (o+1)*in/2]
		for i := range row {
			row[i] = byte(src.value(o, 2*i)) | byte(src.value(o, 2*i+1))<<4
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
