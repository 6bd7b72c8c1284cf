package serve

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// rowEngine is an Engine whose rows hold a mark (the first token of the
// prompt inserted there, below countVocab) that Decode returns as a
// one-hot, so a row moved wrong by a relayout shows as another sequence's
// logits. Its row
// buckets are powers of two, as compile.Batch's; it keeps prefixes when
// keeps is set, starting a reused prefill at multiples of 8 tokens.
type rowEngine struct {
	sumEmbed
	t         *testing.T
	slots     int
	rows      []int // per row: its mark, -1 when free
	relayouts []int // the row counts relaid to
	keeps     bool
	released  []int // the first tokens of released kept prompts
	from      []int // the kept prompt each StartPrefillFrom started from
	lose      bool  // the next Decode fails and drops every sequence
}

type rowPrefill struct {
	prompts [][]int
	done    bool
	closed  bool
}

type rowKept struct {
	e      *rowEngine
	prompt []int
}

type lost struct{}

func (lost) Error() string   { return "device lost" }
func (lost) StateLost() bool { return true }

func newRowEngine(t *testing.T, slots int) *rowEngine {
	return &rowEngine{t: t, slots: slots, rows: []int{-1}}
}

func (e *rowEngine) Slots() int      { return e.slots }
func (e *rowEngine) Rows() int       { return len(e.rows) }
func (e *rowEngine) MaxPrefill() int { return 4 }

func (e *rowEngine) RowBucket(k int) int {
	n := 1
	for n < k {
		n *= 2
	}
	return min(n, e.slots)
}

func (e *rowEngine) Relayout(from []int) error {
	if e.RowBucket(len(from)) != len(from) {
		e.t.Errorf("relayout to %d rows, not a bucket", len(from))
	}
	rows := slices.Repeat([]int{-1}, len(from))
	taken := 0
	for j, r := range from {
		if r >= 0 {
			rows[j] = e.rows[r]
			taken++
		}
	}
	for _, m := range e.rows {
		if m >= 0 {
			taken--
		}
	}
	if taken != 0 {
		e.t.Errorf("relayout %v of rows %v drops or repeats a sequence", from, e.rows)
	}
	e.rows = rows
	e.relayouts = append(e.relayouts, len(from))
	return nil
}

func (e *rowEngine) PrefillGroup(prompt []int) (int, int) { return 0, e.MaxPrefill() }

func (e *rowEngine) StartPrefill(prompts [][]int) (Prefill, error) {
	return &rowPrefill{prompts: prompts}, nil
}

func (p *rowPrefill) Step() ([][]float32, bool, error) {
	p.done = true
	out := make([][]float32, len(p.prompts))
	for i, q := range p.prompts {
		out[i] = oneHot(q[0])
	}
	return out, true, nil
}

func (p *rowPrefill) Close() { p.closed = true }

func (e *rowEngine) Insert(p Prefill, i, row int) error {
	if row < 0 || row >= len(e.rows) || e.rows[row] >= 0 {
		return fmt.Errorf("insert into row %d of %v", row, e.rows)
	}
	e.rows[row] = p.(*rowPrefill).prompts[i][0]
	return nil
}

func (e *rowEngine) Decode(rows, tokens []int) ([][]float32, error) {
	if e.lose {
		e.lose = false
		e.rows = []int{-1}
		return nil, fmt.Errorf("decode: %w", lost{})
	}
	out := make([][]float32, len(rows))
	for i, r := range rows {
		if e.rows[r] < 0 {
			return nil, fmt.Errorf("decode of free row %d", r)
		}
		out[i] = oneHot(e.rows[r])
	}
	return out, nil
}

func (e *rowEngine) Free(row int) { e.rows[row] = -1 }

func (e *rowEngine) KeepsPrefixes() bool { return e.keeps }

func (e *rowEngine) Keep(p Prefill, i int) (Kept, error) {
	if !p.(*rowPrefill).done {
		return nil, errors.New("not finished")
	}
	return &rowKept{e: e, prompt: p.(*rowPrefill).prompts[i]}, nil
}

