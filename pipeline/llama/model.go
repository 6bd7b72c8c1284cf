// Package llama implements LlamaForCausalLM, following transformers'
// models/llama/modeling_llama.py: the decoder-only transformer of "LLaMA:
// Open and Efficient Foundation Language Models" (Touvron et al., 2023,
// arXiv:2302.13971) with RMSNorm pre-normalization, SwiGLU MLPs, rotary
// position embeddings and grouped-query attention (Llama 2/3), including
// Llama 3.1's rope_scaling type "llama3".
//
// The decoder (Model) is parameterized by Options so that the architectures
// transformers derives from Llama in its modular files reuse it and differ
// only in their options: Qwen2 (q/k/v biases), Qwen3 (per-head q/k RMSNorm)
// and Mistral (sliding-window attention). See pipeline/qwen2, pipeline/qwen3
// and pipeline/mistral. pipeline/qwen3moe embeds Model and replaces the MLP
// of its sparse layers, building on Attend.
//
// Each of Llama, Qwen2, Qwen3 and Mistral also registers its
// *ForSequenceClassification (LlamaForSequenceClassification, ...): the
// same decoder with transformers' GenericForSequenceClassification head
// in place of lm_head (lm.Classifier: score.weight on the last token's
// final normed hidden states), a cross-encoder reranker such as
// Qwen3-Reranker converted to one label.
package llama

import (
	"fmt"
	"math"
	"strings"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive

	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/nn"
)

