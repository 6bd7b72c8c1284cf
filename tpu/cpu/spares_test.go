package cpu

import (
	"runtime"
	"testing"
	"unsafe"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
)

// lowerSpareMin sets spareMin to n and spareCap to 64 MiB, and empties
// the cpu test backend's spares; the returned func restores all three.
func lowerSpareMin(t *testing.T, n int) func() {
	t.Helper()
	_, be := backendsForTest(t)
	sp := &be.(*Backend).spares
	oldMin, oldCap := spareMin, spareCap
	spareMin, spareCap = n, 64<<20
	sp.release()
	return func() {
		spareMin, spareCap = oldMin, oldCap
		sp.release()
	}
}

func TestSparesTakeGive(t *testing.T) {
	defer lowerSpareMin(t, 16)()
	var p spares
	mb := func(n int) []byte { return make([]byte, n<<20) }
	a, b, c := mb(4), mb(6), mb(10)
	p.give(c) // c is the oldest, the sizes out of order
	p.give(a)
	p.give(b)
	if got := p.held(); got != 20<<20 {
		t.Fatalf("held %d bytes, want 20 MiB", got)
	}
	// The smallest region that fits, never one of more than twice the need.
	if r := p.take(5 << 20); len(r) != len(b) || &r[0] != &b[0] {
		t.Fatalf("take(5 MiB) got a region of %d bytes, want the 6 MiB one", len(r))
	}
	if r := p.take(3 << 20); len(r) != len(a) || &r[0] != &a[0] {
		t.Fatalf("take(3 MiB) got a region of %d bytes, want the 4 MiB one", len(r))
	}
	if r := p.take(4 << 20); r != nil {
		t.Fatalf("take(4 MiB) got %d bytes; the 10 MiB region is more than twice that", len(r))
	}
	if r := p.take(11 << 20); r != nil {
		t.Fatalf("take(11 MiB) got %d bytes, more than any region", len(r))
	}
	if got := p.held(); got != 10<<20 {
		t.Fatalf("held %d bytes after two takes, want 10 MiB", got)
	}
	// Past the cap the oldest go first; a region over the cap is not kept.
	for range spareCap / (10 << 20) {
		p.give(mb(10))
	}
	if got := p.held(); got > spareCap {
		t.Fatalf("held %d bytes, over the cap of %d", got, spareCap)
	}
	for _, s := range p.free {
		if &s.r[0] == &c[0] {
			t.Fatal("the oldest region is still kept past the cap")
		}
	}
	before := p.held()
	p.give(make([]byte, spareCap+1))
	if p.held() != before {
		t.Fatal("a region larger than the cap was kept")
	}
	p.release()
	if p.held() != 0 || len(p.free) != 0 {
		t.Fatalf("release left %d bytes in %d regions", p.held(), len(p.free))
	}
}

// A value made from a spare has the value's length and the region's
// capacity, and gives the whole region back, for every dtype.
func TestSpareViewRegion(t *testing.T) {
	defer lowerSpareMin(t, 16)()
	for _, dt := range []dtypes.DType{dtypes.Float32, dtypes.Float64, dtypes.BFloat16, dtypes.Float16, dtypes.Int32, dtypes.Int64, dtypes.Uint8, dtypes.Int8} {
		r := make([]byte, 1003)
		n := 1000 / dt.Size()
		flat := viewFlat(dt, r, n)
		if flatLen(flat) != n {
			t.Fatalf("%s: length %d, want %d", dt, flatLen(flat), n)
		}
		if got := dtypeOfFlat(flat); got != dt {
			t.Fatalf("viewFlat(%s) made %s", dt, got)
		}
		back := spareRegion(flat)
		if unsafe.SliceData(back) != unsafe.SliceData(r) || len(back) != 1003/dt.Size()*dt.Size() {
			t.Fatalf("%s: region back of %d bytes, want the %d of the spare", dt, len(back), 1003/dt.Size()*dt.Size())
		}
	}
	if spareRegion(make([]float32, 3)) != nil {
		t.Fatal("a value under spareMin became a spare")
	}
	if spareRegion(make([]bool, 64)) != nil {
		t.Fatal("a bool value became a spare")
	}
}

// TestOpsOnDirtySpares runs the op tests with every value of 16 bytes or
// more going through the spares, each op test starting on spares full of
// all-ones bytes (NaN as floats, -1 as integers): an op that relied on
// fresh memory being zero, or read its output before writing it, fails
// its comparison with the go backend.
func TestOpsOnDirtySpares(t *testing.T) {
	defer lowerSpareMin(t, 16)()
	_, be := backendsForTest(t)
	sp := &be.(*Backend).spares
	poison := func() {
		sp.release()
		for size := 16; size <= 4<<20; size = size*3/2 + 8 {
			for range 2 {
				r := make([]byte, size)
				for i := range r {
					r[i] = 0xff
				}
				sp.give(r)
			}
		}
	}
	for _, tc := range []struct {
		name string
		fn   func(*testing.T)
	}{
		{"unary", TestUnaryOps}, {"binary", TestBinaryOps}, {"where", TestWhereClampConvert},
		{"shape", TestShapeOps}, {"reduce", TestReductions}, {"dot", TestDotGeneral},
		{"gather", TestGatherAndDynamicSlices}, {"f16", TestFloat16}, {"reverse", TestReverse},
		{"pad", TestPad}, {"dus", TestDynamicUpdateSliceInPlace}, {"conv", TestConvGeneral},
		{"scatter", TestScatterSum}, {"fusion", TestFusion}, {"softmax", TestSoftmax}, {"softmaxfold", TestSoftmaxScaleBias},
		{"rope", TestRope}, {"grouped", TestGroupedExpertDot}, {"groupedsum", TestGroupedExpertSum},
		{"fp8", TestDotGeneralFP8}, {"int4", TestDotGeneralInt4}, {"int8", TestDotGeneralInt8},
	} {
		poison()
		t.Run(tc.name, tc.fn)
	}
}