func (k *rowKept) Release() { k.e.released = append(k.e.released, k.prompt[0]) }

// Saving: pieces of 8 tokens, the last prompt token always computed.
func (e *rowEngine) Saving(n, shared int) int { return min(shared, n-1) / 8 * 8 }

func (e *rowEngine) StartPrefillFrom(prompt []int, from Kept) (Prefill, error) {
	e.from = append(e.from, from.(*rowKept).prompt[0])
	return &rowPrefill{prompts: [][]int{prompt}}, nil
}

// insertAll prefills prompts together and inserts them, returning their
// handles.
func insertAll(t *testing.T, s *Slots, prompts ...[]int) []int {
	t.Helper()
	p, err := s.StartPrefill(prompts)
	if err != nil {
		t.Fatal(err)
	}
	if _, done, err := p.Step(); err != nil || !done {
		t.Fatal(done, err)
	}
	var hs []int
	for i := range prompts {
		h, err := s.Insert(p, i)
		if err != nil {
			t.Fatal(err)
		}
		hs = append(hs, h)
	}
	p.Close()
	return hs
}

// decodeMarks decodes one step of seqs and returns each one's mark.
func decodeMarks(t *testing.T, s *Slots, seqs []int) []int {
	t.Helper()
	logits, err := s.Decode(seqs, make([]int, len(seqs)))
	if err != nil {
		t.Fatal(err)
	}
	marks := make([]int, len(seqs))
	for i, l := range logits {
		marks[i] = slices.Index(l, 1)
	}
	return marks
}

// TestSlotsGrowAndShrink: the decode batch grows by a bucket when full and
// shrinks by one while at most a quarter is used, down to one row, and
// every sequence keeps its own row through the relayouts.
func TestSlotsGrowAndShrink(t *testing.T) {
	e := newRowEngine(t, 8)
	s := NewSlots(e, 0)
	var seqs []int
	for m := 1; m <= 5; m++ {
		seqs = append(seqs, insertAll(t, s, []int{m * 7})...)
	}
	if got := fmt.Sprint(e.relayouts); got != "[2 4 8]" {
		t.Errorf("relayouts %s while inserting 5, want [2 4 8]", got)
	}
	if got := fmt.Sprint(decodeMarks(t, s, seqs)); got != "[7 14 21 28 35]" {
		t.Errorf("marks %s, want [7 14 21 28 35]", got)
	}
	for _, h := range []int{seqs[0], seqs[1], seqs[3], seqs[4]} {
		s.Free(h)
	}
	e.relayouts = nil
	if got := decodeMarks(t, s, seqs[2:3]); got[0] != 21 {
		t.Errorf("the sequence left decodes mark %d, want 21", got[0])
	}
	if got := fmt.Sprint(e.relayouts); got != "[4 2 1]" || len(e.rows) != 1 {
		t.Errorf("relayouts %s to %d rows for one sequence of eight rows, want [4 2 1] to 1", got, len(e.rows))
	}
	// Two sequences in two rows: a third grows the batch to four.
	seqs = append(seqs[2:3], insertAll(t, s, []int{40}, []int{45})...)
	if got := fmt.Sprint(decodeMarks(t, s, seqs)); got != "[21 40 45]" || len(e.rows) != 4 {
		t.Errorf("marks %s in %d rows, want [21 40 45] in 4", got, len(e.rows))
	}
	if _, err := s.Decode([]int{seqs[0], 99}, []int{0, 0}); err == nil {
		t.Error("decode of an unknown sequence: no error")
	}
}

// TestSlotsFull: no insert beyond Slots sequences.
func TestSlotsFull(t *testing.T) {
	s := NewSlots(newRowEngine(t, 2), 0)
	insertAll(t, s, []int{1}, []int{2})
	p, err := s.StartPrefill([][]int{{3}})
	if err != nil {
		t.Fatal(err)
	}
	p.Step()
	if _, err := s.Insert(p, 0); err == nil {
		t.Error("a third sequence in two slots: no error")
	}
}

