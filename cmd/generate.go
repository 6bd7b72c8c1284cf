package cmd

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/spf13/cobra"

	"github.com/tputool/tputool/compile"
	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/internal/humanize"
	"github.com/tputool/tputool/internal/ui"
	"github.com/tputool/tputool/loader/tokenizer"
	"github.com/tputool/tputool/loader/tokenizer/chat"
	"github.com/tputool/tputool/pipeline/constrain"
	"github.com/tputool/tputool/pipeline/generate"
	"github.com/tputool/tputool/pipeline/serve"
)

// GenerateOptions holds `tputool generate`'s inputs.
type GenerateOptions struct {
	lmOptions

	Prompts     []string
	PromptsFile string
	Chat        bool
	System      string
	Stream      bool
	// PrefillChunk is --prefill-chunk: prompt tokens per prefill piece (0
	// sizes pieces to about 800 ms, -1 runs the prompt in one piece).
	PrefillChunk int
	// Overrides are the sampling and limit flags actually given.
	Overrides generate.Overrides
	// JSONSchema is --json-schema FILE; Grammar is its compiled form.
	JSONSchema string
	Grammar    *constrain.Grammar
	// Speculate is --speculate and --speculate-ngram.
	Speculate speculateFlags
}

// NewCmdGenerate builds `tputool generate`.
func NewCmdGenerate(f *Factory, runF func(context.Context, *GenerateOptions) error) *cobra.Command {
	opts := &GenerateOptions{lmOptions: newLMOptions(f)}
	var sampling samplingFlags
	c := &cobra.Command{
		Use:   "generate --model MODEL --prompt TEXT",
		Short: "Generate text with a language model, streamed",
		Long: `Generate a continuation of each prompt with a Hugging Face causal language model
(LlamaForCausalLM, MistralForCausalLM, MixtralForCausalLM, Gemma3ForCausalLM,
Qwen2ForCausalLM, Qwen3ForCausalLM, Qwen3MoeForCausalLM, Qwen2MoeForCausalLM, GptOssForCausalLM,
DeepseekV3ForCausalLM, DeepseekV2ForCausalLM, Glm4MoeLiteForCausalLM, Glm4MoeForCausalLM,
MiniMaxM2ForCausalLM, OlmoeForCausalLM, Ernie4_5_MoeForCausalLM, Dots1ForCausalLM,
GraniteForCausalLM, GraniteMoeForCausalLM, GraniteMoeHybridForCausalLM, NemotronHForCausalLM,
Llama4ForCausalLM,
Gemma4ForCausalLM, and the text models of Gemma3ForConditionalGeneration,
Gemma4ForConditionalGeneration, Llama4ForConditionalGeneration,
Qwen3_5ForConditionalGeneration and Qwen3_5MoeForConditionalGeneration,
Qwen3NextForCausalLM), from a local
directory or a Hub id.

The prompt comes from --prompt (-p), from stdin when stdin is not a terminal
and no --prompt is given (or with -p -), or from --prompts-file.

The text goes to stdout as it is produced (one prompt), or per prompt when
several run as one batch, each under a "==> N: PROMPT <==" label. With --json the result is a JSON array with one
object per prompt ({text, token_ids, prompt_token_ids, finish_reason, metrics});
with --json --stream it is NDJSON events with a "type" field: "token" per
token, "result" per prompt, "done" with the metrics. --verbose prints
ollama-style timings to stderr.

Ctrl-C stops a generation within about a second, also during a long prompt
(prefill runs in pieces of about 800 ms): the text so far is printed with
finish reason "interrupted" and tputool exits 130. A second Ctrl-C exits at
once. A prefill that takes over a second shows progress (tokens done of N
and the rate) on stderr.

Sampling without --seed draws a random seed, printed under --verbose and in
--json ("seed"); pass it back with --seed to repeat the run exactly.

Settings are layered: flags, then the model's generation_config.json, then
transformers' defaults. The file's do_sample picks greedy decoding or sampling;
--temperature 0 forces greedy, --temperature > 0 samples (top-k then defaults to
50, as in transformers; --top-k 0 turns it off).

--mode compiled (default) runs each prefill and decode step as one executable;
--mode eager runs one executable per layer kind, dispatched op by op. Both give
the same tokens.`,
		Example: `  tputool generate --model ./testdata/stories260K-hf --prompt "Once upon a time"
  tputool generate --model Qwen/Qwen3-0.6B --chat --system "Be brief." --prompt "What is a TPU?"
  tputool generate --model ./my-llama --prompt "a" --prompt "b" --temperature 0 --json
  tputool generate --model ./my-llama --prompts-file prompts.txt --temperature 0.7 --seed 1
  tputool generate --model Qwen/Qwen3-0.6B --prompt "Hi" --stream --json
  echo "Once upon a time" | tputool generate --model ./testdata/stories260K-hf
  tputool generate --model ./my-llama -p - < long-prompt.txt
  printf 'First prompt,\non two lines\n---\nSecond prompt\n' | tputool generate -m ./my-llama --prompts-file -`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, args []string) error {
			if err := opts.requireModel(); err != nil {
				return err
			}
			if err := promptSources(f, &opts.Prompts, opts.PromptsFile, "prompt"); err != nil {
				return err
			}
			if err := opts.parse(f); err != nil {
				return err
			}
			if err := sampling.overrides(c, &opts.Overrides); err != nil {
				return err
			}
			if opts.PrefillChunk < -1 {
				return errs.Usagef("--prefill-chunk %d: want a token count, 0 (timed pieces) or -1 (one piece)", opts.PrefillChunk)
			}
			if err := opts.Speculate.check(c.Flags().Changed); err != nil {
				return err
			}
			if opts.System != "" {
				opts.Chat = true
			}
			if opts.JSONSchema != "" {
				g, err := readJSONSchema(opts.JSONSchema)
				if err != nil {
					return err
				}
				opts.Grammar = g
			}
			if runF != nil {
				return runF(c.Context(), opts)
			}
			return generateRun(c.Context(), opts)
		},
	}
	fl := c.Flags()
	opts.addFlags(c, true, "tensor parallelism: split attention heads and MLP over this many devices (inspect suggests it)",
		"data parallelism: split the batch of prompts over this many devices (times --tp)")
	fl.StringArrayVarP(&opts.Prompts, "prompt", "p", nil, "prompt text (repeat for a batch; - reads the whole of stdin as one prompt)")
	fl.StringVar(&opts.PromptsFile, "prompts-file", "", "file with one prompt per line (- for stdin), blank lines skipped; prompts split on NUL bytes when the file has any, else on lines that are exactly ---, when it has any")
	sampling.add(c, &opts.Overrides.Stop)
	fl.BoolVar(&opts.Chat, "chat", false, "apply the tokenizer's chat template (the prompt is the user message)")
	fl.StringVar(&opts.System, "system", "", "system message for the chat template (implies --chat)")
	fl.IntVar(&opts.PrefillChunk, "prefill-chunk", 0, "prompt tokens per prefill piece; Ctrl-C is checked between pieces (0: pieces of about 800 ms, on an accelerator of 512 tokens; -1: the whole prompt at once)")
	fl.BoolVar(&opts.Stream, "stream", false, "with --json, print NDJSON events as tokens are produced; without, run several prompts one at a time so each streams")
	opts.Speculate.add(c)
	opts.Speculate.addDraft(c)
	opts.Speculate.addMTP(c)
	fl.StringVar(&opts.JSONSchema, "json-schema", "", "constrain the output to JSON valid against the JSON schema in this file (constrained decoding; \"{}\" in the file allows any JSON)")
	return c
}

