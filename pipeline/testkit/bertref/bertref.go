// Package bertref writes tiny BERT-family encoder checkpoints (BertModel,
// XLMRobertaModel, MPNetModel and their *ForMaskedLM layouts) with exact
// Hugging Face tensor names and deterministic pseudo-random weights, a tiny
// WordPiece tokenizer.json and a sentence-transformers layout, and runs the
// encoder in float64 as an independent reference for pipeline/bert. Nothing
// here is a trained model.
//
// The reference follows transformers' BertModel / XLMRobertaModel forward in
// eval mode (no dropout) for one unpadded sequence: token_type_ids all 0,
// attention_mask all 1, absolute position embeddings, post-LayerNorm
// encoder layers with the exact (erf) GELU. For MPNetModel it follows
// modeling_mpnet.py: no token type embeddings, and a T5-style bucketed
// relative position bias (encoder.relative_attention_bias, shared by all
// layers) added to every head's scaled attention scores; see Forward and
// MPNetBucket.
package bertref

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"

	"github.com/tputool/tputool/loader/safetensors"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
)

// Config describes a tiny BERT-family encoder checkpoint.
type Config struct {
	Vocab, Hidden, Layers, Heads, Intermediate int
	// MaxPositions is max_position_embeddings as stored in config.json
	// (XLM-RoBERTa stores 2 more than the longest input: 514 for 512).
	MaxPositions int
	// TypeVocab is type_vocab_size (2 for BERT, 1 for XLM-RoBERTa). MPNet
	// has no token type embeddings and ignores it.
	TypeVocab int
	// Eps is layer_norm_eps (1e-12 for BERT, 1e-5 for XLM-RoBERTa and for
	// sentence-transformers/all-mpnet-base-v2; MPNetConfig's default is
	// 1e-12).
	Eps float64
	// Roberta selects the XLM-RoBERTa layout: model_type "xlm-roberta",
	// architectures ["XLMRobertaModel"], pad_token_id 1, bos 0, eos 2, and
	// position ids from create_position_ids_from_input_ids (padding_idx+1+t
	// for an input without pad tokens).
	Roberta bool
	// MPNet selects the MPNet layout (MPNetModel, e.g.
	// sentence-transformers/all-mpnet-base-v2): model_type "mpnet",
	// architectures ["MPNetModel"], pad_token_id 1, bos 0, eos 2,
	// relative_attention_num_buckets Buckets, no type_vocab_size and no
	// token_type_embeddings; position ids as for XLM-RoBERTa
	// (padding_idx 1); tensors embeddings.{word,position}_embeddings,
	// embeddings.LayerNorm, encoder.layer.N.attention.attn.{q,k,v,o},
	// encoder.layer.N.attention.LayerNorm, encoder.layer.N.intermediate.dense,
	// encoder.layer.N.output.{dense,LayerNorm} and
	// encoder.relative_attention_bias.weight [Buckets, Heads]. MPNet and
	// Roberta are exclusive.
	MPNet bool
	// Buckets is relative_attention_num_buckets for MPNet, the rows of
	// encoder.relative_attention_bias.weight; 0 means 32. (MPNetEncoder
	// buckets distances with a fixed 32 whatever the config says, so a
	// table of fewer than 32 rows fails for inputs that reach a row past
	// its end, and rows from 32 on are never read; see Forward.)
	Buckets int
	// Arch overrides architectures[0] (default "BertModel",
	// "XLMRobertaModel" or "MPNetModel"), e.g. "BertForMaskedLM" or
	// "MPNetForMaskedLM".
	Arch string
	// Prefix ("" or e.g. "bert." / "roberta." / "mpnet.") is prepended to
	// every encoder tensor name (embeddings, encoder, pooler), as the
	// *ForMaskedLM classes save them.
	Prefix string
	// GammaBeta names LayerNorm parameters LayerNorm.gamma / LayerNorm.beta
	// (old TF-converted checkpoints) instead of .weight / .bias.
	GammaBeta bool
	// Pooler also writes pooler.dense.weight [H,H] and pooler.dense.bias [H]
	// (under Prefix); the reference does not use them.
	Pooler bool
	// PositionIDs also writes the buffer embeddings.position_ids (under
	// Prefix), I64 [1, MaxPositions] = 0..MaxPositions-1, as older saves do.
	PositionIDs bool
	// MLMHead also writes a masked-LM head, not under Prefix: for BERT
	// cls.predictions.transform.dense.weight [H,H] / .bias [H],
	// cls.predictions.transform.LayerNorm.weight / .bias [H] and
	// cls.predictions.bias [V]; for XLM-RoBERTa and MPNet
	// lm_head.dense.weight / .bias, lm_head.layer_norm.weight / .bias and
	// lm_head.bias [V]. The decoder weight is tied to the word embeddings
	// (and MPNet's decoder bias to lm_head.bias) and not stored.
	MLMHead bool
	// Labels > 0 also writes a sequence-classification head of that many
	// labels, not under Prefix (BertForSequenceClassification: the pooler
	// under Prefix, then classifier.weight [Labels, H] and .bias;
	// XLMRobertaForSequenceClassification: classifier.dense [H, H] and
	// classifier.out_proj [Labels, H], each with a bias), and id2label in
	// config.json; the default Arch becomes the *ForSequenceClassification
	// class. Not for MPNet.
	Labels int
}

