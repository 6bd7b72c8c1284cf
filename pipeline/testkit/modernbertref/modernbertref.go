// Package modernbertref writes tiny ModernBERT checkpoints (ModernBertModel,
// ModernBertForMaskedLM and ModernBertForSequenceClassification layouts)
// with exact Hugging Face tensor names and deterministic pseudo-random
// weights, optionally a tiny byte-level BPE tokenizer.json in ModernBERT's
// layout, and runs the encoder (and the sequence-classification head) in
// float64 as an independent reference. Nothing here is a trained model.
//
// # Source
//
// The semantics were read from huggingface/transformers,
// src/transformers/models/modernbert/: modeling_modernbert.py and
// configuration_modernbert.py at commit
// 001f85b38fb432858ace93f18622f07cec46d874 (transformers 5: layer_types and
// rope_parameters, attention through ALL_ATTENTION_FUNCTIONS, masks from
// masking_utils), modeling_modernbert.py at
// 000c33fdfde12e1ffafbfcdb3c926df5727a00b6 and
// 1ae3d1e0c46618caf8bbe15c404293d0d1f8b8ee and modular_modernbert.py at
// 2a7aa23b304f532843dce270dbe6a4a5c8689604 (the transformers 4.48 code:
// global_rope_theta / local_rope_theta, eager/sdpa/flash attention
// functions, _update_attention_mask), and
// masking_utils.sliding_window_bidirectional_overlay. No code was copied;
// the Go below is written from the semantics.
//
// # Forward (eval mode, one unpadded sequence, attention_mask all 1)
//
//   - embeddings: LayerNorm(tok_embeddings[ids]) with embeddings.norm; no
//     position embeddings and no token types. Position ids are 0..T-1.
//   - layer i: x += Wo(attention(attn_norm(x))), where attn_norm is the
//     identity at layer 0 (no tensor is stored for it); then
//     x += mlp.Wo(act(in) * gate) with [in | gate] = mlp.Wi(mlp_norm(x))
//     split in two halves of Intermediate (the first half is activated).
//   - attention: qkv = Wqkv(h) viewed as [T, 3, heads, head_dim], so rows
//     [0,H) of Wqkv are the queries, [H,2H) the keys, [2H,3H) the values,
//     and head n is the contiguous slice [n·d, (n+1)·d) of each. Rotary
//     position embedding on q and k, non-interleaved (rotate_half: the
//     pair is (j, j+d/2)) with inv_freq[j] = theta^(-2j/d); scores
//     q·k·d^-0.5; softmax; context; Wo.
//   - layer i is global (full attention, theta = GlobalTheta) iff
//     i % GlobalEvery == 0, so layer 0 is always global; the others are
//     local: theta = LocalTheta and key s is masked for query t when
//     |t-s| > LocalAttention/2 (integer division; the window is inclusive,
//     as _update_attention_mask's `distance <= local_attention // 2` in 4.x
//     and sliding_window_bidirectional_overlay's `abs(q-kv) <=
//     sliding_window` with sliding_window = local_attention // 2 in 5.x).
//   - last_hidden_state = final_norm(x).
//
// Every LayerNorm is nn.LayerNorm(eps=norm_eps, bias=norm_bias): no bias
// tensor (and no bias term) when NormBias is false. Linear biases exist
// only when AttentionBias (Wqkv, attn.Wo) or MLPBias (Wi, mlp.Wo) is set.
//
// transformers computes the rotary cos/sin in float32 (inv_freq and the
// angle pos·inv_freq in float32; 5.x also applies the rotation in float32);
// this reference does everything in float64, which differs from that by
// about 1e-7 relative for the short inputs tests use.
//
// # Sequence classification
//
// ModernBertForSequenceClassification pools last_hidden_state ("cls": row
// 0; "mean": the average over the tokens, i.e. over attention_mask = 1),
// then head = ModernBertPredictionHead: norm(act(dense(pooled))) with
// dense = head.dense (bias only if classifier_bias), act =
// classifier_activation and norm = head.norm (LayerNorm with norm_eps and
// norm_bias), then classifier (a Linear with bias, [num_labels, H]).
//
// # Config keys, old and new
//
// transformers 4.48-4.5x (ModernBERT-base's config.json) store the RoPE
// bases as global_rope_theta (default 160000.0) and local_rope_theta
// (default 10000.0), and the layer pattern as global_attn_every_n_layers
// (default 3). In 4.x a local layer uses local_rope_theta unless it is
// None (JSON null), in which case it falls back to global_rope_theta
// (`if config.local_rope_theta is not None: rope_theta =
// config.local_rope_theta`).
//
// transformers 5 (configuration_modernbert.py at the commit above) stores
// layer_types (one of "full_attention" / "sliding_attention" per layer) and
// rope_parameters = {"full_attention": {"rope_type": "default",
// "rope_theta": G}, "sliding_attention": {"rope_type": "default",
// "rope_theta": L}}. Loading an old config, layer_types defaults to
// "sliding_attention" if i % global_attn_every_n_layers else
// "full_attention" (global_attn_every_n_layers read with kwargs.get, default
// 3, and kept as an attribute, so it is still saved); a missing
// rope_parameters entry gets rope_theta from the popped global_rope_theta /
// local_rope_theta, defaulting to 160000.0 / 10000.0. A JSON null
// local_rope_theta is not special-cased any more: kwargs.pop returns None
// and None becomes sliding_attention's rope_theta (no fallback to the
// global base). In 5.x the eager/sdpa path picks both the mask (full or
// bidirectional sliding window) and the RoPE table by layer_types, while
// the flash-attention window still comes from layer_idx %
// global_attn_every_n_layers; the configs written here always agree.
package modernbertref

