package cmd

import (
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/spf13/cobra"

	"github.com/tputool/tputool/compile"
	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/internal/ui"
	"github.com/tputool/tputool/loader"
	"github.com/tputool/tputool/loader/hub"
	"github.com/tputool/tputool/pipeline/bench"
	"github.com/tputool/tputool/pipeline/diffusion/sd"
	"github.com/tputool/tputool/pipeline/generate"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/tpu"
)

// BenchOptions holds `tputool bench`'s inputs.
type BenchOptions struct {
	IO       *ui.IOStreams
	Reporter *ui.Reporter
	// Device opens the --device backend.
	Device func() (*tpu.Device, error)
	// HubClient builds the Hub client (only Hub ids need it).
	HubClient func() *hub.Client
	// Resolve resolves --model; loader.ResolveRef by default.
	Resolve resolveFunc
	// Now is the clock every figure is measured with.
	Now func() time.Time
	// Build and DeviceEnv describe the binary and the host for the header.
	Build     BuildInfo
	DeviceEnv func() tpu.Env
	// HostMemory is the host's memory in bytes (nil or 0: unknown), for
	// the memory check of diffusion cases.
	HostMemory func() int64

	Model    string
	Revision string
	Variant  string
	// Task is "generate", "embed", "diffuse" or "" (from the model).
	Task string
	// Modes are the --mode values, in the order given; DType is --dtype
	// (InvalidDType: auto, the device's).
	Modes  []compile.Mode
	DType  dtypes.DType
	Repeat int
	Warmup int
	// TP and DP spread a language model over TP x DP devices.
	TP, DP  int
	Retries int
	Format  string
	// Batches is nil when --batch was not given (the task's default).
	Batches    []int
	PromptLens []int
	GenLens    []int
	Steps      []int
	// Sizes are {width, height}; nil is the model's default size.
	Sizes [][2]int
	// Quantize is --quantize: "", "int8" or "int4".
	Quantize string
	// Activations is --activations: "" (f32), "int8" or "bf16".
	Activations string
	// KVDType is --kv-cache-dtype (generate, and embed for a decoder;
	// InvalidDType: the compute dtype); kvDType the flag as given.
	KVDType dtypes.DType
	kvDType string
	// Experts is --experts (generate); experts the flag as given.
	Experts compile.ExpertsMode
	experts string
	// HostArgmax is --host-argmax (generate): each decode step's argmax
	// taken on the host from the logits, not on the device.
	HostArgmax bool
	// TaskFlags are the task-specific flags given (--steps, --size,
	// --variant, --prompt-len, --gen-len, ...: benchTaskSpecific), checked
	// once the task is known.
	TaskFlags []string
	// Compare holds the two reports of --compare.
	Compare []string
}

// Defaults of the list flags.
const (
	benchDefaultModes        = "eager,compiled"
	benchDefaultPromptLen    = 512
	benchDefaultGenLen       = 128
	benchDefaultSteps        = 25
	benchDefaultRepeat       = 5
	benchDefaultWarmup       = 1
	benchDiffusionPrompt     = "a photograph of an astronaut riding a horse"
	benchDiffusionSeed       = 42
	benchDefaultGenBatch     = "1,8" // generate and embed
	benchDefaultDiffuseBatch = "1"
)

