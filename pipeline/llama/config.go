package llama

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/nn"
)

func init() {
	lm.Register("LlamaForCausalLM", New)
	lm.Register("LlamaForSequenceClassification", lm.ClassifierOf(New))
}

// Config is a LlamaForCausalLM config.json. Optional fields are pointers so
// resolve can tell "absent" (transformers' default applies) from a value.
// The Llama-derived architectures embed it and add their own fields.
type Config struct {
	Architectures         []string        `json:"architectures"`
	ModelType             string          `json:"model_type"`
	VocabSize             *int            `json:"vocab_size"`
	HiddenSize            *int            `json:"hidden_size"`
	IntermediateSize      *int            `json:"intermediate_size"`
	NumHiddenLayers       *int            `json:"num_hidden_layers"`
	NumAttentionHeads     *int            `json:"num_attention_heads"`
	NumKeyValueHeads      *int            `json:"num_key_value_heads"`
	HeadDim               *int            `json:"head_dim"`
	HiddenAct             string          `json:"hidden_act"`
	MaxPositionEmbeddings *int            `json:"max_position_embeddings"`
	RMSNormEps            *float64        `json:"rms_norm_eps"`
	RopeTheta             *float64        `json:"rope_theta"`
	RopeScaling           json.RawMessage `json:"rope_scaling"`
	AttentionBias         bool            `json:"attention_bias"`
	MLPBias               bool            `json:"mlp_bias"`
	TieWordEmbeddings     *bool           `json:"tie_word_embeddings"`
	BOSTokenID            config.IDList   `json:"bos_token_id"`
	EOSTokenID            config.IDList   `json:"eos_token_id"`
	LayerTypes            []string        `json:"layer_types"`
}

// GPT2Names are GPT2Config's names for the sizes (n_embd, n_layer,
// n_head, n_inner, n_positions, layer_norm_epsilon,
// activation_function), which GPT-2's, GPTBigCode's and GPT-J's configs
// hold in place of Llama's. Architectures embed them beside Config.
type GPT2Names struct {
	NEmbd            *int     `json:"n_embd"`
	NLayer           *int     `json:"n_layer"`
	NHead            *int     `json:"n_head"`
	NInner           *int     `json:"n_inner"`
	NPositions       *int     `json:"n_positions"`
	LayerNormEpsilon *float64 `json:"layer_norm_epsilon"`
	ActivationFunc   string   `json:"activation_function"`
}

// Apply reads the names into c as the classes read them: their
// attribute_map makes hidden_size n_embd and so on, Llama's names winning
// where the config writes both (set last); the intermediate size is
// n_inner, 4 × the hidden size (d's when unset) when null or 0; every
// head has its key and value, n_embd / n_head wide, so neither
// num_key_value_heads, head_dim nor layer_types is read, nor are
// rms_norm_eps, hidden_act, attention_bias and mlp_bias.
func (g *GPT2Names) Apply(c *Config, d Defaults) {
	pick := func(llamas, own *int) *int {
		if llamas != nil {
			return llamas
		}
		return own
	}
	c.HiddenSize = pick(c.HiddenSize, g.NEmbd)
	c.NumHiddenLayers = pick(c.NumHiddenLayers, g.NLayer)
	c.NumAttentionHeads = pick(c.NumAttentionHeads, g.NHead)
	c.MaxPositionEmbeddings = pick(c.MaxPositionEmbeddings, g.NPositions)
	c.RMSNormEps = g.LayerNormEpsilon
	c.HiddenAct = g.ActivationFunc
	inner := 4 * lm.Or(c.HiddenSize, d.Hidden)
	if g.NInner != nil && *g.NInner > 0 {
		inner = *g.NInner
	}
	c.IntermediateSize = &inner
	c.NumKeyValueHeads, c.HeadDim, c.LayerTypes = nil, nil, nil
	c.AttentionBias, c.MLPBias = false, false
}

// Defaults are the values transformers' configuration class uses for
// fields a config.json leaves out; they differ per architecture.
type Defaults struct {
	VocabSize, Hidden, Intermediate, Layers, Heads, MaxPositions int
	Eps, RopeTheta                                               float64
	Tie                                                          bool
	Act                                                          string
	// LongRope accepts rope_type "longrope" and sets Spec.RopeSwitch, for
	// the families whose transformers classes run its switch (Phi-3's
	// generate prefills a crossing sequence again); the others refuse it.
	LongRope bool
	// KVHeads, when not 0, is num_key_value_heads when the config leaves
	// it out (an explicit null stays the attention heads); 0 makes it the
	// heads either way. HeadDim likewise for head_dim (an explicit null:
	// hidden_size / num_attention_heads).
	KVHeads, HeadDim int
	// BOS and EOS, when not nil, are bos_token_id and eos_token_id when
	// the config leaves them out (an explicit null: none).
	BOS, EOS []int
}

