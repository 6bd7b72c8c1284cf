package compile

import (
	"fmt"
	"slices"
	"sync"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
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
// seconds, to save arithmetic that is cheap there.
type windows struct {
	mu    sync.Mutex
	progs map[int]*Program
}

// minWindowCache is the smallest cache whose prefill pieces are windowed:
// below it attention is a small part of a piece.
const minWindowCache = 128

// windowed reports whether the runner's prefill pieces read windows: the
// whole step is one program (compiled mode, one device, experts in the
// graph) on a backend computing in host memory.
func (r *Runner) windowed() bool {
	return r.opts.Mode == Compiled && r.tp == nil && r.moe == nil && r.opts.Caps.HostMemory
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

// precompilePrefill compiles the executables of every prefill piece of n
// tokens per row that st's cache may run, whatever slot it starts at (a
// multiple of n), without running them: the whole cache's and each
// window's. Serve's warm-up calls it so that nothing compiles under load.
// A runner that does not window has one executable for them all, which
// the caller compiled by running a piece.
func (st *State) precompilePrefill(n int) error {
	r := st.r
	if n == 1 || !r.windowed() {
		return nil // decode's program, or the one the caller ran
	}
	var progs []*Program
	for end := n; end <= st.cacheLen; end += n {
		p, err := r.prefillProgram(end, st.cacheLen)
		if err != nil {
			return err
		}
		if !slices.Contains(progs, p) {
			progs = append(progs, p)
		}
	}
	tokens := tensors.FromFlatDataAndDimensions(make([]int32, st.batch*n), st.batch, n)
	args := r.stepArgs(st, tokens, tensors.FromScalar(int32(0)))
	for _, p := range progs {
		if _, err := p.Precompile(args...); err != nil {
			return err
		}
	}
	return nil
}
