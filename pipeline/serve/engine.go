// Package serve is tputool's model server: a scheduler that runs many
// requests at once over one model by continuous batching (this file and
// scheduler.go), and the OpenAI-compatible HTTP API over it.
//
// The scheduler owns an Engine (compile.Batch, through cmd) from one
// goroutine: between two decode steps it admits waiting requests into
// free sequence slots, runs one piece of the oldest waiting prompt's
// prefill, then decodes one token for every running sequence. Sampling,
// stop strings and text are pipeline/generate's, per request, so a greedy
// request gives the tokens `tputool generate` gives.
//
// The HTTP API is server.go (routing, auth, access log), openai.go (the
// OpenAI endpoints), ollama.go (ollama's) and metrics.go (Prometheus
// text).
package serve

// Engine runs sequences in a fixed number of slots over fixed compiled
// shapes (compile.Batch implements it). Calls come from one goroutine.
type Engine interface {
	// Slots is the most sequences decoded at once.
	Slots() int
	// MaxPrefill is the most prompts StartPrefill takes at once.
	MaxPrefill() int
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
	// Close releases the prefill.
	Close()
}

// An Engine may also have PrefillGroup(prompt []int) (key, most int):
// prompts with equal keys prefill well together, at most `most` of them
// (compile.Batch: the same padded length, as many as fit in one prefill
// piece; 1 for a prompt its prefix cache serves); without it any prompts
// are grouped. A Prefill may have Reused() int, the prompt tokens it took
// from a prefix cache (Observer.PrefixReused).
