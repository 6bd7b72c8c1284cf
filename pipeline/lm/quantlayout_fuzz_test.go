package lm

import (
	"testing"

	"github.com/tputool/tputool/loader/config"
)

// FuzzQuantLayout feeds hostile quantization_configs (GPTQ dynamic rules,
// compressed-tensors groups, targets and ignores) to the parsers the
// loader and inspect share: an error or a layout, never a panic, and a
// layout answers for any module name.
func FuzzQuantLayout(f *testing.F) {
	for _, seed := range []string{
		`{"quant_method":"gptq","bits":4,"group_size":128,"dynamic":{"-:model\\.layers\\.0\\..*":{},"+:.*down_proj":{"bits":8,"group_size":32}}}`,
		`{"quant_method":"gptq","bits":4,"group_size":128,"dynamic":{"(?!x)":{}}}`,
		`{"quant_method":"gptq","bits":4,"dynamic":[1,2]}`,
		`{"quant_method":"compressed-tensors","format":"mixed-precision","ignore":["lm_head","re:.*gate$"],"config_groups":{"g0":{"format":"pack-quantized","targets":["re:.*q_proj"],"weights":{"num_bits":4,"type":"int","symmetric":true,"strategy":"group","group_size":32}},"g1":{"format":"nvfp4-pack-quantized","targets":["Linear"],"weights":{"num_bits":4,"type":"float","symmetric":true,"strategy":"tensor_group","group_size":16}}}}`,
		`{"quant_method":"compressed-tensors","format":"pack-quantized","config_groups":{"g":{"targets":"Linear"}}}`,
		`{"quant_method":"compressed-tensors","config_groups":[]}`,
		`{"quant_method":"awq","bits":4,"group_size":128,"version":"gemm"}`,
	} {
		f.Add(seed, "model.layers.0.mlp.down_proj")
	}
	f.Fuzz(func(t *testing.T, q, module string) {
		cfg, err := config.ParseModel([]byte(`{"architectures":["LlamaForCausalLM"],"quantization_config":` + q + `}`))
		if err != nil {
			return
		}
		layout, err := ReadQuantLayout(cfg)
		if err != nil || layout == nil {
			return
		}
		layout.Packing(module)
	})
}
