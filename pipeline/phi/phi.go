// Package phi implements Microsoft's Phi-1, Phi-1.5 and Phi-2
// (PhiForCausalLM), following transformers' models/phi.
//
// Phi's layer is Llama's (pipeline/llama) run in parallel, as GPT-J's:
// one input_layernorm (a LayerNorm with a bias) feeds both the attention
// and the MLP, and both join the residual (llama.Options.Parallel). Every
// projection has a bias, the output one named self_attn.dense; the MLP is
// fc1 and fc2 without a gate, gelu_new between them (UngatedMLP); the
// rotary turns the first partial_rotary_factor of each head (0.5 by
// default, Phi-2's 0.4); the final norm is model.final_layernorm, and the
// head has a bias (HeadBias). The checkpoints' names are read as Llama's
// (lm.Renamer). transformers sums attn + mlp + residual in that order,
// tputool residual + attn + mlp: the same up to float rounding.
//
// qk_layernorm (which no released Phi sets) is PhiAttention's: one
// biased LayerNorm over head_dim for every query head (q_layernorm) and
// one for every key head (k_layernorm), before the rotary
// (llama.Options.QKLayerNormShared).
package phi

import (
	"strings"

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/llama"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/nn"
)

func init() {
	lm.Register("PhiForCausalLM", New)
}

// Defaults are PhiConfig's.
var Defaults = llama.Defaults{
	VocabSize: 51200, Hidden: 2048, Intermediate: 8192, Layers: 24, Heads: 32,
	MaxPositions: 2048, Eps: 1e-5, RopeTheta: 10000, Tie: false, Act: "gelu_new",
	BOS: []int{1}, EOS: []int{2},
}

// defaultPartial is PhiConfig's partial_rotary_factor.
const defaultPartial = 0.5

// Resolve reads a PhiForCausalLM config.json into the options of
// pipeline/llama's decoder.
func Resolve(cfg *config.File) (llama.Options, error) {
	var c struct {
		llama.Config
		LayerNormEps *float64 `json:"layer_norm_eps"`
		QKLayerNorm  bool     `json:"qk_layernorm"`
	}
	if err := cfg.Decode(&c); err != nil {
		return llama.Options{}, err
	}
	if c.ModelType == "phi-msft" || c.ModelType == "mixformer-sequential" {
		return llama.Options{}, errs.Unsupportedf("%s: model_type %q is Phi's first remote-code layout (n_embd, n_layer, layers.N.mixer.*); tputool reads transformers' PhiForCausalLM (model_type phi)", lm.ConfigName(cfg), c.ModelType)
	}
	c.RMSNormEps = c.LayerNormEps
	withRope := *cfg
	withRope.Raw = nn.DefaultPartialRotary(cfg.Raw, defaultPartial)
	o, err := c.Resolve(&withRope, Defaults)
	if err != nil {
		return llama.Options{}, err
	}
	o.QKVBias, o.OBias, o.MLPBias, o.HeadBias = true, true, true, true
	o.LayerNorm, o.Parallel, o.UngatedMLP = true, true, true
	o.Norms = llama.Norms{PreAttn: "input_layernorm"}
	o.QKLayerNormShared = c.QKLayerNorm
	return o, nil
}

// New builds a PhiForCausalLM from its config.json.
func New(cfg *config.File) (lm.Model, error) {
	o, err := Resolve(cfg)
	if err != nil {
		return nil, err
	}
	return &Model{llama.NewModel(o)}, nil
}

// Model is Phi's decoder in its checkpoints' names.
type Model struct{ *llama.Model }

var _ lm.Renamer = (*Model)(nil)

// RenameWeight implements lm.Renamer: self_attn.dense is o_proj, mlp.fc1
// and fc2 are up_proj and down_proj, model.final_layernorm is model.norm.
func (m *Model) RenameWeight(stored string) string {
	if rest, ok := strings.CutPrefix(stored, "model.final_layernorm."); ok {
		return "model.norm." + rest
	}
	for _, r := range [][2]string{{".self_attn.dense.", ".self_attn.o_proj."}, {".mlp.fc1.", ".mlp.up_proj."}, {".mlp.fc2.", ".mlp.down_proj."}} {
		if before, after, ok := strings.Cut(stored, r[0]); ok && strings.HasPrefix(stored, "model.layers.") {
			return before + r[1] + after
		}
	}
	return stored
}
