package cmd

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/spf13/cobra"

	"github.com/tputool/tputool/compile"
	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/internal/humanize"
	"github.com/tputool/tputool/internal/ui"
	"github.com/tputool/tputool/loader"
	"github.com/tputool/tputool/loader/hub"
	"github.com/tputool/tputool/loader/tokenizer"
	"github.com/tputool/tputool/pipeline/generate"
	"github.com/tputool/tputool/pipeline/lm"
	_ "github.com/tputool/tputool/pipeline/models" // the text architectures tputool runs
	"github.com/tputool/tputool/tpu"
)

// The route from --model to a running language model, one for generate
// and bench (and the commands to come): resolveCheckpoint gives the
// *loader.Checkpoint (config.json read once), openModel checks its checkpoint
// against the architecture, and compileRunner converts the weights and builds
// the executables on the device.

// lmOptions are the inputs every language-model command (generate, chat,
// serve) shares: the run-time hooks, the model, and the flags of its
// execution. Each command's options embed it.
type lmOptions struct {
	IO       *ui.IOStreams
	Reporter *ui.Reporter
	// Device opens the --device backend.
	Device func() (*tpu.Device, error)
	// HubClient builds the Hub client (only Hub ids need it).
	HubClient func() *hub.Client
	// Resolve resolves --model; loader.ResolveRef by default.
	Resolve resolveFunc
	// Now is the clock.
	Now func() time.Time
	// HostMemory is the host's memory in bytes (0: unknown).
	HostMemory func() int64

	Model    string
	Revision string
	// Mode is --mode; DType is --dtype (InvalidDType: auto, the device's).
	Mode  compile.Mode
	DType dtypes.DType
	// Quantize is --quantize: "", "int8" or "int4" (generate and serve).
	Quantize string
	// Activations is --activations: "" (f32), "int8" or "bf16" (generate
	// and serve).
	Activations string
	Retries     int
	JSON        bool
	Verbose     bool
	// TP and DP spread the model over TP x DP devices (--tp, --dp).
	TP, DP int
	// Experts is --experts: how mixture-of-experts layers run.
	Experts compile.ExpertsMode
	// KVDType is --kv-cache-dtype (InvalidDType: auto, the compute dtype).
	KVDType dtypes.DType

	mode, dtype, experts, kvDType string // the flags as given
}

// newLMOptions are the options of a command of f, before its flags.
func newLMOptions(f *Factory) lmOptions {
	return lmOptions{IO: f.IOStreams, Resolve: loader.ResolveRef}
}

// addFlags adds the model flags (--model, --revision, --mode, --dtype,
// --tp, --dp, --experts, --retries, and --quantize when quantize) to c, with the
// command's help for --tp and --dp.
func (o *lmOptions) addFlags(c *cobra.Command, quantize bool, tpHelp, dpHelp string) {
	fl := c.Flags()
	fl.StringVarP(&o.Model, "model", "m", "", "Hub id (ORG/NAME[@revision]) or local directory")
	fl.StringVar(&o.Revision, "revision", "", "branch, tag or commit of a Hub model (default main)")
	fl.StringVar(&o.mode, "mode", "compiled", "execution mode: compiled (one executable per step) or eager (one per layer kind)")
	fl.StringVar(&o.dtype, "dtype", "auto", "compute dtype: f32, bf16, or auto (f32 on CPU, bf16 on TPU/GPU)")
	fl.StringVar(&o.kvDType, "kv-cache-dtype", "auto", kvDTypeHelp)
	if quantize {
		fl.StringVar(&o.Quantize, "quantize", "", quantizeHelp)
		fl.StringVar(&o.Activations, "activations", "f32", activationsHelp)
	}
	fl.IntVar(&o.TP, "tp", 1, tpHelp)
	fl.IntVar(&o.DP, "dp", 1, dpHelp)
	fl.StringVar(&o.experts, "experts", "graph", expertsHelp)
	addRetriesFlag(c, &o.Retries)
}

// expertsHelp is the help of --experts.
const expertsHelp = "mixture-of-experts layers: graph (the chosen experts gathered in one graph, no host round trip), host (tokens grouped by expert on the host), or dense (every expert on every token; a baseline)"

