package qwenref

import (
	"fmt"
	"math"
	"slices"

	"github.com/tputool/tputool/loader/safetensors"
)

// Qwen35 describes a Qwen3.5 text model (transformers'
// Qwen3_5ForConditionalGeneration, or Qwen3_5ForCausalLM with CausalLM).
type Qwen35 struct {
	Vocab, Hidden, Intermediate int
	// LayerTypes holds "linear_attention" or "full_attention" per layer.
	LayerTypes []string
	// Full-attention layers.
	Heads, KVHeads, HeadDim int
	RotaryFactor, Theta     float64
	// Gated DeltaNet layers.
	KHeads, VHeads, KDim, VDim, ConvKernel int
	Eps                                    float64
	Tied                                   bool
	// CausalLM selects the text-only class Qwen3_5ForCausalLM (flat config,
	// model.* names, no vision tower); otherwise the checkpoint is the
	// multimodal Qwen3_5ForConditionalGeneration (text_config, model.language_model.*
	// names, plus vision-tower tensors the text model skips and, without
	// MTP, three mtp.* stand-ins).
	CausalLM bool
	Seed     uint64
	// DType of the stored weights (default F32).
	DType safetensors.DType
	// Experts > 0 makes it Qwen3.5-MoE (Qwen3_5MoeForConditionalGeneration,
	// or Qwen3_5MoeForCausalLM with CausalLM): every layer's MLP is the
	// sparse block, TopK of Experts SwiGLU experts of MoEIntermediate
	// (always renormalised) plus a shared expert of SharedSize gated by
	// sigmoid(shared_expert_gate). Stacked writes the experts as the
	// official checkpoints hold them (mlp.experts.gate_up_proj [E, 2I, H],
	// mlp.experts.down_proj [E, H, I]); otherwise one tensor per expert, as
	// re-saves do.
	Experts, TopK, MoEIntermediate, SharedSize int
	Stacked                                    bool
	// MTP writes the whole multi-token-prediction head (mtp.*, top-level
	// names in both layouts, drawn after every other tensor so the rest
	// of the checkpoint keeps its values): mtp.fc [H, 2H], the (1+w)
	// norms mtp.pre_fc_norm_embedding, mtp.pre_fc_norm_hidden and
	// mtp.norm, and one full-attention decoder layer mtp.layers.0.* with
	// the model's MLP (dense, or the sparse block, stacked as the main
	// layers are). See MTPLogits and MTPDraft.
	MTP bool
	// Next writes the checkpoint as Qwen3-Next's (Qwen3NextForCausalLM,
	// model_type qwen3_next: Qwen3NextConfig's flat fields, model.*
	// names, the experts one tensor per expert as released, and, without
	// MTP, three mtp.* stand-ins; stacks with Stacked): each DeltaNet layer's in_proj_qkv and
	// in_proj_z fused into in_proj_qkvz and in_proj_b and in_proj_a into
	// in_proj_ba, their rows grouped by key head as
	// Qwen3NextGatedDeltaNet.fix_query_key_value_ordering splits them
	// (fuseNext). The values are those of the Qwen3.5 layout's draws.
	Next bool
	// MLPOnly (with Experts) are layers whose MLP is dense, of
	// Intermediate (Qwen3-Next's mlp_only_layers); KeepTopK leaves the
	// router's top-k probabilities unnormalised (norm_topk_prob false).
	// The config declares them with Next only.
	MLPOnly  []int
	KeepTopK bool
}

// sparse reports whether layer l's MLP is the sparse block; the MTP
// layer's is as layer 0's (vLLM numbers it 0).
func (c Qwen35) sparse(l int) bool {
	return c.Experts > 0 && !slices.Contains(c.MLPOnly, l)
}

