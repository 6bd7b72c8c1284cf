// Package lm is the contract between text-generation architectures and the
// code that executes them.
//
// An architecture package (pipeline/llama, pipeline/qwen3, ...) implements
// Model: it resolves its config.json into a Spec, lists the safetensors
// tensors it needs by their Hugging Face names, and BUILDS graph pieces
// (embedding, one decoder layer, head) from named weight nodes. It never runs
// anything: compile/ decides whether the pieces become one executable per
// step (compiled mode) or one executable per layer kind (eager mode), and
// which backend runs them.
//
// Layer state is general: each layer declares an ordered list of named state
// tensors (LayerState). Attention layers declare a key and a value cache; a
// recurrent layer (Gated DeltaNet, Mamba) can declare a fixed-size state
// instead. The executor allocates the state at prefill, feeds it to Layer and
// keeps what Layer returns for the next step.
//
// This package also holds the architecture registry (Register / New, keyed
// by config.json architectures[0]) and the strict weight loader (Load).
package lm

import (
	"fmt"
	"slices"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
)

// Layer kinds used by the architectures in this repository. They follow the
// names of transformers' config.layer_types.
const (
	KindFull    = "full_attention"
	KindSliding = "sliding_attention"
	KindChunked = "chunked_attention"
)

// Spec is the resolved description of a model, with every default applied.
type Spec struct {
	// Architecture is config.json architectures[0].
	Architecture string
	ModelType    string
	VocabSize    int
	Hidden       int
	// Carried is the width of the hidden states handed from layer to
	// layer when it is more than Hidden (Gemma 4's E models and Gemma 3n
	// carry their per-layer inputs, Gemma 3n its four streams); 0 is
	// Hidden. Executors take the width from the graph; this is for
	// memory estimates.
	Carried      int
	Layers       int
	Heads        int
	KVHeads      int
	HeadDim      int
	Intermediate int
	// MaxPositions is max_position_embeddings: positions at or above it are
	// outside what the model was trained (or scaled) for.
	MaxPositions int
	// EOS are the end-of-sequence ids from config.json (generation_config.json
	// may override them; see pipeline/generate).
	EOS []int
	// BOS is the beginning-of-sequence id, -1 when the config has none.
	BOS int
	// LayerKinds holds LayerKind(i) for every layer.
	LayerKinds []string
	// SlidingWindow is the window of sliding_attention layers (0: none).
	SlidingWindow int
	// RopeSwitch is the length past which LongRoPE turns a sequence at its
	// long frequencies (original_max_position_embeddings; 0: no switch).
	// The switch is taken per row and per step, from the row's last
	// position, as transformers' forward takes it; so that a prompt
	// prefilled in pieces turns every key as one forward over it does,
	// compile runs the first piece of a prompt longer than RopeSwitch
	// through position RopeSwitch.
	RopeSwitch int
	// TieEmbeddings reports tie_word_embeddings: the head reuses
	// model.embed_tokens.weight and the checkpoint need not hold lm_head.weight.
	TieEmbeddings bool
	// FP8Block is the [rows, columns] of one scale of a block-wise FP8
	// checkpoint (quantization_config quant_method "fp8",
	// weight_block_size); FP8PerTensor (weight_block_size null: one
	// scale a matrix); zero when the checkpoint is not FP8. New sets it.
	FP8Block [2]int
	// Packed is a GPTQ or AWQ checkpoint's quantization (packed.go); nil
	// otherwise. New sets it.
	Packed *PackedQuant
	// Compressed is a compressed-tensors checkpoint's scheme
	// (compressed.go); nil otherwise. New sets it.
	Compressed *CompressedQuant
	// BitNet is a BitNet b1.58 checkpoint's quantization (bitnet.go):
	// ternary weights, decoded at load, and every quantized Linear's
	// input rounded to int8 per token in the graph; nil otherwise. New
	// sets it.
	BitNet *BitNetQuant
	// Encoder marks a bidirectional encoder without a language-model head
	// (BERT, XLM-RoBERTa: pipeline/bert): every token of an input attends
	// to every other, so an input runs in one step, and the model gives
	// hidden states (embeddings), not logits. Head is never called. An
	// encoder's input ids may carry a token type: id + type·VocabSize
	// (the second text of a pair, for a cross-encoder: Scorer).
	Encoder bool
	// Classifier marks a causal model whose head is a sequence
	// classifier instead of a language-model head (a decoder family's
	// *ForSequenceClassification: Qwen3ForSequenceClassification and
	// the others Classifier wraps): it runs as the causal model it is
	// built on (KV caches, prompts in pieces), but its head gives an
	// input's scores (Scorer, pooled on its last token), not logits
	// over a vocabulary, so it generates nothing and Head is never
	// called. An encoder's classification head is marked by Encoder
	// alone. Generates reports either.
	Classifier bool
	// TokenTypes is an encoder's type_vocab_size: its input ids run to
	// VocabSize·TokenTypes (0 or 1: one type).
	TokenTypes int
	// UnreadScales are the name suffixes of the activation and KV-cache
	// scales the quantization_config declares (fp8's static
	// activation_scheme, compressed-tensors' kv_cache_scheme): activations
	// and the KV cache stay float, so Expect lets the checkpoint hold them
	// unread. New sets it.
	UnreadScales []string
}