// maxSchemaBytes bounds a --json-schema file.
const maxSchemaBytes = 4 << 20

// readJSONSchema reads and compiles --json-schema FILE.
func readJSONSchema(path string) (*constrain.Grammar, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, errs.Usagef("--json-schema: %v", err)
	}
	defer fh.Close()
	b, err := io.ReadAll(io.LimitReader(fh, maxSchemaBytes+1))
	if err != nil {
		return nil, errs.Usagef("--json-schema %s: %v", path, err)
	}
	if len(b) > maxSchemaBytes {
		return nil, errs.Usagef("--json-schema %s: larger than %d bytes", path, maxSchemaBytes)
	}
	g, err := constrain.JSONSchema(b)
	if err != nil {
		return nil, errs.Usagef("--json-schema %s: %v", path, err)
	}
	return g, nil
}

// parseDType reads --dtype; InvalidDType means auto.
func parseDType(s string) (dtypes.DType, error) {
	switch strings.ToLower(s) {
	case "", "auto":
		return dtypes.InvalidDType, nil
	case "f32", "fp32", "float32":
		return dtypes.Float32, nil
	case "bf16", "bfloat16":
		return dtypes.BFloat16, nil
	}
	return 0, errs.Usagef("--dtype %q: want f32, bf16 or auto", s)
}