// TinyQwen35MoE is TinyQwen35 with every MLP sparse: 6 experts of 12, top
// 2, and a shared expert of 20.
func TinyQwen35MoE() Qwen35 {
	c := TinyQwen35()
	c.Experts, c.TopK, c.MoEIntermediate, c.SharedSize, c.Seed = 6, 2, 12, 20, 36
	return c
}

// expertPrefixes are the layers' "….mlp.experts." name prefixes (MoE),
// the MTP layer's last when MTP.
func (c Qwen35) expertPrefixes() []string {
	var ps []string
	for l := range c.LayerTypes {
		if c.sparse(l) {
			ps = append(ps, fmt.Sprintf("%slayers.%d.mlp.experts.", c.prefix(), l))
		}
	}
	if c.MTP && c.sparse(0) {
		ps = append(ps, mtpLayer+"mlp.experts.")
	}
	return ps
}

// mtpPrefix and mtpLayer name the MTP head and its decoder layer, at the
// checkpoint's top level in both layouts.
const (
	mtpPrefix = "mtp."
	mtpLayer  = mtpPrefix + "layers.0."
)

// TinyQwen35 is a small Qwen3.5 with every feature on: 3:1 linear/full
// layers, more value than key heads in the DeltaNet, GQA and partial rotary
// embeddings in the gated attention.
func TinyQwen35() Qwen35 {
	return Qwen35{
		Vocab: 96, Hidden: 32, Intermediate: 48,
		LayerTypes: []string{"linear_attention", "linear_attention", "linear_attention", "full_attention",
			"linear_attention", "full_attention"},
		Heads: 4, KVHeads: 2, HeadDim: 16, RotaryFactor: 0.25, Theta: 10000,
		KHeads: 2, VHeads: 4, KDim: 8, VDim: 6, ConvKernel: 4,
		Eps: 1e-6, Seed: 35,
	}
}

func (c Qwen35) prefix() string {
	if c.CausalLM || c.Next {
		return "model."
	}
	return "model.language_model."
}

// Tensors lists the checkpoint tensors with the names of the real
// Qwen/Qwen3.5 checkpoints (model.safetensors.index.json): the text model
// under model.language_model. (model. with CausalLM), lm_head.weight,
// (multimodal layout only) a few model.visual.* tensors standing in for the
// vision tower, and either the whole MTP head (MTP) or, in the multimodal
// layout, three mtp.* stand-ins.
func (c Qwen35) Tensors() []Tensor {
	p := c.prefix()
	H := c.Hidden
	out := []Tensor{{p + "embed_tokens.weight", []int{c.Vocab, H}, "embed"}}
	for l, typ := range c.LayerTypes {
		out = append(out, c.layerTensors(fmt.Sprintf("%slayers.%d.", p, l), typ, c.sparse(l))...)
	}
	out = append(out, Tensor{p + "norm.weight", []int{H}, "norm1p"})
	if !c.Tied {
		out = append(out, Tensor{"lm_head.weight", []int{c.Vocab, H}, "linear"})
	}
	if c.Next && !c.MTP {
		out = append(out, c.mtpStandIns()...)
	}
	if !c.CausalLM && !c.Next {
		// Stand-ins for the vision tower (names from the real index, tiny
		// shapes).
		out = append(out,
			Tensor{"model.visual.patch_embed.proj.weight", []int{8, 3, 2, 2, 2}, "skip"},
			Tensor{"model.visual.patch_embed.proj.bias", []int{8}, "skip"},
			Tensor{"model.visual.pos_embed.weight", []int{4, 8}, "skip"},
			Tensor{"model.visual.blocks.0.attn.qkv.weight", []int{24, 8}, "skip"},
			Tensor{"model.visual.blocks.0.mlp.linear_fc1.weight", []int{16, 8}, "skip"},
			Tensor{"model.visual.merger.linear_fc2.weight", []int{H, 32}, "skip"},
		)
		if !c.MTP {
			out = append(out, c.mtpStandIns()...)
		}
	}
	if c.MTP {
		out = append(out,
			Tensor{mtpPrefix + "fc.weight", []int{H, 2 * H}, "linear"},
			Tensor{mtpPrefix + "pre_fc_norm_embedding.weight", []int{H}, "norm1p"},
			Tensor{mtpPrefix + "pre_fc_norm_hidden.weight", []int{H}, "norm1p"},
		)
		out = append(out, c.layerTensors(mtpLayer, "full_attention", c.sparse(0))...)
		out = append(out, Tensor{mtpPrefix + "norm.weight", []int{H}, "norm1p"})
	}
	return out
}

