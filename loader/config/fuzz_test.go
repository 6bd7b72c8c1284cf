package config

import (
	"testing"
)

// FuzzParseModel: arbitrary config.json bytes never panic, and an accepted
// config can always be decoded into a struct of typical fields or yields an
// error.
func FuzzParseModel(f *testing.F) {
	f.Add([]byte(`{"architectures":["LlamaForCausalLM"],"model_type":"llama","hidden_size":64}`))
	f.Add([]byte(`{"text_config":{"text_config":{"model_type":"x"}},"eos_token_id":[1,2]}`))
	f.Add([]byte(`{"text_config":null}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := ParseModel(b)
		if err != nil {
			return
		}
		_ = m.Architecture()
		_ = m.WeightDType()
		_ = m.ModelEOS()
		var c struct {
			Hidden int     `json:"hidden_size"`
			Layers int     `json:"num_hidden_layers"`
			Theta  float64 `json:"rope_theta"`
		}
		_ = m.Decode(&c)
	})
}

// FuzzParseModelIndex: no accepted model_index.json names a component that
// is not a plain folder name.
func FuzzParseModelIndex(f *testing.F) {
	f.Add([]byte(`{"_class_name":"StableDiffusionPipeline","unet":["diffusers","UNet2DConditionModel"],"safety_checker":[null,null]}`))
	f.Add([]byte(`{"_class_name":"X","../x":["diffusers","Y"]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		mi, err := ParseModelIndex(b)
		if err != nil {
			return
		}
		for _, c := range mi.Components {
			if c.Name == "" || c.Name == "." || c.Name == ".." {
				t.Fatalf("accepted component %q", c.Name)
			}
			for _, r := range c.Name {
				if r == '/' || r == '\\' {
					t.Fatalf("accepted component %q", c.Name)
				}
			}
		}
	})
}