// padID is config.json's pad_token_id (also the padding_idx of the
// position ids for XLM-RoBERTa and MPNet).
func (c Config) padID() int {
	if c.Roberta || c.MPNet {
		return 1
	}
	return 0
}

// buckets is relative_attention_num_buckets (MPNet only).
func (c Config) buckets() int {
	if c.Buckets == 0 {
		return 32
	}
	return c.Buckets
}

func (c Config) arch() string {
	switch {
	case c.Arch != "":
		return c.Arch
	case c.MPNet:
		return "MPNetModel"
	case c.Roberta && c.Labels > 0:
		return "XLMRobertaForSequenceClassification"
	case c.Labels > 0:
		return "BertForSequenceClassification"
	case c.Roberta:
		return "XLMRobertaModel"
	default:
		return "BertModel"
	}
}

// lnNames returns the weight and bias names of the LayerNorm module at
// path (e.g. "embeddings.LayerNorm"), honouring GammaBeta.
func (c Config) lnNames(path string) (w, b string) {
	if c.GammaBeta {
		return path + ".gamma", path + ".beta"
	}
	return path + ".weight", path + ".bias"
}

func (c Config) check() error {
	switch {
	case c.Vocab <= 0 || c.Hidden <= 0 || c.Layers < 0 || c.Heads <= 0 || c.Intermediate <= 0:
		return fmt.Errorf("bertref: sizes must be positive: %+v", c)
	case c.Hidden%c.Heads != 0:
		return fmt.Errorf("bertref: hidden %d is not a multiple of heads %d", c.Hidden, c.Heads)
	case c.MPNet && c.Roberta:
		return fmt.Errorf("bertref: MPNet and Roberta are exclusive")
	case c.MPNet && (c.MaxPositions <= 0 || c.Buckets < 0):
		return fmt.Errorf("bertref: max positions %d must be positive and buckets %d not negative", c.MaxPositions, c.Buckets)
	case !c.MPNet && (c.MaxPositions <= 0 || c.TypeVocab <= 0):
		return fmt.Errorf("bertref: max positions %d and type vocab %d must be positive", c.MaxPositions, c.TypeVocab)
	case c.Roberta && c.Vocab <= 2:
		return fmt.Errorf("bertref: an XLM-RoBERTa vocabulary needs ids 0..2")
	case c.MPNet && c.Vocab <= 2:
		return fmt.Errorf("bertref: an MPNet vocabulary needs ids 0..2")
	case c.Eps <= 0:
		return fmt.Errorf("bertref: layer_norm_eps %g must be positive", c.Eps)
	case c.Labels < 0 || (c.MPNet && c.Labels > 0):
		return fmt.Errorf("bertref: labels %d: want 0, or a BERT or XLM-R classifier's count", c.Labels)
	}
	return nil
}

// tensor is one weight to write: its full name, shape and how to draw it.
type tensor struct {
	name  string
	shape []int
	kind  string // "linear", "bias", "lnw", "lnb", "embed", "relbias"
}

// tensors lists the float tensors Write stores, in the order their values
// are drawn: the encoder first, so the optional extras do not change the
// encoder's weights for a given seed.
func (c Config) tensors() []tensor {
	if c.MPNet {
		return c.mpnetTensors()
	}
	H, I, P := c.Hidden, c.Intermediate, c.Prefix
	var out []tensor
	add := func(name, kind string, shape ...int) { out = append(out, tensor{name, shape, kind}) }
	ln := func(path string) {
		w, b := c.lnNames(path)
		add(w, "lnw", H)
		add(b, "lnb", H)
	}
	add(P+"embeddings.word_embeddings.weight", "embed", c.Vocab, H)
	add(P+"embeddings.position_embeddings.weight", "embed", c.MaxPositions, H)
	add(P+"embeddings.token_type_embeddings.weight", "embed", c.TypeVocab, H)
	ln(P + "embeddings.LayerNorm")
	for l := 0; l < c.Layers; l++ {
		p := fmt.Sprintf("%sencoder.layer.%d.", P, l)
		for _, m := range []string{"query", "key", "value"} {
			add(p+"attention.self."+m+".weight", "linear", H, H)
			add(p+"attention.self."+m+".bias", "bias", H)
		}
		add(p+"attention.output.dense.weight", "linear", H, H)
		add(p+"attention.output.dense.bias", "bias", H)
		ln(p + "attention.output.LayerNorm")
		add(p+"intermediate.dense.weight", "linear", I, H)
		add(p+"intermediate.dense.bias", "bias", I)
		add(p+"output.dense.weight", "linear", H, I)
		add(p+"output.dense.bias", "bias", H)
		ln(p + "output.LayerNorm")
	}
	if c.Pooler {
		add(P+"pooler.dense.weight", "linear", H, H)
		add(P+"pooler.dense.bias", "bias", H)
	}
	if c.MLMHead {
		if c.Roberta {
			add("lm_head.dense.weight", "linear", H, H)
			add("lm_head.dense.bias", "bias", H)
			add("lm_head.layer_norm.weight", "lnw", H)
			add("lm_head.layer_norm.bias", "lnb", H)
			add("lm_head.bias", "bias", c.Vocab)
		} else {
			add("cls.predictions.transform.dense.weight", "linear", H, H)
			add("cls.predictions.transform.dense.bias", "bias", H)
			ln("cls.predictions.transform.LayerNorm")
			add("cls.predictions.bias", "bias", c.Vocab)
		}
	}
	if c.Labels > 0 { // drawn last: the encoder's weights do not change
		if c.Roberta {
			add("classifier.dense.weight", "linear", H, H)
			add("classifier.dense.bias", "bias", H)
			add("classifier.out_proj.weight", "linear", c.Labels, H)
			add("classifier.out_proj.bias", "bias", c.Labels)
		} else {
			if !c.Pooler {
				add(P+"pooler.dense.weight", "linear", H, H)
				add(P+"pooler.dense.bias", "bias", H)
			}
			add("classifier.weight", "linear", c.Labels, H)
			add("classifier.bias", "bias", c.Labels)
		}
	}
	return out
}