// mtpStandIns stand in for the MTP head of a checkpoint written without
// MTP (names of the real index, values the model must not read).
func (c Qwen35) mtpStandIns() []Tensor {
	H := c.Hidden
	return []Tensor{
		{mtpPrefix + "fc.weight", []int{H, 2 * H}, "skip"},
		{mtpPrefix + "norm.weight", []int{H}, "skip"},
		{mtpLayer + "self_attn.q_proj.weight", []int{2 * c.Heads * c.HeadDim, H}, "skip"},
	}
}

// layerTensors lists one decoder layer's tensors under lp ("….layers.N.")
// for typ "linear_attention" or "full_attention", its MLP the sparse
// block or dense.
func (c Qwen35) layerTensors(lp, typ string, sparse bool) []Tensor {
	H := c.Hidden
	keyDim, valueDim := c.KHeads*c.KDim, c.VHeads*c.VDim
	convDim := 2*keyDim + valueDim
	var out []Tensor
	add := func(name, init string, shape ...int) { out = append(out, Tensor{lp + name, shape, init}) }
	add("input_layernorm.weight", "norm1p", H)
	if typ == "linear_attention" {
		add("linear_attn.A_log", "alog", c.VHeads)
		add("linear_attn.conv1d.weight", "linear", convDim, 1, c.ConvKernel)
		add("linear_attn.dt_bias", "dtbias", c.VHeads)
		add("linear_attn.in_proj_a.weight", "linear", c.VHeads, H)
		add("linear_attn.in_proj_b.weight", "linear", c.VHeads, H)
		add("linear_attn.in_proj_qkv.weight", "linear", convDim, H)
		add("linear_attn.in_proj_z.weight", "linear", valueDim, H)
		add("linear_attn.norm.weight", "norm", c.VDim)
		add("linear_attn.out_proj.weight", "linear", H, valueDim)
	} else {
		add("self_attn.q_proj.weight", "linear", 2*c.Heads*c.HeadDim, H)
		add("self_attn.k_proj.weight", "linear", c.KVHeads*c.HeadDim, H)
		add("self_attn.v_proj.weight", "linear", c.KVHeads*c.HeadDim, H)
		add("self_attn.o_proj.weight", "linear", H, c.Heads*c.HeadDim)
		add("self_attn.q_norm.weight", "norm1p", c.HeadDim)
		add("self_attn.k_norm.weight", "norm1p", c.HeadDim)
	}
	if sparse {
		sparseBlockTensors(add, c.Experts, c.MoEIntermediate, c.SharedSize, H)
	} else {
		add("mlp.gate_proj.weight", "linear", c.Intermediate, H)
		add("mlp.up_proj.weight", "linear", c.Intermediate, H)
		add("mlp.down_proj.weight", "linear", H, c.Intermediate)
	}
	add("post_attention_layernorm.weight", "norm1p", H)
	return out
}

