package safetensors

import (
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// shapeMap is a Shapes of names to shapes.
type shapeMap map[string][]int

func (m shapeMap) Names() []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
func (m shapeMap) Shape(name string) ([]int, bool) { s, ok := m[name]; return s, ok }

func TestStrict(t *testing.T) {
	src := shapeMap{"a.weight": {4, 3}, "a.bias": {4}, "old.weight": {8, 8, 1, 1}, "buffer": {1, 7},
		"x.inv_freq": {2}, "extra": {1}}
	s := NewStrict(src)
	s.LinearAsConv = true
	require.Equal(t, 0, s.Expect("a.weight", 4, 3))
	require.Equal(t, 1, s.Expect("a.bias", 4))
	require.Equal(t, 0, s.Expect("a.weight", 4, 3), "a second declaration returns the first index")
	s.Alias("new.weight", "old.weight")
	require.Equal(t, 2, s.Expect("new.weight", 8, 8))
	require.Equal(t, "old.weight", s.Stored(2))
	s.Ignore("buffer", 1, 7)
	s.IgnoreIf(func(n string) bool { return strings.HasSuffix(n, ".inv_freq") })
	require.True(t, s.Expected("a.bias"))
	require.Equal(t, Problems{{Kind: Unused, Name: "extra"}}, s.Problems())

	s = NewStrict(src)
	s.Expect("a.weight", 5, 3)
	s.Expect("a.weight", 5, 4)
	s.Expect("missing", 2)
	s.Expect("old.weight", 8, 8) // no LinearAsConv: misshapen
	s.Ignore("buffer", 7)
	s.Errorf("config: %d heads", 3)
	ps := s.Problems()
	lines := ps.Lines(20)
	require.Equal(t, []string{
		`tensor "a.weight" declared twice with shapes [5 3] and [5 4] (bug in the model code)`,
		"config: 3 heads",
		`tensor "a.weight" has shape [4 3], want [5 3]`,
		`missing tensor "missing" (shape [2])`,
		`tensor "old.weight" has shape [8 8 1 1], want [8 8]`,
		`tensor "buffer" has shape [1 7], want [7]`,
		`unused tensor "a.bias"`, `unused tensor "extra"`, `unused tensor "x.inv_freq"`,
	}, lines)
	require.Equal(t, []string{lines[0], lines[1], "... and 7 more"}, ps.Lines(2))
	require.Equal(t, []string{
		"2 configuration problems: " + lines[0] + "; " + lines[1],
		"1 missing tensors: missing",
		"3 misshapen tensors: a.weight: shape [4 3], want [5 3]; old.weight: shape [8 8 1 1], want [8 8]; and 1 more",
		"3 unused tensors (this architecture does not read them): a.bias; extra; and 1 more",
	}, ps.Grouped(2))
}

func TestStrictDTypes(t *testing.T) {
	dir := t.TempDir()
	f32, err := Float32Tensor("f", F32, []int{2}, []float32{1, 2})
	require.NoError(t, err)
	writeTestFile(t, dir, "model.safetensors", []Tensor{f32, {Name: "i", DType: I32, Shape: []int{1}, Data: make([]byte, 4)}})
	c, err := Open(dir)
	require.NoError(t, err)
	defer c.Close()
	s := NewStrict(c)
	s.Expect("f", 2)
	s.Expect("i", 1)
	s.RequireDTypes(F32, F16, BF16)
	ps := s.Problems()
	require.Equal(t, []string{`tensor "i" has dtype I32 (want F32, F16 or BF16)`}, ps.Lines(8))
	require.Equal(t, []string{"1 tensors of unsupported dtype: i: dtype I32 (want F32, F16 or BF16)"}, ps.Grouped(8))
}

// TestDecoders: DecodeFloat32 and DecodeBFloat16 agree with the scalar
// conversions for F32, F16 and BF16, and Convert reports NaN and infinite
// values only when asked to check.
func TestDecoders(t *testing.T) {
	vals := []float32{0, 1, -2.5, 3.1415927, 65504, 1e-6, float32(math.Inf(1)), float32(math.NaN())}
	dir := t.TempDir()
	var ts []Tensor
	for _, d := range []DType{F32, F16, BF16} {
		tt, err := Float32Tensor(string(d), d, []int{len(vals)}, vals)
		require.NoError(t, err)
		ts = append(ts, tt)
	}
	writeTestFile(t, dir, "model.safetensors", ts)
	c, err := Open(dir)
	require.NoError(t, err)
	defer c.Close()
	for _, d := range []DType{F32, F16, BF16} {
		raw, err := c.Raw(string(d))
		require.NoError(t, err)
		want, err := ToFloat32(d, raw)
		require.NoError(t, err)
		f := make([]float32, len(vals))
		nf, err := c.Convert(string(d), false, func(at int, piece []byte) { DecodeFloat32(f[at:], d, piece) })
		require.NoError(t, err)
		require.Zero(t, nf.Count)
		require.Equal(t, bitsOf(want), bitsOf(f), d)
		b := make([]uint16, len(vals))
		nf, err = c.Convert(string(d), true, func(at int, piece []byte) { DecodeBFloat16(b[at:], d, piece) })
		require.NoError(t, err)
		require.Equal(t, NonFiniteTensor{Name: string(d), DType: d, Count: 2, Elements: int64(len(vals)), First: 6}, nf)
		for i, w := range want {
			require.Equal(t, Float32ToBF16(w), b[i], "%s[%d]", d, i)
		}
	}
}

func bitsOf(v []float32) []uint32 {
	out := make([]uint32, len(v))
	for i, x := range v {
		out[i] = math.Float32bits(x)
	}
	return slices.Clip(out)
}
