package llama_test

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/tputool/tputool/compile"
	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/loader/safetensors"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
)

// ctFormat is one compressed-tensors scheme the test writes.
type ctFormat struct {
	name   string
	format string // pack-quantized, naive-quantized (int8), float-quantized (fp8): the storage
	// cfgFormat, when set, is the format the config writes instead
	// (int-quantized; naive-quantized over fp8 weights).
	cfgFormat string
	bits      int
	sym       bool
	strategy  string // tensor, channel, group, block
	gIdx      bool
	reversed  bool // mutation: values packed in reversed order within words
	fbgemm    bool // quant_method fbgemm_fp8 (fp8 by channel), with input_scale_ub
	inScale   bool // W8A8: static activation scales beside the weights
	nanScale  bool // nvfp4: layer 0's q_proj has one scale byte NaN (0x7f)
	// kvScales writes each layer's self_attn.k_scale, v_scale and
	// q_scale (compressed-tensors' KV-cache and attention scales);
	// kvScheme declares kv_cache_scheme in the config.
	kvScales, kvScheme bool
	// For the held tests (packedheld_test.go): the columns a group (16
	// if 0), the model's hidden and intermediate sizes (32 and 48 if 0),
	// and the plain checkpoint in f32 (else bf16).
	group, hidden, inter int
	f32Ref               bool
	// config, when set, is the quantization_config written (several
	// groups, targets, ignore), and module says what it makes of each
	// Linear, by its prefix: the scheme it is stored in (format, bits,
	// sym and strategy, the rest as f's), or skip for plain weights.
	config map[string]any
	module func(prefix string, f ctFormat) (scheme ctFormat, skip bool)
}

