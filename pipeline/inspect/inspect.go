// Package inspect computes what `tputool inspect` reports about a
// checkpoint: architecture, parameters by dtype (from safetensors headers,
// local or read over HTTP Range), shards, the memory for weights plus KV
// cache or recurrent state at a batch size and context length, MoE total vs
// active parameters, the text-only path of multimodal checkpoints, the
// components of diffusers pipelines, and the smallest TPU slice of each
// generation that holds the model (tpu.FitAll).
//
// It only computes; cmd/inspect.go renders the Report.
package inspect

import (
	"context"
	"fmt"
	"math"
	"os"
	"path"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/dustin/go-humanize"
	"github.com/gomlx/gomlx/pkg/core/dtypes"

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/loader"
	"github.com/tputool/tputool/loader/safetensors"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/nn"
	"github.com/tputool/tputool/tpu"
)

// Defaults for Options left at zero.
const (
	DefaultBatch   = 1
	DefaultContext = 4096
	DefaultDType   = "bf16"
)

// Options sets the serving scenario the memory estimate is for.
type Options struct {
	// Batch is the number of sequences served at once (default 1).
	Batch int
	// Context is the tokens per sequence (prompt + output, default 4096).
	Context int
	// DType is the dtype weights and KV cache run in: bf16 (default), f16,
	// f32, fp8, or auto for the checkpoint's own dtypes (KV cache then bf16).
	DType string
	// Headroom is the fit's margin; nil means tpu.DefaultHeadroom.
	Headroom *float64
	// Fit computes the fit table; nil means tpu.FitAll.
	Fit func(tpu.FitRequest) ([]tpu.FitResult, error)
	// Parallel bounds concurrent remote header reads (default 8).
	Parallel int
	// Quantize is "", "int8" or "int4": the Matmul weights of an
	// architecture tputool runs count as generate --quantize holds them
	// (lm.Holding): int8 plus one f32 scale per group of input columns,
	// or int4 plus a scale code per 32 and a table per matrix.
	Quantize string
	// KVDType is the dtype the KV caches are held in, as generate's
	// --kv-cache-dtype (compile.Options.KVDType): InvalidDType (DType's),
	// Float32, BFloat16, or Int8 (a byte an entry plus an f32 scale per
	// slot and KV head; only for an architecture tputool runs, whose
	// caches it knows).
	KVDType dtypes.DType
}

// Report is the result of Run; its JSON form is `inspect --json`.
type Report struct {
	Model  string `json:"model"`
	Dir    string `json:"dir"`
	Commit string `json:"commit,omitempty"`
	Kind   string `json:"kind"`
	// Source says where the headers came from: "local" (a directory),
	// "cache" (downloaded weights) or "remote" (HTTP Range reads; no
	// weights downloaded).
	Source string `json:"source"`

	Architecture string `json:"architecture,omitempty"`
	ModelType    string `json:"model_type,omitempty"`
	// Quantization names config.json's quantization_config as the
	// loader reads it (lm.DescribeQuantization).
	Quantization string `json:"quantization,omitempty"`
	// ClassName is a diffusers pipeline's _class_name.
	ClassName string `json:"class_name,omitempty"`
	Text      *Text  `json:"text,omitempty"`

	Params     Params      `json:"parameters"`
	Files      []File      `json:"files"`
	Components []Component `json:"components,omitempty"`
	// Skipped groups tensors the text-only path does not load.
	Skipped []SkippedGroup `json:"skipped,omitempty"`
	// Supported is set when tputool runs the architecture (pipeline/lm's
	// registry): skipped tensors, the state and Mismatches then come from
	// tputool's own implementation, not from config.json alone.
	Supported bool `json:"supported"`
	// Mismatches lists what keeps tputool from loading the checkpoint with
	// its config: missing, misshapen, wrongly typed and unused tensors, or
	// a config the architecture refuses; empty when generate would load it.
	Mismatches []Mismatch `json:"mismatches,omitempty"`

	Memory Memory          `json:"memory"`
	Fit    []tpu.FitResult `json:"fit"`
	Notes  []string        `json:"notes,omitempty"`
}

