package llama_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/tputool/tputool/compile"
	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/loader/safetensors"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
	"github.com/tputool/tputool/pipeline/testkit/refcheck"
	"github.com/tputool/tputool/tpu"
)

// packedFormat is one GPTQ or AWQ layout the test writes.
type packedFormat struct {
	name   string
	method string // gptq, awq
	bits   int
	v2     bool // gptq_v2: zero points stored as they are
	// zero0: zero points drawn from 0 up, output 0's in group 0 being 0
	// (v1 then stores it as 15, or 255, borrowing from output 1's).
	zero0 bool
	gIdx  bool // write a reordered g_idx (desc_act)
	// mutation: written one way, declared another.
	seqAWQ   bool // AWQ packed in plain order instead of its interleaved one
	declV2   bool // GPTQ v1 data declared gptq_v2
	mutation bool
	badGIdx  bool // g_idx[in-1] names a group past the last
	// For the held tests (packedheld_test.go): the columns a group (16
	// if 0), the model's hidden and intermediate sizes (32 and 48 if 0),
	// zero points all 8 (symmetric), and the f32 checkpoint in f32
	// (else f16, as the decoded weights are held).
	group, hidden, inter int
	sym, f32Ref          bool
	// dynamic is GPTQ's per-module rules as the config writes them (a
	// JSON object, in order), and module says what they should make of
	// each Linear, by its prefix: its bits and group size, or skip for
	// one left in plain weights.
	dynamic string
	module  func(prefix string) (bits, group int, skip bool)
}

// awqOrder is AWQ's packing order: nibble k holds value awqOrder[k].
var awqOrder = [8]int{0, 2, 4, 6, 1, 3, 5, 7}