import (
	"fmt"
	"math"

	"github.com/tputool/tputool/loader/safetensors"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
)

// Defaults used for zero Config fields (ModernBertConfig's defaults).
const (
	DefaultLocalAttention = 128
	DefaultGlobalEvery    = 3
	DefaultGlobalTheta    = 160000.0
	DefaultLocalTheta     = 10000.0
	DefaultNormEps        = 1e-5
	DefaultMaxPositions   = 8192
)

// Config describes a tiny ModernBERT checkpoint. Zero values of
// MaxPositions, LocalAttention, GlobalEvery, GlobalTheta, LocalTheta,
// NormEps, Act, ClassifierPooling and ClassifierAct mean ModernBertConfig's
// defaults (the Default* constants, "gelu", "cls", "gelu").
type Config struct {
	Vocab, Hidden, Intermediate, Layers, Heads int
	// MaxPositions is max_position_embeddings. RoPE does not read it and
	// Forward does not limit the input by it (neither does transformers).
	MaxPositions int
	// LocalAttention is local_attention, the whole window: a local layer's
	// query t sees keys s with |t-s| <= LocalAttention/2.
	LocalAttention int
	// GlobalEvery is global_attn_every_n_layers: layer i is global iff
	// i % GlobalEvery == 0.
	GlobalEvery int
	// GlobalTheta and LocalTheta are the RoPE bases of the global and the
	// local layers (global_rope_theta / local_rope_theta, or
	// rope_parameters' full_attention / sliding_attention rope_theta).
	GlobalTheta, LocalTheta float64
	// LocalThetaNull writes "local_rope_theta": null (old-style config
	// only); the local layers then use GlobalTheta, as transformers 4.x
	// does, and LocalTheta is ignored.
	LocalThetaNull bool
	// NormEps is norm_eps.
	NormEps float64
	// NormBias, AttentionBias and MLPBias are norm_bias, attention_bias and
	// mlp_bias; each adds the corresponding .bias tensors.
	NormBias, AttentionBias, MLPBias bool
	// PadID, CLSID and SepID are pad_token_id, cls_token_id and
	// sep_token_id (bos_token_id = CLSID and eos_token_id = SepID, as in
	// ModernBERT-base). MaskID and UnkID are only used by WriteTokenizer.
	PadID, CLSID, SepID, MaskID, UnkID int
	// Act is hidden_activation: "gelu" (exact erf GELU), "gelu_pytorch_tanh"
	// / "gelu_new" / "gelu_fast" (tanh approximation), "silu" / "swish",
	// or "relu".
	Act string
	// Scorer writes ModernBertForSequenceClassification: head.dense,
	// head.norm, classifier.weight [Labels, H] and classifier.bias
	// [Labels], with id2label / label2id / num_labels in config.json.
	Scorer bool
	Labels int
	// ClassifierPooling is classifier_pooling: "cls" or "mean".
	ClassifierPooling string
	// ClassifierAct is classifier_activation (same names as Act).
	ClassifierAct string
	// ClassifierBias is classifier_bias: head.dense.bias exists.
	ClassifierBias bool
	// Prefix stores the encoder under "model." (embeddings at
	// model.embeddings...), as the *For* classes save it. Scorer and
	// MaskedLM imply it.
	Prefix bool
	// MaskedLM writes ModernBertForMaskedLM: also head.dense.weight (+bias
	// if ClassifierBias), head.norm.weight (+bias if NormBias) and
	// decoder.bias [Vocab] (decoder.weight is tied to the token embeddings
	// and not stored). A base-model loader must skip them. Exclusive with
	// Scorer.
	MaskedLM bool
	// NewStyleConfig writes transformers 5's layer_types and
	// rope_parameters instead of global_rope_theta / local_rope_theta.
	NewStyleConfig bool
	// DType is the stored weight dtype: "" or "F32", "BF16" or "F16".
	DType string
}

