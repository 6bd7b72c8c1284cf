package cmd

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/spf13/cobra"

	"github.com/tputool/tputool/compile"
	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/internal/humanize"
	"github.com/tputool/tputool/internal/ui"
	"github.com/tputool/tputool/loader"
	"github.com/tputool/tputool/loader/tokenizer"
	"github.com/tputool/tputool/pipeline/generate"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/serve"
)

// apiKeyEnv is the environment variable --api-key defaults to.
const apiKeyEnv = "TPUTOOL_API_KEY"

// Serve defaults.
const (
	defaultServePort     = 8000
	defaultMaxBatch      = 8
	defaultServeContext  = 2048 // --max-context when the model allows more
	defaultPrefixCache   = 4
	maxPrefixCache       = 1024
	defaultDrainTimeout  = 30 * time.Second
	serveReadHeaderLimit = 10 * time.Second
	serveIdleTimeout     = 2 * time.Minute
	serveMaxHeaderBytes  = 64 << 10
)

// ServeOptions holds `tputool serve`'s inputs.
type ServeOptions struct {
	lmOptions
	// Listen opens the listening socket; net.Listen by default.
	Listen func(network, address string) (net.Listener, error)
	// Version is tputool's version, for ollama's /api/version.
	Version string
	// CORSOrigins are --cors-origin: browser origins allowed to call the
	// API ("*" for any).
	CORSOrigins []string

	Host string
	Port int
	// MaxBatch is the number of sequence slots decoded at once.
	MaxBatch int
	// MaxContext is the longest sequence, prompt plus generated tokens (0:
	// the model's max positions, at most defaultServeContext).
	MaxContext int
	// MaxQueue bounds the requests waiting for a slot (0: 4 x MaxBatch).
	MaxQueue int
	// PrefillChunk is the prompt tokens per prefill piece.
	PrefillChunk int
	// PrefixCache is the number of finished prompts whose caches are kept
	// for prompts that share their prefix (0: none).
	PrefixCache int
	// Pooling is --pooling: how embeddings pool the hidden states, "last",
	// "mean" or "auto" (the model's sentence-transformers config, else
	// last).
	Pooling string
	// APIKey, when set, is required as a Bearer token (--api-key, else
	// TPUTOOL_API_KEY). Never printed.
	APIKey          string
	ServedModelName string
	AllowInsecure   bool
	// Warmup compiles every batch shape before listening.
	Warmup bool
	// DrainTimeout bounds the wait for requests in flight at shutdown.
	DrainTimeout time.Duration
	// Pprof serves Go's runtime profiles under /debug/pprof/.
	Pprof bool
	// Speculate is --speculate and --speculate-ngram.
	Speculate speculateFlags
}