// Generates reports whether the model generates text: it has a
// language-model head (it is neither an Encoder nor a causal
// Classifier). Runners refuse to generate with any other model.
func (s *Spec) Generates() bool { return !s.Encoder && !s.Classifier }

// WeightSpec names one checkpoint tensor a model needs.
type WeightSpec struct {
	// Name is the Hugging Face tensor name, e.g. model.layers.3.self_attn.q_proj.weight.
	Name string
	// Shape is the shape the checkpoint must hold.
	Shape []int
	// Matmul marks a [out, in] matrix that the model only consumes through
	// nn.Linear or nn.Embedding. Executors may hand such a weight to the
	// graph in the blocked layout [J, P, rows, C] (rows split in parts,
	// columns in blocks; no transpose), which those functions accept; see
	// nn.Blocked.
	Matmul bool
	// TP is the weight's tensor-parallel plan: which axis, if any, is split
	// over the devices of the "model" mesh axis when the model runs with
	// --tp N. The zero value keeps the weight whole on every device.
	TP TPSplit
	// Parts, when set, are the checkpoint tensors the weight is assembled
	// from when the checkpoint does not hold Name itself: their data,
	// concatenated flat in order, is the weight (routed experts' per-expert
	// matrices stacked into one [E, out, in] tensor, which transformers v5
	// checkpoints store under Name; StableLM 2 12B's per-head q/k
	// LayerNorm weights stacked into [heads, head_dim]). A checkpoint holds either Name or
	// every part; Expect checks whichever it holds.
	Parts []WeightSpec
	// Transposed: the checkpoint holds Name with its last two axes
	// swapped, [..., in, out] (transformers' GPT-OSS experts,
	// gate_up_proj [E, H, 2I]); the loader transposes it into Shape.
	Transposed bool
	// Absorbed marks an [out, in] matrix that quantized checkpoints store
	// as they store the projections (FP8 with block scales, GPTQ or AWQ
	// packed, compressed-tensors) but that the model reads whole, a plain
	// tensor in the compute dtype, not through nn.Linear (DeepSeek's
	// kv_b_proj, absorbed into the attention): the loader decodes it, and
	// no executor holds it blocked, quantized or as stored. Matmul is
	// false for it.
	Absorbed bool
	// Router marks a mixture of experts' router matrix: --quantize leaves
	// it in its float width, as llama.cpp keeps ffn_gate_inp in F32 and
	// vLLM the gate unquantized (an error in its logits sends tokens to
	// other experts; it is a few hundredths of a percent of the weights).
	Router bool
	// F32 keeps the weight in float32 whatever the compute dtype, held
	// and read so (transformers' _keep_in_fp32_modules: DeepSeek-V3's
	// router correction bias, whose sums with scores a bf16 rounding could
	// reorder). Not for Matmul weights.
	F32 bool
	// RowNormalized: the model reads the [out, in] matrix with each row
	// scaled to unit length (L2, as torch's F.normalize: x / max(‖x‖,
	// 1e-12)), which the loader does as it decodes the stored float
	// tensor (Baichuan 2's NormHead, whose lm_head is normalized on its
	// first forward). A checkpoint storing such a weight quantized is
	// refused at load.
	RowNormalized bool
	// MXFP4: the checkpoint may hold the weight in OCP microscaling FP4
	// instead of under Name (GPT-OSS's experts): Name+MXFP4Blocks, U8
	// [..., out, in/32, 16], and Name+MXFP4Scales, U8 [..., out, in/32]
	// (loader/quant); the loader decodes it. Shape is the decoded
	// [..., out, in].
	MXFP4 bool
}

