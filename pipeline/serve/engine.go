// Package serve is tputool's model server: a scheduler that runs many
// requests at once over one model by continuous batching (this file,
// slots.go and scheduler.go), and the OpenAI-compatible HTTP API over it.
//
// The scheduler owns an Engine (compile.Batch, through Adapt) from one
// goroutine: between two decode steps it admits waiting requests into
// free sequence slots, runs one piece of the oldest waiting prompt's
// prefill, then decodes one token for every running sequence. The Engine
// keeps the model's state and runs its graphs over rows; which sequence a
// row holds, how many rows the decode batch has, and which finished
// prompts are kept for reuse are the scheduler's, in Slots (as vLLM keeps
// its KV-cache manager apart from its model runner). Sampling, stop
// strings and text are pipeline/generate's, per request, so a greedy
// request gives the tokens `tputool generate` gives.
//
// The HTTP API is server.go (routing, auth, access log); OpenAI's
// protocol: openai.go (the wire types of requests, their strict decoding
// and checks, /v1/models), completions.go and chat.go (the endpoints),
// sse.go (streaming) and logprobs.go; plan.go (a request's sequences and
// choices, shared with ollama.go, ollama's endpoints); embeddings.go and
// rerank.go (a cross-encoder's /v1/rerank, rerank_ids.go its pairs); and
// metrics.go (Prometheus text).
package serve

import (
	"errors"
	"fmt"

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/pipeline/generate"
	"github.com/tputool/tputool/pipeline/sample"
)

// Engine runs sequences in the rows of a decode batch over fixed compiled
// shapes (compile.Batch, through Adapt; compile.Encoder for an encoder,
// which only embeds: one row, and no prefill nor decode, which the
// server does not ask of it under ServerOptions.EmbeddingsOnly). Calls
// come from one goroutine.
// It is the whole contract between the scheduler and the model: the
// scheduler asks nothing else of it.
//
// The engine knows which rows hold a sequence (Insert fills one, Free
// empties it) and nothing of the sequences' identities. An error that
// reports StateLost() true (see Lost) means an execution failed and the
// engine dropped every sequence: it then has one row, free. Any other
// error leaves the rows as they were.
type Engine interface {
	// Slots is the most rows, the most sequences decoded at once.
	Slots() int
	// Rows is the number of rows of the decode batch now (1 to Slots).
	Rows() int
	// RowBucket is the number of rows the engine gives a decode batch of
	// at least k rows (a compiled shape, k <= RowBucket(k) <= Slots).
	RowBucket(k int) int
	// Relayout rebuilds the decode batch with len(from) rows (a
	// RowBucket): row j takes old row from[j], or is free where from[j] is
	// -1. Every row that holds a sequence must be taken, once.
	Relayout(from []int) error
	// MaxPrefill is the most prompts StartPrefill takes at once.
	MaxPrefill() int
	// PrefillGroup says which prompts prefill well together with prompt:
	// those with an equal key, at most most of them (compile.Batch: the
	// same padded length, as many as fit in one prefill piece). An engine
	// that groups any prompts returns one key and MaxPrefill.
	PrefillGroup(prompt []int) (key, most int)
	// StartPrefill begins the prefill of prompts (1 to MaxPrefill)
	// together; the returned Prefill runs it in pieces.
	StartPrefill(prompts [][]int) (Prefill, error)
	// Insert moves prompt i of a finished prefill into free row row. The
	// caller closes the prefill after its inserts and keeps.
	Insert(p Prefill, i, row int) error
	// Decode feeds tokens[i] to the sequence in row rows[i] and returns
	// the logits that follow each ([len(rows)][vocab]), valid until the
	// next call. Rows not named decode nothing anyone reads.
	Decode(rows, tokens []int) ([][]float32, error)
	// Free empties a row.
	Free(row int)

	// KeepsPrefixes reports whether Keep is available: whether a finished
	// prompt's cache can be kept and a later prompt started from it.
	KeepsPrefixes() bool
	// Keep keeps prompt i's cache of a finished prefill for later prompts
	// that share a prefix with it; the caller releases it. Keeping the
	// only prompt of a prefill takes the prefill's state.
	Keep(p Prefill, i int) (Kept, error)
	// Saving is the number of prompt tokens that a prefill of an n-token
	// prompt skips by starting from a kept cache sharing its first shared
	// tokens (pieces start at the engine's boundaries, and the last
	// prompt token is always computed: its logits are the result).
	Saving(n, shared int) int
	// StartPrefillFrom begins the prefill of prompt from a kept cache,
	// taking the tokens it shares with the kept prompt (Saving of them).
	StartPrefillFrom(prompt []int, from Kept) (Prefill, error)

	// Embed runs prompts (1 to MaxPrefill) through the model and returns
	// each one's final hidden states pooled (compile.Runner.Embed: the
	// engine's pooling, not normalized). Nothing of them stays: the
	// rows are untouched.
	Embed(prompts [][]int) ([][]float32, error)
}

// PromptScorer is an Engine that scores prompts: the log-probability
// of each of their tokens after the first, given the tokens before it
// (compile.Runner.PromptLogprobs), for echoed completions' logprobs and
// vLLM's prompt_logprobs. An engine without it answers those with a 400.
type PromptScorer interface {
	// PromptLogprobs runs prompts (1 to MaxPrefill) and returns, for
	// each, len(prompt)−1 tokens' log-probabilities with topK (0 to 20)
	// alternatives each. The rows are untouched.
	PromptLogprobs(prompts [][]int, topK int) ([][]sample.TokenLogprob, error)
}