// ctCheckpoints writes a tiny Llama twice: its projections in f's
// compressed-tensors scheme, and in bf16 with those projections
// dequantised by the test (scale · (code − zero point)).
func ctCheckpoints(t *testing.T, f ctFormat) (ctDir, plainDir string) {
	t.Helper()
	hidden, inter, group := 32, 48, 16
	if f.hidden > 0 {
		hidden, inter = f.hidden, f.inter
	}
	if f.group > 0 {
		group = f.group
	}
	tiny := lmckpt.LlamaShape(hidden, 2, 4, inter, 64)
	tiny.Seed = 10
	block := [2]int{16, 8}
	next := lcg(4242)
	var plain, ct []safetensors.Tensor
	for _, w := range tiny.Tensors() {
		n := 1
		for _, d := range w.Shape {
			n *= d
		}
		prefix := strings.TrimSuffix(w.Name, ".weight")
		sf, skip := f, false
		if f.module != nil && w.Kind == "linear" {
			sf, skip = f.module(prefix, f)
		}
		if f.kvScales && strings.HasSuffix(prefix, "self_attn.q_proj") {
			attn := strings.TrimSuffix(prefix, ".q_proj")
			for _, s := range []string{".k_scale", ".v_scale", ".q_scale"} {
				addF32(t, &ct, attn+s, safetensors.F32, []int{1}, []float32{0.25})
			}
		}
		if len(w.Shape) != 2 || w.Kind != "linear" || strings.Contains(w.Name, "lm_head") || skip {
			v := make([]float32, n)
			for i := range v {
				v[i] = 1
				if w.Kind == "embed" || w.Kind == "linear" {
					v[i] = float32(next(2001)-1000) / 4000
				}
			}
			addF32(t, &plain, w.Name, safetensors.F32, w.Shape, v)
			addF32(t, &ct, w.Name, safetensors.F32, w.Shape, v)
			continue
		}
		out, in := w.Shape[0], w.Shape[1]
		var ss []int
		var scaleAt func(o, i int) int
		gOf := func(i int) int { return i / group }
		if f.gIdx {
			gOf = func(i int) int { return (i*3 + 1) % (in / group) }
		}
		switch sf.strategy {
		case "tensor":
			ss, scaleAt = []int{1}, func(o, i int) int { return 0 }
		case "channel":
			ss, scaleAt = []int{out, 1}, func(o, i int) int { return o }
		case "block":
			ss = []int{(out + block[0] - 1) / block[0], (in + block[1] - 1) / block[1]}
			scaleAt = func(o, i int) int { return (o/block[0])*ss[1] + i/block[1] }
		default:
			ss, scaleAt = []int{out, in / group}, func(o, i int) int { return o*(in/group) + gOf(i) }
		}
		ns := 1
		for _, d := range ss {
			ns *= d
		}
		sc := make([]float32, ns)
		for i := range sc {
			sc[i] = float32(1+next(7)) / 64
		}
		// Scales round to bf16 in the checkpoint: dequantise with those.
		sst, err := safetensors.Float32Tensor(prefix+".weight_scale", safetensors.BF16, ss, sc)
		if err != nil {
			t.Fatal(err)
		}
		safetensors.DecodeFloat32(sc, safetensors.BF16, sst.Data)
		nvfp4 := sf.format == "nvfp4-pack-quantized"
		if nvfp4 {
			// E4M3 scales (positive, normal) over a global scale; the
			// effective scale is their quotient in f32, as
			// compressed-tensors divides before it multiplies.
			const global = float32(2.75)
			sb := make([]byte, ns)
			for i := range sb {
				sb[i] = byte(0x28 + next(0x28))
				sc[i] = float32(fp8Value(sb[i])) / global
			}
			if f.nanScale && prefix == "model.layers.0.self_attn.q_proj" {
				sb[0], sc[0] = 0x7f, float32(math.NaN())
			}
			sst = safetensors.Tensor{Name: prefix + ".weight_scale", DType: safetensors.F8E4M3, Shape: ss, Data: sb}
			addF32(t, &ct, prefix+".weight_global_scale", safetensors.F32, []int{1}, []float32{global})
		}
		half := 1 << (sf.bits - 1)
		codes := make([]float32, out*in)
		zps := make([]int, ns)
		if !sf.sym {
			for i := range zps {
				zps[i] = next(2*half) - half
			}
		}
		deq := make([]float32, out*in)
		var fp8 []byte
		for o := 0; o < out; o++ {
			for i := 0; i < in; i++ {
				var c float32
				if nvfp4 {
					b := next(16)
					c = []float32{0, 0.5, 1, 1.5, 2, 3, 4, 6}[b&7]
					if b&8 != 0 {
						c = -c
					}
					fp8 = append(fp8, byte(b)) // one code a byte, packed below
				} else if sf.format == "float-quantized" {
					b := byte(next(256))
					if b&0x7f == 0x7f {
						b = 0x3f
					}
					fp8 = append(fp8, b)
					c = float32(fp8Value(b))
				} else {
					c = float32(next(2*half) - half)
				}
				codes[o*in+i] = c
				deq[o*in+i] = sc[scaleAt(o, i)] * (c - float32(zps[scaleAt(o, i)]))
			}
		}
		ref := safetensors.BF16
		if f.f32Ref {
			ref = safetensors.F32
		}
		addF32(t, &plain, w.Name, ref, w.Shape, deq)
		switch sf.format {
		case "pack-quantized":
			per := 32 / sf.bits
			words := make([]uint32, out*(in/per))
			for o := 0; o < out; o++ {
				for i := 0; i < in; i++ {
					k := i % per
					if f.reversed {
						k = per - 1 - k
					}
					words[o*(in/per)+i/per] |= uint32(int(codes[o*in+i])+half) << (sf.bits * k)
				}
			}
			ct = append(ct, i32Tensor(prefix+".weight_packed", []int{out, in / per}, words),
				i32Tensor(prefix+".weight_shape", []int{2}, []uint32{uint32(out), uint32(in)}))
			if !sf.sym {
				cols := ss[len(ss)-1]
				zw := make([]uint32, (out/per)*cols)
				for o := 0; o < out; o++ {
					for c := 0; c < cols; c++ {
						zw[(o/per)*cols+c] |= uint32(zps[o*cols+c]+half) << (sf.bits * (o % per))
					}
				}
				ct = append(ct, i32Tensor(prefix+".weight_zero_point", []int{out / per, cols}, zw))
			}
		case "nvfp4-pack-quantized":
			// Two codes a byte, column 2k in the low nibble.
			q := make([]byte, out*in/2)
			for k := range q {
				q[k] = fp8[2*k] | fp8[2*k+1]<<4
				if sf.reversed {
					q[k] = fp8[2*k]<<4 | fp8[2*k+1]
				}
			}
			ct = append(ct, safetensors.Tensor{Name: prefix + ".weight_packed", DType: safetensors.U8, Shape: []int{out, in / 2}, Data: q})
		case "naive-quantized":
			q := make([]byte, out*in)
			for i, c := range codes {
				q[i] = byte(int8(c))
			}
			ct = append(ct, safetensors.Tensor{Name: w.Name, DType: safetensors.I8, Shape: w.Shape, Data: q})
			if !sf.sym { // zero points as int8, one a scale
				zb := make([]byte, ns)
				for i, z := range zps {
					zb[i] = byte(int8(z))
				}
				ct = append(ct, safetensors.Tensor{Name: prefix + ".weight_zero_point", DType: safetensors.I8, Shape: ss, Data: zb})
			}
		default:
			ct = append(ct, safetensors.Tensor{Name: w.Name, DType: safetensors.F8E4M3, Shape: w.Shape, Data: fp8})
		}
		ct = append(ct, sst)
		if f.inScale && nvfp4 {
			addF32(t, &ct, prefix+".input_global_scale", safetensors.F32, []int{1}, []float32{120})
		} else if f.inScale {
			addF32(t, &ct, prefix+".input_scale", safetensors.F32, []int{1}, []float32{0.5})
		}
		if f.fbgemm {
			addF32(t, &ct, prefix+".input_scale_ub", safetensors.F32, []int{1}, []float32{1200})
		}
		if f.gIdx {
			gi := make([]uint32, in)
			for i := range gi {
				gi[i] = uint32(gOf(i))
			}
			ct = append(ct, i32Tensor(prefix+".weight_g_idx", []int{in}, gi))
		}
	}
	cfg := tiny.ConfigJSON()
	plainDir = t.TempDir()
	if err := lmckpt.WriteCheckpoint(plainDir, cfg, plain); err != nil {
		t.Fatal(err)
	}
	typ := "int"
	if f.format == "float-quantized" || f.format == "nvfp4-pack-quantized" {
		typ = "float"
	}
	weights := map[string]any{"num_bits": f.bits, "type": typ, "symmetric": f.sym, "strategy": f.strategy, "dynamic": false}
	if f.strategy == "group" {
		weights["group_size"] = group
	}
	if f.format == "nvfp4-pack-quantized" {
		weights["strategy"], weights["group_size"] = "tensor_group", group
	}
	if f.strategy == "block" {
		weights["block_structure"] = block[:]
	}
	format := f.format
	if f.cfgFormat != "" {
		format = f.cfgFormat
	}
	qc := map[string]any{"quant_method": "compressed-tensors", "format": format, "quantization_status": "compressed",
		"config_groups": map[string]any{"group_0": map[string]any{"targets": []string{"Linear"}, "weights": weights}}, "ignore": []string{"lm_head"}}
	if f.config != nil {
		qc = f.config
	}
	if f.kvScheme {
		qc["kv_cache_scheme"] = map[string]any{"num_bits": 8, "type": "float", "symmetric": true, "strategy": "tensor", "dynamic": false}
	}
	cfg["quantization_config"] = qc
	if f.fbgemm {
		cfg["quantization_config"] = map[string]any{"quant_method": "fbgemm_fp8", "activation_scale_ub": 1200, "modules_to_not_convert": []string{"lm_head"}}
	}
	ctDir = t.TempDir()
	if err := lmckpt.WriteCheckpoint(ctDir, cfg, ct); err != nil {
		t.Fatal(err)
	}
	return ctDir, plainDir
}