// NewCmdBench builds `tputool bench`.
func NewCmdBench(f *Factory, runF func(context.Context, *BenchOptions) error) *cobra.Command {
	opts := &BenchOptions{IO: f.IOStreams, Resolve: loader.ResolveRef}
	var (
		modes, dtype, batches, promptLens, genLens, steps, sizes string
		compare                                                  bool
	)
	c := &cobra.Command{
		Use:   "bench --model MODEL [flags] | bench --compare OLD.json NEW.json",
		Short: "Time eager against compiled execution",
		Long: `Benchmark a model: one row per execution mode × batch × shape, with the load
time, the first call's compile time, executable-cache hits/misses, and
throughput and latency over --repeat measured runs (the first, compiling run
and --warmup more runs are not measured).

Text generation (--task generate, from a transformers checkpoint) feeds
synthetic prompts of exactly --prompt-len token ids (deterministic, without
special ids) and decodes exactly --gen-len tokens greedily, ignoring EOS.
TTFT is the prefill call plus picking the first tokens; ITL is one decode
step; prefill tok/s = batch × prompt length / TTFT; decode tok/s = batch /
median ITL. Embeddings (--task embed, the default for a transformers model
that does not generate: a BERT-family or ModernBERT encoder, a
cross-encoder) run one call per run on --batch synthetic inputs of exactly
--prompt-len tokens: a cross-encoder's scores as rerank computes them, else
the final hidden states pooled as embed pools them (mean for an encoder,
the last token for a decoder such as Qwen3-Embedding); embed tok/s = batch ×
input length / the call's time. Diffusion (--task diffuse, from a diffusers
pipeline) reports s/step (one denoising step) and s/image (the whole request
over the batch). Figures are medians ± standard deviation in tables; the
JSON holds the median, min, max, stddev and sample count of each. Compiled
rows get a "compiled vs eager" speed-up: eager median ITL (embed ms, s/step)
over compiled.

Output (-o): md (a table: box-drawn on a terminal, markdown otherwise), csv,
json (the documented, versioned document; same as --json) or jsonl (a header
line, then one row per line). Progress goes to stderr: a bar on a terminal,
plain lines otherwise.

--compare OLD NEW reads two JSON or JSON-lines reports, matches rows by
task, mode, batch and shape, and prints new/old per metric with whether
that is better or worse. See docs/benchmarks.md for the schema.`,
		Example: `  tputool bench --model Qwen/Qwen3-0.6B --batch 1,8 --prompt-len 512 --gen-len 128
  tputool bench -m ./llama-110m --mode compiled --batch 1 --prompt-len 128 --gen-len 32 -o json > new.json
  tputool bench -m sentence-transformers/all-MiniLM-L6-v2 --batch 1,32 --prompt-len 128
  tputool bench -m Qwen/Qwen3-Embedding-0.6B --task embed --batch 8 --prompt-len 256
  tputool bench -m stabilityai/sd-turbo --steps 1,4 --size 512x512 --repeat 3
  tputool bench --compare old.json new.json`,
		Args: cobra.ArbitraryArgs,
		RunE: func(c *cobra.Command, args []string) error {
			fl := c.Flags()
			if err := benchFormat(opts, f.Global.JSON, fl.Changed("output")); err != nil {
				return err
			}
			if compare {
				if len(args) != 2 {
					return errs.Usagef("--compare takes two reports, OLD.json NEW.json (got %d argument(s))", len(args))
				}
				for _, name := range []string{"model", "task", "mode", "batch", "prompt-len", "gen-len", "steps", "size", "repeat", "warmup", "dtype", "tp", "dp", "retries", "host-argmax", "variant", "kv-cache-dtype", "quantize", "activations", "experts"} {
					if fl.Changed(name) {
						return errs.Usagef("--compare reads two reports; --%s does not apply", name)
					}
				}
				opts.Compare = args
			} else {
				if len(args) > 0 {
					return errs.Usagef("unexpected argument %q (did you mean --compare OLD.json NEW.json?)", args[0])
				}
				if err := benchValidate(opts, fl.Changed, modes, dtype, batches, promptLens, genLens, steps, sizes); err != nil {
					return err
				}
			}
			opts.Reporter = f.Reporter()
			opts.Device = f.Device
			opts.HubClient = f.retryingHubClient(opts.Retries)
			opts.Now = f.Now
			opts.Build = f.Build
			opts.DeviceEnv = f.DeviceEnv
			opts.HostMemory = f.HostMemory
			if runF != nil {
				return runF(c.Context(), opts)
			}
			if opts.Compare != nil {
				return benchCompareRun(opts)
			}
			return benchRun(c.Context(), opts)
		},
	}
	fl := c.Flags()
	fl.StringVarP(&opts.Model, "model", "m", "", "Hub id (ORG/NAME[@revision]) or local directory")
	fl.StringVar(&opts.Revision, "revision", "", "branch, tag or commit of a Hub model (default main)")
	fl.StringVar(&opts.Variant, "variant", "", `diffusers weight variant, e.g. "fp16"`)
	fl.StringVar(&opts.Task, "task", "", "generate, embed or diffuse (default: from the model: embed for a transformers model that does not generate, generate for the others, diffuse for diffusers)")
	fl.StringVar(&modes, "mode", benchDefaultModes, "execution modes to run, comma-separated: eager, compiled")
	fl.StringVarP(&batches, "batch", "b", "", "batch sizes, comma-separated (default "+benchDefaultGenBatch+" for generate and embed, "+benchDefaultDiffuseBatch+" for diffuse)")
	fl.StringVar(&promptLens, "prompt-len", strconv.Itoa(benchDefaultPromptLen), "prompt lengths in tokens, comma-separated (generate; embed: each input's tokens)")
	fl.StringVar(&genLens, "gen-len", strconv.Itoa(benchDefaultGenLen), "tokens to decode per prompt, comma-separated (generate)")
	fl.StringVar(&steps, "steps", strconv.Itoa(benchDefaultSteps), "denoising steps, comma-separated (diffuse)")
	fl.StringVar(&sizes, "size", "", "image sizes WIDTHxHEIGHT, comma-separated (diffuse; default: the model's)")
	fl.IntVarP(&opts.Repeat, "repeat", "r", benchDefaultRepeat, "measured runs per row")
	fl.IntVar(&opts.Warmup, "warmup", benchDefaultWarmup, "unmeasured runs per row after the first (compiling) run")
	fl.StringVar(&dtype, "dtype", "auto", "compute dtype for generate and embed: f32, bf16, or auto (f32 on CPU, bf16 on TPU/GPU); diffusion runs in f32")
	fl.StringVar(&opts.kvDType, "kv-cache-dtype", "auto", kvDTypeHelp+" (generate, embed)")
	fl.StringVar(&opts.Quantize, "quantize", "", quantizeHelp+" (generate, embed)")
	fl.StringVar(&opts.Activations, "activations", "f32", activationsHelp+" (generate, embed)")
	fl.StringVar(&opts.experts, "experts", "graph", expertsHelp+" (generate)")
	fl.BoolVar(&opts.HostArgmax, "host-argmax", false, "read each decode step's logits and take their argmax on the host, instead of on the device with only the ids read back (generate; to compare the two)")
	fl.IntVar(&opts.TP, "tp", 1, "tensor parallelism for generate: split heads and MLP over this many devices")
	fl.IntVar(&opts.DP, "dp", 1, "data parallelism for generate: split each batch over this many devices (times --tp)")
	fl.StringVarP(&opts.Format, "output", "o", bench.FormatMarkdown, "output format: md, csv, json or jsonl")
	addRetriesFlag(c, &opts.Retries)
	fl.BoolVar(&compare, "compare", false, "compare two reports: --compare OLD.json NEW.json")
	_ = c.RegisterFlagCompletionFunc("output", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return bench.Formats(), cobra.ShellCompDirectiveNoFileComp
	})
	_ = c.RegisterFlagCompletionFunc("task", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return []string{bench.TaskGenerate, bench.TaskEmbed, bench.TaskDiffuse}, cobra.ShellCompDirectiveNoFileComp
	})
	return c
}

