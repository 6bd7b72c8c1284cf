package compile

import (
	"runtime"
	"testing"

	"github.com/tputool/tputool/pipeline/nn"
	"github.com/tputool/tputool/tpu"
)

func TestLayoutChoice(t *testing.T) {
	b := goBackend(t)
	caps := tpu.CapabilitiesOf(b)
	r := &Runner{backend: b, opts: Options{Caps: &caps}}
	// Parts of at most 1024 rows, and at least one block per core.
	p := divisorAtLeast(2048, max(2, (runtime.NumCPU()+11)/12))
	for _, tc := range []struct {
		out, in int
		want    nn.Blocked
	}{
		{2048, 768, nn.Blocked{J: 12, P: p, Rows: 2048 / p, C: 64}},
		{32000, 768, nn.Blocked{J: 12, P: 32, Rows: 1000, C: 64}}, // the vocabulary head
		{4096, 100, nn.Blocked{J: 1, P: 4, Rows: 1024, C: 100}},   // 100 columns: no column blocks
	} {
		if got := r.layout(tc.out, tc.in); got == nil || *got != tc.want {
			t.Errorf("layout(%d, %d) = %+v, want %+v", tc.out, tc.in, got, tc.want)
		}
	}
	r.opts.SplitMatmul = 1
	if b := r.layout(2048, 768); b != nil {
		t.Errorf("SplitMatmul 1: %+v", b)
	}
	r.opts = Options{BlockCols: -1, SplitMatmul: 4, Caps: &caps}
	if b := r.layout(2048, 768); b == nil || *b != (nn.Blocked{J: 1, P: 4, Rows: 512, C: 768}) {
		t.Errorf("rows only: %+v", b)
	}
}

func TestBlockWeight(t *testing.T) {
	// W [4, 6] = 0..23; blocks of 3 columns, 2 parts of 2 rows.
	w := make([]float32, 24)
	for i := range w {
		w[i] = float32(i)
	}
	got := make([]float32, 24)
	blockInto(got, w, &nn.Blocked{J: 2, P: 2, Rows: 2, C: 3})
	want := []float32{0, 1, 2, 6, 7, 8, 12, 13, 14, 18, 19, 20, 3, 4, 5, 9, 10, 11, 15, 16, 17, 21, 22, 23}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("blocked %v, want %v", got, want)
		}
	}
}

func TestBuckets(t *testing.T) {
	for _, c := range [][3]int{{1, 8, 32}, {8, 8, 32}, {9, 16, 32}, {33, 64, 64}, {64, 64, 64}, {65, 128, 128}, {130, 192, 256}, {513, 576, 768}} {
		if p, k := PromptBucket(c[0]), CacheBucket(c[0]); p != c[1] || k != c[2] {
			t.Errorf("n=%d: PromptBucket %d (want %d), CacheBucket %d (want %d)", c[0], p, c[1], k, c[2])
		}
	}
}
