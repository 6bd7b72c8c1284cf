package kernels

import (
	"fmt"
	"sync"
)

// Grouped int4: the 4-bit weights of the Hub's GPTQ, AWQ and
// compressed-tensors checkpoints, held at their stored width. B [n, k] is
// held as packed (GemmInt4NT's layout: n rows of k/2 bytes, the low nibble
// first, value = nibble − 8), scales f32 [n, k/group], one per group of
// group input columns, and, for checkpoints with zero points, mins f32
// [k/group, n] (by group, then output: the checkpoints' own order):
//
//	B[j, p] = (nibble − 8) · scales[j, p/group] + mins[p/group, j]
//
// A checkpoint's W = s·(q − z) is this with nibble q, scale s and
// min s·(8 − z); for s of 16 bits (f16 or bf16) and z an integer up to 16
// both terms and their sum are exact in f32, so B is the checkpoint's W
// to the bit.
//
// The kernels are the int4 ones (nibble.go) with each row's scales as its
// own table: a row's block codes are the same for every row (block b's
// code is its group, b·32/group), so they are made once per shape and
// kept (int4GroupCodes). Groups of 16 are the split format: two codes a
// block, 2b and 2b+1. The mins add Σ_g mins[g, j]·(the sum of the
// activations over group g) to each output: k/group AXPYs over the
// outputs a row of A.

// MaxInt4Groups is the most groups a row of a grouped int4 matrix may
// have: a block's scale code is a byte.
const MaxInt4Groups = 256

// CheckInt4Groups reports whether a matrix of k input columns can be held
// as grouped int4 with groups of group columns (nil if it can).
func CheckInt4Groups(k, group int) error {
	switch {
	case group != Int4Block/2 && (group <= 0 || group%Int4Block != 0):
		return fmt.Errorf("groups of %d columns: want %d or a positive multiple of %d", group, Int4Block/2, Int4Block)
	case k%Int4Block != 0:
		return fmt.Errorf("%d columns are not a whole number of blocks of %d", k, Int4Block)
	case k%group != 0:
		return fmt.Errorf("%d columns are not a whole number of groups of %d", k, group)
	case k/group > MaxInt4Groups:
		return fmt.Errorf("%d groups a row: at most %d", k/group, MaxInt4Groups)
	}
	return nil
}

// int4GroupCodes are the block codes of grouped int4 matrices, by shape:
// n rows of k/32 codes, block b's code b·32/group (groups of 16: k/16
// codes, 0, 1, 2, ...). They are shared by
// every matrix of the shape and kept for the life of the process (a model
// has a handful of shapes; a code a block is 1/16 of the packed values).
var int4GroupCodes sync.Map // [3]int{n, k, group} → []byte

func int4GroupCodesOf(n, k, group int) []byte {
	key := [3]int{n, k, group}
	if c, ok := int4GroupCodes.Load(key); ok {
		return c.([]byte)
	}
	span := min(group, Int4Block)
	nb := k / span
	codes := make([]byte, n*nb)
	for b := 0; b < nb; b++ {
		codes[b] = byte(b * span / group)
	}
	for j := 1; j < n; j++ {
		copy(codes[j*nb:(j+1)*nb], codes[:nb])
	}
	c, _ := int4GroupCodes.LoadOrStore(key, codes)
	return c.([]byte)
}

// int4GroupsCode is the nibble format of a grouped int4 matrix with
// scales [n, k/group] (split for groups of 16).
func int4GroupsCode(scales []float32, ng, group int) *nibbleCode {
	return &nibbleCode{lut: &int4LUT, vals: int4Vals, pairs: &int4Pairs, rows: scales, stride: ng, split: group < Int4Block}
}

func checkInt4Groups(name string, n, k int, packed []byte, scales, mins []float32, group int) {
	if err := CheckInt4Groups(k, group); err != nil {
		panic(fmt.Sprintf("kernels: %s: %v", name, err))
	}
	checkNibbles(name, n, k, len(packed), n*k/Int4Block)
	ng := k / group
	if len(scales) < n*ng || mins != nil && len(mins) < n*ng {
		panic(fmt.Sprintf("kernels: %s: %d scales and %d mins, need %d (n=%d, k=%d, group=%d)", name, len(scales), len(mins), n*ng, n, k, group))
	}
}