// Options are the resolved hyperparameters of a Llama-family decoder.
type Options struct {
	Spec lm.Spec
	// Eps is rms_norm_eps.
	Eps float64
	// Act is the MLP activation (hidden_act).
	Act func(*Node) *Node
	// QKVBias adds biases to q_proj, k_proj and v_proj; OBias to o_proj;
	// MLPBias to gate/up/down_proj.
	QKVBias, OBias, MLPBias bool
	// QKNorm applies a per-head RMSNorm (q_norm, k_norm over head_dim) to
	// queries and keys before the rotary embedding (Qwen3).
	QKNorm bool
	// QKLayerNorm applies a LayerNorm without bias over each query and
	// key head's dims, with a weight per head (CohereLayerNorm over
	// (heads, head_dim): Command R+'s use_qk_norm): q_norm [heads,
	// head_dim], k_norm [KV heads, head_dim], eps Eps, in float32.
	QKLayerNorm bool
	// QKLayerNormPerHead reads QKLayerNorm's weights as StableLM stores
	// them, one tensor a head (self_attn.q_layernorm.norms.H.weight [head_dim],
	// k_layernorm likewise), assembled into q_norm and k_norm
	// (lm.WeightSpec.Parts).
	QKLayerNormPerHead bool
	// QKLayerNormShared applies one LayerNorm with a weight and a bias
	// over head_dim to every query head and one to every key head
	// (self_attn.q_layernorm, self_attn.k_layernorm [head_dim]: Phi's
	// qk_layernorm), eps Eps, before the rotary embedding.
	QKLayerNormShared bool
	// QKNormAcross makes QKNorm's norms span every head of the projection
	// at once (q_norm over heads·head_dim, k_norm over KV heads·head_dim,
	// before the split into heads: MiniMax-M2's qk_norm_type per_layer).
	QKNormAcross bool
	// QKNormAfterRope applies QKNorm's per-head RMSNorms after the rotary
	// embedding instead of before it, their weights named
	// self_attn.query_layernorm and self_attn.key_layernorm (HunYuan).
	// The two exclude each other (no family sets both; with both, the
	// weights would be listed as QKNormAcross names them and read as this
	// names them).
	QKNormAfterRope bool
	// ClipQKV > 0 clamps the query, key and value projections (after the
	// norms across heads) to ±ClipQKV (OLMoE's clip_qkv).
	ClipQKV float64
	// RopePairs rotates adjacent pairs of each query and key head's
	// rotated dims (ERNIE 4.5's rotary; GLM's, over the first half of
	// each head) instead of its halves: those dims are regrouped by
	// nn.PairsToHalvesFirst before the rotary embedding.
	RopePairs bool
	// EmbedScale multiplies the input embeddings, AttnScale replaces
	// 1/sqrt(head_dim) as the attention's score scale, ResidualScale
	// multiplies each attention and MLP output before its residual add,
	// and LogitsDivisor divides the logits (Granite's embedding_multiplier,
	// attention_multiplier, residual_multiplier and logits_scaling); 0
	// leaves each as Llama has it.
	EmbedScale, AttnScale, ResidualScale, LogitsDivisor float64
	// PostLN normalizes after each residual add instead of before each
	// sublayer (OPT-350M's do_layer_norm_before false): x =
	// PreAttn(x + attn(x)), then x = PreMLP(x + mlp(x)), with the norms
	// Norms.PreAttn and Norms.PreMLP name; not with Parallel.
	// NoFinalNorm leaves out the final norm (OPT's decoder without
	// final_layer_norm).
	PostLN, NoFinalNorm bool
	// EmbedProj, when not 0, is the embedding's width where it differs
	// from the hidden size (OPT-350M's word_embed_proj_dim):
	// model.embed_tokens.weight [vocab, EmbedProj], projected in by
	// model.project_in.weight [hidden, EmbedProj] and out before the head
	// by model.project_out.weight [EmbedProj, hidden]; the head is
	// [vocab, EmbedProj] (tied: the embedding).
	EmbedProj int
	// AttnScaleByLayer divides layer i's score scale (AttnScale, or
	// 1/√head_dim) by i + 1 (GPT-2's scale_attn_by_inverse_layer_idx,
	// Stanford CRFM's models); every layer is then a variant of its own
	// (LayerVariant).
	AttnScaleByLayer bool
	// NoRope[i] leaves layer i without the rotary embedding (Llama 4's
	// NoPE layers, no_rope_layers 0); nil rotates every layer.
	NoRope []bool
	// QKL2Norm normalizes each query and key head by its root mean
	// square, with no weight, after the rotary, on the layers that rotate
	// (Llama 4's use_qk_norm: its Llama4TextL2Norm).
	QKL2Norm bool
	// TempFloor > 0 scales the queries of the layers without the rotary
	// by nn.TemperatureScale(TempFloor, TempScale, 1) (Llama 4's
	// attn_temperature_tuning, floor_scale and attn_scale), in f32.
	TempFloor, TempScale float64
	// TempEvery instead scales every layer's queries, after the rotary,
	// by nn.TemperatureScale(TempFloor, TempScale, 0) rounded to the
	// queries' dtype (Ministral 3's llama_4_scaling_beta over
	// original_max_position_embeddings).
	TempEvery bool
	// Chunk is the chunk of positions an lm.KindChunked layer attends
	// within (Llama 4's attention_chunk_size; nn.ChunkedAttentionBias).
	Chunk int
	// FusedQKV reads the query, key and value projections as one matrix,
	// self_attn.qkv_proj [(H + 2·KV)·D, hidden], whose product is split in
	// that order; FusedGateUp reads the MLP's gate and up projections as
	// mlp.gate_up_proj [2·intermediate, hidden], gate first (Phi-3).
	// With QKVBias the fused projection has one bias,
	// self_attn.qkv_proj.bias [(H + 2·KV)·D] (Ling 2.0's
	// query_key_value with use_qkv_bias); the fused gate and up have
	// none: NewModel turns MLPBias off with FusedGateUp. QKVPerHead
	// (with FusedQKV) reads the fused projection's rows by key/value
	// group instead: each group's H/KV query heads, then its key and its
	// value, [KV, H/KV + 2, D] (Falcon's new_decoder_architecture; with a
	// key/value head per head, GPT-NeoX's [H, 3, D]).
	FusedQKV, FusedGateUp, QKVPerHead bool
	// LayerNorm makes the two norms of each layer and the final norm
	// LayerNorms with a bias (weight and bias) over hidden_size, eps Eps
	// (Phi-3.5-MoE's nn.LayerNorm), in place of RMSNorms; with
	// NormNoBias, without the bias (CohereLayerNorm).
	LayerNorm, NormNoBias bool
	// Parallel runs the attention and the MLP side by side on the one
	// norm Norms.PreAttn names, both added to the residual (Cohere's
	// decoder layer: x + attn(norm(x)) + mlp(norm(x))), or with
	// Norms.PreMLP set the MLP on that norm of x (GPT-NeoX's parallel
	// residual: x + attn(ln1(x)) + mlp(ln2(x))). Norms' other slots and
	// ResidualScale are not read then. Norms left zero are LlamaNorms,
	// whose PreMLP is set: a single-norm parallel layer names only
	// PreAttn.
	Parallel bool
	// LogitScale multiplies the logits when not 0 (Cohere's logit_scale).
	LogitScale float64
	// NormNoParams makes every norm a LayerNorm with neither weight nor
	// bias (OlmoLayerNorm: OLMo 1's), over hidden_size, eps Eps.
	NormNoParams bool
	// SubNorms adds BitNet's two RMSNorms: self_attn.attn_sub_norm on the
	// attention's output before o_proj and mlp.ffn_sub_norm on the gated
	// product before down_proj. A BitNet checkpoint's activation
	// quantization (Spec.BitNet: every projection's input rounded to int8
	// per token, nn.ActQuant8) is the loader's to declare, not an option.
	SubNorms bool
	// NormPlusOne scales every RMSNorm by (1 + w), in float32 before the
	// cast back (GemmaRMSNorm: Gemma 1's, whose weights are stored minus
	// one), and with LayerNorm every LayerNorm by (1 + w) added in the
	// weight's dtype (Nemotron's LayerNorm1P); EmbedSqrtHidden multiplies the input embeddings by
	// sqrt(hidden_size) rounded to their dtype (Gemma's scaled embedding).
	NormPlusOne, EmbedSqrtHidden bool
	// RopeF32 turns 16-bit queries and keys in float32, by the tables as
	// rounded to their dtype, and rounds the result once (Cohere's
	// apply_rotary_pos_emb); without it the rotary runs in their dtype.
	// RopeTablesF32 (with RopeF32) keeps the tables in float32, unrounded
	// (Olmo2RotaryEmbedding returns them so, and q·cos promotes).
	RopeF32, RopeTablesF32 bool
	// UngatedMLP makes the MLP down_proj(act(up_proj(x))), without a gate
	// (NemotronMLP: Arcee's AFM, with relu2); with XIELU the activation is
	// nn.XIELU of the layer's learned scalars mlp.act_fn.alpha_p [1],
	// alpha_n [1], beta [] and eps [] (Apertus).
	UngatedMLP, XIELU bool
	// HeadBias adds lm_head.bias [vocab] to the logits (lm_head_bias).
	HeadBias bool
	// AttnGate multiplies the attention's output, before o_proj, by
	// sigmoid(self_attn.gate_proj(x)) [H·D], x the attention's input
	// (AFMoE's gated attention).
	AttnGate bool
	// Norms names the layer's norms (zero: Llama's, LlamaNorms).
	Norms Norms
	// NormF32 scales every RMSNorm (the layers', the q/k norms, the
	// final) by its weight in float32 before the cast back to the input's
	// dtype (AfmoeRMSNorm, Olmo2RMSNorm, as GptOssRMSNorm), not after
	// (LlamaRMSNorm). NormWeightsF32 holds those weights in float32
	// whatever the compute dtype (AFMoE's _keep_in_fp32_modules).
	NormF32, NormWeightsF32 bool
	// Rope is the rotary embedding shared by all layers; SlidingRope, when
	// set, replaces it on the sliding-window layers (OLMo 3's: the
	// config's rope scaling on the full-attention layers only).
	Rope, SlidingRope *nn.Rope
	// FinalNorm names the final norm, "model.norm" when empty
	// (Falcon-H1's "model.final_layernorm").
	FinalNorm string
	// ALiBi adds attention with linear biases to every layer's scores
	// (nn.ALiBiBias: BLOOM's, slope h times the key's position, after
	// the scores are scaled), with nn.ALiBiSlopes of the heads; with
	// ALiBiScaled the biases are scaled with the scores (Falcon-RW's
	// (q·k + alibi)/sqrt(head_dim)).
	ALiBi, ALiBiScaled bool
	// ScoresF32 runs the attention of 16-bit queries in float32, the
	// caches read in float32 (GPT-Neo's attention upcasts the queries
	// and keys before q·k, whose scores it does not scale), and rounds
	// its output back.
	ScoresF32 bool
	// Positions is a learned absolute position embedding:
	// model.embed_positions.weight [Positions.Rows, hidden] (GPT-2's
	// wpe), its row for each token's position added to the token's
	// embedding (zero Rows: none).
	Positions Positions
}

