package lmckpt

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
)

// EncoderValues draws the values of an encoder's tensor of shape from r,
// by kind, one Uniform draw an element whatever the kind (0 for a kind
// not listed): "linear" ±1.5/√fan_in (fan_in the last dimension, which
// keeps activations of order one), "bias" and "lnb" ±0.1, "lnw" 1±0.2,
// "embed" ±0.5, "relbias" ±1 (of the order of the scaled scores, so a
// relative position bias matters). The BERT-family and ModernBERT
// reference kits (bertref, modernbertref) write their weights with it.
func EncoderValues(r *Rand, kind string, shape []int) []float32 {
	n := 1
	for _, d := range shape {
		n *= d
	}
	v := make([]float32, n)
	fanIn := float64(shape[len(shape)-1])
	for i := range v {
		u := r.Uniform()
		switch kind {
		case "linear":
			v[i] = float32(1.5 * u / math.Sqrt(fanIn))
		case "bias", "lnb":
			v[i] = float32(0.1 * u)
		case "lnw":
			v[i] = float32(1 + 0.2*u)
		case "embed":
			v[i] = float32(0.5 * u)
		case "relbias":
			v[i] = float32(u)
		}
	}
	return v
}

// OrderedVocab marshals as a JSON object token → id in id order, as the
// tokenizers library writes a model's vocabulary (encoding/json would
// sort a map's keys).
type OrderedVocab []string

// MarshalJSON implements json.Marshaler.
func (v OrderedVocab) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for id, tok := range v {
		if id > 0 {
			b.WriteByte(',')
		}
		k, err := json.Marshal(tok)
		if err != nil {
			return nil, err
		}
		b.Write(k)
		fmt.Fprintf(&b, ":%d", id)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// ByteSymbols is GPT-2's bytes_to_unicode in vocabulary order, which
// byte-level BPE vocabularies (GPT-2's, CLIP's, ModernBERT's) start
// from: the printable bytes '!'..'~', 0xA1..0xAC and 0xAE..0xFF map to
// themselves, the other bytes, in order, to U+0100 onwards (so ' ' is
// "Ġ").
func ByteSymbols() []string {
	var cs []int
	in := map[int]bool{}
	for _, r := range [][2]int{{'!', '~'}, {0xA1, 0xAC}, {0xAE, 0xFF}} {
		for b := r[0]; b <= r[1]; b++ {
			cs = append(cs, b)
			in[b] = true
		}
	}
	n := 0
	for b := 0; b < 256; b++ {
		if !in[b] {
			cs = append(cs, 256+n)
			n++
		}
	}
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = string(rune(c))
	}
	return out
}
