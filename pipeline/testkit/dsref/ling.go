package dsref

import (
	"fmt"
	"strings"
)

// ----------------------------------------------------------------------------
// BailingMoeV2ForCausalLM

// Ling describes a BailingMoeV2ForCausalLM (inclusionAI's Ling 2.0 and
// Ring 2.0) by the fields of its config.json. Its decoder computes what
// GLM-4.5's does (GLMModel), read from other tensor names, as the
// modeling code the checkpoints ship (modeling_bailing_moe_v2.py)
// computes it:
//   - BailingMoeV2Attention: attention.query_key_value, one matrix
//     [(Heads + 2·KVHeads)·D, Hidden] whose product splits into the
//     queries, keys and values in that order (a bias with AttentionBias,
//     use_qkv_bias); attention.query_layernorm and key_layernorm over
//     each query and key head before the rotary (QKNorm, use_qk_norm);
//     the rotary on the first int(D·PartialRotary) dims in the
//     rotate-half convention; attention.dense (a bias with OBias,
//     use_bias);
//   - BailingMoeV2Gate: float32 logits, sigmoid scores, the choice the
//     scores plus mlp.gate.expert_bias, groups ranked by the sum of their
//     two best choices, the closed ones masked with −∞ (MaskInf), the
//     weights the unbiased scores divided by their sum + 1e-20 when
//     TopK > 1 (norm_topk_prob is not read: NormTopK must be TopK > 1),
//     times RoutedScale;
//   - BailingMoeV2SparseMoeBlock: the routed experts plus the shared
//     experts (one SwiGLU MLP MoEIntermediate·Shared wide);
//   - model.word_embeddings, model.norm, lm_head (or the embedding when
//     Tied).
//
// Load renames the tensors to GLM-4.5's (the fused projection split into
// q_proj, k_proj and v_proj) and computes with GLMModel.
type Ling struct {
	// GLM holds the sizes and switches in GLM's terms: AttentionBias is
	// use_qkv_bias, OBias use_bias, QKNorm use_qk_norm, Shared
	// num_shared_experts. MaskInf and MTP are set by Ling (true and
	// false).
	GLM
	// NegativeBias draws every expert_bias around −1.5 (within 0.25), so
	// every biased choice (a sigmoid plus it) is below −0.25: a router
	// closing groups with 0 (DeepSeek-V3's) then picks closed experts,
	// one closing them with −∞ (Ling's) never.
	NegativeBias bool
	// MTPLayer writes a multi-token-prediction layer in Ling's layout as
	// layer N = Layers (num_nextn_predict_layers 1): enorm, hnorm,
	// eh_proj, a decoder layer with the MoE block and final_layernorm
	// (BailingMoeV2MTPLayer). GLMModel.MTPLogits and MTPDraft run it as
	// that layer does: at position i the embedding of token i+1 (none
	// zeroed) through enorm and the model's normed final state through
	// hnorm, concatenated and projected by eh_proj, the decoder layer at
	// position i (causal over the head's positions, with its residuals),
	// final_layernorm, and the model's lm_head; a chained draft reads the
	// normed output as its hidden state.
	MTPLayer bool
}

// TinyLing is a small Ling-mini-2.0: fused q/k/v without biases, q/k
// norms, half of each head rotated, 4 query heads on 2 key/value heads of
// 16 dims (twice Hidden/Heads), a dense first layer and two MoE layers of
// 8 experts in 4 groups of which 2 stay open to the top-2 choice, a
// shared expert, routed_scaling_factor 2.5, the biases negative (so the
// −∞ masking matters) and a multi-token-prediction layer.
func TinyLing() Ling {
	c := TinyGLM()
	c.AttentionBias, c.QKNorm = false, true
	c.Groups, c.TopKGroup, c.RoutedScale = 4, 2, 2.5
	c.Seed = 70
	return Ling{GLM: c, NegativeBias: true, MTPLayer: true}
}

// TinyLingBiases is TinyLing on the other paths: biases on the fused
// projection and on attention.dense (use_qkv_bias, use_bias), no q/k
// norms, one expert group, a tied head and the biases as DeepSeek's
// tests draw them.
func TinyLingBiases() Ling {
	c := TinyGLM()
	c.AttentionBias, c.OBias, c.Tied = true, true, true
	c.Seed = 71
	return Ling{GLM: c}
}

