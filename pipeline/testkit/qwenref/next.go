package qwenref

import (
	"fmt"
	"strings"

	"github.com/tputool/tputool/loader/safetensors"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
)

// Qwen3-Next (transformers' models/qwen3_next) is the design Qwen3.5
// derives from: the same hybrid layers, norms, gated attention, sparse
// block and MTP head, with the DeltaNet's projections stored fused
// (in_proj_qkvz [2·KeyDim + 2·ValueDim, H], in_proj_ba [2·VHeads, H]),
// their rows grouped by key head. Qwen3NextGatedDeltaNet's
// fix_query_key_value_ordering views in_proj_qkvz's output as
// [KHeads, 2·KDim + 2·r·VDim] (r = VHeads/KHeads) and splits each group
// into q and k of key head g, then v and z of value heads g·r..g·r+r-1;
// in_proj_ba's as [KHeads, 2·r], b then a of the same value heads. The
// reference runs a Qwen3-Next checkpoint by taking the rows back to
// Qwen3.5's four matrices (unfuseNext), so its forward pass is Qwen3.5's.

// nextGroup gives, for key head g, the rows of each part in Qwen3.5's
// matrices: q and k rows of in_proj_qkv, v rows of in_proj_qkv, z rows
// of in_proj_z (qkvz), and b and a rows (ba); each a [start, end) pair.
type nextGroup struct{ q, k, v, z, ba [2]int }

func (c Qwen35) nextGroup(g int) nextGroup {
	keyDim, r := c.KHeads*c.KDim, c.VHeads/c.KHeads
	vw := r * c.VDim
	return nextGroup{
		q:  [2]int{g * c.KDim, (g + 1) * c.KDim},
		k:  [2]int{keyDim + g*c.KDim, keyDim + (g+1)*c.KDim},
		v:  [2]int{2*keyDim + g*vw, 2*keyDim + (g+1)*vw},
		z:  [2]int{g * vw, (g + 1) * vw},
		ba: [2]int{g * r, (g + 1) * r},
	}
}

// rows are rows [span) of a row-major matrix of h columns.
func rows[T any](m []T, span [2]int, h int) []T { return m[span[0]*h : span[1]*h] }

// fuseNext builds a DeltaNet layer's in_proj_qkvz and in_proj_ba (rows
// of H values) from Qwen3.5's in_proj_qkv, in_proj_z, in_proj_b and
// in_proj_a.
func (c Qwen35) fuseNext(qkv, z, b, a []float32) (qkvz, ba []float32) {
	H := c.Hidden
	for g := 0; g < c.KHeads; g++ {
		s := c.nextGroup(g)
		qkvz = append(qkvz, rows(qkv, s.q, H)...)
		qkvz = append(qkvz, rows(qkv, s.k, H)...)
		qkvz = append(qkvz, rows(qkv, s.v, H)...)
		qkvz = append(qkvz, rows(z, s.z, H)...)
		ba = append(ba, rows(b, s.ba, H)...)
		ba = append(ba, rows(a, s.ba, H)...)
	}
	return qkvz, ba
}

// unfuseNext replaces every in_proj_qkvz and in_proj_ba in w by the
// Qwen3.5 matrices they hold: each group of KHeads splits as
// fix_query_key_value_ordering splits a projection's output.
func (c Qwen35) unfuseNext(w Weights) {
	H := c.Hidden
	keyDim, valueDim := c.KHeads*c.KDim, c.VHeads*c.VDim
	r := c.VHeads / c.KHeads
	groupQKVZ, groupBA := 2*c.KDim+2*r*c.VDim, 2*r
	for name, qkvz := range w {
		p, ok := strings.CutSuffix(name, "in_proj_qkvz.weight")
		if !ok {
			continue
		}
		ba := w.get(p + "in_proj_ba.weight")
		qkv := make([]float64, (2*keyDim+valueDim)*H)
		z := make([]float64, valueDim*H)
		b, a := make([]float64, c.VHeads*H), make([]float64, c.VHeads*H)
		for g := 0; g < c.KHeads; g++ {
			s := c.nextGroup(g)
			grp := qkvz[g*groupQKVZ*H : (g+1)*groupQKVZ*H] // [q | k | v | z] of key head g
			at := 0
			for _, part := range []struct {
				dst  []float64
				span [2]int
			}{{qkv, s.q}, {qkv, s.k}, {qkv, s.v}, {z, s.z}} {
				n := (part.span[1] - part.span[0]) * H
				copy(rows(part.dst, part.span, H), grp[at:at+n])
				at += n
			}
			gba := ba[g*groupBA*H : (g+1)*groupBA*H] // [b | a] of key head g
			copy(rows(b, s.ba, H), gba[:r*H])
			copy(rows(a, s.ba, H), gba[r*H:])
		}
		w[p+"in_proj_qkv.weight"], w[p+"in_proj_z.weight"] = qkv, z
		w[p+"in_proj_b.weight"], w[p+"in_proj_a.weight"] = b, a
		delete(w, name)
		delete(w, p+"in_proj_ba.weight")
	}
}