// Positions is a learned absolute position embedding. Layer 0 adds it to
// its input (the token embeddings, which the step's positions do not
// reach), so layer 0 lists its table and runs a graph of its own.
type Positions struct {
	// Rows is the table's length: positions at or past Rows - Offset are
	// refused by Spec.MaxPositions, which is at most that.
	Rows int
	// Offset is added to each position before its row is read (OPT's
	// OPTLearnedPositionalEmbedding: 2, the table's first two rows never
	// read by a token).
	Offset int
}

// PositionsWeight is the learned position embedding's name.
const PositionsWeight = "model.embed_positions.weight"

// NoRotary leaves every layer without the rotary embedding (NoRope):
// for families whose positions are learned, ALiBi's, or none.
func (o *Options) NoRotary() {
	o.NoRope = make([]bool, o.Spec.Layers)
	for i := range o.NoRope {
		o.NoRope[i] = true
	}
}

// Norms names a decoder layer's norms, "" for none: PreAttn norms the
// attention's input, PostAttn its output before it joins the residual,
// PreMLP the MLP's input and PostMLP its output before it joins the
// residual.
type Norms struct{ PreAttn, PostAttn, PreMLP, PostMLP string }

var (
	// LlamaNorms are Llama's: input_layernorm before the attention,
	// post_attention_layernorm before the MLP.
	LlamaNorms = Norms{PreAttn: "input_layernorm", PreMLP: "post_attention_layernorm"}
	// SandwichNorms norm each sublayer's input and output (AFMoE):
	// input_layernorm and post_attention_layernorm around the attention,
	// pre_mlp_layernorm and post_mlp_layernorm around the MLP.
	SandwichNorms = Norms{PreAttn: "input_layernorm", PostAttn: "post_attention_layernorm", PreMLP: "pre_mlp_layernorm", PostMLP: "post_mlp_layernorm"}
	// PostNorms norm each sublayer's output only (OLMo 2):
	// post_attention_layernorm and post_feedforward_layernorm.
	PostNorms = Norms{PostAttn: "post_attention_layernorm", PostMLP: "post_feedforward_layernorm"}
)

// Model is a Llama-family decoder; it implements lm.Model.
type Model struct {
	o Options
}

// NewModel returns the decoder for resolved options.
func NewModel(o Options) *Model {
	if o.Norms == (Norms{}) {
		o.Norms = LlamaNorms
	}
	o.MLPBias = o.MLPBias && !o.FusedGateUp
	if o.PostLN && o.Parallel { // the architectures' resolvers never set both
		panic("llama: PostLN with Parallel")
	}
	if o.QKVPerHead && !o.FusedQKV { // the architectures' resolvers never set it so
		panic("llama: QKVPerHead needs FusedQKV")
	}
	if p := o.Positions; p.Rows > 0 && o.Spec.MaxPositions > p.Rows-p.Offset { // likewise: the table covers every position the spec lets in
		panic(fmt.Sprintf("llama: %d positions past a table of %d rows from row %d", o.Spec.MaxPositions, p.Rows, p.Offset))
	}
	return &Model{o: o}
}

// Spec implements lm.Model.
func (m *Model) Spec() *lm.Spec { return &m.o.Spec }

// Options returns the resolved options.
func (m *Model) Options() Options { return m.o }

// LayerKind implements lm.Model. A layer past the model's (a
// multi-token-prediction head's, read by the architectures built on this
// decoder) attends in full.
func (m *Model) LayerKind(i int) string {
	if i >= len(m.o.Spec.LayerKinds) {
		return lm.KindFull
	}
	return m.o.Spec.LayerKinds[i]
}

// LayerState implements lm.Model: a key and a value cache.
func (m *Model) LayerState(i int, batch, cacheLen int) []lm.StateSpec {
	s := &m.o.Spec
	return nn.KVCacheState(batch, s.KVHeads, cacheLen, s.HeadDim)
}

// EmbedWeights implements lm.Model.
func (m *Model) EmbedWeights() []lm.WeightSpec {
	s := &m.o.Spec
	if e := m.o.EmbedProj; e > 0 {
		return []lm.WeightSpec{{Name: "model.embed_tokens.weight", Shape: []int{s.VocabSize, e}, Matmul: true},
			{Name: "model.project_in.weight", Shape: []int{s.Hidden, e}, Matmul: true}}
	}
	return []lm.WeightSpec{{Name: "model.embed_tokens.weight", Shape: []int{s.VocabSize, s.Hidden}, Matmul: true}}
}

// HeadWeights implements lm.Model.
func (m *Model) HeadWeights() []lm.WeightSpec {
	s := &m.o.Spec
	head := "lm_head.weight"
	tp := lm.Vocab // an untied head splits by vocabulary; a tied one is the replicated embedding
	if s.TieEmbeddings {
		head, tp = "model.embed_tokens.weight", lm.Replicated
	}
	width := s.Hidden
	if e := m.o.EmbedProj; e > 0 {
		width = e
	}
	ws := append(m.FinalWeights(), lm.WeightSpec{Name: head, Shape: []int{s.VocabSize, width}, Matmul: true, TP: tp})
	if m.o.HeadBias {
		ws = append(ws, lm.WeightSpec{Name: "lm_head.bias", Shape: []int{s.VocabSize}})
	}
	return ws
}