// mpnetTensors is tensors for MPNet, in MPNetModel's module order: the
// embeddings, the layers, then encoder.relative_attention_bias (registered
// after the layers), then the optional pooler and masked-LM head.
func (c Config) mpnetTensors() []tensor {
	H, I, P := c.Hidden, c.Intermediate, c.Prefix
	var out []tensor
	add := func(name, kind string, shape ...int) { out = append(out, tensor{name, shape, kind}) }
	ln := func(path string) {
		w, b := c.lnNames(path)
		add(w, "lnw", H)
		add(b, "lnb", H)
	}
	add(P+"embeddings.word_embeddings.weight", "embed", c.Vocab, H)
	add(P+"embeddings.position_embeddings.weight", "embed", c.MaxPositions, H)
	ln(P + "embeddings.LayerNorm")
	for l := 0; l < c.Layers; l++ {
		p := fmt.Sprintf("%sencoder.layer.%d.", P, l)
		for _, m := range []string{"q", "k", "v", "o"} {
			add(p+"attention.attn."+m+".weight", "linear", H, H)
			add(p+"attention.attn."+m+".bias", "bias", H)
		}
		ln(p + "attention.LayerNorm")
		add(p+"intermediate.dense.weight", "linear", I, H)
		add(p+"intermediate.dense.bias", "bias", I)
		add(p+"output.dense.weight", "linear", H, I)
		add(p+"output.dense.bias", "bias", H)
		ln(p + "output.LayerNorm")
	}
	add(P+"encoder.relative_attention_bias.weight", "relbias", c.buckets(), c.Heads)
	if c.Pooler {
		add(P+"pooler.dense.weight", "linear", H, H)
		add(P+"pooler.dense.bias", "bias", H)
	}
	if c.MLMHead {
		add("lm_head.dense.weight", "linear", H, H)
		add("lm_head.dense.bias", "bias", H)
		add("lm_head.layer_norm.weight", "lnw", H)
		add("lm_head.layer_norm.bias", "lnb", H)
		add("lm_head.bias", "bias", c.Vocab)
	}
	return out
}

// values draws a tensor's values from r (lmckpt.EncoderValues).
func values(r *lmckpt.Rand, t tensor) []float32 { return lmckpt.EncoderValues(r, t.kind, t.shape) }

// configJSON returns a config.json as transformers writes it for the class.
func (c Config) configJSON() map[string]any {
	if c.MPNet {
		// MPNetConfig's keys: no type_vocab_size, position_embedding_type,
		// use_cache or classifier_dropout.
		return map[string]any{
			"architectures":                  []string{c.arch()},
			"attention_probs_dropout_prob":   0.1,
			"bos_token_id":                   0,
			"eos_token_id":                   2,
			"hidden_act":                     "gelu",
			"hidden_dropout_prob":            0.1,
			"hidden_size":                    c.Hidden,
			"initializer_range":              0.02,
			"intermediate_size":              c.Intermediate,
			"layer_norm_eps":                 c.Eps,
			"max_position_embeddings":        c.MaxPositions,
			"model_type":                     "mpnet",
			"num_attention_heads":            c.Heads,
			"num_hidden_layers":              c.Layers,
			"pad_token_id":                   c.padID(),
			"relative_attention_num_buckets": c.buckets(),
			"torch_dtype":                    "float32",
			"transformers_version":           "4.46.3",
			"vocab_size":                     c.Vocab,
		}
	}
	j := map[string]any{
		"architectures":                []string{c.arch()},
		"attention_probs_dropout_prob": 0.1,
		"classifier_dropout":           nil,
		"hidden_act":                   "gelu",
		"hidden_dropout_prob":          0.1,
		"hidden_size":                  c.Hidden,
		"initializer_range":            0.02,
		"intermediate_size":            c.Intermediate,
		"layer_norm_eps":               c.Eps,
		"max_position_embeddings":      c.MaxPositions,
		"num_attention_heads":          c.Heads,
		"num_hidden_layers":            c.Layers,
		"pad_token_id":                 c.padID(),
		"position_embedding_type":      "absolute",
		"torch_dtype":                  "float32",
		"transformers_version":         "4.46.3",
		"type_vocab_size":              c.TypeVocab,
		"use_cache":                    true,
		"vocab_size":                   c.Vocab,
	}
	if c.Labels > 0 {
		id2label, label2id := map[string]string{}, map[string]int{}
		for i := range c.Labels {
			id2label[fmt.Sprint(i)] = fmt.Sprintf("LABEL_%d", i)
			label2id[fmt.Sprintf("LABEL_%d", i)] = i
		}
		j["id2label"], j["label2id"] = id2label, label2id
	}
	if c.Roberta {
		j["model_type"] = "xlm-roberta"
		j["bos_token_id"] = 0
		j["eos_token_id"] = 2
		j["output_past"] = true
	} else {
		j["model_type"] = "bert"
	}
	return j
}

