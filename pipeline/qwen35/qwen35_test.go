package qwen35_test

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"

	"github.com/tputool/tputool/compile"
	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/loader/safetensors"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/nn"
	"github.com/tputool/tputool/pipeline/qwen35"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
	"github.com/tputool/tputool/pipeline/testkit/qwenref"
	"github.com/tputool/tputool/pipeline/testkit/refcheck"
	"github.com/tputool/tputool/tpu"
)

// withChunk swaps the loaded model for one whose chunked delta rule uses
// chunks of n tokens.
func withChunk(t *testing.T, l *lm.Loaded, n int) {
	t.Helper()
	m, ok := l.Model.(*qwen35.Model)
	if !ok {
		t.Fatalf("model is %T, want *qwen35.Model", l.Model)
	}
	o := m.Options()
	o.ChunkSize = n
	l.Model = qwen35.NewModel(o)
}

// TestLogitsMatchReference runs the tiny Qwen3.5 (multimodal and text-only
// layouts) in both modes on a left-padded batch of two prompts plus decode
// steps, and compares every row's logits with the float64 reference (whose
// DeltaNet is the token-by-token recurrence) on that row alone. It also
// checks that both modes pick the same greedy tokens.
func TestLogitsMatchReference(t *testing.T) {
	be := refcheck.GoBackend(t)
	prompts := [][]int{{1, 7, 21, 33, 4}, {1, 9, 14, 60, 3, 5, 41, 27, 11, 19, 50}}
	const steps = 4
	const tol = 1e-4
	tied := qwenref.TinyQwen35()
	tied.CausalLM, tied.Tied, tied.Seed = true, true, 7
	for _, c := range []qwenref.Qwen35{qwenref.TinyQwen35(), tied} {
		name := "ConditionalGeneration"
		if c.CausalLM {
			name = "CausalLM-tied"
		}
		t.Run(name, func(t *testing.T) {
			dir, l := lmckpt.WriteLoad(t, c.Write)
			withChunk(t, l, 4) // several chunks and a padded last chunk in prefill
			rm, err := qwenref.LoadQwen35(dir, c)
			if err != nil {
				t.Fatal(err)
			}
			seqs := refcheck.GreedySequences(rm, prompts, steps)
			greedy := map[string][]int{}
			for _, v := range []struct {
				name string
				opts compile.Options
			}{
				{"compiled", compile.Options{Mode: compile.Compiled, SplitMatmul: 1}},
				{"eager-split", compile.Options{Mode: compile.Eager, SplitMatmul: 3}},
			} {
				t.Run(v.name, func(t *testing.T) {
					r, err := compile.NewRunner(be, l, v.opts)
					gen := r.NewState()
					if err != nil {
						t.Fatal(err)
					}
					defer r.Close()
					f := refcheck.TeacherForced(t, gen, rm, prompts, seqs, steps, tol)
					greedy[v.name] = f.Greedy
					t.Logf("max relative error %.3g", f.Worst)
				})
			}
			if t.Failed() {
				return // a variant stopped early; there is nothing whole to compare
			}
			if fmt.Sprint(greedy["compiled"]) != fmt.Sprint(greedy["eager-split"]) {
				t.Errorf("greedy tokens differ:\ncompiled %v\neager    %v", greedy["compiled"], greedy["eager-split"])
			}
		})
	}
}

