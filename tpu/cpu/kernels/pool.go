package kernels

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// The pool is work-sharing with the caller participating. Parallel offers
// its job to workers, then claims chunks itself until none are left, and
// waits only for the helpers that joined, each of which claimed its chunks
// after it joined. Chunks shrink as the job runs out (guided
// self-scheduling): each claim takes a share of what is left, so the
// threads finish within a small chunk of each other rather than one
// waiting out the other's last large one. A worker that has just
// finished a job spins for a short while (spinFor) watching for the next
// offered job, since a decode step runs hundreds of small parallel
// products back to back and a parked goroutine wakes too late to help
// with them; after that it parks on the channel, and Parallel hands jobs
// to parked workers with non-blocking sends. A job takes at most Threads()−1 helpers. A nested call (Parallel
// from inside fn) is offered in turn and also runs its chunks itself, so
// nothing ever waits on work that no one runs: the pool cannot deadlock,
// whatever the thread count.

var (
	threads atomic.Int64

	poolMu      sync.Mutex
	poolWorkers int
	poolJobs    = make(chan *job)

	// offered is the job spinning workers join (the latest Parallel's,
	// until it is done).
	offered atomic.Pointer[job]
)

// spinFor is how long a worker watches for a job before it parks.
const spinFor = 100 * time.Microsecond

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
	least  int // the smallest chunk claimed (but the last)
	share  int // a claim takes the items left over share, at least least
	next   atomic.Int64
	slots  atomic.Int32 // helpers that may still join
	active atomic.Int32 // helpers joined and not yet done
	panicV atomic.Pointer[any]
}

// join takes a helper's slot in j, reporting false when none is left or
// every chunk is claimed. A helper that joined counts as active before it
// claims any chunk, so the caller's wait covers every chunk it runs.
func (j *job) join() bool {
	for {
		s := j.slots.Load()
		if s <= 0 || j.next.Load() >= int64(j.n) {
			return false
		}
		if j.slots.CompareAndSwap(s, s-1) {
			j.active.Add(1)
			return true
		}
	}
}

// help runs j's chunks as a helper that joined.
func (j *job) help() {
	j.run()
	j.active.Add(-1)
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
		lo, hi, ok := j.claim()
		if !ok {
			return
		}
		j.fn(lo, hi)
	}
}

// claim takes the next chunk: the items left over share, at least least.
func (j *job) claim() (lo, hi int, ok bool) {
	for {
		next := j.next.Load()
		lo = int(next)
		if lo >= j.n {
			return 0, 0, false
		}
		hi = min(lo+max(j.least, (j.n-lo)/j.share), j.n)
		if j.next.CompareAndSwap(next, int64(hi)) {
			return lo, hi, true
		}
	}
}

func worker() {
	for {
		if j := spinForJob(); j != nil {
			j.help()
			continue
		}
		if j := <-poolJobs; j.join() {
			j.help()
		}
	}
}

// spinForJob watches offered for spinFor and returns a job it joined, or
// nil.
func spinForJob() *job {
	deadline := time.Now().Add(spinFor)
	for {
		if j := offered.Load(); j != nil && j.join() {
			return j
		}
		if time.Now().After(deadline) {
			return nil
		}
		runtime.Gosched()
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
// concurrently on disjoint ranges. A call from inside fn (nested) is offered
// to the workers too, and its caller claims chunks until none are left, so
// nesting never deadlocks. A panic in fn is
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
	// Claims take half a thread's share of what is left (the first about
	// n/2t), down to chunks of about n/16t for the tail, never below grain.
	least := max(grain, (n+16*t-1)/(16*t))
	chunks := (n + least - 1) / least
	if chunks <= 1 {
		fn(0, n)
		return
	}
	helpers := min(t, chunks) - 1
	ensureWorkers(helpers)
	j := &job{fn: fn, n: n, least: least, share: 2 * t}
	j.slots.Store(int32(helpers))
	offered.Store(j)
	for range helpers { // wake parked workers; spinning ones see offered
		select {
		case poolJobs <- j:
		default:
		}
	}
	j.run()
	offered.CompareAndSwap(j, nil)
	for j.active.Load() != 0 {
		runtime.Gosched()
	}
	if p := j.panicV.Load(); p != nil {
		panic(*p)
	}
}
