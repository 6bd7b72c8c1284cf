// Package longcatref is a plain-Go float64 forward pass of
// LongcatFlashForCausalLM (Meituan's LongCat-Flash), written from
// transformers' modular_longcat_flash.py: two MLA sublayers a layer
// (LongcatFlashMLA: the query and the normed latent scaled, the latent
// expanded through kv_b_proj into every head's keys and values as
// transformers does, interleaved rope pairs), two dense MLPs, and the
// shortcut MoE on the first MLP's input whose real experts are SwiGLUs and
// zero experts the identity (LongcatFlashTopkRouter's softmax over both,
// chosen with the correction bias, scaled, not renormalized). It shares
// no code with pipeline/nn, pipeline/deepseek or pipeline/longcat.
package longcatref

import (
	"fmt"
	"math"

	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
	"github.com/tputool/tputool/pipeline/testkit/mambaref"
)

// LongCat describes a tiny LongCat-Flash.
type LongCat struct {
	Vocab, Hidden, FFN, Layers, Heads    int
	QLora, KVLora, QKNope, QKRope, VHead int
	Experts, Zero, TopK, ExpertFFN       int
	RoutedScale, Theta, Eps              float64
	RouterBias, ScaleQLora, ScaleKVLora  bool
	Tied                                 bool
	Seed                                 uint64
}

// Tiny is a small LongCat-Flash: 2 layers (4 attention sublayers) of 4
// heads, 6 real experts of 16 and 3 zero experts of which 3 are chosen,
// both LoRA scales. (RouterBias writes mlp.router.classifier.bias, which
// LongcatFlashTopkRouter does not add and tputool refuses.)
func Tiny() LongCat {
	return LongCat{Vocab: 64, Hidden: 32, FFN: 24, Layers: 2, Heads: 4, QLora: 16, KVLora: 12, QKNope: 8, QKRope: 4, VHead: 8,
		Experts: 6, Zero: 3, TopK: 3, ExpertFFN: 16, RoutedScale: 2, Theta: 10000, Eps: 1e-5,
		ScaleQLora: true, ScaleKVLora: true, Seed: 71}
}

type tensor struct {
	name  string
	shape []int
	init  string
}

func (c LongCat) tensors() []tensor {
	H := c.Hidden
	qk := c.QKNope + c.QKRope
	out := []tensor{{"model.embed_tokens.weight", []int{c.Vocab, H}, "embed"}}
	for l := 0; l < c.Layers; l++ {
		p := fmt.Sprintf("model.layers.%d.", l)
		add := func(name, init string, shape ...int) { out = append(out, tensor{p + name, shape, init}) }
		for j := range 2 {
			a := fmt.Sprintf("self_attn.%d.", j)
			add(fmt.Sprintf("input_layernorm.%d.weight", j), "norm", H)
			add(a+"q_a_proj.weight", "linear", c.QLora, H)
			add(a+"q_a_layernorm.weight", "norm", c.QLora)
			add(a+"q_b_proj.weight", "linear", c.Heads*qk, c.QLora)
			add(a+"kv_a_proj_with_mqa.weight", "linear", c.KVLora+c.QKRope, H)
			add(a+"kv_a_layernorm.weight", "norm", c.KVLora)
			add(a+"kv_b_proj.weight", "linear", c.Heads*(c.QKNope+c.VHead), c.KVLora)
			add(a+"o_proj.weight", "linear", H, c.Heads*c.VHead)
			add(fmt.Sprintf("post_attention_layernorm.%d.weight", j), "norm", H)
			m := fmt.Sprintf("mlps.%d.", j)
			add(m+"gate_proj.weight", "linear", c.FFN, H)
			add(m+"up_proj.weight", "linear", c.FFN, H)
			add(m+"down_proj.weight", "linear", H, c.FFN)
		}
		add("mlp.router.classifier.weight", "router", c.Experts+c.Zero, H)
		if c.RouterBias {
			add("mlp.router.classifier.bias", "bias", c.Experts+c.Zero)
		}
		add("mlp.router.e_score_correction_bias", "bias", c.Experts+c.Zero)
		for e := range c.Experts {
			q := fmt.Sprintf("mlp.experts.%d.", e)
			add(q+"gate_proj.weight", "linear", c.ExpertFFN, H)
			add(q+"up_proj.weight", "linear", c.ExpertFFN, H)
			add(q+"down_proj.weight", "linear", H, c.ExpertFFN)
		}
	}
	out = append(out, tensor{"model.norm.weight", []int{H}, "norm"})
	if !c.Tied {
		out = append(out, tensor{"lm_head.weight", []int{c.Vocab, H}, "linear"})
	}
	return out
}