// requireModel refuses a missing --model.
func (o *lmOptions) requireModel() error {
	if o.Model == "" {
		return errs.Usagef("--model is required (a Hub id ORG/NAME[@revision] or a local directory)")
	}
	return nil
}

// parse checks the model flags and takes the run-time hooks from f.
func (o *lmOptions) parse(f *Factory) error {
	var err error
	if o.Mode, err = compile.ParseMode(o.mode); err != nil {
		return err
	}
	if o.DType, err = parseDType(o.dtype); err != nil {
		return err
	}
	if o.KVDType, err = parseKVDType(o.kvDType); err != nil {
		return err
	}
	if o.Quantize, err = parseQuantize(o.Quantize); err != nil {
		return err
	}
	if o.Activations, err = parseActivations(o.Activations); err != nil {
		return err
	}
	if o.Experts, err = compile.ParseExpertsMode(o.experts); err != nil {
		return err
	}
	if err := checkRetries(o.Retries); err != nil {
		return err
	}
	if err := checkParallelFlags(o.TP, o.DP); err != nil {
		return err
	}
	o.JSON = f.Global.JSON
	o.Verbose = f.Global.Verbose
	o.Reporter = f.Reporter()
	o.Device = f.Device
	o.HubClient = f.retryingHubClient(o.Retries)
	o.Now = f.Now
	o.HostMemory = f.HostMemory
	return nil
}

// resolveLM resolves --model (a Hub id or a directory) to a language model
// and loads its tokenizer: the first step of generate, chat and serve.
func (o *lmOptions) resolveLM(ctx context.Context) (*loader.Checkpoint, *tokenizer.Tokenizer, error) {
	m, err := resolveCheckpoint(ctx, o.Resolve, o.HubClient, o.Model, loader.Options{Revision: o.Revision})
	if err != nil {
		return nil, nil, err
	}
	if m.Kind != loader.Transformers {
		return nil, nil, errs.Unsupportedf("%s is a %s pipeline, not a language model (try tputool diffuse)", m.Name(), m.Kind)
	}
	tok, err := tokenizer.LoadDir(m.Dir)
	if err != nil {
		return nil, nil, err
	}
	return m, tok, nil
}

// openOnDevice opens --device, checks --tp/--dp against its devices, and
// loads m strictly in the compute dtype (openModel): the start of generate,
// chat and serve. The caller closes the loaded model.
func (o *lmOptions) openOnDevice(m *loader.Checkpoint) (*tpu.Device, dtypes.DType, *lm.Loaded, error) {
	dev, err := o.Device()
	if err != nil {
		return nil, 0, nil, err
	}
	if err := compile.CheckDevices(dev.BackendName, dev.NumDevices, o.TP, o.DP); err != nil {
		return nil, 0, nil, err
	}
	if err := enableActivations(o.Reporter, dev, o.Activations); err != nil {
		return nil, 0, nil, err
	}
	dtype := computeDType(o.DType, dev)
	loaded, err := openModel(m, dev, dtype, o.Reporter)
	if err != nil {
		return nil, 0, nil, err
	}
	return dev, dtype, loaded, nil
}

// openGenerating is openOnDevice for a command that runs a language
// model's head (generate, chat, perplexity): a model that does not
// generate (an encoder, a cross-encoder) is refused (exit 3) and closed.
func (o *lmOptions) openGenerating(m *loader.Checkpoint) (*tpu.Device, dtypes.DType, *lm.Loaded, error) {
	dev, dtype, loaded, err := o.openOnDevice(m)
	if err != nil {
		return nil, 0, nil, err
	}
	if err := compile.GenerateError(loaded.Model.Spec()); err != nil {
		loaded.Close()
		return nil, 0, nil, err
	}
	return dev, dtype, loaded, nil
}

// computeDType is the dtype a model runs in: --dtype when given
// (InvalidDType means auto), else the device's preferred one.
func computeDType(flag dtypes.DType, dev *tpu.Device) dtypes.DType {
	if flag == dtypes.InvalidDType {
		return dev.ComputeDType
	}
	return flag
}

