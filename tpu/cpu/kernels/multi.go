package kernels

import (
	"fmt"
	"slices"
	"strings"
)

// Gemv is one product of GemvMulti: C[j] = Σ_p A[p]·B[j,p] for the N rows
// of one weight matrix B (row stride LDB) against one row of activations A
// [k]. B is given in exactly one of F32, BF16, F16 (raw bits), I8 (with
// Scales [N, k/Group], as GemmInt8NT takes them), MXFP4 (with
// MXScales, as GemmMXFP4NT takes them: rows of k/2 bytes, LDB unused) or
// Int4 (with Int4Codes and the 256-entry Int4Table, as GemmInt4NT takes
// them, or, grouped int4, with Int4Scales [N, k/Int4Group] and Int4Mins
// [k/Int4Group, N] or nil, as GemmInt4GroupsNT takes them; LDB unused).
// Int4Q8 (Int8Q8) quantises A to int8 per block of 32 first and
// multiplies as GemmInt4Q8NT (GemmInt8Q8NT) does: in integers with
// AVX512-VNNI where that kernel would.
type Gemv struct {
	A []float32
	C []float32 // [N], overwritten
	N int

	F32       []float32
	BF16, F16 []uint16
	I8        []int8
	Scales    []float32
	Group     int
	MXFP4     []byte
	MXScales  []byte
	Int4      []byte
	Int4Codes []byte
	Int4Table []float32
	// Grouped int4 (Int4Scales set): the codes are the shape's own.
	Int4Scales, Int4Mins []float32
	Int4Group            int
	Int4Q8               bool
	// Int4FP4: a grouped Int4 holds FP4 E2M1 codes and Int4Scales half
	// of each group's scale (GemmFP4GroupsNT; no mins).
	Int4FP4 bool
	// NVFP4: Int4 holds NVFP4's E2M1 codes, Int4Codes its scale bytes
	// (one per 16 values) and Int4Table their half-scales (GemmNVFP4NT).
	NVFP4  bool
	Int8Q8 bool
	LDB    int
}