func (c Config) maxPositions() int {
	if c.MaxPositions == 0 {
		return DefaultMaxPositions
	}
	return c.MaxPositions
}

func (c Config) localAttention() int {
	if c.LocalAttention == 0 {
		return DefaultLocalAttention
	}
	return c.LocalAttention
}

func (c Config) globalEvery() int {
	if c.GlobalEvery == 0 {
		return DefaultGlobalEvery
	}
	return c.GlobalEvery
}

func (c Config) globalTheta() float64 {
	if c.GlobalTheta == 0 {
		return DefaultGlobalTheta
	}
	return c.GlobalTheta
}

// localTheta is the base the local layers use (GlobalTheta when
// LocalThetaNull).
func (c Config) localTheta() float64 {
	switch {
	case c.LocalThetaNull:
		return c.globalTheta()
	case c.LocalTheta == 0:
		return DefaultLocalTheta
	}
	return c.LocalTheta
}

func (c Config) normEps() float64 {
	if c.NormEps == 0 {
		return DefaultNormEps
	}
	return c.NormEps
}

func (c Config) act() string {
	if c.Act == "" {
		return "gelu"
	}
	return c.Act
}

func (c Config) classifierAct() string {
	if c.ClassifierAct == "" {
		return "gelu"
	}
	return c.ClassifierAct
}

func (c Config) pooling() string {
	if c.ClassifierPooling == "" {
		return "cls"
	}
	return c.ClassifierPooling
}

func (c Config) prefix() string {
	if c.Prefix || c.Scorer || c.MaskedLM {
		return "model."
	}
	return ""
}

func (c Config) dtype() safetensors.DType {
	if c.DType == "" {
		return safetensors.F32
	}
	return safetensors.DType(c.DType)
}

// Arch is config.json's architectures[0] for c.
func (c Config) Arch() string {
	switch {
	case c.Scorer:
		return "ModernBertForSequenceClassification"
	case c.MaskedLM:
		return "ModernBertForMaskedLM"
	}
	return "ModernBertModel"
}

// IsGlobal reports whether layer i is a global (full attention) layer.
func (c Config) IsGlobal(i int) bool { return i%c.globalEvery() == 0 }

