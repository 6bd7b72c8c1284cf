package inspect

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/lm"
)

// Text describes the language model of a transformers checkpoint (the
// text_config of a multimodal wrapper).
type Text struct {
	Layers       int `json:"layers"`
	Hidden       int `json:"hidden_size"`
	Intermediate int `json:"intermediate_size,omitempty"`
	Heads        int `json:"attention_heads"`
	KVHeads      int `json:"kv_heads"`
	HeadDim      int `json:"head_dim"`
	Vocab        int `json:"vocab_size"`
	MaxPositions int `json:"max_position_embeddings,omitempty"`
	// TiedEmbeddings is tie_word_embeddings, nil when the config is silent.
	TiedEmbeddings *bool `json:"tie_word_embeddings,omitempty"`

	// Layer kinds: full attention keeps a KV cache for the whole context,
	// sliding attention for SlidingWindow tokens, linear attention a fixed
	// recurrent state.
	FullAttentionLayers    int `json:"full_attention_layers"`
	SlidingAttentionLayers int `json:"sliding_attention_layers,omitempty"`
	LinearAttentionLayers  int `json:"linear_attention_layers,omitempty"`
	MambaLayers            int `json:"mamba_layers,omitempty"`
	// FeedForwardLayers are layers of an MLP or experts alone, with no
	// token mixer and no state (NemotronH's "-" and "E" blocks).
	FeedForwardLayers int `json:"feed_forward_layers,omitempty"`
	// ConvLayers are LFM2's gated short-convolution layers, whose state
	// is the convolution's last ConvKernel-1 inputs of Hidden channels.
	ConvLayers    int              `json:"conv_layers,omitempty"`
	ConvKernel    int              `json:"conv_kernel,omitempty"`
	SlidingWindow int              `json:"sliding_window,omitempty"`
	Linear        *LinearAttention `json:"linear_attention,omitempty"`
	Mamba         *Mamba           `json:"mamba,omitempty"`
	// MLA is multi-head latent attention's sizes (DeepSeek-V3's
	// kv_lora_rank and kin), nil for other attention. Its cache is one
	// latent a token (KVHeads 1).
	MLA *LatentAttention `json:"latent_attention,omitempty"`
	MoE *MoE             `json:"moe,omitempty"`
}

// LatentAttention holds multi-head latent attention's dimensions
// (DeepSeek-V3): the cached latent and shared rotated key, each head's
// query/key and value sizes, and the query's low rank (0: none).
type LatentAttention struct {
	KVLoraRank int `json:"kv_lora_rank"`
	QLoraRank  int `json:"q_lora_rank,omitempty"`
	QKNope     int `json:"qk_nope_head_dim"`
	QKRope     int `json:"qk_rope_head_dim"`
	VHead      int `json:"v_head_dim"`
	// IndexHeadDim is DeepSeek-V3.2's indexer's key, cached beside the
	// latent a token and layer (index_head_dim; 0 without an indexer).
	IndexHeadDim int `json:"index_head_dim,omitempty"`
}

// LinearAttention holds the gated-delta-net dimensions of hybrid models
// (Qwen3-Next, Qwen3.5).
type LinearAttention struct {
	KeyHeads     int `json:"key_heads"`
	ValueHeads   int `json:"value_heads"`
	KeyHeadDim   int `json:"key_head_dim"`
	ValueHeadDim int `json:"value_head_dim"`
	ConvKernel   int `json:"conv_kernel"`
}

// Mamba holds the Mamba-2 dimensions of hybrid models (Granite 4.0-H's
// mamba_* fields).
type Mamba struct {
	Heads      int `json:"heads"`
	HeadDim    int `json:"head_dim"`
	State      int `json:"state"`
	Groups     int `json:"groups"`
	ConvKernel int `json:"conv_kernel"`
}

// MoE holds the mixture-of-experts settings.
type MoE struct {
	Experts            int `json:"experts"`
	ExpertsPerToken    int `json:"experts_per_token"`
	ExpertIntermediate int `json:"moe_intermediate_size,omitempty"`
	SharedExperts      int `json:"shared_experts,omitempty"`
	SharedIntermediate int `json:"shared_expert_intermediate_size,omitempty"`
}

// fields reads config values by any of several names, as the spellings
// differ between architectures (GPT-2's n_layer, Llama's
// num_hidden_layers).
type fields map[string]json.RawMessage

func (f fields) int(names ...string) (int, bool) {
	for _, n := range names {
		raw, ok := f[n]
		if !ok {
			continue
		}
		var v *float64
		if json.Unmarshal(raw, &v) == nil && v != nil && *v == float64(int(*v)) {
			return int(*v), true
		}
	}
	return 0, false
}

