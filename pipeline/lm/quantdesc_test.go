package lm

import (
	"testing"

	"github.com/tputool/tputool/loader/config"
)

// DescribeQuantization names each method as the loader reads it, with its
// per-module rules, and says why a config it refuses is not read.
func TestDescribeQuantization(t *testing.T) {
	for q, want := range map[string]string{
		``: ``,
		`{"quant_method":"gptq","bits":4,"group_size":128,"dynamic":{"-:.*q_proj":{},"+:.*down_proj":{"bits":8}}}`: `gptq, 4 bits, groups of 128, 2 dynamic rules`,
		`{"quant_method":"awq","bits":4,"group_size":-1,"version":"gemm"}`:                                         `awq, 4 bits, one group a row`,
		`{"quant_method":"fp8","weight_block_size":[128,128]}`:                                                     `fp8, blocks of 128×128`,
		`{"quant_method":"fp8","weight_block_size":null,"activation_scheme":"static"}`:                             `fp8, a scale a tensor; static activation scales not applied (activations stay float)`,
		`{"quant_method":"compressed-tensors","format":"mixed-precision","ignore":["lm_head"],"config_groups":{` +
			`"a":{"format":"pack-quantized","targets":["re:.*proj"],"weights":{"num_bits":4,"type":"int","symmetric":true,"strategy":"group","group_size":32}},` +
			`"b":{"format":"float-quantized","targets":["Linear"],"weights":{"num_bits":8,"type":"float","symmetric":true,"strategy":"channel"}}}}`: `compressed-tensors: pack-quantized 4-bit by group of 32; float-quantized 8-bit by channel; 1 ignored`,
		`{"quant_method":"gptq","bits":3}`: `gptq (not read: config.json quantization_config: GPTQ with 3 bits: tputool reads 4 and 8)`,
		`{"quant_method":"bitsandbytes"}`:  `bitsandbytes`,
	} {
		raw := `{"architectures":["LlamaForCausalLM"]}`
		if q != "" {
			raw = `{"architectures":["LlamaForCausalLM"],"quantization_config":` + q + `}`
		}
		cfg, err := config.ParseModel([]byte(raw))
		if err != nil {
			t.Fatal(err)
		}
		if got := DescribeQuantization(cfg); got != want {
			t.Errorf("%s:\n got %q\nwant %q", q, got, want)
		}
	}
}
