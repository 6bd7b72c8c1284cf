package serve

import (
	"fmt"
	"slices"

	"github.com/tputool/tputool/pipeline/generate"
)

// Slots keeps the bookkeeping of an Engine's rows for the scheduler, as
// vLLM keeps its KV-cache manager apart from its model runner; the engine
// keeps the state and its graphs.
//
//   - Which sequence each row holds. Sequences are known by handles,
//     never reused; rows are the engine's, and move when the decode batch
//     is rebuilt.
//   - How many rows the decode batch has. It grows by one row bucket when
//     full and shrinks by one when at most a quarter of its rows are used,
//     so that a sequence joining and leaving at a bucket's edge does not
//     rebuild it every time. The quarter rule goes down to one row: a lone
//     stream after a burst then decodes at batch 1, on the GEMV path (61
//     tok/s against 46 at two rows, for serve's single stream after a
//     32-stream burst on the 110M Llama).
//   - The prefix cache: the caches of the most recently finished prompts
//     (Engine.Keep), most recently used first, so that a prompt sharing a
//     prefix with one of them (a chat's system prompt) starts from it.
//
// It is used from one goroutine (the scheduler's).
type Slots struct {
	e        Engine
	rows     []int // per row: the sequence handle, -1 when free
	seqRow   map[int]int
	nextID   int
	capacity int      // the most prefixes kept
	prefixes []prefix // most recently used first
	// ropeSwitch is the engine's LongRoPE switch
	// (generate.RopeSwitcher, compile.Batch's; 0: none): a kept prompt
	// on one side of it does not serve a prompt on the other, whose keys
	// turn at the other frequencies.
	ropeSwitch int
}

// prefix is a finished prompt whose cache is kept.
type prefix struct {
	prompt []int
	kept   Kept
}

// minPrefixReuse is the fewest prompt tokens worth taking from a kept
// prefix (below it the copy costs about what it saves); shorter prompts
// are not kept.
const minPrefixReuse = 16

// NewSlots keeps e's rows, with a prefix cache of up to prefixCache
// prompts (none when 0, or when e keeps none).
func NewSlots(e Engine, prefixCache int) *Slots {
	if !e.KeepsPrefixes() {
		prefixCache = 0
	}
	s := &Slots{e: e, seqRow: map[int]int{}, capacity: max(prefixCache, 0)}
	s.rows = slices.Repeat([]int{-1}, e.Rows())
	if rs, ok := e.(generate.RopeSwitcher); ok {
		s.ropeSwitch = rs.RopeSwitch()
	}
	return s
}

// Slots is the most sequences decoded at once.
func (s *Slots) Slots() int { return s.e.Slots() }

// MaxPrefill is the most prompts StartPrefill takes at once.
func (s *Slots) MaxPrefill() int { return s.e.MaxPrefill() }

// Embed runs up to MaxPrefill prompts through the engine for their
// pooled hidden states (Engine.Embed); the rows are untouched.
func (s *Slots) Embed(prompts [][]int) ([][]float32, error) { return s.e.Embed(prompts) }

// PrefillGroup says which prompts prefill well together with prompt (the
// engine's groups); a prompt the prefix cache serves is prefilled alone
// (key -1, at most 1).
func (s *Slots) PrefillGroup(prompt []int) (key, most int) {
	if best, _ := s.prefixHit(prompt); best >= 0 {
		return -1, 1
	}
	return s.e.PrefillGroup(prompt)
}

// Prefilling is a prefill started by Slots.StartPrefill.
type Prefilling struct {
	s       *Slots
	p       Prefill
	prompts [][]int
	reused  int
	done    bool
}

// Step runs the next piece of the prompts; when they are done it returns
// the logits after each prompt's last token and done.
func (p *Prefilling) Step() (logits [][]float32, done bool, err error) {
	logits, done, err = p.p.Step()
	p.done = p.done || (done && err == nil)
	return logits, done, err
}

// Reused is the number of prompt tokens taken from the prefix cache
// rather than computed.
func (p *Prefilling) Reused() int { return p.reused }

