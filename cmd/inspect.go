package cmd

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/spf13/cobra"

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/internal/humanize"
	"github.com/tputool/tputool/internal/ui"
	"github.com/tputool/tputool/loader"
	"github.com/tputool/tputool/loader/hub"
	"github.com/tputool/tputool/pipeline/inspect"
	"github.com/tputool/tputool/tpu"
)

// InspectOptions holds `tputool inspect`'s inputs.
type InspectOptions struct {
	IO *ui.IOStreams
	// HubClient builds the Hub client (lazily: only Hub ids need it).
	HubClient func() *hub.Client
	// Resolve resolves --model; loader.ResolveRef by default.
	Resolve resolveFunc

	Model    string
	Revision string
	Batch    int
	Context  int
	// contextSet says --context was given; without it an encoder's
	// figures are for its positions (inspect.Run).
	contextSet bool
	DType      string
	Headroom   float64
	Retries    int
	JSON       bool
	// Quantize is --quantize: "", "int8" or "int4".
	Quantize string
	// KVCacheDType is --kv-cache-dtype as given; KV its dtype
	// (InvalidDType: auto, the --dtype).
	KVCacheDType string
	KV           dtypes.DType
}

// NewCmdInspect builds `tputool inspect`.
func NewCmdInspect(f *Factory, runF func(context.Context, *InspectOptions) error) *cobra.Command {
	opts := &InspectOptions{IO: f.IOStreams, Resolve: loader.ResolveRef}
	c := &cobra.Command{
		Use:   "inspect --model MODEL",
		Short: "Show what a checkpoint holds and which TPU slice it fits",
		Long: `Show a checkpoint's architecture, parameters by dtype, shards, the memory it
needs for weights plus KV cache (and the fixed recurrent state of linear-attention
layers in hybrid models) at a batch size and context length, and for each TPU
generation the smallest slice that holds it with the suggested tensor-parallel
degree.

For a Hub model only the config files are downloaded: the safetensors headers are
read with HTTP Range requests, so no weights are fetched. A cached or local model
needs no network at all. MoE models report total and active parameters;
multimodal checkpoints report the tensors the text-only path skips; diffusers
pipelines get a per-component breakdown.

For an architecture tputool runs, the checkpoint is checked against it as
generate would load it: every tensor the config implies that is missing,
misshapen, of an unsupported dtype or unused is listed, and inspect exits 3
after the report, naming the first one.`,
		Example: `  tputool inspect --model Qwen/Qwen3-0.6B
  tputool inspect --model Qwen/Qwen3.5-9B --context 32768 --batch 8
  tputool inspect --model ./my-checkpoint --dtype f32 --json
  tputool inspect --model stabilityai/sd-turbo`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, args []string) error {
			if opts.Model == "" {
				return errs.Usagef("--model is required (a Hub id ORG/NAME[@revision] or a local directory)")
			}
			if opts.Batch <= 0 {
				return errs.Usagef("--batch %d: must be at least 1", opts.Batch)
			}
			if opts.Context <= 0 {
				return errs.Usagef("--context %d: must be at least 1", opts.Context)
			}
			if err := checkRetries(opts.Retries); err != nil {
				return err
			}
			if !(opts.Headroom >= 0 && opts.Headroom <= tpu.MaxHeadroom) { // NaN too
				return errs.Usagef("--headroom %v: want a fraction from 0 to %d", opts.Headroom, tpu.MaxHeadroom)
			}
			if _, _, err := inspect.ParseDType(opts.DType); err != nil {
				return err
			}
			var err error
			if opts.Quantize, err = parseQuantize(opts.Quantize); err != nil {
				return err
			}
			if opts.KV, err = parseKVDType(opts.KVCacheDType); err != nil {
				return err
			}
			opts.JSON = f.Global.JSON
			opts.contextSet = c.Flags().Changed("context")
			opts.HubClient = f.retryingHubClient(opts.Retries)
			if runF != nil {
				return runF(c.Context(), opts)
			}
			return inspectRun(c.Context(), opts)
		},
	}
	fl := c.Flags()
	fl.StringVarP(&opts.Model, "model", "m", "", "Hub id (ORG/NAME[@revision]) or local directory")
	fl.StringVar(&opts.Revision, "revision", "", "branch, tag or commit of a Hub model (default main)")
	fl.IntVarP(&opts.Batch, "batch", "b", inspect.DefaultBatch, "sequences served at once")
	fl.IntVarP(&opts.Context, "context", "c", inspect.DefaultContext, "tokens per sequence (prompt + output)")
	fl.StringVar(&opts.DType, "dtype", inspect.DefaultDType, "dtype of weights and KV cache: bf16, f16, f32, fp8, or auto (as stored)")
	fl.StringVar(&opts.Quantize, "quantize", "", "count the matrix weights as generate --quantize holds them: int8 (1 byte per weight plus an f32 scale per 64 input columns), int4 (half a byte per weight plus a byte of scale code per 32 and a 1 KiB table per matrix), or none")
	fl.StringVar(&opts.KVCacheDType, "kv-cache-dtype", "auto", "dtype the KV caches are counted in, as generate holds them: auto (--dtype's), f32, bf16, or int8 (a byte an entry plus an f32 scale per position and KV head; architectures tputool runs)")
	fl.Float64Var(&opts.Headroom, "headroom", tpu.DefaultHeadroom, "extra fraction of memory kept free for activations and runtime buffers, 0 to 10 (0: none)")
	addRetriesFlag(c, &opts.Retries)
	return c
}

