package kernels

import (
	"runtime"
	"sync"
	"sync/atomic"
)

// The pool is work-sharing with the caller participating: Parallel offers its
// job to idle workers with non-blocking sends, then claims chunks itself until
// none are left. A worker is only handed a job when it is parked waiting, so
// a call never waits on a goroutine that is not already running its chunks;
// a nested call (Parallel from inside fn) finds the workers busy and runs its
// chunks inline. That is why it cannot deadlock, whatever the thread count.

var (
	threads atomic.Int64

	poolMu      sync.Mutex
	poolWorkers int
	poolJobs    = make(chan *job)
)

func init() {
	threads.Store(int64(runtime.GOMAXPROCS(0)))
}

// SetThreads sets how many goroutines (the caller included) a kernel may use.
// Values below 1 mean 1. The default is runtime.GOMAXPROCS(0) at start-up.
func SetThreads(n int) {
	if n < 1 {
		n = 1
	}
	threads.Store(int64(n))
}

// Threads returns the number of goroutines a kernel may use, the caller
// included.
func Threads() int { return int(threads.Load()) }

type job struct {
	fn     func(lo, hi int)
	n      int
	chunk  int
	next   atomic.Int64
	wg     sync.WaitGroup
	panicV atomic.Pointer[any]
}

// run claims chunks until none are left.
func (j *job) run() {
	defer func() {
		if r := recover(); r != nil {
			j.panicV.CompareAndSwap(nil, &r)
			// Drain the remaining chunks so the others finish quickly.
			j.next.Store(int64(j.n))
		}
	}()
	for {
		lo := int(j.next.Add(int64(j.chunk))) - j.chunk
		if lo >= j.n {
			return
		}
		hi := min(lo+j.chunk, j.n)
		j.fn(lo, hi)
	}
}

func worker() {
	for j := range poolJobs {
		j.run()
		j.wg.Done()
	}
}

// ensureWorkers starts workers until there are at least n.
func ensureWorkers(n int) {
	poolMu.Lock()
	for poolWorkers < n {
		go worker()
		poolWorkers++
	}
	poolMu.Unlock()
}

// Parallel runs fn over [0, n) split into chunks [lo, hi) of at least grain
// items (the last may be shorter), on up to Threads() goroutines with the
// caller taking a share, and returns when every chunk is done. Chunks are
// claimed dynamically, so uneven chunks balance out. fn must be safe to call
// concurrently on disjoint ranges. A call from inside fn (nested) runs inline
// when no worker is idle, so nesting never deadlocks. A panic in fn is
// re-raised in the caller after the other chunks have stopped.
func Parallel(n, grain int, fn func(lo, hi int)) {
	if n <= 0 {
		return
	}
	if grain < 1 {
		grain = 1
	}
	t := Threads()
	if t <= 1 || n <= grain {
		fn(0, n)
		return
	}
	// About four chunks per thread for balance, never below grain.
	chunk := max(grain, (n+4*t-1)/(4*t))
	chunks := (n + chunk - 1) / chunk
	if chunks <= 1 {
		fn(0, n)
		return
	}
	helpers := min(t, chunks) - 1
	ensureWorkers(helpers)
	j := &job{fn: fn, n: n, chunk: chunk}
	for range helpers {
		j.wg.Add(1)
		select {
		case poolJobs <- j:
		default:
			j.wg.Done()
		}
	}
	j.run()
	j.wg.Wait()
	if p := j.panicV.Load(); p != nil {
		panic(*p)
	}
}