// ConfigJSON returns the config.json, in the layout of the real
// checkpoints (Qwen/Qwen3.5-9B: text_config nested in the multimodal
// config, rope_parameters with mrope fields; with Next,
// Qwen/Qwen3-Next-80B-A3B-Instruct's flat fields).
func (c Qwen35) ConfigJSON() map[string]any {
	if c.Next {
		return c.nextConfig()
	}
	text := map[string]any{
		"model_type":              "qwen3_5_text",
		"vocab_size":              c.Vocab,
		"hidden_size":             c.Hidden,
		"intermediate_size":       c.Intermediate,
		"num_hidden_layers":       len(c.LayerTypes),
		"layer_types":             c.LayerTypes,
		"full_attention_interval": 4,
		"num_attention_heads":     c.Heads,
		"num_key_value_heads":     c.KVHeads,
		"head_dim":                c.HeadDim,
		"attention_bias":          false,
		"attn_output_gate":        true,
		"hidden_act":              "silu",
		"rms_norm_eps":            c.Eps,
		"max_position_embeddings": 512,
		"linear_conv_kernel_dim":  c.ConvKernel,
		"linear_key_head_dim":     c.KDim,
		"linear_value_head_dim":   c.VDim,
		"linear_num_key_heads":    c.KHeads,
		"linear_num_value_heads":  c.VHeads,
		"mamba_ssm_dtype":         "float32",
		"mtp_num_hidden_layers":   1,
		"eos_token_id":            2,
		"tie_word_embeddings":     c.Tied,
		"rope_parameters": map[string]any{
			"mrope_interleaved":     true,
			"mrope_section":         []int{1, 1, 0},
			"rope_type":             "default",
			"rope_theta":            c.Theta,
			"partial_rotary_factor": c.RotaryFactor,
		},
		"dtype": "float32",
	}
	arch, modelType := "Qwen3_5", "qwen3_5"
	if c.Experts > 0 { // Qwen3.5-35B-A3B's fields
		arch, modelType = "Qwen3_5Moe", "qwen3_5_moe"
		delete(text, "intermediate_size")
		text["model_type"] = "qwen3_5_moe_text"
		text["num_experts"] = c.Experts
		text["num_experts_per_tok"] = c.TopK
		text["moe_intermediate_size"] = c.MoEIntermediate
		text["shared_expert_intermediate_size"] = c.SharedSize
		text["router_aux_loss_coef"] = 0.001
	}
	if c.CausalLM {
		text["architectures"] = []string{arch + "ForCausalLM"}
		return text
	}
	return map[string]any{
		"architectures":       []string{arch + "ForConditionalGeneration"},
		"model_type":          modelType,
		"image_token_id":      90,
		"video_token_id":      91,
		"tie_word_embeddings": c.Tied,
		"text_config":         text,
		"vision_config": map[string]any{
			"model_type": "qwen3_5", "depth": 1, "hidden_size": 8, "num_heads": 1,
			"out_hidden_size": c.Hidden, "patch_size": 2, "temporal_patch_size": 2, "spatial_merge_size": 2,
		},
	}
}

// nextConfig is Qwen3-Next's config.json (the fields of
// Qwen/Qwen3-Next-80B-A3B-Instruct's, sizes c's).
func (c Qwen35) nextConfig() map[string]any {
	j := map[string]any{
		"architectures":                   []string{"Qwen3NextForCausalLM"},
		"model_type":                      "qwen3_next",
		"vocab_size":                      c.Vocab,
		"hidden_size":                     c.Hidden,
		"intermediate_size":               c.Intermediate,
		"num_hidden_layers":               len(c.LayerTypes),
		"layer_types":                     c.LayerTypes,
		"full_attention_interval":         4,
		"num_attention_heads":             c.Heads,
		"num_key_value_heads":             c.KVHeads,
		"head_dim":                        c.HeadDim,
		"attention_bias":                  false,
		"attention_dropout":               0.0,
		"hidden_act":                      "silu",
		"rms_norm_eps":                    c.Eps,
		"max_position_embeddings":         512,
		"linear_conv_kernel_dim":          c.ConvKernel,
		"linear_key_head_dim":             c.KDim,
		"linear_value_head_dim":           c.VDim,
		"linear_num_key_heads":            c.KHeads,
		"linear_num_value_heads":          c.VHeads,
		"partial_rotary_factor":           c.RotaryFactor,
		"rope_theta":                      c.Theta,
		"rope_scaling":                    nil,
		"num_experts":                     c.Experts,
		"num_experts_per_tok":             c.TopK,
		"moe_intermediate_size":           c.MoEIntermediate,
		"shared_expert_intermediate_size": c.SharedSize,
		"decoder_sparse_step":             1,
		"mlp_only_layers":                 append([]int{}, c.MLPOnly...),
		"norm_topk_prob":                  !c.KeepTopK,
		"output_router_logits":            false,
		"router_aux_loss_coef":            0.001,
		"bos_token_id":                    1,
		"eos_token_id":                    2,
		"tie_word_embeddings":             c.Tied,
		"use_cache":                       true,
		"use_sliding_window":              false,
		"torch_dtype":                     "float32",
	}
	if c.Experts == 0 {
		for _, k := range []string{"num_experts_per_tok", "moe_intermediate_size", "shared_expert_intermediate_size", "mlp_only_layers", "norm_topk_prob"} {
			delete(j, k)
		}
	}
	return j
}

