package gemma4

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/nn"
)

// TextConfig is Gemma4TextConfig as config.json (or its text_config)
// holds it. Optional fields are pointers: absent takes transformers'
// default.
type TextConfig struct {
	ModelType               string                     `json:"model_type"`
	VocabSize               *int                       `json:"vocab_size"`
	HiddenSize              *int                       `json:"hidden_size"`
	IntermediateSize        *int                       `json:"intermediate_size"`
	NumHiddenLayers         *int                       `json:"num_hidden_layers"`
	NumAttentionHeads       *int                       `json:"num_attention_heads"`
	NumKeyValueHeads        *int                       `json:"num_key_value_heads"`
	HeadDim                 *int                       `json:"head_dim"`
	GlobalHeadDim           *int                       `json:"global_head_dim"`
	NumGlobalKeyValueHeads  *int                       `json:"num_global_key_value_heads"`
	HiddenActivation        string                     `json:"hidden_activation"`
	MaxPositionEmbeddings   *int                       `json:"max_position_embeddings"`
	RMSNormEps              *float64                   `json:"rms_norm_eps"`
	TieWordEmbeddings       *bool                      `json:"tie_word_embeddings"`
	RopeParameters          map[string]json.RawMessage `json:"rope_parameters"`
	AttentionBias           bool                       `json:"attention_bias"`
	SlidingWindow           *int                       `json:"sliding_window"`
	LayerTypes              []string                   `json:"layer_types"`
	FinalLogitSoftcapping   *float64                   `json:"final_logit_softcapping"`
	UseBidirectional        *string                    `json:"use_bidirectional_attention"`
	VocabSizePerLayerInput  *int                       `json:"vocab_size_per_layer_input"`
	HiddenSizePerLayerInput *int                       `json:"hidden_size_per_layer_input"`
	AttentionKEqV           bool                       `json:"attention_k_eq_v"`
	NumKVSharedLayers       *int                       `json:"num_kv_shared_layers"`
	EnableMoEBlock          bool                       `json:"enable_moe_block"`
	UseDoubleWideMLP        bool                       `json:"use_double_wide_mlp"`
	NumExperts              *int                       `json:"num_experts"`
	TopKExperts             *int                       `json:"top_k_experts"`
	MoEIntermediateSize     *int                       `json:"moe_intermediate_size"`
	PerLayerConfig          map[string]layerOverride   `json:"per_layer_config"`
	BOSTokenID              config.IDList              `json:"bos_token_id"`
	EOSTokenID              config.IDList              `json:"eos_token_id"`
}

// layerOverride is one entry of per_layer_config.
type layerOverride struct {
	HeadDim          *int `json:"head_dim"`
	NumKeyValueHeads *int `json:"num_key_value_heads"`
}

// Layer is one decoder layer's resolved attention and MLP shape.
type Layer struct {
	// Kind is lm.KindSliding or lm.KindFull.
	Kind    string
	HeadDim int
	KVHeads int
	// KEqV: no v_proj; the values are the k_proj output through v_norm
	// (attention_k_eq_v, full layers only).
	KEqV bool
	// Source is the layer whose keys and values this layer reuses (KV
	// sharing: the last unshared layer of the same kind), or -1.
	Source int
	// Intermediate is the dense MLP's width (doubled on shared layers
	// with use_double_wide_mlp).
	Intermediate int
}

// Options are the resolved hyperparameters.
type Options struct {
	Spec lm.Spec
	// Prefix is "model.language_model." for the multimodal wrapper,
	// "model." for Gemma4ForCausalLM.
	Prefix string
	Eps    float64
	Act    string
	Layer  []Layer
	// Rope holds the rotary embedding of each layer kind.
	Rope map[string]*nn.Rope
	// FinalSoftcap is final_logit_softcapping (0: none).
	FinalSoftcap float64
	// PLE is hidden_size_per_layer_input (0: no per-layer embeddings),
	// PLEVocab vocab_size_per_layer_input.
	PLE, PLEVocab int
	// Experts, TopK and MoEIntermediate describe the MoE block of every
	// layer (enable_moe_block), Experts 0 when there is none.
	Experts, TopK, MoEIntermediate int
}

// defaultRope is Gemma4TextConfig's rope_parameters when absent.
var defaultRope = map[string]map[string]any{
	lm.KindSliding: {"rope_type": "default", "rope_theta": 10000.0},
	lm.KindFull:    {"rope_type": "proportional", "partial_rotary_factor": 0.25, "rope_theta": 1000000.0},
}

// TextOf is the text model's config of a Gemma 4 or Gemma 3n config.json:
// the multimodal class's text_config, its tensors under
// model.language_model., or the causal LM's own config, under model.;
// where names it in errors.
func TextOf(cfg *config.File) (text *config.File, prefix, where string, err error) {
	where = lm.ConfigName(cfg)
	if cfg.Text != nil {
		return cfg.Text, "model.language_model.", where + " text_config", nil
	}
	if strings.HasSuffix(cfg.Architecture(), "ForConditionalGeneration") {
		return nil, "", "", fmt.Errorf("%s: %s needs a text_config object", where, cfg.Architecture())
	}
	return cfg, "model.", where, nil
}