// DTypeCount is parameters and bytes of one dtype.
type DTypeCount struct {
	DType  string `json:"dtype"`
	Params int64  `json:"params"`
	Bytes  int64  `json:"bytes"`
}

// Params sums the tensors of the checkpoint.
type Params struct {
	// Total counts every tensor in the files.
	Total   int64        `json:"total"`
	Tensors int          `json:"tensors"`
	ByDType []DTypeCount `json:"by_dtype"`
	// Bytes is the tensor data; FileBytes adds the headers.
	Bytes     int64 `json:"bytes"`
	FileBytes int64 `json:"file_bytes"`
	// Used counts the tensors tputool loads: Total less Skipped.
	Used int64 `json:"used"`
	// Active is, for MoE models, the parameters one token goes through:
	// everything but the experts, plus experts_per_token/experts of them.
	Active int64 `json:"active,omitempty"`
	// ActiveLessEmbedding is Active less an untied input embedding table,
	// of which a token reads one row (the count OpenAI's model cards give;
	// Qwen's give Active).
	ActiveLessEmbedding int64 `json:"active_less_embedding,omitempty"`
	// Experts counts the routed-expert parameters (MoE only).
	Experts int64 `json:"experts,omitempty"`
	// PerLayerEmbedding counts the per-layer embedding tables (Gemma 4's
	// E2B/E4B, embed_tokens_per_layer): a token reads one row of them, and
	// the model cards' "effective" size leaves them out.
	PerLayerEmbedding int64 `json:"per_layer_embedding,omitempty"`
}

// File is one safetensors file.
type File struct {
	Name    string `json:"name"`
	Size    int64  `json:"size"`
	Tensors int    `json:"tensors"`
	Params  int64  `json:"params"`
	// Remote is set when the header was read over HTTP.
	Remote bool `json:"remote,omitempty"`
}

// Component is one part of a diffusers pipeline.
type Component struct {
	Name    string       `json:"name"`
	Library string       `json:"library"`
	Class   string       `json:"class"`
	Params  int64        `json:"params"`
	Bytes   int64        `json:"bytes"`
	ByDType []DTypeCount `json:"by_dtype,omitempty"`
	Files   []string     `json:"files,omitempty"`
}

// SkippedGroup is a set of tensors outside the text-only path.
type SkippedGroup struct {
	Kind    string `json:"kind"` // vision, audio, mtp
	Tensors int    `json:"tensors"`
	Params  int64  `json:"params"`
}

// Memory is the estimate the fit table uses.
type Memory struct {
	DType   string `json:"dtype"`
	Batch   int    `json:"batch"`
	Context int    `json:"context"`
	// Weights is the used parameters in DType (integer tensors keep their
	// size); under Options.Quantize the Matmul weights in int8 and scales.
	Weights int64 `json:"weights_bytes"`
	// Quantize is Options.Quantize.
	Quantize string `json:"quantize,omitempty"`
	// KVCacheDType is Options.KVDType when set: f32, bf16 or int8.
	KVCacheDType string `json:"kv_cache_dtype,omitempty"`
	State
	// Total is Weights + KVCache + Recurrent, before headroom.
	Total int64 `json:"total_bytes"`
}