// GemmInt4GroupsNT is GemmF32NT with a grouped int4 B (packed, scales and
// mins, nil for none, as above). C is overwritten. It panics on a group
// CheckInt4Groups refuses or a slice too short.
func GemmInt4GroupsNT(m, n, k int, a []float32, lda int, packed []byte, scales, mins []float32, group int, c []float32, ldc int) {
	gemmGroups(&[3]string{"GemmInt4GroupsNT A", "GemmInt4GroupsNT C", "GemmInt4GroupsNT"}, int4GroupsCode, m, n, k, a, lda, packed, scales, mins, group, c, ldc)
}

// gemmGroups is the product of a grouped nibble matrix in the format
// code makes of its scales (int4's, or FP4's half-scales), plus the mins'
// part where there are mins, as GemmInt4GroupsNT says; names name A, C
// and the product in panics (constants: the decode path builds no
// string).
func gemmGroups(names *[3]string, code func(scales []float32, ng, group int) *nibbleCode,
	m, n, k int, a []float32, lda int, packed []byte, scales, mins []float32, group int, c []float32, ldc int) {
	checkMat(names[0], m, k, lda, len(a))
	checkMat(names[1], m, n, ldc, len(c))
	if k == 0 || n == 0 {
		emptyProduct(m, n, k, c, ldc)
		return
	}
	checkInt4Groups(names[2], n, k, packed, scales, mins, group)
	gemmNibbles(code(scales, k/group, group), m, n, k, a, lda, packed, int4GroupCodesOf(n, k, group), c, ldc)
	if mins != nil {
		addGroupMins(m, n, k, a, lda, mins, group, c, ldc)
	}
}

// addGroupMins adds to C [m, n] the mins' part of the product: row i,
// column j gets Σ_g mins[g, j] · Σ_{p in group g} A[i, p], one AXPY of
// a row of mins a group and row of A.
func addGroupMins(m, n, k int, a []float32, lda int, mins []float32, group int, c []float32, ldc int) {
	ng := k / group
	for i := 0; i < m; i++ {
		row := a[i*lda : i*lda+k]
		ci := c[i*ldc : i*ldc+n]
		for g := 0; g < ng; g++ {
			var s0, s1, s2, s3 float32
			x := row[g*group : (g+1)*group]
			for p := 0; p+3 < len(x); p += 4 {
				s0 += x[p]
				s1 += x[p+1]
				s2 += x[p+2]
				s3 += x[p+3]
			}
			axpy((s0+s1)+(s2+s3), mins[g*n:(g+1)*n], ci)
		}
	}
}

// GemmInt4GroupsQ8NT is GemmInt4GroupsNT with A's rows quantised to int8
// per block of 32, as GemmInt4Q8NT's (VPDPBUSD where it runs); the mins
// multiply the group sums of the quantised rows, so that the product is
// that of the weight and the activations the int8 path sees
// (FakeQuantizeQ8). It panics as GemmInt4GroupsNT does.
func GemmInt4GroupsQ8NT(m, n, k int, a []float32, lda int, packed []byte, scales, mins []float32, group int, c []float32, ldc int) {
	checkMat("GemmInt4GroupsQ8NT A", m, k, lda, len(a))
	checkMat("GemmInt4GroupsQ8NT C", m, n, ldc, len(c))
	if k == 0 || n == 0 || m == 0 {
		emptyProduct(m, n, k, c, ldc)
		return
	}
	checkInt4Groups("GemmInt4GroupsQ8NT", n, k, packed, scales, mins, group)
	aq := gemmNibblesQ8(int4GroupsCode(scales, k/group, group), m, n, k, a, lda, packed, int4GroupCodesOf(n, k, group), c, ldc)
	if mins == nil {
		return
	}
	if aq == nil { // VNNI quantised the rows in its own form
		var buf *[]float32
		buf, aq = f32Scratch(m * k)
		defer f32Pool.Put(buf)
		fakeQuantizeRows(aq, a, lda, m, k)
	}
	addGroupMins(m, n, k, aq, k, mins, group, c, ldc)
}

// DequantizeInt4Groups decodes a grouped int4 matrix [n, k] (as
// GemmInt4GroupsNT takes it) into f32.
func DequantizeInt4Groups(n, k int, packed []byte, scales, mins []float32, group int) []float32 {
	checkInt4Groups("DequantizeInt4Groups", n, k, packed, scales, mins, group)
	out := make([]float32, n*k)
	ng := k / group
	for j := 0; j < n; j++ {
		for p := 0; p < k; p++ {
			b := packed[(j*k+p)/2]
			v := float32(b&15) - 8
			if p%2 == 1 {
				v = float32(b>>4) - 8
			}
			w := v * scales[j*ng+p/group]
			if mins != nil {
				w += mins[(p/group)*n+j]
			}
			out[j*k+p] = w
		}
	}
	return out
}
