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
