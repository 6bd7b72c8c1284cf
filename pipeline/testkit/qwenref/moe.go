package qwenref

import (
	"fmt"
	"strings"

	"github.com/tputool/tputool/loader/safetensors"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
)

// MoE describes a Qwen3MoeForCausalLM, or with Qwen2 a Qwen2MoeForCausalLM
// (q/k/v biases instead of q/k norms, and a gated shared expert).
type MoE struct {
	Qwen2                                      bool
	Vocab, Hidden, Intermediate, Layers        int
	Heads, KVHeads, HeadDim                    int
	Experts, TopK, MoEIntermediate, SharedSize int
	NormTopK                                   bool
	// SparseStep and MLPOnly select the MoE layers as transformers does:
	// layer i is sparse when i is not in MLPOnly and (i+1) % SparseStep == 0.
	SparseStep int
	MLPOnly    []int
	Theta, Eps float64
	Tied       bool
	Seed       uint64
	DType      safetensors.DType
	// MaxPositions is max_position_embeddings (default 512).
	MaxPositions int
	// Stacked writes each sparse layer's experts as transformers v5 does
	// (Qwen3MoeExperts): mlp.experts.gate_up_proj [E, 2I, H] (expert e's
	// gate rows, then its up rows) and mlp.experts.down_proj [E, H, I],
	// holding the same values as the per-expert layout.
	Stacked bool
}

// TinyQwen3MoE is a small Qwen3-MoE with a dense first layer, 8 experts and
// top-2 renormalized routing.
func TinyQwen3MoE() MoE {
	return MoE{
		Vocab: 96, Hidden: 32, Intermediate: 48, Layers: 3, Heads: 4, KVHeads: 2, HeadDim: 16,
		Experts: 8, TopK: 2, MoEIntermediate: 24, NormTopK: true, SparseStep: 1, MLPOnly: []int{0},
		Theta: 1e6, Eps: 1e-6, Seed: 30,
	}
}

// TinyQwen2MoE is a small Qwen2-MoE: shared expert, top-3 of 6 without
// renormalization, MoE on every second layer.
func TinyQwen2MoE() MoE {
	return MoE{
		Qwen2: true,
		Vocab: 96, Hidden: 32, Intermediate: 40, Layers: 4, Heads: 4, KVHeads: 4, HeadDim: 8,
		Experts: 6, TopK: 3, MoEIntermediate: 16, SharedSize: 40, SparseStep: 2,
		Theta: 10000, Eps: 1e-6, Tied: true, Seed: 20,
	}
}

// BenchMoE is the benchmark model: hidden 512, 64 experts of 256, top 8,
// 4 layers; the experts are 96% of the weights.
func BenchMoE() MoE {
	return MoE{
		Vocab: 4096, Hidden: 512, Intermediate: 1024, Layers: 4, Heads: 8, KVHeads: 4, HeadDim: 64,
		Experts: 64, TopK: 8, MoEIntermediate: 256, NormTopK: true, SparseStep: 1,
		Theta: 1e6, Eps: 1e-6, Tied: true, Seed: 64, MaxPositions: 4096,
	}
}

// Sparse reports whether layer i has the MoE block.
func (c MoE) Sparse(i int) bool {
	for _, l := range c.MLPOnly {
		if l == i {
			return false
		}
	}
	step := c.SparseStep
	if step == 0 {
		step = 1
	}
	return c.Experts > 0 && (i+1)%step == 0
}