// GemvMulti computes several GEMVs of the same k in one parallel pass over
// all their rows: the routed experts of one token at decode, each a
// matrix of a few MiB, whose rows one call spreads over the pool at once
// instead of one fork and join per matrix (the small matrices alone leave
// the pool waiting on each join, and their streams stop short of the
// machine's bandwidth). Each product's rows are split as one GEMV's are,
// and a chunk never spans two products. It panics if a slice is too short
// for its product.
func GemvMulti(k int, ps []Gemv) {
	total := 0
	for i := range ps {
		checkGemv(i, k, &ps[i])
		total += ps[i].N
	}
	if total == 0 {
		return
	}
	if k == 0 {
		for _, p := range ps {
			clear(p.C[:p.N])
		}
		return
	}
	// Chunks are numbered over the products' rows laid end to end; a chunk
	// that would cross into the next product stops at its end.
	grain := gemvGrain(k)
	chunks, starts := 0, make([]int, len(ps)+1) // starts: each product's first chunk
	for i, p := range ps {
		starts[i] = chunks
		chunks += (p.N + grain - 1) / grain
	}
	starts[len(ps)] = chunks
	// prep is what each product needs beside its weights (gemvPrep); the
	// pooled quantised rows go back when the products are done.
	prep := make([]gemvPrep, len(ps))
	defer func() {
		for _, q := range prep {
			if q.q4 != nil {
				q8Pool.Put(q.q4)
			}
			if q.q8 != nil {
				q8LanesPool.Put(q.q8)
			}
			if q.apBuf != nil {
				f32Pool.Put(q.apBuf)
			}
		}
	}()
	vnni := hasVNNI() && k%64 == 0
	for i, p := range ps {
		q := &prep[i]
		q.a = p.A[:k]
		switch {
		case p.MXFP4 != nil:
			q.code, q.codes = &mxfp4Code, p.MXScales
		case p.Int4 != nil && p.Int4Scales != nil && p.Int4FP4:
			q.code, q.codes = fp4GroupsCode(p.Int4Scales, k/p.Int4Group, p.Int4Group), int4GroupCodesOf(p.N, k, p.Int4Group)
		case p.Int4 != nil && p.Int4Scales != nil:
			q.code, q.codes = int4GroupsCode(p.Int4Scales, k/p.Int4Group, p.Int4Group), int4GroupCodesOf(p.N, k, p.Int4Group)
		case p.Int4 != nil && p.NVFP4:
			q.code, q.codes = nvfp4Code(p.Int4Table), p.Int4Codes
		case p.Int4 != nil:
			q.code, q.codes = int4Code(p.Int4Table), p.Int4Codes
		}
		switch {
		case p.Int4 != nil && p.Int4Q8 && vnni && !q.code.split && q.code.lut == &int4LUT: // the VNNI kernel takes int4 values, a code a block
			q.q4 = q8Pool.Get().(*q8Row)
			q.q4.quantizeQ8(q.a)
		case p.I8 != nil && p.Int8Q8 && vnni && p.Group == 64:
			q.q8 = q8LanesPool.Get().(*q8Lanes)
			q.q8.quantize(q.a)
		case (p.Int4 != nil && p.Int4Q8) || (p.I8 != nil && p.Int8Q8):
			// int8 activations where the VNNI kernels do not run: the row
			// quantised and dequantised, for the f32 kernels.
			q.a = slices.Clone(q.a)
			FakeQuantizeQ8(q.a)
		}
		if p.Int4Mins != nil {
			// The mins multiply the row's group sums (of the quantised
			// row under Int4Q8, as GemmInt4GroupsQ8NT's).
			a := q.a
			if p.Int4Q8 && q.q4 != nil {
				a = slices.Clone(a)
				FakeQuantizeQ8(a)
			}
			q.sums = groupSums(a, p.Int4Group)
		}
		if q.code != nil && q.q4 == nil && nibblesPermuted(k) {
			// Nibble products read the activations permuted once, a block's
			// even values then its odd ones (gemvRowsNibblesPerm).
			q.apBuf, q.ap = f32Scratch(k)
			permuteBlocks(q.ap, q.a)
		}
	}
	Parallel(chunks, 1, func(lo, hi int) {
		i := 0
		for c := lo; c < hi; c++ {
			for starts[i+1] <= c {
				i++
			}
			p := &ps[i]
			j0 := (c - starts[i]) * grain
			j1 := min(j0+grain, p.N)
			q := &prep[i]
			switch {
			case p.F32 != nil:
				gemvRowsF32(q.a, p.F32[j0*p.LDB:], p.LDB, p.C[j0:j1])
			case p.BF16 != nil:
				gemvRowsBF16(q.a, p.BF16[j0*p.LDB:], p.LDB, p.C[j0:j1])
			case p.F16 != nil:
				gemvRowsF16(q.a, p.F16[j0*p.LDB:], p.LDB, p.C[j0:j1])
			case q.q4 != nil:
				dotInt4Q8(q.q4, q.code, j0, p.Int4[j0*k/2:j1*k/2], q.codes[j0*k/Int4Block:j1*k/Int4Block], p.C[j0:j1])
			case q.code != nil: // nibbles: MXFP4, int4, grouped int4 or FP4
				blocks := p.MXFP4
				if blocks == nil {
					blocks = p.Int4
				}
				blocks, codes := blocks[j0*k/2:], q.codes[j0*k/q.code.codeSpan():]
				if q.ap != nil { // the activations permuted once (AVX-512)
					gemvRowsNibblesPerm(q.code, j0, q.ap, blocks, codes, p.C[j0:j1])
				} else {
					gemvRowsNibbles(q.code, j0, q.a, blocks, codes, p.C[j0:j1])
				}
			case q.q8 != nil:
				ng := k / p.Group
				dotInt8Q8(q.q8, p.I8[j0*p.LDB:], p.LDB, p.Scales[j0*ng:], ng, p.C[j0:j1])
			default:
				ng := k / p.Group
				gemvRowsI8(q.a, p.I8[j0*p.LDB:], p.LDB, p.Scales[j0*ng:], ng, p.Group, p.C[j0:j1])
			}
			for g, sg := range q.sums { // a grouped int4 product's mins
				axpy(sg, p.Int4Mins[g*p.N+j0:g*p.N+j1], p.C[j0:j1])
			}
		}
	})
}

