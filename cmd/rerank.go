package cmd

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/tputool/tputool/compile"
	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/serve"
)

// RerankOptions holds `tputool rerank`'s inputs.
type RerankOptions struct {
	lmOptions

	Query         string
	Documents     []string
	DocumentsFile string
	// TopN is --top-n: the best that many documents (0: all).
	TopN int
	// Raw is --raw: the classifier's logits instead of their sigmoid.
	Raw bool
}

// NewCmdRerank builds `tputool rerank`.
func NewCmdRerank(f *Factory, runF func(context.Context, *RerankOptions) error) *cobra.Command {
	opts := &RerankOptions{lmOptions: newLMOptions(f)}
	c := &cobra.Command{
		Use:   "rerank --model MODEL --query TEXT --document TEXT...",
		Short: "Score documents against a query with a cross-encoder, best first",
		Long: `Score each document's relevance to the query with a cross-encoder reranker
(BertForSequenceClassification, XLMRobertaForSequenceClassification with one
label: cross-encoder/ms-marco-MiniLM-L-6-v2, BAAI/bge-reranker-base,
BAAI/bge-reranker-v2-m3; or a decoder's, Qwen3ForSequenceClassification,
Qwen2-, Llama-, Mistral- and Gemma3TextForSequenceClassification with one label:
tomaarsen/Qwen3-Reranker-0.6B-seq-cls), best first. Each (query, document) pair
is one input, encoded with the tokenizer's pair form (a decoder's tokenizer
without one, as Qwen's: the two texts one after the other, as tokenizers encodes
a pair) and cut as CrossEncoder cuts a pair (longest first, to the tokenizer's
model_max_length within the model's positions). A decoder reranker reads the
texts as given: write the query and documents in the form its model card says
(Qwen3-Reranker's instruction and chat markup). The score is the sigmoid of the
classifier's logit, or the logit itself when the model's config names the
Identity activation (cross-encoder/ms-marco-*), as sentence-transformers'
CrossEncoder scores a one-label model; --raw prints the logit whatever the
config says.

Documents come from --document (-d, repeatable) and --documents-file (one per
line, - for stdin; blank lines skipped; split on NUL bytes when the file has
any, else on lines that are exactly ---, when it has any). The output is one
line per document, "SCORE<TAB>INDEX<TAB>DOCUMENT" (INDEX counts from 0 in the
order given); with --json, an array of {index, relevance_score, document}.`,
		Example: `  tputool rerank -m BAAI/bge-reranker-base --query "What is a TPU?" -d "A TPU is a matrix processor." -d "Paris is in France."
  tputool rerank -m cross-encoder/ms-marco-MiniLM-L-6-v2 --query "tpu" --documents-file docs.txt --top-n 3 --json`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, args []string) error {
			if err := opts.requireModel(); err != nil {
				return err
			}
			if strings.TrimSpace(opts.Query) == "" {
				return errs.Usagef("--query is required (the text the documents are scored against)")
			}
			if len(opts.Documents) == 0 && opts.DocumentsFile == "" {
				return errs.Usagef("give at least one --document or a --documents-file")
			}
			if err := checkStdinUse(opts.Documents, opts.DocumentsFile); err != nil {
				return err
			}
			if opts.TopN < 0 {
				return errs.Usagef("--top-n %d: want a document count (0: all of them)", opts.TopN)
			}
			if err := opts.parse(f); err != nil {
				return err
			}
			if runF != nil {
				return runF(c.Context(), opts)
			}
			return rerankRun(c.Context(), opts)
		},
	}
	fl := c.Flags()
	opts.addFlags(c, true, "tensor parallelism (reranking runs on one device: must be 1)", "data parallelism (must be 1)")
	fl.StringVar(&opts.Query, "query", "", "the query the documents are scored against (required)")
	fl.StringArrayVarP(&opts.Documents, "document", "d", nil, "a document to score (repeat for several; - reads the whole of stdin as one)")
	fl.StringVar(&opts.DocumentsFile, "documents-file", "", "file with one document per line (- for stdin), blank lines skipped; split on NUL bytes when the file has any, else on lines that are exactly ---, when it has any")
	fl.IntVar(&opts.TopN, "top-n", 0, "print the best N documents (0: all)")
	fl.BoolVar(&opts.Raw, "raw", false, "print the classifier's logits, whatever activation the model's config names")
	return c
}