// writeNext writes the Qwen3-Next checkpoint: the Qwen3.5 layout's draws
// (Tensors, in order), the DeltaNet projections fused (fuseNext), and with
// Stacked the experts as writeStacked stacks them.
func (c Qwen35) writeNext(dir string) error {
	if c.VHeads%c.KHeads != 0 {
		return fmt.Errorf("qwenref: VHeads %d is not a multiple of KHeads %d", c.VHeads, c.KHeads)
	}
	dtype := c.DType
	if dtype == "" {
		dtype = safetensors.F32
	}
	rnd := lmckpt.NewRand(c.Seed)
	tensors := c.Tensors()
	vals := map[string][]float32{}
	for _, t := range tensors {
		vals[t.Name] = fill(rnd, t)
	}
	var ts []safetensors.Tensor
	put := func(name string, shape []int, v []float32) error {
		st, err := safetensors.Float32Tensor(name, dtype, shape, v)
		if err != nil {
			return fmt.Errorf("tensor %s: %w", name, err)
		}
		ts = append(ts, st)
		return nil
	}
	keyDim, valueDim := c.KHeads*c.KDim, c.VHeads*c.VDim
	for _, t := range tensors {
		p, isQKV := strings.CutSuffix(t.Name, "in_proj_qkv.weight")
		switch {
		case isQKV:
			qkvz, ba := c.fuseNext(vals[t.Name], vals[p+"in_proj_z.weight"], vals[p+"in_proj_b.weight"], vals[p+"in_proj_a.weight"])
			if err := put(p+"in_proj_qkvz.weight", []int{2*keyDim + 2*valueDim, c.Hidden}, qkvz); err != nil {
				return err
			}
			if err := put(p+"in_proj_ba.weight", []int{2 * c.VHeads, c.Hidden}, ba); err != nil {
				return err
			}
		case strings.HasSuffix(t.Name, "in_proj_z.weight"), strings.HasSuffix(t.Name, "in_proj_b.weight"), strings.HasSuffix(t.Name, "in_proj_a.weight"):
		case c.Stacked && strings.Contains(t.Name, ".mlp.experts."):
		default:
			if err := put(t.Name, t.Shape, vals[t.Name]); err != nil {
				return err
			}
		}
	}
	if c.Stacked {
		H, I := c.Hidden, c.MoEIntermediate
		for _, p := range c.expertPrefixes() {
			gateUp, down := stack(vals, p, c.Experts)
			if err := put(p+"gate_up_proj", []int{c.Experts, 2 * I, H}, gateUp); err != nil {
				return err
			}
			if err := put(p+"down_proj", []int{c.Experts, H, I}, down); err != nil {
				return err
			}
		}
	}
	return lmckpt.WriteCheckpoint(dir, c.ConfigJSON(), ts)
}

// TinyQwen3Next is TinyQwen35MoE in Qwen3-Next's layout, with more value
// heads per key head (3) so that a group's v and z hold several heads.
func TinyQwen3Next() Qwen35 {
	c := TinyQwen35MoE()
	c.Next, c.KHeads, c.VHeads, c.Seed = true, 2, 6, 80
	return c
}