// Tensors lists the checkpoint tensors with the names of the real Qwen
// MoE checkpoints (model.layers.N.mlp.gate.weight,
// model.layers.N.mlp.experts.E.{gate,up,down}_proj.weight,
// model.layers.N.mlp.shared_expert*.weight).
func (c MoE) Tensors() []Tensor {
	H, D := c.Hidden, c.HeadDim
	out := []Tensor{{"model.embed_tokens.weight", []int{c.Vocab, H}, "embed"}}
	for l := 0; l < c.Layers; l++ {
		p := fmt.Sprintf("model.layers.%d.", l)
		add := func(name, init string, shape ...int) { out = append(out, Tensor{p + name, shape, init}) }
		add("input_layernorm.weight", "norm", H)
		add("self_attn.q_proj.weight", "linear", c.Heads*D, H)
		add("self_attn.k_proj.weight", "linear", c.KVHeads*D, H)
		add("self_attn.v_proj.weight", "linear", c.KVHeads*D, H)
		add("self_attn.o_proj.weight", "linear", H, c.Heads*D)
		if c.Qwen2 {
			add("self_attn.q_proj.bias", "bias", c.Heads*D)
			add("self_attn.k_proj.bias", "bias", c.KVHeads*D)
			add("self_attn.v_proj.bias", "bias", c.KVHeads*D)
		} else {
			add("self_attn.q_norm.weight", "norm", D)
			add("self_attn.k_norm.weight", "norm", D)
		}
		add("post_attention_layernorm.weight", "norm", H)
		if !c.Sparse(l) {
			add("mlp.gate_proj.weight", "linear", c.Intermediate, H)
			add("mlp.up_proj.weight", "linear", c.Intermediate, H)
			add("mlp.down_proj.weight", "linear", H, c.Intermediate)
			continue
		}
		sparseBlockTensors(add, c.Experts, c.MoEIntermediate, c.SharedSize, H)
	}
	out = append(out, Tensor{"model.norm.weight", []int{H}, "norm"})
	if !c.Tied {
		out = append(out, Tensor{"lm_head.weight", []int{c.Vocab, H}, "linear"})
	}
	return out
}

// sparseBlockTensors adds a Qwen sparse MoE block's tensors, named
// relative to the layer as the per-expert checkpoints name them: the
// router mlp.gate.weight, mlp.experts.E.{gate,up,down}_proj.weight, and
// when shared > 0 the shared expert and its gate.
func sparseBlockTensors(add func(name, init string, shape ...int), experts, inter, shared, hidden int) {
	add("mlp.gate.weight", "router", experts, hidden)
	for e := 0; e < experts; e++ {
		add(fmt.Sprintf("mlp.experts.%d.gate_proj.weight", e), "linear", inter, hidden)
		add(fmt.Sprintf("mlp.experts.%d.up_proj.weight", e), "linear", inter, hidden)
		add(fmt.Sprintf("mlp.experts.%d.down_proj.weight", e), "linear", hidden, inter)
	}
	if shared > 0 {
		add("mlp.shared_expert.gate_proj.weight", "linear", shared, hidden)
		add("mlp.shared_expert.up_proj.weight", "linear", shared, hidden)
		add("mlp.shared_expert.down_proj.weight", "linear", hidden, shared)
		add("mlp.shared_expert_gate.weight", "linear", 1, hidden)
	}
}

// ConfigJSON returns the config.json (the fields of the real
// Qwen/Qwen3-30B-A3B and Qwen/Qwen1.5-MoE-A2.7B configs).
func (c MoE) ConfigJSON() map[string]any {
	maxPos := c.MaxPositions
	if maxPos == 0 {
		maxPos = 512
	}
	mlpOnly := c.MLPOnly
	if mlpOnly == nil {
		mlpOnly = []int{}
	}
	j := map[string]any{
		"vocab_size":              c.Vocab,
		"hidden_size":             c.Hidden,
		"intermediate_size":       c.Intermediate,
		"num_hidden_layers":       c.Layers,
		"num_attention_heads":     c.Heads,
		"num_key_value_heads":     c.KVHeads,
		"head_dim":                c.HeadDim,
		"hidden_act":              "silu",
		"max_position_embeddings": maxPos,
		"rms_norm_eps":            c.Eps,
		"rope_theta":              c.Theta,
		"rope_scaling":            nil,
		"tie_word_embeddings":     c.Tied,
		"num_experts":             c.Experts,
		"num_experts_per_tok":     c.TopK,
		"moe_intermediate_size":   c.MoEIntermediate,
		"norm_topk_prob":          c.NormTopK,
		"decoder_sparse_step":     max(c.SparseStep, 1),
		"mlp_only_layers":         mlpOnly,
		"use_sliding_window":      false,
		"sliding_window":          nil,
		"bos_token_id":            1,
		"eos_token_id":            2,
		"torch_dtype":             "float32",
	}
	if c.Qwen2 {
		j["architectures"] = []string{"Qwen2MoeForCausalLM"}
		j["model_type"] = "qwen2_moe"
		j["shared_expert_intermediate_size"] = c.SharedSize
		j["qkv_bias"] = true
	} else {
		j["architectures"] = []string{"Qwen3MoeForCausalLM"}
		j["model_type"] = "qwen3_moe"
		j["attention_bias"] = false
	}
	return j
}