// TestSlotsLost: after the engine drops every sequence, so do the slots:
// their handles are unknown and the next insert takes the one free row.
func TestSlotsLost(t *testing.T) {
	e := newRowEngine(t, 4)
	s := NewSlots(e, 0)
	seqs := insertAll(t, s, []int{1}, []int{2}, []int{3})
	e.lose = true
	if _, err := s.Decode(seqs, make([]int, 3)); !Lost(err) {
		t.Fatalf("decode: %v, want a lost state", err)
	}
	if _, err := s.Decode(seqs[:1], []int{0}); err == nil {
		t.Error("decode of a dropped sequence: no error")
	}
	h := insertAll(t, s, []int{9})
	if got := decodeMarks(t, s, h); got[0] != 9 || len(e.rows) != 1 {
		t.Errorf("after the loss: mark %d in %d rows, want 9 in 1", got[0], len(e.rows))
	}
}

// TestSlotsPrefixCache: finished prompts of at least minPrefixReuse
// tokens are kept, the least recently used released beyond the capacity;
// a prompt starts from the kept one sharing the most with it, alone, when
// that saves at least minPrefixReuse tokens.
func TestSlotsPrefixCache(t *testing.T) {
	e := newRowEngine(t, 8)
	e.keeps = true
	s := NewSlots(e, 2)
	long := func(first, n int) []int {
		p := make([]int, n)
		for i := range p {
			p[i] = 100 + i
		}
		p[0] = first
		return p
	}
	a := long(1, 40)
	b := append(long(2, 30), 7, 7) // shares nothing with a
	short := long(3, 10)
	for _, h := range insertAll(t, s, a, b, short) {
		s.Free(h)
	}
	if len(s.prefixes) != 2 || s.prefixes[0].prompt[0] != 2 || s.prefixes[1].prompt[0] != 1 {
		t.Fatalf("kept %v, want b then a (short not kept)", s.prefixes)
	}
	// a's first 33 tokens then others: 32 shared tokens are saved.
	q := append(slices.Clone(a[:33]), 5, 5, 5)
	if key, most := s.PrefillGroup(q); key != -1 || most != 1 {
		t.Errorf("a prompt the cache serves groups as (%d, %d), want (-1, 1)", key, most)
	}
	p, err := s.StartPrefill([][]int{q})
	if err != nil {
		t.Fatal(err)
	}
	if p.Reused() != 32 || fmt.Sprint(e.from) != "[1]" {
		t.Errorf("reused %d tokens from %v, want 32 from [1]", p.Reused(), e.from)
	}
	p.Step()
	p.Close() // q is kept: a was used last, so b goes
	if fmt.Sprint(e.released) != "[2]" || s.prefixes[0].prompt[0] != 1 || s.prefixes[1].prompt[0] != 1 {
		t.Errorf("released %v, kept %d prompts; want b released, q and a kept", e.released, len(s.prefixes))
	}
	// Sharing 12 tokens saves 8, under minPrefixReuse: a plain prefill,
	// grouped as the engine groups.
	if key, _ := s.PrefillGroup(append(slices.Clone(a[:12]), 9)); key != 0 {
		t.Errorf("a 12-token share groups with key %d, want the engine's 0", key)
	}
	// An unfinished prefill keeps nothing; Close releases everything kept.
	p, _ = s.StartPrefill([][]int{long(4, 20)})
	p.Close()
	s.Close()
	if len(e.released) != 3 || len(s.prefixes) != 0 {
		t.Errorf("released %v after Close, want all three", e.released)
	}
	// An engine that keeps none: nothing kept.
	e2 := newRowEngine(t, 2)
	s2 := NewSlots(e2, 4)
	insertAll(t, s2, a)
	if len(s2.prefixes) != 0 {
		t.Error("a prefix kept by an engine that keeps none")
	}
}

