// Package sample picks the next token from a row of logits on the host,
// with the logits processors of transformers' generate() in its order:
// repetition penalty, then (when sampling) temperature, top-k, top-p and
// min-p, then a draw from the softmax. Temperature 0 is greedy decoding
// (argmax after the repetition penalty, as transformers' do_sample=False).
// OpenAI's logit bias and presence and frequency penalties, when set, go
// around the repetition penalty as vLLM's sampler applies them: the bias
// first, the two penalties after it.
//
// Draws come from a seeded PCG stream per row, so a seed reproduces a run
// exactly (tputool's own streams; they do not reproduce PyTorch's
// torch.multinomial).
package sample

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
)

// Options are the sampling settings, with transformers' meanings.
type Options struct {
	// Temperature divides the logits; 0 selects greedy decoding.
	Temperature float64
	// TopK keeps the k highest logits (ties with the k-th kept); 0 is off.
	TopK int
	// TopP keeps the smallest set of most likely tokens whose probability
	// reaches TopP; 0 or 1 is off.
	TopP float64
	// MinP drops tokens whose probability is below MinP times the most
	// likely token's; 0 is off.
	MinP float64
	// RepetitionPenalty divides positive logits and multiplies negative
	// ones of every token already in the sequence (prompt included); 0 or 1
	// is off.
	RepetitionPenalty float64
	// PresencePenalty is subtracted from the logit of every token the
	// sequence has generated (not the prompt's), once; FrequencyPenalty
	// is subtracted once per time it was generated (OpenAI's, in [-2, 2]).
	// 0 is off.
	PresencePenalty  float64
	FrequencyPenalty float64
	// LogitBias is added to the logits of its token ids (OpenAI's, each
	// in [-100, 100]) before every other processor; ids past the logits
	// are ignored.
	LogitBias map[int]float64
	// Seed seeds the draws.
	Seed uint64
}

// Bounds of OpenAI's penalties and logit bias.
const (
	MaxPenalty   = 2
	MaxLogitBias = 100
)

// Validate checks the ranges, naming the flag-like field at fault.
func (o Options) Validate() error {
	switch {
	case o.Temperature < 0 || math.IsNaN(o.Temperature):
		return fmt.Errorf("temperature must be >= 0, got %v", o.Temperature)
	case o.TopK < 0:
		return fmt.Errorf("top-k must be >= 0, got %d", o.TopK)
	case o.TopP < 0 || o.TopP > 1 || math.IsNaN(o.TopP):
		return fmt.Errorf("top-p must be in [0, 1], got %v", o.TopP)
	case o.MinP < 0 || o.MinP > 1 || math.IsNaN(o.MinP):
		return fmt.Errorf("min-p must be in [0, 1], got %v", o.MinP)
	case o.RepetitionPenalty < 0 || math.IsNaN(o.RepetitionPenalty):
		return fmt.Errorf("repetition penalty must be > 0, got %v", o.RepetitionPenalty)
	case !(math.Abs(o.PresencePenalty) <= MaxPenalty):
		return fmt.Errorf("presence penalty must be in [-%d, %d], got %v", MaxPenalty, MaxPenalty, o.PresencePenalty)
	case !(math.Abs(o.FrequencyPenalty) <= MaxPenalty):
		return fmt.Errorf("frequency penalty must be in [-%d, %d], got %v", MaxPenalty, MaxPenalty, o.FrequencyPenalty)
	}
	for id, b := range o.LogitBias {
		if id < 0 || !(math.Abs(b) <= MaxLogitBias) {
			return fmt.Errorf("logit bias of token %d must be in [-%d, %d] for an id >= 0, got %v", id, MaxLogitBias, MaxLogitBias, b)
		}
	}
	return nil
}

// Greedy reports whether the options select greedy decoding.
func (o Options) Greedy() bool { return o.Temperature == 0 }

// ArgmaxOnly reports whether the options pick the argmax of the logits as
// they are (Argmax): greedy decoding with no repetition penalty, presence
// or frequency penalty or logit bias. A constraint, where there is one,
// still masks them.
func (o Options) ArgmaxOnly() bool {
	return o.Greedy() && !o.penalizes() && !o.penalizesGenerated() && len(o.LogitBias) == 0
}

// ReadsHistory reports whether the tokens so far change the
// distribution (a repetition, presence or frequency penalty): else Next
// and Distribution may be given no history.
func (o Options) ReadsHistory() bool { return o.penalizes() || o.penalizesGenerated() }

// penalizes reports whether the repetition penalty is on.
func (o Options) penalizes() bool {
	p := o.RepetitionPenalty
	return p != 0 && p != 1
}

