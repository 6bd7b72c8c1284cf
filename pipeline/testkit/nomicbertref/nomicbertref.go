// Package nomicbertref writes tiny NomicBERT checkpoints (NomicBertModel,
// model_type "nomic_bert", as nomic-ai/nomic-embed-text-v1.5 stores them)
// with deterministic pseudo-random weights, and runs the encoder in float64
// as an independent reference. Nothing here is a trained model.
//
// # Source
//
// The semantics were read from nomic-ai/contrastors,
// src/contrastors/models/huggingface/modeling_hf_nomic_bert.py (commit
// 1e27692238fd259025c56b56926893d21f691d84) and configuration_hf_nomic_bert.py
// (4ed6743d3f724660db25e3fa9f6bfe5c8bcc61c3). No code was copied.
//
// # Forward (eval mode, one unpadded sequence, post-norm)
//
//   - embeddings: word_embeddings[id] + token_type_embeddings[type] (types
//     are 0 unless given; no token-type term when type_vocab_size is 0); no
//     position embeddings (rotary_emb_fraction > 0); then emb_ln.
//   - layer: qkv = Wqkv(x), columns "(three h d)": [0,H) queries, [H,2H)
//     keys, [2H,3H) values, head n the slice [n·d,(n+1)·d) of each. Rotary
//     on q and k over each head's first RotaryDim() = d·rotary_emb_fraction
//     dims, the rest untouched (see Rotary). scores = q·k/sqrt(d),
//     bidirectional, softmax, context, out_proj. x = norm1(x + attn);
//     x = norm2(x + mlp(x)). No final norm: last_hidden_state is the last
//     layer's x.
//   - gated MLP (NomciBertGatedMLP, activation_function swiglu / geglu /
//     glu): fc2(fc11(x) · act(fc12(x))): fc11 is the value, fc12 the gate;
//     act is silu, exact (erf) gelu, or sigmoid (glu goes through
//     F.glu(cat[value, gate]), the same thing). Its width is n_inner rounded
//     up to a multiple of 256 (multiple_of=256 in the reference), see
//     MLPWidth.
//   - plain MLP (NomicBertMLP, activation_function gelu / gelu_new /
//     gelu_fast / gelu_pytorch_tanh): fc2(gelu(fc1(x))), width n_inner. The
//     reference passes the function F.gelu, never the string "gelu", so every
//     one of these names gets the exact erf GELU, not the tanh form.
//   - LayerNorms have weight and bias, eps layer_norm_epsilon. Wqkv and
//     out_proj have biases iff qkv_proj_bias; fc11/fc12 (or fc1) iff
//     mlp_fc1_bias; fc2 iff mlp_fc2_bias.
//   - the pooler (Config.Pooler stores it; not part of last_hidden_state)
//     would be tanh(pooler.dense(x[0])); Forward does not run it.
//
// Mixture-of-experts layers (nomic-embed-text-v2-moe: Config.Experts)
// follow contrastors' src/contrastors/layers/block.py and
// models/encoder/modeling_nomic_bert.py (commit 1771db5, "Moe (#32)"),
// which train them as megablocks' dMoE; see MoE.
//
// The reference builds the rotary cos/sin tables in float32; this package
// computes everything in float64. rotary_scaling_factor (dynamic NTK, only
// active beyond max_trained_positions), rotary_emb_scale_base, a
// rotary_head_dim config key and prenorm are not modelled: ConfigJSON writes
// them null/false.
package nomicbertref

import (
	"fmt"
	"math"

	"github.com/tputool/tputool/loader/safetensors"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
)

// Defaults used for zero Config fields.
const (
	DefaultRotaryBase   = 1000.0 // nomic-embed-text-v1.5 (NomicBertConfig's own default is 10000)
	DefaultEps          = 1e-12
	DefaultMaxPositions = 8192
	DefaultTypeVocab    = 2
	GatedMultiple       = 256 // NomciBertGatedMLP's multiple_of
)

