package safetensors

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"runtime"
	"strings"
	"testing"
)

// checkAgree fails when the fast path accepts a header that the strict path
// rejects or parses differently.
func checkAgree(t *testing.T, header []byte, dataSize int64) {
	t.Helper()
	header = bytes.TrimRight(header, " \x00")
	fast, ok := parseHeaderFast(header, dataSize)
	strict, err := parseHeaderStrict(header, dataSize)
	if !ok {
		return
	}
	if err != nil {
		t.Fatalf("fast path accepted %q (data %d) which the strict path rejects: %v", header, dataSize, err)
	}
	if len(fast.Tensors) == 0 && len(strict.Tensors) == 0 {
		fast.Tensors, strict.Tensors = nil, nil
	}
	if !reflect.DeepEqual(fast, strict) {
		t.Fatalf("fast %+v != strict %+v for %q", fast, strict, header)
	}
}

func TestParseHeaderFastAgrees(t *testing.T) {
	cases := []string{
		`{"a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}}`,
		`{"__metadata__":{"format":"pt"},"b":{"dtype":"BF16","shape":[],"data_offsets":[0,2]}}`,
		`{"__metadata__":null,"b":{"dtype":"BF16","shape":[1],"data_offsets":[0,2]}}`,
		`{"__metadata__":{"n":1},"b":{"dtype":"BF16","shape":[1],"data_offsets":[0,2]}}`,
		`{"__metadata__":"x"}`,
		`{"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]}}`,
		`{"a":{"dtype":"I8","shape":[1],"data_offsets":[0,1]},"b":{"dtype":"I8","shape":[1],"data_offsets":[0,1]}}`,
		`{"a":{"dtype":"I8","shape":[1.0],"data_offsets":[0,1]}}`,
		`{"a":{"dtype":"I8","shape":[-1],"data_offsets":[0,1]}}`,
		`{"a":{"dtype":"I8","shape":null,"data_offsets":[0,1]}}`,
		`{"a":{"dtype":"I8","shape":[1],"data_offsets":[1,0]}}`,
		`{"a":{"dtype":"I8","shape":[1],"data_offsets":[0,1,2]}}`,
		`{"a":{"dtype":"X9","shape":[1],"data_offsets":[0,1]}}`,
		`{"a":{"dtype":"I8","shape":[1],"data_offsets":[0,99999999999999999999]}}`,
		`{"a":{"dtype":"I8","shape":[0],"data_offsets":[5,5]},"b":{"dtype":"I8","shape":[2],"data_offsets":[4,6]}}`,
		`{"a":{"dtype":"I8","shape":[1],"data_offsets":[0,1],"extra":true}}`,
		`{"a":{"dtype":"I8","shape":[1],"data_offsets":[0,1]}} x`,
		`{"a":{"dtype":"I8","shape":[1],"data_offsets":[0,1]}}` + "\n",
		`{"a":1}`, `[]`, `null`, `{}`, ``, `{"a":{"dtype":"I8","shape":[1],"data_offsets":[0,1]},"a":{"dtype":"I8","shape":[2],"data_offsets":[0,2]}}`,
	}
	for _, c := range cases {
		for _, size := range []int64{0, 1, 2, 4, 6, 16, 1 << 40} {
			checkAgree(t, []byte(c), size)
		}
	}
	// Random well-formed headers, then single-byte mutations of them.
	r := rand.New(rand.NewPCG(1, 2))
	dtypes := []string{"F32", "BF16", "I8", "F64", "BOOL"}
	for i := 0; i < 300; i++ {
		var b bytes.Buffer
		b.WriteString(`{"__metadata__":{"format":"pt"}`)
		var off int64
		for j := 0; j < 1+r.IntN(6); j++ {
			d := dtypes[r.IntN(len(dtypes))]
			n := int64(r.IntN(5))
			size := n * int64(DType(d).Size())
			fmt.Fprintf(&b, `,"t%d":{"dtype":%q,"shape":[%d],"data_offsets":[%d,%d]}`, j, d, n, off, off+size)
			off += size
		}
		b.WriteString("}")
		h := b.Bytes()
		checkAgree(t, h, off)
		if _, ok := parseHeaderFast(h, off); !ok {
			t.Fatalf("fast path refused a valid header %s", h)
		}
		for k := 0; k < 20; k++ {
			m := bytes.Clone(h)
			m[r.IntN(len(m))] = "0123456789-.,[]{}\" e"[r.IntN(20)]
			checkAgree(t, m, off+int64(r.IntN(3)-1))
		}
	}
}

func FuzzParseHeaderFast(f *testing.F) {
	f.Add([]byte(`{"a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}}`), int64(16))
	f.Add([]byte(`{"__metadata__":{"format":"pt"},"b":{"dtype":"BF16","shape":[],"data_offsets":[0,2]}}`), int64(2))
	f.Fuzz(func(t *testing.T, header []byte, dataSize int64) {
		if dataSize < 0 {
			dataSize = -dataSize
		}
		checkAgree(t, header, dataSize)
	})
}

