package unet

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/tputool/tputool/internal/errs"
)

// Config is unet/config.json of a diffusers UNet2DConditionModel. The json
// tags copy diffusers' names; fields that may be an int or a per-block list
// use IntList.
type Config struct {
	ClassName                    string    `json:"_class_name"`
	SampleSize                   IntList   `json:"sample_size"`
	InChannels                   int       `json:"in_channels"`
	OutChannels                  int       `json:"out_channels"`
	CenterInputSample            bool      `json:"center_input_sample"`
	FlipSinToCos                 *bool     `json:"flip_sin_to_cos"`
	FreqShift                    float64   `json:"freq_shift"`
	DownBlockTypes               []string  `json:"down_block_types"`
	MidBlockType                 *string   `json:"mid_block_type"`
	UpBlockTypes                 []string  `json:"up_block_types"`
	OnlyCrossAttention           BoolList  `json:"only_cross_attention"`
	BlockOutChannels             []int     `json:"block_out_channels"`
	LayersPerBlock               IntList   `json:"layers_per_block"`
	DownsamplePadding            *int      `json:"downsample_padding"`
	MidBlockScaleFactor          *float64  `json:"mid_block_scale_factor"`
	ActFn                        string    `json:"act_fn"`
	NormNumGroups                *int      `json:"norm_num_groups"`
	NormEps                      *float64  `json:"norm_eps"`
	CrossAttentionDim            IntList   `json:"cross_attention_dim"`
	TransformerLayersPerBlock    IntList   `json:"transformer_layers_per_block"`
	ReverseTransformerLayers     [][]int   `json:"reverse_transformer_layers_per_block"`
	EncoderHidDim                *int      `json:"encoder_hid_dim"`
	EncoderHidDimType            *string   `json:"encoder_hid_dim_type"`
	AttentionHeadDim             IntList   `json:"attention_head_dim"`
	NumAttentionHeads            IntList   `json:"num_attention_heads"`
	DualCrossAttention           bool      `json:"dual_cross_attention"`
	UseLinearProjection          bool      `json:"use_linear_projection"`
	ClassEmbedType               *string   `json:"class_embed_type"`
	AdditionEmbedType            *string   `json:"addition_embed_type"`
	AdditionTimeEmbedDim         *int      `json:"addition_time_embed_dim"`
	NumClassEmbeds               *int      `json:"num_class_embeds"`
	UpcastAttention              bool      `json:"upcast_attention"`
	ResnetTimeScaleShift         string    `json:"resnet_time_scale_shift"`
	ResnetSkipTimeAct            bool      `json:"resnet_skip_time_act"`
	ResnetOutScaleFactor         *float64  `json:"resnet_out_scale_factor"`
	TimeEmbeddingType            string    `json:"time_embedding_type"`
	TimeEmbeddingDim             *int      `json:"time_embedding_dim"`
	TimeEmbeddingActFn           *string   `json:"time_embedding_act_fn"`
	TimestepPostAct              *string   `json:"timestep_post_act"`
	TimeCondProjDim              *int      `json:"time_cond_proj_dim"`
	ConvInKernel                 *int      `json:"conv_in_kernel"`
	ConvOutKernel                *int      `json:"conv_out_kernel"`
	ProjectionClassEmbeddingsDim *int      `json:"projection_class_embeddings_input_dim"`
	AttentionType                string    `json:"attention_type"`
	ClassEmbeddingsConcat        bool      `json:"class_embeddings_concat"`
	MidBlockOnlyCrossAttention   *bool     `json:"mid_block_only_cross_attention"`
	CrossAttentionNorm           *string   `json:"cross_attention_norm"`
	Extra                        RawFields `json:"-"`
}

// RawFields keeps the config's raw JSON.
type RawFields map[string]json.RawMessage

// IntList is a config field that is an int or a list of ints (or null).
type IntList struct {
	Values []int
	Scalar bool // given as a single int
	Set    bool
}

// UnmarshalJSON implements json.Unmarshaler.
func (l *IntList) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if bytes.Equal(b, []byte("null")) {
		*l = IntList{}
		return nil
	}
	var n int
	if err := json.Unmarshal(b, &n); err == nil {
		*l = IntList{Values: []int{n}, Scalar: true, Set: true}
		return nil
	}
	var list []int
	if err := json.Unmarshal(b, &list); err != nil {
		return fmt.Errorf("want an int or a list of ints, got %s", b)
	}
	*l = IntList{Values: list, Set: true}
	return nil
}

// Bounds on config sizes no real UNet comes near.
const (
	maxBlockLayers = 256
	maxSampleSize  = 1024
)