// Config describes a tiny NomicBERT checkpoint.
type Config struct {
	Vocab, Hidden, Inner, Layers, Heads int
	// TypeVocab is type_vocab_size: 0 means 2, negative means 0 (no
	// token_type_embeddings tensor and no token-type term).
	TypeVocab int
	// RotaryFraction is rotary_emb_fraction (0 means 1.0); RotaryBase is
	// rotary_emb_base (0 means 1000); Interleaved is rotary_emb_interleaved.
	RotaryFraction, RotaryBase float64
	Interleaved                bool
	// Act is activation_function: "swiglu" (default), "geglu", "glu", or
	// the plain-MLP "gelu", "gelu_new", "gelu_fast", "gelu_pytorch_tanh".
	Act string
	// QKVBias, FC1Bias and FC2Bias are qkv_proj_bias, mlp_fc1_bias and
	// mlp_fc2_bias.
	QKVBias, FC1Bias, FC2Bias bool
	// Eps is layer_norm_epsilon (0 means 1e-12).
	Eps float64
	// MaxPositions is n_positions (0 means 8192); nothing reads it.
	MaxPositions int
	// Pooler stores pooler.dense.weight [H,H] and pooler.dense.bias [H].
	Pooler bool
	// DType is the stored weight dtype ("" means F32; BF16 and F16 too).
	DType safetensors.DType
	// Experts > 0 makes the layers i with i % EveryN == 1 mixtures of
	// experts, as nomic-embed-text-v2-moe's (num_experts,
	// moe_every_n_layers; see MoE), TopK of them a token (moe_top_k),
	// their weights divided by their sum with NormalizeWeights
	// (moe_normalize_expert_weights 1; false without).
	Experts, TopK, EveryN int
	NormalizeWeights      bool
}

// MoE reports whether layer i is a mixture of experts: contrastors'
// NomicBertEncoder builds Block(config, moe=i % moe_every_n_layers == 1).
func (c Config) MoE(i int) bool { return c.Experts > 0 && c.EveryN > 0 && i%c.EveryN == 1 }