// Close keeps a finished prefill's prompts in the prefix cache, then
// releases the prefill. Call it after the prompts' inserts.
func (p *Prefilling) Close() {
	if p.done {
		p.s.keep(p)
	}
	p.p.Close()
}

// StartPrefill begins the prefill of prompts (1 to MaxPrefill) together;
// a single prompt starts from the kept prefix that saves it the most
// tokens, if one saves at least minPrefixReuse.
func (s *Slots) StartPrefill(prompts [][]int) (*Prefilling, error) {
	pf := &Prefilling{s: s}
	for _, q := range prompts {
		pf.prompts = append(pf.prompts, slices.Clone(q))
	}
	var err error
	if len(prompts) == 1 {
		if best, saved := s.prefixHit(prompts[0]); best >= 0 {
			c := s.prefixes[best]
			if pf.p, err = s.e.StartPrefillFrom(prompts[0], c.kept); err != nil {
				return nil, err
			}
			s.prefixes = slices.Insert(slices.Delete(s.prefixes, best, best+1), 0, c) // most recently used
			pf.reused = saved
			return pf, nil
		}
	}
	if pf.p, err = s.e.StartPrefill(prompts); err != nil {
		return nil, err
	}
	return pf, nil
}

// prefixHit finds the kept prefix sharing the longest prefix with prompt
// and the prompt tokens it saves; best is -1 when none saves at least
// minPrefixReuse. Past a LongRoPE switch only a prompt on the same side
// of it is a candidate: transformers turns every key of a prompt longer
// than the switch at the long frequencies, and of a shorter one at the
// short ones.
func (s *Slots) prefixHit(prompt []int) (best, saved int) {
	best, shared := -1, 0
	for i, c := range s.prefixes {
		if sw := s.ropeSwitch; sw > 0 && (len(c.prompt) > sw) != (len(prompt) > sw) {
			continue
		}
		if k := commonPrefix(c.prompt, prompt); k > shared {
			best, shared = i, k
		}
	}
	if best < 0 {
		return -1, 0
	}
	if saved = s.e.Saving(len(prompt), shared); saved < minPrefixReuse {
		return -1, 0
	}
	return best, saved
}

// commonPrefix is the number of leading tokens a and b share.
func commonPrefix(a, b []int) int {
	k := 0
	for k < len(a) && k < len(b) && a[k] == b[k] {
		k++
	}
	return k
}

// keep adds the prompts of a finished prefill to the prefix cache, most
// recent first, releasing the least recently used beyond its capacity. A
// failed keep only loses a cache entry.
func (s *Slots) keep(p *Prefilling) {
	if s.capacity == 0 {
		return
	}
	for i, q := range p.prompts {
		if len(q) < minPrefixReuse {
			continue
		}
		k, err := s.e.Keep(p.p, i)
		if err != nil {
			continue
		}
		s.prefixes = slices.Insert(s.prefixes, 0, prefix{prompt: q, kept: k})
	}
	for len(s.prefixes) > s.capacity {
		s.prefixes[len(s.prefixes)-1].kept.Release()
		s.prefixes = s.prefixes[:len(s.prefixes)-1]
	}
}

// Insert moves prompt i of a finished prefill into a free row (making
// room first) and returns the new sequence's handle. The caller closes the
// prefill after its inserts.
func (s *Slots) Insert(p *Prefilling, i int) (int, error) {
	if len(s.seqRow) >= s.e.Slots() {
		return -1, fmt.Errorf("insert: all %d slots are in use", s.e.Slots())
	}
	if err := s.fit(1); err != nil {
		return -1, err
	}
	row := slices.Index(s.rows, -1)
	if err := s.e.Insert(p.p, i, row); err != nil {
		s.failed(err)
		return -1, err
	}
	id := s.nextID
	s.nextID++
	s.rows[row], s.seqRow[id] = id, row
	return id, nil
}

