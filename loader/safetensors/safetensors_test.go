package safetensors

import (
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/x448/float16"
)

func writeTestFile(t *testing.T, dir, name string, tensors []Tensor) string {
	t.Helper()
	p := filepath.Join(dir, name)
	require.NoError(t, WriteFile(p, tensors, map[string]string{"format": "pt"}))
	return p
}

func TestRoundTripAndDTypes(t *testing.T) {
	dir := t.TempDir()
	vals := []float32{0, 1, -2.5, 3.1415927, 65504, 1e-6}
	var tensors []Tensor
	for _, d := range []DType{F32, F16, BF16} {
		tt, err := Float32Tensor("w."+string(d), d, []int{2, 3}, vals)
		require.NoError(t, err)
		tensors = append(tensors, tt)
	}
	i64 := make([]byte, 16)
	binary.LittleEndian.PutUint64(i64, uint64(0xffffffffffffffff)) // -1
	binary.LittleEndian.PutUint64(i64[8:], 7)
	tensors = append(tensors, Tensor{Name: "ids", DType: I64, Shape: []int{2}, Data: i64})
	tensors = append(tensors, Tensor{Name: "scalar", DType: U8, Shape: []int{}, Data: []byte{9}})
	p := writeTestFile(t, dir, "model.safetensors", tensors)

	c, err := Open(dir)
	require.NoError(t, err)
	defer c.Close()
	assert.Equal(t, []string{"ids", "scalar", "w.BF16", "w.F16", "w.F32"}, c.Names())
	assert.Equal(t, map[string]string{"format": "pt"}, c.Metadata())

	got, err := c.Float32("w.F32")
	require.NoError(t, err)
	assert.Equal(t, vals, got)
	got, err = c.Float32("w.F16")
	require.NoError(t, err)
	for i, v := range vals {
		assert.InDelta(t, v, got[i], math.Abs(float64(v))*1e-3+1e-7, "f16 %d", i)
	}
	got, err = c.Float32("w.BF16")
	require.NoError(t, err)
	for i, v := range vals {
		assert.InDelta(t, v, got[i], math.Abs(float64(v))*8e-3, "bf16 %d", i)
	}
	got, err = c.Float32("ids")
	require.NoError(t, err)
	assert.Equal(t, []float32{-1, 7}, got)
	info, ok := c.Info("scalar")
	require.True(t, ok)
	assert.Equal(t, int64(1), info.NumElements())
	assert.Equal(t, p, info.File)

	// Raw is zero-copy: it points into the mapping, not a fresh buffer.
	raw1, _ := c.Raw("w.F32")
	raw2, _ := c.Raw("w.F32")
	assert.Equal(t, &raw1[0], &raw2[0])
}

func TestHalfConversionExhaustive(t *testing.T) {
	for i := 0; i < 1<<16; i++ {
		h := uint16(i)
		want := float16.Frombits(h).Float32()
		got := HalfToFloat32(h)
		if math.IsNaN(float64(want)) {
			require.True(t, math.IsNaN(float64(got)), "h=%#x", h)
			continue
		}
		require.Equal(t, math.Float32bits(want), math.Float32bits(got), "h=%#x", h)
		// Float32ToHalf inverts exactly on representable values.
		require.Equal(t, h, Float32ToHalf(got), "h=%#x", h)
	}
	// Rounding of non-representable values matches the reference library.
	for _, f := range []float32{1.0009765, 1.00048828125, 65519, 65520, 1e-8, 3e-8, -2.00097656, 0.1, 1e5} {
		assert.Equal(t, float16.Fromfloat32(f).Bits(), Float32ToHalf(f), "f=%v", f)
	}
}

func TestBF16AndF8(t *testing.T) {
	assert.Equal(t, uint16(0x3f80), Float32ToBF16(1))
	// Round to nearest even: 1 + 2^-8 is halfway between 1 and 1+2^-7.
	assert.Equal(t, uint16(0x3f80), Float32ToBF16(1+1.0/256))
	assert.Equal(t, uint16(0x3f82), Float32ToBF16(1+3.0/256)) // halfway, rounds to even
	assert.Equal(t, uint16(0x3f81), Float32ToBF16(1+1.0/128))
	assert.True(t, math.IsNaN(float64(F8E4M3ToFloat32(0x7f))))
	assert.Equal(t, float32(448), F8E4M3ToFloat32(0x7e))
	assert.Equal(t, float32(1), F8E4M3ToFloat32(0x38))
	assert.Equal(t, float32(-2), F8E4M3ToFloat32(0xc0))
	assert.Equal(t, float32(1.0/512), F8E4M3ToFloat32(0x01)) // smallest subnormal 2^-9
	got, err := ToFloat32(F8E5M2, []byte{0x3c, 0x7c})
	require.NoError(t, err)
	assert.Equal(t, float32(1), got[0])
	assert.True(t, math.IsInf(float64(got[1]), 1))
}