// kvDTypeHelp is the help of --kv-cache-dtype.
const kvDTypeHelp = "dtype of the KV cache: auto (the compute dtype), f32, bf16 (half the memory and the bytes attention reads under f32 compute; new keys and values rounded to bf16) or int8 (a quarter of f32's: each new key and value of a head int8 with an f32 scale)"

// parseKVDType reads --kv-cache-dtype; auto is InvalidDType (the compute
// dtype).
func parseKVDType(s string) (dtypes.DType, error) {
	if s == "int8" {
		return dtypes.Int8, nil
	}
	dt, err := parseDType(s)
	if err != nil {
		return 0, errs.Usagef("--kv-cache-dtype %q: want f32, bf16, int8 or auto", s)
	}
	return dt, nil
}

// promptSources checks where a command's prompts (noun: "prompt",
// "input") come from: with no --prompt and no --prompts-file, stdin when
// it is not a terminal (the whole of it, one prompt), else a usage error;
// and stdin read at most once.
func promptSources(f *Factory, prompts *[]string, file, noun string) error {
	if len(*prompts) == 0 && file == "" {
		if f.IOStreams.IsStdinTTY() {
			return errs.Usagef("give at least one --prompt or a --prompts-file, or pipe the %s on stdin", noun)
		}
		*prompts = []string{"-"} // stdin is the prompt
	}
	return checkStdinUse(*prompts, file)
}

// checkStdinUse refuses reading stdin twice (-p - and --prompts-file -).
func checkStdinUse(prompts []string, file string) error {
	n := 0
	for _, p := range prompts {
		if p == "-" {
			n++
		}
	}
	if file == "-" {
		n++
	}
	if n > 1 {
		return errs.Usagef("stdin can be read once: give -p - or --prompts-file - once")
	}
	return nil
}

// readPrompts gathers --prompt values (- is the whole of stdin, in) and
// the prompts of --prompts-file (file; - is stdin).
func readPrompts(values []string, file string, in io.Reader) ([]string, error) {
	var prompts []string
	for _, p := range values {
		if p != "-" {
			prompts = append(prompts, p)
			continue
		}
		b, err := io.ReadAll(in)
		if err != nil {
			return nil, fmt.Errorf("reading the prompt from stdin: %w", err)
		}
		text := strings.TrimRight(string(b), "\r\n")
		if strings.TrimSpace(text) == "" {
			return nil, errs.Usagef("--prompt -: stdin is empty (pipe the prompt in, or give --prompt TEXT)")
		}
		prompts = append(prompts, text)
	}
	if file == "" {
		return prompts, nil
	}
	var r io.Reader
	if file == "-" {
		r = in
	} else {
		fh, err := os.Open(file)
		if err != nil {
			return nil, errs.Usagef("--prompts-file: %v", err)
		}
		defer fh.Close()
		r = fh
	}
	b, err := io.ReadAll(io.LimitReader(r, 256<<20))
	if err != nil {
		return nil, fmt.Errorf("--prompts-file %s: %w", file, err)
	}
	n := len(prompts)
	prompts = append(prompts, splitPrompts(string(b))...)
	if len(prompts) == n {
		return nil, errs.Usagef("--prompts-file %s has no prompts", file)
	}
	return prompts, nil
}

// promptSeparator is the line that separates multi-line prompts in a
// --prompts-file.
const promptSeparator = "---"

// splitPrompts splits a --prompts-file: on NUL bytes when it has any
// (printf 'a\0b', find -print0), else on lines that are exactly "---" when
// it has any (each prompt keeps its inner newlines), else one prompt per
// line. Blank prompts are skipped; CRLF line ends are read as LF.
func splitPrompts(text string) []string {
	text = strings.ReplaceAll(text, "\r\n", "\n")
	var parts []string
	switch {
	case strings.ContainsRune(text, 0):
		parts = strings.Split(text, "\x00")
		for i := range parts {
			parts[i] = strings.Trim(parts[i], "\n")
		}
	case hasSeparatorLine(text):
		var cur []string
		for _, line := range strings.Split(text, "\n") {
			if line == promptSeparator {
				parts = append(parts, strings.Trim(strings.Join(cur, "\n"), "\n"))
				cur = nil
				continue
			}
			cur = append(cur, line)
		}
		parts = append(parts, strings.Trim(strings.Join(cur, "\n"), "\n"))
	default:
		parts = strings.Split(text, "\n")
	}
	var out []string
	for _, p := range parts {
		if strings.TrimSpace(p) != "" {
			out = append(out, p)
		}
	}
	return out
}