// benchFormat settles -o against --json.
func benchFormat(opts *BenchOptions, jsonFlag, outputSet bool) error {
	if !slices.Contains(bench.Formats(), opts.Format) {
		return errs.Usagef("-o %q: want one of %s", opts.Format, strings.Join(bench.Formats(), ", "))
	}
	if jsonFlag {
		if outputSet && opts.Format != bench.FormatJSON {
			return errs.Usagef("--json and -o %s contradict each other", opts.Format)
		}
		opts.Format = bench.FormatJSON
	}
	return nil
}

// parseIntList reads a comma-separated list of positive integers.
func parseIntList(flag, s string) ([]int, error) {
	var out []int
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		n, err := strconv.Atoi(part)
		if err != nil || n < 1 {
			return nil, errs.Usagef("--%s %s: %q is not a positive integer (want e.g. --%s 1,8)", flag, s, part, flag)
		}
		if slices.Contains(out, n) {
			return nil, errs.Usagef("--%s %s: %d is given twice", flag, s, n)
		}
		out = append(out, n)
	}
	return out, nil
}

func parseSizes(s string) ([][2]int, error) {
	var out [][2]int
	for _, part := range strings.Split(s, ",") {
		wh, err := parseSize(s, strings.TrimSpace(part))
		if err != nil {
			return nil, err
		}
		if slices.Contains(out, wh) {
			return nil, errs.Usagef("--size %s: %dx%d is given twice", s, wh[0], wh[1])
		}
		out = append(out, wh)
	}
	return out, nil
}

func parseModes(s string) ([]compile.Mode, error) {
	var out []compile.Mode
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		m, err := compile.ParseMode(part)
		if err != nil || part == "" {
			return nil, errs.Usagef("--mode %s: %q is not an execution mode (want eager, compiled or eager,compiled)", s, part)
		}
		if slices.Contains(out, m) {
			return nil, errs.Usagef("--mode %s: %s is given twice", s, part)
		}
		out = append(out, m)
	}
	return out, nil
}

// modeNames are the labels bench rows carry for modes (compile.Mode.String).
func modeNames(modes []compile.Mode) []string {
	out := make([]string, len(modes))
	for i, m := range modes {
		out[i] = m.String()
	}
	return out
}

// benchValidate parses and checks the flags of a benchmark run.
func benchValidate(opts *BenchOptions, changed func(string) bool, modes, dtype, batches, promptLens, genLens, steps, sizes string) error {
	if opts.Model == "" {
		return errs.Usagef("--model is required (a Hub id ORG/NAME[@revision] or a local directory), or --compare OLD NEW")
	}
	switch opts.Task {
	case "", bench.TaskGenerate, bench.TaskEmbed, bench.TaskDiffuse:
	default:
		return errs.Usagef("--task %q: want generate, embed or diffuse", opts.Task)
	}
	var err error
	if opts.Modes, err = parseModes(modes); err != nil {
		return err
	}
	if changed("batch") {
		if opts.Batches, err = parseIntList("batch", batches); err != nil {
			return err
		}
	}
	if opts.PromptLens, err = parseIntList("prompt-len", promptLens); err != nil {
		return err
	}
	if opts.GenLens, err = parseIntList("gen-len", genLens); err != nil {
		return err
	}
	if opts.Steps, err = parseIntList("steps", steps); err != nil {
		return err
	}
	for _, n := range opts.Steps {
		if n > 1000 {
			return errs.Usagef("--steps %d: want 1 to 1000", n)
		}
	}
	if sizes != "" {
		if opts.Sizes, err = parseSizes(sizes); err != nil {
			return err
		}
	}
	if opts.Repeat < 1 {
		return errs.Usagef("--repeat %d: want at least 1", opts.Repeat)
	}
	if opts.Warmup < 0 {
		return errs.Usagef("--warmup %d: must not be negative", opts.Warmup)
	}
	if opts.DType, err = parseDType(dtype); err != nil {
		return err
	}
	if opts.KVDType, err = parseKVDType(opts.kvDType); err != nil {
		return err
	}
	if opts.Quantize, err = parseQuantize(opts.Quantize); err != nil {
		return err
	}
	if opts.Activations, err = parseActivations(opts.Activations); err != nil {
		return err
	}
	if opts.Experts, err = compile.ParseExpertsMode(opts.experts); err != nil {
		return err
	}
	if err := checkParallelFlags(opts.TP, opts.DP); err != nil {
		return err
	}
	if err := checkRetries(opts.Retries); err != nil {
		return err
	}
	opts.TaskFlags = nil
	for _, name := range benchTaskSpecific {
		if changed(name) {
			opts.TaskFlags = append(opts.TaskFlags, name)
		}
	}
	if opts.Task != "" {
		return benchTaskFlags(opts.Task, opts.TaskFlags)
	}
	return nil
}

