package bench

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/pipeline/generate"
	"github.com/tputool/tputool/pipeline/sample"
)

// Stepper runs a language model one step at a time (compile.State).
type Stepper interface {
	// Prefill starts a generation of at most maxNew further tokens and
	// returns each row's logits after its last prompt token.
	Prefill(prompts [][]int, maxNew int) ([][]float32, error)
	// Decode feeds one token per row and returns the logits that follow.
	Decode(next []int) ([][]float32, error)
}

// Session is a model prepared for one execution mode (a compile.Runner
// and its State).
type Session struct {
	Stepper Stepper
	// Counters reads the session's cumulative executable statistics; nil
	// reports zeros.
	Counters func() Counters
	// Close releases the session; may be nil.
	Close func()
}

// Target is the language model a benchmark runs: its vocabulary's bounds,
// and a Session for each execution mode.
type Target struct {
	VocabSize int
	// MaxPositions bounds prompt plus generated tokens (0: no bound).
	MaxPositions int
	// Special ids (BOS, EOS, pad) never appear in synthetic prompts.
	Special []int
	// Open prepares a session for a mode (ModeEager or ModeCompiled); the
	// time it takes counts as load time on that mode's rows.
	Open func(mode string) (*Session, error)
	// Close releases the model; may be nil.
	Close func()
}

// GenerateCase is one batch and shape.
type GenerateCase struct {
	Batch     int
	PromptLen int
	GenLen    int
}

// Shape is the case's shape label, "p128+g32".
func (c GenerateCase) Shape() string { return fmt.Sprintf("p%d+g%d", c.PromptLen, c.GenLen) }

// GenerateCases is the product batches × prompt lengths × generated lengths,
// in that nesting order.
func GenerateCases(batches, promptLens, genLens []int) []GenerateCase {
	var cs []GenerateCase
	for _, b := range batches {
		for _, p := range promptLens {
			for _, g := range genLens {
				cs = append(cs, GenerateCase{Batch: b, PromptLen: p, GenLen: g})
			}
		}
	}
	return cs
}

// GenerateSpec is a text-generation benchmark.
type GenerateSpec struct {
	// Modes in the order to run them; each mode runs every case.
	Modes []string
	Cases []GenerateCase
	// Load loads the model once; its time counts as load time on every row.
	Load func() (*Target, error)
	// Seed varies the synthetic prompts (0 is fine).
	Seed uint64
}

// validateModes checks a spec's Modes (owner names the spec in errors):
// eager, compiled or both, each once.
func validateModes(owner string, modes []string) error {
	if len(modes) == 0 {
		return &errs.OptionError{Owner: owner, Option: "Modes", Value: "[]", Want: "eager, compiled or both"}
	}
	for i, m := range modes {
		if m != ModeEager && m != ModeCompiled {
			return &errs.OptionError{Owner: owner, Option: "Modes", Value: strconv.Quote(m), Want: "eager or compiled"}
		}
		if slices.Contains(modes[:i], m) {
			return &errs.OptionError{Owner: owner, Option: "Modes", Value: m, Reason: "given twice"}
		}
	}
	return nil
}

func (s GenerateSpec) validate() error {
	if err := validateModes("GenerateSpec", s.Modes); err != nil {
		return err
	}
	if len(s.Cases) == 0 {
		return errs.Usagef("no batch and shape to measure")
	}
	for _, c := range s.Cases {
		switch {
		case c.Batch < 1:
			return &errs.OptionError{Owner: "GenerateCase", Option: "Batch", Value: c.Batch, Want: "a positive batch size"}
		case c.PromptLen < 1:
			return &errs.OptionError{Owner: "GenerateCase", Option: "PromptLen", Value: c.PromptLen, Want: "at least 1 token"}
		case c.GenLen < 1:
			return &errs.OptionError{Owner: "GenerateCase", Option: "GenLen", Value: c.GenLen, Want: "at least 1 token"}
		}
	}
	if s.Load == nil {
		return fmt.Errorf("bench: GenerateSpec.Load is nil")
	}
	return nil
}