// Write writes the checkpoint to dir.
func (c Qwen35) Write(dir string) error {
	if c.Next {
		return c.writeNext(dir)
	}
	if c.Experts > 0 && c.Stacked {
		return writeStacked(dir, c.ConfigJSON(), c.Tensors(), c.Seed, c.DType, c.expertPrefixes(), c.Experts, c.MoEIntermediate, c.Hidden)
	}
	return writeCheckpoint(dir, c.ConfigJSON(), c.Tensors(), c.Seed, c.DType)
}

// Qwen35Model is a description plus its weights.
type Qwen35Model struct {
	C Qwen35
	W Weights
}

// LoadQwen35 reads a checkpoint written by Write (or any with the same
// names).
func LoadQwen35(dir string, c Qwen35) (*Qwen35Model, error) {
	w, err := LoadWeights(dir)
	if err != nil {
		return nil, err
	}
	if c.Experts > 0 {
		unstack(w, c.expertPrefixes(), c.Experts, c.MoEIntermediate, c.Hidden)
	}
	if c.Next {
		c.unfuseNext(w)
	}
	return &Qwen35Model{C: c, W: w}, nil
}

// Logits runs the whole sequence and returns the logits after every token:
// lm_head (or the tied embedding) applied to Final.
func (m *Qwen35Model) Logits(tokens []int) [][]float64 {
	out := m.Final(tokens)
	for t := range out {
		out[t] = m.head(out[t])
	}
	return out
}

// Final runs the whole sequence and returns the main model's final hidden
// state at every position after its final norm (model.norm): what lm_head
// multiplies, and the hidden state the MTP head reads.
func (m *Qwen35Model) Final(tokens []int) [][]float64 {
	c, w := m.C, m.W
	p := c.prefix()
	x := make([][]float64, len(tokens))
	for t, id := range tokens {
		x[t] = m.embed(id)
	}
	for l, typ := range c.LayerTypes {
		m.layer(fmt.Sprintf("%slayers.%d.", p, l), typ, c.sparse(l), x)
	}
	for t := range x {
		x[t] = rmsnorm(x[t], w.get(p+"norm.weight"), c.Eps, true)
	}
	return x
}

// embed returns a copy of token id's embedding row.
func (m *Qwen35Model) embed(id int) []float64 {
	H := m.C.Hidden
	return append([]float64(nil), m.W.get(m.C.prefix() + "embed_tokens.weight")[id*H:(id+1)*H]...)
}

// head is lm_head, or the embedding with Tied.
func (m *Qwen35Model) head(x []float64) []float64 {
	name := "lm_head.weight"
	if m.C.Tied {
		name = m.C.prefix() + "embed_tokens.weight"
	}
	return linear(x, m.W.get(name), nil, m.C.Vocab)
}