// openModel loads the language model m, strictly checked against its
// architecture, and describes it under --verbose.
func openModel(m *loader.Checkpoint, dev *tpu.Device, dtype dtypes.DType, rep *ui.Reporter) (*lm.Loaded, error) {
	l, err := lm.Load(m)
	if err != nil {
		return nil, err
	}
	for _, n := range l.Notes {
		rep.Warnf("%s", n)
	}
	for _, g := range l.Skipped() {
		rep.Debugf("not loaded: %d tensors, %s (%s)", g.Tensors, humanize.Bytes(g.Bytes), g.Reason)
	}
	spec := l.Model.Spec()
	rep.Debugf("model %s: %s, %d layers, hidden %d, vocab %d; %s on %s",
		m.Name(), spec.Architecture, spec.Layers, spec.Hidden, spec.VocabSize, dtype, deviceLabel(dev))
	return l, nil
}

// compileRunner builds l's runner on dev, with the device's capabilities:
// the weights are checked against host memory as they will be held
// (checkWeightsFit), converted or quantised (with a warning per tensor
// holding NaN or Inf) and the executables compiled as o says; the held
// weights, recompiles and the parallel layout are reported under
// --verbose. hostMemory is the command's hook for the host's memory (nil
// or 0: unknown, no check).
func compileRunner(dev *tpu.Device, l *lm.Loaded, o compile.Options, hostMemory func() int64, rep *ui.Reporter) (*compile.Runner, error) {
	var host int64
	if hostMemory != nil {
		host = hostMemory()
	}
	if err := checkActivations(dev, l, o); err != nil {
		return nil, err
	}
	if err := checkWeightsFit(dev, l, o, host); err != nil {
		return nil, err
	}
	gcHeadroom(dev, l.HeldBytes(holdingOf(dev, o))) // before the load, whose temporaries count too
	nonFinite := newNonFiniteWarnings(rep)
	l.OnNonFinite = nonFinite.note // weights are checked as NewRunner converts them
	o.OnRecompile = debugRecompile(rep)
	o.Caps = &dev.Capabilities
	r, err := compile.NewRunner(dev.Backend, l, o)
	nonFinite.done()
	if err != nil {
		return nil, err
	}
	reportWeights(rep, dev, l, r, o)
	rep.Debugf("%s mode ready", o.Mode)
	if par := r.Parallel(); par.Devices > 1 {
		rep.Debugf("parallel: TP %d x DP %d over %d devices, %d weights split", par.TP, par.DP, par.Devices, par.Split)
	}
	return r, nil
}

// deviceLabel names the device a spec resolved to, for --verbose: "cpu
// (go backend)", "tpu (xla backend, 4 devices)", with what was asked for
// when that differs ("cpu (go backend; asked for auto)").
func deviceLabel(dev *tpu.Device) string {
	s := fmt.Sprintf("%s (%s backend", dev.Kind, dev.BackendName)
	if dev.NumDevices > 1 {
		s += fmt.Sprintf(", %d devices", dev.NumDevices)
	}
	if dev.Spec != "" && dev.Spec != string(dev.Kind) {
		s += "; asked for " + dev.Spec
	}
	return s + ")"
}

// prefillSlowAfter is how long a prefill runs before it shows progress:
// short prompts print nothing.
const prefillSlowAfter = time.Second

// prefillReporter shows prefill progress: a bar on a terminal (tokens done
// of N, rate), plain lines or NDJSON progress events otherwise, once a
// prefill has run for a second; under --verbose a line with its time and
// rate when it ends. on is generate.Options.OnPrefill.
type prefillReporter struct {
	rep   *ui.Reporter
	now   func() time.Time
	start time.Time
	task  *ui.Task
}

func newPrefillReporter(rep *ui.Reporter, now func() time.Time) *prefillReporter {
	return &prefillReporter{rep: rep, now: now}
}

// begin marks the start of a prefill.
func (p *prefillReporter) begin() {
	p.start, p.task = p.now(), nil
}

func (p *prefillReporter) on(done, total int) {
	now := p.now()
	if p.task == nil && done < total && now.Sub(p.start) >= prefillSlowAfter {
		p.task = p.rep.Start("prefill", int64(total), ui.UnitTokens)
	}
	if p.task != nil {
		p.task.Set(int64(done))
	}
	if done < total {
		return
	}
	if p.task != nil {
		p.task.Done()
		p.task = nil
	}
	took := now.Sub(p.start)
	rate := 0.0
	if took > 0 {
		rate = float64(total) / took.Seconds()
	}
	p.rep.Debugf("prefill: %d tokens in %s (%.1f tokens/s)", total, took.Round(time.Millisecond), rate)
}