// packedCheckpoints writes a tiny Llama twice: its projections packed as
// f says (random codes, zero points and f16 scales per group of 16 input
// columns), and in f32 with those projections dequantised by the test
// (scale · (code − zero), as transformers' GPTQ and AWQ dequantisers do).
func packedCheckpoints(t *testing.T, f packedFormat) (packedDir, f32Dir string) {
	t.Helper()
	hidden, inter, group := 32, 48, 16
	if f.hidden > 0 {
		hidden, inter = f.hidden, f.inter
	}
	if f.group > 0 {
		group = f.group
	}
	tiny := lmckpt.LlamaShape(hidden, 2, 4, inter, 64)
	tiny.Seed = 9
	next := lcg(777)
	var plain, packed []safetensors.Tensor
	for _, w := range tiny.Tensors() {
		n := 1
		for _, d := range w.Shape {
			n *= d
		}
		prefix := strings.TrimSuffix(w.Name, ".weight")
		bits, group, skip := f.bits, group, false
		if f.module != nil && w.Kind == "linear" {
			bits, group, skip = f.module(prefix)
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
			addF32(t, &packed, w.Name, safetensors.F32, w.Shape, v)
			continue
		}
		maxq := 1<<bits - 1
		per := 32 / bits
		out, in := w.Shape[0], w.Shape[1]
		groups := (in + group - 1) / group
		q := make([]int, out*in) // [o, i]
		for i := range q {
			q[i] = next(maxq + 1)
		}
		z := make([]int, groups*out) // [g, o]
		sc := make([]float32, groups*out)
		for i := range z {
			z[i] = 1 + next(maxq)
			if f.zero0 {
				z[i] = next(maxq + 1)
			}
			if f.sym {
				z[i] = 1 << (bits - 1)
			}
			sc[i] = float32(1+next(7)) / (float32(maxq) * 16)
		}
		if f.zero0 {
			z[0], z[1] = 0, 5
		}
		// Scales round to f16 in the checkpoint: dequantise with those.
		st, err := safetensors.Float32Tensor("s", safetensors.F16, []int{groups, out}, sc)
		if err != nil {
			t.Fatal(err)
		}
		safetensors.DecodeFloat32(sc, safetensors.F16, st.Data)
		gOf := make([]int, in)
		for i := range gOf {
			gOf[i] = i / group
			if f.gIdx {
				gOf[i] = (i*5 + 3) % groups
			}
		}
		deq := make([]float32, out*in)
		for o := 0; o < out; o++ {
			for i := 0; i < in; i++ {
				g := gOf[i]
				deq[o*in+i] = sc[g*out+o] * (float32(q[o*in+i]) - float32(z[g*out+o]))
			}
		}
		// As f16: a packed weight is held in its scales' dtype where the
		// backend multiplies 16-bit weights (the cpu engine), so both
		// checkpoints hold the same rounded values.
		ref := safetensors.F16
		if f.f32Ref {
			ref = safetensors.F32
		}
		addF32(t, &plain, w.Name, ref, w.Shape, deq)
		zs := func(g, o int) uint32 { return uint32(z[g*out+o]) }
		if f.method == "awq" {
			qw := make([]uint32, in*out/8)
			qz := make([]uint32, groups*out/8)
			for i := 0; i < in; i++ {
				for c := 0; c < out/8; c++ {
					for k := 0; k < 8; k++ {
						j := awqOrder[k]
						if f.seqAWQ {
							j = k
						}
						qw[i*(out/8)+c] |= uint32(q[(c*8+j)*in+i]) << (4 * k)
					}
				}
			}
			for g := 0; g < groups; g++ {
				for c := 0; c < out/8; c++ {
					for k := 0; k < 8; k++ {
						j := awqOrder[k]
						if f.seqAWQ {
							j = k
						}
						qz[g*(out/8)+c] |= zs(g, c*8+j) << (4 * k)
					}
				}
			}
			packed = append(packed, i32Tensor(prefix+".qweight", []int{in, out / 8}, qw), i32Tensor(prefix+".qzeros", []int{groups, out / 8}, qz))
		} else {
			qw := make([]uint32, in/per*out)
			for i := 0; i < in; i++ {
				for o := 0; o < out; o++ {
					qw[(i/per)*out+o] |= uint32(q[o*in+i]) << (bits * (i % per))
				}
			}
			qz := make([]uint32, groups*out/per)
			for g := 0; g < groups; g++ {
				for o := 0; o < out; o++ {
					qz[g*(out/per)+o/per] |= zs(g, o) << (bits * (o % per))
				}
			}
			if !f.v2 {
				// v1 as GPTQModel writes it from v2: each word minus one
				// in every value (0x11111111, 8 bits 0x01010101), the
				// borrow running on into the next value.
				ones := uint32(0x11111111)
				if bits == 8 {
					ones = 0x01010101
				}
				for k := range qz {
					qz[k] -= ones
				}
			}
			packed = append(packed, i32Tensor(prefix+".qweight", []int{in / per, out}, qw), i32Tensor(prefix+".qzeros", []int{groups, out / per}, qz))
			gi := make([]uint32, in)
			for i := range gi {
				gi[i] = uint32(gOf[i])
			}
			if f.badGIdx {
				gi[in-1] = uint32(groups)
			}
			packed = append(packed, i32Tensor(prefix+".g_idx", []int{in}, gi))
		}
		packed = append(packed, st)
		packed[len(packed)-1].Name = prefix + ".scales"
	}
	cfg := tiny.ConfigJSON()
	f32Dir = t.TempDir()
	if err := lmckpt.WriteCheckpoint(f32Dir, cfg, plain); err != nil {
		t.Fatal(err)
	}
	qc := map[string]any{"quant_method": f.method, "bits": f.bits, "group_size": group}
	if f.method == "gptq" {
		qc["desc_act"], qc["sym"], qc["checkpoint_format"] = f.gIdx, false, "gptq"
		if f.v2 || f.declV2 {
			qc["checkpoint_format"] = "gptq_v2"
		}
		if f.dynamic != "" {
			qc["dynamic"] = json.RawMessage(f.dynamic)
		}
	} else {
		qc["version"], qc["zero_point"], qc["modules_to_not_convert"] = "gemm", true, []string{"lm_head"}
	}
	cfg["quantization_config"] = qc
	packedDir = t.TempDir()
	if err := lmckpt.WriteCheckpoint(packedDir, cfg, packed); err != nil {
		t.Fatal(err)
	}
	return packedDir, f32Dir
}

