package ernie

// ERNIE 4.5 VL (Ernie4_5_VLMoeForConditionalGeneration: ERNIE-4.5-VL-28B-A3B
// and ERNIE-4.5-VL-424B-A47B, Thinking included) as its text model, text in
// and text out, following transformers' models/ernie4_5_vl_moe and its
// checkpoint conversion (conversion_mapping.py), which reads the Hub's
// tensors as they are stored.
//
// The language model is ERNIE 4.5 MoE's with modality-isolated experts:
// each sparse layer holds text experts and vision experts of their own
// widths (moe_intermediate_size [text, vision]), each set with its own
// router, and the shared experts. A text token only ever reaches the text
// experts, so the model reads the text half: the router mlp.gate.weight,
// stored [hidden, experts] (transposed), the first row of
// mlp.moe_statics.e_score_correction_bias [2, experts], and experts 0 to
// moe_num_experts-1 of mlp.experts (the vision experts follow them). Its
// 3D rotary embedding (mrope_section, the hw dims pre-rotated) gives a
// text token, whose three position ids are equal, the plain rotary on
// adjacent pairs, which is ERNIE 4.5's. The vision tower
// (vision_model.*), the resampler (resampler_model.*), the vision router
// (mlp.gate.weight_1), the vision half of the correction bias and the
// vision experts are skipped; images and videos are not supported.
//
// Both configs are read: the releases' (the text fields at the top,
// moe_num_experts, moe_intermediate_size and the layer indices as lists)
// and transformers' (text_config, mlp_layer_types).

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/loader/safetensors"
	"github.com/tputool/tputool/pipeline/deepseek"
	"github.com/tputool/tputool/pipeline/lm"
)

// VLArch is ERNIE 4.5 VL's architecture.
const VLArch = "Ernie4_5_VLMoeForConditionalGeneration"

func init() {
	lm.Register(VLArch, NewVL)
	lm.Register("Ernie4_5_VL_MoeForConditionalGeneration", NewVL) // transformers' deprecated name
}

// vlLayout reads the text half of each sparse block: the correction bias
// as the first piece of moe_statics (SplitWeight), the experts under
// Qwen's names.
var vlLayout = deepseek.Layout{Block: "mlp", Bias: "moe_statics.text_bias", BiasRows: true, Experts: lm.QwenExperts}