// Speculator is an Engine whose decode batch of one sequence can be fed
// several tokens in one step and taken back (compile.Batch), for the
// scheduler's speculative decoding (Config.Speculate).
type Speculator interface {
	// SpeculateRoom is how many tokens the one sequence may be fed in
	// a step now; 0 when the engine cannot (several rows, a model with
	// recurrent state, a backend that cannot take a cache back).
	SpeculateRoom() int
	// DecodeMany feeds tokens to row and returns the logits after each.
	DecodeMany(row int, tokens []int) ([][]float32, error)
	// Rewind forgets the last n tokens fed.
	Rewind(n int) error
}

// Prefill is the prefill in progress of one or more prompts.
type Prefill interface {
	// Step runs the next piece of the prompts; when they are done it
	// returns the logits after each prompt's last token and done.
	Step() (logits [][]float32, done bool, err error)
	// Close releases the prefill.
	Close()
}

// Kept is a finished prompt's cache, kept by Engine.Keep.
type Kept interface {
	// Release frees it.
	Release()
}

// Lost reports whether err says that the engine dropped every sequence
// (an execution failed): an error in its chain has a StateLost method
// that returns true.
func Lost(err error) bool {
	var l interface{ StateLost() bool }
	return errors.As(err, &l) && l.StateLost()
}

// Typed is an Engine whose prefills and kept caches are of its own types
// P and K, as compile.Batch's are *compile.BatchPrefill and
// *compile.Kept: its methods take only its own. Adapt makes it an Engine.
type Typed[P Prefill, K Kept] interface {
	Slots() int
	Rows() int
	RowBucket(k int) int
	Relayout(from []int) error
	MaxPrefill() int
	PrefillGroup(prompt []int) (key, most int)
	StartPrefill(prompts [][]int) (P, error)
	Insert(p P, i, row int) error
	Decode(rows, tokens []int) ([][]float32, error)
	Free(row int)
	KeepsPrefixes() bool
	Keep(p P, i int) (K, error)
	Saving(n, shared int) int
	StartPrefillFrom(prompt []int, from K) (P, error)
	Embed(prompts [][]int) ([][]float32, error)
}

// Adapt returns e as an Engine: prefills and kept caches go out as
// Prefill and Kept and come back as P and K (another engine's is an
// error, never a panic).
func Adapt[P Prefill, K Kept](e Typed[P, K]) Engine { return adapted[P, K]{e} }

type adapted[P Prefill, K Kept] struct{ Typed[P, K] }

func (a adapted[P, K]) StartPrefill(prompts [][]int) (Prefill, error) {
	p, err := a.Typed.StartPrefill(prompts)
	if err != nil {
		return nil, err // not a typed nil in the interface
	}
	return p, nil
}

func (a adapted[P, K]) StartPrefillFrom(prompt []int, from Kept) (Prefill, error) {
	own, ok := from.(K)
	if !ok {
		return nil, fmt.Errorf("serve: a %T is not this engine's kept cache", from)
	}
	p, err := a.Typed.StartPrefillFrom(prompt, own)
	if err != nil {
		return nil, err
	}
	return p, nil
}

// RopeSwitch forwards the engine's LongRoPE switch
// (generate.RopeSwitcher); 0 when it has none.
func (a adapted[P, K]) RopeSwitch() int {
	if rs, ok := a.Typed.(generate.RopeSwitcher); ok {
		return rs.RopeSwitch()
	}
	return 0
}

// PromptLogprobs forwards to the engine when it scores prompts
// (PromptScorer).
func (a adapted[P, K]) PromptLogprobs(prompts [][]int, topK int) ([][]sample.TokenLogprob, error) {
	ps, ok := a.Typed.(PromptScorer)
	if !ok {
		return nil, fmt.Errorf("this model's engine does not score prompts: %w", errs.ErrUnsupported)
	}
	return ps.PromptLogprobs(prompts, topK)
}

// SpeculateRoom forwards to the engine when it speculates (Speculator),
// else it is 0.
func (a adapted[P, K]) SpeculateRoom() int {
	if sp, ok := a.Typed.(Speculator); ok {
		return sp.SpeculateRoom()
	}
	return 0
}

// DecodeMany forwards to the engine (Speculator).
func (a adapted[P, K]) DecodeMany(row int, tokens []int) ([][]float32, error) {
	sp, ok := a.Typed.(Speculator)
	if !ok {
		return nil, fmt.Errorf("this model's engine does not decode several tokens a step: %w", errs.ErrUnsupported)
	}
	return sp.DecodeMany(row, tokens)
}

// Rewind forwards to the engine (Speculator).
func (a adapted[P, K]) Rewind(n int) error {
	sp, ok := a.Typed.(Speculator)
	if !ok {
		return fmt.Errorf("this model's engine does not take its cache back: %w", errs.ErrUnsupported)
	}
	return sp.Rewind(n)
}

func (a adapted[P, K]) Insert(p Prefill, i, row int) error {
	own, ok := p.(P)
	if !ok {
		return fmt.Errorf("serve: a %T is not this engine's prefill", p)
	}
	return a.Typed.Insert(own, i, row)
}

func (a adapted[P, K]) Keep(p Prefill, i int) (Kept, error) {
	own, ok := p.(P)
	if !ok {
		return nil, fmt.Errorf("serve: a %T is not this engine's prefill", p)
	}
	k, err := a.Typed.Keep(own, i)
	if err != nil {
		return nil, err
	}
	return k, nil
}