// NewCmdServe builds `tputool serve`.
func NewCmdServe(f *Factory, runF func(context.Context, *ServeOptions) error) *cobra.Command {
	opts := &ServeOptions{lmOptions: newLMOptions(f), Listen: net.Listen, Version: f.Build.Version}
	c := &cobra.Command{
		Use:   "serve --model MODEL [--host 127.0.0.1] [--port 8000]",
		Short: "Serve a language model over an OpenAI-compatible HTTP API",
		Long: `Serve a causal language model (any architecture generate runs) over HTTP with
the OpenAI API: GET /v1/models, POST /v1/completions, POST /v1/chat/completions
(through the model's chat template), streaming as server-sent events, plus
GET /health and GET /metrics (Prometheus text). See docs/serve.md.

An encoder (BERT, XLM-RoBERTa: all-MiniLM, bge, e5) gives embeddings only:
serve answers /v1/embeddings, /api/embed and /api/embeddings for it, the
generating endpoints answer 400, and --max-batch, --prefill-chunk,
--prefix-cache and --warmup do not apply. A cross-encoder of one label (a
reranker: cross-encoder/ms-marco-MiniLM-L-6-v2, BAAI/bge-reranker-base) is
served by POST /v1/rerank, /rerank and /v2/rerank alone (Jina's and Cohere's API:
a query and documents to the documents' relevance scores, best first), the
embeddings endpoints answering it 400 too; a classifier of more labels is
refused.

Requests run together by continuous batching: --max-batch sequences are
decoded at once in fixed compiled shapes, new requests join between decode
steps, and long prompts are prefilled in pieces of --prefill-chunk tokens
between them. Up to --max-queue requests wait for a free slot; beyond that
the server answers 429. --warmup (on by default) compiles every shape before
the server listens, so no request waits for a compile.

The server listens on 127.0.0.1 (loopback) unless --host says otherwise. It
refuses a --host other than loopback without an API key (--api-key, or the
TPUTOOL_API_KEY environment variable, which keeps the key out of the process
list), unless --allow-insecure is given. With a key, /v1 requests need the
header "Authorization: Bearer KEY".

When it listens, serve prints one line on stderr with the address; with
--json it also prints {"type":"listening","address":...} on stdout, so a
script can find the port of --port 0 (a free port). Each request is logged
as one JSON line on stderr.

SIGTERM or Ctrl-C stops accepting connections and lets the requests in
flight finish (up to --drain-timeout; then they are cut off), and serve
exits 0. A second signal exits 130 at once.`,
		Example: `  tputool serve --model ./testdata/stories260K-hf
  tputool serve --model Qwen/Qwen3-0.6B --max-batch 16 --max-context 4096
  TPUTOOL_API_KEY=secret tputool serve --model Qwen/Qwen3-0.6B --host 0.0.0.0
  tputool serve --model ./my-llama --port 0 --json
  curl -s localhost:8000/v1/completions -H 'content-type: application/json' \
    -d '{"model":"./testdata/stories260K-hf","prompt":"Once upon a time","max_tokens":16}'`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, args []string) error {
			if err := opts.requireModel(); err != nil {
				return err
			}
			if err := opts.parse(f); err != nil {
				return err
			}
			if !c.Flags().Changed("api-key") {
				opts.APIKey = f.Getenv(apiKeyEnv)
			} else if opts.APIKey == "" {
				return errs.Usagef("--api-key is empty (leave it out to serve without a key)")
			}
			if err := checkServeFlags(opts, c.Flags().Changed); err != nil {
				return err
			}
			if runF != nil {
				return runF(c.Context(), opts)
			}
			return serveRun(c.Context(), opts)
		},
	}
	fl := c.Flags()
	opts.addFlags(c, true, "tensor parallelism: split attention heads and MLP over this many devices",
		"data parallelism: split the sequence slots over this many devices (times --tp)")
	fl.StringVar(&opts.Host, "host", "127.0.0.1", "address to listen on; anything but loopback needs an API key or --allow-insecure")
	fl.IntVar(&opts.Port, "port", defaultServePort, "TCP port (0: a free port, printed when listening)")
	fl.IntVar(&opts.MaxBatch, "max-batch", defaultMaxBatch, "sequence slots: the most requests (choices) decoded at once")
	fl.IntVar(&opts.MaxContext, "max-context", 0, fmt.Sprintf("longest sequence, prompt plus generated tokens (default: the model's max_position_embeddings, at most %d)", defaultServeContext))
	fl.IntVar(&opts.MaxQueue, "max-queue", 0, "requests waiting for a slot before the server answers 429 (default 4 x --max-batch)")
	fl.IntVar(&opts.PrefillChunk, "prefill-chunk", compile.DefaultServePrefillChunk, "prompt tokens per prefill piece, interleaved with decode steps")
	fl.IntVar(&opts.PrefixCache, "prefix-cache", defaultPrefixCache, "recent prompts whose KV cache is kept, so that a prompt sharing a prefix with one (a system prompt) skips it; 0 keeps none")
	fl.StringVar(&opts.Pooling, "pooling", "auto", poolingHelp)
	fl.StringVar(&opts.APIKey, "api-key", "", "require this key as a Bearer token on /v1 requests (default: env "+apiKeyEnv+", which keeps it out of ps)")
	fl.StringVar(&opts.ServedModelName, "served-model-name", "", "model name in the API (default: --model as given)")
	fl.StringArrayVar(&opts.CORSOrigins, "cors-origin", nil, "browser origin allowed to call the API, e.g. http://localhost:3000 (repeatable; * allows any); none: no CORS headers")
	fl.BoolVar(&opts.AllowInsecure, "allow-insecure", false, "allow a --host other than loopback without an API key")
	fl.BoolVar(&opts.Warmup, "warmup", true, "compile every batch shape before listening (--warmup=false listens sooner; the first requests then wait for compiles)")
	fl.DurationVar(&opts.DrainTimeout, "drain-timeout", defaultDrainTimeout, "at SIGTERM or Ctrl-C, how long requests in flight may take to finish")
	opts.Speculate.add(c)
	opts.Speculate.addDraft(c)
	opts.Speculate.addMTP(c)
	fl.BoolVar(&opts.Pprof, "pprof", false, "serve Go's runtime profiles (CPU, heap, allocations, goroutines) under /debug/pprof/, behind the API key like /v1")
	return c
}