// ConfigJSON is the config.json with LongcatFlashConfig's names.
func (c LongCat) ConfigJSON() map[string]any {
	return map[string]any{
		"architectures": []string{"LongcatFlashForCausalLM"}, "model_type": "longcat_flash",
		"vocab_size": c.Vocab, "hidden_size": c.Hidden, "ffn_hidden_size": c.FFN, "num_layers": c.Layers, "num_hidden_layers": 2 * c.Layers,
		"num_attention_heads": c.Heads, "q_lora_rank": c.QLora, "kv_lora_rank": c.KVLora, "qk_nope_head_dim": c.QKNope,
		"qk_rope_head_dim": c.QKRope, "v_head_dim": c.VHead, "n_routed_experts": c.Experts, "zero_expert_num": c.Zero,
		"zero_expert_type": "identity", "moe_topk": c.TopK, "expert_ffn_hidden_size": c.ExpertFFN,
		"routed_scaling_factor": c.RoutedScale, "router_bias": c.RouterBias, "mla_scale_q_lora": c.ScaleQLora,
		"mla_scale_kv_lora": c.ScaleKVLora, "rope_theta": c.Theta, "rms_norm_eps": c.Eps, "hidden_act": "silu",
		"tie_word_embeddings": c.Tied, "max_position_embeddings": 256, "bos_token_id": 1, "eos_token_id": 2,
		"attention_bias": false, "torch_dtype": "float32",
	}
}

// Write writes dir/config.json, generation_config.json and
// model.safetensors (float32).
func (c LongCat) Write(dir string) error {
	r := lmckpt.NewRand(c.Seed)
	var ts []lmckpt.F32Tensor
	for _, t := range c.tensors() {
		ts = append(ts, lmckpt.F32Tensor{Name: t.name, Shape: t.shape, Values: mambaref.Fill(r, t.shape, t.init, "longcatref")})
	}
	return lmckpt.WriteF32(dir, c.ConfigJSON(), map[string]any{"bos_token_id": 1, "eos_token_id": 2}, ts)
}

// Model is a description plus its weights in float64. ZeroChosen counts
// the zero experts the router has chosen, so that a test can check it
// exercised them. The switches are mistakes the tests check the model
// does not make: NoLoraScale drops both LoRA scales, ZeroAsNothing makes
// a zero expert add nothing, MoEAtEnd feeds the MoE the second MLP's
// input instead of the first's.
type Model struct {
	C                                    LongCat
	W                                    map[string][]float64
	ZeroChosen                           int
	NoLoraScale, ZeroAsNothing, MoEAtEnd bool
}

// Load reads a checkpoint Write wrote, checking every tensor's size.
func (c LongCat) Load(dir string) (*Model, error) {
	w, err := lmckpt.ReadFloat64(dir)
	if err != nil {
		return nil, err
	}
	chk := lmckpt.Weights64{M: w, Kit: "longcatref"}
	for _, t := range c.tensors() {
		chk.Shaped(t.name, t.shape)
	}
	if chk.Err != nil {
		return nil, chk.Err
	}
	return &Model{C: c, W: w}, nil
}

func (m *Model) get(name string) []float64 {
	v, ok := m.W[name]
	if !ok {
		panic(fmt.Sprintf("longcatref: no tensor %q", name))
	}
	return v
}

// turn is apply_rotary_pos_emb_interleave on one head's rope dims x at
// position pos: the interleaved pairs regrouped into halves, then
// rotate-half.
func (c LongCat) turn(x []float64, pos int) []float64 {
	n := len(x)
	halves := make([]float64, n)
	for i := range n / 2 {
		halves[i], halves[n/2+i] = x[2*i], x[2*i+1]
	}
	return lmckpt.RotateHalf64(halves, pos, c.Theta, n)
}