// GPTQ dynamic rules: the first leaves layer 0's q_proj unquantized, the
// next two override the config's 4 bits in groups of 16.
const (
	dynamicRules = `{"-:model\\.layers\\.0\\.self_attn\\.q_proj": {},
		".*layers\\.1\\.": {"group_size": 32, "sym": false},
		"+:.*down_proj": {"bits": 8, "group_size": 24, "desc_act": false}}`
	swappedRules = `{"-:model\\.layers\\.0\\.self_attn\\.q_proj": {},
		"+:.*down_proj": {"bits": 8, "group_size": 24},
		".*layers\\.1\\.": {"group_size": 32}}`
)

// dynamicModules is what dynamicRules make of each Linear.
func dynamicModules(prefix string) (bits, group int, skip bool) {
	switch {
	case prefix == "model.layers.0.self_attn.q_proj":
		return 0, 0, true
	case strings.HasPrefix(prefix, "model.layers.1."):
		return 4, 32, false
	case strings.HasSuffix(prefix, ".down_proj"):
		return 8, 24, false
	}
	return 4, 16, false
}

// TestPackedCheckpoints: GPTQ (v1 and v2, 4 and 8 bits, with a reordered
// g_idx, with dynamic per-module rules) and AWQ checkpoints load, decoded to the compute dtype at load
// (decodedLogits: the CPU engine holds some as stored, TestPackedHeld),
// and give exactly the logits of the f32 checkpoint holding the weights
// the test dequantised, compiled and eager; AWQ packed in plain order, or
// GPTQ v1 read as v2, does not.
func TestPackedCheckpoints(t *testing.T) {
	prompts := [][]int{{1, 7, 21, 33, 4}, {1, 9, 14, 60, 3, 5, 41, 27}}
	run := func(dir string, mode compile.Mode) [][]float32 { return decodedLogits(t, dir, mode, prompts) }
	for _, f := range []packedFormat{
		{name: "gptq-v1-4bit-desc_act", method: "gptq", bits: 4, gIdx: true},
		// Zero points of 0, which v1 stores as 15 (255) borrowing one
		// from the next: read back as GPTQModel converts v1 to v2.
		{name: "gptq-v1-4bit-zero-points-0", method: "gptq", bits: 4, zero0: true},
		{name: "gptq-v1-8bit-zero-points-0", method: "gptq", bits: 8, zero0: true},
		{name: "gptq-v2-8bit", method: "gptq", bits: 8, v2: true},
		{name: "awq-4bit", method: "awq", bits: 4},
		{name: "awq-plain-order", method: "awq", bits: 4, seqAWQ: true, mutation: true},
		{name: "gptq-v1-read-as-v2", method: "gptq", bits: 4, declV2: true, mutation: true},
		// The first matching rule decides: layer 1's down_proj takes the
		// layer rule's 4 bits in groups of 32, layer 0's the down_proj
		// rule's 8 bits in groups of 24 (TestPackedDynamicOrder).
		{name: "gptq-dynamic", method: "gptq", bits: 4, dynamic: dynamicRules, module: dynamicModules},
	} {
		t.Run(f.name, func(t *testing.T) {
			pDir, fDir := packedCheckpoints(t, f)
			modes := []compile.Mode{compile.Compiled, compile.Eager}
			if f.mutation {
				modes = modes[:1]
			}
			for _, mode := range modes {
				got, want := run(pDir, mode), run(fDir, mode)
				same := true
				for b := range want {
					for i := range want[b] {
						same = same && got[b][i] == want[b][i]
					}
				}
				if same == f.mutation {
					t.Fatalf("%v: logits equal to the dequantised f32 checkpoint's: %v, want %v", mode, same, !f.mutation)
				}
			}
		})
	}
}