// perLayer is int, or the value of a list of one integer a layer (layers
// entries) that are all equal (HunYuan's moe_topk, moe_intermediate_size,
// num_shared_expert).
func (f fields) perLayer(layers int, names ...string) (int, bool) {
	if v, ok := f.int(names...); ok {
		return v, true
	}
	for _, n := range names {
		var list []float64
		if raw, ok := f[n]; ok && json.Unmarshal(raw, &list) == nil && len(list) == layers && layers > 0 &&
			list[0] == float64(int(list[0])) && !slices.ContainsFunc(list, func(x float64) bool { return x != list[0] }) {
			return int(list[0]), true
		}
	}
	return 0, false
}

func (f fields) bool(name string) (*bool, bool) {
	raw, ok := f[name]
	if !ok {
		return nil, false
	}
	var v *bool
	if json.Unmarshal(raw, &v) != nil || v == nil {
		return nil, false
	}
	return v, true
}

// string is the string at name, "" when absent or not a string.
func (f fields) string(name string) string {
	var v string
	if raw, ok := f[name]; ok {
		json.Unmarshal(raw, &v)
	}
	return v
}

func (f fields) strings(name string) []string {
	var v []string
	if raw, ok := f[name]; ok {
		json.Unmarshal(raw, &v)
	}
	return v
}

// dbrxFields is a DBRX config's fields with its attn_config's and
// ffn_config's sizes among them under the names TextConfig reads, each
// DbrxAttentionConfig's or DbrxFFNConfig's default when absent: one
// key/value head, 4 experts of 3584 of which 1 runs; d_model 2048, 24
// layers of 16 heads, a vocabulary of 32000 and a context of 2048.
func dbrxFields(f fields) fields {
	out := make(fields, len(f)+5)
	for k, v := range f {
		out[k] = v
	}
	var attn, ffn fields
	json.Unmarshal(f["attn_config"], &attn) // not an object: DbrxConfig's defaults, and loading names the field
	json.Unmarshal(f["ffn_config"], &ffn)
	set := func(to string, from fields, name, def string) {
		if v, ok := from[name]; ok && string(v) != "null" {
			out[to] = v
		} else {
			out[to] = json.RawMessage(def)
		}
	}
	set("d_model", f, "d_model", "2048") // DbrxConfig's top-level defaults
	set("n_layers", f, "n_layers", "24")
	set("n_heads", f, "n_heads", "16")
	set("vocab_size", f, "vocab_size", "32000")
	set("max_seq_len", f, "max_seq_len", "2048")
	set("num_key_value_heads", attn, "kv_n_heads", "1")
	set("moe_num_experts", ffn, "moe_num_experts", "4")
	set("moe_top_k", ffn, "moe_top_k", "1")
	set("moe_ffn_hidden_size", ffn, "ffn_hidden_size", "3584")
	return out
}

// kimiFields is a Kimi Linear config's fields with its
// linear_attn_config among them under Qwen3-Next's names, which
// TextConfig reads: layer_types from kda_layers (1-based; the others
// full attention, MLA), and the KDA's num_heads and head_dim as both the
// key and the value heads' (KimiDeltaAttention's q, k and v are alike),
// short_conv_kernel_size as the convolution's. A config without the
// object is MLA throughout.
func kimiFields(f fields, layers int) fields {
	var lin struct {
		KDA     []int `json:"kda_layers"`
		Heads   *int  `json:"num_heads"`
		HeadDim *int  `json:"head_dim"`
		Kernel  *int  `json:"short_conv_kernel_size"`
	}
	if json.Unmarshal(f["linear_attn_config"], &lin) != nil || layers <= 0 || layers > 1<<16 {
		return f // not an object: loading names the field
	}
	out := make(fields, len(f)+6)
	for k, v := range f {
		out[k] = v
	}
	types := slices.Repeat([]string{"full_attention"}, layers)
	for _, n := range lin.KDA {
		if n >= 1 && n <= layers { // out of range: loading names it
			types[n-1] = "linear_attention"
		}
	}
	out["layer_types"], _ = json.Marshal(types)
	for to, v := range map[string]*int{"linear_num_key_heads": lin.Heads, "linear_num_value_heads": lin.Heads,
		"linear_key_head_dim": lin.HeadDim, "linear_value_head_dim": lin.HeadDim, "linear_conv_kernel_dim": lin.Kernel} {
		if v != nil {
			out[to], _ = json.Marshal(*v)
		}
	}
	return out
}

