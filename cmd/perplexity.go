package cmd

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/tputool/tputool/compile"
	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/internal/ui"
	"github.com/tputool/tputool/pipeline/perplexity"
)

// PerplexityOptions holds `tputool perplexity`'s inputs.
type PerplexityOptions struct {
	lmOptions

	// Text is --text, File is --file (- for stdin).
	Text, File string
	// Context is --context (0: the default, 1024 within the model's
	// positions); Stride is --stride (0: half the context).
	Context, Stride int
	// Batch is --batch: windows run together.
	Batch int
}

// maxPerplexityText bounds the text perplexity reads (a variable for
// tests).
var maxPerplexityText int64 = 256 << 20

// defaultPerplexityContext is --context's default within the model's
// positions.
const defaultPerplexityContext = 1024

// NewCmdPerplexity builds `tputool perplexity`.
func NewCmdPerplexity(f *Factory, runF func(context.Context, *PerplexityOptions) error) *cobra.Command {
	opts := &PerplexityOptions{lmOptions: newLMOptions(f)}
	c := &cobra.Command{
		Use:   "perplexity --model MODEL --file TEXT_FILE",
		Short: "Measure a language model's perplexity on a text",
		Long: `Measure how well a language model predicts a text: the perplexity of its
tokens, exp of the mean negative log-likelihood of each token given the ones
before it, as transformers' guide "Perplexity of fixed-length models" computes
it. The text is encoded whole (with the special tokens the tokenizer adds, as
transformers' tokenizer(text) encodes it) and scored in windows of --context
tokens: the first window scores each of its tokens but the first, and each next
one ends --stride tokens further and scores the tokens it adds, so every token
but the first is scored once, with at least context − stride tokens before it
where the text has them. A smaller stride gives more context for more
computation; --stride 1 scores each token with a full window.

The text comes from --file (- for stdin), --text, or stdin when it is not a
terminal. Compare the same text, context and stride across checkpoints, dtypes
and --quantize to see what a format costs; numbers from tools that window
differently (llama.cpp's perplexity scores only the second half of disjoint
windows) are not comparable.

The output gives the perplexity with its standard error (that of the mean
negative log-likelihood times the perplexity, as llama.cpp's ±), the mean
negative log-likelihood in nats a token, bits per byte of the text and the
word perplexity (lm-evaluation-harness's measures for wikitext: the total
negative log-likelihood over the text's UTF-8 bytes in bits, and exp of it over
its whitespace-separated words); --json gives them as an object.`,
		Example: `  tputool perplexity -m Qwen/Qwen3-0.6B --file wiki.test.raw
  tputool perplexity -m Qwen/Qwen3-0.6B --file wiki.test.raw --quantize int4 --json
  tputool perplexity -m ./testdata/stories260K-hf --text "Once upon a time there was a little girl." --context 8 --stride 4`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, args []string) error {
			if err := opts.requireModel(); err != nil {
				return err
			}
			switch {
			case opts.Text != "" && opts.File != "":
				return errs.Usagef("give --text or --file, not both")
			case opts.Text == "" && opts.File == "":
				if f.IOStreams.IsStdinTTY() {
					return errs.Usagef("give the text: --file FILE, --text TEXT, or pipe it on stdin")
				}
				opts.File = "-"
			}
			if opts.Context < 0 || opts.Context == 1 {
				return errs.Usagef("--context %d: want at least 2 tokens (0: %d within the model's positions)", opts.Context, defaultPerplexityContext)
			}
			if opts.Stride < 0 || (opts.Context > 0 && opts.Stride >= opts.Context) {
				return errs.Usagef("--stride %d: want 1 to the context less one (0: half the context)", opts.Stride)
			}
			if opts.Batch < 1 {
				return errs.Usagef("--batch %d: want at least 1 window at a time", opts.Batch)
			}
			if err := opts.parse(f); err != nil {
				return err
			}
			if runF != nil {
				return runF(c.Context(), opts)
			}
			return perplexityRun(c.Context(), opts)
		},
	}
	fl := c.Flags()
	opts.addFlags(c, true, "tensor parallelism (perplexity runs on one device: must be 1)", "data parallelism (must be 1)")
	fl.StringVarP(&opts.File, "file", "f", "", "the text to score, a UTF-8 file read whole (- for stdin)")
	fl.StringVar(&opts.Text, "text", "", "the text to score")
	fl.IntVar(&opts.Context, "context", 0, fmt.Sprintf("tokens in a window (0: %d, or the model's positions if fewer)", defaultPerplexityContext))
	fl.IntVar(&opts.Stride, "stride", 0, "tokens each window ends after the previous one, the tokens it scores (0: half the context)")
	fl.IntVar(&opts.Batch, "batch", 1, "windows run together")
	return c
}

// perplexityResult is the --json object.
type perplexityResult struct {
	Model string `json:"model"`
	// Tokens is the text's tokens, Scored those scored (all but the first).
	Tokens  int `json:"tokens"`
	Scored  int `json:"scored"`
	Windows int `json:"windows"`
	Context int `json:"context"`
	Stride  int `json:"stride"`
	Bytes   int `json:"bytes"`
	Words   int `json:"words"`

	Perplexity       float64 `json:"perplexity"`
	PerplexityStderr float64 `json:"perplexity_stderr"`
	// NLL is the mean negative log-likelihood a scored token, in nats.
	NLL            float64 `json:"nll"`
	BitsPerByte    float64 `json:"bits_per_byte"`
	WordPerplexity float64 `json:"word_perplexity"`
	MinLogprob     float64 `json:"min_logprob"`

	Seconds      float64 `json:"seconds"`
	TokensPerSec float64 `json:"tokens_per_second"`
}