// end clears a progress bar left by a prefill that did not finish.
func (p *prefillReporter) end() {
	if p.task != nil {
		p.task.Done()
		p.task = nil
	}
}

// speculateFlags are --speculate and --speculate-ngram (generate, chat,
// serve), and the draft model's flags (generate, chat: draft.go).
type speculateFlags struct {
	// Draft is --speculate: tokens proposed a step (0: off, or
	// defaultDraftTokens with a draft model); Ngram is --speculate-ngram.
	Draft, Ngram int
	// Model is --draft-model, PMin --draft-p-min, Quantize
	// --draft-quantize.
	Model, Quantize string
	PMin            float64
	// MTP is --mtp: the model's multi-token-prediction head drafts.
	MTP bool
}

// maxSpeculate bounds --speculate.
const maxSpeculate = 32

func (s *speculateFlags) add(c *cobra.Command) {
	fl := c.Flags()
	fl.IntVar(&s.Draft, "speculate", 0, fmt.Sprintf("speculative decoding by prompt lookup: propose up to N tokens a step from an earlier occurrence of the last tokens (in the prompt or the answer) and confirm them in one step, for one prompt; greedy decoding gives the same tokens, sampling tokens of the same distribution; faster where the text repeats its input (0: off; at most %d)", maxSpeculate))
	fl.IntVar(&s.Ngram, "speculate-ngram", generate.DefaultSpeculateNgram, "the longest run of last tokens --speculate looks up (1 to 8)")
}

// check checks the flags; given reports the flags given on the command
// line (nil: none).
func (s *speculateFlags) check(given func(string) bool) error {
	if s.Draft < 0 || s.Draft > maxSpeculate {
		return errs.Usagef("--speculate %d: want 0 (off) to %d tokens", s.Draft, maxSpeculate)
	}
	if s.Ngram < 1 || s.Ngram > 8 {
		return errs.Usagef("--speculate-ngram %d: want 1 to 8 tokens", s.Ngram)
	}
	return s.checkDraft(given)
}

// apply sets o's speculation and says under -v (or warns, when it was
// asked and cannot run) whether it runs: one prompt on a model and
// backend whose caches can be taken back (compile.Runner.Speculates).
// draft is the draft model openDraft opened (nil: prompt lookup).
func (s *speculateFlags) apply(o *generate.Options, rep *ui.Reporter, r *compile.Runner, prompts int, draft *generate.DraftModel) {
	if s.Draft == 0 {
		return
	}
	o.Speculate, o.SpeculateNgram, o.DraftModel = s.Draft, s.Ngram, draft
	switch {
	case !r.Speculates():
		rep.Warnf("--speculate: off, %s on this device cannot take its caches back (GoMLX's go backend, --tp, --experts host, or recurrent state on an XLA device or in eager mode)", r.Spec().Architecture)
	case prompts > 1:
		rep.Warnf("--speculate: off for a batch of %d prompts (it speculates for one prompt; --stream runs them one at a time)", prompts)
	case draft != nil && s.MTP:
		rep.Debugf("speculative decoding: up to %d tokens a step from the model's multi-token-prediction head (while it gives its pick a probability of at least %g)", s.Draft, s.PMin)
	case draft != nil:
		rep.Debugf("speculative decoding: up to %d tokens a step from the draft model %s (while it gives its pick a probability of at least %g)", s.Draft, s.Model, s.PMin)
	default:
		rep.Debugf("speculative decoding: up to %d tokens a step by prompt lookup (n-grams up to %d)", s.Draft, s.Ngram)
	}
}

// samplingFlags are the sampling and limit flags of generate and chat;
// chat's /set changes them by name (set) with the same checks.
type samplingFlags struct {
	maxNew, topK             int
	temp, topP, minP, repPen float64
	seed                     uint64
}