// LayerTypes is transformers 5's layer_types for c: "full_attention" for
// the global layers, "sliding_attention" for the others.
func (c Config) LayerTypes() []string {
	out := make([]string, c.Layers)
	for i := range out {
		out[i] = "sliding_attention"
		if c.IsGlobal(i) {
			out[i] = "full_attention"
		}
	}
	return out
}

// Window is the half window of the local layers, local_attention // 2.
func (c Config) Window() int { return c.localAttention() / 2 }

// Theta is the RoPE base of layer i.
func (c Config) Theta(i int) float64 {
	if c.IsGlobal(i) {
		return c.globalTheta()
	}
	return c.localTheta()
}

func knownAct(name string) bool {
	switch name {
	case "gelu", "gelu_pytorch_tanh", "gelu_new", "gelu_fast", "silu", "swish", "relu":
		return true
	}
	return false
}

func (c Config) check() error {
	switch {
	case c.Vocab <= 0 || c.Hidden <= 0 || c.Intermediate <= 0 || c.Layers < 0 || c.Heads <= 0:
		return fmt.Errorf("modernbertref: sizes must be positive: %+v", c)
	case c.Hidden%c.Heads != 0:
		return fmt.Errorf("modernbertref: hidden %d is not a multiple of heads %d", c.Hidden, c.Heads)
	case (c.Hidden/c.Heads)%2 != 0:
		return fmt.Errorf("modernbertref: head dim %d must be even for RoPE", c.Hidden/c.Heads)
	case c.MaxPositions < 0 || c.LocalAttention < 0 || c.GlobalEvery < 0:
		return fmt.Errorf("modernbertref: max positions %d, local attention %d and global every %d must not be negative",
			c.MaxPositions, c.LocalAttention, c.GlobalEvery)
	case c.GlobalTheta < 0 || c.LocalTheta < 0 || c.NormEps < 0:
		return fmt.Errorf("modernbertref: thetas and norm eps must not be negative")
	case !knownAct(c.act()) || !knownAct(c.classifierAct()):
		return fmt.Errorf("modernbertref: unknown activation %q / %q", c.act(), c.classifierAct())
	case c.pooling() != "cls" && c.pooling() != "mean":
		return fmt.Errorf("modernbertref: classifier_pooling %q: want cls or mean", c.ClassifierPooling)
	case c.Scorer && c.MaskedLM:
		return fmt.Errorf("modernbertref: Scorer and MaskedLM are exclusive")
	case c.Scorer && c.Labels <= 0:
		return fmt.Errorf("modernbertref: a scorer needs Labels > 0")
	case !c.Scorer && c.Labels != 0:
		return fmt.Errorf("modernbertref: Labels %d without Scorer", c.Labels)
	case c.LocalThetaNull && c.NewStyleConfig:
		return fmt.Errorf("modernbertref: LocalThetaNull is an old-style config key")
	}
	for _, id := range []int{c.PadID, c.CLSID, c.SepID} {
		if id < 0 || id >= c.Vocab {
			return fmt.Errorf("modernbertref: special id %d outside the vocabulary of %d", id, c.Vocab)
		}
	}
	switch c.dtype() {
	case safetensors.F32, safetensors.BF16, safetensors.F16:
	default:
		return fmt.Errorf("modernbertref: dtype %q: want F32, BF16 or F16", c.DType)
	}
	return nil
}

// Tensor is one stored tensor: its name and shape.
type Tensor struct {
	Name  string
	Shape []int
	kind  string // "linear", "bias", "lnw", "lnb", "embed"
}

