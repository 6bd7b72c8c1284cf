package compile

import (
	"fmt"
	"sync"

	"github.com/gomlx/gomlx/pkg/core/graph"
)

// Windowed prefill. A prefill piece's queries see only the slots up to
// its last token, but the cache it runs on is sized for the whole prompt
// and the tokens to come: a 512-token prompt prefilled in pieces of 128
// into a cache of 768 slots reads 768 slots of keys and values four
// times, where 128, 256, 384 and 512 hold anything. On a backend
// computing in host memory the piece's attention (the two products and
// the softmax) is a fifth of the prefill at that size, and it scales
// with the slots read, so a piece reads only a window: the slots [0, w)
// with w its end rounded up to a quarter of the cache (lm.Step.Window).
//
// Each window is a program of its own ("prefill/w384"): the graph is the
// prefill's with the attention reading the window, and the window, not
// being an input, cannot key the executables. Rounding to quarters bounds
// the programs at three more per cache length. On an accelerator the
// whole cache is read: it adds executables, whose compile there takes
// seconds, to save arithmetic that is cheap there. A server's Runner
// (owned by a compile.Batch) reads whole caches too: its warm-up would
// compile every window of every prompt bucket and row count, executables
// whose graphs every collection of the Go heap then marks for the
// server's life (they made each collection 30 to 80 ms longer and one
// stream's requests about 6% slower), while its prompts, padded to end at
// a power-of-two cache, gained only 1.02 to 1.07x in time to first token.
type windows struct {
	mu    sync.Mutex
	progs map[int]*Program
}

// minWindowCache is the smallest cache whose prefill pieces are windowed:
// below it attention is a small part of a piece.
const minWindowCache = 128

// windowed reports whether the runner's prefill pieces read windows: the
// whole step is one program (compiled mode, one device, experts in the
// graph) on a backend computing in host memory, and no Batch owns the
// runner.
func (r *Runner) windowed() bool {
	return r.opts.Mode == Compiled && r.tp == nil && r.moe == nil && r.opts.Caps.HostMemory && !r.wholeCache
}

// prefillWindow is the window of a prefill piece ending at slot end (its
// last token at end-1) in a cache of cacheLen slots: end rounded up to a
// quarter of the cache, or 0 (the whole cache) when that is the whole
// cache, the cache is small or the runner does not window.
func (r *Runner) prefillWindow(end, cacheLen int) int {
	if !r.windowed() || cacheLen < minWindowCache {
		return 0
	}
	q := (cacheLen + 3) / 4
	if w := roundUp(end, q); w < cacheLen {
		return w
	}
	return 0
}

// prefillProgram is the program of a prefill piece ending at slot end of
// a cache of cacheLen slots: the prefill, or the one of its window.
func (r *Runner) prefillProgram(end, cacheLen int) (*Program, error) {
	w := r.prefillWindow(end, cacheLen)
	if w == 0 {
		return r.prefill, nil
	}
	r.win.mu.Lock()
	defer r.win.mu.Unlock()
	if p, ok := r.win.progs[w]; ok {
		return p, nil
	}
	p, err := r.newProgram(fmt.Sprintf("prefill/w%d", w), func(in []*graph.Node) []*graph.Node { return r.stepGraphIn(w, in) })
	if err != nil {
		return nil, err
	}
	if r.win.progs == nil {
		r.win.progs = map[int]*Program{}
	}
	r.win.progs[w] = p
	return p, nil
}