// ctScheme is a config group's symmetric weights scheme (groups of 16
// under strategy group).
func ctScheme(bits int, typ, strategy string) map[string]any {
	w := map[string]any{"num_bits": bits, "type": typ, "symmetric": true, "strategy": strategy, "dynamic": false}
	if strategy == "group" {
		w["group_size"] = 16
	}
	return w
}

// mixedConfig is a "mixed-precision" compressed-tensors config of three
// groups: 4-bit q, k and v projections by groups of 16 (a "re:" target),
// fp8 by channel for every other Linear, and 8-bit by channel for layer
// 0's up_proj, named exactly, which wins over the class target of the
// group before it. Layer 1's down_proj is ignored by pattern, lm_head by
// name.
func mixedConfig() map[string]any {
	return map[string]any{"quant_method": "compressed-tensors", "format": "mixed-precision", "quantization_status": "compressed",
		"config_groups": map[string]any{
			"group_0": map[string]any{"format": "pack-quantized", "targets": []string{`re:.*self_attn\.(q|k|v)_proj$`}, "weights": ctScheme(4, "int", "group")},
			"group_1": map[string]any{"format": "float-quantized", "targets": []string{"Linear"}, "weights": ctScheme(8, "float", "channel")},
			"group_2": map[string]any{"format": "pack-quantized", "targets": []string{"model.layers.0.mlp.up_proj"}, "weights": ctScheme(8, "int", "channel")},
		},
		"ignore": []string{"lm_head", `re:.*layers\.1\.mlp\.down_proj$`}}
}

