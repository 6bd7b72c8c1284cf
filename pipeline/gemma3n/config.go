package gemma3n

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/gemma4"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/nn"
)

// TextConfig is Gemma3nTextConfig as config.json (or its text_config)
// holds it. Optional fields are pointers: absent takes transformers'
// default.
type TextConfig struct {
	ModelType                 string                     `json:"model_type"`
	VocabSize                 *int                       `json:"vocab_size"`
	VocabSizePerLayerInput    *int                       `json:"vocab_size_per_layer_input"`
	HiddenSize                *int                       `json:"hidden_size"`
	HiddenSizePerLayerInput   *int                       `json:"hidden_size_per_layer_input"`
	IntermediateSize          json.RawMessage            `json:"intermediate_size"` // an int or one a layer
	NumHiddenLayers           *int                       `json:"num_hidden_layers"`
	NumAttentionHeads         *int                       `json:"num_attention_heads"`
	NumKeyValueHeads          *int                       `json:"num_key_value_heads"`
	HeadDim                   *int                       `json:"head_dim"`
	HiddenActivation          string                     `json:"hidden_activation"`
	MaxPositionEmbeddings     *int                       `json:"max_position_embeddings"`
	RMSNormEps                *float64                   `json:"rms_norm_eps"`
	TieWordEmbeddings         *bool                      `json:"tie_word_embeddings"`
	RopeTheta                 *float64                   `json:"rope_theta"`
	RopeLocalBaseFreq         *float64                   `json:"rope_local_base_freq"`
	RopeScaling               json.RawMessage            `json:"rope_scaling"`
	RopeParameters            map[string]json.RawMessage `json:"rope_parameters"`
	AttentionBias             bool                       `json:"attention_bias"`
	SlidingWindow             *int                       `json:"sliding_window"`
	LayerTypes                []string                   `json:"layer_types"`
	FinalLogitSoftcapping     *float64                   `json:"final_logit_softcapping"`
	AltupNumInputs            *int                       `json:"altup_num_inputs"`
	AltupActiveIdx            *int                       `json:"altup_active_idx"`
	AltupCoefClip             *float64                   `json:"altup_coef_clip"`
	AltupCorrectScale         *bool                      `json:"altup_correct_scale"`
	LaurelRank                *int                       `json:"laurel_rank"`
	ActivationSparsityPattern json.RawMessage            `json:"activation_sparsity_pattern"`
	NumKVSharedLayers         *int                       `json:"num_kv_shared_layers"`
	BOSTokenID                config.IDList              `json:"bos_token_id"`
	EOSTokenID                config.IDList              `json:"eos_token_id"`
}

// Layer is one decoder layer's resolved shape.
type Layer struct {
	// Kind is lm.KindSliding or lm.KindFull.
	Kind string
	// Source is the layer whose keys and values this layer reuses (KV
	// sharing: the last unshared layer of the same kind), or -1.
	Source int
	// Intermediate is the MLP's width.
	Intermediate int
	// Sparsity is the share of the gate's values the MLP zeroes by its
	// Gaussian top-k (activation_sparsity_pattern), 0 for none.
	Sparsity float64
}

// Options are the resolved hyperparameters.
type Options struct {
	Spec lm.Spec
	// Prefix is "model.language_model." for the multimodal wrapper,
	// "model." for Gemma3nForCausalLM.
	Prefix string
	Eps    float64
	Act    string
	Layer  []Layer
	// Rope holds the rotary embedding of each layer kind.
	Rope map[string]*nn.Rope
	// FinalSoftcap is final_logit_softcapping (0: none).
	FinalSoftcap float64
	// PLE is hidden_size_per_layer_input, PLEVocab
	// vocab_size_per_layer_input.
	PLE, PLEVocab int
	// Streams is altup_num_inputs; Clip says whether correction_coefs are
	// clipped to ±CoefClip (altup_coef_clip, null: not);
	// CorrectScale is altup_correct_scale.
	Streams      int
	Clip         bool
	CoefClip     float64
	CorrectScale bool
	// Laurel is laurel_rank.
	Laurel int
}