func hasSeparatorLine(text string) bool {
	for _, line := range strings.Split(text, "\n") {
		if line == promptSeparator {
			return true
		}
	}
	return false
}

// generateResult is one element of the --json array.
type generateResult struct {
	generate.Result
	// Seed is the sampling seed (--seed, or the one drawn): --seed with it
	// repeats the run.
	Seed    uint64           `json:"seed"`
	Metrics generate.Metrics `json:"metrics"`
}

func generateRun(ctx context.Context, opts *GenerateOptions) error {
	start := opts.Now()
	prompts, err := readPrompts(opts.Prompts, opts.PromptsFile, opts.IO.In)
	if err != nil {
		return err
	}
	rep := opts.Reporter

	// Load: model files, tokenizer, device, weights.
	m, tok, err := opts.resolveLM(ctx)
	if err != nil {
		return err
	}
	dev, dtype, loaded, err := opts.openGenerating(m)
	if err != nil {
		return err
	}
	defer loaded.Close()
	// Several prompts run as one batch, unless plain --stream asks for each
	// to stream in turn.
	perRun := len(prompts)
	if opts.Stream && !opts.JSON {
		perRun = 1
	}
	if err := opts.Speculate.withMTP(loaded, perRun); err != nil {
		return err
	}
	spec := loaded.Model.Spec()
	runner, err := compileRunner(dev, loaded, compile.Options{Mode: opts.Mode, DType: dtype, KVDType: opts.KVDType, TP: opts.TP, DP: opts.DP, Experts: opts.Experts, Quantize: opts.Quantize}, opts.HostMemory, rep)
	if err != nil {
		return err
	}
	defer runner.Close()
	st := runner.NewState()
	defer st.Release()
	if c := dev.XLACache; c != nil {
		rep.Debugf("XLA compile cache (%s): %s", c.Mode, c.Dir)
	}
	draft, err := opts.Speculate.openDraft(ctx, &opts.lmOptions, dev, dtype, tok, runner, perRun)
	if err != nil {
		return err
	}
	if draft == nil {
		if draft, err = opts.Speculate.openMTP(rep, runner, st, perRun); err != nil {
			return err
		}
	}
	defer draft.Close()
	loadDuration := opts.Now().Sub(start)

	// Prompts to token ids.
	ids, err := encodePrompts(ctx, tok, prompts, opts)
	if err != nil {
		return err
	}
	gen, err := generate.ResolveWith(loaded.Generation, spec.EOS, tokenizerEOS(tok), opts.Overrides)
	if err != nil {
		return err
	}
	longest := 0
	for _, p := range ids {
		longest = max(longest, len(p))
	}
	if room := spec.MaxPositions - longest; gen.MaxNewTokens > room {
		if room <= 0 {
			return errs.Usagef("a prompt of %d tokens leaves no room in the model's %d positions", longest, spec.MaxPositions)
		}
		rep.Debugf("max new tokens %d capped to %d by max_position_embeddings %d", gen.MaxNewTokens, room, spec.MaxPositions)
		gen.MaxNewTokens = room
	}
	if err := checkStateFits(loaded.Model, len(ids), longest, gen.MaxNewTokens, opts.TP, opts.DP, dtype, opts.KVDType, opts.HostMemory); err != nil {
		return err
	}
	if err := draft.checkStateFits(loaded.Model, longest, gen.MaxNewTokens, opts.Speculate.Draft, dtype, opts.KVDType, opts.HostMemory); err != nil {
		return err
	}
	if positions, need, ok := stateNeed(loaded.Model, len(ids), longest, gen.MaxNewTokens, dtype, opts.KVDType); ok {
		rep.Debugf("KV cache: up to %s for %d sequence(s) of %d positions, held as %s", humanize.Bytes(need), len(ids), positions, kvHeld(opts.KVDType, dtype))
	}
	gen.NewDecoder = func(prompt []int) generate.StreamDecoder { return tok.StreamDecoderAfter(prompt) }
	if opts.Chat {
		if t, err := tok.ChatTemplate(""); err == nil && serve.IsHarmony(t) {
			// GPT-OSS: the final channel is the answer; the analysis shows under -v.
			gen.NewDecoder = newHarmonyDecoder(tok, func(r string) { rep.Debugf("reasoning: %s", r) })
		}
	}
	gen.Now = opts.Now
	if opts.Grammar != nil {
		if len(gen.EOS) == 0 {
			return errs.Usagef("--json-schema needs the model's end-of-sequence token, and %s names none", opts.Model)
		}
		var eos []int // those the tokenizer has (a model's vocabulary may be wider)
		for _, id := range gen.EOS {
			if id < tok.VocabSize() {
				eos = append(eos, id)
			}
		}
		// A chat answer's grammar starts where serve's does: after a
		// thinking model's thought, in a harmony model's final message.
		cc := serve.ChatConstraint{New: func(ix *constrain.Index) generate.Constraint { return ix.NewMatcher() }}
		if opts.Chat {
			if t, err := tok.ChatTemplate(""); err == nil {
				cc = serve.ChatConstraintOf(tok, t, tok.Decode(ids[0], false), eos)
			}
		}
		v, err := constrain.NewVocab(serve.VocabBytes(tok, cc.Specials), eos)
		if err != nil {
			return errs.Usagef("--json-schema: %v", err)
		}
		ix := constrain.NewIndex(opts.Grammar, v)
		gen.Constrain = func() generate.Constraint { return cc.New(ix) }
	}
	if gen.Sampling.Temperature > 0 {
		rep.Debugf("sampling with seed %d (--seed %d repeats this run)", gen.Sampling.Seed, gen.Sampling.Seed)
	}
	progress := newPrefillReporter(rep, opts.Now)
	gen.OnPrefill = progress.on
	gen.PrefillChunk = opts.PrefillChunk

	out := newGenerateOutput(opts, prompts, gen.Sampling.Seed)
	batches := [][]int{}
	if perRun == 1 {
		for i := range ids {
			batches = append(batches, []int{i})
		}
	} else {
		all := make([]int, len(ids))
		for i := range all {
			all[i] = i
		}
		batches = append(batches, all)
	}
	opts.Speculate.apply(&gen, rep, runner, perRun, draft.Model())
	var metrics generate.Metrics
	var runErr error
	for _, batch := range batches {
		in := make([][]int, len(batch))
		for j, i := range batch {
			in[j] = ids[i]
		}
		gen.OnEvent = func(e generate.Event) { out.event(batch[e.Row], e) }
		out.begin(batch)
		progress.begin()
		res, m, err := generate.Run(ctx, st, in, gen)
		progress.end()
		if res == nil && err != nil {
			return err
		}
		metrics = addMetrics(metrics, m)
		for j, r := range res {
			out.result(batch[j], r)
		}
		if err != nil {
			runErr = err
			break
		}
	}
	metrics.LoadDuration = loadDuration
	metrics.TotalDuration += loadDuration
	if err := out.finish(metrics); err != nil {
		return err
	}
	if opts.Verbose && !opts.JSON {
		fmt.Fprint(opts.IO.ErrOut, metrics.Summary())
	}
	return runErr
}