// gemvPrep is what one product of GemvMulti needs beside its weights: its
// row of activations a (quantised and dequantised under Int4Q8/Int8Q8
// where the VNNI kernels do not run), an int4 product's nibble format (its
// scale table), and its row quantised for the VNNI kernels (q4 for int4,
// q8 for int8 weights).
type gemvPrep struct {
	a     []float32
	code  *nibbleCode
	codes []byte // a nibble product's block codes
	// ap is a permuted (permuteBlocks) for a nibble product's rows, in
	// apBuf from f32Pool, where gemvRowsNibblesPerm runs.
	ap    []float32
	apBuf *[]float32
	sums  []float32 // a grouped int4 product's group sums of a, for its mins
	q4    *q8Row
	q8    *q8Lanes
}

// groupSums is the sums of a's groups of group values.
func groupSums(a []float32, group int) []float32 {
	s := make([]float32, len(a)/group)
	for g := range s {
		var t float32
		for _, v := range a[g*group : (g+1)*group] {
			t += v
		}
		s[g] = t
	}
	return s
}

// checkGemv checks product i of GemvMulti. The checks name it by a
// constant, so that the decode path builds no string; only a failing check
// pays for the product's index in its message.
func checkGemv(i, k int, p *Gemv) {
	defer func() {
		if r := recover(); r != nil {
			panic(strings.Replace(fmt.Sprint(r), "GemvMulti product", fmt.Sprintf("GemvMulti product %d", i), 1))
		}
	}()
	checkMat("GemvMulti product A", 1, k, k, len(p.A))
	checkMat("GemvMulti product C", 1, p.N, p.N, len(p.C))
	var nb int
	switch {
	case p.F32 != nil:
		nb = len(p.F32)
	case p.BF16 != nil:
		nb = len(p.BF16)
	case p.F16 != nil:
		nb = len(p.F16)
	case p.I8 != nil:
		nb = len(p.I8)
		if p.Int8Q8 && k%32 != 0 {
			panic(fmt.Sprintf("kernels: GemvMulti product: int8 activations need k a multiple of 32, got %d", k))
		}
		if k > 0 {
			checkGroups("GemvMulti product", p.N, k, p.Group, len(p.Scales))
		}
	case p.MXFP4 != nil:
		checkMXFP4("GemvMulti product", p.N, k, len(p.MXFP4), len(p.MXScales))
		return
	case p.Int4 != nil && p.Int4Scales != nil:
		checkInt4Groups("GemvMulti product", p.N, k, p.Int4, p.Int4Scales, p.Int4Mins, p.Int4Group)
		return
	case p.Int4 != nil && p.NVFP4:
		checkNibbles("GemvMulti product", p.N, k, len(p.Int4), len(p.Int4Codes)/2)
		checkInt4Table("GemvMulti product", p.Int4Table)
		return
	case p.Int4 != nil:
		checkNibbles("GemvMulti product", p.N, k, len(p.Int4), len(p.Int4Codes))
		checkInt4Table("GemvMulti product", p.Int4Table)
		return
	default:
		panic("kernels: GemvMulti product: no weight")
	}
	checkMat("GemvMulti product B", p.N, k, p.LDB, nb)
}