// FinalWeights implements lm.FinalWeighter: the final norm, and with
// EmbedProj the projection out of the decoder.
func (m *Model) FinalWeights() []lm.WeightSpec {
	var ws []lm.WeightSpec
	if !m.o.NoFinalNorm {
		ws = m.normWeights(m.finalNorm())
	}
	if e := m.o.EmbedProj; e > 0 {
		ws = append(ws, lm.WeightSpec{Name: "model.project_out.weight", Shape: []int{e, m.o.Spec.Hidden}, Matmul: true})
	}
	return ws
}

// finalNorm is the final norm's name.
func (m *Model) finalNorm() string {
	if m.o.FinalNorm == "" {
		return "model.norm"
	}
	return m.o.FinalNorm
}

// NormWeights are the tensors of the norm named name (a full name,
// "model.layers.3.residual_layernorm"), as the layer's own norms hold
// them: for the norms an architecture adds (Norm).
func (m *Model) NormWeights(name string) []lm.WeightSpec { return m.normWeights(name) }

// normWeights are the tensors of the norm named name: its weight, and
// its bias when the norms are LayerNorms. With NormWeightsF32 the weight
// is held in float32.
func (m *Model) normWeights(name string) []lm.WeightSpec {
	if m.o.NormNoParams {
		return nil
	}
	ws := []lm.WeightSpec{{Name: name + ".weight", Shape: []int{m.o.Spec.Hidden}, F32: m.o.NormWeightsF32}}
	if m.o.LayerNorm && !m.o.NormNoBias {
		ws = append(ws, lm.WeightSpec{Name: name + ".bias", Shape: []int{m.o.Spec.Hidden}})
	}
	return ws
}

// Norm applies the norm named name in p to x as the layer's own norms
// are applied (an RMSNorm, or with LayerNorm a LayerNorm), for
// architectures that norm another stream with a layer's norm
// (pipeline/qwen3moe's Layout.MoEOnInput) or add norms of their own.
func (m *Model) Norm(p *lm.Params, name string, x *Node) *Node { return m.norm(p, name, x) }

// norm applies the norm named name in p to x: an RMSNorm, or with
// LayerNorm a LayerNorm with its bias.
func (m *Model) norm(p *lm.Params, name string, x *Node) *Node {
	if m.o.NormNoParams {
		return nn.LayerNorm(x, nil, nil, m.o.Eps)
	}
	if m.o.LayerNorm {
		w := p.Get(name + ".weight")
		if m.o.NormPlusOne { // (1 + w) in the weight's dtype, as NemotronLayerNorm1P adds it
			w = OnePlus(w)
		}
		return nn.LayerNorm(x, w, optional(p, !m.o.NormNoBias, name+".bias"), m.o.Eps)
	}
	return m.rmsNorm(x, p.Get(name+".weight"))
}

// rmsNorm is an RMSNorm of x by w: Llama's, or with NormF32 scaled in
// float32, or with NormPlusOne by (1 + w) in float32.
func (m *Model) rmsNorm(x, w *Node) *Node {
	if m.o.NormPlusOne {
		return nn.RMSNorm(x, w, m.o.Eps, true)
	}
	if m.o.NormF32 {
		return nn.RMSNormF32Scale(x, w, m.o.Eps)
	}
	return nn.RMSNorm(x, w, m.o.Eps, false)
}

// LayerWeights implements lm.Model: with learned positions, layer 0's
// begin with their table.
func (m *Model) LayerWeights(i int) []lm.WeightSpec {
	s := &m.o.Spec
	var ws []lm.WeightSpec
	if i == 0 && m.o.Positions.Rows > 0 {
		ws = append(ws, lm.WeightSpec{Name: PositionsWeight, Shape: []int{m.o.Positions.Rows, s.Hidden}})
	}
	ws = append(ws, m.AttentionWeights(i)...)
	p := fmt.Sprintf("model.layers.%d.", i)
	add := func(name string, matmul bool, tp lm.TPSplit, shape ...int) {
		ws = append(ws, lm.WeightSpec{Name: p + name, Shape: shape, Matmul: matmul, TP: tp})
	}
	if m.o.FusedGateUp { // split on its rows like gate and up; XLA moves the halves where they are read
		add("mlp.gate_up_proj.weight", true, lm.Column, 2*s.Intermediate, s.Hidden)
		add("mlp.down_proj.weight", true, lm.Row, s.Hidden, s.Intermediate)
		return ws
	}
	if !m.o.UngatedMLP {
		add("mlp.gate_proj.weight", true, lm.Column, s.Intermediate, s.Hidden)
	}
	if m.o.UngatedMLP && m.o.XIELU {
		add("mlp.act_fn.alpha_p", false, lm.Replicated, 1)
		add("mlp.act_fn.alpha_n", false, lm.Replicated, 1)
		add("mlp.act_fn.beta", false, lm.Replicated)
		add("mlp.act_fn.eps", false, lm.Replicated)
	}
	add("mlp.up_proj.weight", true, lm.Column, s.Intermediate, s.Hidden)
	add("mlp.down_proj.weight", true, lm.Row, s.Hidden, s.Intermediate)
	if m.o.SubNorms {
		add("mlp.ffn_sub_norm.weight", false, lm.Column, s.Intermediate)
	}
	if m.o.MLPBias {
		if !m.o.UngatedMLP {
			add("mlp.gate_proj.bias", false, lm.Replicated, s.Intermediate)
		}
		add("mlp.up_proj.bias", false, lm.Replicated, s.Intermediate)
		add("mlp.down_proj.bias", false, lm.Replicated, s.Hidden)
	}
	return ws
}