// Tensors lists the tensors Write stores, in the order their values are
// drawn (module order, each bias right after its weight).
func (c Config) Tensors() []Tensor {
	H, I, V, P := c.Hidden, c.Intermediate, c.Vocab, c.prefix()
	var out []Tensor
	add := func(name, kind string, shape ...int) { out = append(out, Tensor{name, shape, kind}) }
	linear := func(name string, bias bool, rows, cols int) {
		add(name+".weight", "linear", rows, cols)
		if bias {
			add(name+".bias", "bias", rows)
		}
	}
	norm := func(name string) {
		add(name+".weight", "lnw", H)
		if c.NormBias {
			add(name+".bias", "lnb", H)
		}
	}
	add(P+"embeddings.tok_embeddings.weight", "embed", V, H)
	norm(P + "embeddings.norm")
	for i := 0; i < c.Layers; i++ {
		p := fmt.Sprintf("%slayers.%d.", P, i)
		if i > 0 {
			norm(p + "attn_norm")
		}
		linear(p+"attn.Wqkv", c.AttentionBias, 3*H, H)
		linear(p+"attn.Wo", c.AttentionBias, H, H)
		norm(p + "mlp_norm")
		linear(p+"mlp.Wi", c.MLPBias, 2*I, H)
		linear(p+"mlp.Wo", c.MLPBias, H, I)
	}
	norm(P + "final_norm")
	if c.Scorer || c.MaskedLM {
		linear("head.dense", c.ClassifierBias, H, H)
		norm("head.norm")
	}
	if c.MaskedLM {
		add("decoder.bias", "bias", V)
	}
	if c.Scorer {
		linear("classifier", true, c.Labels, H)
	}
	return out
}

// values draws a tensor's values from r (lmckpt.EncoderValues).
func values(r *lmckpt.Rand, t Tensor) []float32 { return lmckpt.EncoderValues(r, t.kind, t.Shape) }

// ConfigJSON is the config.json Write writes for c.
//
// Both styles: architectures, model_type "modernbert", vocab_size,
// hidden_size, intermediate_size, num_hidden_layers, num_attention_heads,
// max_position_embeddings, hidden_activation, norm_eps, norm_bias,
// attention_bias, mlp_bias, local_attention, global_attn_every_n_layers,
// pad/bos/eos/cls/sep_token_id, classifier_pooling,
// classifier_activation, classifier_bias, classifier_dropout,
// decoder_bias, the dropouts (0), initializer_range,
// initializer_cutoff_factor, deterministic_flash_attn, sparse_prediction,
// sparse_pred_ignore_index, tie_word_embeddings and, for a scorer,
// num_labels, id2label and label2id.
//
// Old style (ModernBertConfig of transformers 4.48): global_rope_theta,
// local_rope_theta (null with LocalThetaNull), repad_logits_with_grad,
// torch_dtype, transformers_version "4.48.0", plus layer_norm_eps and
// position_embedding_type "absolute", extra keys that ModernBERT-base's
// config.json is remembered to carry (not checked against the published
// file; transformers ignores both). New style (transformers 5):
// layer_types, rope_parameters, dtype, transformers_version "5.0.0".
func (c Config) ConfigJSON() map[string]any {
	dt := map[safetensors.DType]string{safetensors.F32: "float32", safetensors.BF16: "bfloat16", safetensors.F16: "float16"}[c.dtype()]
	j := map[string]any{
		"architectures":              []string{c.Arch()},
		"model_type":                 "modernbert",
		"vocab_size":                 c.Vocab,
		"hidden_size":                c.Hidden,
		"intermediate_size":          c.Intermediate,
		"num_hidden_layers":          c.Layers,
		"num_attention_heads":        c.Heads,
		"max_position_embeddings":    c.maxPositions(),
		"hidden_activation":          c.act(),
		"norm_eps":                   c.normEps(),
		"norm_bias":                  c.NormBias,
		"attention_bias":             c.AttentionBias,
		"mlp_bias":                   c.MLPBias,
		"local_attention":            c.localAttention(),
		"global_attn_every_n_layers": c.globalEvery(),
		"pad_token_id":               c.PadID,
		"bos_token_id":               c.CLSID,
		"eos_token_id":               c.SepID,
		"cls_token_id":               c.CLSID,
		"sep_token_id":               c.SepID,
		"classifier_pooling":         c.pooling(),
		"classifier_activation":      c.classifierAct(),
		"classifier_bias":            c.ClassifierBias,
		"classifier_dropout":         0.0,
		"decoder_bias":               true,
		"attention_dropout":          0.0,
		"embedding_dropout":          0.0,
		"mlp_dropout":                0.0,
		"initializer_range":          0.02,
		"initializer_cutoff_factor":  2.0,
		"deterministic_flash_attn":   false,
		"sparse_prediction":          false,
		"sparse_pred_ignore_index":   -100,
		"tie_word_embeddings":        true,
	}
	if c.Scorer {
		id2label, label2id := map[string]string{}, map[string]int{}
		for i := range c.Labels {
			id2label[fmt.Sprint(i)] = fmt.Sprintf("LABEL_%d", i)
			label2id[fmt.Sprintf("LABEL_%d", i)] = i
		}
		j["id2label"], j["label2id"], j["num_labels"] = id2label, label2id, c.Labels
	}
	if c.NewStyleConfig {
		j["layer_types"] = c.LayerTypes()
		j["rope_parameters"] = map[string]any{
			"full_attention":    map[string]any{"rope_type": "default", "rope_theta": c.globalTheta()},
			"sliding_attention": map[string]any{"rope_type": "default", "rope_theta": c.localTheta()},
		}
		j["dtype"] = dt
		j["transformers_version"] = "5.0.0"
		return j
	}
	j["global_rope_theta"] = c.globalTheta()
	if c.LocalThetaNull {
		j["local_rope_theta"] = nil
	} else {
		j["local_rope_theta"] = c.localTheta()
	}
	j["layer_norm_eps"] = c.normEps()
	j["position_embedding_type"] = "absolute"
	j["repad_logits_with_grad"] = false
	j["torch_dtype"] = dt
	j["transformers_version"] = "4.48.0"
	return j
}