// The suffixes of an MXFP4 weight's two checkpoint tensors.
const (
	MXFP4Blocks = "_blocks"
	MXFP4Scales = "_scales"
)

// stored reports a matrix quantized checkpoints may store encoded: a
// Matmul weight or an Absorbed one.
func (w WeightSpec) stored() bool { return w.Matmul || w.Absorbed }

// Sources are the checkpoint tensors that hold w in a checkpoint with
// tensor names has, with the shapes stored there: w itself (its axes
// swapped when Transposed), its MXFP4 blocks and scales when w is MXFP4
// and the checkpoint holds them and not w, or its parts when the
// checkpoint does not hold w and w has parts.
func (w WeightSpec) Sources(has func(name string) bool) []WeightSpec {
	if w.mxfp4(has) {
		r := len(w.Shape)
		lead, in := w.Shape[:r-1], w.Shape[r-1]
		return []WeightSpec{
			{Name: w.Name + MXFP4Blocks, Shape: append(slices.Clone(lead), in/32, 16)},
			{Name: w.Name + MXFP4Scales, Shape: append(slices.Clone(lead), in/32)},
		}
	}
	if len(w.Parts) == 0 || has(w.Name) {
		if w.Transposed && len(w.Shape) >= 2 {
			t := w
			t.Shape = slices.Clone(w.Shape)
			r := len(t.Shape)
			t.Shape[r-2], t.Shape[r-1] = t.Shape[r-1], t.Shape[r-2]
			return []WeightSpec{t}
		}
		return []WeightSpec{w}
	}
	return w.Parts
}

// mxfp4 reports a weight a checkpoint holds in MXFP4.
func (w WeightSpec) mxfp4(has func(name string) bool) bool {
	return w.MXFP4 && len(w.Shape) >= 2 && !has(w.Name) && (has(w.Name+MXFP4Blocks) || has(w.Name+MXFP4Scales))
}

// TPSplit is how one weight is laid out under tensor parallelism
// (Megatron-style, on the Hugging Face [out, in] layout). The
// architecture declares it per weight; compile/ reads it and never
// interprets weight names.
type TPSplit int