// checkServeFlags validates serve's own flags; the errors name them.
// given reports the flags given on the command line.
func checkServeFlags(o *ServeOptions, given func(string) bool) error {
	if err := checkPoolingFlag(o.Pooling); err != nil {
		return err
	}
	if err := o.Speculate.check(given); err != nil {
		return err
	}
	switch {
	case o.Port < 0 || o.Port > 65535:
		return errs.Usagef("--port %d: want 0 (a free port) to 65535", o.Port)
	case o.MaxBatch < 1 || o.MaxBatch > compile.MaxSlots:
		return errs.Usagef("--max-batch %d: want 1 to %d sequence slots", o.MaxBatch, compile.MaxSlots)
	case o.MaxContext < 0:
		return errs.Usagef("--max-context %d: want a token count (0: the model's, at most %d)", o.MaxContext, defaultServeContext)
	case o.MaxQueue < 0:
		return errs.Usagef("--max-queue %d: want a request count (0: 4 x --max-batch)", o.MaxQueue)
	case o.PrefillChunk < 1:
		return errs.Usagef("--prefill-chunk %d: want at least 1 token", o.PrefillChunk)
	case o.PrefixCache < 0 || o.PrefixCache > maxPrefixCache:
		return errs.Usagef("--prefix-cache %d: want 0 to %d prompts", o.PrefixCache, maxPrefixCache)
	case o.DrainTimeout < 0:
		return errs.Usagef("--drain-timeout %s: must not be negative", o.DrainTimeout)
	case o.ServedModelName != "" && strings.TrimSpace(o.ServedModelName) == "":
		return errs.Usagef("--served-model-name is blank")
	}
	for i, origin := range o.CORSOrigins {
		if origin == "*" {
			continue
		}
		o.CORSOrigins[i] = strings.TrimSuffix(origin, "/") // browsers send none
		u, err := url.Parse(origin)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" {
			return errs.Usagef("--cors-origin %q: want an origin such as http://localhost:3000 (scheme and host, no path), or *", origin)
		}
	}
	if o.MaxQueue == 0 {
		o.MaxQueue = 4 * o.MaxBatch
	}
	host := strings.TrimSuffix(strings.TrimPrefix(o.Host, "["), "]")
	if host != o.Host && net.ParseIP(host) == nil {
		return errs.Usagef("--host %q: want a host name or an IP address", o.Host)
	}
	o.Host = host
	if !isLoopback(host) && o.APIKey == "" && !o.AllowInsecure {
		shown := host
		if shown == "" {
			shown = `"" (every interface)`
		}
		return errs.Usagef("--host %s is reachable from other machines: set an API key (%s, or --api-key) or pass --allow-insecure", shown, apiKeyEnv)
	}
	return nil
}

// isLoopback reports whether host (a name or an IP address, without
// brackets) is this machine only: localhost or a loopback address. Other
// names count as reachable from elsewhere, without a DNS lookup.
func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// servedContext is the --max-context a model gets: the flag's, checked
// against the model's positions, or the model's up to defaultServeContext.
func servedContext(flag, maxPositions int) (int, error) {
	switch {
	case flag == 0 && maxPositions > 0:
		return min(maxPositions, defaultServeContext), nil
	case flag == 0:
		return defaultServeContext, nil
	case maxPositions > 0 && flag > maxPositions:
		return 0, errs.Usagef("--max-context %d: the model has %d positions (max_position_embeddings)", flag, maxPositions)
	}
	return flag, nil
}

// parameterCount is the number of values in l's weights (ollama's
// parameter_size).
func parameterCount(l *lm.Loaded) int64 {
	var n int64
	for _, w := range l.Weights() {
		size := int64(1)
		for _, d := range w.Shape {
			size *= int64(d)
		}
		n += size
	}
	return n
}