// Tied is tie_word_embeddings: text_config's own, else (for the
// multimodal class) the wrapper's, else true.
func Tied(cfg *config.File, own *bool) (bool, error) {
	if own == nil && cfg.Text != nil {
		var w struct {
			Tie *bool `json:"tie_word_embeddings"`
		}
		if err := cfg.Decode(&w); err != nil {
			return false, err
		}
		own = w.Tie
	}
	return lm.Or(own, true), nil
}

// Resolve reads a Gemma 4 config.json: Gemma4ForConditionalGeneration
// (the text model of its text_config; the vision and audio towers are
// skipped) or Gemma4ForCausalLM.
func Resolve(cfg *config.File) (Options, error) {
	text, prefix, where, err := TextOf(cfg)
	if err != nil {
		return Options{}, err
	}
	var c TextConfig
	if err := text.Decode(&c); err != nil {
		return Options{}, err
	}
	if c.UseBidirectional != nil && *c.UseBidirectional == "all" {
		return Options{}, errs.Unsupportedf("%s: use_bidirectional_attention \"all\" is not supported for generation", where)
	}
	s := lm.Spec{
		Architecture: cfg.Architecture(),
		ModelType:    c.ModelType,
		VocabSize:    lm.Or(c.VocabSize, 262144),
		Hidden:       lm.Or(c.HiddenSize, 2304),
		Intermediate: lm.Or(c.IntermediateSize, 9216),
		Layers:       lm.Or(c.NumHiddenLayers, 30),
		Heads:        lm.Or(c.NumAttentionHeads, 8),
		KVHeads:      lm.Or(c.NumKeyValueHeads, 4),
		HeadDim:      lm.Or(c.HeadDim, 256),
		MaxPositions: lm.Or(c.MaxPositionEmbeddings, 131072),
		EOS:          c.EOSTokenID,
		BOS:          2,
	}
	if len(s.EOS) == 0 {
		s.EOS = []int{1}
	}
	if len(c.BOSTokenID) > 0 {
		s.BOS = c.BOSTokenID[0]
	}
	if err := s.CheckSizes(where); err != nil {
		return Options{}, err
	}
	if s.TieEmbeddings, err = Tied(cfg, c.TieWordEmbeddings); err != nil {
		return Options{}, err
	}
	s.SlidingWindow = lm.Or(c.SlidingWindow, 512)
	kinds, err := lm.LayerTypes(where, c.LayerTypes, s.Layers, lm.KindFull, lm.KindSliding)
	if err != nil {
		return Options{}, err
	}
	if kinds == nil { // 5 sliding : 1 full
		kinds = make([]string, s.Layers)
		for i := range kinds {
			kinds[i] = lm.KindSliding
			if (i+1)%6 == 0 {
				kinds[i] = lm.KindFull
			}
		}
	}
	kinds[len(kinds)-1] = lm.KindFull // Gemma4TextConfig forces the last layer to full attention
	s.LayerKinds = kinds
	o := Options{Spec: s, Prefix: prefix, Eps: lm.Or(c.RMSNormEps, 1e-6), FinalSoftcap: lm.Or(c.FinalLogitSoftcapping, 0)}
	o.Act = c.HiddenActivation
	if o.Act == "" {
		o.Act = "gelu_pytorch_tanh"
	}
	if !nn.KnownActivation(o.Act) {
		return Options{}, errs.Unsupportedf("%s: hidden_activation %q is not supported (supported: %s)", where, o.Act, strings.Join(nn.ActivationNames(), ", "))
	}
	if c.AttentionBias {
		return Options{}, errs.Unsupportedf("%s: attention_bias true is not supported for %s", where, cfg.Architecture())
	}
	if err := o.resolveLayers(where, &c); err != nil {
		return Options{}, err
	}
	if o.Rope, err = ropes(where, c.RopeParameters, o.Layer, s.MaxPositions); err != nil {
		return Options{}, err
	}
	if c.HiddenSizePerLayerInput != nil {
		o.PLE = *c.HiddenSizePerLayerInput
	} else if c.HiddenSizePerLayerInput == nil && !text.Has("hidden_size_per_layer_input") {
		o.PLE = 256
	}
	o.PLEVocab = lm.Or(c.VocabSizePerLayerInput, 262144)
	if o.PLE < 0 || (o.PLE > 0 && o.PLEVocab <= 0) {
		return Options{}, fmt.Errorf("%s: hidden_size_per_layer_input %d and vocab_size_per_layer_input %d must be positive", where, o.PLE, o.PLEVocab)
	}
	if o.PLE > 0 {
		o.Spec.Carried = s.Hidden + s.Layers*o.PLE
	}
	if c.EnableMoEBlock {
		o.Experts, o.TopK, o.MoEIntermediate = lm.Or(c.NumExperts, 0), lm.Or(c.TopKExperts, 0), lm.Or(c.MoEIntermediateSize, 0)
		if o.Experts <= 0 || o.MoEIntermediate <= 0 || o.TopK <= 0 || o.TopK > o.Experts {
			return Options{}, fmt.Errorf("%s: enable_moe_block needs num_experts > 0, moe_intermediate_size > 0 and top_k_experts in [1, num_experts]; got %d, %d, %d",
				where, o.Experts, o.MoEIntermediate, o.TopK)
		}
		if err := lm.CheckExperts(where, "num_experts", o.Experts, s.Layers); err != nil {
			return Options{}, err
		}
	}
	return o, nil
}

