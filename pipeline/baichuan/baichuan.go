// Package baichuan implements Baichuan Intelligence's models, following
// the modeling_baichuan.py and configuration_baichuan.py their
// repositories ship (remote code):
//   - BaichuanForCausalLM: Baichuan 2 (7B, 13B, Base and Chat) and
//     Baichuan-13B (Base and Chat);
//   - BaiChuanForCausalLM: Baichuan-7B, the first release.
//
// A Baichuan block is Llama's (pipeline/llama) with the query, key and
// value projections in one matrix, self_attn.W_pack [3 × hidden, hidden],
// whose product is split in that order (llama.Options.FusedQKV), no
// biases, a key/value head per head, RMSNorms and the SwiGLU MLP under
// Llama's names. The releases differ in the code beside each, which the
// configs do not name; tputool tells them apart as vLLM does:
//   - positions: the 7B models (BaiChuanForCausalLM, and
//     BaichuanForCausalLM with hidden_size 4096, Baichuan 2 7B) turn
//     halves of every head by the rotary (base 10000; the code reads no
//     rope_theta); the 13B models (BaichuanForCausalLM otherwise) have no
//     rotary but attention with linear biases (ALiBi: slope h × the key's
//     position, BLOOM's slopes, added to the scaled scores), their
//     context bounded at model_max_length;
//   - the head: Baichuan 2 (a vocabulary of 125,696) normalizes each row
//     of lm_head to unit length (NormHead), done as the weight loads
//     (lm.WeightSpec.RowNormalized); the first releases' head is plain.
//
// The head is never tied. The tokenizer is a SentencePiece model
// (tokenizer.model, BaichuanTokenizer), which loader/tokenizer reads.
package baichuan

import (
	"fmt"
	"strings"

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/llama"
	"github.com/tputool/tputool/pipeline/lm"
)

// The classes this package registers.
const (
	Architecture   = "BaichuanForCausalLM" // Baichuan 2, Baichuan-13B
	Architecture7B = "BaiChuanForCausalLM" // Baichuan-7B
)

// Baichuan2Vocab is Baichuan 2's vocabulary size, which tells its
// normalized head apart (vLLM's test).
const Baichuan2Vocab = 125696

func init() {
	lm.Register(Architecture, New)
	lm.Register(Architecture7B, New)
}

// Config is a Baichuan config.json: BaichuanConfig's model_max_length
// (the 13B models' context) besides the fields Llama's config shares.
type Config struct {
	llama.Config
	ModelMaxLength *int `json:"model_max_length"`
}

// Defaults are Baichuan 2 7B's BaichuanConfig's (the releases write
// every size).
var Defaults = llama.Defaults{
	VocabSize: 64000, Hidden: 4096, Intermediate: 11008, Layers: 32, Heads: 32, MaxPositions: 4096,
	Eps: 1e-6, RopeTheta: 10000, Tie: false, Act: "silu",
	BOS: []int{1}, EOS: []int{2},
}

// Variant is what the code beside a release does that its config does
// not say.
type Variant struct {
	// ALiBi: the 13B models' linear biases in place of the rotary.
	ALiBi bool
	// NormHead: Baichuan 2's head, each row normalized to unit length.
	NormHead bool
}

// Resolve reads a Baichuan config.json into the options of
// pipeline/llama's decoder and the release's Variant.
func Resolve(cfg *config.File) (llama.Options, Variant, error) {
	var c Config
	if err := cfg.Decode(&c); err != nil {
		return llama.Options{}, Variant{}, err
	}
	where := lm.ConfigName(cfg)
	arch := Architecture
	if len(c.Architectures) > 0 {
		arch = c.Architectures[0]
	}
	// Every head has its key and value, hidden_size / heads wide; the
	// rotary's base is fixed (RotaryEmbedding's default).
	if c.NumKeyValueHeads != nil && c.NumAttentionHeads != nil && *c.NumKeyValueHeads != *c.NumAttentionHeads {
		return llama.Options{}, Variant{}, errs.Unsupportedf("%s: num_key_value_heads %d; Baichuan's attention has a key/value head per head (%d)", where, *c.NumKeyValueHeads, *c.NumAttentionHeads)
	}
	hd := c.HeadDim
	c.NumKeyValueHeads, c.HeadDim, c.LayerTypes = nil, nil, nil
	c.RopeTheta, c.RopeScaling = nil, nil
	c.AttentionBias, c.MLPBias = false, false
	v := Variant{
		ALiBi:    arch == Architecture && lm.Or(c.HiddenSize, Defaults.Hidden) != 4096,
		NormHead: lm.Or(c.VocabSize, Defaults.VocabSize) == Baichuan2Vocab,
	}
	if v.ALiBi && c.ModelMaxLength != nil {
		c.MaxPositionEmbeddings = c.ModelMaxLength
	}
	o, err := c.Config.Resolve(cfg, Defaults)
	if err != nil {
		return llama.Options{}, Variant{}, err
	}
	if hd != nil && *hd != o.Spec.HeadDim {
		return llama.Options{}, Variant{}, fmt.Errorf("%s: head_dim %d differs from hidden_size / num_attention_heads %d", where, *hd, o.Spec.HeadDim)
	}
	if o.Spec.TieEmbeddings {
		return llama.Options{}, Variant{}, errs.Unsupportedf("%s: tie_word_embeddings; Baichuan's head is its own lm_head", where)
	}
	o.FusedQKV = true
	if v.ALiBi {
		o.NoRotary()
		o.ALiBi = true // BLOOM's order: q·k/√d + slope·position
	}
	return o, v, nil
}

// New builds a Baichuan model from its config.json.
func New(cfg *config.File) (lm.Model, error) {
	o, v, err := Resolve(cfg)
	if err != nil {
		return nil, err
	}
	return &Model{Model: llama.NewModel(o), variant: v}, nil
}

// Model is Baichuan's decoder in its checkpoints' names. It implements
// lm.Renamer.
type Model struct {
	*llama.Model
	variant Variant
}

var _ lm.Renamer = (*Model)(nil)

// Variant is the release's Variant.
func (m *Model) Variant() Variant { return m.variant }

// RenameWeight implements lm.Renamer: self_attn.W_pack is
// self_attn.qkv_proj; the other names are Llama's.
func (m *Model) RenameWeight(stored string) string {
	return strings.Replace(stored, ".self_attn.W_pack.", ".self_attn.qkv_proj.", 1)
}

// HeadWeights lists the final norm and lm_head, whose rows Baichuan 2's
// NormHead normalizes as they load.
func (m *Model) HeadWeights() []lm.WeightSpec {
	ws := m.Model.HeadWeights()
	if m.variant.NormHead {
		for i := range ws {
			if ws[i].Name == "lm_head.weight" {
				ws[i].RowNormalized = true
			}
		}
	}
	return ws
}