// rerankResult is one element of the --json array.
type rerankResult struct {
	Index          int     `json:"index"`
	RelevanceScore float64 `json:"relevance_score"`
	Document       string  `json:"document"`
}

func rerankRun(ctx context.Context, opts *RerankOptions) error {
	if opts.TP*opts.DP > 1 {
		return errs.Usagef("--tp %d --dp %d: rerank runs on one device", opts.TP, opts.DP)
	}
	docs, err := readPrompts(opts.Documents, opts.DocumentsFile, opts.IO.In)
	if err != nil {
		return err
	}
	if len(docs) == 0 {
		return errs.Usagef("no documents to score (the file has only blank lines)")
	}
	rep := opts.Reporter
	m, tok, err := opts.resolveLM(ctx)
	if err != nil {
		return err
	}
	dev, dtype, loaded, err := opts.openOnDevice(m)
	if err != nil {
		return err
	}
	defer loaded.Close()
	spec := loaded.Model.Spec()
	sc, ok := loaded.Model.(lm.Scorer)
	if !ok || sc.Labels() == 0 {
		return fmt.Errorf("%s has no classification head: rerank needs a cross-encoder (a *ForSequenceClassification with one label): %w", spec.Architecture, errs.ErrUnsupported)
	}
	if sc.Labels() != 1 {
		return fmt.Errorf("%s has %d labels: rerank needs a cross-encoder with one (a relevance score), not a %d-way classifier: %w", spec.Architecture, sc.Labels(), sc.Labels(), errs.ErrUnsupported)
	}
	raw := opts.Raw // the logit, whatever activation the config names
	if !raw {
		if raw, err = m.CrossEncoderRaw(); err != nil {
			return err
		}
	}
	// CrossEncoder cuts a pair to the tokenizer's model_max_length within
	// the model's positions.
	maxLen := spec.MaxPositions
	if n := tok.ModelMaxLength(); n > 0 {
		maxLen = min(maxLen, n)
	}
	// A causal cross-encoder's tokenizer without a pair form concatenates
	// (serve.CausalPairIDs); the query is encoded once.
	pairs, err := serve.NewPairs(tok, serve.TypeStride(spec.VocabSize, spec.TokenTypes), spec.Classifier, opts.Query, maxLen)
	if err != nil {
		return fmt.Errorf("--query: %w", err)
	}
	inputs := make([][]int, len(docs))
	longest := 0
	for i, d := range docs {
		if inputs[i], err = pairs.IDs(d); err != nil {
			return fmt.Errorf("document %d: %w", i, err)
		}
		longest = max(longest, len(inputs[i]))
	}
	if err := checkEmbedFits(loaded.Model, min(len(inputs), embedGroup), longest, dtype, opts.KVDType, opts.HostMemory); err != nil {
		return err
	}
	runner, err := compileRunner(dev, loaded, compile.Options{Mode: opts.Mode, DType: dtype, KVDType: opts.KVDType, Quantize: opts.Quantize}, opts.HostMemory, rep)
	if err != nil {
		return err
	}
	defer runner.Close()
	rep.Debugf("rerank: %d documents, the longest pair %d tokens", len(docs), longest)

	scores, err := inGroups(ctx, "reranking", "documents", inputs, runner.Score)
	if err != nil {
		return err
	}
	res := make([]rerankResult, len(inputs))
	for i, s := range scores {
		res[i] = rerankResult{Index: i, RelevanceScore: serve.RelevanceScore(s[0], raw), Document: docs[i]}
	}
	// Best first; equal scores keep the documents' order.
	slices.SortStableFunc(res, func(a, b rerankResult) int {
		switch {
		case a.RelevanceScore > b.RelevanceScore:
			return -1
		case a.RelevanceScore < b.RelevanceScore:
			return 1
		}
		return 0
	})
	if opts.TopN > 0 && opts.TopN < len(res) {
		res = res[:opts.TopN]
	}
	if opts.JSON {
		return opts.IO.WriteJSON(res)
	}
	var b strings.Builder
	for _, r := range res {
		fmt.Fprintf(&b, "%.6g\t%d\t%s\n", r.RelevanceScore, r.Index, strings.ReplaceAll(r.Document, "\n", " "))
	}
	_, err = fmt.Fprint(opts.IO.Out, b.String())
	return err
}