// quantizationLevel names how the weights are held, as ollama's
// quantization_level: --quantize (INT8, INT4), else the checkpoint's
// quantization method (MXFP4, FP8, GPTQ…), else the compute dtype as
// ollama writes it (BF16, F16, F32).
func quantizationLevel(quantize string, l *lm.Loaded, dtype dtypes.DType) string {
	if quantize != "" {
		return strings.ToUpper(quantize)
	}
	if l.Config != nil {
		if d := lm.DescribeQuantization(l.Config); d != "" {
			method, _, _ := strings.Cut(d, ",")
			method, _, _ = strings.Cut(method, " ")
			return strings.ToUpper(method)
		}
	}
	switch dtype {
	case dtypes.BFloat16:
		return "BF16"
	case dtypes.Float16:
		return "F16"
	case dtypes.Float32:
		return "F32"
	}
	return strings.ToUpper(dtype.String())
}

// checkSlotsFit refuses KV caches for every slot, for the prefix
// cache's prompts (each at most a prefill of --max-context positions),
// and for a draft model's lone sequence (nil: none) or the
// multi-token-prediction head's (m read with one), that the host cannot
// hold together.
func checkSlotsFit(m lm.Model, slots, context, prefixes int, dtype, kv dtypes.DType, hostMemoryFn func() int64, draft lm.Model) error {
	var hostMemory int64
	if hostMemoryFn != nil {
		hostMemory = hostMemoryFn()
	}
	need, ok := lm.StateBytes(m, slots, context, dtype, kv)
	kept, ok2 := lm.StateBytes(m, prefixes, compile.PrefillCacheLen(context), dtype, kv)
	what := fmt.Sprintf("the KV caches of %d slots of %d positions and of %d cached prompts (%d layers, %s)", slots, context, prefixes, m.Spec().Layers, kvOr(kv, dtype))
	ok3, drafted := true, int64(0)
	if draft != nil { // a lone sequence's, as long as the context and a draft
		drafted, ok3 = lm.StateBytes(draft, 1, compile.CacheBucket(context+maxSpeculate), dtype, kv)
		what += " and the draft model's"
	}
	if _, isMTP := m.(lm.MTPModel); isMTP { // the lone sequence's head
		head, okHead := mtpStateNeed(m, context, dtype, kv)
		drafted += head
		ok3 = ok3 && okHead && drafted >= head
		what += " and the multi-token-prediction head's"
	}
	total := need + kept + drafted
	return checkHostMemory(what, total, !ok || !ok2 || !ok3 || total < need, hostMemory, "lower --max-batch, --max-context or --prefix-cache"+narrowerKV(kv))
}

// checkEncoderFits refuses an encoder's serving state that the host
// cannot hold: the attention scores of a group of inputs embedded
// together (as many as compile.Encoder runs at once), each of up to
// --max-context positions (and any layer state, which BERT has none of);
// for a causal classifier (lm.Spec.Classifier), whose inputs run in
// pieces, the KV caches of such a group and a piece's attention scores
// (compile.EmbedScoreBytes).
func checkEncoderFits(m lm.Model, context int, dtype, kv dtypes.DType, hostMemoryFn func() int64) error {
	var hostMemory int64
	if hostMemoryFn != nil {
		hostMemory = hostMemoryFn()
	}
	spec := m.Spec()
	need, ok := lm.StateBytes(m, embedGroup, context, dtype, kv)
	what := fmt.Sprintf("the KV caches of %d inputs of %d positions scored together (%d layers, %s)", embedGroup, context, spec.Layers, kvOr(kv, dtype))
	need += compile.EmbedScoreBytes(spec, embedGroup, context)
	what += fmt.Sprintf(" and their attention scores (%d heads, f32)", spec.Heads)
	if spec.Encoder {
		what = fmt.Sprintf("the attention scores of %d inputs of %d positions embedded together (%d heads, f32)", embedGroup, context, spec.Heads)
	}
	return checkHostMemory(what, need, !ok, hostMemory, "lower --max-context"+narrowerKV(kv))
}

// servedReranker reports whether serve serves m as a reranker: an
// encoder, or a causal classifier (lm.Spec.Classifier), with a
// classification head (lm.Scorer) of one label, whose logit is a (query,
// document) pair's relevance. A classifier of more labels is refused,
// and so is an encoder cross-encoder whose tokenizer has no pair form (it
// could not encode the pairs it was trained on): both
// errs.ErrUnsupported. A causal classifier's pairs without a pair form
// are the two texts one after the other, as tokenizers encodes them
// (serve.CausalPairIDs).
func servedReranker(m lm.Model, tok *tokenizer.Tokenizer) (bool, error) {
	spec := m.Spec()
	sc, ok := m.(lm.Scorer)
	if spec.Generates() || !ok || sc.Labels() == 0 {
		return false, nil
	}
	if n := sc.Labels(); n > 1 {
		return false, fmt.Errorf("%s has %d labels: serve reranks with a cross-encoder of one label (a relevance score), and a %d-label text classifier is not served: %w", spec.Architecture, n, n, errs.ErrUnsupported)
	}
	if spec.Encoder && !tok.HasPairTemplate() {
		return false, fmt.Errorf("%s is a cross-encoder, but its tokenizer has no pair form (tokenizer.json's post_processor joins no second text) to encode (query, document) pairs with: %w", spec.Architecture, errs.ErrUnsupported)
	}
	return true, nil
}