// penalizesGenerated reports whether the presence or frequency penalty is
// on.
func (o Options) penalizesGenerated() bool {
	return o.PresencePenalty != 0 || o.FrequencyPenalty != 0
}

// Sampler picks tokens for one row of a batch. It reuses its buffers, so
// a step allocates nothing.
type Sampler struct {
	o      Options
	rng    *rand.Rand
	scores []float64 // the processed logits
	probs  []float64 // scratch: probabilities, a copy for top-k
	idx    []int     // scratch: token order for top-p
	seen   map[int]bool
	counts map[int]int // scratch: how often each generated token came
	prompt int         // the tokens of history that are the prompt
}

// New returns the sampler of row `row`: rows draw from independent
// streams of the same seed.
func New(o Options, row int) *Sampler {
	return &Sampler{o: o, rng: rand.New(rand.NewPCG(o.Seed, uint64(row))), seen: map[int]bool{}, counts: map[int]int{}}
}

// SetPromptLen says that the first n tokens of the history Next is given
// are the prompt: the presence and frequency penalties count only the
// tokens after them (the repetition penalty counts all). Without it the
// whole history counts as generated.
func (s *Sampler) SetPromptLen(n int) { s.prompt = n }

// Constraint limits the tokens a row may take next (constrained
// decoding: *constrain.Matcher).
type Constraint interface {
	// Allows reports whether id may come next.
	Allows(id int) bool
	// Mask is the allowed ids as bits (id%64 of word id/64); ids past it
	// are not allowed.
	Mask() []uint64
}

// Next returns the next token given the row's logits and every token of
// the sequence so far (prompt and generated).
func (s *Sampler) Next(logits []float32, history []int) int {
	return s.NextAllowed(logits, history, nil)
}

// NextAllowed is Next over the tokens c allows (nil: all): the
// disallowed ones are masked out after the repetition penalty and before
// temperature, top-k, top-p and min-p, as vLLM's structured-output
// processors do. Greedy decoding first asks c about the argmax alone, so
// a step where the model already follows the grammar costs no mask.
func (s *Sampler) NextAllowed(logits []float32, history []int, c Constraint) int {
	return s.next(logits, history, c, -1, nil)
}

// NextDraft is NextAllowed for a position whose token a speculative
// draft proposed (draft, proposed whatever the logits: prompt lookup):
// greedy decoding picks as NextAllowed does; sampling takes the draft
// with its probability p(draft) under the processed distribution p, and
// else draws from p without it, renormalized. So each token is drawn from
// p exactly, as speculative sampling's acceptance rule gives for a draft
// of probability 1; the draws come from the row's stream in another
// order than NextAllowed's (two for a refused draft), so a seeded run
// gives other tokens than one without drafts.
func (s *Sampler) NextDraft(logits []float32, history []int, c Constraint, draft int) int {
	return s.next(logits, history, c, draft, nil)
}

// NextDraftFrom is NextDraft for a draft token drawn from q, the
// distribution of a draft model's proposal (Distribution; ids past q
// have probability 0): sampling takes it with probability
// min(1, p(draft)/q(draft)) and else draws from max(0, p − q)
// renormalized, so each token is drawn from p exactly (speculative
// sampling: Leviathan et al., Chen et al., 2023), and a draft model that
// samples from a q near p has its proposals taken more often than its
// argmax would be. Greedy decoding picks as NextAllowed does.
func (s *Sampler) NextDraftFrom(logits []float32, history []int, c Constraint, draft int, q []float64) int {
	return s.next(logits, history, c, draft, q)
}

// Distribution writes into q (as long as logits) the distribution Next
// draws from at logits after history, with no constraint: the processed
// probabilities (penalties, temperature, top-k, top-p, min-p), or, for
// greedy decoding, all of it on the argmax. A draft model samples its
// proposals from its own (Draw) for NextDraftFrom.
func (s *Sampler) Distribution(q []float64, logits []float32, history []int) {
	clear(q)
	if s.o.ArgmaxOnly() {
		q[Argmax(logits)] = 1
		return
	}
	sc := s.penalized(logits, history)
	if s.o.Greedy() {
		q[Argmax(sc)] = 1
		return
	}
	s.shape(sc)
	softmaxInto(q, sc)
}

// Draw draws an id from q, a distribution (from Distribution).
func (s *Sampler) Draw(q []float64) int {
	u := s.rng.Float64()
	last := 0
	for i, w := range q {
		if w <= 0 {
			continue
		}
		last = i
		if u < w {
			return i
		}
		u -= w
	}
	return last // rounding left u past the end: the last possible token
}