// mla is sublayer a's LongcatFlashMLA (prefix a, "model.layers.L.
// self_attn.J.") on the normed h.
func (m *Model) mla(a string, h [][]float64) [][]float64 {
	c := m.C
	qk, D := c.QKNope+c.QKRope, c.QKNope+c.VHead
	sq, skv := math.Sqrt(float64(c.Hidden)/float64(c.QLora)), math.Sqrt(float64(c.Hidden)/float64(c.KVLora))
	if !c.ScaleQLora || m.NoLoraScale {
		sq = 1
	}
	if !c.ScaleKVLora || m.NoLoraScale {
		skv = 1
	}
	T := len(h)
	q, k, v := make([][][]float64, T), make([][][]float64, T), make([][][]float64, T)
	for t := range h {
		qa := lmckpt.RMSNorm64(lmckpt.Linear64(h[t], m.get(a+"q_a_proj.weight"), nil), m.get(a+"q_a_layernorm.weight"), 1e-6)
		qall := lmckpt.Linear64(qa, m.get(a+"q_b_proj.weight"), nil)
		kv := lmckpt.Linear64(h[t], m.get(a+"kv_a_proj_with_mqa.weight"), nil)
		latent := lmckpt.RMSNorm64(kv[:c.KVLora], m.get(a+"kv_a_layernorm.weight"), 1e-6)
		for i := range latent {
			latent[i] *= skv
		}
		kRot := c.turn(kv[c.KVLora:], t)
		expanded := lmckpt.Linear64(latent, m.get(a+"kv_b_proj.weight"), nil)
		q[t], k[t], v[t] = make([][]float64, c.Heads), make([][]float64, c.Heads), make([][]float64, c.Heads)
		for hd := range c.Heads {
			qh := qall[hd*qk : (hd+1)*qk]
			for i := range qh {
				qh[i] *= sq
			}
			q[t][hd] = append(append([]float64(nil), qh[:c.QKNope]...), c.turn(qh[c.QKNope:], t)...)
			e := expanded[hd*D : (hd+1)*D]
			k[t][hd] = append(append([]float64(nil), e[:c.QKNope]...), kRot...)
			v[t][hd] = e[c.QKNope:]
		}
	}
	att := lmckpt.Attention64(q, k, v, 1/math.Sqrt(float64(qk)), nil)
	out := make([][]float64, T)
	for t := range att {
		out[t] = lmckpt.Linear64(att[t], m.get(a+"o_proj.weight"), nil)
	}
	return out
}

// moe is layer l's LongcatFlashMoE on one token h.
func (m *Model) moe(l int, h []float64) []float64 {
	c := m.C
	p := fmt.Sprintf("model.layers.%d.mlp.", l)
	// LongcatFlashTopkRouter: F.linear of the classifier's weight alone.
	scores := lmckpt.Softmax64(lmckpt.Linear64(h, m.get(p+"router.classifier.weight"), nil))
	choice := make([]float64, len(scores))
	for e, s := range scores {
		choice[e] = s + m.get(p + "router.e_score_correction_bias")[e]
	}
	out := make([]float64, len(h))
	for _, e := range lmckpt.TopK64(choice, c.TopK) {
		w := scores[e] * c.RoutedScale
		var y []float64
		if e >= c.Experts {
			m.ZeroChosen++
			if m.ZeroAsNothing {
				continue
			}
			y = h
		} else {
			q := fmt.Sprintf("%sexperts.%d.", p, e)
			y = lmckpt.SwiGLU64(h, m.get(q+"gate_proj.weight"), m.get(q+"up_proj.weight"), m.get(q+"down_proj.weight"))
		}
		for i := range out {
			out[i] += w * y[i]
		}
	}
	return out
}

// Logits runs the sequence and returns the logits after every token.
func (m *Model) Logits(tokens []int) [][]float64 {
	c := m.C
	H := c.Hidden
	emb := m.get("model.embed_tokens.weight")
	x := make([][]float64, len(tokens))
	for t, id := range tokens {
		x[t] = append([]float64(nil), emb[id*H:(id+1)*H]...)
	}
	add := func(dst, y []float64) {
		for i := range dst {
			dst[i] += y[i]
		}
	}
	for l := 0; l < c.Layers; l++ {
		p := fmt.Sprintf("model.layers.%d.", l)
		moe := make([][]float64, len(x))
		for j := range 2 {
			h := make([][]float64, len(x))
			for t := range x {
				h[t] = lmckpt.RMSNorm64(x[t], m.get(fmt.Sprintf("%sinput_layernorm.%d.weight", p, j)), c.Eps)
			}
			a := m.mla(fmt.Sprintf("%sself_attn.%d.", p, j), h)
			mp := fmt.Sprintf("%smlps.%d.", p, j)
			for t := range x {
				add(x[t], a[t])
				g := lmckpt.RMSNorm64(x[t], m.get(fmt.Sprintf("%spost_attention_layernorm.%d.weight", p, j)), c.Eps)
				if (j == 0) != m.MoEAtEnd {
					moe[t] = m.moe(l, g)
				}
				add(x[t], lmckpt.SwiGLU64(g, m.get(mp+"gate_proj.weight"), m.get(mp+"up_proj.weight"), m.get(mp+"down_proj.weight")))
			}
		}
		for t := range x {
			add(x[t], moe[t])
		}
	}
	head := "lm_head.weight"
	if c.Tied {
		head = "model.embed_tokens.weight"
	}
	out := make([][]float64, len(x))
	for t := range x {
		out[t] = lmckpt.Linear64(lmckpt.RMSNorm64(x[t], m.get("model.norm.weight"), c.Eps), m.get(head), nil)
	}
	return out
}