// mixedModules is what mixedConfig makes of each Linear.
func mixedModules(prefix string, f ctFormat) (ctFormat, bool) {
	f.sym = true
	switch {
	case prefix == "model.layers.1.mlp.down_proj":
		return f, true
	case strings.HasSuffix(prefix, "q_proj"), strings.HasSuffix(prefix, "k_proj"), strings.HasSuffix(prefix, "v_proj"):
		f.format, f.bits, f.strategy = "pack-quantized", 4, "group"
	case prefix == "model.layers.0.mlp.up_proj":
		f.format, f.bits, f.strategy = "pack-quantized", 8, "channel"
	default:
		f.format, f.bits, f.strategy = "float-quantized", 8, "channel"
	}
	return f, false
}

// orderConfig has two groups whose patterns both match every down_proj:
// the first written names it the longer way, 8-bit by channel; the
// second, 4-bit by groups of 16, is first in compressed-tensors' order
// ("re:.*down_proj" sorts before "re:.*mlp\.down_proj$") and is the one
// the down_proj weights are stored in. A third group takes every other
// Linear in fp8 by channel.
func orderConfig() map[string]any {
	return map[string]any{"quant_method": "compressed-tensors", "format": "mixed-precision", "quantization_status": "compressed",
		"config_groups": map[string]any{
			"group_0": map[string]any{"format": "pack-quantized", "targets": []string{`re:.*mlp\.down_proj$`}, "weights": ctScheme(8, "int", "channel")},
			"group_1": map[string]any{"format": "pack-quantized", "targets": []string{`re:.*down_proj`}, "weights": ctScheme(4, "int", "group")},
			"group_2": map[string]any{"format": "float-quantized", "targets": []string{"Linear"}, "weights": ctScheme(8, "float", "channel")},
		},
		"ignore": []string{"lm_head"}}
}

// orderModules is what orderConfig makes of each Linear.
func orderModules(prefix string, f ctFormat) (ctFormat, bool) {
	f.sym = true
	f.format, f.bits, f.strategy = "float-quantized", 8, "channel"
	if strings.HasSuffix(prefix, "down_proj") {
		f.format, f.bits, f.strategy = "pack-quantized", 4, "group"
	}
	return f, false
}