// miniMaxFields is a MiniMax-Text-01 or MiniMax-M1 config's fields with
// its lightning layers under Qwen3-Next's names, which TextConfig reads:
// layer_types from attn_type_list (0 lightning, 1 softmax) where the
// config has no layer_types, where it has neither MiniMaxConfig's
// alternation or, for the releases' architectures (release), every
// layer softmax, as pipeline/minimax reads them; the attention's heads
// and head_dim as the lightning layers' key and value heads (its state
// is [heads, head_dim, head_dim]), and a convolution of one tap (none
// kept).
func miniMaxFields(f fields, layers int, release bool) fields {
	if layers <= 0 || layers > 1<<16 {
		return f // loading names the field
	}
	out := make(fields, len(f)+6)
	for k, v := range f {
		out[k] = v
	}
	if _, ok := f["layer_types"]; !ok {
		types := make([]string, layers)
		var list []int
		json.Unmarshal(f["attn_type_list"], &list) // not a list of the layers': loading names it
		for i := range types {
			types[i] = "full_attention"
			if (len(list) == layers && list[i] == 0) || (len(list) != layers && i%2 == 1 && !release) {
				types[i] = "linear_attention"
			}
		}
		out["layer_types"], _ = json.Marshal(types)
	}
	heads, _ := f.int("num_attention_heads")
	dim, ok := f.int("head_dim")
	if !ok && heads > 0 {
		h, _ := f.int("hidden_size")
		dim = h / heads
	}
	for _, k := range []string{"linear_num_key_heads", "linear_num_value_heads"} {
		out[k], _ = json.Marshal(heads)
	}
	for _, k := range []string{"linear_key_head_dim", "linear_value_head_dim"} {
		out[k], _ = json.Marshal(dim)
	}
	out["linear_conv_kernel_dim"] = json.RawMessage("1")
	return out
}

// longcatFields is a LongCat-Flash config's fields as its attention
// layers: num_layers layers of two MLA sublayers each, so
// num_hidden_layers is twice num_layers (LongcatFlashConfig's 28, as
// transformers sets it), each with a latent cache; the experts' width
// expert_ffn_hidden_size under the name TextConfig reads.
func longcatFields(f fields) fields {
	out := make(fields, len(f)+2)
	for k, v := range f {
		out[k] = v
	}
	layers := 28
	if n, ok := f.int("num_layers"); ok && n > 0 && n <= 1<<16 {
		layers = n
	}
	out["num_hidden_layers"], _ = json.Marshal(2 * layers)
	if v, ok := f["expert_ffn_hidden_size"]; ok {
		out["moe_intermediate_size"] = v
	}
	return out
}

// modalityFields is an ERNIE 4.5 VL config's fields (the release's, or
// transformers' text_config) with its per-modality lists
// (moe_num_experts, moe_intermediate_size: text, then vision) read as the
// text model's, which is what tputool runs.
func modalityFields(f fields) fields {
	out := make(fields, len(f))
	for k, v := range f {
		out[k] = v
	}
	for _, k := range []string{"moe_num_experts", "moe_intermediate_size"} {
		var list []json.RawMessage
		if json.Unmarshal(f[k], &list) == nil && len(list) > 0 {
			out[k] = list[0]
		}
	}
	return out
}

// attentionFree completes t for a model without attention (Mamba,
// FalconMamba): no heads, every layer its recurrent kind, the
// vocabulary and the tied head as TextConfig reads them.
func (t *Text) attentionFree(f fields) (*Text, error) {
	t.Vocab, _ = f.int("vocab_size")
	if t.Vocab == 0 {
		t.Vocab = 50280 // MambaConfig's
	}
	t.Intermediate, _ = f.int("intermediate_size")
	tied := true // MambaConfig's
	if v, ok := f.bool("tie_word_embeddings"); ok {
		tied = *v
	}
	t.TiedEmbeddings = &tied
	t.MambaLayers = t.Layers
	return t, nil
}