// TestChunkedPrefillMatchesRecurrence feeds the same 70-token sequence
// once as a prefill (chunked delta rule: two chunks of 64 with the
// default chunk size, or many of 8) and once as a one-token prefill
// followed by decode steps (recurrent delta rule), and compares the logits
// after the last token.
func TestChunkedPrefillMatchesRecurrence(t *testing.T) {
	be := refcheck.GoBackend(t)
	c := qwenref.TinyQwen35()
	dir := t.TempDir()
	if err := c.Write(dir); err != nil {
		t.Fatal(err)
	}
	seq := make([]int, 70)
	for i := range seq {
		seq[i] = 1 + (i*37+11)%(c.Vocab-1)
	}
	for _, chunk := range []int{64, 8} {
		l, err := lmckpt.Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		withChunk(t, l, chunk)
		r, err := compile.NewRunner(be, l, compile.Options{Mode: compile.Compiled, CacheLen: 256})
		gen := r.NewState()
		if err != nil {
			t.Fatal(err)
		}
		chunked, err := gen.Prefill([][]int{seq}, 1)
		if err != nil {
			t.Fatal(err)
		}
		rec, err := gen.Prefill([][]int{seq[:1]}, len(seq))
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range seq[1:] {
			if rec, err = gen.Decode([]int{id}); err != nil {
				t.Fatal(err)
			}
		}
		want := make([]float64, len(rec[0]))
		for i, v := range rec[0] {
			want[i] = float64(v)
		}
		e := refcheck.RelErr(chunked[0], want)
		t.Logf("chunk %d: chunked prefill vs recurrence: relative error %.3g", chunk, e)
		if e > 1e-4 {
			t.Errorf("chunk %d: chunked prefill and token-by-token recurrence differ: relative error %.3g", chunk, e)
		}
		r.Close()
		l.Close()
	}
}