// Write writes the checkpoint to dir.
func (c MoE) Write(dir string) error {
	if !c.Stacked {
		return writeCheckpoint(dir, c.ConfigJSON(), c.Tensors(), c.Seed, c.DType)
	}
	return writeStacked(dir, c.ConfigJSON(), c.Tensors(), c.Seed, c.DType, c.expertPrefixes(), c.Experts, c.MoEIntermediate, c.Hidden)
}

// expertPrefixes are the sparse layers' "….mlp.experts." name prefixes.
func (c MoE) expertPrefixes() []string {
	var ps []string
	for l := 0; l < c.Layers; l++ {
		if c.Sparse(l) {
			ps = append(ps, fmt.Sprintf("model.layers.%d.mlp.experts.", l))
		}
	}
	return ps
}

// writeStacked writes tensors as writeCheckpoint would (the same random
// draws), except that the per-expert tensors under each prefix of
// expertPrefixes are written as transformers v5 stacks them:
// PREFIXgate_up_proj [E, 2I, H] (each expert's gate rows, then its up
// rows) and PREFIXdown_proj [E, H, I].
func writeStacked(dir string, config map[string]any, tensors []Tensor, seed uint64, dtype safetensors.DType,
	expertPrefixes []string, experts, inter, hidden int) error {
	if dtype == "" {
		dtype = safetensors.F32
	}
	r := lmckpt.NewRand(seed)
	vals := map[string][]float32{}
	var ts []safetensors.Tensor
	for _, t := range tensors { // the same draws as the per-expert layout
		v := fill(r, t)
		if !strings.Contains(t.Name, ".mlp.experts.") {
			st, err := safetensors.Float32Tensor(t.Name, dtype, t.Shape, v)
			if err != nil {
				return fmt.Errorf("tensor %s: %w", t.Name, err)
			}
			ts = append(ts, st)
			continue
		}
		vals[t.Name] = v
	}
	H, I := hidden, inter
	for _, p := range expertPrefixes {
		gateUp, down := stack(vals, p, experts)
		for _, t := range []struct {
			name  string
			shape []int
			v     []float32
		}{{p + "gate_up_proj", []int{experts, 2 * I, H}, gateUp}, {p + "down_proj", []int{experts, H, I}, down}} {
			st, err := safetensors.Float32Tensor(t.name, dtype, t.shape, t.v)
			if err != nil {
				return fmt.Errorf("tensor %s: %w", t.name, err)
			}
			ts = append(ts, st)
		}
	}
	return lmckpt.WriteCheckpoint(dir, config, ts)
}

// stack is the v5 stacks of the per-expert tensors under prefix p in
// vals: gate_up_proj (each expert's gate rows, then its up rows) and
// down_proj, flat.
func stack(vals map[string][]float32, p string, experts int) (gateUp, down []float32) {
	for e := 0; e < experts; e++ {
		q := fmt.Sprintf("%s%d.", p, e)
		gateUp = append(append(gateUp, vals[q+"gate_proj.weight"]...), vals[q+"up_proj.weight"]...)
		down = append(down, vals[q+"down_proj.weight"]...)
	}
	return gateUp, down
}

// unstack splits v5 expert stacks in w into the per-expert tensors the
// references read (the inverse of writeStacked).
func unstack(w Weights, expertPrefixes []string, experts, inter, hidden int) {
	for _, p := range expertPrefixes {
		lmckpt.Unstack(w, p, p, lm.QwenExperts, experts, inter, hidden)
	}
}

// MoEModel is a description plus its weights.
type MoEModel struct {
	C MoE
	W Weights
}

// LoadMoE reads a checkpoint written by Write.
func LoadMoE(dir string, c MoE) (*MoEModel, error) {
	w, err := LoadWeights(dir)
	if err != nil {
		return nil, err
	}
	unstack(w, c.expertPrefixes(), c.Experts, c.MoEIntermediate, c.Hidden)
	return &MoEModel{C: c, W: w}, nil
}

