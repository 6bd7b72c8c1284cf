package cmd

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/tputool/tputool/compile"
	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/loader"
	"github.com/tputool/tputool/loader/tokenizer"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/serve"
)

// EmbedOptions holds `tputool embed`'s inputs.
type EmbedOptions struct {
	lmOptions

	Prompts     []string
	PromptsFile string
	// Pooling is --pooling: "auto", "last" or "mean" (resolvePooling).
	Pooling string
	// Dimensions is --dimensions: the first that many values of each
	// vector (0: all).
	Dimensions int
	// Raw is --raw: the pooled hidden states as they are, not normalized.
	Raw bool
	// PromptName is --prompt-name: the sentence-transformers prompt put
	// before each input ("": the model's default_prompt_name, if any;
	// "none": no prompt).
	PromptName string
}

// embedGroup is the most inputs embedded together (as serve's groups).
const embedGroup = 8

// NewCmdEmbed builds `tputool embed`.
func NewCmdEmbed(f *Factory, runF func(context.Context, *EmbedOptions) error) *cobra.Command {
	opts := &EmbedOptions{lmOptions: newLMOptions(f)}
	c := &cobra.Command{
		Use:   "embed --model MODEL --prompt TEXT",
		Short: "Embed text with a language model or a BERT encoder: its final hidden states, pooled",
		Long: `Print an embedding of each input: the model's final hidden states (after its
final norm) pooled over the input's tokens and normalized to unit length, as
serve's /v1/embeddings answers them. Decoders (Qwen3-Embedding) and the
BERT-family encoders (BertModel, XLMRobertaModel, MPNetModel: all-MiniLM,
all-mpnet, bge, e5, bge-m3) both run. --pooling auto (the default) pools as the model's
sentence-transformers config says (Qwen3-Embedding: the last token;
all-MiniLM: the mean; bge: the first, CLS, token), else by the mean for an
encoder and the last token for a decoder; --pooling last, mean or cls
chooses.

Inputs come from --prompt (-p, repeatable), from stdin when stdin is not a
terminal and no --prompt is given (or with -p -), or from --prompts-file, as
for generate. They run in groups of 8, the shortest together. An input longer
than the model's sentence_bert_config.json max_seq_length is cut to it as
sentence-transformers cuts it (the text, keeping the special tokens the
tokenizer adds); without max_seq_length, one beyond the model's positions is
an error.

The output is one line per input, the values separated by spaces; with --json,
a JSON array of {index, tokens, embedding}. Any model generate runs gives its
hidden states, but only one trained for embeddings gives useful ones.`,
		Example: `  tputool embed -m Qwen/Qwen3-Embedding-0.6B -p "What is a TPU?" -p "A TPU is a matrix processor."
  tputool embed -m sentence-transformers/all-MiniLM-L6-v2 -p "What is a TPU?"
  tputool embed -m ./testdata/stories260K-hf --prompts-file docs.txt --json
  tputool embed -m Qwen/Qwen3-Embedding-0.6B --dimensions 256 -p "cut to 256 values, normalized again"`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, args []string) error {
			if err := opts.requireModel(); err != nil {
				return err
			}
			if err := promptSources(f, &opts.Prompts, opts.PromptsFile, "input"); err != nil {
				return err
			}
			if err := checkPoolingFlag(opts.Pooling); err != nil {
				return err
			}
			if opts.Dimensions < 0 {
				return errs.Usagef("--dimensions %d: want a value count (0: all of them)", opts.Dimensions)
			}
			if err := opts.parse(f); err != nil {
				return err
			}
			if runF != nil {
				return runF(c.Context(), opts)
			}
			return embedRun(c.Context(), opts)
		},
	}
	fl := c.Flags()
	opts.addFlags(c, true, "tensor parallelism (embeddings run on one device: must be 1)", "data parallelism (must be 1)")
	fl.StringArrayVarP(&opts.Prompts, "prompt", "p", nil, "input text (repeat for several; - reads the whole of stdin as one input)")
	fl.StringVar(&opts.PromptsFile, "prompts-file", "", "file with one input per line (- for stdin), blank lines skipped; inputs split on NUL bytes when the file has any, else on lines that are exactly ---, when it has any")
	fl.StringVar(&opts.Pooling, "pooling", "auto", poolingHelp)
	fl.IntVar(&opts.Dimensions, "dimensions", 0, "keep the first N values of each vector, normalized again (Matryoshka-trained models; 0: all)")
	fl.BoolVar(&opts.Raw, "raw", false, "print the pooled hidden states as they are, not normalized to unit length")
	fl.StringVar(&opts.PromptName, "prompt-name", "", "put the model's sentence-transformers prompt of that name before each input (config_sentence_transformers.json: e.g. query); default: its default_prompt_name, if any; none: no prompt")
	return c
}

