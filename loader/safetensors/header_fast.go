package safetensors

import (
	"bytes"
	"encoding/json"
	"math"
	"math/bits"
	"strings"
)

// parseHeaderFast parses a plainly valid header with a scanner written for
// its one shape: an object of {"dtype", "shape", "data_offsets"} objects
// with ASCII keys and integer arrays, plus an optional "__metadata__"
// object of strings. It is an order of magnitude faster than
// encoding/json on MoE checkpoints whose headers list tens of thousands of
// tensors (BenchmarkParseHeaderMoE). It accepts only what the strict path
// accepts, and returns ok=false on anything else (escapes, non-ASCII,
// unknown fields, duplicate keys, floats, any invalid value) so that
// ParseHeader's strict path decides and reports the precise error. The two
// agree on every header the fast path takes (TestParseHeaderFastAgrees,
// FuzzParseHeaderFast).
func parseHeaderFast(headerJSON []byte, dataSize int64) (*Header, bool) {
	s := newScanner(headerJSON)
	h := &Header{DataSize: dataSize}
	s.ws()
	if !s.eat('{') {
		return nil, false
	}
	n := sizeHint(bytes.Count(headerJSON, []byte(`"data_offsets"`)))
	seen := make(map[string]struct{}, n)
	h.Tensors = make([]TensorInfo, 0, n)
	// Shapes are carved out of one array: most tensors have 1 or 2 dims.
	s.dims = make([]int, 0, 2*n)
	s.ws()
	if !s.eat('}') {
		for {
			s.ws()
			name, ok := s.str()
			if !ok {
				return nil, false
			}
			if _, dup := seen[name]; dup {
				return nil, false
			}
			seen[name] = struct{}{}
			s.ws()
			if !s.eat(':') {
				return nil, false
			}
			s.ws()
			if name == "__metadata__" {
				if h.Metadata, ok = s.stringMap(0); !ok {
					return nil, false
				}
			} else {
				info, ok := s.entry(name, dataSize)
				if !ok {
					return nil, false
				}
				h.Tensors = append(h.Tensors, info)
			}
			s.ws()
			if s.eat('}') {
				break
			}
			if !s.eat(',') {
				return nil, false
			}
		}
	}
	s.ws()
	if s.i != len(s.b) {
		return nil, false
	}
	if sortAndCheckOverlap(h) != nil {
		return nil, false
	}
	return h, true
}

// sizeHint caps a capacity guessed by counting bytes in untrusted input: a
// hostile file of nothing but the counted pattern must not make the parser
// reserve memory many times its size before the scan fails. 64k entries
// covers the largest real checkpoints (a 128-expert MoE header lists about
// 1.2k tensors per shard, its index 19k); beyond that, append grows.
func sizeHint(n int) int { return min(n, 1<<16) }

type scanner struct {
	b   []byte
	src string // b as one string: names and values are its substrings
	i   int
	buf []int64 // scratch for integer arrays
	// dims is an arena for shapes; a shape is a capacity-capped slice of
	// it, so appending to one never writes over the next.
	dims []int
}

// newScanner converts b to a string once, so that the tens of thousands of
// names in an MoE header or index cost no allocation each (they share the
// one copy, which lives as long as any of them).
func newScanner(b []byte) scanner {
	return scanner{b: b, src: string(b)}
}

func (s *scanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

func (s *scanner) eat(c byte) bool {
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

// str reads a string of printable ASCII without escapes.
func (s *scanner) str() (string, bool) {
	if !s.eat('"') {
		return "", false
	}
	start := s.i
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch {
		case c == '"':
			v := s.src[start:s.i]
			s.i++
			return v, true
		case c == '\\' || c < 0x20 || c >= 0x80:
			return "", false
		}
		s.i++
	}
	return "", false
}

// int reads a JSON integer (no fraction or exponent) that fits int64.
func (s *scanner) int() (int64, bool) {
	neg := s.eat('-')
	start := s.i
	var v uint64
	for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
		d := uint64(s.b[s.i] - '0')
		if v > (math.MaxInt64-d)/10 {
			return 0, false
		}
		v = v*10 + d
		s.i++
	}
	n := s.i - start
	if n == 0 || (n > 1 && s.b[start] == '0') {
		return 0, false
	}
	if s.i < len(s.b) && (s.b[s.i] == '.' || s.b[s.i] == 'e' || s.b[s.i] == 'E') {
		return 0, false
	}
	if neg {
		return -int64(v), true
	}
	return int64(v), true
}

// ints reads an array of integers into s.buf (valid until the next call).
func (s *scanner) ints() ([]int64, bool) {
	if !s.eat('[') {
		return nil, false
	}
	out := s.buf[:0]
	defer func() { s.buf = out[:0] }()
	s.ws()
	if s.eat(']') {
		return out, true
	}
	for {
		s.ws()
		v, ok := s.int()
		if !ok {
			return nil, false
		}
		out = append(out, v)
		s.ws()
		if s.eat(']') {
			return out, true
		}
		if !s.eat(',') {
			return nil, false
		}
	}
}

// stringMap reads an object of string values; sizeHint pre-sizes the map.
// Keys and values are substrings of the scanner's one string, so equal
// shard names in an index cost nothing to repeat.
func (s *scanner) stringMap(sizeHint int) (map[string]string, bool) {
	if !s.eat('{') {
		return nil, false
	}
	m := make(map[string]string, sizeHint)
	s.ws()
	if s.eat('}') {
		return m, true
	}
	for {
		s.ws()
		k, ok := s.str()
		if !ok {
			return nil, false
		}
		if _, dup := m[k]; dup {
			return nil, false
		}
		s.ws()
		if !s.eat(':') {
			return nil, false
		}
		s.ws()
		v, ok := s.str()
		if !ok {
			return nil, false
		}
		m[k] = v
		s.ws()
		if s.eat('}') {
			return m, true
		}
		if !s.eat(',') {
			return nil, false
		}
	}
}