// BenchmarkParseHeaderMoE parses a header shaped like one shard of a
// 128-expert MoE checkpoint (3 layers x 128 experts x 3 matrices).
func BenchmarkParseHeaderMoE(b *testing.B) {
	var ts []Tensor
	for l := 0; l < 3; l++ {
		for e := 0; e < 128; e++ {
			for _, m := range []string{"gate_proj", "up_proj", "down_proj"} {
				ts = append(ts, Tensor{Name: fmt.Sprintf("model.layers.%d.mlp.experts.%d.%s.weight", l, e, m), DType: BF16, Shape: []int{2, 2}, Data: make([]byte, 8)})
			}
		}
	}
	enc, err := Encode(ts, map[string]string{"format": "pt"})
	if err != nil {
		b.Fatal(err)
	}
	n, _ := ReadHeaderLength(enc, int64(len(enc)))
	hj, size := enc[8:8+n], int64(len(enc))-8-n
	for _, tc := range []struct {
		name  string
		parse func([]byte, int64) (*Header, error)
	}{{"fast", ParseHeader}, {"strict", parseHeaderStrict}} {
		b.Run(tc.name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				if _, err := tc.parse(hj, size); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// checkIndexAgree fails when parseIndexFast accepts an index that
// encoding/json decodes differently or rejects.
func checkIndexAgree(t *testing.T, b []byte) {
	t.Helper()
	fast, ok := parseIndexFast(b)
	if !ok {
		return
	}
	var want IndexFile
	if err := json.Unmarshal(b, &want); err != nil {
		t.Fatalf("fast index path accepted %q which encoding/json rejects: %v", b, err)
	}
	if !reflect.DeepEqual(*fast, want) {
		t.Fatalf("fast %+v != json %+v for %q", *fast, want, b)
	}
}

func TestParseIndexFastAgrees(t *testing.T) {
	cases := []string{
		`{"metadata":{"total_size":8},"weight_map":{"a":"model-00001-of-00002.safetensors","b":"model-00002-of-00002.safetensors"}}`,
		`{"weight_map":{"a":"x.safetensors"},"metadata":null}`,
		`{"weight_map":{"a":"x.safetensors"},"metadata":{"s":"a\"}]b","n":[1,{"x":"}"}],"t":true}}`,
		`{"extra":{"k":["]","\\\"",{"z":null}]},"weight_map":{"a":"x.safetensors"}}`,
		`{"weight_map":{"a":"x.safetensors"},"Weight_Map":{"b":"y.safetensors"}}`,
		`{"WEIGHT_MAP":{"b":"y.safetensors"}}`,
		`{"weight_map":{"a":"x.safetensors"},"weight_map":{"b":"y.safetensors"}}`,
		`{"weight_map":{"a":"x.safetensors","a":"y.safetensors"}}`,
		`{"weight_map":{"\u0061":"x.safetensors"}}`,
		`{"weight_map":null}`, `{"weight_map":{"a":5}}`, `{"metadata":5,"weight_map":{}}`, `[]`, `{}`, `{"weight_map":{}} x`,
	}
	for _, c := range cases {
		checkIndexAgree(t, []byte(c))
	}
	big := []byte(`{"metadata":{"total_size":123},"weight_map":{`)
	for i := 0; i < 500; i++ {
		if i > 0 {
			big = append(big, ',')
		}
		big = fmt.Appendf(big, `"model.layers.%d.w":"model-%05d-of-00004.safetensors"`, i, i%4+1)
	}
	big = append(big, "}}"...)
	if _, ok := parseIndexFast(big); !ok {
		t.Fatal("fast index path refused a plain index")
	}
	checkIndexAgree(t, big)
	r := rand.New(rand.NewPCG(3, 4))
	for k := 0; k < 3000; k++ {
		m := bytes.Clone(big[:200])
		m = append(m, "}}"...)
		m[r.IntN(len(m))] = "0123456789-.,:[]{}\"\\ eE"[r.IntN(23)]
		checkIndexAgree(t, m)
	}
}

func FuzzParseIndexFast(f *testing.F) {
	f.Add([]byte(`{"metadata":{"total_size":8},"weight_map":{"a":"model-00001-of-00002.safetensors"}}`))
	f.Add([]byte(`{"extra":{"k":["]","\\\"",{"z":null}]},"weight_map":{"a":"x.safetensors"}}`))
	f.Fuzz(func(t *testing.T, b []byte) { checkIndexAgree(t, b) })
}

// allocated is the number of heap bytes f allocates.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// The fast parsers size their tables by counting a byte pattern in the
// input; a hostile file made of nothing but that pattern must be rejected
// without reserving memory many times its size first (sizeHint).
func TestFastParsersBoundPreallocation(t *testing.T) {
	const size = 8 << 20
	header := []byte(`{"a":` + strings.Repeat(`"data_offsets",`, size/15) + `}`)
	index := []byte(`{"weight_map":{` + strings.Repeat(`"",`, size/3) + `}}`)
	for _, c := range []struct {
		name  string
		input []byte
		parse func([]byte) bool
	}{
		{"header", header, func(b []byte) bool { _, ok := parseHeaderFast(b, 1<<40); return ok }},
		{"index", index, func(b []byte) bool { _, ok := parseIndexFast(b); return ok }},
	} {
		var ok bool
		n := allocated(func() { ok = c.parse(c.input) })
		if ok {
			t.Fatalf("%s: hostile input accepted", c.name)
		}
		// One copy of the input as a string plus bounded tables.
		if limit := uint64(2*len(c.input)) + 16<<20; n > limit {
			t.Errorf("%s: %d-byte input allocated %d bytes before failing, over %d", c.name, len(c.input), n, limit)
		}
	}
}