// Write writes dir/config.json, dir/generation_config.json (lmckpt's) and
// dir/model.safetensors for c, with weights drawn from seed: linear weights
// uniform·1.5/sqrt(fan_in), biases uniform·0.1, LayerNorm weights 1+0.2·u
// and biases 0.1·u, embeddings uniform·0.5, all stored as F32.
func Write(dir string, c Config, seed uint64) error {
	if err := c.check(); err != nil {
		return err
	}
	r := lmckpt.NewRand(seed)
	var ts []safetensors.Tensor
	for _, t := range c.tensors() {
		st, err := safetensors.Float32Tensor(t.name, safetensors.F32, t.shape, values(r, t))
		if err != nil {
			return err
		}
		ts = append(ts, st)
	}
	if c.PositionIDs {
		data := make([]byte, 8*c.MaxPositions)
		for i := 0; i < c.MaxPositions; i++ {
			binary.LittleEndian.PutUint64(data[8*i:], uint64(i))
		}
		ts = append(ts, safetensors.Tensor{
			Name:  c.Prefix + "embeddings.position_ids",
			DType: safetensors.I64,
			Shape: []int{1, c.MaxPositions},
			Data:  data,
		})
	}
	return lmckpt.WriteCheckpoint(dir, c.configJSON(), ts)
}

// Forward is transformers' BertModel / XLMRobertaModel / MPNetModel forward
// in float64 for one unpadded input ids (token_type_ids all 0,
// attention_mask all 1), eval mode: returns last_hidden_state
// [len(ids)][Hidden].
//
// Position ids are 0..T-1 for BERT. For XLM-RoBERTa and MPNet they follow
// create_position_ids_from_input_ids with padding_idx = pad_token_id = 1:
// padding_idx + (number of non-pad ids up to and including t), and
// padding_idx itself for a pad id, so padding_idx+1+t when no id is 1.
//
// MPNet: embeddings = LayerNorm(word + position) (no token types). The
// relative position bias is computed once per forward from the token
// indices t (query) and s (key), not from the position ids:
// bias[h][t][s] = relative_attention_bias.weight[MPNetBucket(s-t, 32,
// 128)][h], with the bucket count fixed at 32 as MPNetEncoder's
// compute_position_bias default (it does not read
// relative_attention_num_buckets); a bucket past the table's Buckets rows
// is an error, as the embedding lookup fails in transformers. Each layer:
// scores = q·k/sqrt(d) + bias, softmax, a = LayerNorm(o(context) + x),
// out = LayerNorm(dense(gelu(intermediate(a))) + a), all linears with bias.
func Forward(dir string, c Config, ids []int) ([][]float64, error) {
	return ForwardTypes(dir, c, ids, nil)
}

// ForwardTypes is Forward with token_type_ids (nil: all 0; BERT only, the
// second text of a pair is type 1).
func ForwardTypes(dir string, c Config, ids, types []int) ([][]float64, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	w, err := lmckpt.ReadFloat64(dir)
	if err != nil {
		return nil, err
	}
	return forwardTypes(w, c, ids, types)
}

// Score is the *ForSequenceClassification forward in float64 for one
// input (ids with their token types, nil for all 0): the classifier's
// logits on the first token's last hidden state. BERT: classifier(tanh(
// pooler.dense(h0))); XLM-R's RobertaClassificationHead: out_proj(tanh(
// dense(h0))) (dropout off).
func Score(dir string, c Config, ids, types []int) ([]float64, error) {
	if c.Labels <= 0 {
		return nil, fmt.Errorf("bertref: Score needs a classifier (Labels > 0)")
	}
	if err := c.check(); err != nil {
		return nil, err
	}
	m, err := lmckpt.ReadFloat64(dir)
	if err != nil {
		return nil, err
	}
	h, err := forwardTypes(m, c, ids, types)
	if err != nil {
		return nil, err
	}
	H := c.Hidden
	dense, out := c.Prefix+"pooler.dense", "classifier"
	if c.Roberta {
		dense, out = "classifier.dense", "classifier.out_proj"
	}
	w := &lmckpt.Weights64{M: m, Kit: "bertref"}
	dW, dB := w.Get(dense+".weight", H*H), w.Get(dense+".bias", H)
	oW, oB := w.Get(out+".weight", c.Labels*H), w.Get(out+".bias", c.Labels)
	if w.Err != nil {
		return nil, w.Err
	}
	x := lmckpt.Linear64(h[0], dW, dB)
	for i := range x {
		x[i] = math.Tanh(x[i])
	}
	return lmckpt.Linear64(x, oW, oB), nil
}

// PositionIDs returns the position ids transformers uses for ids (see
// Forward).
func PositionIDs(c Config, ids []int) []int {
	pos := make([]int, len(ids))
	if !c.Roberta && !c.MPNet {
		for t := range pos {
			pos[t] = t
		}
		return pos
	}
	pad := c.padID()
	count := 0
	for t, id := range ids {
		if id == pad {
			pos[t] = pad
			continue
		}
		count++
		pos[t] = pad + count
	}
	return pos
}

