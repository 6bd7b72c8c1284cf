// Package serve is tputool's model server: a scheduler that runs many
// requests at once over one model by continuous batching (this file and
// scheduler.go), and the OpenAI-compatible HTTP API over it.
//
// The scheduler owns an Engine (compile.Batch, through Adapt) from one
// goroutine: between two decode steps it admits waiting requests into
// free sequence slots, runs one piece of the oldest waiting prompt's
// prefill, then decodes one token for every running sequence. Sampling,
// stop strings and text are pipeline/generate's, per request, so a greedy
// request gives the tokens `tputool generate` gives.
//
// The HTTP API is server.go (routing, auth, access log); OpenAI's
// protocol: openai.go (the wire types of requests, their strict decoding
// and checks, /v1/models), completions.go and chat.go (the endpoints),
// sse.go (streaming) and logprobs.go; plan.go (a request's sequences and
// choices, shared with ollama.go, ollama's endpoints); and metrics.go
// (Prometheus text).
package serve

import "fmt"

// Engine runs sequences in a fixed number of slots over fixed compiled
// shapes (compile.Batch, through Adapt). Calls come from one goroutine.
// It is the whole contract between the scheduler and the model: the
// scheduler asks nothing else of it.
type Engine interface {
	// Slots is the most sequences decoded at once.
	Slots() int
	// MaxPrefill is the most prompts StartPrefill takes at once.
	MaxPrefill() int
	// PrefillGroup says which prompts prefill well together with prompt:
	// those with an equal key, at most most of them (compile.Batch: the
	// same padded length, as many as fit in one prefill piece; key -1 and
	// most 1 for a prompt its prefix cache serves). An engine that groups
	// any prompts returns one key and MaxPrefill.
	PrefillGroup(prompt []int) (key, most int)
	// StartPrefill begins the prefill of prompts (1 to MaxPrefill)
	// together; the returned Prefill runs it in pieces.
	StartPrefill(prompts [][]int) (Prefill, error)
	// Insert moves prompt i of a finished prefill into a free slot and
	// returns the new sequence's handle. The caller keeps at most Slots
	// sequences, and closes the prefill after its inserts.
	Insert(p Prefill, i int) (int, error)
	// Decode feeds tokens[i] to sequence seqs[i] and returns the logits
	// that follow each ([len(seqs)][vocab]).
	Decode(seqs, tokens []int) ([][]float32, error)
	// Free releases a sequence's slot.
	Free(seq int)
}

// Prefill is the prefill in progress of one or more prompts.
type Prefill interface {
	// Step runs the next piece of the prompts; when they are done it
	// returns the logits after each prompt's last token and done.
	Step() (logits [][]float32, done bool, err error)
	// Reused is the number of prompt tokens taken from a prefix cache
	// rather than computed (Observer.PrefixReused).
	Reused() int
	// Close releases the prefill.
	Close()
}

// Typed is an Engine whose prefills are of its own type P, as
// compile.Batch's are *compile.BatchPrefill: its Insert takes only its
// own. Adapt makes it an Engine.
type Typed[P Prefill] interface {
	Slots() int
	MaxPrefill() int
	PrefillGroup(prompt []int) (key, most int)
	StartPrefill(prompts [][]int) (P, error)
	Insert(p P, i int) (int, error)
	Decode(seqs, tokens []int) ([][]float32, error)
	Free(seq int)
}

// Adapt returns e as an Engine: prefills go out as Prefill and come back
// to Insert as P (another engine's prefill is an error, never a panic).
func Adapt[P Prefill](e Typed[P]) Engine { return adapted[P]{e} }

type adapted[P Prefill] struct{ Typed[P] }

func (a adapted[P]) StartPrefill(prompts [][]int) (Prefill, error) {
	p, err := a.Typed.StartPrefill(prompts)
	if err != nil {
		return nil, err // not a typed nil in the interface
	}
	return p, nil
}

func (a adapted[P]) Insert(p Prefill, i int) (int, error) {
	own, ok := p.(P)
	if !ok {
		return -1, fmt.Errorf("serve: a %T is not this engine's prefill", p)
	}
	return a.Typed.Insert(own, i)
}