// LlamaDefaults are LlamaConfig's defaults.
var LlamaDefaults = Defaults{
	VocabSize: 32000, Hidden: 4096, Intermediate: 11008, Layers: 32, Heads: 32,
	MaxPositions: 2048, Eps: 1e-6, RopeTheta: 10000, Tie: false, Act: "silu",
}

// Resolve applies defaults and derives head_dim, KV heads and the rotary
// embedding, checking that the numbers fit together. All layers are
// full-attention unless layer_types says otherwise; callers set sliding
// windows afterwards.
func (c *Config) Resolve(cfg *config.File, d Defaults) (Options, error) {
	where := lm.ConfigName(cfg)
	if d.KVHeads > 0 && c.NumKeyValueHeads == nil && !cfg.Has("num_key_value_heads") {
		kv := d.KVHeads
		c.NumKeyValueHeads = &kv
	}
	if d.HeadDim > 0 && c.HeadDim == nil && !cfg.Has("head_dim") {
		hd := d.HeadDim
		c.HeadDim = &hd
	}
	if d.BOS != nil && !cfg.Has("bos_token_id") {
		c.BOSTokenID = d.BOS
	}
	if d.EOS != nil && !cfg.Has("eos_token_id") {
		c.EOSTokenID = d.EOS
	}
	s := lm.Spec{
		Architecture: cfg.Architecture(),
		ModelType:    c.ModelType,
		VocabSize:    lm.Or(c.VocabSize, d.VocabSize),
		Hidden:       lm.Or(c.HiddenSize, d.Hidden),
		Intermediate: lm.Or(c.IntermediateSize, d.Intermediate),
		Layers:       lm.Or(c.NumHiddenLayers, d.Layers),
		Heads:        lm.Or(c.NumAttentionHeads, d.Heads),
		MaxPositions: lm.Or(c.MaxPositionEmbeddings, d.MaxPositions),
		EOS:          c.EOSTokenID,
		BOS:          -1,
	}
	if len(c.BOSTokenID) > 0 {
		s.BOS = c.BOSTokenID[0]
	}
	s.KVHeads = lm.Or(c.NumKeyValueHeads, s.Heads)
	if c.HeadDim != nil && *c.HeadDim > 0 {
		s.HeadDim = *c.HeadDim
	} else if s.Hidden > 0 && s.Heads > 0 { // otherwise CheckSizes names the field
		if s.Hidden%s.Heads != 0 {
			return Options{}, fmt.Errorf("%s: hidden_size %d is not a multiple of num_attention_heads %d (and head_dim is not set)", where, s.Hidden, s.Heads)
		}
		s.HeadDim = s.Hidden / s.Heads
	}
	if err := s.CheckSizes(where); err != nil {
		return Options{}, err
	}
	s.TieEmbeddings = lm.Or(c.TieWordEmbeddings, d.Tie)
	kinds, err := lm.LayerTypes(where, c.LayerTypes, s.Layers, lm.KindFull, lm.KindSliding)
	if err != nil {
		return Options{}, err
	}
	if kinds == nil {
		kinds = make([]string, s.Layers)
		for i := range kinds {
			kinds[i] = lm.KindFull
		}
	}
	s.LayerKinds = kinds
	o := Options{Spec: s, Eps: lm.Or(c.RMSNormEps, d.Eps), QKVBias: c.AttentionBias, OBias: c.AttentionBias, MLPBias: c.MLPBias}
	act := c.HiddenAct
	if act == "" {
		act = d.Act
	}
	if o.Act = nn.Activation(act); o.Act == nil {
		return Options{}, errs.Unsupportedf("%s: hidden_act %q is not supported (supported: %s)", where, act, strings.Join(nn.ActivationNames(), ", "))
	}
	rope := nn.ConfigRope
	if d.LongRope {
		rope = nn.ConfigRopeSwitched
	}
	o.Rope, err = rope(cfg.Raw, d.RopeTheta, s.HeadDim, s.MaxPositions)
	if err != nil {
		return Options{}, fmt.Errorf("%s: %w", where, err)
	}
	if o.Rope.LongInvFreq != nil {
		o.Spec.RopeSwitch = o.Rope.LongAfter
	}
	return o, nil
}

// New builds a LlamaForCausalLM from its config.json.
func New(cfg *config.File) (lm.Model, error) {
	var c Config
	if err := cfg.Decode(&c); err != nil {
		return nil, err
	}
	o, err := c.Resolve(cfg, LlamaDefaults)
	if err != nil {
		return nil, err
	}
	return NewModel(o), nil
}