// TestCompressedTensors: compressed-tensors checkpoints (pack-quantized
// 4 and 8 bits, symmetric and with zero points, by group with activation
// order and by channel; naive int8; fp8 per tensor and by block; nvfp4
// with W4A4's activation global scales beside it; int-quantized, the
// W8A8 releases' name for naive int8; fp8 and int8 with a
// kv_cache_scheme's KV-cache and attention scales beside them;
// naive-quantized fp8; three config groups of mixed precision with
// targets and ignores by name and pattern; two groups whose patterns
// both match down_proj, taken in compressed-tensors' order),
// decoded at load (decodedLogits: the CPU engine holds some of them as
// stored, TestPackedHeld), give exactly the logits of the checkpoint
// holding the weights the test dequantised; values packed in reversed
// order (nvfp4: high nibble first) do not.
func TestCompressedTensors(t *testing.T) {
	prompts := [][]int{{1, 7, 21, 33, 4}, {1, 9, 14, 60, 3, 5, 41, 27}}
	run := func(dir string, mode compile.Mode) [][]float32 { return decodedLogits(t, dir, mode, prompts) }
	for _, f := range []ctFormat{
		{name: "w4a16-group-actorder", format: "pack-quantized", bits: 4, sym: true, strategy: "group", gIdx: true},
		{name: "w4a16-asym-group", format: "pack-quantized", bits: 4, strategy: "group"},
		{name: "w8a16-channel", format: "pack-quantized", bits: 8, sym: true, strategy: "channel"},
		{name: "int8-naive-channel-w8a8", format: "naive-quantized", bits: 8, sym: true, strategy: "channel", inScale: true},
		// llm-compressor's W8A8 int8 releases: int-quantized, naive int8
		// storage under another name, with KV-cache scales beside it.
		{name: "int8-int-quantized-w8a8", format: "naive-quantized", cfgFormat: "int-quantized", bits: 8, sym: true, strategy: "channel", inScale: true, kvScales: true, kvScheme: true},
		// Weight-only fp8 stored naive: NAME F8_E4M3, read as float-quantized.
		{name: "fp8-naive-quantized", format: "float-quantized", cfgFormat: "naive-quantized", bits: 8, sym: true, strategy: "channel"},
		{name: "fbgemm-fp8", format: "float-quantized", bits: 8, sym: true, strategy: "channel", fbgemm: true},
		{name: "fp8-tensor", format: "float-quantized", bits: 8, sym: true, strategy: "tensor"},
		{name: "fp8-tensor-kv-cache", format: "float-quantized", bits: 8, sym: true, strategy: "tensor", kvScales: true, kvScheme: true},
		{name: "fp8-block", format: "float-quantized", bits: 8, sym: true, strategy: "block"},
		{name: "reversed", format: "pack-quantized", bits: 4, sym: true, strategy: "group", reversed: true},
		{name: "nvfp4", format: "nvfp4-pack-quantized", bits: 4, sym: true, strategy: "group", inScale: true},
		{name: "nvfp4-high-nibble-first", format: "nvfp4-pack-quantized", bits: 4, sym: true, strategy: "group", reversed: true},
		{name: "mixed-precision", config: mixedConfig(), module: mixedModules},
		{name: "target-order", config: orderConfig(), module: orderModules},
	} {
		t.Run(f.name, func(t *testing.T) {
			cDir, pDir := ctCheckpoints(t, f)
			modes := []compile.Mode{compile.Compiled, compile.Eager}
			if f.reversed {
				modes = modes[:1]
			}
			for _, mode := range modes {
				got, want := run(cDir, mode), run(pDir, mode)
				same := true
				for b := range want {
					for i := range want[b] {
						same = same && got[b][i] == want[b][i]
					}
				}
				if same == f.reversed {
					t.Fatalf("%v: logits equal to the dequantised checkpoint's: %v, want %v", mode, same, !f.reversed)
				}
			}
		})
	}
}