// AttentionWeights lists the tensors Attend reads for layer i: the
// layer's norms (Options.Norms; the MLP's output norm read by PostMLP)
// and self_attn.
func (m *Model) AttentionWeights(i int) []lm.WeightSpec {
	s := &m.o.Spec
	p := fmt.Sprintf("model.layers.%d.", i)
	q, kv := s.Heads*s.HeadDim, s.KVHeads*s.HeadDim
	n := m.o.Norms
	var ws []lm.WeightSpec
	if n.PreAttn != "" {
		ws = m.normWeights(p + n.PreAttn)
	}
	add := func(name string, matmul bool, tp lm.TPSplit, shape ...int) {
		ws = append(ws, lm.WeightSpec{Name: p + name, Shape: shape, Matmul: matmul, TP: tp})
	}
	if m.o.FusedQKV { // split as the KV heads are (whole where they are); XLA moves q, k and v where they are read
		add("self_attn.qkv_proj.weight", true, lm.KVColumn, q+2*kv, s.Hidden)
	} else {
		add("self_attn.q_proj.weight", true, lm.Column, q, s.Hidden)
		add("self_attn.k_proj.weight", true, lm.KVColumn, kv, s.Hidden)
		add("self_attn.v_proj.weight", true, lm.KVColumn, kv, s.Hidden)
	}
	switch {
	case m.o.QKVBias && m.o.FusedQKV:
		add("self_attn.qkv_proj.bias", false, lm.KVColumn, q+2*kv)
	case m.o.QKVBias:
		add("self_attn.q_proj.bias", false, lm.Column, q)
		add("self_attn.k_proj.bias", false, lm.KVColumn, kv)
		add("self_attn.v_proj.bias", false, lm.KVColumn, kv)
	}
	norms := len(ws)
	switch {
	case m.o.QKNorm && m.o.QKNormAcross: // split with the heads they norm (XLA sums the squares across devices)
		add("self_attn.q_norm.weight", false, lm.Column, q)
		add("self_attn.k_norm.weight", false, lm.KVColumn, kv)
	case m.o.QKLayerNorm: // a weight per head: split with the heads
		add("self_attn.q_norm.weight", false, lm.Column, s.Heads, s.HeadDim)
		add("self_attn.k_norm.weight", false, lm.KVColumn, s.KVHeads, s.HeadDim)
		if m.o.QKLayerNormPerHead {
			for j, n := range []struct {
				name  string
				heads int
			}{{"q_layernorm", s.Heads}, {"k_layernorm", s.KVHeads}} {
				w := &ws[len(ws)-2+j]
				for h := range n.heads {
					w.Parts = append(w.Parts, lm.WeightSpec{Name: fmt.Sprintf("%sself_attn.%s.norms.%d.weight", p, n.name, h), Shape: []int{s.HeadDim}})
				}
			}
		}
	case m.o.QKLayerNormShared:
		add("self_attn.q_layernorm.weight", false, lm.Replicated, s.HeadDim)
		add("self_attn.q_layernorm.bias", false, lm.Replicated, s.HeadDim)
		add("self_attn.k_layernorm.weight", false, lm.Replicated, s.HeadDim)
		add("self_attn.k_layernorm.bias", false, lm.Replicated, s.HeadDim)
	case m.o.QKNorm && m.o.QKNormAfterRope:
		add("self_attn.query_layernorm.weight", false, lm.Replicated, s.HeadDim)
		add("self_attn.key_layernorm.weight", false, lm.Replicated, s.HeadDim)
	case m.o.QKNorm:
		add("self_attn.q_norm.weight", false, lm.Replicated, s.HeadDim)
		add("self_attn.k_norm.weight", false, lm.Replicated, s.HeadDim)
	}
	for j := norms; j < len(ws); j++ {
		ws[j].F32 = m.o.NormWeightsF32
	}
	if m.o.AttnGate {
		add("self_attn.gate_proj.weight", true, lm.Column, q, s.Hidden)
	}
	if m.o.SubNorms { // split with the heads it norms (XLA sums the squares across devices)
		add("self_attn.attn_sub_norm.weight", false, lm.Column, q)
	}
	add("self_attn.o_proj.weight", true, lm.Row, s.Hidden, q)
	if m.o.OBias {
		add("self_attn.o_proj.bias", false, lm.Replicated, s.Hidden)
	}
	for _, name := range []string{n.PostAttn, n.PreMLP, n.PostMLP} {
		if name != "" {
			ws = append(ws, m.normWeights(p+name)...)
		}
	}
	return ws
}

// optional returns the named bias when enabled, else nil.
func optional(p *lm.Params, enabled bool, name string) *Node {
	if !enabled {
		return nil
	}
	return p.Get(name)
}

// Embed implements lm.Model: LlamaModel.embed_tokens.
func (m *Model) Embed(w *lm.Params, tokens *Node) *Node {
	x := nn.Embedding(w.Get("model.embed_tokens.weight"), tokens) // [B, T, H]
	if m.o.EmbedProj > 0 {                                        // [B, T, EmbedProj] → [B, T, H]
		x = nn.Linear(x, w.Get("model.project_in.weight"), nil)
	}
	if s := m.o.EmbedScale; s != 0 && s != 1 {
		x = MulScalar(x, s)
	}
	if m.o.EmbedSqrtHidden {
		x = MulScalar(x, nn.RoundTo(math.Sqrt(float64(m.o.Spec.Hidden)), x.DType()))
	}
	return x
}

// Residual is a sublayer's output h as it joins the residual: times
// ResidualScale when set.
func (m *Model) Residual(h *Node) *Node {
	if s := m.o.ResidualScale; s != 0 && s != 1 {
		return MulScalar(h, s)
	}
	return h
}