// readPerplexityText reads --text or --file (- for stdin, in), at most
// maxPerplexityText bytes of valid UTF-8.
func readPerplexityText(opts *PerplexityOptions, in io.Reader) (string, error) {
	if opts.File == "" {
		return opts.Text, nil
	}
	src, name := in, "stdin"
	if opts.File != "-" {
		fh, err := os.Open(opts.File)
		if err != nil {
			return "", errs.Usagef("--file: %v", err)
		}
		defer fh.Close()
		src, name = fh, opts.File
	}
	b, err := io.ReadAll(io.LimitReader(src, maxPerplexityText+1))
	if err != nil {
		return "", fmt.Errorf("reading %s: %w", name, err)
	}
	if int64(len(b)) > maxPerplexityText {
		return "", errs.Usagef("--file %s: larger than %d MiB; score a part of it", name, maxPerplexityText>>20)
	}
	if !utf8.Valid(b) {
		return "", errs.Usagef("--file %s: not UTF-8 text", name)
	}
	return string(b), nil
}

func perplexityRun(ctx context.Context, opts *PerplexityOptions) error {
	if opts.TP*opts.DP > 1 {
		return errs.Usagef("--tp %d --dp %d: perplexity runs on one device", opts.TP, opts.DP)
	}
	if opts.Experts == compile.ExpertsHost {
		return errs.Usagef("--experts host: perplexity runs the experts in the graph (--experts graph or dense)")
	}
	text, err := readPerplexityText(opts, opts.IO.In)
	if err != nil {
		return err
	}
	rep := opts.Reporter
	m, tok, err := opts.resolveLM(ctx)
	if err != nil {
		return err
	}
	ids, err := tok.Encode(text, true)
	if err != nil {
		return fmt.Errorf("encoding the text: %w", err)
	}
	if len(ids) < 2 {
		return errs.Usagef("the text has %d token(s): perplexity needs at least 2 (the first is only context)", len(ids))
	}
	dev, dtype, loaded, err := opts.openGenerating(m)
	if err != nil {
		return err
	}
	defer loaded.Close()
	spec := loaded.Model.Spec()
	ctxLen := opts.Context
	switch {
	case ctxLen == 0:
		ctxLen = min(defaultPerplexityContext, spec.MaxPositions)
	case ctxLen > spec.MaxPositions:
		return errs.Usagef("--context %d: beyond the model's %d positions (max_position_embeddings)", ctxLen, spec.MaxPositions)
	}
	stride := opts.Stride
	if stride == 0 {
		stride = max(1, ctxLen/2)
	} else if stride >= ctxLen {
		return errs.Usagef("--stride %d: want 1 to the context less one, %d", stride, ctxLen-1)
	}
	window := min(ctxLen, len(ids))
	if err := checkLogprobsFits(loaded.Model, opts.Batch, window, dtype, opts.KVDType, opts.HostMemory); err != nil {
		return err
	}
	runner, err := compileRunner(dev, loaded, compile.Options{Mode: opts.Mode, DType: dtype, KVDType: opts.KVDType, Experts: opts.Experts, Quantize: opts.Quantize}, opts.HostMemory, rep)
	if err != nil {
		return err
	}
	defer runner.Close()
	rep.Debugf("perplexity: %d tokens, windows of %d tokens ending %d apart, %d at a time", len(ids), window, stride, opts.Batch)

	var task *ui.Task
	if n := len(perplexity.Windows(len(ids), ctxLen, stride)); n > 1 {
		task = rep.Start("perplexity", int64(n), ui.UnitItems)
		defer task.Done()
	}
	start := opts.Now()
	res, err := perplexity.Run(ctx, ids, perplexity.Options{Context: ctxLen, Stride: stride, Batch: opts.Batch,
		OnWindows: func(done, total int) {
			if task != nil {
				task.Set(int64(done))
			}
		}},
		func(windows [][]int, from []int) ([][]float32, error) {
			lps, err := runner.PromptLogprobsFrom(windows, from, 0)
			if err != nil {
				return nil, err
			}
			out := make([][]float32, len(lps))
			for i, w := range lps {
				out[i] = make([]float32, len(w))
				for j, t := range w {
					out[i][j] = t.Logprob
				}
			}
			return out, nil
		})
	if err != nil {
		return err
	}
	took := opts.Now().Sub(start)
	total := res.NLL * float64(res.Scored)
	words := len(strings.Fields(text))
	out := perplexityResult{
		Model: modelLabel(m), Tokens: res.Tokens, Scored: res.Scored, Windows: res.Windows, Context: ctxLen, Stride: stride,
		Bytes: len(text), Words: words,
		Perplexity: res.Perplexity, PerplexityStderr: res.Stderr, NLL: res.NLL,
		BitsPerByte: total / math.Ln2 / float64(max(len(text), 1)), MinLogprob: res.MinLogprob,
		Seconds: took.Seconds(),
	}
	if words > 0 {
		out.WordPerplexity = math.Exp(total / float64(words))
	}
	// Tokens run, context included, a second.
	if s := took.Seconds(); s > 0 {
		out.TokensPerSec = float64(res.Windows*window) / s
	}
	if opts.JSON {
		return opts.IO.WriteJSON(out)
	}
	_, err = fmt.Fprintf(opts.IO.Out, `perplexity       %.4f ± %.4f
nll              %.4f nats a token
bits per byte    %.4f
word perplexity  %.4f
tokens           %d (%d scored in %d windows of %d, stride %d; %.1f s)
`, out.Perplexity, out.PerplexityStderr, out.NLL, out.BitsPerByte, out.WordPerplexity,
		out.Tokens, out.Scored, out.Windows, window, stride, took.Round(100*time.Millisecond).Seconds())
	return err
}