// Run inspects a resolved model. Weight files that are not on disk are read
// over HTTP Range (only their headers).
func Run(ctx context.Context, m *loader.Checkpoint, opts Options) (*Report, error) {
	if opts.Batch == 0 {
		opts.Batch = DefaultBatch
	}
	contextSet := opts.Context != 0
	if !contextSet {
		opts.Context = DefaultContext
	}
	if opts.DType == "" {
		opts.DType = DefaultDType
	}
	if opts.Batch < 0 {
		return nil, &errs.OptionError{Owner: "Options", Option: "Batch", Value: opts.Batch, Want: "a positive number of sequences"}
	}
	if opts.Context < 0 {
		return nil, &errs.OptionError{Owner: "Options", Option: "Context", Value: opts.Context, Want: "a positive number of positions"}
	}
	elem, dtypeName, err := ParseDType(opts.DType)
	if err != nil {
		return nil, err
	}
	r := &Report{Model: m.Name(), Dir: m.Dir, Commit: m.Commit, Kind: string(m.Kind)}
	switch {
	case m.Local():
		r.Source = "local"
	default:
		r.Source = "cache"
	}

	weights, err := m.AllWeights()
	if err != nil {
		return nil, err
	}
	headers, err := readHeaders(ctx, m, weights, opts.Parallel)
	if err != nil {
		return nil, err
	}
	var quant *quantParts // a language model's quantization_config
	if m.Kind != loader.Diffusers {
		quant = quantPartsOf(m.Config)
	}
	for _, w := range weights {
		for _, f := range w.Files {
			h := headers[f]
			r.Files = append(r.Files, File{Name: f, Size: h.size, Tensors: len(h.Tensors), Params: sumParams(h.Tensors, quant), Remote: h.remote})
			if h.remote {
				r.Source = "remote"
			}
		}
		if w.Index != "" {
			r.Notes = append(r.Notes, checkIndexTotal(w, headers)...)
		}
	}

	nt := 0
	for _, f := range r.Files {
		nt += f.Tensors
	}
	tensors := make([]safetensors.TensorInfo, 0, nt)
	for _, f := range r.Files {
		tensors = append(tensors, headers[f.Name].Tensors...)
		r.Params.FileBytes += f.Size
	}
	r.Params.Tensors = len(tensors)

	var kvElem int
	var kvWeights int64 // the k/v projections' share of the weights (tpu.FitRequest.KVWeightBytes)
	switch m.Kind {
	case loader.Diffusers:
		r.ClassName = m.Index.ClassName
		r.Components = components(m, weights, headers)
		r.Params.summarize(tensors, nil, nil)
		r.Memory.Weights = weightBytes(tensors, nil, elem, nil)
	default:
		cfg := m.Config
		r.Architecture, r.ModelType = cfg.Architecture(), cfg.ModelType
		r.Quantization = lm.DescribeQuantization(cfg)
		if cfg.Text != nil && cfg.Text.ModelType != "" {
			r.ModelType = cfg.ModelType + " (text: " + cfg.Text.ModelType + ")"
		}
		text, err := TextConfig(cfg)
		if err != nil {
			return nil, errs.Unsupportedf("%s: %v", m.Name(), err)
		}
		r.Text = text
		multimodal := cfg.Text != nil || cfg.Has("vision_config") || cfg.Has("audio_config")
		// The architecture, when tputool runs it, decides which tensors
		// are read, skipped or missing, and what state generation keeps.
		arch := checkArchitecture(r, tensors, cfg)
		if arch != nil {
			attentionKinds(text, arch.Spec())
		}
		if arch != nil && text.MoE == nil {
			// The dense MLP's width as the architecture derives it (LFM2's
			// from block_ff_dim, 2/3 of it rounded), where the config's
			// intermediate_size says otherwise.
			if n := arch.Spec().Intermediate; n > 0 && n != text.Intermediate {
				said := "config.json has no intermediate_size"
				tc := cfg
				if cfg.Text != nil {
					tc = cfg.Text
				}
				switch raw := strings.TrimSpace(string(tc.Raw["intermediate_size"])); {
				case text.Intermediate > 0:
					said = fmt.Sprintf("intermediate_size in config.json: %d", text.Intermediate)
				case strings.HasPrefix(raw, "["):
					said = "config.json gives intermediate_size one a layer; this is the first layer's"
				}
				r.Notes = append(r.Notes, fmt.Sprintf("the MLPs are %d wide as the architecture derives them (%s)", n, said))
				text.Intermediate = n
			}
		}
		// skip[i] says why tensors[i] is outside the text-only path ("" when
		// used); computed once, it is read by four passes over 19k names in
		// a 128-expert MoE.
		skip := make([]string, len(tensors))
		for i, t := range tensors {
			skip[i] = skipKind(t.Name, multimodal)
			if arch != nil {
				if reason, skipped := lm.SkipReason(arch, t.Name); !skipped {
					skip[i] = ""
				} else if skip[i] == "" {
					skip[i] = "other"
					switch {
					case strings.Contains(reason, "multi-token-prediction"): // DeepSeek-V3's layer past the model's, MiniMax's modules
						skip[i] = "mtp"
					case reason == lm.MaskBuffersReason: // GPT-2's, GPT-J's, GPT-Neo's attn.bias
						skip[i] = "buffer"
					}
				}
			}
		}
		r.Params.summarize(tensors, skip, quant)
		r.Skipped = skippedGroups(tensors, skip, quant)
		if len(r.Skipped) > 0 {
			var parts []string
			for _, g := range r.Skipped {
				parts = append(parts, fmt.Sprintf("%d %s tensors (%s params)", g.Tensors, g.Kind, HumanCount(g.Params)))
			}
			what := "text-only path: "
			if !multimodal { // a text model's tensors it does not read (GPT-2's mask buffers, an MTP head)
				what = ""
			}
			r.Notes = append(r.Notes, what+strings.Join(parts, ", ")+" are in the checkpoint but not loaded")
			if mt, ok := arch.(lm.MultiToken); ok && mt.MTPLayers() > 0 && slices.ContainsFunc(r.Skipped, func(g SkippedGroup) bool { return g.Kind == "mtp" }) {
				r.Notes = append(r.Notes, "the multi-token-prediction head is loaded by generate --mtp and chat --mtp, which draft speculative tokens with it")
			}
		}
		if text.MoE != nil {
			rename, _ := arch.(lm.Renamer) // GraniteMoe's stacks are read as the experts'
			var embed map[string]bool      // the input embedding's names (NemotronH's backbone.embeddings)
			if arch != nil {
				embed = map[string]bool{}
				for _, w := range arch.EmbedWeights() {
					embed[w.Name] = true
				}
			}
			r.Params.moe(tensors, skip, text.MoE, quant, rename, embed)
			if r.Params.Experts == 0 {
				r.Notes = append(r.Notes, "the config declares experts but no tensor name contains \".experts.\"; active parameters not computed")
			}
		}
		r.Memory.Weights = weightBytes(tensors, skip, elem, quant)
		if arch != nil && opts.Quantize == "" {
			kvWeights = kvWeightBytes(tensors, skip, elem, quant, arch)
		}
		if opts.Quantize != "" {
			if arch == nil {
				return nil, &errs.OptionError{Owner: "Options", Option: "Quantize", Value: opts.Quantize, Kind: errs.ErrUnsupported,
					Reason: fmt.Sprintf("tputool does not run %s, so which weights are matrices is unknown", r.Architecture)}
			}
			r.Memory.Weights = quantizedBytes(tensors, skip, elem, arch, opts.Quantize)
			r.Memory.Quantize = opts.Quantize
		}
		kvElem = elem
		if kvElem == 0 {
			kvElem = 2 // auto: the KV cache runs in bf16
		}
		stateElem := kvElem // recurrent state: the compute dtype
		switch kv := opts.KVDType; kv {
		case dtypes.InvalidDType:
		case dtypes.Float32, dtypes.BFloat16:
			kvElem = kv.Size()
			r.Memory.KVCacheDType = kvName(kv)
		case dtypes.Int8:
			if arch == nil {
				return nil, &errs.OptionError{Owner: "Options", Option: "KVDType", Value: "int8", Kind: errs.ErrUnsupported,
					Reason: fmt.Sprintf("tputool does not run %s, so which states are KV caches with scales is unknown", r.Architecture)}
			}
			r.Memory.KVCacheDType = kvName(kv)
		default:
			return nil, &errs.OptionError{Owner: "Options", Option: "KVDType", Value: kv.String(), Want: "Float32, BFloat16 or Int8"}
		}
		if arch != nil && arch.Spec().Encoder {
			// An encoder's inputs are at most its positions long.
			if !contextSet {
				opts.Context = min(opts.Context, arch.Spec().MaxPositions)
			}
			heads := int64(arch.Spec().Heads)
			// Its queries attend in pieces (nn.EncoderAttention).
			scores := heads * int64(min(opts.Context, nn.EncoderBlock)) * int64(opts.Context) * 4
			r.Notes = append(r.Notes, fmt.Sprintf("%s is an encoder: it gives embeddings (tputool embed) or, a cross-encoder, scores (tputool rerank), not text; it keeps no KV cache, and a step's attention scores take %s per input of %d tokens (f32, %d heads), at most 1 GiB for a batch beyond one input", r.Architecture, humanize.IBytes(uint64(scores)), opts.Context, heads))
		}
		if arch != nil && arch.Spec().Classifier {
			r.Notes = append(r.Notes, fmt.Sprintf("%s is a sequence classifier (a cross-encoder): it has no language-model head and gives scores (tputool rerank), not text; its inputs run through KV caches, dropped after each batch", r.Architecture))
		}
		if arch != nil {
			r.Memory.State = archStateBytes(arch, opts.Batch, opts.Context, stateElem, opts.KVDType)
			if n, layers := sharedStateLayers(arch); n > 0 {
				r.Notes = append(r.Notes, fmt.Sprintf("%d of %d layers read an earlier layer's KV cache (KV sharing): the KV figure counts the %d that keep one", n, layers, layers-n))
			}
		} else {
			r.Memory.State = text.StateBytes(opts.Batch, opts.Context, kvElem)
			r.Memory.State.whole = r.Memory.State.Recurrent
		}
		if text.MaxPositions > 0 && opts.Context > text.MaxPositions {
			r.Notes = append(r.Notes, fmt.Sprintf("a context of %d tokens exceeds max_position_embeddings %d", opts.Context, text.MaxPositions))
		}
	}
	r.Memory.DType, r.Memory.Batch, r.Memory.Context = dtypeName, opts.Batch, opts.Context
	r.Memory.Total = satAdd(r.Memory.Weights, r.Memory.State.Total())
	if r.Memory.Total == math.MaxInt64 {
		r.Notes = append(r.Notes, fmt.Sprintf("the memory for batch %d and context %d is more than 8 EiB (the sizes overflow 64 bits)", opts.Batch, opts.Context))
	}

	fit := opts.Fit
	if fit == nil {
		fit = tpu.FitAll
	}
	req := tpu.FitRequest{WeightBytes: r.Memory.Weights, StateBytes: r.Memory.State.Total(), Headroom: opts.Headroom,
		KVWeightBytes: kvWeights, WholeStateBytes: min(r.Memory.State.whole, r.Memory.State.Total())}
	if r.Text != nil {
		req.NumHeads, req.NumKVHeads = r.Text.Heads, r.Text.KVHeads
		if r.Text.Heads == 0 && r.Text.MambaLayers > 0 { // attention-free: no heads to split, so no --tp
			req.NumHeads, req.NumKVHeads = 1, 1
		}
	}
	if r.Fit, err = fit(req); err != nil {
		return nil, err
	}
	return r, nil
}