// resolveLayers decides each layer's head size, KV heads, k=v, KV sharing
// and MLP width, from the flat fields (global_head_dim,
// num_global_key_value_heads) or per_layer_config, as Gemma4TextConfig
// and Gemma4TextAttention do.
func (o *Options) resolveLayers(where string, c *TextConfig) error {
	s := &o.Spec
	L := s.Layers
	shared := lm.Or(c.NumKVSharedLayers, 0)
	if shared < 0 || shared >= L {
		return fmt.Errorf("%s: num_kv_shared_layers %d must be in [0, num_hidden_layers %d)", where, shared, L)
	}
	first := L - shared
	globalHead := lm.Or(c.GlobalHeadDim, 512)
	o.Layer = make([]Layer, L)
	for i := range o.Layer {
		l := Layer{Kind: s.LayerKinds[i], HeadDim: s.HeadDim, KVHeads: s.KVHeads, Source: -1, Intermediate: s.Intermediate}
		if l.Kind == lm.KindFull {
			l.KEqV = c.AttentionKEqV
			if c.PerLayerConfig == nil {
				l.HeadDim = globalHead
				if c.AttentionKEqV && c.NumGlobalKeyValueHeads != nil {
					l.KVHeads = *c.NumGlobalKeyValueHeads
				}
			}
		}
		if ov, ok := c.PerLayerConfig[strconv.Itoa(i)]; ok {
			l.HeadDim = lm.Or(ov.HeadDim, l.HeadDim)
			l.KVHeads = lm.Or(ov.NumKeyValueHeads, l.KVHeads)
		}
		if l.HeadDim <= 0 || l.HeadDim%2 != 0 || l.KVHeads <= 0 || s.Heads%l.KVHeads != 0 {
			return fmt.Errorf("%s: layer %d: head_dim %d must be positive and even, and %d heads a multiple of %d KV heads", where, i, l.HeadDim, s.Heads, l.KVHeads)
		}
		if i >= first {
			for j := first - 1; j >= 0; j-- {
				if s.LayerKinds[j] == l.Kind {
					l.Source = j
					break
				}
			}
			if l.Source < 0 {
				return fmt.Errorf("%s: layer %d shares the keys and values of an earlier %s layer, and there is none before layer %d", where, i, l.Kind, first)
			}
			src := o.Layer[l.Source]
			l.HeadDim, l.KVHeads = src.HeadDim, src.KVHeads
			if c.UseDoubleWideMLP {
				l.Intermediate *= 2
			}
		}
		o.Layer[i] = l
	}
	return nil
}

// ropes builds the rotary embedding of each layer kind from
// rope_parameters ({"sliding_attention": {...}, "full_attention": {...}}).
func ropes(where string, raw map[string]json.RawMessage, layers []Layer, maxPos int) (map[string]*nn.Rope, error) {
	out := map[string]*nn.Rope{}
	for _, l := range layers {
		if out[l.Kind] != nil {
			continue
		}
		params := defaultRope[l.Kind]
		if v, ok := raw[l.Kind]; ok {
			m, err := nn.ParseRopeScaling(v)
			if err != nil {
				return nil, fmt.Errorf("%s: rope_parameters.%s: %w", where, l.Kind, err)
			}
			params = m
		}
		theta, _ := params["rope_theta"].(float64)
		prf, _ := params["partial_rotary_factor"].(float64)
		if theta <= 0 || math.IsNaN(theta) {
			return nil, fmt.Errorf("%s: rope_parameters.%s needs a positive rope_theta", where, l.Kind)
		}
		r, err := nn.NewRope(nn.RopeParams{Theta: theta, HeadDim: l.HeadDim, PartialRotaryFactor: prf, MaxPositions: maxPos, Scaling: params})
		if err != nil {
			return nil, fmt.Errorf("%s: rope_parameters.%s: %w", where, l.Kind, err)
		}
		out[l.Kind] = r
	}
	return out, nil
}