// glm is c's GLM twin.
func (c Ling) glm() GLM {
	g := c.GLM
	g.MaskInf, g.MTP, g.lingMTP = true, c.MTPLayer, c.MTPLayer
	return g
}

// check reports a description the modeling code could not build, or one
// GLMModel would not compute as it does.
func (c Ling) check() error {
	if c.NormTopK != (c.TopK > 1) {
		return fmt.Errorf("dsref: BailingMoeV2Gate renormalises exactly when top_k > 1; NormTopK must be %v", c.TopK > 1)
	}
	if c.GLM.MTP {
		return fmt.Errorf("dsref: Ling's multi-token-prediction layer is MTPLayer, not GLM's MTP")
	}
	return c.glm().check()
}

// Tensors lists the checkpoint tensors with the names of the real Ling
// 2.0 checkpoints, in the order Write draws them.
func (c Ling) Tensors() []Tensor {
	H := c.Hidden
	out := []Tensor{{"model.word_embeddings.weight", []int{c.Vocab, H}, "embed"}}
	for l := 0; l < c.Layers; l++ {
		out = append(out, c.layerTensors(l)...)
	}
	out = append(out, Tensor{"model.norm.weight", []int{H}, "norm"})
	if !c.Tied {
		out = append(out, Tensor{"lm_head.weight", []int{c.Vocab, H}, "linear"})
	}
	if c.MTPLayer {
		p := fmt.Sprintf("model.layers.%d.", c.Layers)
		out = append(out,
			Tensor{p + "enorm.weight", []int{H}, "norm"},
			Tensor{p + "hnorm.weight", []int{H}, "norm"},
			Tensor{p + "eh_proj.weight", []int{H, 2 * H}, "linear"})
		out = append(out, c.layerTensors(c.Layers)...)
		out = append(out, Tensor{p + "final_layernorm.weight", []int{H}, "norm"})
	}
	return out
}

// layerTensors lists decoder layer l's tensors (model.layers.l.*) under
// Ling's names.
func (c Ling) layerTensors(l int) []Tensor {
	H, D := c.Hidden, c.HeadSize()
	var out []Tensor
	p := fmt.Sprintf("model.layers.%d.", l)
	add := func(name, init string, shape ...int) { out = append(out, Tensor{p + name, shape, init}) }
	add("input_layernorm.weight", "norm", H)
	qkv := (c.Heads + 2*c.KVHeads) * D
	add("attention.query_key_value.weight", "linear", qkv, H)
	if c.AttentionBias {
		add("attention.query_key_value.bias", "bias", qkv)
	}
	if c.QKNorm {
		add("attention.query_layernorm.weight", "norm", D)
		add("attention.key_layernorm.weight", "norm", D)
	}
	add("attention.dense.weight", "linear", H, c.Heads*D)
	if c.OBias {
		add("attention.dense.bias", "bias", H)
	}
	add("post_attention_layernorm.weight", "norm", H)
	c.glm().router().mlpTensors(l, func(name, init string, shape ...int) {
		if name == "mlp.gate.e_score_correction_bias" {
			name = "mlp.gate.expert_bias"
			if c.NegativeBias {
				init = "ebiasneg"
			}
		}
		add(name, init, shape...)
	})
	return out
}