type header struct {
	*safetensors.Header
	size   int64
	remote bool
}

// readHeaders reads every weight file's header, remote ones in parallel.
func readHeaders(ctx context.Context, m *loader.Checkpoint, weights []loader.Weights, parallel int) (map[string]header, error) {
	if parallel <= 0 {
		parallel = 8
	}
	var files []string
	for _, w := range weights {
		files = append(files, w.Files...)
	}
	out := make(map[string]header, len(files))
	var (
		mu       sync.Mutex
		wg       sync.WaitGroup
		firstErr error
	)
	sem := make(chan struct{}, parallel)
	for _, f := range files {
		wg.Add(1)
		sem <- struct{}{}
		go func(f string) {
			defer wg.Done()
			defer func() { <-sem }()
			local := fileExists(m.Path(f))
			h, size, err := m.ReadHeader(ctx, f)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				if firstErr == nil {
					firstErr = err
				}
				return
			}
			out[f] = header{Header: h, size: size, remote: !local}
		}(f)
	}
	wg.Wait()
	return out, firstErr
}

func sumParams(ts []safetensors.TensorInfo, q *quantParts) int64 {
	var n int64
	for _, t := range ts {
		n += q.params(t)
	}
	return n
}

// summarize fills totals and the dtype breakdown; skip (nil: none) says
// which tensors are outside the used path, one entry per tensor, "" for
// used ones.
func (p *Params) summarize(ts []safetensors.TensorInfo, skip []string, q *quantParts) {
	p.ByDType = byDType(ts, q)
	for i, t := range ts {
		n := q.params(t)
		p.Total += n
		p.Bytes += t.NumBytes()
		if skip == nil || skip[i] == "" {
			p.Used += n
			if strings.Contains(t.Name, "embed_tokens_per_layer") {
				p.PerLayerEmbedding += n
			}
		}
	}
}