// forward runs the encoder on weights already read (so tests can perturb
// them).
func forward(m map[string][]float64, c Config, ids []int) ([][]float64, error) {
	return forwardTypes(m, c, ids, nil)
}

func forwardTypes(m map[string][]float64, c Config, ids, types []int) ([][]float64, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	if types != nil && (len(types) != len(ids) || c.MPNet) {
		return nil, fmt.Errorf("bertref: %d token types for %d ids (MPNet has none)", len(types), len(ids))
	}
	if len(ids) == 0 {
		return nil, fmt.Errorf("bertref: no input ids")
	}
	H, P := c.Hidden, c.Prefix
	heads, nb := c.Heads, c.buckets()
	w := &lmckpt.Weights64{M: m, Kit: "bertref"}
	word := w.Get(P+"embeddings.word_embeddings.weight", c.Vocab*H)
	posEmb := w.Get(P+"embeddings.position_embeddings.weight", c.MaxPositions*H)
	var typeEmb, relBias []float64 // BERT's token types, MPNet's position bias
	if c.MPNet {
		relBias = w.Get(P+"encoder.relative_attention_bias.weight", nb*heads)
	} else {
		typeEmb = w.Get(P+"embeddings.token_type_embeddings.weight", c.TypeVocab*H)
	}
	lnW, lnB := c.lnNames(P + "embeddings.LayerNorm")
	embG, embB := w.Get(lnW, H), w.Get(lnB, H)
	if w.Err != nil {
		return nil, w.Err
	}
	pos := PositionIDs(c, ids)
	T := len(ids)
	x := make([][]float64, T)
	for t, id := range ids {
		if id < 0 || id >= c.Vocab {
			return nil, fmt.Errorf("bertref: id %d at %d is outside the vocabulary of %d", id, t, c.Vocab)
		}
		if pos[t] >= c.MaxPositions {
			return nil, fmt.Errorf("bertref: position %d at %d is past max_position_embeddings %d", pos[t], t, c.MaxPositions)
		}
		e := make([]float64, H)
		if c.MPNet {
			for i := range e {
				e[i] = word[id*H+i] + posEmb[pos[t]*H+i]
			}
		} else {
			tt := 0 // token_type_ids all 0 unless given
			if types != nil {
				tt = types[t]
			}
			if tt < 0 || tt >= c.TypeVocab {
				return nil, fmt.Errorf("bertref: token type %d at %d is outside type_vocab_size %d", tt, t, c.TypeVocab)
			}
			for i := range e {
				e[i] = word[id*H+i] + typeEmb[tt*H+i] + posEmb[pos[t]*H+i]
			}
		}
		x[t] = lmckpt.LayerNorm64(e, embG, embB, c.Eps)
	}
	if !c.MPNet {
		return encoderLayers(w, c, x, nil)
	}
	// MPNet's position bias, once for all layers: bias[t][s] is the row of
	// relative_attention_bias.weight [Buckets, Heads] for query t, key s.
	bias := make([][][]float64, T)
	for t := range bias {
		bias[t] = make([][]float64, T)
		for s := range bias[t] {
			b := MPNetBucket(s-t, mpnetBucketCount, mpnetMaxDistance)
			if b >= nb {
				return nil, fmt.Errorf("bertref: relative distance %d falls in bucket %d, past relative_attention_num_buckets %d", s-t, b, nb)
			}
			bias[t][s] = relBias[b*heads : (b+1)*heads]
		}
	}
	return encoderLayers(w, c, x, bias)
}

// MPNetEncoder.compute_position_bias calls relative_position_bucket with
// its own defaults: num_buckets 32 (not relative_attention_num_buckets) and
// max_distance 128.
const (
	mpnetBucketCount = 32
	mpnetMaxDistance = 128
)

// MPNetBucket is transformers' MPNetEncoder.relative_position_bucket (a
// bidirectional T5-style bucketing) for rel = memory_position -
// context_position, i.e. key index minus query index: rel > 0 when the key
// comes after the query. With half = buckets/2 and exact = half/2 (integer
// division) and n = -rel:
//
//   - keys after the query (n < 0) use the upper half, offset half; keys at
//     or before it (n >= 0, rel <= 0, distance 0 included) the lower half;
//   - with n = |n|, a distance n < exact is its own bucket n;
//   - otherwise exact + trunc(log(n/exact) / log(maxDistance/exact) ·
//     (half-exact)), at most half-1.
//
// So for MPNet's 32 buckets and max distance 128: rel 0 → 0, rel -1..-7 →
// 1..7, rel 1..7 → 17..23, rel -8 → 8, rel 8 → 24, and every distance from
// 91 on saturates at 15 (rel <= -91) or 31 (rel >= 91). The logarithmic
// part is evaluated in float32, as transformers does (n.float(); the
// divisor log(maxDistance/exact) is a Python float, applied in float32),
// with a correctly rounded float32 log; truncation is toward zero.
// MPNetBucket panics unless buckets >= 4 and maxDistance > buckets/4.
func MPNetBucket(rel, buckets, maxDistance int) int {
	half := buckets / 2
	exact := half / 2
	if exact <= 0 || maxDistance <= exact {
		panic(fmt.Sprintf("bertref.MPNetBucket: buckets %d, max distance %d", buckets, maxDistance))
	}
	n := -rel
	ret := 0
	if n < 0 {
		ret = half
		n = -n
	}
	if n < exact {
		return ret + n
	}
	lg := float32(math.Log(float64(float32(n) / float32(exact))))
	den := float32(math.Log(float64(maxDistance) / float64(exact)))
	frac := float32(lg / den)
	large := exact + int(float32(frac*float32(half-exact)))
	if large > half-1 {
		large = half - 1
	}
	return ret + large
}