// ConfigJSON returns the config.json, with the fields of
// inclusionAI/Ling-mini-2.0's, but bos 0 and eos 1, max_position_embeddings
// 256 and float32.
func (c Ling) ConfigJSON() map[string]any {
	j := map[string]any{
		"architectures":                 []string{"BailingMoeV2ForCausalLM"},
		"model_type":                    "bailing_moe_v2",
		"vocab_size":                    c.Vocab,
		"hidden_size":                   c.Hidden,
		"intermediate_size":             c.Intermediate,
		"moe_intermediate_size":         c.MoEIntermediate,
		"num_hidden_layers":             c.Layers,
		"num_attention_heads":           c.Heads,
		"num_key_value_heads":           c.KVHeads,
		"partial_rotary_factor":         c.PartialRotary,
		"use_qkv_bias":                  c.AttentionBias,
		"use_bias":                      c.OBias,
		"use_qk_norm":                   c.QKNorm,
		"use_rmsnorm":                   true,
		"norm_head":                     false,
		"num_experts":                   c.Experts,
		"num_experts_per_tok":           c.TopK,
		"num_shared_experts":            c.Shared,
		"n_group":                       c.Groups,
		"topk_group":                    c.TopKGroup,
		"first_k_dense_replace":         c.FirstDense,
		"norm_topk_prob":                c.NormTopK,
		"routed_scaling_factor":         c.RoutedScale,
		"score_function":                "sigmoid",
		"router_dtype":                  "fp32",
		"moe_router_enable_expert_bias": true,
		"rope_theta":                    c.Theta,
		"rope_scaling":                  nil,
		"rms_norm_eps":                  c.Eps,
		"max_position_embeddings":       256,
		"tie_word_embeddings":           c.Tied,
		"hidden_act":                    "silu",
		"bos_token_id":                  0,
		"eos_token_id":                  1,
		"num_nextn_predict_layers":      mtpLayers(c.MTPLayer),
		"torch_dtype":                   "float32",
	}
	if c.HeadDim > 0 {
		j["head_dim"] = c.HeadDim
	}
	if c.Shared > 0 {
		j["moe_shared_expert_intermediate_size"] = c.MoEIntermediate
	}
	return j
}

// Write writes dir/config.json, dir/generation_config.json (bos 0, eos 1)
// and dir/model.safetensors in float32, with values drawn from
// lmckpt.NewRand(Seed) in the order of Tensors.
func (c Ling) Write(dir string) error {
	if err := c.check(); err != nil {
		return err
	}
	return writeCheckpoint(dir, c.Seed, c.Tensors(), c.ConfigJSON())
}

// Load reads a checkpoint written by Write (or any with the same tensor
// names) as float64 and returns its GLM twin over the same weights,
// renamed: the fused projection's rows split into q_proj, k_proj and
// v_proj (and its bias likewise), query_layernorm and key_layernorm as
// q_norm and k_norm, dense as o_proj, expert_bias as
// e_score_correction_bias, word_embeddings as embed_tokens.
func (c Ling) Load(dir string) (*GLMModel, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	w, err := readWeights(dir, c.Tensors())
	if err != nil {
		return nil, err
	}
	D := c.HeadSize()
	q, kv := c.Heads*D, c.KVHeads*D
	g := make(map[string][]float64, len(w))
	for name, v := range w {
		switch rest, layer := cutLayer(name); {
		case name == "model.word_embeddings.weight":
			g["model.embed_tokens.weight"] = v
		case rest == "attention.query_key_value.weight" || rest == "attention.query_key_value.bias":
			row := len(v) / (q + 2*kv) // H for the weight, 1 for the bias
			kind := strings.TrimPrefix(rest, "attention.query_key_value.")
			g[layer+"self_attn.q_proj."+kind] = v[:q*row]
			g[layer+"self_attn.k_proj."+kind] = v[q*row : (q+kv)*row]
			g[layer+"self_attn.v_proj."+kind] = v[(q+kv)*row:]
		case strings.HasPrefix(rest, "attention."):
			r := strings.NewReplacer("attention.query_layernorm.", "self_attn.q_norm.", "attention.key_layernorm.", "self_attn.k_norm.",
				"attention.dense.", "self_attn.o_proj.").Replace(rest)
			g[layer+r] = v
		case rest == "mlp.gate.expert_bias":
			g[layer+"mlp.gate.e_score_correction_bias"] = v
		default:
			g[name] = v
		}
	}
	return &GLMModel{C: c.glm(), W: g}, nil
}

// cutLayer splits a layer tensor's name into its prefix
// "model.layers.N." and the rest; rest is "" for other tensors.
func cutLayer(name string) (rest, layer string) {
	after, ok := strings.CutPrefix(name, "model.layers.")
	if !ok {
		return "", ""
	}
	i := strings.IndexByte(after, '.')
	if i < 0 {
		return "", ""
	}
	return after[i+1:], name[:len("model.layers.")+i+1]
}