// moe splits the used parameters into routed experts and the rest, a
// tensor's name read as rename (nil: none) reads it; embed names the
// input embedding's tensors as the model reads them (nil: those ending
// in embed_tokens.weight).
func (p *Params) moe(ts []safetensors.TensorInfo, skip []string, moe *MoE, q *quantParts, rename lm.Renamer, embed map[string]bool) {
	var experts int64
	for i, t := range ts {
		name := t.Name
		if rename != nil {
			name = rename.RenameWeight(name)
		}
		if (skip == nil || skip[i] == "") && isExpert(name) {
			experts += q.params(t)
		}
	}
	if experts == 0 {
		return
	}
	p.Experts = experts
	p.Active = p.Used - experts + experts*int64(moe.ExpertsPerToken)/int64(moe.Experts)
	p.ActiveLessEmbedding = p.Active
	var embedded int64
	head := false
	for i, t := range ts {
		if skip != nil && skip[i] != "" {
			continue
		}
		name := t.Name
		if rename != nil {
			name = rename.RenameWeight(name)
		}
		switch {
		case embed[name] || (embed == nil && strings.HasSuffix(name, "embed_tokens.weight")):
			embedded += q.params(t)
		case strings.HasSuffix(t.Name, "lm_head.weight"):
			head = true
		}
	}
	if head {
		p.ActiveLessEmbedding -= embedded
	}
}