const (
	// Replicated: every device holds the whole weight (embeddings, norms,
	// routers, tied heads, and any weight the architecture does not split).
	Replicated TPSplit = iota
	// Column: split on the output axis: axis 0 of an [out, in] matrix or
	// of a bias [out], axis 1 of an expert stack [E, out, in]: whole
	// attention heads or MLP columns per device (q/k/v, gate and up
	// projections and their biases, every expert's gate and up).
	Column
	// Row: split on the input axis, the last one of an [out, in] matrix or
	// an [E, out, in] expert stack whose input a Column weight produced
	// (o_proj, down_proj, the experts' down); the partial sums are
	// all-reduced. Only rank-2 and rank-3 weights split this way.
	Row
	// Vocab: an untied head [V, H] split on axis 0 by vocabulary rows when
	// V is a multiple of the TP degree, replicated otherwise. A weight that
	// Embed also reads stays replicated.
	Vocab
	// KVColumn: a key or value projection [KVHeads·D, in] or its bias:
	// split as Column (whole KV heads per device) where the TP degree
	// divides num_key_value_heads; replicated where the degree is a
	// multiple of them (more devices than KV heads): every device then
	// computes every KV head and holds the KV caches whole (vLLM instead
	// gives each device the one KV head its query heads read, 1/KV of
	// the caches).
	KVColumn
)

// String names the split as docs and reports do.
func (s TPSplit) String() string {
	switch s {
	case Replicated:
		return "replicated"
	case Column:
		return "column"
	case Row:
		return "row"
	case Vocab:
		return "vocab"
	case KVColumn:
		return "kv-column"
	}
	return fmt.Sprintf("TPSplit(%d)", int(s))
}

// StateSpec describes one state tensor of a layer (a KV cache, a recurrent
// state). The executor allocates it zero-filled at prefill.
//
// Axis 0 is always the batch (one row per sequence). A cache of slots
// (keys, values) declares the axis whose length is the cache length
// LayerState was given: executors grow, shift and copy a sequence's
// slots along it (continuous batching, the prefix cache). A state of
// fixed size (a recurrent state, a convolution window) has SlotAxis
// NoSlots and is copied whole.
type StateSpec struct {
	Name  string
	Shape []int
	// DType is the state's dtype; InvalidDType means the compute dtype.
	DType dtypes.DType
	// SlotAxis is the axis of cache slots (1 or more), or NoSlots.
	SlotAxis int
	// KV marks a key or value cache: without a DType of its own it is held
	// in the KV dtype when one is set (compile.Options.KVDType), else in
	// the compute dtype.
	KV bool
}

// ByKVHead reports whether s is a KV cache (or its int8 scales) whose KV
// heads, axis 1, are kvHeads, the model's num_key_value_heads: the state
// tensor parallelism splits by KV head (compile.ShardPlan.State); every
// other state (recurrent, or a layer's cache of other KV heads) devices
// hold whole.
func (s StateSpec) ByKVHead(kvHeads int) bool {
	return s.KV && len(s.Shape) >= 3 && s.Shape[1] == kvHeads
}

// HeldIn is the dtype the state is held in: its own DType, else kv for a
// KV cache when kv is set, else the compute dtype.
func (s StateSpec) HeldIn(compute, kv dtypes.DType) dtypes.DType {
	switch {
	case s.DType != dtypes.InvalidDType:
		return s.DType
	case s.KV && kv != dtypes.InvalidDType:
		return kv
	}
	return compute
}

// NoSlots is StateSpec.SlotAxis of a state without cache slots.
const NoSlots = -1

// HeldState is layer i's state as an executor holds it with its KV caches
// in kv (InvalidDType: the compute dtype): m.LayerState, and with 8-bit
// caches (kv Int8) one scale per slot and KV head for each KV cache,
// after the layer's own tensors in the order of their caches. A KV cache
// is [B, KVHeads, S, D] or, transposed, [B, KVHeads, D, S] (its SlotAxis
// says which); its scales are f32 [B, KVHeads, S], named as the cache
// with "_scale" after it, and count as KV state (they shard and shift as
// the caches do). Layer receives and returns its state in this order
// (pipeline/nn.KVOf reads it).
func HeldState(m Model, i, batch, cacheLen int, kv dtypes.DType) []StateSpec {
	return HeldSpecs(m.LayerState(i, batch, cacheLen), kv)
}

