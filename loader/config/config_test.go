package config

import (
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestReadModelStories(t *testing.T) {
	m, err := ReadModel("../../testdata/stories260K-hf/config.json")
	require.NoError(t, err)
	assert.Equal(t, "LlamaForCausalLM", m.Architecture())
	assert.Equal(t, "llama", m.ModelType)
	var c struct {
		Hidden int `json:"hidden_size"`
		Layers int `json:"num_hidden_layers"`
	}
	require.NoError(t, m.Decode(&c))
	assert.Equal(t, 64, c.Hidden)
	assert.Equal(t, 5, c.Layers)
	g, err := ReadGeneration("../../testdata/stories260K-hf/generation_config.json")
	require.NoError(t, err)
	assert.NotEmpty(t, g.EOSTokenID)
}

func TestNestedTextConfigAndUnknownFields(t *testing.T) {
	m, err := ParseModel([]byte(`{"architectures":["Qwen3_5ForConditionalGeneration"],"model_type":"qwen3_5",
		"some_future_field":{"x":1},
		"text_config":{"model_type":"qwen3_5_text","hidden_size":32,"eos_token_id":[1,2],"dtype":"bfloat16"}}`))
	require.NoError(t, err)
	require.NotNil(t, m.Text)
	assert.Equal(t, "qwen3_5_text", m.Text.ModelType)
	assert.True(t, m.Has("some_future_field"))
	assert.Equal(t, IDList{1, 2}, m.ModelEOS())
	assert.Equal(t, "bfloat16", m.WeightDType())
	_, err = ParseModel([]byte(`[1,2]`))
	assert.Error(t, err)
}

func TestIDList(t *testing.T) {
	var g Generation
	require.NoError(t, jsonUnmarshal(`{"eos_token_id":[1,106],"bos_token_id":2,"pad_token_id":null}`, &g))
	assert.Equal(t, IDList{1, 106}, g.EOSTokenID)
	assert.Equal(t, IDList{2}, g.BOSTokenID)
	assert.Nil(t, g.PadTokenID)
	assert.Error(t, jsonUnmarshal(`{"eos_token_id":"x"}`, &g))
}

func TestModelIndex(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "model_index.json")
	require.NoError(t, os.WriteFile(p, []byte(`{"_class_name":"StableDiffusionPipeline","_diffusers_version":"0.30.0",
		"unet":["diffusers","UNet2DConditionModel"],"vae":["diffusers","AutoencoderKL"],
		"safety_checker":[null,null],"requires_safety_checker":false,
		"text_encoder":["transformers","CLIPTextModel"]}`), 0o644))
	mi, err := ReadModelIndex(p)
	require.NoError(t, err)
	assert.Equal(t, "StableDiffusionPipeline", mi.ClassName)
	require.Len(t, mi.Components, 3)
	assert.Equal(t, Component{Name: "text_encoder", Library: "transformers", Class: "CLIPTextModel"}, mi.Components[0])
	_, ok := mi.Component("safety_checker")
	assert.False(t, ok)

	_, err = ParseModelIndex([]byte(`{"_class_name":"X","../evil":["diffusers","UNet2DConditionModel"]}`))
	assert.ErrorContains(t, err, "not a plain folder name")
	_, err = ParseModelIndex([]byte(`{"_class_name":"X",".":["diffusers","UNet2DConditionModel"]}`))
	assert.ErrorContains(t, err, "not a plain folder name")
	_, err = ParseModelIndex([]byte(`{"unet":["diffusers","UNet2DConditionModel"]}`))
	assert.ErrorContains(t, err, "_class_name")
}

func TestConfigSizeLimit(t *testing.T) {
	p := filepath.Join(t.TempDir(), "config.json")
	f, err := os.Create(p)
	require.NoError(t, err)
	require.NoError(t, f.Truncate(MaxConfigSize+1))
	f.Close()
	_, err = ReadModel(p)
	assert.ErrorContains(t, err, "over the")
}

// TestPythonJSON: the non-finite numbers Python's json module writes load
// (time_step_limit [0.0, Infinity]), strings holding the words are kept,
// and valid JSON is returned as it is.
func TestPythonJSON(t *testing.T) {
	m, err := ParseModel([]byte(`{"architectures": ["X"], "time_step_limit": [0.0, Infinity], "lo": -Infinity, "nan": NaN, "s": "NaN \"Infinity\""}`))
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		Limit []float64 `json:"time_step_limit"`
		Lo    float64   `json:"lo"`
		NaN   *float64  `json:"nan"`
		S     string    `json:"s"`
	}
	if err := m.Decode(&c); err != nil {
		t.Fatal(err)
	}
	if len(c.Limit) != 2 || c.Limit[1] != math.MaxFloat64 || c.Lo != -math.MaxFloat64 || c.NaN != nil || c.S != `NaN "Infinity"` {
		t.Errorf("decoded %+v", c)
	}
	valid := []byte(`{"a": "Infinity"}`)
	if got := PythonJSON(valid); &got[0] != &valid[0] {
		t.Error("valid JSON was copied")
	}
}

func TestWithout(t *testing.T) {
	m, err := ParseModel([]byte(`{"architectures": ["GPT2LMHeadModel"], "rope_theta": 5, "rope_scaling": {"rope_type": "yarn"}, "n_embd": 8}`))
	if err != nil {
		t.Fatal(err)
	}
	w := m.Without(RopeFields...)
	if w.Has("rope_theta") || w.Has("rope_scaling") || !w.Has("n_embd") || w.Architecture() != "GPT2LMHeadModel" {
		t.Errorf("without the rope fields: %v", w.Raw)
	}
	if !m.Has("rope_theta") || !m.Has("rope_scaling") {
		t.Errorf("the original lost its fields: %v", m.Raw)
	}
}