// tokenizerEOS is tok's end token for generate.ResolveWith (-1: none, or
// no tokenizer).
func tokenizerEOS(tok *tokenizer.Tokenizer) int {
	if tok == nil {
		return -1
	}
	if id, ok := tok.EOS(); ok {
		return id
	}
	return -1
}

// encodePrompts tokenizes the prompts, through the chat template with --chat.
func encodePrompts(ctx context.Context, tok *tokenizer.Tokenizer, prompts []string, opts *GenerateOptions) ([][]int, error) {
	var tmpl *chat.Template
	if opts.Chat {
		var err error
		if tmpl, err = tok.ChatTemplate(""); err != nil {
			return nil, fmt.Errorf("--chat: %w", err)
		}
	}
	ids := make([][]int, len(prompts))
	for i, p := range prompts {
		var err error
		if tmpl == nil {
			ids[i], err = tok.Encode(p, true)
		} else {
			var msgs []chat.Message
			if opts.System != "" {
				msgs = append(msgs, chat.Message{Role: "system", Content: opts.System})
			}
			msgs = append(msgs, chat.Message{Role: "user", Content: p})
			var text string
			if text, err = tmpl.Render(ctx, chat.Input{Messages: msgs, AddGenerationPrompt: true}); err != nil {
				return nil, fmt.Errorf("--chat: prompt %d: %w", i+1, err)
			}
			// The template writes the special tokens itself.
			ids[i], err = tok.Encode(text, false)
		}
		if err != nil {
			return nil, fmt.Errorf("prompt %d: %w", i+1, err)
		}
		if len(ids[i]) == 0 {
			return nil, errs.Usagef("prompt %d is empty after tokenization", i+1)
		}
	}
	return ids, nil
}