// TestPackedDynamicOrder: the first matching rule, in the config's order,
// decides. The dynamic checkpoint declared with its last two rules
// swapped (the order sorted keys give, "+:" before ".") reads layer 1's
// down_proj as 8-bit, and its load fails naming the tensor; so does
// taking the last match instead of the first.
func TestPackedDynamicOrder(t *testing.T) {
	for _, rules := range []string{swappedRules, dynamicRules} {
		f := packedFormat{method: "gptq", bits: 4, dynamic: dynamicRules, module: dynamicModules}
		dir, _ := packedCheckpoints(t, f)
		if rules == swappedRules {
			setDynamic(t, dir, rules)
		}
		l, err := lmckpt.Load(dir)
		if err == nil {
			l.Close()
		}
		const want = "model.layers.1.mlp.down_proj.qweight: shape [6 32], want [12 32]"
		if rules == swappedRules && (err == nil || !strings.Contains(err.Error(), want)) {
			t.Errorf("rules swapped: got %v, want an error containing %q", err, want)
		}
		if rules == dynamicRules && err != nil {
			t.Errorf("rules in order: %v", err)
		}
	}
}

// setDynamic rewrites the dynamic rules of the GPTQ checkpoint in dir.
func setDynamic(t *testing.T, dir, rules string) {
	t.Helper()
	editConfig(t, dir, func(cfg map[string]any) {
		cfg["quantization_config"].(map[string]any)["dynamic"] = json.RawMessage(rules)
	})
}

// A g_idx naming a group past the last is an error naming the tensor and
// the entry, decoded at load or held as stored.
func TestPackedBadGIdx(t *testing.T) {
	dir, _ := packedCheckpoints(t, packedFormat{method: "gptq", bits: 4, gIdx: true, badGIdx: true})
	caps := tpu.CapabilitiesOf(refcheck.CPUBackend(t))
	for _, held := range []bool{false, true} {
		l, err := lmckpt.Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		c := caps
		c.Int4Groups = held
		r, err := compile.NewRunner(refcheck.CPUBackend(t), l, compile.Options{Mode: compile.Compiled, Caps: &c})
		if err == nil {
			_, err = r.NewState().Prefill([][]int{{1, 7, 21}}, 1)
			r.Close()
		}
		l.Close()
		if err == nil || !strings.Contains(err.Error(), `.g_idx": g_idx[31] = 2, outside the 2 groups`) {
			t.Errorf("held %v: got %v, want an error naming g_idx[31] outside the 2 groups", held, err)
		}
	}
}

// Unsupported GPTQ and AWQ variants are errors naming them.
func TestPackedUnsupported(t *testing.T) {
	for _, c := range []struct {
		q    map[string]any
		want string
	}{
		{map[string]any{"quant_method": "gptq", "bits": 3, "group_size": 128}, "GPTQ with 3 bits"},
		{map[string]any{"quant_method": "gptq", "bits": 4, "group_size": 128, "checkpoint_format": "marlin"}, `checkpoint_format "marlin"`},
		{map[string]any{"quant_method": "gptq", "bits": 4, "group_size": 128, "dynamic": map[string]any{"+:(?!.*mlp).*": map[string]any{}}}, `dynamic: rule "+:(?!.*mlp).*": not a pattern tputool reads`},
		{map[string]any{"quant_method": "gptq", "bits": 4, "group_size": 128, "dynamic": map[string]any{".*mlp.*": map[string]any{"bits": 3}}}, `rule ".*mlp.*": 3 bits`},
		{map[string]any{"quant_method": "gptq", "bits": 4, "group_size": 128, "dynamic": map[string]any{".*mlp.*": 4}}, `rule ".*mlp.*": want an object of overrides`},
		{map[string]any{"quant_method": "gptq", "bits": 4, "group_size": 128, "dynamic": []string{".*"}}, "dynamic: want an object"},
		{map[string]any{"quant_method": "awq", "bits": 4, "group_size": 128, "version": "gemv"}, `AWQ version "gemv"`},
		{map[string]any{"quant_method": "awq", "bits": 4, "group_size": 0}, "group_size 0"},
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
