package kernels

import (
	"sync/atomic"
	"testing"
)

// cover runs Parallel over n items and checks every index is visited once.
func cover(t *testing.T, n, grain int, inner func()) {
	t.Helper()
	seen := make([]atomic.Int32, n)
	Parallel(n, grain, func(lo, hi int) {
		if lo < 0 || hi > n || lo >= hi {
			t.Errorf("bad chunk [%d,%d) of %d", lo, hi, n)
			return
		}
		for i := lo; i < hi; i++ {
			seen[i].Add(1)
		}
		if inner != nil {
			inner()
		}
	})
	for i := range seen {
		if v := seen[i].Load(); v != 1 {
			t.Fatalf("n=%d grain=%d: index %d visited %d times", n, grain, i, v)
		}
	}
}

func TestParallelCoversOnce(t *testing.T) {
	defer SetThreads(Threads())
	for _, th := range []int{1, 2, 8} {
		SetThreads(th)
		for _, n := range []int{0, 1, 2, 7, 64, 1000, 4097} {
			for _, g := range []int{0, 1, 3, 100} {
				cover(t, n, g, nil)
			}
		}
	}
}

// TestParallelChunksShrink: claims take a share of what is left, so the
// first chunk is the largest and the last ones small (a thread never waits
// out another's large last chunk); none but the last is under grain. The
// claims are replayed one thread at a time (claim is what every thread
// calls).
func TestParallelChunksShrink(t *testing.T) {
	for _, c := range []struct{ n, grain, threads int }{{1000, 1, 2}, {4096, 16, 2}, {1000, 1, 8}, {100, 30, 2}} {
		least := max(c.grain, (c.n+16*c.threads-1)/(16*c.threads))
		j := &job{n: c.n, least: least, share: 2 * c.threads}
		var sizes []int
		next := 0
		for {
			lo, hi, ok := j.claim()
			if !ok {
				break
			}
			if lo != next || hi <= lo {
				t.Fatalf("%+v: chunk [%d,%d) after %d", c, lo, hi, next)
			}
			next = hi
			sizes = append(sizes, hi-lo)
		}
		if next != c.n {
			t.Fatalf("%+v: chunks end at %d", c, next)
		}
		for i, sz := range sizes {
			if i > 0 && sz > sizes[i-1] {
				t.Errorf("%+v: chunk %d of %d items after one of %d: chunks must not grow (%v)", c, i, sz, sizes[i-1], sizes)
			}
			if sz < c.grain && i != len(sizes)-1 {
				t.Errorf("%+v: chunk %d of %d items, under grain (%v)", c, i, sz, sizes)
			}
		}
		if first, last := sizes[0], sizes[len(sizes)-1]; c.n > 16*c.threads*c.grain && last*4 > first {
			t.Errorf("%+v: first chunk %d, last %d: the tail does not shrink (%v)", c, first, last, sizes)
		}
	}
}

// TestParallelNested runs Parallel inside Parallel, three deep, at several
// thread counts: it must finish (no deadlock) and cover every index.
func TestParallelNested(t *testing.T) {
	defer SetThreads(Threads())
	for _, th := range []int{1, 2, 8} {
		SetThreads(th)
		cover(t, 16, 1, func() {
			cover(t, 33, 2, func() {
				cover(t, 9, 1, nil)
			})
		})
	}
}

// TestParallelConcurrentCallers has several goroutines call Parallel at once.
func TestParallelConcurrentCallers(t *testing.T) {
	defer SetThreads(Threads())
	SetThreads(2)
	done := make(chan struct{})
	for range 6 {
		go func() {
			defer func() { done <- struct{}{} }()
			for range 50 {
				cover(t, 200, 7, nil)
			}
		}()
	}
	for range 6 {
		<-done
	}
}

func TestParallelPanicPropagates(t *testing.T) {
	defer SetThreads(Threads())
	SetThreads(4)
	defer func() {
		if r := recover(); r != "boom" {
			t.Fatalf("recovered %v, want boom", r)
		}
	}()
	Parallel(100, 1, func(lo, hi int) {
		if lo <= 50 && 50 < hi {
			panic("boom")
		}
	})
	t.Fatal("Parallel returned without re-panicking")
}

func TestSetThreads(t *testing.T) {
	defer SetThreads(Threads())
	SetThreads(0)
	if Threads() != 1 {
		t.Fatalf("SetThreads(0): Threads() = %d, want 1", Threads())
	}
	SetThreads(5)
	if Threads() != 5 {
		t.Fatalf("Threads() = %d, want 5", Threads())
	}
}