// add registers the flags on fl.
func (s *samplingFlags) add(c *cobra.Command, stop *[]string) {
	fl := c.Flags()
	fl.IntVarP(&s.maxNew, "max-new-tokens", "n", 0, fmt.Sprintf("maximum tokens to generate per prompt (default: generation_config.json's, else %d)", generate.DefaultMaxNewTokens))
	fl.Float64Var(&s.temp, "temperature", 0, "sampling temperature; 0 is greedy (default: generation_config.json)")
	fl.IntVar(&s.topK, "top-k", 0, "keep the k most likely tokens; 0 is off (default: generation_config.json, 50 when sampling)")
	fl.Float64Var(&s.topP, "top-p", 0, "nucleus sampling: keep the most likely tokens up to this probability mass (default: generation_config.json, else 1, off)")
	fl.Float64Var(&s.minP, "min-p", 0, "drop tokens less likely than min-p times the most likely one (default: generation_config.json, else 0, off)")
	fl.Float64Var(&s.repPen, "repetition-penalty", 0, "penalize tokens already in the sequence (default: generation_config.json, else 1, off)")
	fl.Uint64Var(&s.seed, "seed", 0, "random seed for sampling (default: a random one, shown under -v and in --json; the same seed repeats exactly)")
	fl.StringArrayVar(stop, "stop", nil, "stop when the text contains this string, which is not printed (repeatable)")
}

// samplingFlagNames are the flags /set accepts.
var samplingFlagNames = []string{"max-new-tokens", "temperature", "top-k", "top-p", "min-p", "repetition-penalty", "seed", "stop"}

// overrides returns the flags given on the command line as overrides,
// checked.
func (s *samplingFlags) overrides(c *cobra.Command, o *generate.Overrides) error {
	fl := c.Flags()
	for _, name := range samplingFlagNames {
		if name == "stop" || !fl.Changed(name) {
			continue
		}
		if err := setSampling(o, name, fl.Lookup(name).Value.String()); err != nil {
			return err
		}
	}
	for _, st := range o.Stop {
		if st == "" {
			return errs.Usagef("--stop: empty stop string")
		}
	}
	return nil
}

// setSampling sets one sampling flag (name without dashes) from text, with
// the flag's checks; the errors name the flag.
func setSampling(o *generate.Overrides, name, value string) error {
	value = strings.TrimSpace(value)
	intVal := func() (int, error) {
		v, err := strconv.Atoi(value)
		if err != nil {
			return 0, errs.Usagef("--%s %q: want an integer", name, value)
		}
		return v, nil
	}
	floatVal := func() (float64, error) {
		v, err := strconv.ParseFloat(value, 64)
		if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
			return 0, errs.Usagef("--%s %q: want a number", name, value)
		}
		return v, nil
	}
	switch name {
	case "max-new-tokens":
		v, err := intVal()
		if err != nil {
			return err
		}
		if v <= 0 {
			return errs.Usagef("--max-new-tokens %d: must be at least 1", v)
		}
		o.MaxNewTokens = &v
	case "temperature":
		v, err := floatVal()
		if err != nil {
			return err
		}
		if v < 0 {
			return errs.Usagef("--temperature %v: must not be negative", v)
		}
		o.Temperature = &v
	case "top-k":
		v, err := intVal()
		if err != nil {
			return err
		}
		if v < 0 {
			return errs.Usagef("--top-k %d: must not be negative", v)
		}
		o.TopK = &v
	case "top-p", "min-p":
		v, err := floatVal()
		if err != nil {
			return err
		}
		if v < 0 || v > 1 {
			return errs.Usagef("--%s %v: must be in [0, 1]", name, v)
		}
		if name == "top-p" {
			o.TopP = &v
		} else {
			o.MinP = &v
		}
	case "repetition-penalty":
		v, err := floatVal()
		if err != nil {
			return err
		}
		if v <= 0 {
			return errs.Usagef("--repetition-penalty %v: must be positive", v)
		}
		o.RepetitionPenalty = &v
	case "seed":
		v, err := strconv.ParseUint(value, 10, 64)
		if err != nil {
			return errs.Usagef("--seed %q: want a non-negative integer", value)
		}
		o.Seed = &v
	case "stop":
		if value == "" {
			return errs.Usagef("--stop: empty stop string")
		}
		o.Stop = append(o.Stop, value)
	default:
		return errs.Usagef("%q is not a sampling setting (have %s)", name, strings.Join(samplingFlagNames, ", "))
	}
	return nil
}