// skipValue steps over one JSON value without validating it; callers check
// the span with json.Valid or json.Unmarshal.
func (s *scanner) skipValue() bool {
	depth := 0
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch c {
		case '"':
			s.i++
			for s.i < len(s.b) && s.b[s.i] != '"' {
				if s.b[s.i] == '\\' {
					s.i++
				}
				s.i++
			}
			if s.i >= len(s.b) {
				return false // unterminated string (or a trailing backslash)
			}
			s.i++
		case '{', '[':
			depth++
			s.i++
		case '}', ']':
			if depth == 0 {
				return true // the end of the enclosing object
			}
			depth--
			s.i++
		case ',':
			if depth == 0 {
				return true
			}
			s.i++
		default:
			s.i++
		}
		if depth == 0 && (c == '"' || c == '}' || c == ']') {
			return true
		}
	}
	return depth == 0
}

// entry reads and validates one tensor entry with the strict path's rules.
func (s *scanner) entry(name string, dataSize int64) (TensorInfo, bool) {
	info := TensorInfo{Name: name}
	var shape []int
	var offs [2]int64
	var haveDType, haveShape, haveOffs bool
	if !s.eat('{') {
		return info, false
	}
	for first := true; ; first = false {
		s.ws()
		if first && s.eat('}') {
			break
		}
		k, ok := s.str()
		if !ok {
			return info, false
		}
		s.ws()
		if !s.eat(':') {
			return info, false
		}
		s.ws()
		switch {
		case k == "dtype" && !haveDType:
			var d string
			if d, ok = s.str(); !ok {
				return info, false
			}
			info.DType, haveDType = DType(d), true
		case k == "shape" && !haveShape:
			dims, ok := s.ints()
			if !ok {
				return info, false
			}
			haveShape = true
			if len(dims) > 0 {
				if cap(s.dims)-len(s.dims) < len(dims) {
					s.dims = make([]int, 0, max(256, 2*len(dims)))
				}
				k := len(s.dims)
				for _, d := range dims {
					if d < 0 || d > math.MaxInt32*int64(1<<20) {
						return info, false
					}
					s.dims = append(s.dims, int(d))
				}
				shape = s.dims[k:len(s.dims):len(s.dims)]
			}
		case k == "data_offsets" && !haveOffs:
			o, ok := s.ints()
			if !ok || len(o) != 2 {
				return info, false
			}
			offs, haveOffs = [2]int64{o[0], o[1]}, true
		default:
			return info, false
		}
		s.ws()
		if s.eat('}') {
			break
		}
		if !s.eat(',') {
			return info, false
		}
	}
	if !info.DType.Valid() || !haveShape || !haveOffs {
		return info, false
	}
	elems := uint64(1)
	info.Shape = shape
	for _, d := range shape {
		hi, lo := bits.Mul64(elems, uint64(d))
		if hi != 0 || lo > math.MaxInt64 {
			return info, false
		}
		elems = lo
	}
	info.Begin, info.End = offs[0], offs[1]
	if info.Begin < 0 || info.End < info.Begin || info.End > dataSize {
		return info, false
	}
	hi, want := bits.Mul64(elems, uint64(info.DType.Size()))
	if hi != 0 || want != uint64(info.End-info.Begin) {
		return info, false
	}
	return info, true
}

// parseIndexFast parses a valid index whose weight_map is a plain object of
// ASCII strings; ok=false sends ParseIndex to
// encoding/json (escapes, duplicate or case-folded keys, odd types).
func parseIndexFast(b []byte) (*IndexFile, bool) {
	// The scanner checks the grammar of what it reads itself; values it
	// skips (metadata, unknown keys) are checked with json.Valid.
	s := newScanner(b)
	idx := &IndexFile{}
	s.ws()
	if !s.eat('{') {
		return nil, false
	}
	seen := map[string]bool{}
	s.ws()
	for !s.eat('}') {
		s.ws()
		k, ok := s.str()
		if !ok || seen[k] {
			return nil, false
		}
		seen[k] = true
		s.ws()
		if !s.eat(':') {
			return nil, false
		}
		s.ws()
		switch {
		case k == "weight_map":
			// One entry per tensor; each ends in `",` or `"}`.
			hint := sizeHint(bytes.Count(s.b[s.i:], []byte(`",`)) + 1)
			if idx.WeightMap, ok = s.stringMap(hint); !ok {
				return nil, false
			}
		case k == "metadata":
			start := s.i
			if !s.skipValue() || json.Unmarshal(s.b[start:s.i], &idx.Metadata) != nil {
				return nil, false
			}
		case strings.EqualFold(k, "weight_map") || strings.EqualFold(k, "metadata"):
			return nil, false // encoding/json would match it case-insensitively
		default:
			start := s.i
			if !s.skipValue() || !json.Valid(s.b[start:s.i]) {
				return nil, false
			}
		}
		s.ws()
		if s.eat('}') {
			break
		}
		if !s.eat(',') {
			return nil, false
		}
		s.ws()
		if s.i < len(s.b) && s.b[s.i] == '}' {
			return nil, false // trailing comma
		}
	}
	s.ws()
	return idx, s.i == len(s.b)
}