// Write writes dir/config.json (ConfigJSON), dir/generation_config.json
// (lmckpt's) and dir/model.safetensors (Tensors) for c, with weights drawn
// from seed: linear weights uniform·1.5/sqrt(fan_in), biases uniform·0.1,
// LayerNorm weights 1+0.2·u and biases 0.1·u, token embeddings uniform·0.5,
// stored as c.DType (default F32).
func Write(dir string, c Config, seed uint64) error {
	if err := c.check(); err != nil {
		return err
	}
	r := lmckpt.NewRand(seed)
	var ts []safetensors.Tensor
	for _, t := range c.Tensors() {
		st, err := safetensors.Float32Tensor(t.Name, c.dtype(), t.Shape, values(r, t))
		if err != nil {
			return err
		}
		ts = append(ts, st)
	}
	return lmckpt.WriteCheckpoint(dir, c.ConfigJSON(), ts)
}

// Forward is ModernBertModel's forward in float64 for one unpadded input
// (see the package comment): last_hidden_state [len(ids)][Hidden], after
// final_norm. dir holds a checkpoint Write wrote for c (or any with the
// same tensor names); the weights are read as stored.
func Forward(dir string, c Config, ids []int) ([][]float64, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	m, err := lmckpt.ReadFloat64(dir)
	if err != nil {
		return nil, err
	}
	return forward(m, c, ids)
}

// Score is ModernBertForSequenceClassification's logits [Labels] in
// float64 for one unpadded input: pool last_hidden_state by
// ClassifierPooling, then classifier(head.norm(act(head.dense(pooled)))).
func Score(dir string, c Config, ids []int) ([]float64, error) {
	if !c.Scorer {
		return nil, fmt.Errorf("modernbertref: Score needs a Scorer config")
	}
	if err := c.check(); err != nil {
		return nil, err
	}
	m, err := lmckpt.ReadFloat64(dir)
	if err != nil {
		return nil, err
	}
	return score(m, c, ids)
}

// norm returns a LayerNorm's weight and bias (nil without NormBias).
func norm(w *lmckpt.Weights64, c Config, path string) (g, b []float64) {
	return w.Get(path+".weight", c.Hidden), w.Opt(c.NormBias, path+".bias", c.Hidden)
}

