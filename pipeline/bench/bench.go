// Package bench measures models the way `tputool bench` reports them: one
// Row per execution mode × batch × shape, with load time, the first call's
// compile time and executable-cache hits/misses, and throughput and latency
// statistics over repeated runs (warm-up excluded).
//
// Every figure is computed from durations read on an injected clock
// (Config.Now) around the calls it measures, so tests drive a fake clock
// and assert exact values. Models plug in through small interfaces (Stepper
// for text generation, Embedder for embeddings and reranking, Diffuser for
// diffusion pipelines); this package
// imports neither compile/ nor tpu/, and it never prints: progress goes
// through Config.OnProgress and results are returned as Rows, which
// format.go writes as CSV, JSON or JSON lines and turns into table cells.
//
// The JSON document is versioned (SchemaVersion) and documented in
// docs/benchmarks.md so that CI jobs can diff two runs (Compare).
package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/tputool/tputool/internal/errs"
)

// SchemaVersion is the version of the JSON document (Report). It changes
// only when a field is removed or changes meaning; new fields may appear
// without a change.
const SchemaVersion = 1

// Tasks.
const (
	TaskGenerate = "generate"
	TaskEmbed    = "embed"
	TaskDiffuse  = "diffuse"
)

// Execution modes, as compile.Mode and sd.Request.Eager name them.
const (
	ModeEager    = "eager"
	ModeCompiled = "compiled"
)

// Config is shared by every measurement.
type Config struct {
	// Repeat is the number of measured runs per row (at least 1).
	Repeat int
	// Warmup is the number of unmeasured runs after the first run of a row
	// (at least 0). The first run, which compiles the executables, is
	// never measured either: its compile time and wall time are reported
	// apart (Row.CompileS, Row.FirstRunS).
	Warmup int
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// OnProgress, when set, is called as the work advances.
	OnProgress func(Progress)
	// HostArgmax: text generation reads each decode step's logits and
	// takes their argmax on the host, where it otherwise asks a runner
	// that can for the ids alone (DecodeArgmax: the argmax taken where
	// the logits are). For comparing the two.
	HostArgmax bool
}

func (c Config) now() time.Time {
	if c.Now == nil {
		return time.Now()
	}
	return c.Now()
}

func (c Config) validate() error {
	if c.Repeat < 1 {
		return &errs.OptionError{Owner: "Config", Option: "Repeat", Value: c.Repeat, Want: "at least 1"}
	}
	if c.Warmup < 0 {
		return &errs.OptionError{Owner: "Config", Option: "Warmup", Value: c.Warmup, Reason: "must not be negative"}
	}
	return nil
}

// Phases reported through Progress.
const (
	PhaseLoad    = "load"    // loading the model (Row is empty) or preparing a mode
	PhaseFirst   = "first"   // the first run of a row: compiles
	PhaseWarmup  = "warmup"  // unmeasured runs
	PhaseMeasure = "measure" // measured runs
	PhaseDone    = "done"    // the row is finished; Row holds it
)

// Progress describes where a benchmark is.
type Progress struct {
	Phase string
	// Label names the row being measured ("eager b1 p128+g32"); empty
	// while loading the model.
	Label string
	// Run is the 0-based run within the row (first run, warm-ups, then
	// measured runs); Runs is their number.
	Run, Runs int
	// Step is the number of calls done in the run (for text generation the
	// prefill and each decode step; for embeddings the one call; for
	// diffusion each denoising step);
	// Steps is their number per run.
	Step, Steps int
	// Row is the finished row (PhaseDone only).
	Row *Row
}

func (c Config) progress(p Progress) {
	if c.OnProgress != nil {
		c.OnProgress(p)
	}
}