// Layer implements lm.Model: LlamaDecoderLayer, pre-norm attention then
// pre-norm MLP, each with a residual connection.
func (m *Model) Layer(i int, w *lm.Params, x *Node, state []*Node, step *lm.Step) (*Node, []*Node) {
	if i == 0 && m.o.Positions.Rows > 0 {
		x = m.addPositions(w, x, step)
	}
	if m.o.PostLN { // OPT-350M: each norm after its residual add
		p := w.Scope(fmt.Sprintf("model.layers.%d", i))
		a, c := m.attention(i, p.Scope("self_attn"), x, nn.KVOf(state), step)
		x = m.norm(p, m.o.Norms.PreAttn, Add(x, a))
		x = m.norm(p, m.o.Norms.PreMLP, Add(x, m.mlp(p.Scope("mlp"), x)))
		return x, c.State()
	}
	if m.o.Parallel {
		p := w.Scope(fmt.Sprintf("model.layers.%d", i))
		h := m.maybeNorm(p, m.o.Norms.PreAttn, x)
		a, c := m.attention(i, p.Scope("self_attn"), h, nn.KVOf(state), step)
		if m.o.Norms.PreMLP != "" {
			h = m.norm(p, m.o.Norms.PreMLP, x)
		}
		return Add(Add(x, a), m.mlp(p.Scope("mlp"), h)), c.State()
	}
	x, h, kv := m.Attend(i, w, x, state, step)
	x = Add(x, m.Residual(m.PostMLP(i, w, m.mlp(w.Scope(fmt.Sprintf("model.layers.%d.mlp", i)), h))))
	return x, kv
}

// addPositions adds to x [B, T, H] the learned position embedding's row
// for each token's position plus Offset (GPT2Model's inputs_embeds +
// position_embeds); padding slots, whose positions are negative, read a
// row clipped into the table (their outputs are never read).
func (m *Model) addPositions(w *lm.Params, x *Node, step *lm.Step) *Node {
	pos := ClipScalar(AddScalar(step.Positions, float64(m.o.Positions.Offset)), 0, float64(m.o.Positions.Rows-1))
	e := Gather(w.Get(PositionsWeight), InsertAxes(pos, -1)) // [B, T, H]
	return Add(x, ConvertDType(e, x.DType()))
}

// PostMLP is layer i's MLP (or experts') output y as it joins the
// residual: normed by Norms.PostMLP (AFMoE's post_mlp_layernorm, OLMo
// 2's post_feedforward_layernorm), or y.
func (m *Model) PostMLP(i int, w *lm.Params, y *Node) *Node {
	return m.maybeNorm(w.Scope(fmt.Sprintf("model.layers.%d", i)), m.o.Norms.PostMLP, y)
}

// maybeNorm is the norm named name on x, or x when name is "".
func (m *Model) maybeNorm(p *lm.Params, name string, x *Node) *Node {
	if name == "" {
		return x
	}
	return m.norm(p, name, x)
}

// Attend is the attention half of LlamaDecoderLayer i: x plus the
// attention of its input_layernorm, and the post_attention_layernorm of
// that sum (the MLP's input), with the layer's new state (nn.KV.State);
// other Options.Norms norm the attention's input and output and the
// MLP's input as they name. Architectures that replace the MLP
// (pipeline/qwen3moe) build on it.
func (m *Model) Attend(i int, w *lm.Params, x *Node, state []*Node, step *lm.Step) (residual, h *Node, kv []*Node) {
	p, n := w.Scope(fmt.Sprintf("model.layers.%d", i)), m.o.Norms
	h = m.maybeNorm(p, n.PreAttn, x)
	h, c := m.attention(i, p.Scope("self_attn"), h, nn.KVOf(state), step)
	x = Add(x, m.Residual(m.maybeNorm(p, n.PostAttn, h)))
	return x, m.maybeNorm(p, n.PreMLP, x), c.State()
}

// SelfAttention is layer i's attention (self_attn) on h, the layer's
// normed input, continued from its key and value caches kv (nn.KVOf's
// order), returning the output before any residual and the caches' new
// state: for a layer that runs attention beside another token mixer
// (pipeline/falconh1).
func (m *Model) SelfAttention(i int, w *lm.Params, h *Node, kv []*Node, step *lm.Step) (*Node, []*Node) {
	a, c := m.attention(i, w.Scope(fmt.Sprintf("model.layers.%d.self_attn", i)), h, nn.KVOf(kv), step)
	return a, c.State()
}

// rotates reports that layer i applies the rotary embedding (NoRope).
func (m *Model) rotates(i int) bool { return i >= len(m.o.NoRope) || !m.o.NoRope[i] }

// LayerVariant implements lm.Varianter: "nope" for a layer without the
// rotary embedding, whose graph differs from its kind's rotating layers'.
// With learned positions layer 0, which adds them, is "positions" as
// well, and with AttnScaleByLayer layer i "scale/i+1".
func (m *Model) LayerVariant(i int) string {
	var v []string
	if !m.rotates(i) {
		v = append(v, "nope")
	}
	if i == 0 && m.o.Positions.Rows > 0 {
		v = append(v, "positions")
	}
	if m.o.AttnScaleByLayer {
		v = append(v, fmt.Sprintf("scale/%d", i+1))
	}
	return strings.Join(v, "+")
}

var _ lm.Varianter = (*Model)(nil)

