// Package gptneo implements GPTNeoForCausalLM, following transformers'
// models/gpt_neo: EleutherAI's GPT-Neo (125M, 1.3B, 2.7B) and the models
// trained or fine-tuned on its layout.
//
// A GPT-Neo layer is GPT-2's (pipeline/gpt2: wte plus the learned wpe,
// ln_1 and ln_2 LayerNorms with a bias, an ungated c_fc/c_proj MLP with
// biases, gelu_new by default, ln_f, the head tied to wte) with nn.Linear
// matrices, the query, key and value apart and without biases
// (attn.attention.q_proj, k_proj, v_proj; out_proj has a bias), scores
// that are not scaled (GPTNeoSelfAttention computes q·k alone, in
// float32: llama.Options.ScoresF32), and layers that attend in full ("global") or within
// window_size tokens ("local", transformers' sliding-window semantics:
// a query sees the keys fewer than window_size positions behind it), as
// attention_types lists them. The checkpoints' names are read as Llama's
// (lm.Renamer); the causal-mask buffers old checkpoints hold are skipped.
package gptneo

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/llama"
	"github.com/tputool/tputool/pipeline/lm"
)

// Architecture is the class this package registers.
const Architecture = "GPTNeoForCausalLM"

func init() { lm.Register(Architecture, New) }

// Config is a GPTNeoForCausalLM config.json: GPTNeoConfig's names besides
// the fields Llama's config shares.
type Config struct {
	llama.Config
	NumLayers        *int     `json:"num_layers"`
	NumHeads         *int     `json:"num_heads"`
	WindowSize       *int     `json:"window_size"`
	LayerNormEpsilon *float64 `json:"layer_norm_epsilon"`
	ActivationFunc   string   `json:"activation_function"`
	// AttentionTypes is [[kinds, repeats], ...]: each entry's kinds
	// ("global", "local") repeated, in order, give the layers' kinds.
	AttentionTypes json.RawMessage `json:"attention_types"`
}

// Defaults are GPTNeoConfig's (GPT-Neo 1.3B's sizes); intermediate_size
// null is 4 × hidden_size.
var Defaults = llama.Defaults{
	VocabSize: 50257, Hidden: 2048, Layers: 24, Heads: 16, MaxPositions: 2048,
	Eps: 1e-5, RopeTheta: 10000, Tie: true, Act: "gelu_new",
	BOS: []int{50256}, EOS: []int{50256},
}

// defaultWindow is GPTNeoConfig's window_size.
const defaultWindow = 256

// Resolve reads a GPTNeoForCausalLM config.json into the options of
// pipeline/llama's decoder.
func Resolve(cfg *config.File) (llama.Options, error) {
	where := lm.ConfigName(cfg)
	var c Config
	if err := cfg.Decode(&c); err != nil {
		return llama.Options{}, err
	}
	// GPTNeoConfig's attribute_map: num_hidden_layers and
	// num_attention_heads are num_layers and num_heads (Llama's names,
	// when written, set last).
	if c.NumHiddenLayers == nil {
		c.NumHiddenLayers = c.NumLayers
	}
	if c.NumAttentionHeads == nil {
		c.NumAttentionHeads = c.NumHeads
	}
	c.RMSNormEps = c.LayerNormEpsilon
	c.HiddenAct = c.ActivationFunc
	if c.IntermediateSize == nil || *c.IntermediateSize <= 0 {
		inner := 4 * lm.Or(c.HiddenSize, Defaults.Hidden) // GPTNeoBlock: intermediate_size, or 4 × hidden_size
		c.IntermediateSize = &inner
	}
	c.NumKeyValueHeads, c.HeadDim, c.LayerTypes = nil, nil, nil
	c.AttentionBias, c.MLPBias = false, false
	o, err := c.Config.Resolve(cfg.Without(config.RopeFields...), Defaults)
	if err != nil {
		return llama.Options{}, err
	}
	kinds, err := layerKinds(where, c.AttentionTypes, o.Spec.Layers)
	if err != nil {
		return llama.Options{}, err
	}
	o.Spec.LayerKinds = kinds
	window := lm.Or(c.WindowSize, defaultWindow)
	if window <= 0 {
		return llama.Options{}, fmt.Errorf("%s: window_size %d must be positive", where, window)
	}
	o.Spec.SlidingWindow = window
	o.NoRotary()
	o.Positions = llama.Positions{Rows: o.Spec.MaxPositions}
	o.AttnScale = 1    // GPTNeoSelfAttention does not scale its scores,
	o.ScoresF32 = true // and computes them from queries and keys in float32
	o.OBias, o.MLPBias = true, true
	o.LayerNorm, o.UngatedMLP = true, true
	return o, nil
}