// Generate measures text generation: for each mode it prepares a runner,
// then for each case runs a first (compiling) run, cfg.Warmup unmeasured
// runs and cfg.Repeat measured runs. A run prefills Batch synthetic
// prompts of exactly PromptLen tokens, picks each row's next token
// greedily, and then makes exactly GenLen decode steps, whatever tokens
// come out (end-of-sequence ids do not stop it), so rows are comparable.
//
// Measured per run: TTFT, the prefill call plus picking the first tokens;
// ITL, each decode call plus picking its tokens. From them: prefill tok/s
// = Batch*PromptLen / TTFT, decode tok/s = Batch / the run's median ITL,
// both summarised over runs; ITL pooled over every decode step of every
// measured run; the aggregate decode rate is all decoded tokens over the
// sum of all ITLs.
//
// On error (including cancellation, which wraps errs.ErrInterrupted) the
// rows finished so far are returned with it.
func Generate(ctx context.Context, cfg Config, spec GenerateSpec) (rows []Row, err error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if err := spec.validate(); err != nil {
		return nil, err
	}
	return runModes(ctx, cfg, spec.Modes, spec.Cases, spec.Load,
		func(m *Target) error { return m.check(spec.Cases) },
		func(m *Target, s *Session, mode string, c GenerateCase) (Row, error) {
			return measureGenerate(ctx, cfg, m, s, mode, c, spec.Seed)
		})
}

func (m *Target) open(mode string) (*Session, error) { return m.Open(mode) }

func (m *Target) close() {
	if m != nil && m.Close != nil {
		m.Close()
	}
}

func (s *Session) close() {
	if s != nil && s.Close != nil {
		s.Close()
	}
}

func (m *Target) check(cases []GenerateCase) error {
	if m.Open == nil {
		return fmt.Errorf("bench: LM.Open is nil")
	}
	if err := checkVocab(m.VocabSize, m.Special); err != nil {
		return err
	}
	for _, c := range cases {
		if m.MaxPositions > 0 && c.PromptLen+c.GenLen > m.MaxPositions {
			return &errs.OptionError{Owner: "GenerateCase", Option: "PromptLen", Value: c.PromptLen,
				Reason: fmt.Sprintf("plus {GenLen} %d exceeds the model's %d positions (max_position_embeddings)", c.GenLen, m.MaxPositions)}
		}
	}
	return nil
}

// checkVocab refuses a vocabulary that leaves no id for synthetic inputs
// once the special ids are taken out.
func checkVocab(vocab int, special []int) error {
	usable := vocab
	for _, id := range uniqueInts(special) {
		if id >= 0 && id < vocab {
			usable--
		}
	}
	if usable < 1 {
		return fmt.Errorf("vocabulary of %d ids has no id left for synthetic prompts after the %d special ids", vocab, len(special))
	}
	return nil
}

func uniqueInts(v []int) []int {
	s := slices.Clone(v)
	slices.Sort(s)
	return slices.Compact(s)
}

// SyntheticPrompts returns batch prompts of exactly n token ids drawn
// deterministically (splitmix64 from seed) from [0, vocab) without the
// special ids. Every row differs.
func SyntheticPrompts(batch, n, vocab int, special []int, seed uint64) [][]int {
	skip := map[int]bool{}
	for _, id := range special {
		skip[id] = true
	}
	r := splitmix{s: seed ^ 0x5eed_b3_4c4}
	out := make([][]int, batch)
	for i := range out {
		p := make([]int, n)
		for j := range p {
			for {
				id := int(r.next() % uint64(vocab))
				if !skip[id] {
					p[j] = id
					break
				}
			}
		}
		out[i] = p
	}
	return out
}

type splitmix struct{ s uint64 }