// Resolve reads a Gemma 3n config.json: Gemma3nForConditionalGeneration
// (the text model of its text_config; the vision and audio towers are
// skipped) or Gemma3nForCausalLM.
func Resolve(cfg *config.File) (Options, error) {
	text, prefix, where, err := gemma4.TextOf(cfg)
	if err != nil {
		return Options{}, err
	}
	var c TextConfig
	if err := text.Decode(&c); err != nil {
		return Options{}, err
	}
	s := lm.Spec{
		Architecture: cfg.Architecture(),
		ModelType:    c.ModelType,
		VocabSize:    lm.Or(c.VocabSize, 262400),
		Hidden:       lm.Or(c.HiddenSize, 2048),
		Layers:       lm.Or(c.NumHiddenLayers, 35),
		Heads:        lm.Or(c.NumAttentionHeads, 8),
		KVHeads:      lm.Or(c.NumKeyValueHeads, 2),
		HeadDim:      lm.Or(c.HeadDim, 256),
		MaxPositions: lm.Or(c.MaxPositionEmbeddings, 32768),
		EOS:          c.EOSTokenID,
		BOS:          2,
	}
	if len(s.EOS) == 0 {
		s.EOS = []int{1}
	}
	if len(c.BOSTokenID) > 0 {
		s.BOS = c.BOSTokenID[0]
	}
	inter, err := perLayerInts(where, "intermediate_size", c.IntermediateSize, s.Layers, 16384)
	if err != nil {
		return Options{}, err
	}
	s.Intermediate = inter[0]
	if err := s.CheckSizes(where); err != nil {
		return Options{}, err
	}
	if s.TieEmbeddings, err = gemma4.Tied(cfg, c.TieWordEmbeddings); err != nil {
		return Options{}, err
	}
	s.SlidingWindow = lm.Or(c.SlidingWindow, 512)
	kinds, err := lm.LayerTypes(where, c.LayerTypes, s.Layers, lm.KindFull, lm.KindSliding)
	if err != nil {
		return Options{}, err
	}
	if kinds == nil { // 4 sliding : 1 full; the last layer is not forced to full
		kinds = make([]string, s.Layers)
		for i := range kinds {
			kinds[i] = lm.KindSliding
			if (i+1)%5 == 0 {
				kinds[i] = lm.KindFull
			}
		}
	}
	s.LayerKinds = kinds
	o := Options{Spec: s, Prefix: prefix, Eps: lm.Or(c.RMSNormEps, 1e-6), FinalSoftcap: 30}
	if c.FinalLogitSoftcapping != nil {
		o.FinalSoftcap = *c.FinalLogitSoftcapping
	} else if text.Has("final_logit_softcapping") { // null: no cap
		o.FinalSoftcap = 0
	}
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
	o.PLE, o.PLEVocab = lm.Or(c.HiddenSizePerLayerInput, 256), lm.Or(c.VocabSizePerLayerInput, 262144)
	if o.PLE <= 0 || o.PLEVocab <= 0 {
		return Options{}, fmt.Errorf("%s: hidden_size_per_layer_input %d and vocab_size_per_layer_input %d must be positive", where, o.PLE, o.PLEVocab)
	}
	o.Streams, o.Laurel = lm.Or(c.AltupNumInputs, 4), lm.Or(c.LaurelRank, 64)
	if o.Streams < 2 || o.Laurel <= 0 {
		return Options{}, fmt.Errorf("%s: altup_num_inputs %d must be at least 2 and laurel_rank %d positive", where, o.Streams, o.Laurel)
	}
	if a := lm.Or(c.AltupActiveIdx, 0); a != 0 {
		return Options{}, errs.Unsupportedf("%s: altup_active_idx %d; transformers' Gemma 3n reads stream 0 in places whatever it says, and every release has 0", where, a)
	}
	o.Clip, o.CoefClip = true, 120
	if c.AltupCoefClip != nil {
		o.CoefClip = *c.AltupCoefClip
	} else if text.Has("altup_coef_clip") { // null: no clip
		o.Clip = false
	}
	if o.CoefClip < 0 || math.IsNaN(o.CoefClip) {
		return Options{}, fmt.Errorf("%s: altup_coef_clip must be at least 0 or null, got %v", where, o.CoefClip)
	}
	o.CorrectScale = lm.Or(c.AltupCorrectScale, true)
	sparsity, err := sparsityPattern(where, c.ActivationSparsityPattern, s.Layers)
	if err != nil {
		return Options{}, err
	}
	o.Spec.Carried = o.Streams*s.Hidden + s.Layers*o.PLE
	if err := o.resolveLayers(where, lm.Or(c.NumKVSharedLayers, 15), inter, sparsity); err != nil {
		return Options{}, err
	}
	if o.Rope, err = ropes(where, &c, s.HeadDim, s.MaxPositions); err != nil {
		return Options{}, err
	}
	return o, nil
}

// perLayerInts reads a field that is an int or a list of one int a
// layer (absent: def on every layer), each positive.
func perLayerInts(where, field string, raw json.RawMessage, layers, def int) ([]int, error) {
	out := make([]int, layers)
	if len(raw) == 0 || string(raw) == "null" {
		for i := range out {
			out[i] = def
		}
		return out, nil
	}
	var one int
	if json.Unmarshal(raw, &one) == nil {
		for i := range out {
			out[i] = one
		}
	} else {
		var list []int
		if err := json.Unmarshal(raw, &list); err != nil {
			return nil, fmt.Errorf("%s: %s: expected an integer or a list of one a layer: %w", where, field, err)
		}
		if len(list) != layers {
			return nil, fmt.Errorf("%s: %s has %d entries for %d layers", where, field, len(list), layers)
		}
		copy(out, list)
	}
	for i, v := range out {
		if v <= 0 {
			return nil, fmt.Errorf("%s: %s of layer %d is %d; want it positive", where, field, i, v)
		}
	}
	return out, nil
}