// benchTaskSpecific are the flags that apply to some tasks only
// (benchTaskFlags), checked once the task is known.
var benchTaskSpecific = []string{"prompt-len", "gen-len", "steps", "size", "variant", "tp", "dp", "host-argmax", "kv-cache-dtype", "experts"}

// benchTaskFlags rejects flags of another task. Embeddings run on one
// device with the experts in the graph, so of the generate flags only
// --prompt-len (each input's tokens) and --kv-cache-dtype (a decoder's
// caches) apply.
func benchTaskFlags(task string, given []string) error {
	var other []string
	switch task {
	case bench.TaskDiffuse:
		other = []string{"prompt-len", "gen-len", "tp", "dp", "host-argmax", "kv-cache-dtype", "experts"}
	case bench.TaskEmbed:
		other = []string{"gen-len", "steps", "size", "variant", "tp", "dp", "host-argmax", "experts"}
	default:
		other = []string{"steps", "size", "variant"}
	}
	for _, name := range given {
		if slices.Contains(other, name) {
			return errs.Usagef("--%s does not apply to --task %s", name, task)
		}
	}
	return nil
}

// benchHeader describes the binary, device and host.
func benchHeader(opts *BenchOptions, dev *tpu.Device, model, task, dtype string) bench.Header {
	b := opts.Build
	h := bench.Header{TputoolVersion: b.Version, Commit: b.Commit, GoVersion: b.GoVersion, GoMLX: b.GoMLX, GoXLA: b.GoXLA,
		Device: dev.String(), Backend: dev.BackendName, Platform: dev.Platform, DType: dtype, Model: model, Task: task,
		Date: opts.Now().UTC().Format(time.RFC3339), Repeat: opts.Repeat, Warmup: opts.Warmup, HostArgmax: opts.HostArgmax,
		Host: bench.Host{OS: runtime.GOOS, Arch: runtime.GOARCH, Cores: runtime.NumCPU()}}
	if task == bench.TaskEmbed || task == bench.TaskGenerate { // the executor's settings, where not their defaults
		if opts.KVDType != dtypes.InvalidDType {
			h.KVCacheDType = strings.ToLower(opts.KVDType.String())
		}
		h.Quantize, h.Activations = opts.Quantize, opts.Activations
	}
	if task == bench.TaskGenerate {
		if opts.Experts != compile.ExpertsInGraph {
			h.Experts = opts.Experts.String()
		}
		if opts.TP > 1 {
			h.TP = opts.TP
		}
		if opts.DP > 1 {
			h.DP = opts.DP
		}
	}
	if opts.DeviceEnv != nil {
		env := opts.DeviceEnv()
		h.Host.MemoryBytes, _ = tpu.HostMemory(env)
		if b, err := os.ReadFile(filepath.Join(env.Root, "/proc/loadavg")); err == nil {
			if fields := strings.Fields(string(b)); len(fields) > 0 {
				if v, err := strconv.ParseFloat(fields[0], 64); err == nil {
					h.Host.LoadAvg = &v
				}
			}
		}
	}
	return h
}

func dtypeName(d dtypes.DType) string {
	switch d {
	case dtypes.Float32:
		return "float32"
	case dtypes.BFloat16:
		return "bfloat16"
	}
	return strings.ToLower(d.String())
}