// servedEngine is serve's engine over a Runner: a compile.Batch for a
// model that generates, a compile.Encoder for one that does not (an
// encoder, a causal classifier), as the scheduler takes it.
type servedEngine struct {
	serve.Engine
	// warmup compiles the engine's shapes; nil when it has none to warm
	// (an encoder's embed programs compile at first use).
	warmup func() error
	// close frees the engine's state (not the Runner).
	close func()
	// batch is the decode batch of a generating model (nil: an encoder's
	// engine).
	batch *compile.Batch
}

// serveEngine builds the engine of the runner, which it then owns: an
// encoder's (embeddings only, or with scores a cross-encoder's scores;
// one row) or continuous batching of --max-batch slots; slots is what the
// listening line reports, 0 for an encoder, which decodes no sequences.
func serveEngine(r *compile.Runner, opts *ServeOptions, maxContext int, pooling compile.Pooling, encoder, scores bool) (e servedEngine, slots int, err error) {
	if encoder {
		enc, err := compile.NewEncoder(r, compile.EncoderOptions{Pooling: pooling, MaxContext: maxContext, Scores: scores})
		if err != nil {
			return servedEngine{}, 0, err
		}
		return servedEngine{Engine: serve.Adapt(enc), close: func() {}}, 0, nil
	}
	batch, err := compile.NewBatch(r, compile.BatchOptions{MaxBatch: opts.MaxBatch, MaxContext: maxContext,
		PrefillChunk: opts.PrefillChunk, Prefixes: opts.PrefixCache > 0, Pooling: pooling, Speculate: opts.Speculate.Draft,
		MTP: opts.Speculate.MTP})
	if err != nil {
		return servedEngine{}, 0, err
	}
	return servedEngine{Engine: serve.Adapt(batch), warmup: batch.Warmup, close: batch.Close, batch: batch}, opts.MaxBatch, nil
}

// compileCounter counts the executables compiled: all of them, and those
// compiled after the server started listening (recompiles: with --warmup
// there should be none).
type compileCounter struct {
	executables func() int // the model's runner's, and a draft model's
	base        int
}

func (c *compileCounter) ready() { c.base = c.executables() }

func (c *compileCounter) counts() (compiles, recompiles int) {
	n := c.executables()
	return n, max(0, n-c.base)
}

