// Package minicpm implements MiniCPMForCausalLM, the class of OpenBMB's
// MiniCPM 1B and 2B, MiniCPM 2.4 and MiniCPM4 and 4.1 (0.5B, 8B), following
// the modeling_minicpm.py and configuration_minicpm.py their repositories
// ship (remote code).
//
// MiniCPM is Llama's decoder (pipeline/llama, under Llama's names) with
// μP's three scalings:
//   - the input embeddings times scale_emb;
//   - each attention and MLP output times scale_depth /
//     √num_hidden_layers before its residual add;
//   - the final hidden states divided by hidden_size / dim_model_base
//     before the head, so the logits are (llama.Options' EmbedScale,
//     ResidualScale and LogitsDivisor, as Granite's multipliers).
//
// The head is tied by default (MiniCPMConfig's default; MiniCPM4 unties
// it). rope_scaling longrope (MiniCPM4) is MiniCPMLongRoPE: its factors
// are chosen once, from max_position_embeddings: the long ones when it
// passes original_max_position_embeddings, the short ones otherwise, at
// every position, with cos and sin times √(1 + ln(max / original) /
// ln(original)). MiniCPM4's sparse_config (InfLLM v2) attends densely to
// sequences of up to its dense_len, where tputool bounds the context.
package minicpm

import (
	"encoding/json"
	"fmt"
	"math"

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/llama"
	"github.com/tputool/tputool/pipeline/lm"
)

// Architecture is the class this package registers.
const Architecture = "MiniCPMForCausalLM"

func init() { lm.Register(Architecture, New) }

// Config is a MiniCPMForCausalLM config.json: MiniCPMConfig's μP fields
// besides the fields Llama's config shares.
type Config struct {
	llama.Config
	ScaleEmb     *float64        `json:"scale_emb"`
	ScaleDepth   *float64        `json:"scale_depth"`
	DimModelBase *float64        `json:"dim_model_base"`
	UseMup       *bool           `json:"use_mup"`
	SparseConfig json.RawMessage `json:"sparse_config"`
}

// Defaults are MiniCPMConfig's (every μP scale 1).
var Defaults = llama.Defaults{
	VocabSize: 32000, Hidden: 4096, Intermediate: 11008, Layers: 32, Heads: 32, MaxPositions: 2048,
	Eps: 1e-6, RopeTheta: 10000, Tie: true, Act: "silu", LongRope: true,
	BOS: []int{1}, EOS: []int{2},
}

// Resolve reads a MiniCPMForCausalLM config.json into the options of
// pipeline/llama's decoder.
func Resolve(cfg *config.File) (llama.Options, error) {
	var c Config
	if err := cfg.Decode(&c); err != nil {
		return llama.Options{}, err
	}
	where := lm.ConfigName(cfg)
	if c.UseMup != nil && !*c.UseMup {
		return llama.Options{}, errs.Unsupportedf("%s: use_mup false; tputool runs MiniCPM with its μP scalings", where)
	}
	c.LayerTypes = nil
	o, err := c.Config.Resolve(cfg, Defaults)
	if err != nil {
		return llama.Options{}, err
	}
	s := &o.Spec
	for _, f := range []struct {
		name string
		v    *float64
	}{{"scale_emb", c.ScaleEmb}, {"scale_depth", c.ScaleDepth}, {"dim_model_base", c.DimModelBase}} {
		if f.v != nil && (*f.v <= 0 || math.IsInf(*f.v, 0)) {
			return llama.Options{}, fmt.Errorf("%s: %s must be positive, got %v", where, f.name, *f.v)
		}
	}
	o.EmbedScale = lm.Or(c.ScaleEmb, 1)
	o.ResidualScale = lm.Or(c.ScaleDepth, 1) / math.Sqrt(float64(s.Layers))
	o.LogitsDivisor = float64(s.Hidden) / lm.Or(c.DimModelBase, 1)
	if r := o.Rope; r.LongInvFreq != nil {
		// MiniCPMLongRoPE caches cos and sin for max_position_embeddings
		// positions when it is built, with the long factors when that
		// passes original_max_position_embeddings and the short ones
		// otherwise, both times √(1 + ln(max / original) / ln(original));
		// it computes them again only past max_position_embeddings.
		orig := float64(r.LongAfter)
		if s.MaxPositions > r.LongAfter {
			r.InvFreq = r.LongInvFreq
		}
		r.AttentionFactor = math.Sqrt(1 + math.Log(float64(s.MaxPositions)/orig)/math.Log(orig))
		r.LongInvFreq, r.LongAttentionFactor, r.LongAfter = nil, 0, 0
		s.RopeSwitch = 0
	}
	if len(c.SparseConfig) > 0 && string(c.SparseConfig) != "null" {
		var sc struct {
			DenseLen *int `json:"dense_len"`
		}
		if err := json.Unmarshal(c.SparseConfig, &sc); err != nil {
			return llama.Options{}, fmt.Errorf("%s: sparse_config: %w", where, err)
		}
		if sc.DenseLen == nil || *sc.DenseLen <= 0 {
			return llama.Options{}, errs.Unsupportedf("%s: sparse_config without a positive dense_len; tputool runs InfLLM v2's dense attention only, up to dense_len", where)
		}
		s.MaxPositions = min(s.MaxPositions, *sc.DenseLen)
	}
	return o, nil
}

// New builds a MiniCPMForCausalLM from its config.json.
func New(cfg *config.File) (lm.Model, error) {
	o, err := Resolve(cfg)
	if err != nil {
		return nil, err
	}
	return llama.NewModel(o), nil
}