func benchRun(ctx context.Context, opts *BenchOptions) error {
	rep := opts.Reporter
	m, err := resolveCheckpoint(ctx, opts.Resolve, opts.HubClient, opts.Model, loader.Options{Revision: opts.Revision, Variant: opts.Variant})
	if err != nil {
		return err
	}
	task := opts.Task
	var spec *lm.Spec // the language model's, from its config alone; nil if it cannot be built
	switch m.Kind {
	case loader.Transformers:
		if m.Config != nil {
			if model, err := lm.New(m.Config); err == nil {
				spec = model.Spec()
			}
		}
		if task == "" {
			task = bench.TaskGenerate
			if spec != nil && !spec.Generates() {
				task = bench.TaskEmbed
			}
		}
	case loader.Diffusers:
		if task == "" {
			task = bench.TaskDiffuse
		}
	default:
		return errs.Unsupportedf("%s is a %s checkpoint; tputool bench runs language models and diffusers pipelines", m.Name(), m.Kind)
	}
	if (task == bench.TaskDiffuse) == (m.Kind == loader.Transformers) {
		return errs.Usagef("--task %s does not fit %s, a %s checkpoint", task, m.Name(), m.Kind)
	}
	if err := benchTaskFlags(task, opts.TaskFlags); err != nil {
		return err
	}
	switch task {
	case bench.TaskGenerate:
		if spec != nil {
			if err := benchGenerateError(spec); err != nil {
				return err
			}
		}
		clampBenchLens(opts, m, rep)
	case bench.TaskEmbed:
		if spec != nil {
			clampEmbedLens(opts, spec.MaxPositions, rep)
		}
	}
	dev, err := opts.Device()
	if err != nil {
		return err
	}
	if err := compile.CheckDevices(dev.BackendName, dev.NumDevices, opts.TP, opts.DP); err != nil {
		return err
	}
	if err := enableActivations(rep, dev, opts.Activations); err != nil {
		return err
	}
	model := modelLabel(m)
	prog := &benchProgress{rep: rep, model: model}
	defer prog.finish()
	cfg := bench.Config{Repeat: opts.Repeat, Warmup: opts.Warmup, Now: opts.Now, OnProgress: prog.update, HostArgmax: opts.HostArgmax}

	var rows []bench.Row
	var header bench.Header
	dtype := computeDType(opts.DType, dev) // text's (generate, embed)
	batches := opts.Batches
	if batches == nil {
		def := benchDefaultGenBatch
		if task == bench.TaskDiffuse {
			def = benchDefaultDiffuseBatch
		}
		batches, _ = parseIntList("batch", def)
	}
	switch task {
	case bench.TaskEmbed:
		header = benchHeader(opts, dev, model, task, dtypeName(dtype))
		rows, err = bench.Embed(ctx, cfg, bench.EmbedSpec{
			Modes: modeNames(opts.Modes),
			Cases: bench.EmbedCases(batches, opts.PromptLens),
			Load:  benchLoadEmbed(m, dev, opts.Modes, compile.Options{DType: dtype, KVDType: opts.KVDType, Quantize: opts.Quantize}, opts.HostMemory, rep, &header),
		})
	case bench.TaskGenerate:
		header = benchHeader(opts, dev, model, task, dtypeName(dtype))
		rows, err = bench.Generate(ctx, cfg, bench.GenerateSpec{
			Modes: modeNames(opts.Modes),
			Cases: bench.GenerateCases(batches, opts.PromptLens, opts.GenLens),
			Load:  benchLoadLM(ctx, m, dev, opts.Modes, compile.Options{DType: dtype, KVDType: opts.KVDType, TP: opts.TP, DP: opts.DP, Quantize: opts.Quantize, Experts: opts.Experts}, opts.HostMemory, rep),
		})
	default:
		if d := opts.DType; d != dtypes.InvalidDType && d != dtypes.Float32 {
			return errs.Unsupportedf("--dtype %s: diffusion pipelines run in float32 only", dtypeName(d))
		}
		header = benchHeader(opts, dev, model, task, "float32")
		sizes := opts.Sizes
		if sizes == nil {
			sizes = [][2]int{{0, 0}}
		}
		rows, err = bench.Diffuse(ctx, cfg, bench.DiffuseSpec{
			Modes:  modeNames(opts.Modes),
			Cases:  bench.DiffuseCases(batches, sizes, opts.Steps),
			Prompt: benchDiffusionPrompt, Seed: benchDiffusionSeed,
			Load: benchLoadDiffusion(m.Dir, opts.Variant, dev, rep, opts.HostMemory),
		})
	}
	prog.finish()
	if err != nil && !(errors.Is(err, errs.ErrInterrupted) && len(rows) > 0) {
		return err
	}
	// Interrupted: the finished rows are still printed.
	if werr := writeBenchReport(opts, bench.NewReport(header, rows)); werr != nil {
		return werr
	}
	return err
}

// benchLoadLM loads a language model for bench.Generate; each mode's
// session compiles it with o and that mode.
func benchLoadLM(ctx context.Context, m *loader.Checkpoint, dev *tpu.Device, modes []compile.Mode, o compile.Options, hostMemory func() int64, rep *ui.Reporter) func() (*bench.Target, error) {
	return func() (*bench.Target, error) {
		l, err := openModel(m, dev, o.DType, rep)
		if err != nil {
			return nil, err
		}
		spec := l.Model.Spec()
		if err := benchGenerateError(spec); err != nil {
			l.Close()
			return nil, err
		}
		return &bench.Target{VocabSize: spec.VocabSize, MaxPositions: spec.MaxPositions, Special: specialIDs(l),
			Open: func(label string) (*bench.Session, error) {
				r, err := benchRunner(label, modes, o, dev, l, hostMemory, rep)
				if err != nil {
					return nil, err
				}
				st := r.NewState()
				return &bench.Session{Stepper: interruptibleLM{State: st, ctx: ctx},
					Close:    func() { st.Release(); r.Close() },
					Counters: func() bench.Counters { return benchCounters(r.Stats()) }}, nil
			},
			Close: func() { l.Close() },
		}, nil
	}
}

// benchGenerateError is compile.GenerateError (exit 3 for a model that does
// not generate), with the task that measures such a model.
func benchGenerateError(spec *lm.Spec) error {
	if err := compile.GenerateError(spec); err != nil {
		return fmt.Errorf("%w (bench --task embed measures its embeddings or scores)", err)
	}
	return nil
}

// specialIDs are the ids synthetic inputs leave out: the model's BOS and
// EOS and generation_config.json's BOS, EOS and pad.
func specialIDs(l *lm.Loaded) []int {
	spec := l.Model.Spec()
	special := append([]int(nil), spec.EOS...)
	if spec.BOS >= 0 {
		special = append(special, spec.BOS)
	}
	if g := l.Generation; g != nil {
		for _, ids := range [][]int{g.BOSTokenID, g.EOSTokenID, g.PadTokenID} {
			special = append(special, ids...)
		}
	}
	return special
}