func serveRun(ctx context.Context, opts *ServeOptions) error {
	start := opts.Now()
	rep := opts.Reporter

	// The port first, so that a taken one fails before minutes of loading;
	// connections wait in the backlog until the server is ready.
	ln, err := opts.Listen("tcp", net.JoinHostPort(opts.Host, fmt.Sprint(opts.Port)))
	if err != nil {
		return fmt.Errorf("--host %s --port %d: %w", opts.Host, opts.Port, err)
	}
	defer ln.Close()

	// Load: model files, tokenizer and chat template, device, weights.
	m, tok, err := opts.resolveLM(ctx)
	if err != nil {
		return err
	}
	encoder := isEncoder(m) // before the weights load; spec.Encoder after
	pooling, err := resolvePooling(opts.Pooling, m, encoder)
	if err != nil {
		return err
	}
	rep.Debugf("embeddings: %s pooling (--pooling %s)", pooling, opts.Pooling)
	embedPromptText, err := embedPrompt(m, "", pooling, "--pooling last or cls pools without leaving it out") // the model's default prompt, if any
	if err != nil {
		return err
	}
	teiPrompts, err := servedPrompts(m, pooling)
	if err != nil {
		return err
	}
	// Bounded again by the served context (serve.ServerOptions.EmbedMaxLength).
	embedMaxLength, err := stMaxSeqLength(m, tok, 0)
	if err != nil {
		return err
	}
	tmpl, err := tok.ChatTemplate("")
	switch {
	case errors.Is(err, tokenizer.ErrNoChatTemplate):
		if !encoder { // an encoder's server answers chat 400 anyway
			rep.Debugf("%s has no chat template: /v1/chat/completions answers 400", m.Name())
		}
		tmpl = nil
	case err != nil:
		return err
	}
	dev, dtype, loaded, err := opts.openOnDevice(m)
	if err != nil {
		return err
	}
	defer loaded.Close()
	if loaded.Model.Spec().Generates() {
		if err := opts.Speculate.withMTP(loaded, 1); err != nil {
			return err
		}
	}
	spec := loaded.Model.Spec()
	// An encoder (BERT, XLM-RoBERTa) gives embeddings only: it is served
	// by the embeddings endpoints, without slots, prefix cache or
	// warm-up (compile.Encoder), and the generating endpoints answer 400.
	// A cross-encoder of one label (a reranker) gives scores only: it is
	// served by /v1/rerank, its engine giving each pair's logit; so is a
	// causal classifier (lm.Spec.Classifier: Qwen3ForSequenceClassification
	// and the like), a reranker or refused.
	embeddingsOnly := !spec.Generates()
	rerank, err := servedReranker(loaded.Model, tok)
	if err != nil {
		return err
	}
	maxContext, err := servedContext(opts.MaxContext, spec.MaxPositions)
	if err != nil {
		return err
	}
	if spec.Encoder && opts.MaxContext == 0 && spec.MaxPositions > 0 {
		// An encoder's inputs hold no KV cache between requests: its
		// context is its positions (a bge-m3 reads 8192), not the
		// decoders' default.
		maxContext = spec.MaxPositions
	}
	var rerankRaw bool // the scores are the logits (loader.Checkpoint.CrossEncoderRaw)
	if rerank {
		if rerankRaw, err = m.CrossEncoderRaw(); err != nil {
			return err
		}
		rep.Debugf("%s is a cross-encoder of one label: serving reranking only, on /v1/rerank (--max-batch, --prefill-chunk, --prefix-cache and --warmup do not apply)", spec.Architecture)
	} else if spec.Encoder {
		rep.Debugf("%s is an encoder: serving embeddings only (--max-batch, --prefill-chunk, --prefix-cache and --warmup do not apply)", spec.Architecture)
	}
	if embeddingsOnly {
		if err := checkEncoderFits(loaded.Model, maxContext, dtype, opts.KVDType, opts.HostMemory); err != nil {
			return err
		}
	} else {
		if err := checkSlotsFit(loaded.Model, opts.MaxBatch, maxContext, opts.PrefixCache, dtype, opts.KVDType, opts.HostMemory, nil); err != nil {
			return err
		}
		if need, ok := lm.StateBytes(loaded.Model, opts.MaxBatch, maxContext, dtype, opts.KVDType); ok {
			rep.Debugf("KV caches: up to %s for %d slots of %d positions, held as %s", humanize.Bytes(need), opts.MaxBatch, maxContext, kvHeld(opts.KVDType, dtype))
		}
	}
	// The sampling settings of a request: its fields over the model's
	// generation_config.json; checked once here, so a broken file fails
	// at start rather than at every request (an encoder's is never read).
	resolve := func(o generate.Overrides) (generate.Options, error) {
		return generate.ResolveWith(loaded.Generation, spec.EOS, tokenizerEOS(tok), o)
	}
	if !embeddingsOnly {
		if _, err := resolve(generate.Overrides{}); err != nil {
			return err
		}
	}
	runner, err := compileRunner(dev, loaded, compile.Options{Mode: opts.Mode, DType: dtype, KVDType: opts.KVDType, TP: opts.TP, DP: opts.DP, Experts: opts.Experts, Quantize: opts.Quantize}, opts.HostMemory, rep)
	if err != nil {
		return err
	}
	defer runner.Close()
	// The draft model next, so that a model that cannot be one fails
	// before the warm-up.
	var draft *openedDraft
	if opts.Speculate.Draft > 0 && !embeddingsOnly && runner.Speculates() {
		if draft, err = opts.Speculate.openDraft(ctx, &opts.lmOptions, dev, dtype, tok, runner, 1); err != nil {
			return err
		}
		defer draft.Close()
		if draft != nil {
			if err := checkSlotsFit(loaded.Model, opts.MaxBatch, maxContext, opts.PrefixCache, dtype, opts.KVDType, opts.HostMemory, draft.loaded.Model); err != nil {
				return err
			}
		}
	}
	engine, slots, err := serveEngine(runner, opts, maxContext, pooling, embeddingsOnly, rerank)
	if err != nil {
		return err
	}
	defer engine.close()
	counter := &compileCounter{executables: func() int { return runner.Stats().Executables + draft.Executables() }}
	if opts.Warmup && engine.warmup != nil {
		rep.Infof("warming up: compiling the shapes of %d slots and %d-token prefill pieces…", opts.MaxBatch, opts.PrefillChunk)
		t := opts.Now()
		if err := engine.warmup(); err != nil {
			return fmt.Errorf("warm-up: %w", err)
		}
		rep.Debugf("warm-up: %d executables in %s", runner.Stats().Executables, opts.Now().Sub(t).Round(time.Millisecond))
	}
	if ctx.Err() != nil {
		return fmt.Errorf("serve: %w", errs.ErrInterrupted)
	}

	// The scheduler and the HTTP API over it.
	name := opts.ServedModelName
	if name == "" {
		name = modelLabel(m)
	}
	metrics := serve.NewMetrics(counter.counts)
	cfg := serve.Config{MaxQueue: opts.MaxQueue, Observer: metrics, Now: opts.Now, PrefixCache: opts.PrefixCache}
	if opts.Speculate.Draft > 0 && !embeddingsOnly {
		switch {
		case !runner.Speculates():
			rep.Warnf("--speculate: off, %s on this device cannot take its caches back (GoMLX's go backend, --experts host, or recurrent state on an XLA device or in eager mode)", spec.Architecture)
		default:
			cfg.Speculate, cfg.SpeculateNgram = opts.Speculate.Draft, opts.Speculate.Ngram
			cfg.SpeculateFixed = runner.FixedSteps()
			switch mtp, err := opts.Speculate.serveMTP(runner, engine.batch); {
			case err != nil:
				return err
			case mtp != nil:
				cfg.DraftModel = mtp
				cfg.Observer = &draftWarnings{Observer: metrics, rep: rep, flag: "--mtp"}
				rep.Debugf("speculative decoding: a sequence running alone proposes up to %d tokens a step with the model's multi-token-prediction head", opts.Speculate.Draft)
			case draft != nil:
				cfg.DraftModel = draft.Model()
				cfg.Observer = &draftWarnings{Observer: metrics, rep: rep, flag: "--draft-model"}
				rep.Debugf("speculative decoding: a sequence running alone proposes up to %d tokens a step with the draft model %s", opts.Speculate.Draft, opts.Speculate.Model)
			default:
				rep.Debugf("speculative decoding: a sequence running alone proposes up to %d tokens a step by prompt lookup (n-grams up to %d)", opts.Speculate.Draft, opts.Speculate.Ngram)
			}
		}
	}
	sched := serve.New(engine.Engine, cfg)
	api := serve.NewServer(sched, serve.ServerOptions{
		ModelName:      name,
		Tokenizer:      tok,
		Template:       tmpl,
		Resolve:        resolve,
		MaxContext:     maxContext,
		VocabSize:      spec.VocabSize,
		TokenTypes:     spec.TokenTypes,
		EmbeddingSize:  lm.FinalWidth(loaded.Model),
		EmbedMaxLength: embedMaxLength,
		EmbedPrompt:    embedPromptText,
		EmbedPrompts:   teiPrompts,
		Pooling:        pooling.String(),
		Version:        opts.Version,
		CORSOrigins:    opts.CORSOrigins,
		Family:         spec.Architecture,
		ParameterCount: parameterCount(loaded),
		Quantization:   quantizationLevel(opts.Quantize, loaded, dtype),
		APIKey:         opts.APIKey,
		AccessLog:      opts.IO.ErrOut,
		Metrics:        metrics,
		Reasoning:      serve.ReasoningOf(tmpl),
		Harmony:        serve.IsHarmony(tmpl),
		EmbeddingsOnly: embeddingsOnly,
		Rerank:         rerank,
		RerankRaw:      rerankRaw,
		RerankCausal:   rerank && spec.Classifier,
		Pprof:          opts.Pprof,
		Now:            opts.Now,
	})
	// The scheduler outlives ctx (the first signal): it drains.
	runCtx, stopRun := context.WithCancel(context.Background())
	defer stopRun()
	runDone := make(chan struct{})
	go func() { defer close(runDone); sched.Run(runCtx) }()
	defer func() { stopRun(); <-runDone }()

	hs := &http.Server{
		Handler:           api,
		ReadHeaderTimeout: serveReadHeaderLimit,
		IdleTimeout:       serveIdleTimeout,
		MaxHeaderBytes:    serveMaxHeaderBytes,
		// No WriteTimeout: a stream lasts as long as its generation.
		ErrorLog: log.New(debugWriter{rep}, "http: ", 0),
	}
	counter.ready() // compiles from here on are recompiles
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	addr := ln.Addr().String()
	// embeddings_only and rerank say what a model that generates nothing
	// serves: its embeddings, or a reranker's scores.
	what := fmt.Sprintf("%d slots", slots)
	switch {
	case rerank:
		what = "reranking only"
	case embeddingsOnly:
		what = "embeddings only"
	}
	rep.Event("listening", fmt.Sprintf("serving %s on http://%s (%s, context %d, queue %d; ready in %s)",
		name, addr, what, maxContext, opts.MaxQueue, opts.Now().Sub(start).Round(time.Millisecond)),
		map[string]any{"address": addr, "model": name, "slots": slots, "max_context": maxContext, "max_queue": opts.MaxQueue,
			"embeddings_only": embeddingsOnly && !rerank, "rerank": rerank})
	var nd *ui.NDJSON
	if opts.JSON {
		nd = ui.NewNDJSON(opts.IO.Out)
		nd.Write(map[string]any{"type": "listening", "address": addr, "url": "http://" + addr, "model": name,
			"slots": slots, "max_context": maxContext, "max_queue": opts.MaxQueue, "embeddings_only": embeddingsOnly && !rerank, "rerank": rerank})
	}

	// Serve until the first SIGINT/SIGTERM cancels ctx (Main's signal
	// watcher; a second signal exits 130 at once), then drain.
	select {
	case err := <-served:
		return fmt.Errorf("serving on %s: %w", addr, err)
	case <-ctx.Done():
	}
	drained := drainServer(hs, api, sched, opts.DrainTimeout, rep)
	if nd != nil {
		nd.Write(map[string]any{"type": "stopped", "drained": drained})
	}
	return nil
}