// A large value one executable frees is what another allocates next: the
// second executable's first call takes its 3 MiB intermediate from the
// 4 MiB the first one freed, instead of new memory.
func TestSparesAcrossExecutables(t *testing.T) {
	_, be := backendsForTest(t)
	sp := &be.(*Backend).spares
	sp.release()
	compile := func(n int) backends.Executable {
		b := be.Builder("spares")
		x, _ := b.Parameter("x", sh(dtypes.Float32, n), nil)
		y, _ := b.Add(x, x) // freed once z is computed
		z, _ := b.Mul(y, y)
		s, _ := b.ReduceSum(z, 0)
		exe, err := b.Compile([]backends.Op{s}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return exe
	}
	execute := func(exe backends.Executable, n int) float32 {
		data := make([]float32, n)
		for i := range data {
			data[i] = 1
		}
		in, _ := be.BufferFromFlatData(0, data, sh(dtypes.Float32, n))
		outs, err := exe.Execute([]backends.Buffer{in}, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		got := make([]float32, 1)
		if err := be.BufferToFlatData(outs[0], got); err != nil {
			t.Fatal(err)
		}
		return got[0]
	}
	const big, small = 1 << 20, 3 << 18 // 4 MiB and 3 MiB of f32
	a, b := compile(big), compile(small)
	if got := execute(a, big); got != 4*big {
		t.Fatalf("first executable: %v, want %v", got, 4*big)
	}
	held := sp.held()
	if held < 4<<20 {
		t.Fatalf("the spares hold %d bytes after a call that freed 8 MiB of intermediates", held)
	}
	in, _ := be.BufferFromFlatData(0, make([]float32, small), sh(dtypes.Float32, small))
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	if _, err := b.Execute([]backends.Buffer{in}, nil, 0); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&m1)
	if alloc := m1.TotalAlloc - m0.TotalAlloc; alloc > 1<<20 {
		t.Errorf("the second executable allocated %d bytes; its 3 MiB values should come from the spares", alloc)
	}
	if got := execute(b, small); got != 4*small {
		t.Fatalf("second executable: %v, want %v", got, 4*small)
	}
	be.(*Backend).ReleaseSpares()
	if sp.held() != 0 {
		t.Fatalf("ReleaseSpares left %d bytes", sp.held())
	}
}

// TestRecycle: an execution's output handed back with Recycle is
// finalized and its memory is the next execution's value of that size; a
// buffer that shares a host tensor's memory is only finalized.
func TestRecycle(t *testing.T) {
	defer lowerSpareMin(t, 16)()
	_, be := backendsForTest(t)
	b := be.(*Backend)
	exec, err := graph.NewExec(be, func(x *graph.Node) *graph.Node { return graph.AddScalar(x, 1) })
	if err != nil {
		t.Fatal(err)
	}
	x := tensors.FromFlatDataAndDimensions(make([]float32, 64), 64)
	run := func() (backends.Buffer, unsafe.Pointer) {
		t.Helper()
		out, err := exec.Exec(x)
		if err != nil {
			t.Fatal(err)
		}
		buf, err := out[0].Buffer(be, 0)
		if err != nil {
			t.Fatal(err)
		}
		flat, err := b.BufferData(buf)
		if err != nil {
			t.Fatal(err)
		}
		if got := flat.([]float32)[63]; got != 1 {
			t.Fatalf("output [63] = %v, want 1", got)
		}
		return buf, unsafe.Pointer(unsafe.SliceData(flat.([]float32)))
	}
	buf, p := run()
	if err := b.Recycle(buf); err != nil {
		t.Fatal(err)
	}
	if got := b.spares.held(); got != 256 {
		t.Fatalf("spares hold %d bytes after Recycle, want the output's 256", got)
	}
	if _, err := b.BufferData(buf); err == nil {
		t.Fatal("a recycled buffer can still be read")
	}
	buf2, p2 := run()
	if p2 != p {
		t.Fatal("the next execution's output did not take the recycled memory")
	}
	if got := b.spares.held(); got != 0 {
		t.Fatalf("spares hold %d bytes after the next execution, want 0", got)
	}
	b.BufferFinalize(buf2)

	shared, _, err := b.NewSharedBuffer(0, shapes.Make(dtypes.Float32, 64))
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Recycle(shared); err != nil {
		t.Fatal(err)
	}
	if got := b.spares.held(); got != 0 {
		t.Fatalf("a shared buffer's memory went to the spares (%d bytes held)", got)
	}
	if _, err := b.BufferData(shared); err == nil {
		t.Fatal("a shared buffer given to Recycle was not finalized")
	}
}