func forward(m map[string][]float64, c Config, ids []int) ([][]float64, error) {
	x, err := encoder(m, c, ids)
	if err != nil {
		return nil, err
	}
	w := &lmckpt.Weights64{M: m, Kit: "modernbertref"}
	g, b := norm(w, c, c.prefix()+"final_norm")
	if w.Err != nil {
		return nil, w.Err
	}
	for t := range x {
		x[t] = lmckpt.LayerNorm64(x[t], g, b, c.normEps())
	}
	return x, nil
}

// encoder runs the embeddings and the layers, returning the residual
// stream before final_norm.
func encoder(m map[string][]float64, c Config, ids []int) ([][]float64, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	if len(ids) == 0 {
		return nil, fmt.Errorf("modernbertref: no input ids")
	}
	H, I, P, T := c.Hidden, c.Intermediate, c.prefix(), len(ids)
	heads := c.Heads
	d := H / heads
	eps := c.normEps()
	w := &lmckpt.Weights64{M: m, Kit: "modernbertref"}
	tok := w.Get(P+"embeddings.tok_embeddings.weight", c.Vocab*H)
	eg, eb := norm(w, c, P+"embeddings.norm")
	if w.Err != nil {
		return nil, w.Err
	}
	x := make([][]float64, T)
	for t, id := range ids {
		if id < 0 || id >= c.Vocab {
			return nil, fmt.Errorf("modernbertref: id %d at %d is outside the vocabulary of %d", id, t, c.Vocab)
		}
		x[t] = lmckpt.LayerNorm64(tok[id*H:(id+1)*H], eg, eb, eps)
	}

	scale := 1 / math.Sqrt(float64(d))
	for l := 0; l < c.Layers; l++ {
		p := fmt.Sprintf("%slayers.%d.", P, l)
		var ag, ab []float64
		if l > 0 {
			ag, ab = norm(w, c, p+"attn_norm")
		}
		qkvW := w.Get(p+"attn.Wqkv.weight", 3*H*H)
		qkvB := w.Opt(c.AttentionBias, p+"attn.Wqkv.bias", 3*H)
		oW := w.Get(p+"attn.Wo.weight", H*H)
		oB := w.Opt(c.AttentionBias, p+"attn.Wo.bias", H)
		mg, mb := norm(w, c, p+"mlp_norm")
		iW := w.Get(p+"mlp.Wi.weight", 2*I*H)
		iB := w.Opt(c.MLPBias, p+"mlp.Wi.bias", 2*I)
		dW := w.Get(p+"mlp.Wo.weight", H*I)
		dB := w.Opt(c.MLPBias, p+"mlp.Wo.bias", H)
		if w.Err != nil {
			return nil, w.Err
		}
		theta, global, window := c.Theta(l), c.IsGlobal(l), c.Window()

		// q, k, v [T][H]; RoPE on each head of q and k at position t.
		q := make([][]float64, T)
		k := make([][]float64, T)
		v := make([][]float64, T)
		for t := 0; t < T; t++ {
			h := x[t]
			if l > 0 {
				h = lmckpt.LayerNorm64(h, ag, ab, eps)
			}
			qkv := lmckpt.Linear64(h, qkvW, qkvB)
			q[t], k[t], v[t] = qkv[:H], qkv[H:2*H], qkv[2*H:]
			for n := 0; n < heads; n++ {
				Rope(q[t][n*d:(n+1)*d], t, theta)
				Rope(k[t][n*d:(n+1)*d], t, theta)
			}
		}
		for t := 0; t < T; t++ {
			ctx := make([]float64, H)
			for n := 0; n < heads; n++ {
				lo := n * d
				scores := make([]float64, T)
				for s := 0; s < T; s++ {
					if !global && abs(t-s) > window {
						scores[s] = math.Inf(-1)
						continue
					}
					dot := 0.0
					for j := 0; j < d; j++ {
						dot += q[t][lo+j] * k[s][lo+j]
					}
					scores[s] = dot * scale
				}
				probs := lmckpt.Softmax64(scores)
				for s := 0; s < T; s++ {
					for j := 0; j < d; j++ {
						ctx[lo+j] += probs[s] * v[s][lo+j]
					}
				}
			}
			o := lmckpt.Linear64(ctx, oW, oB)
			for i := range o {
				x[t][i] += o[i]
			}
		}
		// MLP (GeGLU-style): Wo(act(in) * gate), [in | gate] = Wi(mlp_norm(x)).
		for t := 0; t < T; t++ {
			u := lmckpt.Linear64(lmckpt.LayerNorm64(x[t], mg, mb, eps), iW, iB)
			z := make([]float64, I)
			for i := range z {
				z[i] = Activation(c.act(), u[i]) * u[I+i]
			}
			y := lmckpt.Linear64(z, dW, dB)
			for i := range y {
				x[t][i] += y[i]
			}
		}
	}
	return x, nil
}