// TextConfig extracts the language-model dimensions from a config.json,
// preferring text_config for multimodal wrappers. Defaults follow
// transformers: KV heads default to the attention heads, head_dim to
// hidden/heads, every layer to full attention.
func TextConfig(m *config.File) (*Text, error) {
	src := m
	if m.Text != nil {
		src = m.Text
	} else if raw, ok := m.Raw["thinker_config"]; ok && string(raw) != "null" {
		// Qwen3-Omni: the thinker's text model, in thinker_config.text_config.
		if thinker, err := config.ParseModel(raw); err == nil && thinker.Text != nil {
			src = thinker.Text
		}
	}
	f := fields(src.Raw)
	if f.string("model_type") == "dbrx" {
		f = dbrxFields(f)
	}
	if f.string("model_type") == "longcat_flash" {
		f = longcatFields(f)
	}
	t := &Text{}
	var ok bool
	if t.Layers, ok = f.int("num_hidden_layers", "n_layer", "num_layers", "n_layers"); !ok || t.Layers <= 0 {
		return nil, fmt.Errorf("%s: no num_hidden_layers (or n_layer) in the config", m.Path)
	}
	if t.Hidden, ok = f.int("hidden_size", "n_embd", "d_model", "dim"); !ok || t.Hidden <= 0 {
		return nil, fmt.Errorf("%s: no hidden_size (or n_embd, d_model) in the config", m.Path)
	}
	archs := fields(m.Raw).strings("architectures")
	// MiniMax-Text-01's reading depends on the class, as pipeline/minimax
	// decides: the releases' own (all softmax without a list) or
	// transformers' (alternating).
	miniMaxRelease := slices.Contains(archs, "MiniMaxText01ForCausalLM") || slices.Contains(archs, "MiniMaxM1ForCausalLM")
	miniMaxHF := slices.Contains(archs, "MiniMaxForCausalLM")
	switch mt := f.string("model_type"); {
	case mt == "kimi_linear":
		f = kimiFields(f, t.Layers)
	case mt == "minimax", mt == "minimax_text_01", mt == "minimax_m1", mt == "" && (miniMaxRelease || miniMaxHF):
		f = miniMaxFields(f, t.Layers, miniMaxRelease || (!miniMaxHF && mt != "minimax"))
	case mt == "ernie4_5_moe_vl", mt == "ernie4_5_vl_moe_text":
		f = modalityFields(f)
	}
	if t.Heads, ok = f.int("num_attention_heads", "n_head", "num_heads", "n_heads"); !ok || t.Heads <= 0 {
		if _, mamba := f.int("state_size"); mamba && !ok { // Mamba-1 (MambaConfig's state_size): no attention
			return t.attentionFree(f)
		}
		return nil, fmt.Errorf("%s: no num_attention_heads (or n_head) in the config", m.Path)
	}
	t.KVHeads, ok = f.int("num_key_value_heads", "n_kv_heads", "num_kv_heads")
	if !ok || t.KVHeads <= 0 {
		t.KVHeads = t.Heads
		if mq, ok := f.bool("multi_query"); ok && *mq {
			t.KVHeads = 1
		}
	}
	if t.HeadDim, ok = f.int("head_dim"); f.string("model_type") == "zamba2" {
		t.HeadDim = 2 * t.Hidden / t.Heads // Zamba2Config: attention on 2 × hidden_size, whatever attention_head_dim says
	} else if !ok || t.HeadDim <= 0 {
		if t.Hidden%t.Heads != 0 {
			return nil, fmt.Errorf("%s: hidden_size %d is not a multiple of num_attention_heads %d and head_dim is not set", m.Path, t.Hidden, t.Heads)
		}
		t.HeadDim = t.Hidden / t.Heads
	}
	if r, ok := f.int("kv_lora_rank"); ok && r > 0 {
		la := &LatentAttention{KVLoraRank: r}
		la.QLoraRank, _ = f.int("q_lora_rank")
		la.QKNope, _ = f.int("qk_nope_head_dim")
		la.QKRope, _ = f.int("qk_rope_head_dim")
		la.VHead, _ = f.int("v_head_dim")
		if mt := f.string("model_type"); mt == "deepseek_v32" || mt == "glm_moe_dsa" {
			la.IndexHeadDim = 128 // DeepseekV32Config's and GlmMoeDsaConfig's
			if d, ok := f.int("index_head_dim"); ok {
				la.IndexHeadDim = d
			}
		}
		t.MLA, t.KVHeads, t.HeadDim = la, 1, la.QKNope+la.QKRope
	}
	t.Vocab, _ = f.int("vocab_size", "n_vocab", "padded_vocab_size")
	if t.Vocab == 0 {
		t.Vocab, _ = fields(m.Raw).int("vocab_size")
	}
	t.Intermediate, _ = f.int("intermediate_size", "n_inner", "ffn_dim", "ffn_hidden_size")
	t.MaxPositions, _ = f.int("max_position_embeddings", "n_positions", "seq_length", "max_sequence_length", "max_seq_len")
	if tied, ok := f.bool("tie_embedding"); ok { // LFM2's, which Lfm2Config reads first
		t.TiedEmbeddings = tied
	} else if tied, ok := f.bool("tie_word_embeddings"); ok {
		t.TiedEmbeddings = tied
	} else if tied, ok := fields(m.Raw).bool("tie_word_embeddings"); ok {
		t.TiedEmbeddings = tied
	}
	if err := t.layerKinds(f, m.Path); err != nil {
		return nil, err
	}
	if t.ConvLayers > 0 {
		t.ConvKernel = 3 // Lfm2Config's conv_L_cache
		if k, ok := f.int("conv_L_cache"); ok {
			t.ConvKernel = k
		}
		if t.ConvKernel < 2 {
			return nil, fmt.Errorf("%s: %d conv layers but conv_L_cache is %d; want at least 2", m.Path, t.ConvLayers, t.ConvKernel)
		}
	}
	if t.LinearAttentionLayers > 0 {
		la := &LinearAttention{}
		la.KeyHeads, _ = f.int("linear_num_key_heads")
		la.ValueHeads, _ = f.int("linear_num_value_heads")
		la.KeyHeadDim, _ = f.int("linear_key_head_dim")
		la.ValueHeadDim, _ = f.int("linear_value_head_dim")
		la.ConvKernel, _ = f.int("linear_conv_kernel_dim")
		if la.KeyHeads <= 0 || la.ValueHeads <= 0 || la.KeyHeadDim <= 0 || la.ValueHeadDim <= 0 || la.ConvKernel <= 0 {
			return nil, fmt.Errorf("%s: %d linear_attention layers but linear_num_key_heads, linear_num_value_heads, linear_key_head_dim, linear_value_head_dim and linear_conv_kernel_dim are not all set", m.Path, t.LinearAttentionLayers)
		}
		t.Linear = la
	}
	if t.MambaLayers > 0 && f.string("model_type") != "jamba" { // Jamba's are Mamba-1: no Mamba-2 sizes
		mb := &Mamba{}
		if f.string("model_type") == "nemotron_h" {
			// NemotronHConfig's names (its older ones first, as it reads
			// them) and defaults.
			mb.Heads, _ = f.int("mamba_num_heads")
			mb.HeadDim, _ = f.int("mamba_head_dim")
			mb.State, _ = f.int("ssm_state_size")
			mb.Groups, _ = f.int("mamba_n_groups", "n_groups")
			mb.ConvKernel, _ = f.int("mamba_d_conv", "conv_kernel")
			for _, d := range []struct {
				dst *int
				v   int
			}{{&mb.Heads, 128}, {&mb.HeadDim, 64}, {&mb.State, 128}, {&mb.Groups, 8}, {&mb.ConvKernel, 4}} {
				if *d.dst == 0 {
					*d.dst = d.v
				}
			}
		} else {
			// GraniteMoeHybridConfig's (Bamba's) names and defaults;
			// mamba_d_head "auto" is mamba_expand × hidden_size / heads.
			// Zamba2Config's: n_mamba_heads (8), mamba_ngroups, mamba_d_state
			// 64, mamba_headdim recomputed from the width.
			zamba2 := f.string("model_type") == "zamba2"
			mb.Heads, _ = f.int("mamba_n_heads", "n_mamba_heads")
			mb.HeadDim, _ = f.int("mamba_d_head")
			mb.State, _ = f.int("mamba_d_state")
			mb.Groups, _ = f.int("mamba_n_groups", "mamba_ngroups")
			mb.ConvKernel, _ = f.int("mamba_d_conv")
			heads, state := 128, 256
			if zamba2 {
				heads, state = 8, 64
			}
			for _, d := range []struct {
				dst *int
				v   int
			}{{&mb.Heads, heads}, {&mb.State, state}, {&mb.Groups, 1}, {&mb.ConvKernel, 4}} {
				if *d.dst == 0 {
					*d.dst = d.v
				}
			}
			expand, ok := f.int("mamba_expand")
			if !ok {
				expand = 2
			}
			inner := expand * t.Hidden
			if f.string("model_type") == "falcon_h1" { // FalconH1Config's mamba_d_ssm, 1024 when absent (null: expand × hidden)
				if v, ok := f.int("mamba_d_ssm"); ok {
					inner = v
				} else if _, present := f["mamba_d_ssm"]; !present {
					inner = 1024
				}
			}
			if mb.HeadDim == 0 && mb.Heads > 0 {
				mb.HeadDim = inner / mb.Heads
			}
		}
		if mb.Heads <= 0 || mb.HeadDim <= 0 || mb.State <= 0 || mb.Groups <= 0 || mb.ConvKernel <= 1 {
			return nil, fmt.Errorf("%s: %d mamba layers but mamba_n_heads, mamba_d_head, mamba_d_state, mamba_n_groups and mamba_d_conv do not give positive sizes", m.Path, t.MambaLayers)
		}
		t.Mamba = mb
	}
	if n, ok := f.int("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts", "moe_num_primary_experts"); ok && n > 1 {
		moe := &MoE{Experts: n}
		moe.ExpertsPerToken, _ = f.perLayer(t.Layers, "num_experts_per_tok", "num_experts_per_token", "moe_top_k", "top_k", "top_k_experts", "moe_k", "moe_topk",
			"moe_num_active_primary_experts")
		moe.ExpertIntermediate, _ = f.perLayer(t.Layers, "moe_intermediate_size", "moe_ffn_hidden_size")
		moe.SharedExperts, _ = f.perLayer(t.Layers, "n_shared_experts", "num_shared_experts", "moe_num_shared_experts", "num_shared_expert")
		moe.SharedIntermediate, _ = f.int("shared_expert_intermediate_size")
		if moe.ExpertsPerToken <= 0 || moe.ExpertsPerToken > n {
			return nil, fmt.Errorf("%s: %d experts but num_experts_per_tok is %d", m.Path, n, moe.ExpertsPerToken)
		}
		t.MoE = moe
	}
	return t, nil
}