// layer runs the decoder layer under lp ("….layers.N.") of kind typ on the
// residual stream x [T][H], in place: x += mixer(input_layernorm(x)), then
// x += mlp(post_attention_layernorm(x)), the MLP dense or (sparse) the
// sparse block.
func (m *Qwen35Model) layer(lp, typ string, sparse bool, x [][]float64) {
	c, w := m.C, m.W
	h := make([][]float64, len(x))
	for t := range x {
		h[t] = rmsnorm(x[t], w.get(lp+"input_layernorm.weight"), c.Eps, true)
	}
	var mixed [][]float64
	if typ == "linear_attention" {
		mixed = m.deltaNet(lp+"linear_attn.", h)
	} else {
		mixed = m.gatedAttention(lp+"self_attn.", h)
	}
	for t := range x {
		for i := range x[t] {
			x[t][i] += mixed[t][i]
		}
		hn := rmsnorm(x[t], w.get(lp+"post_attention_layernorm.weight"), c.Eps, true)
		var mlp []float64
		if sparse {
			mlp = moeBlock(w, lp+"mlp.", hn, c.Experts, c.TopK, c.MoEIntermediate, c.SharedSize, !c.KeepTopK)
		} else {
			mlp = swiglu(w, lp+"mlp.", hn, c.Intermediate)
		}
		for i := range x[t] {
			x[t][i] += mlp[i]
		}
	}
}

// MTPLogits runs the multi-token-prediction head over the text (MTP) and
// returns its logits at MTP positions i = 0..T-2, each predicting token
// i+2. Position i reads the embedding of token i+1 and the main model's
// final hidden state at i (Final), each (1+w)-RMSNormed
// (pre_fc_norm_embedding, pre_fc_norm_hidden), concatenated in that order
// and projected by mtp.fc; then the decoder layer mtp.layers.0 (gated
// attention, causal over MTP positions 0..i, rotary position i), mtp.norm
// and lm_head. This is vLLM's Qwen3_5MultiTokenPredictor as its proposer
// runs it: the text's last token is the one the main model just sampled.
func (m *Qwen35Model) MTPLogits(tokens []int) [][]float64 {
	if len(tokens) < 2 {
		panic("qwenref: MTPLogits needs at least two tokens")
	}
	out := m.mtp(tokens[1:], m.Final(tokens)[:len(tokens)-1])
	for i := range out {
		out[i] = m.head(out[i])
	}
	return out
}

// MTPLogitsFrom is MTPLogits of a head that begins at position from: its
// own attention sees the positions from there on (the model's hidden
// states still come from the whole text). Its rows are positions from to
// T-2.
func (m *Qwen35Model) MTPLogitsFrom(tokens []int, from int) [][]float64 {
	if from < 0 || len(tokens)-from < 2 {
		panic("qwenref: MTPLogitsFrom needs two tokens from its first position on")
	}
	out := m.mtp(tokens[from+1:], m.Final(tokens)[from:len(tokens)-1])
	for i := range out {
		out[i] = m.head(out[i])
	}
	return out
}

// MTPDraft returns k greedy draft tokens after the text, chained as vLLM's
// proposer drafts: the last MTP position (T-2) gives the first, argmax of
// its logits (the lowest id on ties); each further position takes the
// previous draft's embedding and the head's own previous output (after
// mtp.norm) in place of the main model's hidden state.
func (m *Qwen35Model) MTPDraft(tokens []int, k int) []int {
	if len(tokens) < 2 {
		panic("qwenref: MTPDraft needs at least two tokens")
	}
	ids := append([]int(nil), tokens[1:]...)
	hidden := m.Final(tokens)[:len(tokens)-1]
	var drafts []int
	for len(drafts) < k {
		// No cache: the whole head reruns; earlier positions are causal
		// and do not change.
		out := m.mtp(ids, hidden)
		last := out[len(out)-1]
		d := argmax(m.head(last))
		drafts = append(drafts, d)
		ids = append(ids, d)
		hidden = append(hidden, last)
	}
	return drafts
}