func (r *splitmix) next() uint64 {
	r.s += 0x9e3779b97f4a7c15
	z := r.s
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// greedy picks each row's most likely token.
func greedy(logits [][]float32, batch int, call string) ([]int, error) {
	if len(logits) != batch {
		return nil, fmt.Errorf("%s returned logits for %d rows, want %d", call, len(logits), batch)
	}
	next := make([]int, batch)
	for i, row := range logits {
		if len(row) == 0 {
			return nil, fmt.Errorf("%s returned no logits for row %d", call, i)
		}
		next[i] = sample.Argmax(row)
	}
	return next, nil
}

// generateRun is the timing of one run.
type generateRun struct {
	ttft  time.Duration
	itl   []time.Duration
	total time.Duration
}

func generateOnce(ctx context.Context, cfg Config, r Stepper, prompts [][]int, genLen int, step func(int)) (generateRun, error) {
	var out generateRun
	if lr, ok := r.(generate.LogitsReuser); ok {
		lr.ReuseLogits() // each step's logits are read before the next step
	}
	ad, onDevice := r.(generate.ArgmaxDecoder)
	onDevice = onDevice && !cfg.HostArgmax
	batch := len(prompts)
	start := cfg.now()
	logits, err := r.Prefill(prompts, genLen)
	if err != nil {
		return out, fmt.Errorf("prefill: %w", err)
	}
	next, err := greedy(logits, batch, "prefill")
	if err != nil {
		return out, err
	}
	last := cfg.now()
	out.ttft = last.Sub(start)
	step(1)
	out.itl = make([]time.Duration, genLen)
	for i := range out.itl {
		if err := interrupted(ctx, fmt.Sprintf("at decode step %d of %d", i+1, genLen)); err != nil {
			return out, err
		}
		s0 := cfg.now()
		if onDevice {
			if next, err = ad.DecodeArgmax(next); err != nil {
				return out, fmt.Errorf("decode step %d: %w", i+1, err)
			}
		} else {
			if logits, err = r.Decode(next); err != nil {
				return out, fmt.Errorf("decode step %d: %w", i+1, err)
			}
			if next, err = greedy(logits, batch, "decode"); err != nil {
				return out, err
			}
		}
		last = cfg.now()
		out.itl[i] = last.Sub(s0)
		step(i + 2)
	}
	out.total = last.Sub(start)
	return out, nil
}

func measureGenerate(ctx context.Context, cfg Config, m *Target, s *Session, mode string, c GenerateCase, seed uint64) (Row, error) {
	row := Row{Task: TaskGenerate, Mode: mode, Batch: c.Batch, Shape: c.Shape(), PromptLen: c.PromptLen, GenLen: c.GenLen,
		Repeat: cfg.Repeat, Warmup: cfg.Warmup}
	prompts := SyntheticPrompts(c.Batch, c.PromptLen, m.VocabSize, m.Special, seed)
	steps := 1 + c.GenLen
	var measured []generateRun
	err := measureRuns(ctx, cfg, &row, steps, s.Counters, func(keep bool, step func(done, total int)) (time.Duration, error) {
		res, err := generateOnce(ctx, cfg, s.Stepper, prompts, c.GenLen, func(i int) { step(i, steps) })
		if err != nil {
			return 0, err
		}
		if keep {
			measured = append(measured, res)
		}
		return res.total, nil
	})
	if err != nil {
		return row, err
	}

	var ttft, prefill, decode, itl []float64
	var itlSum time.Duration
	for _, r := range measured {
		ttft = append(ttft, ms(r.ttft))
		prefill = append(prefill, perSecond(float64(c.Batch*c.PromptLen), r.ttft))
		decode = append(decode, perSecond(float64(c.Batch), medianDuration(r.itl)))
		for _, d := range r.itl {
			itl = append(itl, ms(d))
			itlSum += d
		}
	}
	row.TTFTMs = Summarize(ttft)
	row.PrefillTokS = Summarize(prefill)
	row.DecodeTokS = Summarize(decode)
	row.ITLMs = Summarize(itl)
	row.DecodeTokSAggregate = ptr(perSecond(float64(c.Batch*c.GenLen*len(measured)), itlSum))
	return row, nil
}