// benchLoadEmbed loads a model for bench.Embed and fills h's Call and
// Pooling with what its sessions run: a cross-encoder (an lm.Scorer with
// labels) its scores, compile.Runner.Score, as rerank does; any other
// model its final hidden states pooled, compile.Runner.Embed, by the mean
// for an encoder and the last token for a decoder (as embed pools a model
// without a sentence-transformers Pooling config). Each mode's session
// compiles it with o and that mode. Every case is checked against the
// host's memory (benchEmbedFits) before any runs.
func benchLoadEmbed(m *loader.Checkpoint, dev *tpu.Device, modes []compile.Mode, o compile.Options, hostMemory func() int64, rep *ui.Reporter, h *bench.Header) func() (*bench.EmbedTarget, error) {
	return func() (*bench.EmbedTarget, error) {
		l, err := openModel(m, dev, o.DType, rep)
		if err != nil {
			return nil, err
		}
		spec := l.Model.Spec()
		score := false
		pool := compile.PoolLast
		if sc, ok := l.Model.(lm.Scorer); ok && sc.Labels() > 0 {
			if pool, err = compile.ParsePooling(sc.ScorePool()); err != nil {
				l.Close()
				return nil, fmt.Errorf("%s: %w", spec.Architecture, err)
			}
			score = true
		} else if _, ok := l.Model.(lm.Finisher); !ok {
			l.Close()
			return nil, fmt.Errorf("%s does not give its final hidden states: bench --task embed cannot run it: %w", spec.Architecture, errs.ErrUnsupported)
		} else if spec.Encoder {
			pool = compile.PoolMean
		}
		h.Call, h.Pooling = "embed", pool.String()
		if score {
			h.Call = "score"
		}
		rep.Debugf("bench: each call runs %s (%s pooling)", h.Call, h.Pooling)
		return &bench.EmbedTarget{VocabSize: spec.VocabSize, MaxPositions: spec.MaxPositions, Special: specialIDs(l),
			Validate: func(c bench.EmbedCase) error { return benchEmbedFits(l.Model, c, o.DType, o.KVDType, hostMemory) },
			Open: func(label string) (*bench.EmbedSession, error) {
				r, err := benchRunner(label, modes, o, dev, l, hostMemory, rep)
				if err != nil {
					return nil, err
				}
				return &bench.EmbedSession{Embedder: runnerEmbedder{r: r, score: score, pool: pool},
					Close:    r.Close,
					Counters: func() bench.Counters { return benchCounters(r.Stats()) }}, nil
			},
			Close: func() { l.Close() },
		}, nil
	}
}

// runnerEmbedder is bench's Embedder: a cross-encoder's scores or the
// pooled final hidden states of a batch, in one call.
type runnerEmbedder struct {
	r     *compile.Runner
	score bool
	pool  compile.Pooling
}

func (e runnerEmbedder) Embed(inputs [][]int) error {
	if e.score {
		_, err := e.r.Score(inputs)
		return err
	}
	_, err := e.r.Embed(inputs, e.pool)
	return err
}

// benchEmbedFits refuses an embeddings case whose buffers could not be
// allocated, as checkEmbedFits does for embed and rerank: the layer state
// of c.Batch inputs of c.InputLen tokens (a decoder's KV caches) and the
// attention scores of a step (compile.EmbedScoreBytes); more bytes than int64
// holds, or more than the host's memory (hostMemory nil or 0: unknown,
// only the overflow check applies).
func benchEmbedFits(m lm.Model, c bench.EmbedCase, dtype, kv dtypes.DType, hostMemory func() int64) error {
	var host int64
	if hostMemory != nil {
		host = hostMemory()
	}
	spec := m.Spec()
	positions, need, ok := stateNeed(m, c.Batch, c.InputLen, 0, dtype, kv)
	what := fmt.Sprintf("--batch %d --prompt-len %d: the KV cache of %d input(s) of %d positions (%d layers, %s)",
		c.Batch, c.InputLen, c.Batch, positions, spec.Layers, kvOr(kv, dtype))
	need += compile.EmbedScoreBytes(spec, c.Batch, c.InputLen)
	what += fmt.Sprintf(" and their attention scores (%d heads, f32)", spec.Heads)
	if spec.Encoder {
		what = fmt.Sprintf("--batch %d --prompt-len %d: the attention scores of %d input(s) of %d tokens (%d heads, f32)",
			c.Batch, c.InputLen, c.Batch, c.InputLen, spec.Heads)
	}
	return checkHostMemory(what, need, !ok, host, "lower --batch or --prompt-len")
}

// clampEmbedLens fits the default --prompt-len into the model's positions
// (an encoder has 512 or fewer), with a note; lengths given on the command
// line are left for the check to refuse.
func clampEmbedLens(opts *BenchOptions, maxPos int, rep *ui.Reporter) {
	if maxPos <= 0 || slices.Contains(opts.TaskFlags, "prompt-len") || slices.Max(opts.PromptLens) <= maxPos {
		return
	}
	opts.PromptLens = []int{maxPos}
	rep.Infof("note: the model has %d positions: using --prompt-len %d", maxPos, maxPos)
}