// attention is layer i's LlamaAttention: (BitNet) the input rounded to
// int8, q/k/v projections, (Qwen3) per-head q/k norms, (MiniMax-M2) norms
// across the heads or (Command R+, StableLM 2 12B) LayerNorms a head,
// rotary embedding (on adjacent pairs with RopePairs; none on a NoRope
// layer, whose queries Llama 4 scales by the temperature instead), (Llama
// 4) the unweighted q/k norms, (HunYuan) the per-head q/k norms, cache
// write, grouped-query attention over the layer kind's mask, (AFMoE) the
// sigmoid gate, (BitNet) the sub norm and rounding, o_proj.
func (m *Model) attention(i int, p *lm.Params, x *Node, c nn.KV, step *lm.Step) (*Node, nn.KV) {
	s := &m.o.Spec
	x = m.actQuant(x)
	var q, k, v *Node
	if m.o.FusedQKV {
		qkv := nn.Linear(x, p.Get("qkv_proj.weight"), optional(p, m.o.QKVBias, "qkv_proj.bias")) // [B, T, (H + 2·KV)·D]
		nq, nkv := s.Heads*s.HeadDim, s.KVHeads*s.HeadDim
		if m.o.QKVPerHead { // [B, T, KV, H/KV + 2, D]: each group's query heads, key and value
			dims := qkv.Shape().Dimensions
			per := s.Heads / s.KVHeads
			byGroup := Reshape(qkv, dims[0], dims[1], s.KVHeads, per+2, s.HeadDim)
			part := func(from, to, width int) *Node {
				return Reshape(SliceAxis(byGroup, 3, AxisRange(from, to)), dims[0], dims[1], width)
			}
			q, k, v = part(0, per, nq), part(per, per+1, nkv), part(per+1, per+2, nkv)
		} else {
			q = SliceAxis(qkv, -1, AxisRange(0, nq))
			k = SliceAxis(qkv, -1, AxisRange(nq, nq+nkv))
			v = SliceAxis(qkv, -1, AxisRange(nq+nkv, nq+2*nkv))
		}
	} else {
		q = nn.Linear(x, p.Get("q_proj.weight"), optional(p, m.o.QKVBias, "q_proj.bias")) // [B, T, H·D]
		k = nn.Linear(x, p.Get("k_proj.weight"), optional(p, m.o.QKVBias, "k_proj.bias")) // [B, T, KV·D]
		v = nn.Linear(x, p.Get("v_proj.weight"), optional(p, m.o.QKVBias, "v_proj.bias")) // [B, T, KV·D]
	}
	across := m.o.QKNorm && m.o.QKNormAcross
	if across {
		q = m.rmsNorm(q, p.Get("q_norm.weight"))
		k = m.rmsNorm(k, p.Get("k_norm.weight"))
	}
	if c := m.o.ClipQKV; c > 0 {
		q, k, v = ClipScalar(q, -c, c), ClipScalar(k, -c, c), ClipScalar(v, -c, c)
	}
	q, k, v = nn.SplitHeads(q, s.Heads), nn.SplitHeads(k, s.KVHeads), nn.SplitHeads(v, s.KVHeads) // [B, T, H, D], [B, T, KV, D]
	if m.o.QKNorm && !across && !m.o.QKNormAfterRope {
		q = m.rmsNorm(q, p.Get("q_norm.weight"))
		k = m.rmsNorm(k, p.Get("k_norm.weight"))
	}
	if m.o.QKLayerNorm { // [B, T, H, D] by [H, D]
		q = nn.LayerNorm(q, p.Get("q_norm.weight"), nil, m.o.Eps)
		k = nn.LayerNorm(k, p.Get("k_norm.weight"), nil, m.o.Eps)
	}
	if m.o.QKLayerNormShared { // [B, T, H, D] by [D]
		q = nn.LayerNorm(q, p.Get("q_layernorm.weight"), p.Get("q_layernorm.bias"), m.o.Eps)
		k = nn.LayerNorm(k, p.Get("k_layernorm.weight"), p.Get("k_layernorm.bias"), m.o.Eps)
	}
	if m.rotates(i) {
		rope := m.o.Rope
		if m.o.SlidingRope != nil && m.LayerKind(i) == lm.KindSliding {
			rope = m.o.SlidingRope
		}
		if m.o.RopePairs {
			q, k = nn.PairsToHalvesFirst(q, rope.RotaryDim), nn.PairsToHalvesFirst(k, rope.RotaryDim)
		}
		tables := x.DType()
		if m.o.RopeF32 && m.o.RopeTablesF32 {
			tables = dtypes.Float32
		}
		cos, sin := rope.CosSin(step, tables)
		if dt := q.DType(); m.o.RopeF32 && dt != dtypes.Float32 {
			f32 := func(n *Node) *Node { return ConvertDType(n, dtypes.Float32) }
			cos, sin = f32(cos), f32(sin)
			q, k = ConvertDType(nn.ApplyRope(f32(q), cos, sin), dt), ConvertDType(nn.ApplyRope(f32(k), cos, sin), dt)
		} else {
			q, k = nn.ApplyRope(q, cos, sin), nn.ApplyRope(k, cos, sin)
		}
		if m.o.QKL2Norm {
			q, k = nn.RMSNorm(q, nil, m.o.Eps, false), nn.RMSNorm(k, nil, m.o.Eps, false)
		}
	}
	if m.o.QKNorm && m.o.QKNormAfterRope {
		q = m.rmsNorm(q, p.Get("query_layernorm.weight"))
		k = m.rmsNorm(k, p.Get("key_layernorm.weight"))
	}
	switch {
	case m.o.TempFloor > 0 && m.o.TempEvery: // the scale rounded to the queries' dtype first, as transformers' Ministral3Attention has it
		q = Mul(q, ConvertDType(nn.TemperatureScale(step, m.o.TempFloor, m.o.TempScale, 0), q.DType()))
	case m.o.TempFloor > 0 && !m.rotates(i): // in f32, rounded once, as transformers scales a bf16 query by its f32 scales
		q = ConvertDType(Mul(ConvertDType(q, dtypes.Float32), nn.TemperatureScale(step, m.o.TempFloor, m.o.TempScale, 1)), q.DType())
	}
	c = nn.WriteKV(c, k, v, step)
	var bias *Node
	switch m.LayerKind(i) {
	case lm.KindSliding:
		bias = nn.AttentionBias(step, s.SlidingWindow)
	case lm.KindChunked:
		bias = nn.ChunkedAttentionBias(step, m.o.Chunk)
	default:
		bias = nn.AttentionBias(step, 0)
	}
	scale := m.o.AttnScale // 0: nn.Attention's 1/√head_dim
	if m.o.AttnScaleByLayer {
		if scale == 0 {
			scale = 1 / math.Sqrt(float64(s.HeadDim))
		}
		scale /= float64(i + 1)
	}
	if m.o.ALiBi { // the mask plus the linear biases, once a graph for the layers of a kind
		mask := bias
		bias = step.Memo(fmt.Sprintf("llama-alibi/%s/%v", m.LayerKind(i), scale), func() *Node {
			slopes := nn.ALiBiSlopes(s.Heads)
			if m.o.ALiBiScaled {
				scale := scale
				if scale == 0 {
					scale = 1 / math.Sqrt(float64(s.HeadDim))
				}
				for h := range slopes {
					slopes[h] *= scale
				}
			}
			return Add(mask, nn.ALiBiBias(step, slopes, s.KVHeads, mask.Shape().Dimensions[4]))
		})
	}
	var out *Node
	if dt := q.DType(); m.o.ScoresF32 && dt != dtypes.Float32 {
		out = ConvertDType(nn.Attention(ConvertDType(q, dtypes.Float32), c, bias, scale, 0), dt)
	} else {
		out = nn.Attention(q, c, bias, scale, 0) // [B, T, H*D]
	}
	if m.o.AttnGate {
		out = Mul(out, Sigmoid(nn.Linear(x, p.Get("gate_proj.weight"), nil)))
	}
	if m.o.SubNorms {
		out = m.rmsNorm(out, p.Get("attn_sub_norm.weight"))
	}
	return nn.Linear(m.actQuant(out), p.Get("o_proj.weight"), optional(p, m.o.OBias, "o_proj.bias")), c
}