// penalized is the logits after the penalties, in the sampler's scores
// buffer.
func (s *Sampler) penalized(logits []float32, history []int) []float64 {
	if cap(s.scores) < len(logits) {
		s.scores = make([]float64, len(logits))
		s.probs = make([]float64, len(logits))
		s.idx = make([]int, len(logits))
	}
	sc := s.scores[:len(logits)]
	s.process(sc, logits, history)
	return sc
}

// shape applies temperature, top-k, top-p and min-p to sc (-inf where a
// token is out): softmax of the result is what sampling draws from.
func (s *Sampler) shape(sc []float64) {
	if t := s.o.Temperature; t != 1 {
		for i := range sc {
			sc[i] /= t
		}
	}
	if s.o.TopK > 0 && s.o.TopK < len(sc) {
		s.topK(sc)
	}
	if s.o.TopP > 0 && s.o.TopP < 1 {
		s.topP(sc)
	}
	if s.o.MinP > 0 {
		s.minP(sc)
	}
}

// next is NextAllowed, with a draft token to take or refuse first when
// draft >= 0 and sampling: of probability 1 (q nil: NextDraft) or drawn
// from q (NextDraftFrom).
func (s *Sampler) next(logits []float32, history []int, c Constraint, draft int, q []float64) int {
	if c == nil && s.o.ArgmaxOnly() {
		return Argmax(logits) // no processor: the f64 scores would order as the logits do
	}
	sc := s.penalized(logits, history)
	if c != nil {
		if s.o.Greedy() {
			if best := Argmax(sc); c.Allows(best) {
				return best
			}
		}
		if !applyMask(sc, c.Mask()) {
			// Nothing allowed within the logits (a tokenizer wider than the
			// model, whose grammar allows only ids past them): the model's
			// own pick.
			s.process(sc, logits, history)
		}
	}
	if s.o.Greedy() {
		return Argmax(sc)
	}
	s.shape(sc)
	if q != nil {
		return s.drawAfter(sc, draft, q)
	}
	if draft < 0 || draft >= len(sc) {
		return s.draw(sc)
	}
	probs := s.probs[:len(sc)]
	softmaxInto(probs, sc)
	if s.rng.Float64() < probs[draft] {
		return draft
	}
	if probs[draft] < 1 { // else rounding: nothing else is possible
		sc[draft] = math.Inf(-1)
	}
	return s.draw(sc)
}

// drawAfter draws from softmax(sc) = p given a draft drawn from q: the
// draft with probability min(1, p(draft)/q(draft)) (p 0 past sc), else a
// draw from max(0, p − q) renormalized. Where q cannot have drawn the
// draft (q(draft) not a positive number, a NaN in q) or leaves no
// residual, it draws from p itself: the tokens stay p's.
func (s *Sampler) drawAfter(sc []float64, draft int, q []float64) int {
	qd := qAt(q, draft)
	if !(qd > 0) || math.IsInf(qd, 0) {
		return s.draw(sc)
	}
	probs := s.probs[:len(sc)]
	softmaxInto(probs, sc)
	pd := 0.0
	if draft >= 0 && draft < len(probs) {
		pd = probs[draft]
	}
	if s.rng.Float64()*qd < pd {
		return draft // taken with probability min(1, p/q)
	}
	var sum float64
	for i, p := range probs {
		probs[i] = max(0, p-qAt(q, i))
		sum += probs[i]
	}
	if !(sum > 0) || math.IsInf(sum, 0) { // q ≥ p everywhere, or NaN
		return s.draw(sc)
	}
	for i := range probs {
		probs[i] /= sum
	}
	return s.Draw(probs)
}

// qAt is q[i], 0 past q.
func qAt(q []float64, i int) float64 {
	if i < len(q) {
		return q[i]
	}
	return 0
}

// applyMask sets the scores of the ids mask does not hold to -inf and
// reports whether any score is left.
func applyMask(sc []float64, mask []uint64) bool {
	inf := math.Inf(-1)
	left := false
	for w := 0; w*64 < len(sc); w++ {
		bits := uint64(0)
		if w < len(mask) {
			bits = mask[w]
		}
		for i := w * 64; i < min(len(sc), w*64+64); i++ {
			if bits&(1<<(i-w*64)) == 0 {
				sc[i] = inf
			} else if !math.IsInf(sc[i], -1) {
				left = true
			}
		}
	}
	return left
}

// process writes the logits into sc with the processors that come
// before a constraint's mask: the logit bias, the repetition penalty, the
// presence and frequency penalties.
func (s *Sampler) process(sc []float64, logits []float32, history []int) {
	for i, v := range logits {
		sc[i] = float64(v)
	}
	for id, b := range s.o.LogitBias {
		if id >= 0 && id < len(sc) {
			sc[id] += b
		}
	}
	s.repetitionPenalty(sc, history)
	s.generatedPenalties(sc, history)
}