// mxfp4Part reports a tensor that holds part of an MXFP4 weight
// (lm.WeightSpec.MXFP4): "blocks" for NAME_blocks (U8, two 4-bit values a
// byte), "scales" for NAME_scales (U8, one exponent per 32 values), ""
// for any other tensor.
func mxfp4Part(t safetensors.TensorInfo) string {
	if t.DType != safetensors.U8 {
		return ""
	}
	switch {
	case strings.HasSuffix(t.Name, lm.MXFP4Blocks):
		return "blocks"
	case strings.HasSuffix(t.Name, lm.MXFP4Scales):
		return "scales"
	}
	return ""
}

// kvWeightBytes is the part of weightBytes in arch's key and value
// projections (lm.KVColumn), which every chip holds whole at a TP degree
// above the KV heads.
func kvWeightBytes(ts []safetensors.TensorInfo, skip []string, elem int, q *quantParts, arch lm.Model) int64 {
	kv := map[string]bool{}
	for _, w := range lm.Weights(arch) {
		if w.TP == lm.KVColumn {
			kv[w.Name] = true
		}
	}
	var n int64
	for i, t := range ts {
		if (skip == nil || skip[i] == "") && kv[t.Name] {
			n += weightBytes(ts[i:i+1], nil, elem, q)
		}
	}
	return n
}