func inspectRun(ctx context.Context, opts *InspectOptions) error {
	m, err := resolveCheckpoint(ctx, opts.Resolve, opts.HubClient, opts.Model, loader.Options{Revision: opts.Revision, MetadataOnly: true})
	if err != nil {
		return err
	}
	context := opts.Context
	if !opts.contextSet {
		context = 0 // inspect's default: DefaultContext, or an encoder's positions
	}
	r, err := inspect.Run(ctx, m, inspect.Options{Batch: opts.Batch, Context: context, DType: opts.DType, Headroom: &opts.Headroom, Quantize: opts.Quantize, KVDType: opts.KV})
	if err != nil {
		return err
	}
	if opts.JSON {
		err = opts.IO.WriteJSON(r)
	} else {
		err = renderInspect(opts.IO, r, opts.Headroom)
	}
	if err != nil {
		return err
	}
	return mismatchError(r)
}

// mismatchError is the exit status of a report whose checkpoint does not
// load with its config: the report is printed, then inspect exits 3 naming
// the first mismatch, as generate would refuse the checkpoint.
func mismatchError(r *inspect.Report) error {
	if len(r.Mismatches) == 0 {
		return nil
	}
	more := ""
	if n := len(r.Mismatches) - 1; n > 0 {
		more = fmt.Sprintf(" (and %d more mismatches)", n)
	}
	return errs.Unsupportedf("%s does not load with its config.json: %s%s", r.Model, r.Mismatches[0].Message, more)
}