// encoderLayers runs the encoder's layers on the embeddings x [T][H]:
// BertLayer (attention.self.{query,key,value}, attention.output.dense
// and its LayerNorm) or MPNetLayer (attention.attn.{q,k,v,o} and
// attention.LayerNorm), whose scores add bias[t][s][h] after the
// scaling (MPNetSelfAttention); bias is nil for BERT. Each layer:
// scores = q·k/sqrt(d) (+ bias), softmax, a = LayerNorm(o(context) + x),
// out = LayerNorm(dense(gelu(intermediate(a))) + a).
func encoderLayers(w *lmckpt.Weights64, c Config, x [][]float64, bias [][][]float64) ([][]float64, error) {
	H, I, P, T := c.Hidden, c.Intermediate, c.Prefix, len(x)
	heads := c.Heads
	d := H / heads
	scale := 1 / math.Sqrt(float64(d))
	self, qkv, out, norm := "attention.self.", [3]string{"query", "key", "value"}, "attention.output.dense", "attention.output.LayerNorm"
	if c.MPNet {
		self, qkv, out, norm = "attention.attn.", [3]string{"q", "k", "v"}, "attention.attn.o", "attention.LayerNorm"
	}
	for l := 0; l < c.Layers; l++ {
		p := fmt.Sprintf("%sencoder.layer.%d.", P, l)
		qW, qB := w.Get(p+self+qkv[0]+".weight", H*H), w.Get(p+self+qkv[0]+".bias", H)
		kW, kB := w.Get(p+self+qkv[1]+".weight", H*H), w.Get(p+self+qkv[1]+".bias", H)
		vW, vB := w.Get(p+self+qkv[2]+".weight", H*H), w.Get(p+self+qkv[2]+".bias", H)
		oW, oB := w.Get(p+out+".weight", H*H), w.Get(p+out+".bias", H)
		aw, ab := c.lnNames(p + norm)
		aG, aB := w.Get(aw, H), w.Get(ab, H)
		iW, iB := w.Get(p+"intermediate.dense.weight", I*H), w.Get(p+"intermediate.dense.bias", I)
		dW, dB := w.Get(p+"output.dense.weight", H*I), w.Get(p+"output.dense.bias", H)
		ow, ob := c.lnNames(p + "output.LayerNorm")
		outG, outB := w.Get(ow, H), w.Get(ob, H)
		if w.Err != nil {
			return nil, w.Err
		}

		q := make([][]float64, T)
		k := make([][]float64, T)
		v := make([][]float64, T)
		for t := 0; t < T; t++ {
			q[t] = lmckpt.Linear64(x[t], qW, qB)
			k[t] = lmckpt.Linear64(x[t], kW, kB)
			v[t] = lmckpt.Linear64(x[t], vW, vB)
		}
		next := make([][]float64, T)
		for t := 0; t < T; t++ {
			ctx := make([]float64, H)
			for h := 0; h < heads; h++ {
				lo := h * d
				scores := make([]float64, T)
				for s := 0; s < T; s++ {
					dot := 0.0
					for j := 0; j < d; j++ {
						dot += q[t][lo+j] * k[s][lo+j]
					}
					scores[s] = dot * scale
					if bias != nil { // MPNetSelfAttention: scale first, then add the bias
						scores[s] += bias[t][s][h]
					}
				}
				probs := lmckpt.Softmax64(scores)
				for s := 0; s < T; s++ {
					for j := 0; j < d; j++ {
						ctx[lo+j] += probs[s] * v[s][lo+j]
					}
				}
			}
			// BertSelfOutput / MPNetAttention: LayerNorm(o(context) + input).
			a := lmckpt.Linear64(ctx, oW, oB)
			for i := range a {
				a[i] += x[t][i]
			}
			a = lmckpt.LayerNorm64(a, aG, aB, c.Eps)
			// Intermediate: exact GELU; output: LayerNorm(dense + a).
			hmid := lmckpt.Linear64(a, iW, iB)
			for i := range hmid {
				hmid[i] = lmckpt.GELU64(hmid[i])
			}
			o := lmckpt.Linear64(hmid, dW, dB)
			for i := range o {
				o[i] += a[i]
			}
			next[t] = lmckpt.LayerNorm64(o, outG, outB, c.Eps)
		}
		x = next
	}
	return x, nil
}