func header(t *testing.T, h string, dataLen int) []byte {
	b := make([]byte, 8, 8+len(h)+dataLen)
	binary.LittleEndian.PutUint64(b, uint64(len(h)))
	b = append(b, h...)
	return append(b, make([]byte, dataLen)...)
}

func TestRejectsBadHeaders(t *testing.T) {
	cases := map[string]struct {
		file []byte
		want string
	}{
		"short":          {[]byte{1, 2}, "header length"},
		"huge header":    {append(binary.LittleEndian.AppendUint64(nil, MaxHeaderSize+1), '{', '}'), "exceeds the"},
		"past eof":       {append(binary.LittleEndian.AppendUint64(nil, 1000), '{', '}'), "exceeds the file size"},
		"not json":       {header(t, "nope!!!!", 0), "not a JSON object"},
		"bad dtype":      {header(t, `{"a":{"dtype":"C64","shape":[1],"data_offsets":[0,8]}}`, 8), `unsupported dtype "C64"`},
		"size mismatch":  {header(t, `{"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}`, 8), "needs 12 bytes"},
		"out of range":   {header(t, `{"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}`, 8), "run past the data section"},
		"negative dim":   {header(t, `{"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}}`, 8), "invalid dimension"},
		"overflow shape": {header(t, `{"a":{"dtype":"F32","shape":[4294967296,4294967296,4294967296],"data_offsets":[0,4]}}`, 8), "overflows"},
		"overlap": {header(t, `{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, 8),
			"overlaps"},
		"reversed":      {header(t, `{"a":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}}`, 8), "end before"},
		"bad offsets":   {header(t, `{"a":{"dtype":"F32","shape":[1],"data_offsets":[0]}}`, 8), "2 entries"},
		"bad metadata":  {header(t, `{"__metadata__":{"a":1}}`, 0), "__metadata__"},
		"trailing data": {header(t, `{}{}`, 0), "trailing data"},
	}
	dir := t.TempDir()
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			p := filepath.Join(dir, "x.safetensors")
			require.NoError(t, os.WriteFile(p, tc.file, 0o644))
			_, err := OpenFile(p)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			assert.Contains(t, err.Error(), p, "error names the file")
		})
	}
}

// writeTwoShards writes a checkpoint of two shards, "a" [1, 2] in the
// first and "b" [3] in the second, with its index, and returns its
// directory.
func writeTwoShards(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	a, _ := Float32Tensor("a", F32, []int{2}, []float32{1, 2})
	b, _ := Float32Tensor("b", F32, []int{1}, []float32{3})
	writeTestFile(t, dir, "model-00001-of-00002.safetensors", []Tensor{a})
	writeTestFile(t, dir, "model-00002-of-00002.safetensors", []Tensor{b})
	idx := `{"metadata":{"total_size":12},"weight_map":{"a":"model-00001-of-00002.safetensors","b":"model-00002-of-00002.safetensors"}}`
	require.NoError(t, os.WriteFile(filepath.Join(dir, "model.safetensors.index.json"), []byte(idx), 0o644))
	return dir
}

func TestShardedCheckpoint(t *testing.T) {
	dir := writeTwoShards(t)
	c, err := Open(dir)
	require.NoError(t, err)
	defer c.Close()
	assert.Equal(t, []string{"a", "b"}, c.Names())
	assert.Len(t, c.Files, 2)
	v, err := c.Float32("b")
	require.NoError(t, err)
	assert.Equal(t, []float32{3}, v)

	for name, shard := range map[string]string{
		"dotdot":   "../evil.safetensors",
		"absolute": "/etc/passwd.safetensors",
		"pickle":   "pytorch_model.bin",
		"nested":   "a/../../x.safetensors",
	} {
		t.Run(name, func(t *testing.T) {
			_, err := ParseIndex([]byte(`{"weight_map":{"a":"` + shard + `"}}`))
			require.Error(t, err)
		})
	}
	// weight_map naming a tensor its shard lacks.
	bad := filepath.Join(dir, "bad.safetensors.index.json")
	require.NoError(t, os.WriteFile(bad, []byte(`{"weight_map":{"zzz":"model-00001-of-00002.safetensors"}}`), 0o644))
	_, err = Open(bad)
	require.ErrorContains(t, err, `"zzz"`)
}

func TestPickleOnlyDirIsRefused(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "pytorch_model.bin"), []byte("PK"), 0o644))
	_, err := Open(dir)
	require.ErrorContains(t, err, "never loaded")
	_, err = OpenFile(filepath.Join(dir, "pytorch_model.bin"))
	require.ErrorContains(t, err, "pickle")
}

func TestRealCheckpoint(t *testing.T) {
	c, err := Open("../../testdata/stories260K-hf")
	require.NoError(t, err)
	defer c.Close()
	info, ok := c.Info("model.embed_tokens.weight")
	require.True(t, ok)
	assert.Equal(t, []int{512, 64}, info.Shape)
	assert.Equal(t, F32, info.DType)
	assert.True(t, c.Has("model.layers.4.mlp.down_proj.weight"))
}

// TestRename: renamed tensors answer to their new names only, across
// shards, twice renamed from their stored names; a rename that merges two
// names fails and changes nothing.
func TestRename(t *testing.T) {
	c, err := Open(writeTwoShards(t))
	require.NoError(t, err)
	defer c.Close()
	require.Error(t, c.Rename(func(string) string { return "same" }))
	assert.Equal(t, []string{"a", "b"}, c.Names())
	require.NoError(t, c.Rename(func(s string) string { return "x." + s }))
	require.NoError(t, c.Rename(func(s string) string { return "model." + s }))
	assert.Equal(t, []string{"model.a", "model.b"}, c.Names())
	assert.False(t, c.Has("a"))
	assert.False(t, c.Has("x.a"))
	v, err := c.Float32("model.a")
	require.NoError(t, err)
	assert.Equal(t, []float32{1, 2}, v)
	info, ok := c.Info("model.b")
	require.True(t, ok)
	assert.Equal(t, "model.b", info.Name)
	assert.Equal(t, []int{1}, info.Shape)
	_, err = c.Raw("b")
	require.Error(t, err)
	c.Release("model.a") // the stored name's pages; no panic
	v, err = c.Float32("model.a")
	require.NoError(t, err)
	assert.Equal(t, []float32{1, 2}, v)
}

// TestSplit: a tensor split into pieces reads as them, each a view of its
// bytes (Info's offsets, Raw, Float32, Release), renames by the pieces'
// names, and a split that does not add up, or takes a name in use,
// changes nothing.
func TestSplit(t *testing.T) {
	dir := t.TempDir()
	w, err := Float32Tensor("w", BF16, []int{6, 2}, []float32{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11})
	require.NoError(t, err)
	b, err := Float32Tensor("b", F32, []int{2}, []float32{-1, -2})
	require.NoError(t, err)
	c, err := Open(writeTestFile(t, dir, "model.safetensors", []Tensor{b, w}))
	require.NoError(t, err)
	defer c.Close()
	whole, _ := c.Info("w")
	for _, bad := range []struct {
		pieces []Piece
		want   string
	}{
		{[]Piece{{"p0", []int{2, 2}}, {"p1", []int{2, 2}}}, "its pieces hold 8"},
		{[]Piece{{"p0", []int{4, 2}}, {"p1", []int{4, 2}}}, "its pieces hold more"},
		{[]Piece{{"p0", []int{2, 2}}, {"b", []int{4, 2}}}, `piece "b" is already a tensor`},
		{[]Piece{{"p0", []int{6, 2}}, {"p0", []int{0}}}, `piece "p0" is already a tensor`},
		{[]Piece{{"p0", []int{12, 0}}}, "every axis must be positive"},
		{[]Piece{{"p0", []int{1 << 40, 1 << 40}}}, "larger than the tensor"},
		{[]Piece{{"", []int{12}}}, "has no name"},
	} {
		err := c.Split("w", bad.pieces)
		require.ErrorContains(t, err, bad.want)
		assert.Equal(t, []string{"b", "w"}, c.Names())
	}
	require.Error(t, c.Split("nope", nil))
	require.NoError(t, c.Split("w", []Piece{{"w.0", []int{2, 2}}, {"w.1", []int{2, 2}}, {"w.2", []int{4}}}))
	assert.Equal(t, []string{"b", "w.0", "w.1", "w.2"}, c.Names())
	assert.False(t, c.Has("w"))
	info, ok := c.Info("w.1")
	require.True(t, ok)
	assert.Equal(t, TensorInfo{Name: "w.1", DType: BF16, Shape: []int{2, 2}, Begin: whole.Begin + 8, End: whole.Begin + 16, File: whole.File}, info)
	v, err := c.Float32("w.2")
	require.NoError(t, err)
	assert.Equal(t, []float32{8, 9, 10, 11}, v)
	raw, err := c.Raw("w.0")
	require.NoError(t, err)
	assert.Len(t, raw, 8)
	assert.Equal(t, 8, cap(raw), "a piece's bytes end where it does")
	// A piece splits again, and renames by its own name.
	require.NoError(t, c.Split("w.1", []Piece{{"w.1a", []int{1, 2}}, {"w.1b", []int{2}}}))
	require.NoError(t, c.Rename(func(s string) string { return "m." + s }))
	assert.Equal(t, []string{"m.b", "m.w.0", "m.w.1a", "m.w.1b", "m.w.2"}, c.Names())
	c.Release("m.w.1b")
	c.ReleaseRange("m.w.1b", 2, 100)
	v, err = c.Float32("m.w.1b")
	require.NoError(t, err)
	assert.Equal(t, []float32{6, 7}, v)
	v, err = c.Float32("m.b")
	require.NoError(t, err)
	assert.Equal(t, []float32{-1, -2}, v)
}