// paramsOf is the number of parameters a tensor holds: its elements, two
// per byte of MXFP4 blocks, none in MXFP4 scales (they scale the blocks'
// values).
func paramsOf(t safetensors.TensorInfo) int64 {
	switch mxfp4Part(t) {
	case "blocks":
		return 2 * t.NumElements()
	case "scales":
		return 0
	}
	return t.NumElements()
}

// isExpert reports whether a tensor belongs to a routed expert:
// "mlp.experts.3.up_proj.weight", fused "mlp.experts.gate_up_proj",
// Mixtral's "block_sparse_moe.experts.0.w1.weight". Shared experts
// ("shared_expert.", "shared_experts.") and routers are not, nor is the
// one bias megablocks' layers add after the experts' sum
// (nomic-embed-text-v2-moe's "mlp.experts.bias"), which every token reads.
func isExpert(name string) bool {
	return strings.Contains(name, ".experts.") && !strings.HasSuffix(name, ".experts.bias")
}

func byDType(ts []safetensors.TensorInfo, q *quantParts) []DTypeCount {
	m := map[string]*DTypeCount{}
	for _, t := range ts {
		d := q.dtype(t)
		if mxfp4Part(t) != "" {
			d = "MXFP4"
		}
		if m[d] == nil {
			m[d] = &DTypeCount{DType: d}
		}
		m[d].Params += q.params(t)
		m[d].Bytes += t.NumBytes()
	}
	out := make([]DTypeCount, 0, len(m))
	for _, c := range m {
		out = append(out, *c)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Params != out[j].Params {
			return out[i].Params > out[j].Params
		}
		return out[i].DType < out[j].DType
	})
	return out
}

// quantizedBytes is the memory of the tensors the architecture reads,
// its Matmul weights held as quantize says (lm.Holding.HeldBytes) and the
// others as weightBytes counts them.
func quantizedBytes(ts []safetensors.TensorInfo, skip []string, elem int, arch lm.Model, quantize string) int64 {
	specs := map[string]lm.WeightSpec{}
	for _, w := range lm.Weights(arch) {
		specs[w.Name] = w
		for _, p := range w.Parts { // held in the assembled stack, quantised as it is
			specs[p.Name] = p
		}
		if w.MXFP4 { // the blocks stand for the decoded weight (and the scales for nothing)
			specs[w.Name+lm.MXFP4Blocks] = w
		}
	}
	h := lm.Holding{Quantize: quantize}
	rename, _ := arch.(lm.Renamer) // a stored layout the model reads renamed
	var n int64
	for i, t := range ts {
		if skip != nil && skip[i] != "" {
			continue
		}
		name := t.Name
		if rename != nil {
			name = rename.RenameWeight(name)
		}
		w, ok := specs[name]
		switch {
		case !ok: // not read (a tied checkpoint's lm_head.weight), or MXFP4 scales
		case h.Quantized(w) || h.Int4(w):
			n += h.HeldBytes(w, dtypes.Float32)
		default:
			n += weightBytes(ts[i:i+1], nil, elem, nil)
		}
	}
	return n
}

// weightBytes is the memory of the used tensors with floating-point ones
// converted to elem bytes (elem 0: as stored); packed integer weights (q)
// then decode to elem bytes a value, and the tensors that serve them take
// nothing.
func weightBytes(ts []safetensors.TensorInfo, skip []string, elem int, q *quantParts) int64 {
	var n int64
	for i, t := range ts {
		if skip != nil && skip[i] != "" {
			continue
		}
		if elem > 0 && q.aux(t) {
			continue
		}
		if elem > 0 && (mxfp4Part(t) != "" || q.packed(t)) {
			n += q.params(t) * int64(elem) // decoded to the compute dtype at load
		} else if elem > 0 && t.DType.IsFloat() {
			n += t.NumElements() * int64(elem)
		} else {
			n += t.NumBytes()
		}
	}
	return n
}