// generatedPenalties subtracts OpenAI's presence and frequency penalties:
// logit[t] -= presence·(count[t] > 0) + frequency·count[t], count[t] the
// times t was generated.
func (s *Sampler) generatedPenalties(sc []float64, history []int) {
	if !s.o.penalizesGenerated() || s.prompt >= len(history) {
		return
	}
	clear(s.counts)
	for _, id := range history[s.prompt:] {
		if id >= 0 && id < len(sc) {
			s.counts[id]++
		}
	}
	for id, n := range s.counts {
		sc[id] -= s.o.PresencePenalty + s.o.FrequencyPenalty*float64(n)
	}
}

// repetitionPenalty is RepetitionPenaltyLogitsProcessor.
func (s *Sampler) repetitionPenalty(sc []float64, history []int) {
	if !s.o.penalizes() {
		return
	}
	p := s.o.RepetitionPenalty
	clear(s.seen)
	for _, id := range history {
		if id < 0 || id >= len(sc) || s.seen[id] {
			continue
		}
		s.seen[id] = true
		if sc[id] < 0 {
			sc[id] *= p
		} else {
			sc[id] /= p
		}
	}
}

// Argmax is the index of x's largest value: the smallest such index on a
// tie, and the first NaN if there is one, as torch.argmax (and the
// backends' ArgMax, compile.State.DecodeArgmax) pick. 0 for an empty x.
func Argmax[T float32 | float64](x []T) int {
	best := 0
	for i, v := range x {
		if v != v { // NaN
			return i
		}
		if v > x[best] {
			best = i
		}
	}
	return best
}

// topK is TopKLogitsWarper: scores below the k-th largest become -inf.
func (s *Sampler) topK(sc []float64) {
	tmp := s.probs[:len(sc)]
	copy(tmp, sc)
	kth := kthLargest(tmp, s.o.TopK)
	for i, v := range sc {
		if v < kth {
			sc[i] = math.Inf(-1)
		}
	}
}

// kthLargest returns the k-th largest value (1-based) by quickselect; it
// reorders v.
func kthLargest(v []float64, k int) float64 {
	lo, hi, target := 0, len(v)-1, k-1
	for lo < hi {
		pivot := v[(lo+hi)/2]
		i, j := lo, hi
		for i <= j {
			for v[i] > pivot {
				i++
			}
			for v[j] < pivot {
				j--
			}
			if i <= j {
				v[i], v[j] = v[j], v[i]
				i++
				j--
			}
		}
		switch {
		case target <= j:
			hi = j
		case target >= i:
			lo = i
		default:
			return v[target]
		}
	}
	return v[target]
}

// softmaxInto writes the probabilities of sc into p (masked entries 0).
func softmaxInto(p, sc []float64) {
	mx := math.Inf(-1)
	for _, v := range sc {
		mx = math.Max(mx, v)
	}
	sum := 0.0
	for i, v := range sc {
		p[i] = math.Exp(v - mx)
		sum += p[i]
	}
	for i := range p {
		p[i] /= sum
	}
}

// topP is TopPLogitsWarper: sorted by probability ascending, the tokens
// whose cumulative probability is at most 1-top_p are dropped, always
// keeping the most likely one.
func (s *Sampler) topP(sc []float64) {
	probs := s.probs[:len(sc)]
	softmaxInto(probs, sc)
	idx := s.idx[:0]
	for i, v := range sc {
		if !math.IsInf(v, -1) {
			idx = append(idx, i)
		}
	}
	slices.SortFunc(idx, func(a, b int) int { return cmp.Compare(probs[a], probs[b]) }) // sort.Slice would allocate
	cum := 0.0
	for _, i := range idx[:len(idx)-1] {
		cum += probs[i]
		if cum > 1-s.o.TopP {
			break
		}
		sc[i] = math.Inf(-1)
	}
}

// minP is MinPLogitsWarper.
func (s *Sampler) minP(sc []float64) {
	mp := s.o.MinP
	probs := s.probs[:len(sc)]
	softmaxInto(probs, sc)
	top := 0.0
	for _, p := range probs {
		top = math.Max(top, p)
	}
	for i, p := range probs {
		if p < mp*top {
			sc[i] = math.Inf(-1)
		}
	}
}

// draw samples from softmax(sc).
func (s *Sampler) draw(sc []float64) int {
	softmaxInto(sc, sc)
	return s.Draw(sc)
}