func renderInspect(s *ui.IOStreams, r *inspect.Report, headroom float64) error {
	w := s.Out
	kv := func(k, format string, args ...any) { fmt.Fprintf(w, "%-14s %s\n", k+":", fmt.Sprintf(format, args...)) }
	src := map[string]string{"local": "local directory", "cache": "from the cache",
		"remote": "headers read over HTTP; no weights downloaded"}[r.Source]
	name := r.Model
	if r.Commit != "" {
		name += " @ " + r.Commit[:min(12, len(r.Commit))]
	}
	kv("Model", "%s (%s)", name, src)
	if r.ClassName != "" {
		kv("Pipeline", "%s (diffusers)", r.ClassName)
	} else {
		if r.ModelType != "" {
			kv("Architecture", "%s (%s)", orUnknown(r.Architecture), r.ModelType)
		} else {
			kv("Architecture", "%s", orUnknown(r.Architecture)) // a config without model_type
		}
	}
	if r.Quantization != "" {
		kv("Quantization", "%s", r.Quantization)
	}
	if t := r.Text; t != nil {
		kv("Layers", "%d%s", t.Layers, layerKinds(t))
		if t.Heads == 0 {
			kv("Attention", "none")
		} else if la := t.MLA; la != nil {
			kv("Attention", "%d heads, latent (MLA): kv_lora_rank %d + rope %d cached a token, q/k head_dim %d, v %d", t.Heads, la.KVLoraRank, la.QKRope, t.HeadDim, la.VHead)
			if la.IndexHeadDim > 0 {
				kv("Indexer", "DeepSeek sparse attention: %d-wide keys cached a token beside the latent", la.IndexHeadDim)
			}
		} else {
			kv("Attention", "%d heads, %d KV heads, head_dim %d", t.Heads, t.KVHeads, t.HeadDim)
		}
		line := fmt.Sprintf("hidden %d", t.Hidden)
		if t.Intermediate > 0 {
			line += fmt.Sprintf(", intermediate %d", t.Intermediate)
		}
		line += fmt.Sprintf(", vocab %d", t.Vocab)
		if t.MaxPositions > 0 {
			line += fmt.Sprintf(", max positions %d", t.MaxPositions)
		}
		kv("Dimensions", "%s", line)
		if la := t.Linear; la != nil {
			conv := fmt.Sprintf("conv kernel %d", la.ConvKernel)
			if la.ConvKernel <= 1 {
				conv = "no conv" // MiniMax's lightning attention
			}
			kv("Linear attn", "%d key heads x %d, %d value heads x %d, %s", la.KeyHeads, la.KeyHeadDim, la.ValueHeads, la.ValueHeadDim, conv)
		}
		if moe := t.MoE; moe != nil {
			line := fmt.Sprintf("%d experts, %d per token", moe.Experts, moe.ExpertsPerToken)
			if moe.ExpertIntermediate > 0 {
				line += fmt.Sprintf(", expert intermediate %d", moe.ExpertIntermediate)
			}
			kv("MoE", "%s", line)
		}
	}
	p := r.Params
	line := fmt.Sprintf("%s total", inspect.HumanCount(p.Total))
	if p.Used != p.Total {
		line += fmt.Sprintf(", %s used", inspect.HumanCount(p.Used))
		if slices.ContainsFunc(r.Skipped, func(g inspect.SkippedGroup) bool { return g.Kind == "vision" || g.Kind == "audio" }) {
			line += " by the text-only path" // a multimodal checkpoint's towers skipped
		}
	}
	if p.Active > 0 {
		line += fmt.Sprintf(", %s active per token", inspect.HumanCount(p.Active))
		if p.ActiveLessEmbedding != p.Active {
			line += fmt.Sprintf(" (%s without the input embedding)", inspect.HumanCount(p.ActiveLessEmbedding))
		}
	}
	if p.PerLayerEmbedding > 0 {
		line += fmt.Sprintf(", %s without the per-layer embeddings", inspect.HumanCount(p.Used-p.PerLayerEmbedding))
	}
	kv("Parameters", "%s (%d tensors)", line, p.Tensors)
	for _, d := range p.ByDType {
		fmt.Fprintf(w, "  %-12s %s params, %s\n", d.DType, inspect.HumanCount(d.Params), humanize.Bytes(d.Bytes))
	}
	kv("Files", "%d safetensors file(s), %s", len(r.Files), humanize.Bytes(p.FileBytes))
	if len(r.Components) > 0 {
		fmt.Fprintln(w)
		tbl := s.NewTable("COMPONENT", "CLASS", "PARAMS", "SIZE", "DTYPE")
		for _, c := range r.Components {
			params, size, dt := "-", "-", "-"
			if c.Params > 0 {
				params, size = inspect.HumanCount(c.Params), humanize.Bytes(c.Bytes)
				var ds []string
				for _, d := range c.ByDType {
					ds = append(ds, d.DType)
				}
				dt = strings.Join(ds, ",")
			}
			tbl.Append(c.Name, c.Class, params, size, dt)
		}
		if err := tbl.Render(); err != nil {
			return err
		}
	} else if len(r.Files) > 1 {
		for _, f := range r.Files {
			fmt.Fprintf(w, "  %s  %s, %d tensors\n", f.Name, humanize.Bytes(f.Size), f.Tensors)
		}
	}
	m := r.Memory
	at := m.DType
	if m.Quantize != "" {
		at += ", " + m.Quantize + " matrix weights"
	}
	if m.KVCacheDType != "" {
		at += ", " + m.KVCacheDType + " KV cache"
	}
	fmt.Fprintf(w, "\nMemory at %s, batch %d, context %d:\n", at, m.Batch, m.Context)
	row := func(k string, n int64) { fmt.Fprintf(w, "  %-16s %s\n", k, humanize.Bytes(n)) }
	row("weights", m.Weights)
	if r.Text != nil {
		row("KV cache", m.KVCache)
	}
	if m.Recurrent > 0 {
		row("recurrent state", m.Recurrent)
	}
	row("total", m.Total)
	if len(r.Fit) > 0 {
		fmt.Fprintf(w, "\nSmallest TPU slice per generation (with %.0f%% headroom):\n", headroom*100)
		tbl := s.NewTable("TPU", "CHIPS", "HOSTS", "TP", "PER CHIP", "HBM/CHIP", "FITS")
		for _, f := range r.Fit {
			fits := "yes"
			if !f.Fits {
				fits = "no: " + f.Reason
			}
			tbl.Append(f.Generation, fmt.Sprint(f.Chips), fmt.Sprint(f.Hosts), fmt.Sprint(f.TP),
				humanize.Bytes(f.PerChipBytes), humanize.Bytes(f.HBMBytes), fits)
		}
		if err := tbl.Render(); err != nil {
			return err
		}
		fmt.Fprintln(w, "TP is the --tp to run with on that slice; one tputool process drives one host's chips (HOSTS > 1 is not supported yet).")
	}
	if len(r.Mismatches) > 0 {
		fmt.Fprintf(w, "\nThe checkpoint does not load with its config (%d mismatches):\n", len(r.Mismatches))
		for i, m := range r.Mismatches {
			if i == maxMismatchesShown {
				fmt.Fprintf(w, "  ... and %d more (--json lists all)\n", len(r.Mismatches)-i)
				break
			}
			fmt.Fprintf(w, "  %s\n", m.Message)
		}
	}
	writeNotes(w, r.Notes)
	return nil
}