// Pool pools hidden states as sentence-transformers' Pooling does for one unpadded input: mode "cls" (first token), "mean" (average of all tokens), "last"; then if normalize, divides by the L2 norm.
//
// Mode "max" (elementwise maximum over tokens) is also accepted. The norm
// is clamped below at 1e-12 as torch.nn.functional.normalize does (the
// Normalize module). Pool panics on another mode or on no tokens.
func Pool(h [][]float64, mode string, normalize bool) []float64 {
	if len(h) == 0 {
		panic("bertref.Pool: no tokens")
	}
	out := make([]float64, len(h[0]))
	switch mode {
	case "cls":
		copy(out, h[0])
	case "last":
		copy(out, h[len(h)-1])
	case "mean":
		for _, row := range h {
			for i, v := range row {
				out[i] += v
			}
		}
		for i := range out {
			out[i] /= float64(len(h))
		}
	case "max":
		copy(out, h[0])
		for _, row := range h[1:] {
			for i, v := range row {
				out[i] = math.Max(out[i], v)
			}
		}
	default:
		panic(fmt.Sprintf("bertref.Pool: unknown mode %q", mode))
	}
	if normalize {
		norm := 0.0
		for _, v := range out {
			norm += v * v
		}
		norm = math.Max(math.Sqrt(norm), 1e-12)
		for i := range out {
			out[i] /= norm
		}
	}
	return out
}

// Vocabulary building blocks for WriteTokenizer, in id order.
var (
	specialTokens = []string{"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"}
	coreTokens    = []string{
		".", "?", ",", "!",
		"the", "a", "tpu", "is", "what", "hello", "world", "matrix", "processor",
		"model", "run", "embed", "##s", "##ing", "##ed",
	}
	extraTokens = []string{
		"this", "that", "of", "and", "to", "in", "for", "on", "it", "with",
		"text", "sentence", "vector", "search", "query", "document", "##er", "##ly",
		"0", "1", "2", "3", "4", "5", "6", "7", "8", "9", "'", "-",
	}
)

// MinTokenizerVocab is the smallest vocabulary WriteTokenizer accepts;
// FullTokenizerVocab is the smallest one that holds every single letter
// a-z and ##a-##z, so that any lowercase ASCII word tokenizes without
// [UNK].
const (
	MinTokenizerVocab  = 40
	FullTokenizerVocab = 75
)

// TokenizerVocab returns the first n entries of WriteTokenizer's
// vocabulary, in id order: [PAD] [UNK] [CLS] [SEP] [MASK], punctuation and
// a few words, the letters a-z, ##a-##z, more words and digits, then
// [unused0], [unused1], ...
func TokenizerVocab(n int) []string {
	var all []string
	seen := map[string]bool{}
	add := func(s string) {
		if !seen[s] {
			seen[s] = true
			all = append(all, s)
		}
	}
	for _, s := range specialTokens {
		add(s)
	}
	for _, s := range coreTokens {
		add(s)
	}
	for ch := 'a'; ch <= 'z'; ch++ {
		add(string(ch))
	}
	for ch := 'a'; ch <= 'z'; ch++ {
		add("##" + string(ch))
	}
	for _, s := range extraTokens {
		add(s)
	}
	for i := 0; len(all) < n; i++ {
		add(fmt.Sprintf("[unused%d]", i))
	}
	return all[:n]
}

type addedToken struct {
	ID         int    `json:"id"`
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	LStrip     bool   `json:"lstrip"`
	RStrip     bool   `json:"rstrip"`
	Normalized bool   `json:"normalized"`
	Special    bool   `json:"special"`
}

type tokenizerJSON struct {
	Version       string         `json:"version"`
	Truncation    any            `json:"truncation"`
	Padding       any            `json:"padding"`
	AddedTokens   []addedToken   `json:"added_tokens"`
	Normalizer    map[string]any `json:"normalizer"`
	PreTokenizer  map[string]any `json:"pre_tokenizer"`
	PostProcessor map[string]any `json:"post_processor"`
	Decoder       map[string]any `json:"decoder"`
	Model         map[string]any `json:"model"`
}