// layerKinds counts full, sliding and linear attention layers from
// layer_types, or from full_attention_interval (early Qwen3-Next configs),
// or a sliding_window over every layer or those from max_window_layers
// on.
func (t *Text) layerKinds(f fields, path string) error {
	window, _ := f.int("sliding_window")
	types := f.strings("layer_types")
	if len(types) == 0 { // NemotronH's spellings: its list, or its pattern of one letter a layer
		types = f.strings("layers_block_type")
	}
	var pattern string
	if raw, ok := f["hybrid_override_pattern"]; ok && len(types) == 0 {
		if err := json.Unmarshal(raw, &pattern); err != nil {
			return fmt.Errorf("%s: hybrid_override_pattern is %s; want a string of M, *, - and E", path, raw)
		}
		for _, r := range pattern {
			types = append(types, map[rune]string{'M': "mamba", '*': "attention", '-': "mlp", 'E': "moe"}[r])
		}
	}
	modelType := f.string("model_type")
	nemotron := modelType == "nemotron_h"        // its linear_attention layers are Mamba-2
	if len(types) == 0 && modelType == "jamba" { // JambaConfig's attn_layer_period and offset: the rest Mamba-1
		period, ok := f.int("attn_layer_period")
		if !ok {
			period = 8
		}
		offset, ok := f.int("attn_layer_offset")
		if !ok {
			offset = 4
		}
		if period <= 0 || offset < 0 || offset >= period {
			return fmt.Errorf("%s: attn_layer_period %d and attn_layer_offset %d: want the period positive and the offset in [0, period)", path, period, offset)
		}
		if _, ok := f.int("num_key_value_heads"); !ok {
			t.KVHeads = 8 // JambaConfig's
		}
		if t.Vocab == 0 {
			t.Vocab = 65536 // JambaConfig's
		}
		for i := range t.Layers {
			if i%period == offset {
				t.FullAttentionLayers++
			} else {
				t.MambaLayers++
			}
		}
		return nil
	}
	if len(types) == 0 && modelType == "falcon_h1" { // attention and a Mamba-2 mixer side by side in every layer
		t.FullAttentionLayers, t.MambaLayers = t.Layers, t.Layers
		return nil
	}
	if len(types) == 0 && modelType == "bamba" { // BambaConfig's layers_block_type: no attn_layer_indices (or null) is every layer Mamba
		var idx []int
		if raw, ok := f["attn_layer_indices"]; ok && string(raw) != "null" && json.Unmarshal(raw, &idx) != nil {
			return fmt.Errorf("%s: attn_layer_indices is %s; want a list of layer indices", path, raw)
		}
		types = slices.Repeat([]string{"mamba"}, t.Layers)
		for _, i := range idx {
			if i < 0 || i >= t.Layers {
				return fmt.Errorf("%s: attn_layer_indices holds %d, outside the %d layers", path, i, t.Layers)
			}
			types[i] = "attention"
		}
	}
	if len(types) == 0 && modelType == "granitemoehybrid" {
		types = slices.Repeat([]string{"mamba"}, t.Layers) // GraniteMoeHybridConfig's layers_block_type without layer_types
	}
	if raw, ok := f["full_attn_idxs"]; ok && len(types) == 0 && modelType == "lfm2" && string(raw) != "null" {
		// LFM2's original configs: the attention layers' indices, the
		// others short convolutions.
		var idx []int
		if err := json.Unmarshal(raw, &idx); err != nil {
			return fmt.Errorf("%s: full_attn_idxs is %s; want a list of layer indices", path, raw)
		}
		types = slices.Repeat([]string{"conv"}, t.Layers)
		for _, i := range idx {
			if i < 0 || i >= t.Layers {
				return fmt.Errorf("%s: full_attn_idxs holds %d, outside the %d layers", path, i, t.Layers)
			}
			types[i] = "full_attention"
		}
	}
	if len(types) > 0 {
		if len(types) != t.Layers {
			return fmt.Errorf("%s: layer_types has %d entries for %d layers", path, len(types), t.Layers)
		}
		for i, lt := range types {
			switch lt {
			case "full_attention", "attention", "global_attention":
				t.FullAttentionLayers++
			case "sliding_attention", "local_attention", "chunked_attention":
				t.SlidingAttentionLayers++
			case "linear_attention":
				if nemotron {
					t.MambaLayers++
				} else {
					t.LinearAttentionLayers++
				}
			case "mamba":
				t.MambaLayers++
			case "hybrid": // Zamba2's: a shared attention block (a KV cache of its own) before a Mamba-2 mixer
				t.FullAttentionLayers++
				t.MambaLayers++
			case "mlp", "moe":
				t.FeedForwardLayers++
			case "conv":
				t.ConvLayers++
			default:
				if pattern != "" {
					return fmt.Errorf("%s: hybrid_override_pattern[%d] is %q (want M, *, - or E)", path, i, []rune(pattern)[i])
				}
				return fmt.Errorf("%s: layer_types[%d] is %q (want full_attention, sliding_attention, linear_attention, mamba, mlp, moe or conv)", path, i, lt)
			}
		}
		if t.SlidingAttentionLayers > 0 {
			if window <= 0 {
				window, _ = f.int("attention_chunk_size")
			}
			if window <= 0 {
				return fmt.Errorf("%s: sliding_attention layers without a sliding_window", path)
			}
			t.SlidingWindow = window
		}
		return nil
	}
	if every, ok := f.int("full_attention_interval"); ok && every > 0 {
		for i := 0; i < t.Layers; i++ {
			if (i+1)%every == 0 {
				t.FullAttentionLayers++
			} else {
				t.LinearAttentionLayers++
			}
		}
		return nil
	}
	use, set := f.bool("use_sliding_window")
	if window > 0 && (!set || *use) {
		// Layers from max_window_layers on slide (Qwen2's and dots.llm1's
		// derivation); without it, every layer (Mistral's).
		full := 0
		if from, ok := f.int("max_window_layers"); ok && from > 0 {
			full = min(from, t.Layers)
		}
		t.FullAttentionLayers, t.SlidingAttentionLayers = full, t.Layers-full
		if t.SlidingAttentionLayers > 0 {
			t.SlidingWindow = window
		}
		return nil
	}
	t.FullAttentionLayers = t.Layers
	return nil
}