// measureRuns makes the runs of one row: a first run, which compiles and is
// never measured, cfg.Warmup unmeasured runs and cfg.Repeat measured runs,
// reporting progress with steps calls per run. once performs one run,
// reporting each finished call through step, keeps its result when
// measured is true and returns the run's wall time. measureRuns fills the
// row's compile time and first-run time (from the first run) and its
// executable-cache hits, misses and recompiles (from counters, which may
// be nil). Errors are prefixed with the row's label.
func measureRuns(ctx context.Context, cfg Config, row *Row, steps int, counters func() Counters,
	once func(measured bool, step func(done, total int)) (time.Duration, error)) error {
	if counters == nil {
		counters = func() Counters { return Counters{} }
	}
	runs := 1 + cfg.Warmup + cfg.Repeat
	label := row.Label()
	c0 := counters()
	var cw Counters
	for run := range runs {
		phase := PhaseMeasure
		switch {
		case run == 0:
			phase = PhaseFirst
		case run <= cfg.Warmup:
			phase = PhaseWarmup
		}
		if err := interrupted(ctx, label); err != nil {
			return err
		}
		cfg.progress(Progress{Phase: phase, Label: label, Run: run, Runs: runs, Steps: steps})
		wall, err := once(phase == PhaseMeasure, func(done, total int) {
			cfg.progress(Progress{Phase: phase, Label: label, Run: run, Runs: runs, Step: done, Steps: total})
		})
		if err != nil {
			return fmt.Errorf("%s: %w", label, err)
		}
		if run == 0 {
			row.CompileS = (counters().Compile - c0.Compile).Seconds()
			row.FirstRunS = wall.Seconds()
		}
		if run == cfg.Warmup {
			cw = counters()
		}
	}
	end := counters()
	row.CacheHits = end.Hits - c0.Hits
	row.CacheMisses = end.Misses - c0.Misses
	row.Recompiles = end.Misses - cw.Misses
	return nil
}

// modeTarget is a loaded model that prepares a session per execution
// mode: *Target (text generation) or *EmbedTarget (embeddings).
type modeTarget[S modeSession] interface {
	open(mode string) (S, error)
	close()
}

// modeSession is a model prepared for one mode: *Session or *EmbedSession.
type modeSession interface{ close() }

// runModes is the loop Generate and Embed share. It loads the model once
// (its time counts as load time on every row) and checks it, then for
// each mode prepares a session (its time is added to that mode's rows'
// load time), measures every case with it, reporting each finished row,
// and closes it before the next mode, so that one mode's runner holds the
// device at a time. Compiled rows get their speed-ups over eager ones. On
// error (cancellation between modes wraps errs.ErrInterrupted) the rows
// finished so far are returned with it.
func runModes[T modeTarget[S], S modeSession, C any](ctx context.Context, cfg Config, modes []string, cases []C,
	load func() (T, error), check func(T) error, measure func(m T, s S, mode string, c C) (Row, error)) (rows []Row, err error) {
	defer func() { setSpeedups(rows) }()
	cfg.progress(Progress{Phase: PhaseLoad})
	start := cfg.now()
	m, err := load()
	if err != nil {
		return nil, err
	}
	defer m.close()
	loadTime := cfg.now().Sub(start)
	if err := check(m); err != nil {
		return nil, err
	}
	for _, mode := range modes {
		if err := interrupted(ctx, "before "+mode+" mode"); err != nil {
			return rows, err
		}
		cfg.progress(Progress{Phase: PhaseLoad, Label: mode})
		start := cfg.now()
		s, err := m.open(mode)
		if err != nil {
			return rows, fmt.Errorf("%s mode: %w", mode, err)
		}
		open := cfg.now().Sub(start)
		for _, c := range cases {
			row, err := measure(m, s, mode, c)
			if err != nil {
				s.close()
				return rows, err
			}
			row.LoadS = (loadTime + open).Seconds()
			rows = append(rows, row)
			cfg.progress(Progress{Phase: PhaseDone, Label: row.Label(), Row: &rows[len(rows)-1]})
		}
		s.close()
	}
	return rows, nil
}

// Counters are cumulative executable statistics of whatever runs a model
// (the Stats of compile.Runner or compile.GraphExecutor). Rows report the
// differences over their own runs.
type Counters struct {
	// Compile is the total time spent compiling executables.
	Compile time.Duration
	// Hits and Misses count executable-cache lookups; a miss compiled.
	Hits, Misses int
}