// actQuant is a BitNet checkpoint's quantization of a projection's input
// x to int8 per token (nn.ActQuant8), or x.
func (m *Model) actQuant(x *Node) *Node {
	if m.o.Spec.BitNet == nil {
		return x
	}
	return nn.ActQuant8(x)
}

// mlp is LlamaMLP: down_proj(act(gate_proj(x)) * up_proj(x)); with
// FusedGateUp, Phi3MLP: gate_up_proj's product halved, gate first; with
// UngatedMLP, NemotronMLP: down_proj(act(up_proj(x))).
func (m *Model) mlp(p *lm.Params, x *Node) *Node {
	x = m.actQuant(x)
	if m.o.FusedGateUp {
		gu := nn.Linear(x, p.Get("gate_up_proj.weight"), nil) // [B, T, 2I]
		n := m.o.Spec.Intermediate
		h := Mul(m.o.Act(SliceAxis(gu, -1, AxisRange(0, n))), SliceAxis(gu, -1, AxisRange(n, 2*n)))
		return nn.Linear(m.actQuant(h), p.Get("down_proj.weight"), nil)
	}
	b := m.o.MLPBias
	if m.o.UngatedMLP {
		h := nn.Linear(x, p.Get("up_proj.weight"), optional(p, b, "up_proj.bias"))
		if m.o.XIELU {
			h = nn.XIELU(h, p.Get("act_fn.alpha_p"), p.Get("act_fn.alpha_n"), p.Get("act_fn.beta"), p.Get("act_fn.eps"))
		} else {
			h = m.o.Act(h)
		}
		return nn.Linear(m.actQuant(h), p.Get("down_proj.weight"), optional(p, b, "down_proj.bias"))
	}
	if m.o.SubNorms || m.o.Spec.BitNet != nil { // BitNetMLP: down_proj(quant(ffn_sub_norm(act(gate_proj(x)) · up_proj(x))))
		h := Mul(m.o.Act(nn.Linear(x, p.Get("gate_proj.weight"), optional(p, b, "gate_proj.bias"))),
			nn.Linear(x, p.Get("up_proj.weight"), optional(p, b, "up_proj.bias")))
		if m.o.SubNorms {
			h = m.rmsNorm(h, p.Get("ffn_sub_norm.weight"))
		}
		return nn.Linear(m.actQuant(h), p.Get("down_proj.weight"), optional(p, b, "down_proj.bias"))
	}
	return nn.GatedMLP(x,
		p.Get("gate_proj.weight"), optional(p, b, "gate_proj.bias"),
		p.Get("up_proj.weight"), optional(p, b, "up_proj.bias"),
		p.Get("down_proj.weight"), optional(p, b, "down_proj.bias"),
		m.o.Act)
}

var _ lm.FinalWeighter = (*Model)(nil)

// Final implements lm.Finisher: the final norm, and with EmbedProj the
// projection out of the decoder (OPTDecoder's last_hidden_state, which
// the head multiplies), [..., EmbedProj].
func (m *Model) Final(w *lm.Params, x *Node) *Node {
	if !m.o.NoFinalNorm {
		x = m.norm(w, m.finalNorm(), x)
	}
	if m.o.EmbedProj > 0 {
		x = nn.Linear(x, w.Get("model.project_out.weight"), nil)
	}
	return x
}

// FinalWidth implements lm.FinalWidther: EmbedProj, or the hidden size.
func (m *Model) FinalWidth() int {
	if e := m.o.EmbedProj; e > 0 {
		return e
	}
	return m.o.Spec.Hidden
}

// Head implements lm.Model: the final norm and lm_head.
func (m *Model) Head(w *lm.Params, x *Node) *Node {
	x = m.Final(w, x)
	name := "lm_head.weight"
	if m.o.Spec.TieEmbeddings {
		name = "model.embed_tokens.weight"
	}
	logits := nn.Linear(x, w.Get(name), optional(w, m.o.HeadBias, "lm_head.bias")) // [B, V]
	if d := m.o.LogitsDivisor; d != 0 && d != 1 {
		logits = DivScalar(logits, d)
	}
	if c := m.o.LogitScale; c != 0 && c != 1 {
		logits = MulScalar(logits, c)
	}
	return logits
}