// benchRunner compiles the loaded model's runner for the mode labelled
// label, one of modes, with o.
func benchRunner(label string, modes []compile.Mode, o compile.Options, dev *tpu.Device, l *lm.Loaded, hostMemory func() int64, rep *ui.Reporter) (*compile.Runner, error) {
	i := slices.IndexFunc(modes, func(m compile.Mode) bool { return m.String() == label })
	if i < 0 {
		return nil, fmt.Errorf("bench: mode %q was not asked for", label)
	}
	o.Mode = modes[i]
	return compileRunner(dev, l, o, hostMemory, rep)
}

// interruptibleLM is bench's runner: its prefill runs in pieces of about
// 800 ms, as generate's does, so Ctrl-C stops a long prompt too (and the
// prefill timed is the one generate runs). The pieces are sized by the
// wall clock, not bench's (tests fix bench's).
type interruptibleLM struct {
	*compile.State
	ctx context.Context
}

func (r interruptibleLM) Prefill(prompts [][]int, maxNew int) ([][]float32, error) {
	return generate.Prefill(r.ctx, r.State, prompts, generate.Options{MaxNewTokens: maxNew, Now: time.Now})
}

// clampBenchLens fits the default --prompt-len and --gen-len into the
// model's positions (a 512-position model cannot take 512 + 128), with a
// note; lengths given on the command line are left for the check to
// refuse.
func clampBenchLens(opts *BenchOptions, m *loader.Checkpoint, rep *ui.Reporter) {
	maxPos := modelMaxPositions(m)
	givenP, givenG := slices.Contains(opts.TaskFlags, "prompt-len"), slices.Contains(opts.TaskFlags, "gen-len")
	if maxPos <= 0 || (givenP && givenG) {
		return
	}
	p, g := slices.Max(opts.PromptLens), slices.Max(opts.GenLens)
	if p+g <= maxPos {
		return
	}
	switch {
	case !givenP && !givenG:
		g = min(g, maxPos/4)
		p = maxPos - g
	case !givenP:
		p = maxPos - g
	default:
		g = maxPos - p
	}
	if p < 1 || g < 1 {
		return
	}
	if !givenP {
		opts.PromptLens = []int{p}
	}
	if !givenG {
		opts.GenLens = []int{g}
	}
	rep.Infof("note: the model has %d positions: using --prompt-len %d --gen-len %d", maxPos, slices.Max(opts.PromptLens), slices.Max(opts.GenLens))
}

// modelMaxPositions reads max_position_embeddings from config.json (the
// text model's for multimodal configs); 0 when absent.
func modelMaxPositions(m *loader.Checkpoint) int {
	cfg := m.Config
	if cfg == nil {
		return 0
	}
	if cfg.Text != nil && cfg.Text.Has("max_position_embeddings") {
		cfg = cfg.Text
	}
	var v struct {
		MaxPositions int `json:"max_position_embeddings"`
	}
	if cfg.Decode(&v) != nil {
		return 0
	}
	return v.MaxPositions
}

// benchCounters sums the programs' statistics for bench.
func benchCounters(s compile.Stats) bench.Counters {
	t := s.Sum()
	return bench.Counters{Compile: t.Compile, Hits: t.Hits, Misses: t.Misses}
}

// benchLoadDiffusion loads a diffusers pipeline for bench.Diffuse. On the
// go backend its Validate also refuses cases whose largest activation
// cannot fit in hostMemory, as diffuse does; bench validates every case
// before running any.
func benchLoadDiffusion(dir, variant string, dev *tpu.Device, rep *ui.Reporter, hostMemory func() int64) func() (*bench.Diffusion, error) {
	return func() (*bench.Diffusion, error) {
		x := compile.NewGraphExecutor(dev.Backend, compile.ExecutorOptions{OnRecompile: debugRecompile(rep)})
		p, err := sd.Load(dir, sd.Options{Backend: dev.Backend, Variant: variant, Executor: x, Warn: rep.Debugf,
			OnLoad: func(component string, params int64, took time.Duration) {
				rep.Debugf("loaded %s: %.1fM parameters in %s", component, float64(params)/1e6, took.Round(time.Millisecond))
			}})
		if err != nil {
			x.Finalize()
			return nil, err
		}
		var d bench.Diffuser = p
		if dev.Capabilities.HostMemory {
			d = fitCheckedPipeline{p, hostMemory}
		}
		return &bench.Diffusion{Pipeline: d, Guidance: p.DefaultGuidance(),
			Counters: func() bench.Counters { return benchCounters(x.Stats()) },
			Close:    func() { p.Close(); x.Finalize() },
		}, nil
	}
}

// fitCheckedPipeline adds diffuse's memory check to Validate.
type fitCheckedPipeline struct {
	*sd.Pipeline
	hostMemory func() int64
}

func (p fitCheckedPipeline) Validate(req *sd.Request) error {
	if err := p.Pipeline.Validate(req); err != nil {
		return err
	}
	return checkDiffusionFits(p.LargestBuffer(*req), *req, p.hostMemory)
}

// benchProgress turns bench progress into reporter tasks: one per row,
// counting calls (prefill and decode steps, or denoising steps) over all
// of the row's runs, and a line per finished row.
type benchProgress struct {
	rep   *ui.Reporter
	model string
	task  *ui.Task
	label string
	// perRun is the calls a run makes: the steps asked for until a run
	// reports more (PNDM calls the UNet 6 times for 4 steps).
	perRun int
}