// HeldSpecs is a layer's declared state specs as an executor holds them
// with its KV caches in kv (HeldState): an MTP head's layer
// (MTPModel.MTPState) is held as a model layer is.
func HeldSpecs(specs []StateSpec, kv dtypes.DType) []StateSpec {
	if kv != dtypes.Int8 {
		return specs
	}
	held := slices.Clone(specs)
	for _, s := range specs {
		if !s.KV || s.DType != dtypes.InvalidDType || len(s.Shape) != 4 || (s.SlotAxis != 2 && s.SlotAxis != 3) {
			continue
		}
		held = append(held, StateSpec{
			Name:     s.Name + "_scale",
			Shape:    []int{s.Shape[0], s.Shape[1], s.Shape[s.SlotAxis]},
			DType:    dtypes.Float32,
			SlotAxis: 2,
			KV:       true,
		})
	}
	return held
}

// CheckState reports a StateSpec whose SlotAxis is not NoSlots nor an
// axis after the batch of the given cache length: an architecture that
// declares its state wrongly, named with its layer.
func CheckState(layer int, s StateSpec, cacheLen int) error {
	if s.SlotAxis == NoSlots {
		return nil
	}
	if s.SlotAxis < 1 || s.SlotAxis >= len(s.Shape) || s.Shape[s.SlotAxis] != cacheLen {
		return fmt.Errorf("layer %d state %q: shape %v at cache length %d, slot axis %d: want %d (no slots) or the axis of length %d after the batch",
			layer, s.Name, s.Shape, cacheLen, s.SlotAxis, NoSlots, cacheLen)
	}
	return nil
}

// Model is implemented by each architecture. Methods that take graph nodes
// build graph pieces; they panic on errors, as GoMLX graph code does, and the
// executor turns panics into errors.
//
// Layer(i, ...) may depend on i only through LayerKind(i) and the names of
// its weights: executors in eager mode build one executable per kind and
// reuse it for every layer of that kind, feeding each layer's own weights
// and state.
type Model interface {
	// Spec returns the resolved hyperparameters.
	Spec() *Spec
	// EmbedWeights lists the tensors Embed reads.
	EmbedWeights() []WeightSpec
	// LayerWeights lists the tensors Layer(i) reads, in a fixed order that is
	// the same (up to the layer index in the names) for layers of one kind.
	LayerWeights(i int) []WeightSpec
	// HeadWeights lists the tensors Head reads (the final norm and lm_head,
	// or model.embed_tokens.weight when the embeddings are tied).
	HeadWeights() []WeightSpec
	// LayerKind returns the kind of layer i (KindFull, KindSliding, ...).
	// Layers of the same kind have identically shaped weights and state.
	LayerKind(i int) string
	// LayerState lists the state tensors of layer i for a batch and a
	// static cache length (executors hold them as HeldState says).
	LayerState(i int, batch, cacheLen int) []StateSpec
	// Embed maps token ids [B, T] (int32) to hidden states [B, T, W]. W
	// is Hidden, or wider for a model that carries more than the residual
	// stream from layer to layer (Gemma 4's and Gemma 3n's per-layer
	// inputs, Gemma 3n's streams); executors take W from the graph.
	Embed(w *Params, tokens *graph.Node) *graph.Node
	// Layer runs decoder layer i on hidden states [B, T, W] for the
	// step described by step, reading its state (ordered as HeldState:
	// LayerState's, then any KV scales) and returning the new hidden states
	// and the new state in the same order.
	Layer(i int, w *Params, x *graph.Node, state []*graph.Node, step *Step) (*graph.Node, []*graph.Node)
	// Head maps the last layer's hidden states [B, W] to logits [B,
	// VocabSize] (float32 or the compute dtype).
	Head(w *Params, x *graph.Node) *graph.Node
}

// Varianter is implemented by models some of whose layers of one kind,
// with equally shaped weights and state, build another graph (Llama's
// NoRope layers among layers that turn: SmolLM3's every fourth).
// LayerVariant names what sets layer i apart ("" for nothing):
// executors that share one executable among the layers of equal kind and
// shapes (compile's eager mode) share it only among layers of one
// variant too.
type Varianter interface {
	LayerVariant(i int) string
}