// ResolveVL reads an ERNIE 4.5 VL config.json into pipeline/deepseek's
// options (the text experts'), by resolving the Ernie4_5_MoeForCausalLM
// config of its text fields.
func ResolveVL(cfg *config.File) (deepseek.Options, error) {
	where := lm.ConfigName(cfg)
	src := cfg.Raw
	if cfg.Text != nil {
		src = cfg.Text.Raw
	}
	raw := make(map[string]json.RawMessage, len(src))
	for k, v := range src {
		raw[k] = v
	}
	// The text modality's entry of each per-modality list; the layer
	// indices' lists are kept to place the sparse layers below.
	lists := map[string][]int{}
	for _, k := range []string{"moe_num_experts", "moe_intermediate_size", "moe_layer_start_index", "moe_layer_end_index"} {
		v, ok := raw[k]
		if !ok || string(v) == "null" || v[0] != '[' {
			continue
		}
		var list []int
		if err := json.Unmarshal(v, &list); err != nil || len(list) == 0 {
			return deepseek.Options{}, fmt.Errorf("%s: %s: expected an integer or a non-empty list of integers", where, k)
		}
		lists[k] = list
		raw[k] = json.RawMessage(strconv.Itoa(list[0]))
	}
	// A release config without moe_num_shared_experts has none
	// (transformers' converter, vLLM); Ernie4_5_VLMoeTextConfig's default
	// is 2.
	if _, ok := raw["moe_num_shared_experts"]; !ok && cfg.Text == nil {
		raw["moe_num_shared_experts"] = json.RawMessage("0")
	}
	var types []string
	if v, ok := raw["mlp_layer_types"]; ok && string(v) != "null" {
		if err := json.Unmarshal(v, &types); err != nil {
			return deepseek.Options{}, fmt.Errorf("%s: mlp_layer_types: expected a list of \"dense\" and \"sparse\": %w", where, err)
		}
	}
	// The wrapper's tie_word_embeddings decides (Ernie4_5_VLMoeConfig's
	// default true), as do its token ids where the text config has none.
	for _, k := range []string{"tie_word_embeddings", "bos_token_id", "eos_token_id", "pad_token_id"} {
		if v, ok := cfg.Raw[k]; ok && (k == "tie_word_embeddings" || raw[k] == nil) {
			raw[k] = v
		}
	}
	if _, ok := raw["tie_word_embeddings"]; !ok {
		raw["tie_word_embeddings"] = json.RawMessage("true")
	}
	raw["architectures"] = json.RawMessage(`["Ernie4_5_MoeForCausalLM"]`)
	raw["model_type"] = json.RawMessage(`"ernie4_5_moe"`)
	js, err := json.Marshal(raw)
	if err != nil {
		return deepseek.Options{}, err
	}
	text, err := config.ParseModel(js)
	if err != nil {
		return deepseek.Options{}, fmt.Errorf("%s: %w", where, err)
	}
	text.Path = where
	o, err := Resolve(text)
	if err != nil {
		return deepseek.Options{}, err
	}
	o.Spec.Architecture, o.Spec.ModelType = VLArch, "ernie4_5_vl_moe"
	// transformers turns the rotary in float32, its tables float32 too
	// (Ernie4_5_VLMoeTextRotaryEmbedding returns them uncast).
	o.RopeF32, o.RopeTablesF32 = true, true
	if starts, ends := lists["moe_layer_start_index"], lists["moe_layer_end_index"]; starts != nil || ends != nil {
		// Per-modality ranges: layer i is sparse where (i+1) is a multiple
		// of moe_layer_interval and min(starts) <= i <= max(ends), with no
		// -1 read as the last layer (transformers' converter, vLLM,
		// SGLang). They disagree where the text range alone covers fewer
		// layers than that union (vLLM gives text tokens a dense MLP
		// there): refused.
		if starts == nil {
			starts = []int{lm.Or(jsonInt(raw["moe_layer_start_index"]), defaultStart)}
		}
		if ends == nil {
			ends = []int{lm.Or(jsonInt(raw["moe_layer_end_index"]), -1)}
		}
		every := lm.Or(jsonInt(raw["moe_layer_interval"]), defaultInterval)
		lo, hi := slices.Min(starts), slices.Max(ends)
		last := o.Spec.Layers - 1
		if max(starts[0], 0) != max(lo, 0) || min(ends[0], last) != min(hi, last) {
			return deepseek.Options{}, errs.Unsupportedf("%s: the text experts' layers (moe_layer_start_index %d to moe_layer_end_index %d) are not all the sparse layers (%d to %d); implementations differ on such a model", where, starts[0], ends[0], lo, hi)
		}
		for i := range o.Sparse {
			o.Sparse[i] = (i+1)%every == 0 && i >= lo && i <= hi
		}
	}
	if types != nil {
		if len(types) != o.Spec.Layers {
			return deepseek.Options{}, fmt.Errorf("%s: mlp_layer_types has %d entries for %d layers", where, len(types), o.Spec.Layers)
		}
		for i, t := range types {
			switch t {
			case "dense", "sparse":
				o.Sparse[i] = t == "sparse"
			default:
				return deepseek.Options{}, fmt.Errorf("%s: mlp_layer_types[%d] is %q, want \"dense\" or \"sparse\"", where, i, t)
			}
		}
	}
	return o, nil
}

// jsonInt is raw's integer, or nil.
func jsonInt(raw json.RawMessage) *int {
	var v *int
	if json.Unmarshal(raw, &v) != nil {
		return nil
	}
	return v
}