// maxMismatchesShown bounds the mismatch lines of the text report.
const maxMismatchesShown = 20

func layerKinds(t *inspect.Text) string {
	var parts []string
	if t.LinearAttentionLayers > 0 {
		parts = append(parts, fmt.Sprintf("%d linear attention", t.LinearAttentionLayers))
	}
	if t.MambaLayers > 0 {
		name := "Mamba-2"
		if t.Mamba == nil { // Mamba, FalconMamba, Jamba: Mamba-1
			name = "Mamba"
		}
		parts = append(parts, fmt.Sprintf("%d %s", t.MambaLayers, name))
	}
	if t.FeedForwardLayers > 0 {
		parts = append(parts, fmt.Sprintf("%d MLP or experts only", t.FeedForwardLayers))
	}
	if t.ConvLayers > 0 {
		parts = append(parts, fmt.Sprintf("%d short convolution", t.ConvLayers))
	}
	if t.SlidingAttentionLayers > 0 {
		parts = append(parts, fmt.Sprintf("%d sliding window (%d tokens)", t.SlidingAttentionLayers, t.SlidingWindow))
	}
	if len(parts) == 0 {
		return ""
	}
	parts = append(parts, fmt.Sprintf("%d full attention", t.FullAttentionLayers))
	return " (" + strings.Join(parts, ", ") + ")"
}

func writeNotes(w io.Writer, notes []string) {
	if len(notes) == 0 {
		return
	}
	fmt.Fprintln(w)
	for _, n := range notes {
		fmt.Fprintf(w, "Note: %s\n", n)
	}
}
