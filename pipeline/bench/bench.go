// Package bench measures models the way `tputool bench` reports them: one
// Row per execution mode × batch × shape, with load time, the first call's
// compile time and executable-cache hits/misses, and throughput and latency
// statistics over repeated runs (warm-up excluded).
//
// Every figure is computed from durations read on an injected clock
// (Config.Now) around the calls it measures, so tests drive a fake clock
// and assert exact values. Models plug in through small interfaces (Stepper
// for text generation, Diffuser for diffusion pipelines); this package
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
	// prefill and each decode step; for diffusion each denoising step);
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

// Row is one measured configuration. Fields of the other task are absent
// from its JSON. Times are seconds (_s) or milliseconds (_ms); rates are
// per second. See docs/benchmarks.md for the definition of each field.
type Row struct {
	Task  string `json:"task"`
	Mode  string `json:"mode"`
	Batch int    `json:"batch"`
	// Shape is the label of the sizes: "p128+g32" (prompt and generated
	// tokens) or "512x512/25" (width x height / steps).
	Shape string `json:"shape"`

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

	// Diffusion.
	StepS  *Stat `json:"step_s,omitempty"`
	ImageS *Stat `json:"image_s,omitempty"`

	// SpeedupVsEager is set on compiled rows that have an eager row of the
	// same batch and shape: eager median ITL / compiled median ITL (text
	// generation) or eager median s/step / compiled median s/step.
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
	// The settings of a text generation's executor that change what is
	// measured, where not their defaults: the KV caches' dtype
	// (--kv-cache-dtype: "bfloat16", "int8"), the weights' quantisation
	// (--quantize: "int8", "int4"), the products' activations
	// (--activations: "int8", "bf16"), where the experts run (--experts:
	// "dense", "host") and the devices (--tp, --dp).
	KVCacheDType string `json:"kv_cache_dtype,omitempty"`
	Quantize     string `json:"quantize,omitempty"`
	Activations  string `json:"activations,omitempty"`
	Experts      string `json:"experts,omitempty"`
	TP           int    `json:"tp,omitempty"`
	DP           int    `json:"dp,omitempty"`
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