// sparsityPattern reads activation_sparsity_pattern: one share in [0, 1)
// a layer; absent, Gemma3nTextConfig's 0.95 on the first 10 layers (when
// there are more than 10), 0 elsewhere.
func sparsityPattern(where string, raw json.RawMessage, layers int) ([]float64, error) {
	out := make([]float64, layers)
	if len(raw) == 0 || string(raw) == "null" {
		if layers > 10 {
			for i := range 10 {
				out[i] = 0.95
			}
		}
		return out, nil
	}
	var list []float64
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, fmt.Errorf("%s: activation_sparsity_pattern: expected a list of one share a layer: %w", where, err)
	}
	if len(list) != layers {
		return nil, fmt.Errorf("%s: activation_sparsity_pattern has %d entries for %d layers", where, len(list), layers)
	}
	for i, v := range list {
		if !(v >= 0 && v < 1) {
			return nil, fmt.Errorf("%s: activation_sparsity_pattern[%d] is %v; want a share in [0, 1)", where, i, v)
		}
	}
	return list, nil
}

// resolveLayers decides each layer's KV sharing (Gemma3nTextAttention:
// from layer L − num_kv_shared_layers on, when that is above 0 (so none
// when num_kv_shared_layers is L or more: the default 15 on a smaller
// model), a layer
// reads the cache of the last earlier unshared layer of its kind), MLP
// width and sparsity.
func (o *Options) resolveLayers(where string, shared int, inter []int, sparsity []float64) error {
	s := &o.Spec
	L := s.Layers
	if shared < 0 {
		return fmt.Errorf("%s: num_kv_shared_layers must be at least 0, got %d", where, shared)
	}
	first := L - shared
	o.Layer = make([]Layer, L)
	for i := range o.Layer {
		l := Layer{Kind: s.LayerKinds[i], Source: -1, Intermediate: inter[i], Sparsity: sparsity[i]}
		if first > 0 && i >= first {
			for j := first - 1; j >= 0; j-- {
				if s.LayerKinds[j] == l.Kind {
					l.Source = j
					break
				}
			}
			if l.Source < 0 {
				return fmt.Errorf("%s: layer %d shares the keys and values of an earlier %s layer, and there is none before layer %d", where, i, l.Kind, first)
			}
		}
		o.Layer[i] = l
	}
	return nil
}

// ropes builds the rotary embedding of each layer kind: both turn whole
// heads; the full layers' from rope_theta (1e6) and rope_scaling, the
// sliding layers' from rope_local_base_freq (1e4), or each from
// rope_parameters' "full_attention" and "sliding_attention" entries.
func ropes(where string, c *TextConfig, headDim, maxPos int) (map[string]*nn.Rope, error) {
	params := map[string]map[string]any{
		lm.KindFull:    {"rope_type": "default", "rope_theta": lm.Or(c.RopeTheta, 1e6)},
		lm.KindSliding: {"rope_type": "default", "rope_theta": lm.Or(c.RopeLocalBaseFreq, 1e4)},
	}
	if len(c.RopeScaling) > 0 && string(c.RopeScaling) != "null" {
		m, err := nn.ParseRopeScaling(c.RopeScaling)
		if err != nil {
			return nil, fmt.Errorf("%s: rope_scaling: %w", where, err)
		}
		m["rope_theta"] = params[lm.KindFull]["rope_theta"]
		params[lm.KindFull] = m
	}
	for kind, v := range c.RopeParameters {
		if kind != lm.KindFull && kind != lm.KindSliding {
			continue
		}
		m, err := nn.ParseRopeScaling(v)
		if err != nil {
			return nil, fmt.Errorf("%s: rope_parameters.%s: %w", where, kind, err)
		}
		if _, ok := m["rope_theta"]; !ok { // the legacy key's, or the default
			m["rope_theta"] = params[kind]["rope_theta"]
		}
		params[kind] = m
	}
	out := map[string]*nn.Rope{}
	for _, kind := range []string{lm.KindFull, lm.KindSliding} {
		p := params[kind]
		theta, _ := p["rope_theta"].(float64)
		if theta <= 0 || math.IsNaN(theta) {
			return nil, fmt.Errorf("%s: the %s layers' rotary needs a positive rope_theta", where, kind)
		}
		// Gemma 3n's rotary turns whole heads: a partial_rotary_factor is
		// not read (its default rope parameters take head_dim).
		r, err := nn.NewRope(nn.RopeParams{Theta: theta, HeadDim: headDim, MaxPositions: maxPos, Scaling: p})
		if err != nil {
			return nil, fmt.Errorf("%s: the %s layers' rotary: %w", where, kind, err)
		}
		out[kind] = r
	}
	return out, nil
}