// layerKinds expands attention_types ([[["global", "local"], 12]], the
// default for the layers of GPT-Neo 1.3B) into a kind per layer, as
// GPTNeoConfig.expand_attention_types_params does, checking that they
// cover the layers exactly.
func layerKinds(where string, raw json.RawMessage, layers int) ([]string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		raw = json.RawMessage(`[[["global", "local"], 12]]`) // GPTNeoConfig's default: 24 layers
	}
	var entries [][]json.RawMessage
	if err := json.Unmarshal(raw, &entries); err != nil {
		return nil, fmt.Errorf("%s: attention_types: want [[[kind, ...], repeats], ...]: %w", where, err)
	}
	var kinds []string
	for i, e := range entries {
		var names []string
		var repeats int
		if len(e) != 2 || json.Unmarshal(e[0], &names) != nil || json.Unmarshal(e[1], &repeats) != nil || repeats < 0 || len(names) == 0 {
			return nil, fmt.Errorf("%s: attention_types[%d]: want [[kind, ...], repeats]", where, i)
		}
		if len(kinds)+repeats*len(names) > layers {
			return nil, fmt.Errorf("%s: attention_types lists more layers than num_layers %d", where, layers)
		}
		for range repeats {
			for _, n := range names {
				switch n {
				case "global":
					kinds = append(kinds, lm.KindFull)
				case "local":
					kinds = append(kinds, lm.KindSliding)
				default:
					return nil, errs.Unsupportedf("%s: attention_types[%d]: kind %q (want global or local)", where, i, n)
				}
			}
		}
	}
	if len(kinds) != layers {
		return nil, fmt.Errorf("%s: attention_types lists %d layers, num_layers is %d", where, len(kinds), layers)
	}
	return kinds, nil
}

// New builds a GPTNeoForCausalLM from its config.json.
func New(cfg *config.File) (lm.Model, error) {
	o, err := Resolve(cfg)
	if err != nil {
		return nil, err
	}
	return &Model{llama.NewModel(o)}, nil
}

// Model is GPT-Neo's decoder in its checkpoints' names. It implements
// lm.Renamer and lm.Skipper.
type Model struct{ *llama.Model }

var (
	_ lm.Renamer = (*Model)(nil)
	_ lm.Skipper = (*Model)(nil)
)

// renamed maps the modules of a GPT-Neo block to Llama's.
var renamed = strings.NewReplacer(
	".ln_1.", ".input_layernorm.",
	".ln_2.", ".post_attention_layernorm.",
	".attn.attention.q_proj.", ".self_attn.q_proj.",
	".attn.attention.k_proj.", ".self_attn.k_proj.",
	".attn.attention.v_proj.", ".self_attn.v_proj.",
	".attn.attention.out_proj.", ".self_attn.o_proj.",
	".mlp.c_fc.", ".mlp.up_proj.",
	".mlp.c_proj.", ".mlp.down_proj.",
)

// RenameWeight implements lm.Renamer: transformer.wte is
// model.embed_tokens, wpe model.embed_positions, h model.layers (ln_1
// input_layernorm, ln_2 post_attention_layernorm, attn.attention's
// projections self_attn's, out_proj o_proj, the MLP's c_fc and c_proj
// up_proj and down_proj), ln_f model.norm.
func (m *Model) RenameWeight(stored string) string { return names.Rename(stored) }

var names = llama.TransformerNames{
	Top:    [][2]string{{"wte.weight", "model.embed_tokens.weight"}, {"wpe.weight", llama.PositionsWeight}, {"ln_f.", "model.norm."}},
	Blocks: renamed,
}

// buffers matches the causal-mask buffers checkpoints saved with the
// weights, as stored or as renamed (the loader asks after renaming).
var buffers = regexp.MustCompile(`^(transformer\.h|model\.layers)\.\d+\.attn\.attention\.(bias|masked_bias)$`)

// SkipWeight implements lm.Skipper: the causal-mask buffers.
func (m *Model) SkipWeight(name string) (string, bool) {
	return lm.SkipMatched(name, lm.MaskBuffersReason, buffers)
}