// Tensor name prefixes of the parts a text-only path skips.
var skipPrefixes = []struct{ prefix, kind string }{
	{"visual.", "vision"}, {"vision_tower.", "vision"}, {"vision_model.", "vision"},
	{"vision_encoder.", "vision"}, {"multi_modal_projector.", "vision"}, {"mm_projector.", "vision"},
	{"embed_vision.", "vision"}, {"image_newline", "vision"}, {"vision_embed_tokens.", "vision"},
	{"audio_tower.", "audio"}, {"audio_model.", "audio"}, {"embed_audio.", "audio"}, {"audio_encoder.", "audio"},
	{"mtp.", "mtp"},
}

// skipKind says why a tensor is outside the text-only path ("" when it is
// used). Vision and audio towers are recognised at the top level or under
// "model."; multi-token-prediction ("mtp.") layers are skipped always, as
// transformers does.
func skipKind(name string, multimodal bool) string {
	n := strings.TrimPrefix(name, "model.")
	for _, s := range skipPrefixes {
		if strings.HasPrefix(n, s.prefix) && (multimodal || s.kind == "mtp") {
			return s.kind
		}
	}
	return ""
}

func skippedGroups(ts []safetensors.TensorInfo, skip []string, q *quantParts) []SkippedGroup {
	m := map[string]*SkippedGroup{}
	var kinds []string
	for i, t := range ts {
		k := skip[i]
		if k == "" {
			continue
		}
		if m[k] == nil {
			m[k] = &SkippedGroup{Kind: k}
			kinds = append(kinds, k)
		}
		m[k].Tensors++
		m[k].Params += q.params(t)
	}
	sort.Strings(kinds)
	var out []SkippedGroup
	for _, k := range kinds {
		out = append(out, *m[k])
	}
	return out
}

func components(m *loader.Checkpoint, weights []loader.Weights, headers map[string]header) []Component {
	byName := map[string]loader.Weights{}
	for _, w := range weights {
		byName[w.Component] = w
	}
	var out []Component
	for _, c := range m.Index.Components {
		comp := Component{Name: c.Name, Library: c.Library, Class: c.Class}
		if w, ok := byName[c.Name]; ok {
			var ts []safetensors.TensorInfo
			for _, f := range w.Files {
				ts = append(ts, headers[f].Tensors...)
				comp.Files = append(comp.Files, path.Base(f))
			}
			comp.Params = sumParams(ts, nil)
			for _, t := range ts {
				comp.Bytes += t.NumBytes()
			}
			comp.ByDType = byDType(ts, nil)
		}
		out = append(out, comp)
	}
	return out
}

// checkIndexTotal compares the index's metadata.total_size with the tensor
// bytes in the shards.
func checkIndexTotal(w loader.Weights, headers map[string]header) []string {
	if w.TotalSize < 0 {
		return nil
	}
	var got int64
	for _, f := range w.Files {
		for _, t := range headers[f].Tensors {
			got += t.NumBytes()
		}
	}
	if w.TotalSize != got {
		return []string{fmt.Sprintf("%s: metadata.total_size is %d but the shards hold %d tensor bytes", w.Index, w.TotalSize, got)}
	}
	return nil
}

// HumanCount formats a parameter count: 1.5B, 350M, 12.3K.
func HumanCount(n int64) string {
	switch {
	case n >= 1e12:
		return fmt.Sprintf("%.2fT", float64(n)/1e12)
	case n >= 1e9:
		return fmt.Sprintf("%.2fB", float64(n)/1e9)
	case n >= 1e6:
		return fmt.Sprintf("%.1fM", float64(n)/1e6)
	case n >= 1e3:
		return fmt.Sprintf("%.1fK", float64(n)/1e3)
	}
	return fmt.Sprint(n)
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular()
}

// kvName is a KV cache dtype as the flags spell it.
func kvName(kv dtypes.DType) string {
	switch kv {
	case dtypes.Float32:
		return "f32"
	case dtypes.BFloat16:
		return "bf16"
	}
	return "int8"
}