// addMetrics sums the metrics of consecutive runs.
func addMetrics(a, b generate.Metrics) generate.Metrics {
	if a.EvalCount == 0 && a.PromptEvalCount == 0 {
		return b
	}
	a.TotalDuration += b.TotalDuration
	a.CompileDuration += b.CompileDuration
	a.PromptEvalCount += b.PromptEvalCount
	a.PromptEvalDuration += b.PromptEvalDuration
	a.EvalCount += b.EvalCount
	a.EvalDuration += b.EvalDuration
	a.PromptCachedCount += b.PromptCachedCount
	a.DraftTokens += b.DraftTokens
	a.DraftAccepted += b.DraftAccepted
	return a
}

// generateOutput writes results: streamed text, a JSON array, or NDJSON.
// Off --json, the text of several prompts is labelled "==> N: PROMPT <==".
type generateOutput struct {
	opts    *GenerateOptions
	prompts []string
	seed    uint64
	results []generate.Result
	nd      *ui.NDJSON
	// streamText: plain text is printed as tokens arrive (one prompt per
	// batch); otherwise it is printed per prompt at the end.
	streamText bool
}

func newGenerateOutput(opts *GenerateOptions, prompts []string, seed uint64) *generateOutput {
	n := len(prompts)
	o := &generateOutput{opts: opts, prompts: prompts, seed: seed, results: make([]generate.Result, n)}
	switch {
	case opts.JSON && opts.Stream:
		o.nd = ui.NewNDJSON(opts.IO.Out)
	case !opts.JSON:
		o.streamText = n == 1 || opts.Stream
	}
	return o
}

// label is the line above prompt index's text when there are several.
func (o *generateOutput) label(index int) string {
	p := strings.Join(strings.Fields(o.prompts[index]), " ")
	if r := []rune(p); len(r) > 60 {
		p = string(r[:59]) + "…"
	}
	return fmt.Sprintf("==> %d: %s <==\n", index+1, p)
}

// begin is called before a batch runs: a streamed prompt gets its label.
func (o *generateOutput) begin(batch []int) {
	if o.streamText && len(o.prompts) > 1 {
		if batch[0] > 0 {
			io.WriteString(o.opts.IO.Out, "\n")
		}
		io.WriteString(o.opts.IO.Out, o.label(batch[0]))
	}
}

func (o *generateOutput) event(index int, e generate.Event) {
	switch {
	case o.nd != nil && e.Token >= 0:
		o.nd.Write(map[string]any{"type": "token", "index": index, "token": e.Token, "text": e.Text})
	case o.nd != nil && e.Text != "":
		o.nd.Write(map[string]any{"type": "token", "index": index, "text": e.Text})
	case o.streamText:
		io.WriteString(o.opts.IO.Out, e.Text)
	}
}

func (o *generateOutput) result(index int, r generate.Result) {
	o.results[index] = r
	switch {
	case o.nd != nil:
		o.nd.Write(struct {
			Type  string `json:"type"`
			Index int    `json:"index"`
			generate.Result
		}{"result", index, r})
	case o.streamText:
		io.WriteString(o.opts.IO.Out, "\n")
	}
}

func (o *generateOutput) finish(m generate.Metrics) error {
	switch {
	case o.nd != nil:
		return o.nd.Write(map[string]any{"type": "done", "seed": o.seed, "metrics": m})
	case o.opts.JSON:
		out := make([]generateResult, len(o.results))
		for i, r := range o.results {
			out[i] = generateResult{Result: r, Seed: o.seed, Metrics: m}
		}
		return o.opts.IO.WriteJSON(out)
	case !o.streamText:
		for i, r := range o.results {
			if i > 0 {
				io.WriteString(o.opts.IO.Out, "\n")
			}
			io.WriteString(o.opts.IO.Out, o.label(i)+r.Text+"\n")
		}
	}
	return nil
}