// Stat summarises one metric over its samples.
type Stat struct {
	Median float64 `json:"median"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
	// Stddev is the sample standard deviation (n-1 in the denominator; 0
	// for a single sample).
	Stddev float64 `json:"stddev"`
	// N is the number of samples.
	N int `json:"n"`
}

// Row is one measured configuration. Fields of the other tasks are absent
// from its JSON. Times are seconds (_s) or milliseconds (_ms); rates are
// per second. See docs/benchmarks.md for the definition of each field.
type Row struct {
	Task  string `json:"task"`
	Mode  string `json:"mode"`
	Batch int    `json:"batch"`
	// Shape is the label of the sizes: "p128+g32" (prompt and generated
	// tokens), "p128" (an embedding's input tokens) or "512x512/25"
	// (width x height / steps).
	Shape string `json:"shape"`

	// PromptLen is the tokens of each prompt (text generation) or input
	// (embeddings).
	PromptLen int `json:"prompt_len,omitempty"`
	GenLen    int `json:"gen_len,omitempty"`
	Steps     int `json:"steps,omitempty"`
	Width     int `json:"width,omitempty"`
	Height    int `json:"height,omitempty"`

	Repeat int `json:"repeat"`
	Warmup int `json:"warmup"`

	// LoadS is the model load time: the checkpoint load plus, for text
	// generation, preparing the mode's runner (weights converted and
	// uploaded).
	LoadS float64 `json:"load_s"`
	// CompileS is the compile time during the row's first run.
	CompileS float64 `json:"compile_s"`
	// FirstRunS is the wall time of the first run, compilation included.
	FirstRunS float64 `json:"first_run_s"`
	// CacheHits and CacheMisses count executable-cache lookups over all of
	// the row's runs; Recompiles counts the misses during measured runs
	// (0 unless shapes changed between runs, which would put compile time
	// into the measurements).
	CacheHits   int `json:"cache_hits"`
	CacheMisses int `json:"cache_misses"`
	Recompiles  int `json:"recompiles"`

	// Text generation.
	PrefillTokS *Stat `json:"prefill_tok_s,omitempty"`
	DecodeTokS  *Stat `json:"decode_tok_s,omitempty"`
	// DecodeTokSAggregate is every decoded token of every measured run over
	// the sum of their decode step times.
	DecodeTokSAggregate *float64 `json:"decode_tok_s_aggregate,omitempty"`
	TTFTMs              *Stat    `json:"ttft_ms,omitempty"`
	ITLMs               *Stat    `json:"itl_ms,omitempty"`

	// Embeddings: EmbedTokS is Batch*PromptLen tokens over each measured
	// call's time, EmbedMs each measured call's time.
	EmbedTokS *Stat `json:"embed_tok_s,omitempty"`
	EmbedMs   *Stat `json:"embed_ms,omitempty"`

	// Diffusion.
	StepS  *Stat `json:"step_s,omitempty"`
	ImageS *Stat `json:"image_s,omitempty"`

	// SpeedupVsEager is set on compiled rows that have an eager row of the
	// same batch and shape: eager median ITL / compiled median ITL (text
	// generation), eager median embed ms / compiled median embed ms
	// (embeddings) or eager median s/step / compiled median s/step.
	SpeedupVsEager *float64 `json:"speedup_vs_eager,omitempty"`
	// PrefillSpeedupVsEager is eager median TTFT / compiled median TTFT.
	PrefillSpeedupVsEager *float64 `json:"prefill_speedup_vs_eager,omitempty"`
}

// Key identifies a row across runs: Compare matches rows by it.
type Key struct {
	Task, Mode string
	Batch      int
	Shape      string
}

// Key returns the row's key.
func (r *Row) Key() Key { return Key{r.Task, r.Mode, r.Batch, r.Shape} }

// Label is a short name for progress lines: "eager b1 p128+g32".
func (r *Row) Label() string { return fmt.Sprintf("%s b%d %s", r.Mode, r.Batch, r.Shape) }

// Host describes the machine.
type Host struct {
	OS          string `json:"os"`
	Arch        string `json:"arch"`
	Cores       int    `json:"cores"`
	MemoryBytes int64  `json:"memory_bytes,omitempty"`
	// LoadAvg is the 1-minute load average when the benchmark started
	// (Linux), a hint of how busy the machine was.
	LoadAvg *float64 `json:"load_avg,omitempty"`
}

// Header describes the run: software, device, model and settings.
type Header struct {
	TputoolVersion string `json:"tputool_version"`
	Commit         string `json:"commit,omitempty"`
	GoVersion      string `json:"go_version"`
	GoMLX          string `json:"gomlx"`
	GoXLA          string `json:"go_xla"`
	// Device is the opened device in words ("cpu (go, 1 device)").
	Device string `json:"device"`
	// Backend is the GoMLX backend: "cpu" (tputool's own), "go" or "xla".
	Backend string `json:"backend"`
	// Platform is the PJRT platform ("cpu", "tpu", "cuda").
	Platform string `json:"platform"`
	DType    string `json:"dtype"`
	Model    string `json:"model"`
	Task     string `json:"task"`
	// Date is when the benchmark started, RFC 3339.
	Date   string `json:"date"`
	Host   Host   `json:"host"`
	Repeat int    `json:"repeat"`
	Warmup int    `json:"warmup"`
	// HostArgmax: decode steps took their argmax on the host
	// (Config.HostArgmax, --host-argmax).
	HostArgmax bool `json:"host_argmax,omitempty"`
	// The settings of a language model's executor that change what is
	// measured, where not their defaults: the KV caches' dtype
	// (--kv-cache-dtype: "bfloat16", "int8"), the weights' quantisation
	// (--quantize: "int8", "int4"), the products' activations
	// (--activations: "int8", "bf16"), where the experts run (--experts:
	// "dense", "host") and the devices (--tp, --dp). Embeddings take
	// KVCacheDType (a decoder's inputs run through KV caches), Quantize
	// and Activations.
	KVCacheDType string `json:"kv_cache_dtype,omitempty"`
	Quantize     string `json:"quantize,omitempty"`
	Activations  string `json:"activations,omitempty"`
	Experts      string `json:"experts,omitempty"`
	TP           int    `json:"tp,omitempty"`
	DP           int    `json:"dp,omitempty"`
	// Embeddings: what each call ran, Call "embed" (the final hidden
	// states pooled: an embedding model) or "score" (a cross-encoder's
	// classifier on them: what rerank runs), and the pooling ("mean",
	// "last", "cls").
	Call    string `json:"call,omitempty"`
	Pooling string `json:"pooling,omitempty"`
}

// Report is the JSON document: `tputool bench -o json` writes it and
// `--compare` reads two of them.
type Report struct {
	SchemaVersion int    `json:"schema_version"`
	Header        Header `json:"header"`
	Rows          []Row  `json:"rows"`
}

// NewReport returns a report of the current schema version.
func NewReport(h Header, rows []Row) *Report {
	if rows == nil {
		rows = []Row{}
	}
	return &Report{SchemaVersion: SchemaVersion, Header: h, Rows: rows}
}

// interrupted wraps a context error as errs.ErrInterrupted.
func interrupted(ctx context.Context, where string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%w: benchmark stopped %s: %w", errs.ErrInterrupted, where, err)
	}
	return nil
}

func ptr(v float64) *float64 { return &v }

// setSpeedups fills the compiled-vs-eager columns of compiled rows from
// the eager rows of the same task, batch and shape; ratio picks the metric
// and returns false when it cannot be computed.
func setSpeedups(rows []Row) {
	eager := map[Key]*Row{}
	for i := range rows {
		if rows[i].Mode == ModeEager {
			k := rows[i].Key()
			k.Mode = ""
			eager[k] = &rows[i]
		}
	}
	for i := range rows {
		r := &rows[i]
		if r.Mode != ModeCompiled {
			continue
		}
		k := r.Key()
		k.Mode = ""
		e, ok := eager[k]
		if !ok {
			continue
		}
		r.SpeedupVsEager, r.PrefillSpeedupVsEager = nil, nil
		switch r.Task {
		case TaskGenerate:
			r.SpeedupVsEager = ratio(e.ITLMs, r.ITLMs)
			r.PrefillSpeedupVsEager = ratio(e.TTFTMs, r.TTFTMs)
		case TaskEmbed:
			r.SpeedupVsEager = ratio(e.EmbedMs, r.EmbedMs)
		case TaskDiffuse:
			r.SpeedupVsEager = ratio(e.StepS, r.StepS)
		}
	}
}

// ratio is a.Median / b.Median, or nil when either is missing or b is 0.
func ratio(a, b *Stat) *float64 {
	if a == nil || b == nil || b.Median == 0 {
		return nil
	}
	return ptr(a.Median / b.Median)
}