// mtp runs the MTP head on positions 0..len(ids)-1, position i reading
// token ids[i] and hidden state hidden[i], and returns its outputs after
// mtp.norm.
func (m *Qwen35Model) mtp(ids []int, hidden [][]float64) [][]float64 {
	c, w := m.C, m.W
	x := make([][]float64, len(ids))
	for i, id := range ids {
		e := rmsnorm(m.embed(id), w.get(mtpPrefix+"pre_fc_norm_embedding.weight"), c.Eps, true)
		h := rmsnorm(hidden[i], w.get(mtpPrefix+"pre_fc_norm_hidden.weight"), c.Eps, true)
		x[i] = linear(append(e, h...), w.get(mtpPrefix+"fc.weight"), nil, c.Hidden)
	}
	m.layer(mtpLayer, "full_attention", c.sparse(0), x)
	for i := range x {
		x[i] = rmsnorm(x[i], w.get(mtpPrefix+"norm.weight"), c.Eps, true)
	}
	return x
}

// argmax is the index of the largest value, the lowest on ties.
func argmax(x []float64) int {
	best := 0
	for i, v := range x {
		if v > x[best] {
			best = i
		}
	}
	return best
}

// gatedAttention is Qwen3_5Attention: q_proj yields a query and a gate per
// head, (1+w) q/k norms, partial rotary embedding, causal GQA attention,
// output times sigmoid(gate), o_proj.
func (m *Qwen35Model) gatedAttention(p string, h [][]float64) [][]float64 {
	c, w := m.C, m.W
	D := c.HeadDim
	rot := int(float64(D) * c.RotaryFactor)
	T := len(h)
	q, gate := make([][]float64, T), make([][]float64, T)
	k, v := make([][]float64, T), make([][]float64, T)
	for t := range h {
		qg := linear(h[t], w.get(p+"q_proj.weight"), nil, 2*c.Heads*D)
		q[t], gate[t] = make([]float64, c.Heads*D), make([]float64, c.Heads*D)
		for hd := 0; hd < c.Heads; hd++ {
			copy(q[t][hd*D:(hd+1)*D], qg[hd*2*D:hd*2*D+D])
			copy(gate[t][hd*D:(hd+1)*D], qg[hd*2*D+D:(hd+1)*2*D])
			head := rmsnorm(q[t][hd*D:(hd+1)*D], w.get(p+"q_norm.weight"), c.Eps, true)
			ropeHead(head, t, c.Theta, rot)
			copy(q[t][hd*D:], head)
		}
		k[t] = linear(h[t], w.get(p+"k_proj.weight"), nil, c.KVHeads*D)
		v[t] = linear(h[t], w.get(p+"v_proj.weight"), nil, c.KVHeads*D)
		for hd := 0; hd < c.KVHeads; hd++ {
			head := rmsnorm(k[t][hd*D:(hd+1)*D], w.get(p+"k_norm.weight"), c.Eps, true)
			ropeHead(head, t, c.Theta, rot)
			copy(k[t][hd*D:], head)
		}
	}
	att := attend(q, k, v, c.Heads, c.KVHeads, D)
	out := make([][]float64, T)
	for t := range att {
		for i := range att[t] {
			att[t][i] *= sigmoid(gate[t][i])
		}
		out[t] = linear(att[t], w.get(p+"o_proj.weight"), nil, c.Hidden)
	}
	return out
}

