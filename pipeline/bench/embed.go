package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/tputool/tputool/internal/errs"
)

// Embedder runs a model that does not generate over whole inputs: an
// embedding model (its final hidden states pooled, compile.Runner.Embed)
// or a cross-encoder (its classifier's scores, compile.Runner.Score).
type Embedder interface {
	// Embed runs one batch of inputs in one call; what it computes is
	// not read.
	Embed(inputs [][]int) error
}

// EmbedSession is a model prepared for one execution mode (a
// compile.Runner).
type EmbedSession struct {
	Embedder Embedder
	// Counters reads the session's cumulative executable statistics; nil
	// reports zeros.
	Counters func() Counters
	// Close releases the session; may be nil.
	Close func()
}

// EmbedTarget is the model an embeddings benchmark runs: its vocabulary's
// bounds, and an EmbedSession for each execution mode.
type EmbedTarget struct {
	VocabSize int
	// MaxPositions bounds an input's tokens (0: no bound).
	MaxPositions int
	// Special ids (CLS, SEP, BOS, EOS, pad) never appear in synthetic
	// inputs.
	Special []int
	// Validate, when set, checks each case before any runs (that its
	// buffers fit in memory); its error is returned as it is.
	Validate func(EmbedCase) error
	// Open prepares a session for a mode (ModeEager or ModeCompiled); the
	// time it takes counts as load time on that mode's rows.
	Open func(mode string) (*EmbedSession, error)
	// Close releases the model; may be nil.
	Close func()
}

// EmbedCase is one batch and input length.
type EmbedCase struct {
	Batch    int
	InputLen int
}

// Shape is the case's shape label, "p128".
func (c EmbedCase) Shape() string { return fmt.Sprintf("p%d", c.InputLen) }

// EmbedCases is the product batches × input lengths, in that nesting
// order.
func EmbedCases(batches, inputLens []int) []EmbedCase {
	var cs []EmbedCase
	for _, b := range batches {
		for _, n := range inputLens {
			cs = append(cs, EmbedCase{Batch: b, InputLen: n})
		}
	}
	return cs
}

// EmbedSpec is an embeddings benchmark.
type EmbedSpec struct {
	// Modes in the order to run them; each mode runs every case.
	Modes []string
	Cases []EmbedCase
	// Load loads the model once; its time counts as load time on every row.
	Load func() (*EmbedTarget, error)
	// Seed varies the synthetic inputs (0 is fine).
	Seed uint64
}

func (s EmbedSpec) validate() error {
	if err := validateModes("EmbedSpec", s.Modes); err != nil {
		return err
	}
	if len(s.Cases) == 0 {
		return errs.Usagef("no batch and shape to measure")
	}
	for _, c := range s.Cases {
		switch {
		case c.Batch < 1:
			return &errs.OptionError{Owner: "EmbedCase", Option: "Batch", Value: c.Batch, Want: "a positive batch size"}
		case c.InputLen < 1:
			return &errs.OptionError{Owner: "EmbedCase", Option: "InputLen", Value: c.InputLen, Want: "at least 1 token"}
		}
	}
	if s.Load == nil {
		return fmt.Errorf("bench: EmbedSpec.Load is nil")
	}
	return nil
}

// Embed measures embeddings (or a cross-encoder's scores): for each mode
// it prepares a runner, then for each case runs a first (compiling) run,
// cfg.Warmup unmeasured runs and cfg.Repeat measured runs. A run is one
// Embedder call on Batch synthetic inputs of exactly InputLen tokens (the
// same inputs every run).
//
// Measured per run: the call's time. From it: embed ms, and embed tok/s =
// Batch*InputLen / the call's time, both summarised over runs.
//
// On error (including cancellation, which wraps errs.ErrInterrupted) the
// rows finished so far are returned with it.
func Embed(ctx context.Context, cfg Config, spec EmbedSpec) (rows []Row, err error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if err := spec.validate(); err != nil {
		return nil, err
	}
	return runModes(ctx, cfg, spec.Modes, spec.Cases, spec.Load,
		func(m *EmbedTarget) error { return m.check(spec.Cases) },
		func(m *EmbedTarget, s *EmbedSession, mode string, c EmbedCase) (Row, error) {
			return measureEmbed(ctx, cfg, m, s, mode, c, spec.Seed)
		})
}

func (m *EmbedTarget) open(mode string) (*EmbedSession, error) { return m.Open(mode) }

func (m *EmbedTarget) close() {
	if m != nil && m.Close != nil {
		m.Close()
	}
}

func (s *EmbedSession) close() {
	if s != nil && s.Close != nil {
		s.Close()
	}
}

func (m *EmbedTarget) check(cases []EmbedCase) error {
	if m.Open == nil {
		return fmt.Errorf("bench: EmbedTarget.Open is nil")
	}
	if err := checkVocab(m.VocabSize, m.Special); err != nil {
		return err
	}
	for _, c := range cases {
		if m.MaxPositions > 0 && c.InputLen > m.MaxPositions {
			return &errs.OptionError{Owner: "EmbedCase", Option: "InputLen", Value: c.InputLen,
				Reason: fmt.Sprintf("exceeds the model's %d positions (max_position_embeddings)", m.MaxPositions)}
		}
	}
	if m.Validate != nil {
		for _, c := range cases {
			if err := m.Validate(c); err != nil {
				return err
			}
		}
	}
	return nil
}

func measureEmbed(ctx context.Context, cfg Config, m *EmbedTarget, s *EmbedSession, mode string, c EmbedCase, seed uint64) (Row, error) {
	row := Row{Task: TaskEmbed, Mode: mode, Batch: c.Batch, Shape: c.Shape(), PromptLen: c.InputLen,
		Repeat: cfg.Repeat, Warmup: cfg.Warmup}
	inputs := SyntheticPrompts(c.Batch, c.InputLen, m.VocabSize, m.Special, seed)
	var measured []time.Duration
	err := measureRuns(ctx, cfg, &row, 1, s.Counters, func(keep bool, step func(done, total int)) (time.Duration, error) {
		start := cfg.now()
		if err := s.Embedder.Embed(inputs); err != nil {
			return 0, err
		}
		d := cfg.now().Sub(start)
		step(1, 1)
		if keep {
			measured = append(measured, d)
		}
		return d, nil
	})
	if err != nil {
		return row, err
	}
	var calls, rates []float64
	for _, d := range measured {
		calls = append(calls, ms(d))
		rates = append(rates, perSecond(float64(c.Batch*c.InputLen), d))
	}
	row.EmbedMs = Summarize(calls)
	row.EmbedTokS = Summarize(rates)
	return row, nil
}