// switchingEngine is a rowEngine of a model with a LongRoPE switch.
type switchingEngine struct {
	*rowEngine
	sw int
}

func (e switchingEngine) RopeSwitch() int { return e.sw }

// TestSlotsPrefixCacheSwitch: with a LongRoPE switch at 24 positions, a
// kept prompt of 20 tokens does not serve a prompt of 40 sharing its
// first 20 (its keys turned at the short frequencies, the new prompt's at
// the long ones), nor a kept prompt of 40 one of 20; prompts on the same
// side of the switch share as before.
func TestSlotsPrefixCacheSwitch(t *testing.T) {
	e := newRowEngine(t, 8)
	e.keeps = true
	s := NewSlots(switchingEngine{e, 24}, 4)
	seq := func(first, n int) []int {
		p := make([]int, n)
		for i := range p {
			p[i] = 100 + i
		}
		p[0] = first
		return p
	}
	short, long := seq(1, 20), seq(2, 40)
	for _, h := range insertAll(t, s, short, long) {
		s.Free(h)
	}
	for _, c := range []struct {
		name   string
		prompt []int
		hit    bool
	}{
		{"past the switch over a short prefix", append(slices.Clone(short), seq(9, 20)...), false},
		{"under the switch over a long prefix", slices.Clone(long[:22]), false},
		{"past the switch over a long prefix", append(slices.Clone(long), 5, 5), true},
		{"under the switch over a short prefix", append(slices.Clone(short), 5, 5), true},
	} {
		if best, _ := s.prefixHit(c.prompt); (best >= 0) != c.hit {
			t.Errorf("%s: hit %v, want %v", c.name, best >= 0, c.hit)
		}
	}
	s.Close()
}

// TestSlotsRandomWalk: random joins, leaves and decode steps over 16
// slots keep every sequence on its own row (its mark comes back), keep the
// batch a row bucket with room for every sequence, and shrink it as the
// quarter rule says; the walk reaches 16 rows and comes back to one.
func TestSlotsRandomWalk(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 5))
	e := newRowEngine(t, 16)
	s := NewSlots(e, 0)
	var live []int        // running handles, in join order
	mark := map[int]int{} // handle -> its mark
	next, most, shrinks := 1, 0, 0
	for step := 0; step < 3000; step++ {
		joinBias := 4
		if step/500%2 == 1 {
			joinBias = 2 // alternate filling and draining phases
		}
		switch op := r.IntN(10); {
		case op < joinBias && len(live) < 16: // join: 1 to 3 prompts prefilled together
			n := min(1+r.IntN(3), 16-len(live))
			var prompts [][]int
			for range n {
				prompts = append(prompts, []int{next % countVocab})
				next++
			}
			for i, h := range insertAll(t, s, prompts...) {
				mark[h] = prompts[i][0]
				live = append(live, h)
			}
		case op < 7 && len(live) > 0: // leave
			i := r.IntN(len(live))
			s.Free(live[i])
			delete(mark, live[i])
			live = slices.Delete(live, i, i+1)
		default: // a decode step of every running sequence
			if len(live) == 0 {
				continue
			}
			before := len(e.rows)
			got := decodeMarks(t, s, live)
			for i, h := range live {
				if got[i] != mark[h] {
					t.Fatalf("step %d: sequence %d decodes mark %d, want %d", step, h, got[i], mark[h])
				}
			}
			rows := len(e.rows)
			if rows != e.RowBucket(rows) || rows < len(live) {
				t.Fatalf("step %d: %d rows for %d sequences", step, rows, len(live))
			}
			if rows > 1 && len(live) <= max(rows/4, 1) {
				t.Fatalf("step %d: %d rows kept for %d sequences (the quarter rule shrinks them)", step, rows, len(live))
			}
			most = max(most, rows)
			if rows < before {
				shrinks++
			}
		}
	}
	if most != 16 || shrinks == 0 {
		t.Errorf("the walk reached %d rows and shrank %d times: want 16 and some", most, shrinks)
	}
}