// Decode feeds tokens[i] to sequence seqs[i] and returns the logits that
// follow each, valid until the next Decode.
func (s *Slots) Decode(seqs, tokens []int) ([][]float32, error) {
	if len(seqs) != len(tokens) {
		return nil, fmt.Errorf("decode: %d sequences, %d tokens", len(seqs), len(tokens))
	}
	for _, h := range seqs {
		if _, ok := s.seqRow[h]; !ok {
			return nil, fmt.Errorf("decode: no sequence %d", h)
		}
	}
	if err := s.fit(0); err != nil {
		return nil, err
	}
	rows := make([]int, len(seqs))
	for i, h := range seqs {
		rows[i] = s.seqRow[h]
	}
	logits, err := s.e.Decode(rows, tokens)
	if err != nil {
		s.failed(err)
		return nil, err
	}
	return logits, nil
}

// SpeculateRoom is how many tokens sequence seq may be fed in one step
// (Speculator): 0 unless it is the only sequence, the engine speculates
// and the batch has one row (the next Decode would shrink it to one:
// fit, which a speculative step does not do).
func (s *Slots) SpeculateRoom(seq int) int {
	sp, ok := s.e.(Speculator)
	if _, has := s.seqRow[seq]; !ok || !has || len(s.seqRow) != 1 || len(s.rows) != 1 {
		return 0
	}
	return sp.SpeculateRoom()
}

// DecodeMany feeds tokens to sequence seq in one step (at most
// SpeculateRoom) and returns the logits after each.
func (s *Slots) DecodeMany(seq int, tokens []int) ([][]float32, error) {
	if s.SpeculateRoom(seq) < len(tokens) {
		return nil, fmt.Errorf("decode of %d tokens for sequence %d: no room", len(tokens), seq)
	}
	logits, err := s.e.(Speculator).DecodeMany(s.seqRow[seq], tokens)
	if err != nil {
		s.failed(err)
		return nil, err
	}
	return logits, nil
}

// Rewind forgets the last n tokens DecodeMany fed.
func (s *Slots) Rewind(n int) error {
	sp, ok := s.e.(Speculator)
	if !ok {
		return fmt.Errorf("rewind: the engine does not speculate")
	}
	if err := sp.Rewind(n); err != nil {
		s.failed(err) // a replay's execution may fail, as a step's
		return err
	}
	return nil
}

// Free ends a sequence, freeing its row.
func (s *Slots) Free(seq int) {
	if row, ok := s.seqRow[seq]; ok {
		s.rows[row] = -1
		delete(s.seqRow, seq)
		s.e.Free(row)
	}
}

// Close releases the prefix cache; nothing is kept after it.
func (s *Slots) Close() {
	for _, c := range s.prefixes {
		c.kept.Release()
	}
	s.prefixes, s.capacity = nil, 0
}

// fit gives the decode batch rows for every sequence plus extra, with a
// free row when extra > 0, shrinking it when at most a quarter of its
// rows would be used: one row bucket at a time, until it fits.
func (s *Slots) fit(extra int) error {
	for {
		k, n := len(s.seqRow)+extra, len(s.rows)
		to := n
		switch {
		case k > n || (extra > 0 && slices.Index(s.rows, -1) < 0):
			to = s.e.RowBucket(n + 1)
		case n > 1 && k <= max(n/4, 1):
			to = s.e.RowBucket(n / 2)
		}
		if to == n {
			return nil
		}
		if err := s.relayout(to); err != nil {
			return err
		}
	}
}

// relayout rebuilds the decode batch with n rows, the sequences' rows
// gathered to its front in their order.
func (s *Slots) relayout(n int) error {
	from := slices.Repeat([]int{-1}, n)
	rows := slices.Repeat([]int{-1}, n)
	j := 0
	for row, h := range s.rows {
		if h >= 0 {
			from[j], rows[j] = row, h
			j++
		}
	}
	if err := s.e.Relayout(from); err != nil {
		s.failed(err)
		return err
	}
	s.rows = rows
	for row, h := range rows {
		if h >= 0 {
			s.seqRow[h] = row
		}
	}
	return nil
}

// failed follows an engine error: when the engine dropped every sequence,
// so do the slots (the scheduler ends them at their next decode).
func (s *Slots) failed(err error) {
	if Lost(err) {
		s.rows = slices.Repeat([]int{-1}, s.e.Rows())
		clear(s.seqRow)
	}
}