// compressed-tensors schemes tputool does not read are errors naming them.
func TestCompressedUnsupported(t *testing.T) {
	group := func(w map[string]any, targets ...string) map[string]any {
		return map[string]any{"group_0": map[string]any{"targets": targets, "weights": w}}
	}
	for _, c := range []struct {
		q    map[string]any
		want string
	}{
		{map[string]any{"quant_method": "compressed-tensors", "format": "nvfp4-pack-quantized", "config_groups": group(map[string]any{"num_bits": 4, "type": "float"}, "Linear")}, "reads symmetric 4-bit floats by tensor_group"},
		{map[string]any{"quant_method": "compressed-tensors", "format": "marlin-24", "config_groups": group(map[string]any{"num_bits": 4, "type": "int", "symmetric": true, "strategy": "channel"}, "Linear")}, `format "marlin-24"`},
		{map[string]any{"quant_method": "compressed-tensors", "format": "pack-quantized", "config_groups": group(map[string]any{"num_bits": 4, "type": "int", "symmetric": true, "strategy": "tensor_group", "group_size": 16}, "Linear")}, "tensor_group is read for nvfp4"},
		{map[string]any{"quant_method": "compressed-tensors", "format": "pack-quantized", "config_groups": group(map[string]any{"num_bits": 4, "type": "int", "symmetric": true, "strategy": "group"}, "Linear")}, "positive group_size"},
		{map[string]any{"quant_method": "compressed-tensors", "format": "pack-quantized", "config_groups": group(map[string]any{"num_bits": 4, "type": "int", "symmetric": true, "strategy": "channel"}, "Embedding")}, `targets the class "Embedding"`},
		{map[string]any{"quant_method": "compressed-tensors", "format": "pack-quantized", "config_groups": group(map[string]any{"num_bits": 4, "type": "int", "symmetric": true, "strategy": "channel"}, "re:(?<=mlp).*")}, `target "re:(?<=mlp).*" is not a pattern tputool reads`},
		{map[string]any{"quant_method": "compressed-tensors", "format": "mixed-precision", "config_groups": group(map[string]any{"num_bits": 4, "type": "int", "symmetric": true, "strategy": "channel"}, "Linear")}, `format "mixed-precision"`},
		{map[string]any{"quant_method": "compressed-tensors", "format": "pack-quantized", "config_groups": map[string]any{}}, "no config group"},
		{map[string]any{"quant_method": "compressed-tensors", "format": "naive-quantized", "config_groups": group(map[string]any{"num_bits": 4, "type": "int", "symmetric": true, "strategy": "channel"}, "Linear")}, "tputool reads int8 and 8-bit floats"},
		{map[string]any{"quant_method": "compressed-tensors", "format": "int-quantized", "config_groups": group(map[string]any{"num_bits": 16, "type": "float", "symmetric": true, "strategy": "channel"}, "Linear")}, "int-quantized weights of type float with 16 bits"},
	} {
		tiny := lmckpt.LlamaShape(32, 1, 4, 48, 64)
		cfg := tiny.ConfigJSON()
		cfg["quantization_config"] = c.q
		dir := t.TempDir()
		if err := lmckpt.WriteCheckpoint(dir, cfg, nil); err != nil {
			t.Fatal(err)
		}
		_, err := lmckpt.Load(dir)
		if err == nil || !errors.Is(err, errs.ErrUnsupported) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: got %v, want an unsupported error containing %q", c.q, err, c.want)
		}
	}
}

// KV-cache and attention scales (self_attn.k_scale, v_scale, q_scale) are
// read past only where the config declares a kv_cache_scheme: without
// one, or in a plain checkpoint, they are unused tensors the load names.
func TestKVCacheScalesNeedScheme(t *testing.T) {
	undeclared, _ := ctCheckpoints(t, ctFormat{format: "naive-quantized", bits: 8, sym: true, strategy: "channel", kvScales: true})
	plain := t.TempDir()
	if err := lmckpt.LlamaShape(32, 2, 4, 48, 64).Write(plain); err != nil {
		t.Fatal(err)
	}
	addTensors(t, plain, safetensors.Tensor{Name: "model.layers.0.self_attn.k_scale", DType: safetensors.F32, Shape: []int{1}, Data: make([]byte, 4)})
	for name, dir := range map[string]string{"compressed without kv_cache_scheme": undeclared, "plain": plain} {
		l, err := lmckpt.Load(dir)
		if err == nil {
			l.Close()
		}
		if err == nil || !strings.Contains(err.Error(), "unused tensors") || !strings.Contains(err.Error(), "model.layers.0.self_attn.k_scale") {
			t.Errorf("%s: got %v, want an error naming the unused model.layers.0.self_attn.k_scale", name, err)
		}
	}
}