func score(m map[string][]float64, c Config, ids []int) ([]float64, error) {
	h, err := forward(m, c, ids)
	if err != nil {
		return nil, err
	}
	H := c.Hidden
	w := &lmckpt.Weights64{M: m, Kit: "modernbertref"}
	dW := w.Get("head.dense.weight", H*H)
	dB := w.Opt(c.ClassifierBias, "head.dense.bias", H)
	ng, nb := norm(w, c, "head.norm")
	cW := w.Get("classifier.weight", c.Labels*H)
	cB := w.Get("classifier.bias", c.Labels)
	if w.Err != nil {
		return nil, w.Err
	}
	pooled := make([]float64, H)
	switch c.pooling() {
	case "cls":
		copy(pooled, h[0])
	case "mean":
		for _, row := range h {
			for i, v := range row {
				pooled[i] += v
			}
		}
		for i := range pooled {
			pooled[i] /= float64(len(h))
		}
	}
	y := lmckpt.Linear64(pooled, dW, dB)
	for i := range y {
		y[i] = Activation(c.classifierAct(), y[i])
	}
	y = lmckpt.LayerNorm64(y, ng, nb, c.normEps())
	return lmckpt.Linear64(y, cW, cB), nil
}

// Rope rotates one head's vector x (length d, even) in place for position
// pos with base theta, non-interleaved (GPT-NeoX / rotate_half style): for
// j < d/2 the pair (x[j], x[j+d/2]) turns by the angle pos·theta^(-2j/d):
// x[j]' = x[j]·cos − x[j+d/2]·sin, x[j+d/2]' = x[j+d/2]·cos + x[j]·sin.
func Rope(x []float64, pos int, theta float64) {
	d := len(x)
	half := d / 2
	for j := 0; j < half; j++ {
		invFreq := 1 / math.Pow(theta, float64(2*j)/float64(d))
		sin, cos := math.Sincos(float64(pos) * invFreq)
		a, b := x[j], x[j+half]
		x[j] = a*cos - b*sin
		x[j+half] = b*cos + a*sin
	}
}

// Activation is transformers' ACT2FN[name] in float64: "gelu" the exact
// (erf) GELU; "gelu_pytorch_tanh", "gelu_new" and "gelu_fast" the tanh
// approximation 0.5x(1+tanh(sqrt(2/π)(x+0.044715x³))); "silu" / "swish"
// x·sigmoid(x); "relu". It panics on another name (Config.check rejects
// those first).
func Activation(name string, x float64) float64 {
	switch name {
	case "gelu":
		return 0.5 * x * (1 + math.Erf(x/math.Sqrt2))
	case "gelu_pytorch_tanh", "gelu_new", "gelu_fast":
		return 0.5 * x * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(x+0.044715*x*x*x)))
	case "silu", "swish":
		return x / (1 + math.Exp(-x))
	case "relu":
		return math.Max(x, 0)
	}
	panic("modernbertref: unknown activation " + name)
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}