// poolingHelp is the help of --pooling (embed and serve).
const poolingHelp = "how embeddings pool an input's hidden states: last (the last token's), mean, cls (the first token's), or auto (the model's sentence-transformers Pooling config, else mean for an encoder such as BERT and last for the others)"

// checkPoolingFlag validates --pooling.
func checkPoolingFlag(s string) error {
	if s != "auto" && s != "last" && s != "mean" && s != "cls" {
		return errs.Usagef("--pooling %q: want auto, last, mean or cls", s)
	}
	return nil
}

// resolvePooling resolves --pooling: auto takes the model's
// sentence-transformers Pooling config (loader.Checkpoint.Pooling), last
// when it has none; a mode tputool does not pool by is an error that
// names --pooling. Without a Pooling config, an encoder (BERT) pools by
// the mean, as sentence-transformers does for a plain transformers
// model, and a decoder by the last token. A model with a
// sentence-transformers module tputool does not apply (a Dense
// projection) is refused whatever the flag.
func resolvePooling(flag string, m *loader.Checkpoint, encoder bool) (compile.Pooling, error) {
	if err := m.CheckSentenceModules(); err != nil {
		return 0, err
	}
	if flag == "auto" {
		mode, err := m.Pooling()
		if err != nil {
			return 0, fmt.Errorf("%w (--pooling last, mean or cls overrides it)", err)
		}
		if mode == "" {
			mode = "last"
			if encoder {
				mode = "mean"
			}
		}
		flag = mode
	}
	return compile.ParsePooling(flag)
}

// embedPrompt resolves --prompt-name to the text sentence-transformers
// puts before each input (SentenceTransformer.encode's prompt_name): a
// named prompt of config_sentence_transformers.json, the model's
// default_prompt_name when the flag is empty, nothing for "none". A name
// the model lacks is a usage error listing its prompts, and a prompt the
// mean pooling would have to leave out (include_prompt false) is refused,
// hint saying what avoids it.
func embedPrompt(m *loader.Checkpoint, name string, pooling compile.Pooling, hint string) (string, error) {
	if name == "none" {
		return "", nil
	}
	prompts, def, err := m.SentencePrompts()
	if err != nil {
		return "", err
	}
	explicit := name != ""
	if !explicit {
		name = def
	}
	if name == "" {
		return "", nil
	}
	prompt, ok := prompts[name]
	if !ok {
		names := slices.Sorted(maps.Keys(prompts))
		if len(names) == 0 {
			return "", errs.Usagef("--prompt-name %q: the model has no sentence-transformers prompts (config_sentence_transformers.json)", name)
		}
		return "", errs.Usagef("--prompt-name %q: the model's prompts are %s", name, strings.Join(names, ", "))
	}
	if prompt != "" && pooling == compile.PoolMean {
		in, err := m.PoolingIncludesPrompt()
		if err != nil {
			return "", err
		}
		if !in {
			return "", fmt.Errorf("%s: its Pooling config leaves a prompt's tokens out of the mean (include_prompt false), which tputool does not (%s): %w", m.Name(), hint, errs.ErrUnsupported)
		}
	}
	return prompt, nil
}

// isEncoder reports whether the model's config.json describes an encoder
// (lm.Spec.Encoder: BERT), before its weights are loaded; a config the
// model cannot be built from is reported when it loads.
func isEncoder(m *loader.Checkpoint) bool {
	if m.Config == nil {
		return false
	}
	model, err := lm.New(m.Config)
	return err == nil && model.Spec().Encoder
}

// stMaxSeqLength is the most tokens sentence-transformers gives the model
// per input: sentence_bert_config.json's max_seq_length, else, for a
// sentence-transformers model (modules.json), the tokenizer's
// model_max_length within the model's positions (the positions when it is
// unset), as its Transformer module takes it when the config sets none
// (and as sentence-transformers 5.4 and later save the limit); 0 when
// there is none.
func stMaxSeqLength(m *loader.Checkpoint, tok *tokenizer.Tokenizer, positions int) (int, error) {
	n, err := m.MaxSeqLength()
	if err != nil || n > 0 {
		return n, err
	}
	if m.HasFile("modules.json") {
		n = positions
		if l := tok.ModelMaxLength(); l > 0 && (n <= 0 || l < n) {
			n = l
		}
	}
	return n, nil
}

// inGroups runs inputs through run in groups of embedGroup, the shortest
// together so that a group pads little, and returns the outputs in the
// inputs' order; ctx ending between groups stops it (what and noun name
// the work in the error: "embedding", "inputs").
func inGroups(ctx context.Context, what, noun string, inputs [][]int, run func([][]int) ([][]float32, error)) ([][]float32, error) {
	order := make([]int, len(inputs))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return len(inputs[a]) - len(inputs[b]) })
	out := make([][]float32, len(inputs))
	for g := 0; g < len(order); g += embedGroup {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("%s cancelled after %d of %d %s: %w", what, g, len(inputs), noun, errs.ErrInterrupted)
		}
		group := order[g:min(g+embedGroup, len(order))]
		in := make([][]int, len(group))
		for j, i := range group {
			in[j] = inputs[i]
		}
		res, err := run(in)
		if err != nil {
			return nil, err
		}
		for j, i := range group {
			out[i] = res[j]
		}
	}
	return out, nil
}