func (p *benchProgress) finish() {
	if p.task != nil {
		p.task.Done()
		p.task = nil
	}
	p.label = ""
}

func (p *benchProgress) update(e bench.Progress) {
	switch e.Phase {
	case bench.PhaseLoad:
		p.finish()
		name := "loading " + p.model
		if e.Label != "" {
			name = "preparing " + e.Label + " mode"
		}
		if p.rep.Mode() == ui.ModeBar {
			p.task = p.rep.Start(name, 0, ui.UnitItems) // a spinner
		} else {
			p.rep.Infof("%s", name)
		}
	case bench.PhaseDone:
		p.finish()
		r := e.Row
		p.rep.Event("bench_row", benchRowLine(r), map[string]any{"row": r})
		if r.Recompiles > 0 {
			p.rep.Warnf("%s: %d executable(s) compiled during measured runs; their compile time is in the figures", r.Label(), r.Recompiles)
		}
	default:
		if e.Label != p.label {
			p.finish()
			p.label = e.Label
			p.perRun = e.Steps
			p.task = p.rep.Start(e.Label, int64(e.Runs*e.Steps), ui.UnitSteps)
		}
		if e.Step > 0 && e.Steps != p.perRun {
			p.perRun = e.Steps
			p.task.SetTotal(int64(e.Runs * e.Steps))
		}
		p.task.Set(int64(e.Run*p.perRun + e.Step))
	}
}

// benchRowLine is the plain line printed as each row finishes.
func benchRowLine(r *bench.Row) string {
	med := func(s *bench.Stat) string {
		if s == nil {
			return "-"
		}
		return bench.Num(s.Median)
	}
	var figures string
	switch r.Task {
	case bench.TaskDiffuse:
		figures = fmt.Sprintf("%s s/step, %s s/image", med(r.StepS), med(r.ImageS))
	case bench.TaskEmbed:
		figures = fmt.Sprintf("embed %s tok/s, %s ms", med(r.EmbedTokS), med(r.EmbedMs))
	default:
		figures = fmt.Sprintf("prefill %s tok/s, decode %s tok/s, TTFT %s ms, ITL %s ms",
			med(r.PrefillTokS), med(r.DecodeTokS), med(r.TTFTMs), med(r.ITLMs))
	}
	return fmt.Sprintf("%s: %s; load %s s, compile %s s (%d hits, %d misses)", r.Label(), figures,
		bench.Num(r.LoadS), bench.Num(r.CompileS), r.CacheHits, r.CacheMisses)
}

// writeBenchReport prints the report in the chosen format on stdout.
func writeBenchReport(opts *BenchOptions, r *bench.Report) error {
	out := opts.IO.Out
	switch opts.Format {
	case bench.FormatCSV:
		return bench.WriteCSV(out, r)
	case bench.FormatJSON:
		return bench.WriteJSON(out, r, opts.IO.IsStdoutTTY())
	case bench.FormatJSONL:
		return bench.WriteJSONL(out, r)
	}
	header, cells := bench.Table(r.Rows)
	return writeTable(opts.IO, []string{bench.HeaderLine(r.Header)}, header, cells)
}

// writeTable prints title lines and a table: box-drawn on a terminal,
// GitHub markdown otherwise.
func writeTable(io *ui.IOStreams, title, header []string, cells [][]string) error {
	for _, line := range title {
		if _, err := fmt.Fprintln(io.Out, line); err != nil {
			return err
		}
	}
	if _, err := fmt.Fprintln(io.Out); err != nil {
		return err
	}
	if !io.IsStdoutTTY() {
		return ui.MarkdownTable(io.Out, header, cells)
	}
	t := io.NewTable(header...)
	for _, c := range cells {
		t.Append(c...)
	}
	return t.Render()
}

// benchCompareRun prints new/old per row and metric of two reports.
func benchCompareRun(opts *BenchOptions) error {
	var reps [2]*bench.Report
	for i, name := range opts.Compare {
		f, err := os.Open(name)
		if err != nil {
			return errs.Usagef("--compare: %v", err)
		}
		reps[i], err = bench.ReadReport(f, name)
		f.Close()
		if err != nil {
			return errs.Usagef("--compare: %v", err)
		}
	}
	c := bench.Compare(reps[0], reps[1])
	out := opts.IO.Out
	switch opts.Format {
	case bench.FormatJSON:
		return opts.IO.WriteJSON(c)
	case bench.FormatJSONL:
		nd := ui.NewNDJSON(out)
		for _, r := range c.Rows {
			if err := nd.Write(r); err != nil {
				return err
			}
		}
		return nil
	}
	header, cells := c.Table()
	if opts.Format == bench.FormatCSV {
		w := csv.NewWriter(out)
		if err := w.Write(header); err != nil {
			return err
		}
		if err := w.WriteAll(cells); err != nil {
			return err
		}
		return w.Error()
	}
	title := []string{
		"old: " + opts.Compare[0] + ": " + bench.HeaderLine(c.Old),
		"new: " + opts.Compare[1] + ": " + bench.HeaderLine(c.New),
		"ratios are new/old; ↑ higher is better, ↓ lower is better",
	}
	return writeTable(opts.IO, title, header, cells)
}