func or[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

func (c Config) fraction() float64        { return or(c.RotaryFraction, 1.0) }
func (c Config) base() float64            { return or(c.RotaryBase, DefaultRotaryBase) }
func (c Config) act() string              { return or(c.Act, "swiglu") }
func (c Config) eps() float64             { return or(c.Eps, DefaultEps) }
func (c Config) dtype() safetensors.DType { return or(c.DType, safetensors.F32) }

// TypeVocabSize is type_vocab_size as written to config.json.
func (c Config) TypeVocabSize() int {
	if c.TypeVocab < 0 {
		return 0
	}
	return or(c.TypeVocab, DefaultTypeVocab)
}

// HeadDim is n_embd / n_head.
func (c Config) HeadDim() int { return c.Hidden / c.Heads }

// RotaryDim is the number of rotated dims of each head,
// head_dim · rotary_emb_fraction.
func (c Config) RotaryDim() int { return int(math.Round(float64(c.HeadDim()) * c.fraction())) }

// Gated reports whether activation_function selects the gated MLP.
func (c Config) Gated() bool {
	a := c.act()
	return a == "swiglu" || a == "geglu" || a == "glu"
}

// MLPWidth is the stored MLP width: Inner for the plain MLP, Inner rounded
// up to a multiple of 256 for the gated one (so fc11/fc12 are
// [MLPWidth, H] and fc2 [H, MLPWidth] even though config.json says
// n_inner = Inner). Use an Inner that is a multiple of 256, as
// nomic-embed-text-v1.5's 3072 is, to make the two agree.
func (c Config) MLPWidth() int {
	if !c.Gated() {
		return c.Inner
	}
	return (c.Inner + GatedMultiple - 1) / GatedMultiple * GatedMultiple
}

func (c Config) check() error {
	switch a := c.act(); {
	case c.Vocab <= 0 || c.Hidden <= 0 || c.Inner <= 0 || c.Layers < 0 || c.Heads <= 0:
		return fmt.Errorf("nomicbertref: sizes must be positive: %+v", c)
	case c.Hidden%c.Heads != 0:
		return fmt.Errorf("nomicbertref: n_embd %d is not a multiple of n_head %d", c.Hidden, c.Heads)
	case c.fraction() < 0 || c.fraction() > 1 || c.base() <= 0 || c.eps() < 0 || c.MaxPositions < 0:
		return fmt.Errorf("nomicbertref: bad rotary fraction %v, base %v, eps %v or positions %d",
			c.RotaryFraction, c.RotaryBase, c.Eps, c.MaxPositions)
	case float64(c.RotaryDim()) != float64(c.HeadDim())*c.fraction() || c.RotaryDim()%2 != 0 || c.RotaryDim() == 0:
		return fmt.Errorf("nomicbertref: head_dim %d × fraction %v must be a positive even integer",
			c.HeadDim(), c.fraction())
	case !c.Gated() && a != "gelu" && a != "gelu_new" && a != "gelu_fast" && a != "gelu_pytorch_tanh":
		return fmt.Errorf("nomicbertref: activation_function %q not supported", a)
	case c.Experts > 0 && (c.TopK <= 0 || c.TopK > c.Experts || c.EveryN <= 0 || (c.Gated() && a != "swiglu")):
		return fmt.Errorf("nomicbertref: experts %d, top k %d, every %d with %s", c.Experts, c.TopK, c.EveryN, a)
	}
	switch c.dtype() {
	case safetensors.F32, safetensors.BF16, safetensors.F16:
		return nil
	}
	return fmt.Errorf("nomicbertref: dtype %q: want F32, BF16 or F16", c.DType)
}

// Tensor is one stored tensor: its name and shape.
type Tensor struct {
	Name  string
	Shape []int
	kind  string // lmckpt.EncoderValues kind
}

// Tensors lists the tensors Write stores, in the order their values are
// drawn (module order, each bias right after its weight).
func (c Config) Tensors() []Tensor {
	H, W := c.Hidden, c.MLPWidth()
	var out []Tensor
	add := func(name, kind string, shape ...int) { out = append(out, Tensor{name, shape, kind}) }
	linear := func(name string, bias bool, rows, cols int) {
		add(name+".weight", "linear", rows, cols)
		if bias {
			add(name+".bias", "bias", rows)
		}
	}
	norm := func(name string) { add(name+".weight", "lnw", H); add(name+".bias", "lnb", H) }
	add("embeddings.word_embeddings.weight", "embed", c.Vocab, H)
	if tv := c.TypeVocabSize(); tv > 0 {
		add("embeddings.token_type_embeddings.weight", "embed", tv, H)
	}
	norm("emb_ln")
	for i := 0; i < c.Layers; i++ {
		p := fmt.Sprintf("encoder.layers.%d.", i)
		linear(p+"attn.Wqkv", c.QKVBias, 3*H, H)
		linear(p+"attn.out_proj", c.QKVBias, H, H)
		if c.MoE(i) { // megablocks' dMoE: the router, the experts' matrices three (two) to a tensor, one output bias
			add(p+"mlp.router.layer.weight", "linear", c.Experts, H)
			add(p+"mlp.experts.mlp.w1", "linear", c.Experts*c.Inner, H)
			if c.act() == "swiglu" {
				add(p+"mlp.experts.mlp.v1", "linear", c.Experts*c.Inner, H)
			}
			add(p+"mlp.experts.mlp.w2", "linear", c.Experts*c.Inner, H)
			add(p+"mlp.experts.bias", "bias", H)
		} else if c.Gated() {
			linear(p+"mlp.fc11", c.FC1Bias, W, H)
			linear(p+"mlp.fc12", c.FC1Bias, W, H)
		} else {
			linear(p+"mlp.fc1", c.FC1Bias, W, H)
		}
		if !c.MoE(i) {
			linear(p+"mlp.fc2", c.FC2Bias, H, W)
		}
		norm(p + "norm1")
		norm(p + "norm2")
	}
	if c.Pooler {
		linear("pooler.dense", true, H, H)
	}
	return out
}

// ConfigJSON is the config.json Write writes: nomic-embed-text-v1.5's keys
// (NomicBertConfig's own keys plus GPT2Config's), with c's sizes and flags.
func (c Config) ConfigJSON() map[string]any {
	dt := map[safetensors.DType]string{safetensors.F32: "float32", safetensors.BF16: "bfloat16", safetensors.F16: "float16"}[c.dtype()]
	j := c.configJSON(dt)
	if c.Experts > 0 { // nomic-embed-text-v2-moe's keys
		j["num_experts"], j["moe_top_k"], j["moe_every_n_layers"] = c.Experts, c.TopK, c.EveryN
		j["moe_normalize_expert_weights"] = any(false)
		if c.NormalizeWeights {
			j["moe_normalize_expert_weights"] = 1
		}
		j["moe_impl"], j["num_shared_experts"], j["expert_choice_router"], j["ffn_div"] = "megablocks", 0, false, 1
		j["moe_resid_pdrop"], j["router_aux_loss_coef"] = 0.0, 0.1
	}
	return j
}

func (c Config) configJSON(dt string) map[string]any {
	return map[string]any{
		"architectures": []string{"NomicBertModel"},
		"model_type":    "nomic_bert",
		"auto_map": map[string]string{
			"AutoConfig":           "nomic-ai/nomic-bert-2048--configuration_hf_nomic_bert.NomicBertConfig",
			"AutoModel":            "nomic-ai/nomic-bert-2048--modeling_hf_nomic_bert.NomicBertModel",
			"AutoModelForMaskedLM": "nomic-ai/nomic-bert-2048--modeling_hf_nomic_bert.NomicBertForPreTraining",
		},
		"n_embd": c.Hidden, "n_head": c.Heads, "n_layer": c.Layers, "n_inner": c.Inner,
		"n_positions": or(c.MaxPositions, DefaultMaxPositions), "vocab_size": c.Vocab,
		"type_vocab_size": c.TypeVocabSize(), "layer_norm_epsilon": c.eps(),
		"activation_function": c.act(), "rotary_emb_fraction": c.fraction(),
		"rotary_emb_base": c.base(), "rotary_emb_interleaved": c.Interleaved,
		"rotary_emb_scale_base": nil, "rotary_scaling_factor": nil, "max_trained_positions": 2048,
		"qkv_proj_bias": c.QKVBias, "mlp_fc1_bias": c.FC1Bias, "mlp_fc2_bias": c.FC2Bias,
		"prenorm": false, "causal": false, "pad_token_id": 0, "pad_vocab_size_multiple": 1,
		"parallel_block": false, "parallel_block_tied_norm": false, "fused_bias_fc": true,
		"fused_dropout_add_ln": true, "use_flash_attn": true, "use_xentropy": true,
		"use_rms_norm": false, "dense_seq_output": true, "tie_word_embeddings": true,
		"attn_pdrop": 0.0, "embd_pdrop": 0.0, "resid_pdrop": 0.0, "summary_first_dropout": 0.0,
		"initializer_range": 0.02, "bos_token_id": nil, "eos_token_id": nil,
		"reorder_and_upcast_attn": false, "scale_attn_by_inverse_layer_idx": false,
		"scale_attn_weights": true, "summary_activation": nil, "summary_proj_to_labels": true,
		"summary_type": "cls_index", "summary_use_proj": true, "use_cache": true,
		"torch_dtype": dt, "transformers_version": "4.37.2",
	}
}

// Write writes dir/config.json (ConfigJSON), dir/generation_config.json
// (lmckpt's) and dir/model.safetensors (Tensors) with weights drawn from
// seed by lmckpt.EncoderValues (linear ±1.5/√fan_in, biases ±0.1, LayerNorm
// weights 1±0.2, embeddings ±0.5), stored as c.DType.
func Write(dir string, c Config, seed uint64) error {
	if err := c.check(); err != nil {
		return err
	}
	r := lmckpt.NewRand(seed)
	var ts []safetensors.Tensor
	for _, t := range c.Tensors() {
		st, err := safetensors.Float32Tensor(t.Name, c.dtype(), t.Shape, lmckpt.EncoderValues(r, t.kind, t.Shape))
		if err != nil {
			return err
		}
		ts = append(ts, st)
	}
	return lmckpt.WriteCheckpoint(dir, c.ConfigJSON(), ts)
}

// Forward is NomicBertModel's last_hidden_state [len(ids)][Hidden] in
// float64 for one unpadded input with token types 0. dir holds a
// checkpoint with Tensors' names; the weights are read as stored.
func Forward(dir string, c Config, ids []int) ([][]float64, error) {
	return ForwardTypes(dir, c, ids, nil)
}

// ForwardTypes is Forward with token_type_ids (nil: all 0).
func ForwardTypes(dir string, c Config, ids, types []int) ([][]float64, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	m, err := lmckpt.ReadFloat64(dir)
	if err != nil {
		return nil, err
	}
	return forward(m, c, ids, types)
}

// ForwardWeights is Forward over weights already read (name to values
// as lmckpt.ReadFloat64 gives them), for tests that change them.
func ForwardWeights(m map[string][]float64, c Config, ids []int) ([][]float64, error) {
	return forward(m, c, ids, nil)
}

func forward(m map[string][]float64, c Config, ids, types []int) ([][]float64, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	if len(ids) == 0 || (types != nil && len(types) != len(ids)) {
		return nil, fmt.Errorf("nomicbertref: %d ids with %d types", len(ids), len(types))
	}
	H, W, T, eps := c.Hidden, c.MLPWidth(), len(ids), c.eps()
	heads, d, tv := c.Heads, c.HeadDim(), c.TypeVocabSize()
	w := &lmckpt.Weights64{M: m, Kit: "nomicbertref"}
	word := w.Get("embeddings.word_embeddings.weight", c.Vocab*H)
	typ := w.Opt(tv > 0, "embeddings.token_type_embeddings.weight", tv*H)
	eg, eb := w.Get("emb_ln.weight", H), w.Get("emb_ln.bias", H)
	if w.Err != nil {
		return nil, w.Err
	}
	x := make([][]float64, T)
	for t, id := range ids {
		ty := 0
		if types != nil {
			ty = types[t]
		}
		if id < 0 || id >= c.Vocab || ty < 0 || (tv > 0 && ty >= tv) || (tv == 0 && ty != 0) {
			return nil, fmt.Errorf("nomicbertref: id %d / type %d at %d out of range", id, ty, t)
		}
		e := append([]float64(nil), word[id*H:(id+1)*H]...)
		if tv > 0 {
			for i := range e {
				e[i] += typ[ty*H+i]
			}
		}
		x[t] = lmckpt.LayerNorm64(e, eg, eb, eps)
	}
	for l := 0; l < c.Layers; l++ {
		p := fmt.Sprintf("encoder.layers.%d.", l)
		qkvW, qkvB := w.Get(p+"attn.Wqkv.weight", 3*H*H), w.Opt(c.QKVBias, p+"attn.Wqkv.bias", 3*H)
		oW, oB := w.Get(p+"attn.out_proj.weight", H*H), w.Opt(c.QKVBias, p+"attn.out_proj.bias", H)
		var mlp MLP
		if c.MoE(l) {
			// no dense MLP
		} else if c.Gated() {
			mlp.Value, mlp.ValueB = w.Get(p+"mlp.fc11.weight", W*H), w.Opt(c.FC1Bias, p+"mlp.fc11.bias", W)
			mlp.Gate, mlp.GateB = w.Get(p+"mlp.fc12.weight", W*H), w.Opt(c.FC1Bias, p+"mlp.fc12.bias", W)
		} else {
			mlp.Value, mlp.ValueB = w.Get(p+"mlp.fc1.weight", W*H), w.Opt(c.FC1Bias, p+"mlp.fc1.bias", W)
		}
		var moe *MoE
		if c.MoE(l) {
			E, I := c.Experts, c.Inner
			moe = &MoE{Router: w.Get(p+"mlp.router.layer.weight", E*H), W1: w.Get(p+"mlp.experts.mlp.w1", E*I*H),
				W2: w.Get(p+"mlp.experts.mlp.w2", E*I*H), Bias: w.Get(p+"mlp.experts.bias", H), TopK: c.TopK, Normalize: c.NormalizeWeights}
			if c.act() == "swiglu" {
				moe.V1 = w.Get(p+"mlp.experts.mlp.v1", E*I*H)
			}
		} else {
			mlp.Out, mlp.OutB = w.Get(p+"mlp.fc2.weight", H*W), w.Opt(c.FC2Bias, p+"mlp.fc2.bias", H)
		}
		g1, b1 := w.Get(p+"norm1.weight", H), w.Get(p+"norm1.bias", H)
		g2, b2 := w.Get(p+"norm2.weight", H), w.Get(p+"norm2.bias", H)
		if w.Err != nil {
			return nil, w.Err
		}
		mlp.Act = c.act()
		q, k, v := make([][]float64, T), make([][]float64, T), make([][]float64, T)
		for t := range x {
			qkv := lmckpt.Linear64(x[t], qkvW, qkvB)
			q[t], k[t], v[t] = qkv[:H], qkv[H:2*H], qkv[2*H:]
			for n := 0; n < heads; n++ {
				Rotary(q[t][n*d:(n+1)*d], t, c.RotaryDim(), c.base(), c.Interleaved)
				Rotary(k[t][n*d:(n+1)*d], t, c.RotaryDim(), c.base(), c.Interleaved)
			}
		}
		ctx := attention(q, k, v, heads)
		for t := range x {
			h := lmckpt.LayerNorm64(add(x[t], lmckpt.Linear64(ctx[t], oW, oB)), g1, b1, eps)
			var y []float64
			if moe != nil {
				y = moe.Apply(h)
			} else {
				y = mlp.Apply(h)
			}
			x[t] = lmckpt.LayerNorm64(add(h, y), g2, b2, eps)
		}
	}
	return x, nil
}

// attention is bidirectional multi-head attention over rotated q, k and v
// [T][heads·d]: softmax(q·k/sqrt(d)) over all keys, times v, per head.
func attention(q, k, v [][]float64, heads int) [][]float64 {
	H := len(q[0])
	d := H / heads
	scale := 1 / math.Sqrt(float64(d))
	ctx := make([][]float64, len(q))
	for t := range q {
		ctx[t] = make([]float64, H)
		for lo := 0; lo < H; lo += d {
			scores := make([]float64, len(k))
			for s := range scores {
				for j := lo; j < lo+d; j++ {
					scores[s] += q[t][j] * k[s][j]
				}
				scores[s] *= scale
			}
			for s, ps := range lmckpt.Softmax64(scores) {
				for j := lo; j < lo+d; j++ {
					ctx[t][j] += ps * v[s][j]
				}
			}
		}
	}
	return ctx
}

// MLP is one layer's MLP with nn.Linear weights [out][in] row-major; nil
// biases are absent. Gate is nil for the plain MLP (Value is then fc1).
type MLP struct {
	Act                                   string
	Value, ValueB, Gate, GateB, Out, OutB []float64
}

// Apply returns fc2(fc11(x) · act(fc12(x))) for the gated activations
// (swiglu: silu, geglu: erf gelu, glu: sigmoid) and fc2(gelu(fc1(x)))
// (erf gelu) for the plain ones.
func (m MLP) Apply(x []float64) []float64 {
	y := lmckpt.Linear64(x, m.Value, m.ValueB)
	var g []float64
	if m.Gate != nil {
		g = lmckpt.Linear64(x, m.Gate, m.GateB)
	}
	for i := range y {
		switch m.Act {
		case "swiglu":
			y[i] *= g[i] / (1 + math.Exp(-g[i]))
		case "geglu":
			y[i] *= lmckpt.GELU64(g[i])
		case "glu":
			y[i] *= 1 / (1 + math.Exp(-g[i]))
		default:
			y[i] = lmckpt.GELU64(y[i])
		}
	}
	return lmckpt.Linear64(y, m.Out, m.OutB)
}

// MoE is one mixture-of-experts layer as megablocks' dMoE runs it (the
// layer contrastors trains nomic-embed-text-v2-moe with): the router
// [E, H]; each expert's rows of W1 (and V1) [E·I, H] and W2 [E·I, H],
// expert e's being rows [e·I, (e+1)·I); Bias [H] added to the sum.
type MoE struct {
	Router, W1, V1, W2, Bias []float64
	TopK                     int
	Normalize                bool
}

// Apply runs the layer on one token: the softmax over the router's
// logits, the TopK largest (ties to the lower index), divided by their
// sum with Normalize; each chosen expert's gelu(W1ₑ·x) (silu(W1ₑ·x) ·
// V1ₑ·x with V1), times W2ₑ without a transpose (megablocks' SparseMLP:
// torch.mm(h, w2)), weighed; plus Bias.
func (m MoE) Apply(x []float64) []float64 {
	H := len(x)
	probs := lmckpt.Softmax64(lmckpt.Linear64(x, m.Router, nil))
	E := len(probs)
	I := len(m.W1) / (E * H)
	top := lmckpt.TopK64(probs, m.TopK)
	sum := 0.0
	for _, e := range top {
		sum += probs[e]
	}
	out := append([]float64(nil), m.Bias...)
	for _, e := range top {
		w := probs[e]
		if m.Normalize {
			w /= sum
		}
		h := lmckpt.Linear64(x, m.W1[e*I*H:(e+1)*I*H], nil)
		var v []float64
		if m.V1 != nil {
			v = lmckpt.Linear64(x, m.V1[e*I*H:(e+1)*I*H], nil)
		}
		for f := range h {
			if v != nil {
				h[f] = lmckpt.SiLU64(h[f]) * v[f]
			} else {
				h[f] = lmckpt.GELU64(h[f])
			}
		}
		for f, a := range h {
			row := m.W2[(e*I+f)*H : (e*I+f+1)*H]
			for i, r := range row {
				out[i] += w * a * r
			}
		}
	}
	return out
}

// Rotary rotates one head's vector x in place for position pos, over its
// first rotDim dims (even), with inv_freq[j] = base^(-2j/rotDim), j <
// rotDim/2, and angle pos·inv_freq[j]. Non-interleaved (GPT-NeoX,
// rotate_half on halves) turns the pairs (x[j], x[j+rotDim/2]);
// interleaved (GPT-J) the pairs (x[2j], x[2j+1]); each pair (a, b) becomes
// (a·cos − b·sin, b·cos + a·sin). Dims from rotDim on are untouched.
func Rotary(x []float64, pos, rotDim int, base float64, interleaved bool) {
	half := rotDim / 2
	for j := 0; j < half; j++ {
		sin, cos := math.Sincos(float64(pos) / math.Pow(base, float64(2*j)/float64(rotDim)))
		ia, ib := j, j+half
		if interleaved {
			ia, ib = 2*j, 2*j+1
		}
		a, b := x[ia], x[ib]
		x[ia], x[ib] = a*cos-b*sin, b*cos+a*sin
	}
}

func add(a, b []float64) []float64 {
	out := make([]float64, len(a))
	for i := range a {
		out[i] = a[i] + b[i]
	}
	return out
}