// attentionKinds recounts the full and sliding attention layers of t
// (and its window) as the architecture resolved them, where every layer
// attends: a family's own default pattern (OLMo 3's three sliding layers
// of four, Cohere 2's and EXAONE 4.0's sliding_window_pattern) is the
// architecture's, not config.json's to say. Models with other layer
// kinds keep the config's counts.
func attentionKinds(t *Text, s *lm.Spec) {
	if len(s.LayerKinds) != t.Layers || t.LinearAttentionLayers+t.MambaLayers+t.FeedForwardLayers+t.ConvLayers > 0 {
		return
	}
	full, sliding := 0, 0
	for _, k := range s.LayerKinds {
		switch k {
		case lm.KindFull:
			full++
		case lm.KindSliding:
			sliding++
		default:
			return
		}
	}
	if sliding > 0 && s.SlidingWindow <= 0 {
		return
	}
	t.FullAttentionLayers, t.SlidingAttentionLayers, t.SlidingWindow = full, sliding, 0
	if sliding > 0 {
		t.SlidingWindow = s.SlidingWindow
	}
}

// State is the per-sequence memory a model keeps while generating.
type State struct {
	// KVCache is the keys and values of full and sliding attention layers.
	KVCache int64 `json:"kv_cache_bytes"`
	// Recurrent is the fixed state of linear attention layers, as
	// pipeline/qwen35 allocates it (nn.DeltaNetState): the causal
	// convolution's last conv_kernel-1 inputs over the [q, k, v] channels in
	// the compute dtype, and the [value_heads, key_head_dim,
	// value_head_dim] delta-rule matrix in float32, per layer and sequence.
	Recurrent int64 `json:"recurrent_state_bytes"`
	// whole is the part every device holds whole under tensor
	// parallelism at any degree (tpu.FitRequest.WholeStateBytes): the
	// recurrent state, and KV caches of layers with other KV-head counts.
	whole int64
}

