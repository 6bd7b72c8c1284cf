package cpu

import (
	"runtime"
	"testing"
	"time"
)

// TestReleaseLetsGo: a dead value's memory that neither the free list
// nor the spares keep (a value over spareCap) is the collector's at once,
// while the execution's other values live on: the dead slot does not
// hold it until the execution ends (an encoder's attention scores, one
// set a layer, piled up to 7.8 GB for one 2,635-token input of a
// 22-layer ModernBERT). A small value's memory goes to the free list,
// for the next value of its size.
func TestReleaseLetsGo(t *testing.T) {
	defer func(c int) { spareCap = c }(spareCap)
	spareCap = 1 << 20
	_, be := backendsForTest(t)
	st := &execState{e: &Executable{backend: be.(*Backend)}, free: map[freeKey][]any{}}

	big := make([]float32, spareCap/4+1) // one element over the cap: the spares refuse it
	collected := make(chan struct{})
	runtime.AddCleanup(&big[0], func(ch chan struct{}) { close(ch) }, collected)
	s := &slot{data: big, owned: true, refs: 1}
	st.vals = []*slot{s}
	big = nil
	st.release(s)
	deadline := time.After(10 * time.Second)
	for done := false; !done; {
		runtime.GC()
		select {
		case <-collected:
			done = true
		case <-deadline:
			t.Fatal("the released value's memory was not collected while the execution's values live on")
		case <-time.After(10 * time.Millisecond):
		}
	}

	small := make([]float32, 8)
	s2 := &slot{data: small, owned: true, refs: 2}
	st.vals = append(st.vals, s2)
	st.release(s2)
	if s2.data == nil || len(st.free[freeKey{dtypeOfFlat(small), 8}]) != 0 {
		t.Fatal("a value with a reader left was released")
	}
	st.release(s2)
	if s2.data != nil {
		t.Error("a dead slot still holds its memory")
	}
	if l := st.free[freeKey{dtypeOfFlat(small), 8}]; len(l) != 1 {
		t.Errorf("free list for 8 float32 holds %d values, want the released one", len(l))
	}
	runtime.KeepAlive(st)
}