// TestSkipsVisionAndMTP checks the text-only path: the strict loader
// accepts the vision-tower and MTP tensors as skipped, and still rejects a
// tensor nobody reads.
func TestSkipsVisionAndMTP(t *testing.T) {
	c := qwenref.TinyQwen35()
	dir := t.TempDir()
	if err := c.Write(dir); err != nil {
		t.Fatal(err)
	}
	l, err := lmckpt.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	got := fmt.Sprint(l.Skipped())
	l.Close()
	if !strings.Contains(got, "vision tower (model.visual.*)") || !strings.Contains(got, "multi-token-prediction head (mtp.*)") {
		t.Errorf("Skipped() = %s, want the vision tower and the MTP head", got)
	}
	// An extra text tensor is still an error that names it.
	ts := readF32(t, dir)
	extra, err := safetensors.Float32Tensor("model.language_model.layers.0.linear_attn.in_proj_ba.weight", safetensors.F32, []int{2}, []float32{1, 2})
	if err != nil {
		t.Fatal(err)
	}
	if err := safetensors.WriteFile(dir+"/model.safetensors", append(ts, extra), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := lmckpt.Load(dir); err == nil || !strings.Contains(err.Error(), "in_proj_ba") {
		t.Errorf("load with an unknown text tensor: error %v, want one naming it", err)
	}
}

// TestTiedHeadUnderPrefix checks a tied multimodal checkpoint (the small
// Qwen3.5s tie the head) that still ships lm_head.weight: accepted when it
// holds model.language_model.embed_tokens.weight's bytes, refused naming
// that embedding when it differs (the check once looked for
// model.embed_tokens.weight only, and let any head through here).
func TestTiedHeadUnderPrefix(t *testing.T) {
	c := qwenref.TinyQwen35()
	c.Tied = true
	const embed = "model.language_model.embed_tokens.weight"
	for _, same := range []bool{true, false} {
		dir := t.TempDir()
		if err := c.Write(dir); err != nil {
			t.Fatal(err)
		}
		ts := readF32(t, dir)
		var head safetensors.Tensor
		for _, st := range ts {
			if st.Name == embed {
				head = st
			}
		}
		head.Name = "lm_head.weight"
		if !same {
			head.Data = make([]byte, len(head.Data))
		}
		if err := safetensors.WriteFile(dir+"/model.safetensors", append(ts, head), nil); err != nil {
			t.Fatal(err)
		}
		l, err := lmckpt.Load(dir)
		switch {
		case same && err != nil:
			t.Errorf("lm_head.weight equal to %s: %v", embed, err)
		case !same && (err == nil || !strings.Contains(err.Error(), "lm_head.weight differs from "+embed)):
			t.Errorf("lm_head.weight differing from %s: error %v, want one naming both", embed, err)
		}
		if err == nil {
			l.Close()
		}
	}
}

// readF32 reads every tensor of the checkpoint in dir as F32.
func readF32(t *testing.T, dir string) []safetensors.Tensor {
	t.Helper()
	ck, err := safetensors.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	var ts []safetensors.Tensor
	for _, n := range ck.Names() {
		v, err := ck.Float32(n)
		if err != nil {
			t.Fatal(err)
		}
		info, _ := ck.Info(n)
		st, err := safetensors.Float32Tensor(n, safetensors.F32, info.Shape, v)
		if err != nil {
			t.Fatal(err)
		}
		ts = append(ts, st)
	}
	return ts
}

// TestRealConfig9B resolves the real Qwen/Qwen3.5-9B config.json.
func TestRealConfig9B(t *testing.T) {
	cfg, err := config.ReadModel("../../testdata/configs/qwen3_5_9b/config.json")
	if err != nil {
		t.Fatal(err)
	}
	m, err := lm.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	q := m.(*qwen35.Model)
	o := q.Options()
	s := m.Spec()
	if s.Layers != 32 || s.Hidden != 4096 || s.Heads != 16 || s.KVHeads != 4 || s.HeadDim != 256 ||
		s.VocabSize != 248320 || s.Intermediate != 12288 || s.TieEmbeddings || s.MaxPositions != 262144 {
		t.Errorf("spec %+v", s)
	}
	if fmt.Sprint(s.EOS) != "[248044]" {
		t.Errorf("EOS %v, want [248044]", s.EOS)
	}
	if o.Rope.RotaryDim != 64 || o.Rope.InvFreq[1] != 1/math.Pow(1e7, 2.0/64) {
		t.Errorf("rope: rotary dim %d, inv freq %v", o.Rope.RotaryDim, o.Rope.InvFreq[:2])
	}
	if o.Prefix != "model.language_model." || o.Eps != 1e-6 {
		t.Errorf("prefix %q eps %g", o.Prefix, o.Eps)
	}
	want := nn.DeltaNetDims{KHeads: 16, VHeads: 32, KDim: 128, VDim: 128, ConvKernel: 4}
	if o.DeltaNet != want {
		t.Errorf("DeltaNet %+v, want %+v", o.DeltaNet, want)
	}
	full := 0
	for i, k := range s.LayerKinds {
		if wantFull := (i+1)%4 == 0; wantFull != (k == lm.KindFull) {
			t.Errorf("layer %d kind %s", i, k)
		}
		if k == lm.KindFull {
			full++
		}
	}
	if full != 8 {
		t.Errorf("%d full-attention layers, want 8", full)
	}
	// State: KV caches only for the 8 full-attention layers; a fixed state
	// for the 24 linear ones: conv [1, 3, 8192] and recurrent [1, 32, 128, 128] f32.
	st := m.LayerState(0, 1, 1000)
	if len(st) != 2 || fmt.Sprint(st[0].Shape) != "[1 3 8192]" || fmt.Sprint(st[1].Shape) != "[1 32 128 128]" {
		t.Errorf("linear layer state %+v", st)
	}
	st = m.LayerState(3, 1, 1000)
	if len(st) != 2 || fmt.Sprint(st[0].Shape) != "[1 4 1000 256]" {
		t.Errorf("full layer state %+v", st)
	}
	// Weight names and shapes of a few tensors of the real index.
	names := map[string]string{}
	for _, w := range lm.Weights(m) {
		names[w.Name] = fmt.Sprint(w.Shape)
	}
	for name, shape := range map[string]string{
		"model.language_model.embed_tokens.weight":                     "[248320 4096]",
		"model.language_model.layers.0.linear_attn.in_proj_qkv.weight": "[8192 4096]",
		"model.language_model.layers.0.linear_attn.in_proj_z.weight":   "[4096 4096]",
		"model.language_model.layers.0.linear_attn.in_proj_a.weight":   "[32 4096]",
		"model.language_model.layers.0.linear_attn.conv1d.weight":      "[8192 1 4]",
		"model.language_model.layers.0.linear_attn.A_log":              "[32]",
		"model.language_model.layers.0.linear_attn.norm.weight":        "[128]",
		"model.language_model.layers.3.self_attn.q_proj.weight":        "[8192 4096]",
		"model.language_model.layers.3.self_attn.k_proj.weight":        "[1024 4096]",
		"model.language_model.layers.3.self_attn.q_norm.weight":        "[256]",
		"lm_head.weight": "[248320 4096]",
	} {
		if names[name] != shape {
			t.Errorf("%s: shape %q, want %s", name, names[name], shape)
		}
	}
	if n := len(names); n != 1+24*14+8*11+2 {
		t.Errorf("%d tensors", n)
	}
	for _, name := range []string{"model.visual.blocks.0.attn.qkv.weight", "mtp.fc.weight"} {
		if _, skip := q.SkipWeight(name); !skip {
			t.Errorf("%s is not skipped", name)
		}
	}
}

// TestConfigErrors checks that bad configs give errors naming the field.
func TestConfigErrors(t *testing.T) {
	for _, tc := range []struct{ json, want string }{
		{`{"architectures":["Qwen3_5ForConditionalGeneration"],"model_type":"qwen3_5"}`, "text_config"},
		{`{"architectures":["Qwen3_5ForCausalLM"],"num_hidden_layers":2,"layer_types":["linear_attention"]}`, "layer_types has 1 entries"},
		{`{"architectures":["Qwen3_5ForCausalLM"],"num_hidden_layers":1,"layer_types":["sliding_attention"]}`, "layer_types[0]"},
		{`{"architectures":["Qwen3_5ForCausalLM"],"linear_num_value_heads":3}`, "linear_num_value_heads 3"},
		{`{"architectures":["Qwen3_5ForCausalLM"],"num_experts":8}`, "num_experts 8 in a Qwen3_5ForCausalLM config: the mixture-of-experts variant is Qwen3_5MoeForCausalLM"},
		{`{"architectures":["Qwen3_5ForCausalLM"],"hidden_act":"gelu"}`, "hidden_act"},
	} {
		cfg, err := config.ParseModel([]byte(tc.json))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := lm.New(cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one containing %q", tc.json, err, tc.want)
		}
	}
}

// TestBFloat16Compute runs the tiny Qwen3.5 (stored as BF16) with bfloat16
// compute in both modes, prefill and decode: logits stay within a few
// percent of the float64 reference (the delta rule itself runs in float32,
// as in transformers).
func TestBFloat16Compute(t *testing.T) {
	be := refcheck.GoBackend(t)
	c := qwenref.TinyQwen35()
	c.DType = safetensors.BF16
	dir, l := lmckpt.WriteLoad(t, c.Write)
	withChunk(t, l, 4)
	rm, err := qwenref.LoadQwen35(dir, c)
	if err != nil {
		t.Fatal(err)
	}
	prompts := [][]int{{1, 7, 21, 33, 4}, {1, 9, 14, 60, 3, 5, 41, 27, 11, 19, 50}}
	for _, mode := range []compile.Mode{compile.Compiled, compile.Eager} {
		r, err := compile.NewRunner(be, l, compile.Options{Mode: mode, DType: dtypes.BFloat16})
		gen := r.NewState()
		if err != nil {
			t.Fatal(err)
		}
		logits, err := gen.Prefill(prompts, 2)
		if err != nil {
			t.Fatal(err)
		}
		next := []int{5, 6}
		dec, err := gen.Decode(next)
		if err != nil {
			t.Fatal(err)
		}
		for b, p := range prompts {
			want := rm.Logits(append(append([]int(nil), p...), next[b]))
			for i, got := range [][]float32{logits[b], dec[b]} {
				e := refcheck.RelErr(got, want[len(p)-1+i])
				t.Logf("%s row %d step %d: relative error %.3g", mode, b, i, e)
				if e > 0.05 {
					t.Errorf("%s row %d step %d: relative error %.3g > 0.05", mode, b, i, e)
				}
			}
		}
		r.Close()
	}
}

// TestMoELogitsMatchReference runs the tiny Qwen3.5-MoE (stacked experts
// as the official checkpoints hold them, and one tensor per expert as
// re-saves do; multimodal and text-only classes) with every experts
// formulation on the go and cpu backends, on a left-padded batch of two
// prompts plus decode steps, against the float64 reference; both layouts
// give identical logits. The in-graph formulation also runs with an
// accelerator's capabilities (stacked experts for prefill and batch-2
// decode). Mutations of the reference (the shared expert's gate
// saturated, two experts' router rows swapped) must fail the bound.
func TestMoELogitsMatchReference(t *testing.T) {
	prompts := [][]int{{1, 7, 21, 33, 4}, {1, 9, 14, 60, 3, 5, 41, 27, 11, 19, 50}}
	const steps = 4
	const tol = 1e-4
	type variant struct {
		name  string
		opts  compile.Options
		accel bool
	}
	variants := []variant{
		{"graph-compiled", compile.Options{Mode: compile.Compiled}, false},
		{"graph-eager", compile.Options{Mode: compile.Eager}, false},
		{"graph-accel-compiled", compile.Options{Mode: compile.Compiled}, true},
		{"host-compiled", compile.Options{Mode: compile.Compiled, SplitMatmul: 1, Experts: compile.ExpertsHost}, false},
		{"dense-compiled", compile.Options{Mode: compile.Compiled, Experts: compile.ExpertsDense}, false},
	}
	causal := qwenref.TinyQwen35MoE()
	causal.CausalLM = true
	for _, c := range []qwenref.Qwen35{qwenref.TinyQwen35MoE(), causal} {
		name := "ConditionalGeneration"
		if c.CausalLM {
			name = "CausalLM"
		}
		t.Run(name, func(t *testing.T) {
			all := map[string][]float32{}
			for _, stacked := range []bool{true, false} {
				c.Stacked = stacked
				layout := map[bool]string{true: "stacked", false: "per-expert"}[stacked]
				dir, l := lmckpt.WriteLoad(t, c.Write)
				withChunk(t, l, 4)
				rm, err := qwenref.LoadQwen35(dir, c)
				if err != nil {
					t.Fatal(err)
				}
				seqs := refcheck.GreedySequences(rm, prompts, steps)
				for _, backend := range []string{"go", "cpu"} {
					be := refcheck.GoBackend(t)
					if backend == "cpu" {
						be = refcheck.CPUBackend(t)
					}
					for _, v := range variants {
						key := layout + "/" + backend + "/" + v.name
						t.Run(key, func(t *testing.T) {
							opts := v.opts
							if v.accel {
								caps := tpu.CapabilitiesOf(be)
								caps.HostMemory = false
								opts.Caps = &caps
							}
							r, err := compile.NewRunner(be, l, opts)
							if err != nil {
								t.Fatal(err)
							}
							defer r.Close()
							f := refcheck.TeacherForced(t, r.NewState(), rm, prompts, seqs, steps, tol)
							all[key] = f.Logits
							t.Logf("max relative error %.3g", f.Worst)
						})
					}
				}
			}
			if t.Failed() {
				return
			}
			for _, backend := range []string{"go", "cpu"} {
				for _, v := range variants {
					a, b := all["stacked/"+backend+"/"+v.name], all["per-expert/"+backend+"/"+v.name]
					for i := range a {
						if a[i] != b[i] {
							t.Errorf("%s/%s: the layouts' logits differ at %d: %g vs %g", backend, v.name, i, a[i], b[i])
							break
						}
					}
				}
			}
		})
	}

	// Mutations of the reference: each changes the logits beyond the bound.
	c := qwenref.TinyQwen35MoE()
	dir, l := lmckpt.WriteLoad(t, c.Write)
	got := prefillLogits(t, l, prompts[1])
	for name, mutate := range map[string]func(w qwenref.Weights){
		"shared gate dropped": func(w qwenref.Weights) {
			for k, v := range w {
				if strings.HasSuffix(k, "shared_expert_gate.weight") {
					for i := range v {
						v[i] = 1e3 // the gate saturates to 0 or 1 per token
					}
				}
			}
		},
		"wrong expert": func(w qwenref.Weights) {
			for k, v := range w {
				if strings.HasSuffix(k, "mlp.gate.weight") {
					h := len(v) / c.Experts
					for i := 0; i < h; i++ { // experts 0 and 1 swap router rows
						v[i], v[h+i] = v[h+i], v[i]
					}
				}
			}
		},
	} {
		rm, err := qwenref.LoadQwen35(dir, c)
		if err != nil {
			t.Fatal(err)
		}
		mutate(rm.W)
		want := rm.Logits(prompts[1])
		if e := refcheck.RelErr(got, want[len(want)-1]); e <= tol {
			t.Errorf("%s: the model still matches the mutated reference (%.3g)", name, e)
		}
	}
}

// prefillLogits prefills prompt on a compiled runner of l on the CPU
// engine and returns the logits after its last token.
func prefillLogits(t *testing.T, l *lm.Loaded, prompt []int) []float32 {
	t.Helper()
	r, err := compile.NewRunner(refcheck.CPUBackend(t), l, compile.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	got, err := r.NewState().Prefill([][]int{prompt}, 0)
	if err != nil {
		t.Fatal(err)
	}
	return got[0]
}

// TestMoEConfig: the MoE text config's defaults (Qwen3_5MoeTextConfig) and
// checks, and the sizes inspect and --tp read.
func TestMoEConfig(t *testing.T) {
	cfg := func(text string) *config.File {
		t.Helper()
		m, err := config.ParseModel([]byte(`{"architectures": ["Qwen3_5MoeForConditionalGeneration"], "model_type": "qwen3_5_moe",
			"text_config": {"model_type": "qwen3_5_moe_text"` + text + `}}`))
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	o, err := qwen35.Resolve(cfg(""))
	if err != nil {
		t.Fatal(err)
	}
	s := o.Spec
	if s.Hidden != 2048 || s.Layers != 40 || s.KVHeads != 2 || o.Experts != 256 || o.TopK != 8 ||
		o.MoEIntermediate != 512 || o.SharedIntermediate != 512 || s.Intermediate != 512 || o.Prefix != "model.language_model." {
		t.Errorf("defaults: hidden %d layers %d kv %d experts %d top %d moe %d shared %d intermediate %d prefix %q",
			s.Hidden, s.Layers, s.KVHeads, o.Experts, o.TopK, o.MoEIntermediate, o.SharedIntermediate, s.Intermediate, o.Prefix)
	}
	for _, bad := range []struct{ text, want string }{
		{`, "num_experts": 4, "num_experts_per_tok": 5`, "num_experts_per_tok 5"},
		{`, "num_experts_per_tok": 0`, "num_experts_per_tok 0"},
		{`, "moe_intermediate_size": 0`, "moe_intermediate_size 0"},
	} {
		if _, err := qwen35.Resolve(cfg(bad.text)); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%s: %v, want an error naming %q", bad.text, err, bad.want)
		}
	}
	flat, err := config.ParseModel([]byte(`{"architectures": ["Qwen3_5MoeForConditionalGeneration"], "model_type": "qwen3_5_moe", "hidden_size": 64}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := qwen35.Resolve(flat); err == nil || !strings.Contains(err.Error(), "text_config") {
		t.Errorf("no text_config: %v", err)
	}
}