// drainServer shuts the server down: new connections are refused, /health
// answers 503 on open ones, and the requests in flight run to their end,
// at most timeout; then those left are cut off. It reports whether every
// request finished.
func drainServer(hs *http.Server, api *serve.Server, sched *serve.Scheduler, timeout time.Duration, rep *ui.Reporter) bool {
	waiting, active := sched.Load()
	rep.Infof("draining %d request(s) in flight and %d waiting (up to %s; a second signal quits at once)", active, waiting, timeout)
	api.SetDraining()
	dctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	schedDone := make(chan error, 1)
	go func() { schedDone <- sched.Shutdown(dctx) }()
	httpErr := hs.Shutdown(dctx) // closes the listener first, then waits for the handlers
	schedErr := <-schedDone
	if httpErr == nil && schedErr == nil {
		rep.Infof("drained; stopped")
		return true
	}
	// The deadline passed: the scheduler has ended what was left
	// (FinishCancelled); give the handlers a moment to send that, then
	// close what remains.
	rep.Warnf("--drain-timeout %s passed: requests still in flight were cut off", timeout)
	grace, cancelGrace := context.WithTimeout(context.Background(), drainGrace)
	defer cancelGrace()
	if err := hs.Shutdown(grace); err != nil {
		hs.Close()
	}
	return false
}

// drainGrace is how long handlers get to send the end of a stream cut off
// by the drain deadline.
const drainGrace = 2 * time.Second

// debugWriter turns net/http's log lines (bad TLS handshakes, broken
// connections) into --verbose lines.
type debugWriter struct{ rep *ui.Reporter }

func (w debugWriter) Write(p []byte) (int, error) {
	w.rep.Debugf("%s", strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// servedPrompts are the model's sentence-transformers prompts that TEI's
// /embed may pick by prompt_name (serve.ServerOptions.EmbedPrompts): all
// of them, or none when a mean would have to leave a prompt's tokens out
// (its Pooling config's include_prompt false), which tputool does not.
func servedPrompts(m *loader.Checkpoint, pooling compile.Pooling) (map[string]string, error) {
	prompts, _, err := m.SentencePrompts()
	if err != nil || len(prompts) == 0 || pooling != compile.PoolMean {
		return prompts, err
	}
	in, err := m.PoolingIncludesPrompt()
	if err != nil || !in {
		return nil, err
	}
	return prompts, nil
}