// embedResult is one element of the --json array.
type embedResult struct {
	Index     int       `json:"index"`
	Tokens    int       `json:"tokens"`
	Embedding []float32 `json:"embedding"`
}

func embedRun(ctx context.Context, opts *EmbedOptions) error {
	if opts.TP*opts.DP > 1 {
		return errs.Usagef("--tp %d --dp %d: embed runs on one device", opts.TP, opts.DP)
	}
	prompts, err := readPrompts(opts.Prompts, opts.PromptsFile, opts.IO.In)
	if err != nil {
		return err
	}
	rep := opts.Reporter
	m, tok, err := opts.resolveLM(ctx)
	if err != nil {
		return err
	}
	pooling, err := resolvePooling(opts.Pooling, m, isEncoder(m))
	if err != nil {
		return err
	}
	prompt, err := embedPrompt(m, opts.PromptName, pooling, "--prompt-name none embeds without the prompt")
	if err != nil {
		return err
	}
	if prompt != "" {
		rep.Debugf("embeddings: each input after the prompt %q", prompt)
		for i := range prompts {
			prompts[i] = prompt + prompts[i]
		}
	}
	dev, dtype, loaded, err := opts.openOnDevice(m)
	if err != nil {
		return err
	}
	defer loaded.Close()
	spec := loaded.Model.Spec()
	if width := lm.FinalWidth(loaded.Model); opts.Dimensions > width {
		return errs.Usagef("--dimensions %d: the model's vectors have %d values", opts.Dimensions, width)
	}
	// sentence-transformers cuts inputs to its max_seq_length: the
	// content, the special tokens kept (Tokenizer.Truncate).
	maxLen, err := stMaxSeqLength(m, tok, spec.MaxPositions)
	if err != nil {
		return err
	}
	ids := make([][]int, len(prompts))
	longest := 0
	for i, p := range prompts {
		if ids[i], err = tok.Encode(p, true); err != nil {
			return fmt.Errorf("input %d: %w", i+1, err)
		}
		if maxLen > 0 && len(ids[i]) > maxLen {
			rep.Debugf("input %d: %d tokens, cut to max_seq_length %d (sentence-transformers')", i+1, len(ids[i]), maxLen)
			if ids[i], err = tok.Truncate(p, ids[i], maxLen); err != nil {
				return fmt.Errorf("input %d: %w", i+1, err)
			}
		}
		if len(ids[i]) == 0 {
			return errs.Usagef("input %d has no tokens", i+1)
		}
		if len(ids[i]) > spec.MaxPositions {
			return errs.Usagef("input %d has %d tokens, beyond the model's %d positions (max_position_embeddings)", i+1, len(ids[i]), spec.MaxPositions)
		}
		longest = max(longest, len(ids[i]))
	}
	if err := checkEmbedFits(loaded.Model, min(len(ids), embedGroup), longest, dtype, opts.KVDType, opts.HostMemory); err != nil {
		return err
	}
	runner, err := compileRunner(dev, loaded, compile.Options{Mode: opts.Mode, DType: dtype, KVDType: opts.KVDType, Experts: opts.Experts, Quantize: opts.Quantize}, opts.HostMemory, rep)
	if err != nil {
		return err
	}
	defer runner.Close()
	rep.Debugf("embeddings: %s pooling (--pooling %s), %d inputs", pooling, opts.Pooling, len(ids))

	out, err := inGroups(ctx, "embedding", "inputs", ids, func(in [][]int) ([][]float32, error) { return runner.Embed(in, pooling) })
	if err != nil {
		return err
	}
	vecs := make([][]float32, len(ids))
	for i, v := range out {
		vecs[i] = serve.FinishEmbedding(v, opts.Dimensions, !opts.Raw)
	}
	if opts.JSON {
		res := make([]embedResult, len(vecs))
		for i, v := range vecs {
			res[i] = embedResult{Index: i, Tokens: len(ids[i]), Embedding: v}
		}
		return opts.IO.WriteJSON(res)
	}
	var b strings.Builder
	for _, v := range vecs {
		b.Reset()
		for j, x := range v {
			if j > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(strconv.FormatFloat(float64(x), 'g', -1, 32))
		}
		b.WriteByte('\n')
		if _, err := fmt.Fprint(opts.IO.Out, b.String()); err != nil {
			return err
		}
	}
	return nil
}