// Finisher is a Model that gives apart the hidden states its Head
// projects: the residual stream after the final norm. Every architecture
// implements it; embeddings pool its output (compile.Runner.Embed).
type Finisher interface {
	// Final maps hidden states [..., Hidden] (Layer's output, at one
	// position or many) to the normed hidden states Head multiplies by
	// its projection, [..., FinalWidth(model)] in the compute dtype. It
	// reads only HeadWeights' norm (and, where the model projects the
	// states out of the decoder, that projection).
	Final(w *Params, x *graph.Node) *graph.Node
}

// FinalWidther is a Finisher whose final hidden states are not
// hidden_size wide (OPT-350M's, projected out to word_embed_proj_dim).
type FinalWidther interface {
	// FinalWidth is the width of Final's output.
	FinalWidth() int
}

// FinalWidth is the width of m's final hidden states (lm.Finisher), the
// embeddings pooled from them: its FinalWidther's, else hidden_size.
func FinalWidth(m Model) int {
	if f, ok := m.(FinalWidther); ok {
		return f.FinalWidth()
	}
	return m.Spec().Hidden
}

// Scorer is a model with a sequence-classification head (a
// cross-encoder reranker: BertForSequenceClassification,
// XLMRobertaForSequenceClassification, ModernBertForSequenceClassification,
// or a causal model's, Qwen3ForSequenceClassification and the others
// Classifier wraps), which scores an input, or a pair of texts in one
// input, from its final hidden states pooled as ScorePool says.
type Scorer interface {
	// Labels is the number of scores per input (config.json's labels).
	Labels() int
	// ScorePool is how the head's input is made of an input's final
	// hidden states (lm.Finisher's): "cls" the first token's, "mean" the
	// average over its tokens, "last" the last token's.
	ScorePool() string
	// Score maps pooled final hidden states [B, Hidden] (float32) to
	// scores [B, Labels] (float32: the classifier's logits). It reads
	// only HeadWeights.
	Score(w *Params, pooled *graph.Node) *graph.Node
}

// The values of Scorer.ScorePool.
const (
	PoolFirst = "cls"
	PoolMean  = "mean"
	PoolLast  = "last"
)

// Weights returns every tensor the model reads, each once, in the order
// embed, layers, head (and an MTPModel's head, last).
func Weights(m Model) []WeightSpec {
	var out []WeightSpec
	seen := map[string]bool{}
	add := func(ws []WeightSpec) {
		for _, w := range ws {
			if !seen[w.Name] {
				seen[w.Name] = true
				out = append(out, w)
			}
		}
	}
	add(m.EmbedWeights())
	for i := 0; i < m.Spec().Layers; i++ {
		add(m.LayerWeights(i))
	}
	add(m.HeadWeights())
	if mm, ok := m.(MTPModel); ok {
		add(mm.MTPWeights())
	}
	return out
}

// Params gives graph code its weight nodes by Hugging Face name. With Scope
// it reads like transformers' module nesting:
//
//	attn := w.Scope("model.layers.3.self_attn")
//	q := nn.Linear(x, attn.Get("q_proj.weight"), nil)
type Params struct {
	prefix string
	nodes  map[string]*graph.Node
}

// NewParams returns Params over nodes keyed by full tensor name.
func NewParams(nodes map[string]*graph.Node) *Params {
	return &Params{nodes: nodes}
}

// Scope returns Params whose names are relative to prefix (joined with ".").
func (p *Params) Scope(prefix string) *Params {
	full := prefix
	if p.prefix != "" {
		full = p.prefix + prefix
	}
	return &Params{prefix: full + ".", nodes: p.nodes}
}

// Name returns the full tensor name of a relative name.
func (p *Params) Name(name string) string { return p.prefix + name }