// Logits runs the whole sequence and returns the logits after every token.
func (m *MoEModel) Logits(tokens []int) [][]float64 {
	c, w := m.C, m.W
	T, H, D := len(tokens), c.Hidden, c.HeadDim
	x := make([][]float64, T)
	emb := w.get("model.embed_tokens.weight")
	for t, id := range tokens {
		x[t] = append([]float64(nil), emb[id*H:(id+1)*H]...)
	}
	bias := func(name string) []float64 {
		if !c.Qwen2 {
			return nil
		}
		return w.get(name)
	}
	for l := 0; l < c.Layers; l++ {
		p := fmt.Sprintf("model.layers.%d.", l)
		q, k, v := make([][]float64, T), make([][]float64, T), make([][]float64, T)
		for t := range x {
			h := rmsnorm(x[t], w.get(p+"input_layernorm.weight"), c.Eps, false)
			q[t] = linear(h, w.get(p+"self_attn.q_proj.weight"), bias(p+"self_attn.q_proj.bias"), c.Heads*D)
			k[t] = linear(h, w.get(p+"self_attn.k_proj.weight"), bias(p+"self_attn.k_proj.bias"), c.KVHeads*D)
			v[t] = linear(h, w.get(p+"self_attn.v_proj.weight"), bias(p+"self_attn.v_proj.bias"), c.KVHeads*D)
			for hd := 0; hd < c.Heads; hd++ {
				head := q[t][hd*D : (hd+1)*D]
				if !c.Qwen2 {
					copy(head, rmsnorm(head, w.get(p+"self_attn.q_norm.weight"), c.Eps, false))
				}
				ropeHead(head, t, c.Theta, D)
			}
			for hd := 0; hd < c.KVHeads; hd++ {
				head := k[t][hd*D : (hd+1)*D]
				if !c.Qwen2 {
					copy(head, rmsnorm(head, w.get(p+"self_attn.k_norm.weight"), c.Eps, false))
				}
				ropeHead(head, t, c.Theta, D)
			}
		}
		att := attend(q, k, v, c.Heads, c.KVHeads, D)
		for t := range x {
			o := linear(att[t], w.get(p+"self_attn.o_proj.weight"), nil, H)
			for i := range o {
				x[t][i] += o[i]
			}
			h := rmsnorm(x[t], w.get(p+"post_attention_layernorm.weight"), c.Eps, false)
			var mlp []float64
			if c.Sparse(l) {
				mlp = m.sparseBlock(p+"mlp.", h)
			} else {
				mlp = swiglu(w, p+"mlp.", h, c.Intermediate)
			}
			for i := range mlp {
				x[t][i] += mlp[i]
			}
		}
	}
	head := "lm_head.weight"
	if c.Tied {
		head = "model.embed_tokens.weight"
	}
	out := make([][]float64, T)
	for t := range x {
		out[t] = linear(rmsnorm(x[t], w.get("model.norm.weight"), c.Eps, false), w.get(head), nil, c.Vocab)
	}
	return out
}

// sparseBlock is the MoE block on one token: Σ_j w_j expert_{e_j}(h), plus
// sigmoid(shared_expert_gate·h) shared_expert(h) for Qwen2-MoE.
func (m *MoEModel) sparseBlock(p string, h []float64) []float64 {
	c := m.C
	return moeBlock(m.W, p, h, c.Experts, c.TopK, c.MoEIntermediate, c.SharedSize, c.NormTopK)
}

// moeBlock is a Qwen sparse MoE block (under prefix p, "….mlp.") on one
// token h: the router's softmax, the topK largest probabilities (lowest
// index on ties), renormalised when norm, then Σ_j w_j expert_{e_j}(h) over
// SwiGLU experts of width inter, plus, when shared > 0,
// sigmoid(shared_expert_gate·h) · shared_expert(h).
func moeBlock(w Weights, p string, h []float64, experts, topK, inter, shared int, norm bool) []float64 {
	probs := linear(h, w.get(p+"gate.weight"), nil, experts)
	softmax(probs)
	taken := make([]bool, experts)
	ids := make([]int, topK)
	ws := make([]float64, topK)
	sum := 0.0
	for j := range ids {
		best := -1
		for e, q := range probs {
			if !taken[e] && (best < 0 || q > probs[best]) {
				best = e
			}
		}
		taken[best] = true
		ids[j], ws[j] = best, probs[best]
		sum += probs[best]
	}
	if norm {
		for j := range ws {
			ws[j] /= sum
		}
	}
	out := make([]float64, len(h))
	for j, e := range ids {
		y := swiglu(w, fmt.Sprintf("%sexperts.%d.", p, e), h, inter)
		for i := range out {
			out[i] += ws[j] * y[i]
		}
	}
	if shared > 0 {
		y := swiglu(w, p+"shared_expert.", h, shared)
		g := sigmoid(linear(h, w.get(p+"shared_expert_gate.weight"), nil, 1)[0])
		for i := range out {
			out[i] += g * y[i]
		}
	}
	return out
}