// Total is KVCache + Recurrent.
func (s State) Total() int64 { return satAdd(s.KVCache, s.Recurrent) }

// satMul multiplies sizes, saturating at math.MaxInt64, so that a config
// with absurd sizes (or an absurd --context/--batch) shows more than 8 EiB
// and fits nowhere instead of wrapping around to a small or negative
// figure. A factor <= 0 makes 0.
func satMul(xs ...int64) int64 {
	p := int64(1)
	for _, x := range xs {
		if x <= 0 {
			return 0
		}
		if p > math.MaxInt64/x {
			p = math.MaxInt64
			continue
		}
		p *= x
	}
	return p
}

// satAdd adds non-negative sizes, saturating at math.MaxInt64.
func satAdd(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// StateBytes computes the generation state for batch sequences of context
// tokens, with KV entries of kvBytes bytes each.
func (t *Text) StateBytes(batch, context, kvBytes int) State {
	b, ctx, e := int64(batch), int64(context), int64(kvBytes)
	// K and V; under MLA the one cache of the latent and rope key.
	perToken := satMul(2, int64(t.KVHeads), int64(t.HeadDim), e)
	if la := t.MLA; la != nil {
		perToken = satMul(int64(la.KVLoraRank+la.QKRope+la.IndexHeadDim), e)
	}
	var s State
	s.KVCache = satMul(int64(t.FullAttentionLayers), b, ctx, perToken)
	if t.SlidingAttentionLayers > 0 {
		s.KVCache = satAdd(s.KVCache, satMul(int64(t.SlidingAttentionLayers), b, min(ctx, int64(t.SlidingWindow)), perToken))
	}
	if la := t.Linear; la != nil && t.LinearAttentionLayers > 0 {
		keyDim := satMul(int64(la.KeyHeads), int64(la.KeyHeadDim))
		valueDim := satMul(int64(la.ValueHeads), int64(la.ValueHeadDim))
		conv := satMul(satAdd(satAdd(keyDim, keyDim), valueDim), int64(la.ConvKernel-1), e)
		matrix := satMul(int64(la.ValueHeads), int64(la.KeyHeadDim), int64(la.ValueHeadDim), 4)
		s.Recurrent = satMul(int64(t.LinearAttentionLayers), b, satAdd(conv, matrix))
	}
	if t.ConvLayers > 0 {
		// nn.ShortConvState: the last ConvKernel-1 gated inputs B·x in the
		// compute dtype.
		s.Recurrent = satAdd(s.Recurrent, satMul(int64(t.ConvLayers), b, int64(t.ConvKernel-1), int64(t.Hidden), e))
	}
	if mb := t.Mamba; mb != nil && t.MambaLayers > 0 {
		// nn.Mamba2State: the convolution's last inputs over x, B and C in
		// the compute dtype, and the [heads, head_dim, state] float32 state.
		channels := satAdd(satMul(int64(mb.Heads), int64(mb.HeadDim)), satMul(2, int64(mb.Groups), int64(mb.State)))
		conv := satMul(channels, int64(mb.ConvKernel-1), e)
		ssm := satMul(int64(mb.Heads), int64(mb.HeadDim), int64(mb.State), 4)
		s.Recurrent = satAdd(s.Recurrent, satMul(int64(t.MambaLayers), b, satAdd(conv, ssm)))
	}
	return s
}

// ParseDType reads a --dtype value: the element size in bytes (0 for
// auto, the checkpoint's own dtypes) and the canonical name. Errors wrap
// errs.ErrUsage.
func ParseDType(d string) (size int, name string, err error) {
	switch strings.ToLower(d) {
	case "auto":
		return 0, "auto", nil
	case "bf16", "bfloat16":
		return 2, "bf16", nil
	case "f16", "fp16", "float16":
		return 2, "f16", nil
	case "f32", "fp32", "float32":
		return 4, "f32", nil
	case "f8", "fp8":
		return 1, "fp8", nil
	}
	return 0, "", &errs.OptionError{Owner: "Options", Option: "DType", Value: strconv.Quote(d), Want: "bf16, f16, f32, fp8 or auto"}
}