// Expand returns n values: the scalar repeated, or the list (which must
// have n entries).
func (l IntList) Expand(name string, n int) ([]int, error) {
	if l.Scalar {
		out := make([]int, n)
		for i := range out {
			out[i] = l.Values[0]
		}
		return out, nil
	}
	if len(l.Values) != n {
		return nil, fmt.Errorf("%s has %d entries, want %d (one per block)", name, len(l.Values), n)
	}
	return append([]int(nil), l.Values...), nil
}

// BoolList is a bool or a list of bools.
type BoolList struct {
	Values []bool
	Scalar bool
	Set    bool
}

// UnmarshalJSON implements json.Unmarshaler.
func (l *BoolList) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if bytes.Equal(b, []byte("null")) {
		*l = BoolList{}
		return nil
	}
	var v bool
	if err := json.Unmarshal(b, &v); err == nil {
		*l = BoolList{Values: []bool{v}, Scalar: true, Set: true}
		return nil
	}
	var list []bool
	if err := json.Unmarshal(b, &list); err != nil {
		return fmt.Errorf("want a bool or a list of bools, got %s", b)
	}
	*l = BoolList{Values: list, Set: true}
	return nil
}

// ParseConfig decodes config.json bytes.
func ParseConfig(b []byte) (*Config, error) {
	c := &Config{}
	if err := json.Unmarshal(b, c); err != nil {
		return nil, fmt.Errorf("unet config: %w", err)
	}
	if err := json.Unmarshal(b, &c.Extra); err != nil {
		return nil, fmt.Errorf("unet config: %w", err)
	}
	return c, nil
}

// Resolved is a Config with defaults applied and per-block lists expanded:
// what the model is built from.
type Resolved struct {
	InChannels, OutChannels int
	CenterInputSample       bool
	FlipSinToCos            bool
	FreqShift               float64
	Down, Up                []string
	MidBlock                string // "" for none
	BlockOut                []int
	LayersPerBlock          []int
	DownsamplePadding       int
	MidBlockScale           float64
	Act                     string
	Groups                  int
	Eps                     float64
	CrossDim                []int
	TransformerLayers       []int   // per down block
	ReverseTransformer      [][]int // per up block, per layer
	Heads                   []int   // num_attention_heads per down block
	OnlyCross               []bool
	LinearProjection        bool
	AdditionTextTime        bool
	AdditionTimeEmbedDim    int
	ProjectionClassDim      int
	OutputScale             float64
	ConvInKernel            int
	ConvOutKernel           int
	TimeEmbedDim            int
	NumUpsamplers           int
	// SampleSize is the latent side the model was trained at (0 if unset).
	SampleSize int
}