// NewVL builds the text model from an ERNIE 4.5 VL config.json.
func NewVL(cfg *config.File) (lm.Model, error) {
	o, err := ResolveVL(cfg)
	if err != nil {
		return nil, err
	}
	return &VLModel{Model{deepseek.NewModelIn(o, vlLayout)}}, nil
}

// VLModel is ERNIE 4.5 VL's text model: ERNIE 4.5 MoE's decoder over the
// text half of each sparse block. It implements lm.Routed, lm.Skipper,
// lm.Splitter and lm.StoredLayout.
type VLModel struct{ Model }

// LayerWeights implements lm.Model: the text router is stored transposed.
func (m *VLModel) LayerWeights(i int) []lm.WeightSpec {
	ws := m.Model.LayerWeights(i)
	gate := fmt.Sprintf("model.layers.%d.mlp.gate.weight", i)
	for j := range ws {
		if ws[j].Name == gate {
			ws[j].Transposed = true
		}
	}
	return ws
}

// StoredWeights implements lm.StoredLayout: the text model's tensors as
// the Hub stores them, for tools that write checkpoints in that layout:
// moe_statics' two rows whole, and the vision router beside the text one
// (the vision experts, tower and resampler, which the text model skips,
// left out).
func (m *VLModel) StoredWeights() []lm.WeightSpec {
	var out []lm.WeightSpec
	e, hidden := m.Options().Experts, m.Spec().Hidden
	for _, w := range lm.Weights(m) {
		if p, ok := strings.CutSuffix(w.Name, "moe_statics.text_bias"); ok {
			out = append(out,
				lm.WeightSpec{Name: p + "moe_statics.e_score_correction_bias", Shape: []int{2, e}, F32: true},
				lm.WeightSpec{Name: p + "gate.weight_1", Shape: []int{e, hidden}, Transposed: true})
			continue
		}
		out = append(out, w)
	}
	return out
}

// statics matches a sparse block's correction biases, one row a modality.
var statics = regexp.MustCompile(`^(model\.layers\.\d+\.mlp\.moe_statics\.)e_score_correction_bias$`)

// SplitWeight implements lm.Splitter: moe_statics' [2, experts] biases as
// the text row (moe_statics.text_bias) and the vision row
// (moe_statics.vision_bias, skipped).
func (m *VLModel) SplitWeight(name string, shape []int) ([]safetensors.Piece, error) {
	g := statics.FindStringSubmatch(name)
	if g == nil {
		return nil, nil
	}
	e := m.Options().Experts
	if len(shape) != 2 || shape[0] != 2 || shape[1] != e {
		return nil, fmt.Errorf("tensor %s: shape %v, want [2, %d] (the text and vision experts' correction biases)", name, shape, e)
	}
	return []safetensors.Piece{{Name: g[1] + "text_bias", Shape: []int{1, e}}, {Name: g[1] + "vision_bias", Shape: []int{1, e}}}, nil
}

// expert matches a routed expert's tensors, capturing its index.
var expert = regexp.MustCompile(`^model\.layers\.\d+\.mlp\.experts\.(\d+)\.`)

// vision matches the vision modality's tensors.
var vision = regexp.MustCompile(`(^|\.)(vision_model|resampler_model)\.|\.mlp\.gate\.weight_1$|\.moe_statics\.vision_bias$`)

// SkipWeight implements lm.Skipper: the vision tower, the resampler, the
// vision router, bias and experts, and ERNIE 4.5's MTP tensors.
func (m *VLModel) SkipWeight(name string) (string, bool) {
	if vision.MatchString(name) {
		return "vision tower, resampler and vision experts: text-only model", true
	}
	if g := expert.FindStringSubmatch(name); g != nil {
		if e, err := strconv.Atoi(g[1]); err == nil && e >= m.Options().Experts {
			return "vision tower, resampler and vision experts: text-only model", true
		}
	}
	return m.Model.SkipWeight(name)
}

var (
	_ lm.Routed       = (*VLModel)(nil)
	_ lm.Skipper      = (*VLModel)(nil)
	_ lm.Splitter     = (*VLModel)(nil)
	_ lm.StoredLayout = (*VLModel)(nil)
)