// WriteTokenizer writes dir/tokenizer.json and dir/tokenizer_config.json: a tiny but real HF "tokenizers" WordPiece tokenizer as bert-base-uncased's is configured (normalizer BertNormalizer{clean_text, handle_chinese_chars, strip_accents null, lowercase true}, pre_tokenizer BertPreTokenizer, model WordPiece{unk_token "[UNK]", continuing_subword_prefix "##", max_input_chars_per_word 100, vocab}, post_processor TemplateProcessing single "[CLS] $A [SEP]" pair "[CLS] $A [SEP] $B:1 [SEP]:1" with special_tokens ids, decoder WordPiece{prefix "##", cleanup true}, added_tokens for [PAD] [UNK] [CLS] [SEP] [MASK] with special true), with a vocabulary of exactly `vocab` entries (vocab ≥ 40): ids 0..4 = [PAD] [UNK] [CLS] [SEP] [MASK] (so pad_token_id 0 for Bert), then words like "the", "a", "tpu", "is", "matrix", "processor", "what", "hello", "world", ".", "?", ",", "##s", "##ing", "##ed", "run", "model", "embed", ... and single letters a-z and ##a-##z as fill so any lowercase ASCII word tokenizes; pad with "[unused0]".. if needed to reach exactly vocab entries.
// tokenizer_config.json: {"do_lower_case": true, "model_max_length": 512, "cls_token": "[CLS]", "sep_token": "[SEP]", "pad_token": "[PAD]", "unk_token": "[UNK]", "mask_token": "[MASK]", "tokenizer_class": "BertTokenizer"}.
//
// The order of the vocabulary is TokenizerVocab's; every letter and
// ##letter is present from FullTokenizerVocab (75) entries on, so with a
// smaller vocab a word may encode to [UNK].
func WriteTokenizer(dir string, vocab int) error {
	if vocab < MinTokenizerVocab {
		return fmt.Errorf("bertref: tokenizer vocabulary %d is below %d", vocab, MinTokenizerVocab)
	}
	toks := TokenizerVocab(vocab)
	id := func(tok string) int {
		for i, t := range toks {
			if t == tok {
				return i
			}
		}
		panic("bertref: no token " + tok)
	}
	special := func(tok string, typeID int) map[string]any {
		return map[string]any{"SpecialToken": map[string]any{"id": tok, "type_id": typeID}}
	}
	seq := func(name string, typeID int) map[string]any {
		return map[string]any{"Sequence": map[string]any{"id": name, "type_id": typeID}}
	}
	tj := tokenizerJSON{
		Version: "1.0",
		Normalizer: map[string]any{
			"type": "BertNormalizer", "clean_text": true, "handle_chinese_chars": true,
			"strip_accents": nil, "lowercase": true,
		},
		PreTokenizer: map[string]any{"type": "BertPreTokenizer"},
		PostProcessor: map[string]any{
			"type":   "TemplateProcessing",
			"single": []any{special("[CLS]", 0), seq("A", 0), special("[SEP]", 0)},
			"pair":   []any{special("[CLS]", 0), seq("A", 0), special("[SEP]", 0), seq("B", 1), special("[SEP]", 1)},
			"special_tokens": map[string]any{
				"[CLS]": map[string]any{"id": "[CLS]", "ids": []int{id("[CLS]")}, "tokens": []string{"[CLS]"}},
				"[SEP]": map[string]any{"id": "[SEP]", "ids": []int{id("[SEP]")}, "tokens": []string{"[SEP]"}},
			},
		},
		Decoder: map[string]any{"type": "WordPiece", "prefix": "##", "cleanup": true},
		Model: map[string]any{
			"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
			"max_input_chars_per_word": 100, "vocab": lmckpt.OrderedVocab(toks),
		},
	}
	for _, s := range specialTokens {
		tj.AddedTokens = append(tj.AddedTokens, addedToken{ID: id(s), Content: s, Special: true})
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := writeJSON(filepath.Join(dir, "tokenizer.json"), tj); err != nil {
		return err
	}
	cfg := map[string]any{
		"clean_up_tokenization_spaces": true,
		"cls_token":                    "[CLS]",
		"do_lower_case":                true,
		"mask_token":                   "[MASK]",
		"model_max_length":             512,
		"pad_token":                    "[PAD]",
		"sep_token":                    "[SEP]",
		"strip_accents":                nil,
		"tokenize_chinese_chars":       true,
		"tokenizer_class":              "BertTokenizer",
		"unk_token":                    "[UNK]",
	}
	return writeJSON(filepath.Join(dir, "tokenizer_config.json"), cfg)
}

// poolingModes are the keys of sentence-transformers' 1_Pooling/config.json
// and the Pool mode that turns each on ("" for none).
var poolingModes = []struct{ key, mode string }{
	{"pooling_mode_cls_token", "cls"},
	{"pooling_mode_mean_tokens", "mean"},
	{"pooling_mode_max_tokens", "max"},
	{"pooling_mode_mean_sqrt_len_tokens", ""},
	{"pooling_mode_weightedmean_tokens", ""},
	{"pooling_mode_lasttoken", "last"},
}

// WriteSentenceTransformers writes modules.json (0: Transformer at "", 1: Pooling at "1_Pooling", 2: Normalize at "2_Normalize"; types "sentence_transformers.models.Transformer" etc.), 1_Pooling/config.json (word_embedding_dimension, pooling_mode_cls_token / pooling_mode_mean_tokens / pooling_mode_max_tokens / pooling_mode_mean_sqrt_len_tokens / pooling_mode_weightedmean_tokens / pooling_mode_lasttoken with exactly the one named by mode "cls"/"mean"/"last" true, include_prompt true), 2_Normalize/ (an empty dir is fine; sentence-transformers writes none), and sentence_bert_config.json {"max_seq_length": maxSeq, "do_lower_case": false}.
//
// Mode "max" (pooling_mode_max_tokens) is also accepted.
func WriteSentenceTransformers(dir string, hidden int, mode string, maxSeq int) error {
	pool := map[string]any{"word_embedding_dimension": hidden, "include_prompt": true}
	found := false
	for _, pm := range poolingModes {
		on := pm.mode != "" && pm.mode == mode
		found = found || on
		pool[pm.key] = on
	}
	if !found {
		return fmt.Errorf("bertref: unknown pooling mode %q", mode)
	}
	for _, sub := range []string{"1_Pooling", "2_Normalize"} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o755); err != nil {
			return err
		}
	}
	modules := []map[string]any{
		{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
		{"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
		{"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"},
	}
	if err := writeJSON(filepath.Join(dir, "modules.json"), modules); err != nil {
		return err
	}
	if err := writeJSON(filepath.Join(dir, "1_Pooling", "config.json"), pool); err != nil {
		return err
	}
	return writeJSON(filepath.Join(dir, "sentence_bert_config.json"),
		map[string]any{"max_seq_length": maxSeq, "do_lower_case": false})
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}