// deltaNet is Qwen3_5GatedDeltaNet in its recurrent form: projections,
// causal depthwise convolution (zero history) with SiLU, L2-normalized and
// head-repeated q/k, q scaled by 1/sqrt(Dk), β = sigmoid(b),
// g = -exp(A_log)·softplus(a + dt_bias), the gated delta rule token by
// token from a zero state, the gated RMSNorm with silu(z), out_proj.
func (m *Qwen35Model) deltaNet(p string, h [][]float64) [][]float64 {
	c, w := m.C, m.W
	T := len(h)
	keyDim, valueDim := c.KHeads*c.KDim, c.VHeads*c.VDim
	convDim := 2*keyDim + valueDim
	K := c.ConvKernel
	rep := c.VHeads / c.KHeads
	mixed := make([][]float64, T)
	z, a, b := make([][]float64, T), make([][]float64, T), make([][]float64, T)
	for t := range h {
		mixed[t] = linear(h[t], w.get(p+"in_proj_qkv.weight"), nil, convDim)
		z[t] = linear(h[t], w.get(p+"in_proj_z.weight"), nil, valueDim)
		b[t] = linear(h[t], w.get(p+"in_proj_b.weight"), nil, c.VHeads)
		a[t] = linear(h[t], w.get(p+"in_proj_a.weight"), nil, c.VHeads)
	}
	conv := w.get(p + "conv1d.weight") // [convDim, 1, K]
	aLog, dtBias := w.get(p+"A_log"), w.get(p+"dt_bias")
	normW := w.get(p + "norm.weight")
	state := make([][]float64, c.VHeads) // per value head, [Dk][Dv] row-major
	for hv := range state {
		state[hv] = make([]float64, c.KDim*c.VDim)
	}
	l2 := func(x []float64) []float64 {
		ss := 0.0
		for _, v := range x {
			ss += v * v
		}
		inv := 1 / math.Sqrt(ss+1e-6)
		out := make([]float64, len(x))
		for i, v := range x {
			out[i] = v * inv
		}
		return out
	}
	out := make([][]float64, T)
	for t := 0; t < T; t++ {
		cv := make([]float64, convDim)
		for ch := 0; ch < convDim; ch++ {
			s := 0.0
			for j := 0; j < K; j++ {
				if src := t + j - (K - 1); src >= 0 {
					s += conv[ch*K+j] * mixed[src][ch]
				}
			}
			cv[ch] = silu(s)
		}
		core := make([]float64, valueDim)
		for hv := 0; hv < c.VHeads; hv++ {
			hk := hv / rep
			q := l2(cv[hk*c.KDim : (hk+1)*c.KDim])
			k := l2(cv[keyDim+hk*c.KDim : keyDim+(hk+1)*c.KDim])
			v := cv[2*keyDim+hv*c.VDim : 2*keyDim+(hv+1)*c.VDim]
			scale := 1 / math.Sqrt(float64(c.KDim))
			beta := sigmoid(b[t][hv])
			g := -math.Exp(aLog[hv]) * softplus(a[t][hv]+dtBias[hv])
			S := state[hv]
			decay := math.Exp(g)
			for i := range S {
				S[i] *= decay
			}
			for j := 0; j < c.VDim; j++ {
				mem := 0.0
				for i := 0; i < c.KDim; i++ {
					mem += S[i*c.VDim+j] * k[i]
				}
				delta := (v[j] - mem) * beta
				for i := 0; i < c.KDim; i++ {
					S[i*c.VDim+j] += k[i] * delta
				}
			}
			o := core[hv*c.VDim : (hv+1)*c.VDim]
			for j := 0; j < c.VDim; j++ {
				s := 0.0
				for i := 0; i < c.KDim; i++ {
					s += S[i*c.VDim+j] * q[i] * scale
				}
				o[j] = s
			}
			// Gated RMSNorm: norm(o) * w * silu(z).
			normed := rmsnorm(o, normW, c.Eps, false)
			for j := range o {
				o[j] = normed[j] * silu(z[t][hv*c.VDim+j])
			}
		}
		out[t] = linear(core, w.get(p+"out_proj.weight"), nil, c.Hidden)
	}
	return out
}