// Get returns the node of a tensor. A missing tensor is a programming error
// in the architecture (its weight list and its graph code disagree): Get
// panics with an error naming it, which the executor reports.
func (p *Params) Get(name string) *graph.Node {
	full := p.prefix + name
	n, ok := p.nodes[full]
	if !ok {
		panic(fmt.Errorf("graph code reads weight %q, which its weight list does not declare", full))
	}
	return n
}

// Has reports whether a tensor is present.
func (p *Params) Has(name string) bool { _, ok := p.nodes[p.prefix+name]; return ok }

// Step describes one forward step to the layers: how many tokens each row
// brings, where they go in the static cache and at which positions.
//
// Batches are left-padded: row b has Pads[b] padding slots before its first
// real token, so every row writes the cache at the same slots
// [Start, Start+Len) and slot s of row b holds position s - Pads[b]. Slots
// below Pads[b] hold padding and are masked out for that row.
type Step struct {
	Batch    int
	Len      int // T, the number of new tokens per row
	CacheLen int // S, the static cache length
	// Window is the number of leading cache slots the step's queries may
	// see, at most CacheLen: every slot at or past it is above Start+Len,
	// which no query sees (empty, or left by tokens a speculative step
	// took back), so attention reads only slots [0, Window). NewStep sets
	// it to CacheLen; a runner that knows where the step ends sets less
	// (compile's windowed prefill), and the graph differs only in how
	// much of the cache it reads.
	Window int
	// Pads is [B] int32: left-padding slots of each row.
	Pads *graph.Node
	// Start is a scalar int32: the cache slot of the first new token.
	Start *graph.Node
	// Positions is [B, T] int32: the position of each new token
	// (Start + t - Pads[b]); negative on padding slots.
	Positions *graph.Node
	// DynamicUpdateSlice reports that the backend implements
	// DynamicUpdateSlice; without it caches are updated by scatter-add into
	// zero-filled slots (see nn.UpdateCache).
	DynamicUpdateSlice bool
	// GatherExperts reports a backend computing in host memory (the CPU
	// backends), where routed experts are always best gathered, one matrix
	// per (token, choice) pair: tputool's cpu backend runs that product as
	// a grouped kernel that copies nothing, and on the go backend the copy
	// costs less than running every expert on every token. nn.RoutedExperts
	// takes it.
	GatherExperts bool

	memo map[string]*graph.Node
}

// Memo returns the node built by build under key, building it once per
// graph. Layers use it to share masks and rotary tables between layers of a
// compiled step.
func (s *Step) Memo(key string, build func() *graph.Node) *graph.Node {
	if s.memo == nil {
		s.memo = map[string]*graph.Node{}
	}
	if n, ok := s.memo[key]; ok {
		return n
	}
	n := build()
	s.memo[key] = n
	return n
}

// Visible is the number of leading cache slots attention reads: Window,
// or CacheLen when Window is unset or not below it.
func (s *Step) Visible() int {
	if s.Window > 0 && s.Window < s.CacheLen {
		return s.Window
	}
	return s.CacheLen
}

// NewStep describes a step of t new tokens per row for a batch with left
// padding pads ([B] int32) whose first new token goes to cache slot start
// (scalar int32), and derives Positions = start + t - pads[b].
func NewStep(batch, t, cacheLen int, pads, start *graph.Node, dynamicUpdateSlice bool) *Step {
	g := pads.Graph()
	slots := graph.Add(graph.Iota(g, shapes.Make(dtypes.Int32, batch, t), 1), start) // [B, T]: start + t
	positions := graph.Sub(slots, graph.Reshape(pads, batch, 1))                     // [B, T]
	return &Step{
		Batch: batch, Len: t, CacheLen: cacheLen, Window: cacheLen,
		Pads: pads, Start: start, Positions: positions,
		DynamicUpdateSlice: dynamicUpdateSlice,
	}
}