// Resolve applies diffusers' defaults and rejects what this package does
// not implement with an errs.ErrUnsupported error naming the field.
func (c *Config) Resolve() (*Resolved, error) {
	unsup := func(format string, args ...any) error {
		return errs.Unsupportedf("unet config: "+format, args...)
	}
	if c.ClassName != "" && c.ClassName != "UNet2DConditionModel" {
		return nil, unsup("_class_name %q (want UNet2DConditionModel)", c.ClassName)
	}
	r := &Resolved{InChannels: c.InChannels, OutChannels: c.OutChannels, CenterInputSample: c.CenterInputSample,
		FreqShift: c.FreqShift, Act: c.ActFn, LinearProjection: c.UseLinearProjection}
	if r.InChannels == 0 {
		r.InChannels = 4
	}
	if r.OutChannels == 0 {
		r.OutChannels = 4
	}
	r.FlipSinToCos = c.FlipSinToCos == nil || *c.FlipSinToCos
	if r.Act == "" {
		r.Act = "silu"
	}
	if r.Act != "silu" && r.Act != "swish" {
		return nil, unsup("act_fn %q (only silu)", r.Act)
	}
	r.Down = c.DownBlockTypes
	r.Up = c.UpBlockTypes
	r.BlockOut = c.BlockOutChannels
	if len(r.Down) == 0 {
		r.Down = []string{"CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "DownBlock2D"}
	}
	if len(r.Up) == 0 {
		r.Up = []string{"UpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D"}
	}
	if len(r.BlockOut) == 0 {
		r.BlockOut = []int{320, 640, 1280, 1280}
	}
	n := len(r.Down)
	if len(r.Up) != n || len(r.BlockOut) != n {
		return nil, fmt.Errorf("unet config: %d down_block_types, %d up_block_types and %d block_out_channels must match", n, len(r.Up), len(r.BlockOut))
	}
	for _, t := range r.Down {
		if t != "CrossAttnDownBlock2D" && t != "DownBlock2D" {
			return nil, unsup("down block type %q (supported: CrossAttnDownBlock2D, DownBlock2D)", t)
		}
	}
	for _, t := range r.Up {
		if t != "CrossAttnUpBlock2D" && t != "UpBlock2D" {
			return nil, unsup("up block type %q (supported: CrossAttnUpBlock2D, UpBlock2D)", t)
		}
	}
	r.MidBlock = "UNetMidBlock2DCrossAttn"
	if c.Extra["mid_block_type"] != nil {
		if c.MidBlockType == nil {
			r.MidBlock = ""
		} else {
			r.MidBlock = *c.MidBlockType
		}
	}
	if r.MidBlock != "" && r.MidBlock != "UNetMidBlock2DCrossAttn" {
		return nil, unsup("mid_block_type %q (supported: UNetMidBlock2DCrossAttn or null)", r.MidBlock)
	}
	var err error
	lpb := c.LayersPerBlock
	if !lpb.Set {
		lpb = IntList{Values: []int{2}, Scalar: true, Set: true}
	}
	if r.LayersPerBlock, err = lpb.Expand("layers_per_block", n); err != nil {
		return nil, fmt.Errorf("unet config: %w", err)
	}
	r.DownsamplePadding = 1
	if c.DownsamplePadding != nil {
		r.DownsamplePadding = *c.DownsamplePadding
	}
	r.MidBlockScale = 1
	if c.MidBlockScaleFactor != nil {
		r.MidBlockScale = *c.MidBlockScaleFactor
	}
	r.Groups = 32
	if c.NormNumGroups != nil {
		r.Groups = *c.NormNumGroups
	} else if c.Extra["norm_num_groups"] != nil {
		return nil, unsup("norm_num_groups null (no output norm)")
	}
	if r.Groups <= 0 {
		return nil, fmt.Errorf("unet config: norm_num_groups %d must be positive", r.Groups)
	}
	r.Eps = 1e-5
	if c.NormEps != nil {
		r.Eps = *c.NormEps
	}
	cad := c.CrossAttentionDim
	if !cad.Set {
		cad = IntList{Values: []int{1280}, Scalar: true, Set: true}
	}
	if r.CrossDim, err = cad.Expand("cross_attention_dim", n); err != nil {
		return nil, fmt.Errorf("unet config: %w", err)
	}
	tl := c.TransformerLayersPerBlock
	if !tl.Set {
		tl = IntList{Values: []int{1}, Scalar: true, Set: true}
	}
	if r.TransformerLayers, err = tl.Expand("transformer_layers_per_block", n); err != nil {
		return nil, fmt.Errorf("unet config: %w", err)
	}
	// Layer counts size per-block tables; a hostile 2^40 aborted the
	// process with an out-of-memory error.
	for i := 0; i < n; i++ {
		if v := r.LayersPerBlock[i]; v < 1 || v > maxBlockLayers {
			return nil, fmt.Errorf("unet config: layers_per_block[%d]=%d must be between 1 and %d", i, v, maxBlockLayers)
		}
		if v := r.TransformerLayers[i]; v < 0 || v > maxBlockLayers {
			return nil, fmt.Errorf("unet config: transformer_layers_per_block[%d]=%d must be between 0 and %d", i, v, maxBlockLayers)
		}
	}
	if c.ReverseTransformerLayers != nil {
		if len(c.ReverseTransformerLayers) != n {
			return nil, fmt.Errorf("unet config: reverse_transformer_layers_per_block has %d entries, want %d", len(c.ReverseTransformerLayers), n)
		}
		r.ReverseTransformer = c.ReverseTransformerLayers
	} else {
		r.ReverseTransformer = make([][]int, n)
		for i := 0; i < n; i++ {
			nl := r.LayersPerBlock[n-1-i] + 1
			r.ReverseTransformer[i] = make([]int, nl)
			for j := range r.ReverseTransformer[i] {
				r.ReverseTransformer[i][j] = r.TransformerLayers[n-1-i]
			}
		}
	}
	// diffusers' naming quirk: attention_head_dim is the number of heads
	// unless num_attention_heads is given.
	heads := c.NumAttentionHeads
	if !heads.Set {
		heads = c.AttentionHeadDim
	}
	if !heads.Set {
		heads = IntList{Values: []int{8}, Scalar: true, Set: true}
	}
	if r.Heads, err = heads.Expand("attention_head_dim", n); err != nil {
		return nil, fmt.Errorf("unet config: %w", err)
	}
	r.OnlyCross = make([]bool, n)
	if c.OnlyCrossAttention.Set {
		if c.OnlyCrossAttention.Scalar {
			for i := range r.OnlyCross {
				r.OnlyCross[i] = c.OnlyCrossAttention.Values[0]
			}
		} else if len(c.OnlyCrossAttention.Values) == n {
			copy(r.OnlyCross, c.OnlyCrossAttention.Values)
		} else {
			return nil, fmt.Errorf("unet config: only_cross_attention has %d entries, want %d", len(c.OnlyCrossAttention.Values), n)
		}
	}
	if c.MidBlockOnlyCrossAttention != nil && *c.MidBlockOnlyCrossAttention {
		return nil, unsup("mid_block_only_cross_attention true")
	}
	switch {
	case c.DualCrossAttention:
		return nil, unsup("dual_cross_attention")
	case c.ClassEmbedType != nil:
		return nil, unsup("class_embed_type %q", *c.ClassEmbedType)
	case c.NumClassEmbeds != nil:
		return nil, unsup("num_class_embeds")
	case c.EncoderHidDim != nil || c.EncoderHidDimType != nil:
		return nil, unsup("encoder_hid_dim / encoder_hid_dim_type")
	case c.ResnetTimeScaleShift != "" && c.ResnetTimeScaleShift != "default":
		return nil, unsup("resnet_time_scale_shift %q", c.ResnetTimeScaleShift)
	case c.ResnetSkipTimeAct:
		return nil, unsup("resnet_skip_time_act")
	case c.TimeEmbeddingType != "" && c.TimeEmbeddingType != "positional":
		return nil, unsup("time_embedding_type %q", c.TimeEmbeddingType)
	case c.TimeEmbeddingActFn != nil:
		return nil, unsup("time_embedding_act_fn %q", *c.TimeEmbeddingActFn)
	case c.TimestepPostAct != nil:
		return nil, unsup("timestep_post_act %q", *c.TimestepPostAct)
	case c.TimeCondProjDim != nil:
		return nil, unsup("time_cond_proj_dim (guidance-embedded LCM UNets)")
	case c.AttentionType != "" && c.AttentionType != "default":
		return nil, unsup("attention_type %q", c.AttentionType)
	case c.ClassEmbeddingsConcat:
		return nil, unsup("class_embeddings_concat")
	case c.CrossAttentionNorm != nil:
		return nil, unsup("cross_attention_norm %q", *c.CrossAttentionNorm)
	}
	if c.AdditionEmbedType != nil {
		if *c.AdditionEmbedType != "text_time" {
			return nil, unsup("addition_embed_type %q (supported: text_time)", *c.AdditionEmbedType)
		}
		if c.AdditionTimeEmbedDim == nil || c.ProjectionClassEmbeddingsDim == nil {
			return nil, fmt.Errorf("unet config: addition_embed_type text_time needs addition_time_embed_dim and projection_class_embeddings_input_dim")
		}
		r.AdditionTextTime = true
		r.AdditionTimeEmbedDim = *c.AdditionTimeEmbedDim
		r.ProjectionClassDim = *c.ProjectionClassEmbeddingsDim
	}
	r.OutputScale = 1
	if c.ResnetOutScaleFactor != nil {
		r.OutputScale = *c.ResnetOutScaleFactor
	}
	r.ConvInKernel, r.ConvOutKernel = 3, 3
	if c.ConvInKernel != nil {
		r.ConvInKernel = *c.ConvInKernel
	}
	if c.ConvOutKernel != nil {
		r.ConvOutKernel = *c.ConvOutKernel
	}
	if r.ConvInKernel%2 == 0 || r.ConvOutKernel%2 == 0 {
		return nil, fmt.Errorf("unet config: conv_in_kernel %d and conv_out_kernel %d must be odd", r.ConvInKernel, r.ConvOutKernel)
	}
	r.TimeEmbedDim = 4 * r.BlockOut[0]
	if c.TimeEmbeddingDim != nil {
		r.TimeEmbedDim = *c.TimeEmbeddingDim
	}
	for i, ch := range r.BlockOut {
		if ch <= 0 || ch%r.Groups != 0 {
			return nil, fmt.Errorf("unet config: block_out_channels[%d]=%d is not a positive multiple of norm_num_groups %d", i, ch, r.Groups)
		}
		if r.Heads[i] <= 0 || ch%r.Heads[i] != 0 {
			return nil, fmt.Errorf("unet config: block_out_channels[%d]=%d is not divisible into %d attention heads", i, ch, r.Heads[i])
		}
	}
	r.NumUpsamplers = n - 1
	if c.SampleSize.Set && len(c.SampleSize.Values) > 0 {
		r.SampleSize = c.SampleSize.Values[0]
		// The default image side is sample_size times the VAE's 8: keep it
		// within the 8192 pixels --size allows.
		if r.SampleSize < 0 || r.SampleSize > maxSampleSize {
			return nil, fmt.Errorf("unet config: sample_size %d must be between 0 and %d (images of at most 8192 pixels)", r.SampleSize, maxSampleSize)
		}
	}
	return r, nil
}
