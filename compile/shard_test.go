package compile

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/distributed"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/tensors"

	"github.com/tputool/tputool/internal/errs"
	_ "github.com/tputool/tputool/pipeline/deepseek"
	_ "github.com/tputool/tputool/pipeline/gemma4"
	_ "github.com/tputool/tputool/pipeline/gptoss"
	_ "github.com/tputool/tputool/pipeline/granite"
	_ "github.com/tputool/tputool/pipeline/llama4"
	"github.com/tputool/tputool/pipeline/lm"
	_ "github.com/tputool/tputool/pipeline/minimax"
	_ "github.com/tputool/tputool/pipeline/nemotronh"
	_ "github.com/tputool/tputool/pipeline/qwen2"
	"github.com/tputool/tputool/pipeline/testkit/dsref"
	"github.com/tputool/tputool/pipeline/testkit/gemma4ref"
	"github.com/tputool/tputool/pipeline/testkit/gptossref"
	"github.com/tputool/tputool/pipeline/testkit/granitehref"
	"github.com/tputool/tputool/pipeline/testkit/lfm2ref"
	"github.com/tputool/tputool/pipeline/testkit/llama4ref"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
	"github.com/tputool/tputool/pipeline/testkit/nemotronhref"
	"github.com/tputool/tputool/pipeline/testkit/qwenref"
	"github.com/tputool/tputool/tpu"
)

// tinyLoaded writes and loads a small checkpoint: 8 heads, 4 KV heads,
// intermediate 96, vocab 64.
func tinyLoaded(t *testing.T, arch string, tied, bias bool) *lm.Loaded {
	t.Helper()
	m := lmckpt.LlamaShape(64, 2, 8, 96, 64)
	m.Arch = arch
	m.Config.KVHeads = 4
	m.Config.Tied = tied
	m.Config.QKVBias = bias
	m.MaxPositions = 128
	_, l := lmckpt.WriteLoad(t, m.Write)
	return l
}

// tinyNext writes and loads a tiny Qwen3-Next (4 heads, 2 KV heads;
// experts of 16, a shared expert of 20: widths --tp 4 splits), closed
// when the test ends.
func tinyNext(t *testing.T) *lm.Loaded {
	t.Helper()
	c := qwenref.TinyQwen3Next()
	c.MoEIntermediate, c.SharedSize = 16, 20
	_, l := lmckpt.WriteLoad(t, c.Write)
	return l
}

// axes renders a spec as e.g. "[R S(model)]"; "[]" is replicated.
func axes(s *distributed.ShardingSpec) string {
	var parts []string
	for _, a := range s.Axes {
		if len(a) == 0 {
			parts = append(parts, "R")
		} else {
			parts = append(parts, "S("+strings.Join(a, ",")+")")
		}
	}
	return "[" + strings.Join(parts, " ") + "]"
}

func TestPlanShardsLlama(t *testing.T) {
	l := tinyLoaded(t, "LlamaForCausalLM", false, false)
	p, err := PlanShards(l.Model, 4, 1)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"model.embed_tokens.weight":                      "[]",
		"model.layers.0.input_layernorm.weight":          "[]",
		"model.layers.0.self_attn.q_proj.weight":         "[S(model)]",
		"model.layers.0.self_attn.k_proj.weight":         "[S(model)]",
		"model.layers.0.self_attn.v_proj.weight":         "[S(model)]",
		"model.layers.0.self_attn.o_proj.weight":         "[R S(model)]",
		"model.layers.1.mlp.gate_proj.weight":            "[S(model)]",
		"model.layers.1.mlp.up_proj.weight":              "[S(model)]",
		"model.layers.1.mlp.down_proj.weight":            "[R S(model)]",
		"model.layers.1.post_attention_layernorm.weight": "[]",
		"model.norm.weight":                              "[]",
		"lm_head.weight":                                 "[S(model)]",
	}
	for name, w := range want {
		if got := axes(p.Weight(name)); got != w {
			t.Errorf("%s: %s, want %s", name, got, w)
		}
	}
	ws := lm.Weights(l.Model)
	if len(p.Weights) != len(ws) {
		t.Errorf("%d specs for %d weights", len(p.Weights), len(ws))
	}
	// 7 split per layer, plus the head.
	if len(p.Split) != 2*7+1 {
		t.Errorf("split %d weights: %v", len(p.Split), p.Split)
	}
	// Every spec divides its weight, and sharding on the host then merging
	// gives the weight back (the specs agree with GoMLX's layout).
	for _, w := range ws {
		dims, err := ShardShape(p.Weight(w.Name), w.Shape)
		if err != nil {
			t.Fatalf("%s: %v", w.Name, err)
		}
		if slices.Contains(p.Split, w.Name) && dims[0]*dims[len(dims)-1]*4 != w.Shape[0]*w.Shape[len(w.Shape)-1] {
			t.Errorf("%s: shard %v of %v is not a quarter", w.Name, dims, w.Shape)
		}
		if w.Name != "model.layers.0.self_attn.o_proj.weight" {
			continue
		}
		full, err := l.Tensor(w.Name, dtypes.Float32)
		if err != nil {
			t.Fatal(err)
		}
		st, err := distributed.ShardTensor(p.Weight(w.Name), full)
		if err != nil {
			t.Fatal(err)
		}
		if st.NumShards() != 4 || fmt.Sprint(st.Shards()[1].Shape().Dimensions) != fmt.Sprint(dims) {
			t.Fatalf("%d shards of %v, want 4 of %v", st.NumShards(), st.Shards()[1].Shape(), dims)
		}
		// Shard 1 holds columns [16, 32) of every row.
		fullData := tensors.MustCopyFlatData[float32](full)
		shard := tensors.MustCopyFlatData[float32](st.Shards()[1])
		if shard[0] != fullData[16] || shard[17] != fullData[64+17] {
			t.Errorf("shard 1 does not hold columns 16..31")
		}
		merged, err := st.Merge()
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(tensors.MustCopyFlatData[float32](merged)) != fmt.Sprint(fullData) {
			t.Error("merged shards differ from the weight")
		}
	}
}

func TestPlanShardsTiedAndBias(t *testing.T) {
	l := tinyLoaded(t, "Qwen2ForCausalLM", true, true)
	p, err := PlanShards(l.Model, 2, 1)
	if err != nil {
		t.Fatal(err)
	}
	// The tied head is the embedding matrix: replicated, never split by vocabulary.
	if got := axes(p.Weight("model.embed_tokens.weight")); got != "[]" {
		t.Errorf("tied embeddings: %s, want replicated", got)
	}
	for _, b := range []string{"q_proj", "k_proj", "v_proj"} {
		name := "model.layers.1.self_attn." + b + ".bias"
		if got := axes(p.Weight(name)); got != "[S(model)]" {
			t.Errorf("%s: %s, want [S(model)]", name, got)
		}
	}
	// TP 1 splits nothing.
	p1, err := PlanShards(l.Model, 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(p1.Split) != 0 {
		t.Errorf("TP 1 split %v", p1.Split)
	}
}

func TestCheckParallel(t *testing.T) {
	spec := &lm.Spec{Heads: 12, KVHeads: 4, Intermediate: 2048}
	for _, tp := range []int{1, 2, 4} {
		if err := CheckParallel(spec, tp, 1); err != nil {
			t.Errorf("--tp %d: %v", tp, err)
		}
	}
	err := CheckParallel(spec, 8, 1)
	if !errors.Is(err, errs.ErrUsage) {
		t.Fatalf("--tp 8: %v, want a usage error", err)
	}
	for _, s := range []string{"Options.TP 8", "num_attention_heads 12", "try Options.TP 1 or Options.TP 2 or Options.TP 4"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q lacks %q", err, s)
		}
	}
	if strings.Contains(err.Error(), "intermediate_size") || strings.Contains(err.Error(), "num_key_value_heads") {
		t.Errorf("error %q names intermediate_size or num_key_value_heads, which divide (8 is a multiple of the 4 KV heads)", err)
	}
	// More devices than KV heads: each holds them all (lm.KVColumn).
	for _, tp := range []int{8, 16} {
		if err := CheckParallel(&lm.Spec{Heads: 16, KVHeads: 2, Intermediate: 512}, tp, 1); err != nil {
			t.Errorf("16 heads, 2 KV heads, --tp %d: %v", tp, err)
		}
	}
	err = CheckParallel(&lm.Spec{Heads: 12, KVHeads: 4, Intermediate: 96}, 6, 1)
	if err == nil || !strings.Contains(err.Error(), "num_key_value_heads 4 must divide the TP degree or be a multiple of it") {
		t.Errorf("4 KV heads at --tp 6: %v", err)
	}
	err = CheckParallel(&lm.Spec{Heads: 8, KVHeads: 8, Intermediate: 100}, 8, 1)
	if err == nil || !strings.Contains(err.Error(), "intermediate_size 100") {
		t.Errorf("intermediate 100 at --tp 8: %v", err)
	}
	for _, c := range [][2]int{{0, 1}, {-2, 1}, {1, 0}} {
		if err := CheckParallel(spec, c[0], c[1]); !errors.Is(err, errs.ErrUsage) {
			t.Errorf("tp %d dp %d: %v, want a usage error", c[0], c[1], err)
		}
	}
}

// TestPlanShardsOddTensor: a split weight whose axis does not divide is
// refused by name (MoE experts can be narrower than intermediate_size).
func TestPlanShardsOddTensor(t *testing.T) {
	l := tinyLoaded(t, "LlamaForCausalLM", true, false)
	m := oddModel{Model: l.Model}
	_, err := PlanShards(m, 2, 1)
	if !errors.Is(err, errs.ErrUsage) || !strings.Contains(err.Error(), "model.layers.0.mlp.experts.0.up_proj.weight") {
		t.Fatalf("err %v, want a usage error naming the expert", err)
	}
}

type oddModel struct{ lm.Model }

func (m oddModel) LayerWeights(i int) []lm.WeightSpec {
	ws := m.Model.LayerWeights(i)
	if i == 0 {
		ws = append(ws, lm.WeightSpec{Name: "model.layers.0.mlp.experts.0.up_proj.weight", Shape: []int{33, 64}, Matmul: true, TP: lm.Column})
	}
	return ws
}

// TestPlanShardsFollowsDeclarations: the split comes from WeightSpec.TP,
// whatever the weight is called.
func TestPlanShardsFollowsDeclarations(t *testing.T) {
	l := tinyLoaded(t, "LlamaForCausalLM", true, false)
	m := declModel{Model: l.Model}
	p, err := PlanShards(m, 2, 1)
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{
		"extra.mixer.in":                         "[S(model)]",
		"extra.mixer.out":                        "[R S(model)]",
		"extra.mixer.scale":                      "[]", // Row needs rank 2
		"extra.vocab":                            "[]", // 63 rows do not split over 2
		"model.layers.0.extra.q_proj.weight":     "[]", // declared replicated
		"model.layers.0.self_attn.q_proj.weight": "[S(model)]",
	} {
		if got := axes(p.Weight(name)); got != want {
			t.Errorf("%s: %s, want %s", name, got, want)
		}
	}
}

type declModel struct{ lm.Model }

func (m declModel) LayerWeights(i int) []lm.WeightSpec {
	ws := m.Model.LayerWeights(i)
	if i == 0 {
		ws = append(ws,
			lm.WeightSpec{Name: "extra.mixer.in", Shape: []int{32, 64}, TP: lm.Column},
			lm.WeightSpec{Name: "extra.mixer.out", Shape: []int{64, 32}, TP: lm.Row},
			lm.WeightSpec{Name: "extra.mixer.scale", Shape: []int{32}, TP: lm.Row},
			lm.WeightSpec{Name: "extra.vocab", Shape: []int{63, 64}, TP: lm.Vocab},
			lm.WeightSpec{Name: "model.layers.0.extra.q_proj.weight", Shape: []int{32, 64}, Matmul: true})
	}
	return ws
}

// TestPlanShardsKVReplicated: at a TP degree above the KV heads (8 on the
// tiny Qwen2's 4, with biases; and Qwen3-Next's 2 KV heads at 4), the key and value
// projections (lm.KVColumn) and the KV caches are whole on every device,
// the query and output projections and the MLP split as before; at a
// degree that divides them they split by KV head.
func TestPlanShardsKVReplicated(t *testing.T) {
	l := tinyLoaded(t, "Qwen2ForCausalLM", false, true)
	for _, c := range []struct {
		tp       int
		kv, key  string
		keyShard string
	}{
		{8, "[]", "[]", "[4 4 32 8]"},
		{4, "[S(model)]", "[R S(model)]", "[4 1 32 8]"},
	} {
		p, err := PlanShards(l.Model, c.tp, 1)
		if err != nil {
			t.Fatalf("--tp %d: %v", c.tp, err)
		}
		for name, want := range map[string]string{
			"model.layers.0.self_attn.q_proj.weight": "[S(model)]",
			"model.layers.0.self_attn.q_proj.bias":   "[S(model)]",
			"model.layers.0.self_attn.k_proj.weight": c.kv,
			"model.layers.0.self_attn.k_proj.bias":   c.kv,
			"model.layers.0.self_attn.v_proj.weight": c.kv,
			"model.layers.0.self_attn.v_proj.bias":   c.kv,
			"model.layers.0.self_attn.o_proj.weight": "[R S(model)]",
			"model.layers.1.mlp.gate_proj.weight":    "[S(model)]",
		} {
			if got := axes(p.Weight(name)); got != want {
				t.Errorf("--tp %d: %s %s, want %s", c.tp, name, got, want)
			}
		}
		st := l.Model.LayerState(0, 4, 32) // key [4, 4, 32, 8]
		if got := axes(p.State(st[0])); got != c.key {
			t.Errorf("--tp %d: key cache %s, want %s", c.tp, got, c.key)
		}
		scale := lm.StateSpec{Name: "key_scale", Shape: []int{4, 4, 32}, KV: true} // an int8 cache's
		if got := axes(p.State(scale)); got != c.key {
			t.Errorf("--tp %d: key scales %s, want %s", c.tp, got, c.key)
		}
		if c.tp == 8 { // and with two replicas, the batch over "data"
			p2, err := PlanShards(l.Model, 8, 2)
			if err != nil {
				t.Fatal(err)
			}
			if got := axes(p2.State(st[0])); got != "[S(data)]" {
				t.Errorf("--tp 8 --dp 2: key cache %s, want [S(data)]", got)
			}
		}
		if dims, err := ShardShape(p.State(st[0]), st[0].Shape); err != nil || fmt.Sprint(dims) != c.keyShard {
			t.Errorf("--tp %d: key cache shard %v (%v), want %s", c.tp, dims, err, c.keyShard)
		}
	}

	next := tinyNext(t)
	p, err := PlanShards(next.Model, 4, 1)
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{
		"model.layers.3.self_attn.q_proj.weight":          "[S(model)]",
		"model.layers.3.self_attn.k_proj.weight":          "[]",
		"model.layers.3.self_attn.v_proj.weight":          "[]",
		"model.layers.3.self_attn.o_proj.weight":          "[R S(model)]",
		"model.layers.0.linear_attn.in_proj_qkvz.weight":  "[]",
		"model.layers.3.mlp.experts.gate_up_proj":         "[R S(model)]",
		"model.layers.3.mlp.shared_expert.up_proj.weight": "[S(model)]",
	} {
		if got := axes(p.Weight(name)); got != want {
			t.Errorf("Qwen3-Next --tp 4: %s %s, want %s", name, got, want)
		}
	}
}

func TestShardPlanStateAndBatch(t *testing.T) {
	l := tinyLoaded(t, "LlamaForCausalLM", true, false)
	for _, c := range []struct {
		tp, dp             int
		key, conv, batch   string
		keyShard, valShard string
	}{
		{2, 1, "[R S(model)]", "[]", "[]", "[4 2 32 8]", "[4 2 8 32]"},
		{2, 2, "[S(data) S(model)]", "[S(data)]", "[S(data)]", "[2 2 32 8]", "[2 2 8 32]"},
		{1, 2, "[S(data)]", "[S(data)]", "[S(data)]", "[2 4 32 8]", "[2 4 8 32]"},
	} {
		p, err := PlanShards(l.Model, c.tp, c.dp)
		if err != nil {
			t.Fatal(err)
		}
		st := l.Model.LayerState(0, 4, 32) // key [4, 4, 32, 8], value [4, 4, 8, 32]
		if got := axes(p.State(st[0])); got != c.key {
			t.Errorf("tp %d dp %d: key %s, want %s", c.tp, c.dp, got, c.key)
		}
		if got := axes(p.State(lm.StateSpec{Name: "conv", Shape: []int{4, 3, 16}})); got != c.conv {
			t.Errorf("tp %d dp %d: conv %s, want %s", c.tp, c.dp, got, c.conv)
		}
		if got := axes(p.Batch()); got != c.batch {
			t.Errorf("tp %d dp %d: batch %s, want %s", c.tp, c.dp, got, c.batch)
		}
		for k, want := range []string{c.keyShard, c.valShard} {
			dims, err := ShardShape(p.State(st[k]), st[k].Shape)
			if err != nil || fmt.Sprint(dims) != want {
				t.Errorf("tp %d dp %d: %s shard %v (%v), want %s", c.tp, c.dp, st[k].Name, dims, err, want)
			}
		}
	}
	p, _ := PlanShards(l.Model, 2, 2)
	if _, err := ShardShape(p.Batch(), []int{3, 5}); err == nil {
		t.Error("a batch of 3 split over 2 devices")
	}
}

func TestNewRunnerParallelErrors(t *testing.T) {
	be := goBackend(t)
	l := tinyLoaded(t, "LlamaForCausalLM", true, false)
	// The go backend has one device: exit 4, before any weight is loaded.
	_, err := NewRunner(be, l, Options{TP: 2})
	if !errors.Is(err, errs.ErrDeviceUnavailable) {
		t.Fatalf("--tp 2 on the go backend: %v, want a device error", err)
	}
	if !strings.Contains(err.Error(), "Options.TP 2: needs 2 devices") || !strings.Contains(err.Error(), "has 1") {
		t.Errorf("message %q", err)
	}
	_, err = NewRunner(be, l, Options{TP: 2, DP: 2})
	if err == nil || !strings.Contains(err.Error(), "Options.TP 2: with Options.DP 2, needs 4 devices") {
		t.Errorf("tp 2 dp 2: %v", err)
	}
	// Sizes that do not split are usage errors, whatever the device.
	_, err = NewRunner(be, l, Options{TP: 3})
	if !errors.Is(err, errs.ErrUsage) {
		t.Errorf("--tp 3 with 8 heads: %v, want a usage error", err)
	}
	// TP 1 DP 1 is the single-device path.
	r, err := NewRunner(be, l, Options{TP: 1, DP: 1})
	if err != nil {
		t.Fatal(err)
	}
	if r.Parallel() != (Parallel{TP: 1, DP: 1, Devices: 1}) {
		t.Errorf("parallel %+v", r.Parallel())
	}
	r.Close()
}

// shardedLM builds a Runner with a DP x TP plan on the go backend, bypassing
// the device count, to check program specs and host-side state.
func shardedLM(t *testing.T, mode Mode, tp, dp int) *Runner {
	t.Helper()
	return shardedLMOf(t, tinyLoaded(t, "LlamaForCausalLM", false, false), mode, tp, dp)
}

func shardedLMOf(t *testing.T, l *lm.Loaded, mode Mode, tp, dp int) *Runner {
	t.Helper()
	plan, err := PlanShards(l.Model, tp, dp)
	if err != nil {
		t.Fatal(err)
	}
	r := &Runner{backend: goBackend(t), model: l.Model, spec: l.Model.Spec(),
		opts:    Options{Mode: mode, DType: dtypes.Float32, SplitMatmul: 1},
		weights: map[string]*tensors.Tensor{},
		tp:      &tpRun{plan: plan, nDev: tp * dp, weights: map[string][]*tensors.Tensor{}, specs: map[string]programSpecs{}}}
	if err := r.declareState(); err != nil {
		t.Fatal(err)
	}
	if err := r.loadWeights(l); err != nil {
		t.Fatal(err)
	}
	if err := r.makePrograms(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return r
}

func TestShardedProgramsSpecs(t *testing.T) {
	r := shardedLM(t, Compiled, 2, 2)
	nw := len(r.all)
	for _, name := range []string{"prefill", "decode"} {
		s, ok := r.tp.specs[name]
		if !ok {
			t.Fatalf("no %s program", name)
		}
		// tokens, pads, start, 2 layers x (key, value), weights.
		if len(s.in) != 3+4+nw || len(s.out) != 1+4 {
			t.Fatalf("%s: %d input and %d output specs, want %d and 5", name, len(s.in), len(s.out), 3+4+nw)
		}
		if axes(s.in[2]) != "[]" || axes(s.in[3]) != "[S(data) S(model)]" || axes(s.out[0]) != "[S(data)]" {
			t.Errorf("%s: start %s, key %s, logits %s", name, axes(s.in[2]), axes(s.in[3]), axes(s.out[0]))
		}
		for i, n := range r.all {
			if s.in[7+i] != r.tp.plan.Weight(n) {
				t.Errorf("%s: input %d is not %s's spec", name, 7+i, n)
			}
		}
	}
	// Weights were split on the host: 4 shards each, of the spec's shard shape.
	q := r.tp.weights["model.layers.1.self_attn.q_proj.weight"]
	if len(q) != 4 || fmt.Sprint(q[3].Shape().Dimensions) != "[32 64]" {
		t.Errorf("q_proj shards: %d, %v", len(q), q[0].Shape())
	}
	if len(r.weights) != 0 {
		t.Errorf("%d unsharded weights left", len(r.weights))
	}
	// The go backend has one device (and takes no sharded parameters): the
	// call fails with an error naming the program, not a panic.
	gen := r.NewState()
	_, err := gen.Prefill([][]int{{1, 2, 3}, {4, 5}}, 4)
	if err == nil || !strings.Contains(err.Error(), `program "prefill"`) {
		t.Errorf("prefill on the go backend: %v", err)
	}

	e := shardedLM(t, Eager, 2, 1)
	if len(e.tp.specs) != 3 { // embed, one layer kind, head
		t.Errorf("eager programs: %d", len(e.tp.specs))
	}
	for name, s := range e.tp.specs {
		if strings.HasPrefix(name, "layer/") && (len(s.in) != 3+2+9 || len(s.out) != 3) {
			t.Errorf("%s: %d in, %d out", name, len(s.in), len(s.out))
		}
	}
}

func TestAllocShardedState(t *testing.T) {
	r := shardedLM(t, Compiled, 2, 2)
	state, err := r.allocShardedState(4, 32)
	if err != nil {
		t.Fatal(err)
	}
	if len(state) != 2 || len(state[0]) != 2*4 {
		t.Fatalf("state %d layers, %d tensors per layer", len(state), len(state[0]))
	}
	// key then value, 4 devices each: [B/2, KV/2, S, D] and [B/2, KV/2, D, S].
	if got := fmt.Sprint(state[1][0].Shape().Dimensions, state[1][7].Shape().Dimensions); got != "[2 2 32 8] [2 2 8 32]" {
		t.Errorf("shard shapes %s", got)
	}
	_, err = r.allocShardedState(3, 32)
	if !errors.Is(err, errs.ErrUsage) || !strings.Contains(err.Error(), "Options.DP 2") {
		t.Errorf("batch 3 over dp 2: %v", err)
	}
}

func TestFlattenRegroup(t *testing.T) {
	mk := func(v float32) *tensors.Tensor { return tensors.FromValue([]float32{v}) }
	args := []shardedArg{
		{shards: []*tensors.Tensor{mk(0), mk(1)}},
		{shards: []*tensors.Tensor{mk(10), mk(11)}},
		{shards: []*tensors.Tensor{mk(20), mk(21)}},
	}
	flat, err := flattenArgs(args, 2, func(a shardedArg, d int) (any, error) { return a.shards[d], nil })
	if err != nil {
		t.Fatal(err)
	}
	var got []float32
	var outs []*tensors.Tensor
	for _, v := range flat {
		got = append(got, tensors.MustCopyFlatData[float32](v.(*tensors.Tensor))[0])
		outs = append(outs, v.(*tensors.Tensor))
	}
	if fmt.Sprint(got) != "[0 10 20 1 11 21]" {
		t.Errorf("device-major order %v", got)
	}
	groups, err := regroupOutputs(outs, 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(groups) != 3 || groups[1][0] != args[1].shards[0] || groups[2][1] != args[2].shards[1] {
		t.Error("regroup is not the inverse of flatten")
	}
	if _, err := regroupOutputs(outs[:5], 2); err == nil {
		t.Error("5 outputs over 2 devices accepted")
	}
	if _, err := flattenArgs([]shardedArg{{shards: args[0].shards[:1]}}, 2, nil); err == nil {
		t.Error("an input with 1 shard for 2 devices accepted")
	}
}

func TestGatherRows(t *testing.T) {
	l := tinyLoaded(t, "LlamaForCausalLM", true, false)
	plan, err := PlanShards(l.Model, 2, 2)
	if err != nil {
		t.Fatal(err)
	}
	r := &Runner{tp: &tpRun{plan: plan, nDev: 4}}
	// Devices 0, 1 hold rows 0-1 ([data 0]); 2, 3 rows 2-3.
	shard := func(a, b float32) *tensors.Tensor {
		return tensors.FromFlatDataAndDimensions([]float32{a, a, b, b}, 2, 2)
	}
	out, err := r.gatherRows([]*tensors.Tensor{shard(0, 1), shard(0, 1), shard(2, 3), shard(2, 3)})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(out.Shape().Dimensions, tensors.MustCopyFlatData[float32](out)) != "[4 2] [0 0 1 1 2 2 3 3]" {
		t.Errorf("gathered %v %v", out.Shape(), tensors.MustCopyFlatData[float32](out))
	}
}

// TestPlanShardsMoE: expert stacks split as a dense MLP is (gate_up by its
// output rows, down by its inputs, every expert alike), the per-expert
// parts (held so by --experts dense) by their own declarations, the router
// replicated; the graph formulation builds sharded programs and its stacks
// are cut into shards of the spec's shape, while --experts host is refused.
func TestPlanShardsMoE(t *testing.T) {
	for _, c := range []struct {
		name string
		m    qwenref.MoE
	}{{"qwen3-moe", qwenref.TinyQwen3MoE()}, {"qwen2-moe", qwenref.TinyQwen2MoE()}} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := c.m.Write(dir); err != nil {
				t.Fatal(err)
			}
			l, err := lmckpt.Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			p, err := PlanShards(l.Model, 2, 1)
			if err != nil {
				t.Fatal(err)
			}
			want := map[string]string{
				"model.layers.1.mlp.experts.gate_up_proj":           "[R S(model)]",
				"model.layers.1.mlp.experts.down_proj":              "[R R S(model)]",
				"model.layers.1.mlp.experts.3.gate_proj.weight":     "[S(model)]",
				"model.layers.1.mlp.experts.3.up_proj.weight":       "[S(model)]",
				"model.layers.1.mlp.experts.3.down_proj.weight":     "[R S(model)]",
				"model.layers.1.mlp.gate.weight":                    "[]",
				"model.layers.1.mlp.shared_expert.gate_proj.weight": "[S(model)]",
				"model.layers.1.mlp.shared_expert.down_proj.weight": "[R S(model)]",
				"model.layers.1.mlp.shared_expert_gate.weight":      "[]",
			}
			if !c.m.Qwen2 {
				for n := range want {
					if strings.Contains(n, "shared_expert") {
						delete(want, n)
					}
				}
			}
			for name, w := range want {
				if _, ok := p.Weights[name]; !ok {
					t.Errorf("%s: not in the plan", name)
					continue
				}
				if got := axes(p.Weight(name)); got != w {
					t.Errorf("%s: %s, want %s", name, got, w)
				}
			}

			r := shardedLMOf(t, l, Compiled, 2, 1)
			gu := r.tp.weights["model.layers.1.mlp.experts.gate_up_proj"]
			down := r.tp.weights["model.layers.1.mlp.experts.down_proj"]
			e, in, h := c.m.Experts, c.m.MoEIntermediate, c.m.Hidden
			if len(gu) != 2 || fmt.Sprint(gu[1].Shape().Dimensions) != fmt.Sprint([]int{e, in, h}) ||
				len(down) != 2 || fmt.Sprint(down[1].Shape().Dimensions) != fmt.Sprint([]int{e, h, in / 2}) {
				t.Errorf("expert shards: gate_up %d x %v, down %d x %v", len(gu), gu[0].Shape(), len(down), down[0].Shape())
			}
			if _, ok := r.tp.specs["decode"]; !ok {
				t.Errorf("no sharded decode program")
			}

			be := goBackend(t)
			_, err = NewRunner(be, l, Options{TP: 2})
			if !errors.Is(err, errs.ErrDeviceUnavailable) {
				t.Errorf("--tp 2, graph experts, on the go backend: %v, want the device-count error", err)
			}
			_, err = NewRunner(be, l, Options{TP: 2, Experts: ExpertsHost})
			if !errors.Is(err, errs.ErrUnsupported) || !strings.Contains(err.Error(), "Options.Experts host") {
				t.Errorf("--tp 2 --experts host: %v, want unsupported naming --experts host", err)
			}
		})
	}
}

// TestPlanShardsNewFamilies: GPT-OSS (experts read from MXFP4, which a
// sharded Runner decodes on the host before splitting), the 26B-shaped
// Gemma 4, DeepSeek-V3, GLM-4.5 and MiniMax-M2 plan their expert stacks
// column and row parallel, and the sharded Runner builds its shards.
func TestPlanShardsNewFamilies(t *testing.T) {
	gpt := gptossref.Tiny()
	g4 := gemma4ref.TinyMoE()
	ds := dsref.TinyDeepSeek()
	glm := dsref.TinyGLM()
	mm := dsref.TinyMiniMax()
	l4 := llama4ref.TinyScout()
	gh := granitehref.TinyHybrid()
	nh := nemotronhref.TinyNano()
	lf := lfm2ref.TinyMoE()
	for _, c := range []struct {
		name    string
		write   func(dir string) error
		gateUp  string
		down    string
		e, i, h int
		more    map[string]string
	}{
		{"gpt-oss", gpt.Write, "model.layers.1.mlp.experts.gate_up_proj", "model.layers.1.mlp.experts.down_proj", gpt.Experts, gpt.Intermediate, gpt.Hidden, nil},
		{"gemma4-moe", g4.Write, "model.language_model.layers.1.experts.gate_up_proj", "model.language_model.layers.1.experts.down_proj", g4.Experts, g4.MoEIntermediate, g4.Hidden, nil},
		// MLA: the query and kv_b_proj (absorbed, read whole) split by
		// heads, the latent's projection and the shared-expert gate kept.
		{"deepseek-v3", ds.Write, "model.layers.1.mlp.experts.gate_up_proj", "model.layers.1.mlp.experts.down_proj", ds.Experts, ds.MoEIntermediate, ds.Hidden,
			map[string]string{
				"model.layers.1.self_attn.q_b_proj.weight":           "[S(model)]",
				"model.layers.1.self_attn.kv_b_proj.weight":          "[S(model)]",
				"model.layers.1.self_attn.o_proj.weight":             "[R S(model)]",
				"model.layers.1.self_attn.kv_a_proj_with_mqa.weight": "[]",
				"model.layers.1.self_attn.q_a_proj.weight":           "[]",
				"model.layers.1.mlp.gate.e_score_correction_bias":    "[]",
			}},
		// GLM-4.5: q/k/v and their biases split by heads, o_proj by rows,
		// the shared experts column and row parallel.
		{"glm-4.5", glm.Write, "model.layers.1.mlp.experts.gate_up_proj", "model.layers.1.mlp.experts.down_proj", glm.Experts, glm.MoEIntermediate, glm.Hidden,
			map[string]string{
				"model.layers.1.self_attn.q_proj.weight":             "[S(model)]",
				"model.layers.1.self_attn.k_proj.bias":               "[S(model)]",
				"model.layers.1.self_attn.o_proj.weight":             "[R S(model)]",
				"model.layers.1.mlp.shared_experts.up_proj.weight":   "[S(model)]",
				"model.layers.1.mlp.shared_experts.down_proj.weight": "[R S(model)]",
				"model.layers.1.mlp.gate.weight":                     "[]",
			}},
		// MiniMax-M2: the q/k norms over whole projections split with the
		// heads they norm; the block's correction bias whole.
		{"minimax-m2", mm.Write, "model.layers.1.block_sparse_moe.experts.gate_up_proj", "model.layers.1.block_sparse_moe.experts.down_proj",
			mm.Experts, mm.Intermediate, mm.Hidden,
			map[string]string{
				"model.layers.1.self_attn.q_norm.weight":                  "[S(model)]",
				"model.layers.1.self_attn.k_norm.weight":                  "[S(model)]",
				"model.layers.1.block_sparse_moe.e_score_correction_bias": "[]",
			}},
		// Llama 4: the expert stacks stored transposed ([E, in, out]),
		// split as held ([E, out, in]); the ungated shared expert column
		// and row parallel, the router whole.
		{"llama4", l4.Write, "model.layers.1.feed_forward.experts.gate_up_proj", "model.layers.1.feed_forward.experts.down_proj",
			l4.Experts, l4.Intermediate, l4.Hidden,
			map[string]string{
				"model.layers.1.self_attn.q_proj.weight":                     "[S(model)]",
				"model.layers.1.self_attn.o_proj.weight":                     "[R S(model)]",
				"model.layers.1.feed_forward.shared_expert.up_proj.weight":   "[S(model)]",
				"model.layers.1.feed_forward.shared_expert.down_proj.weight": "[R S(model)]",
				"model.layers.1.feed_forward.router.weight":                  "[]",
			}},
		// Granite 4.0-H: the Mamba-2 mixer whole on every device (its state
		// is not split by head), the attention layer's projections and the
		// shared MLP split, the router whole.
		{"granite-4.0-h", gh.Write, "model.layers.1.block_sparse_moe.experts.gate_up_proj", "model.layers.1.block_sparse_moe.experts.down_proj",
			gh.Experts, gh.Intermediate, gh.Hidden,
			map[string]string{
				"model.layers.0.mamba.in_proj.weight":            "[]",
				"model.layers.0.mamba.out_proj.weight":           "[]",
				"model.layers.1.self_attn.q_proj.weight":         "[S(model)]",
				"model.layers.1.self_attn.o_proj.weight":         "[R S(model)]",
				"model.layers.0.shared_mlp.input_linear.weight":  "[S(model)]",
				"model.layers.0.shared_mlp.output_linear.weight": "[R S(model)]",
				"model.layers.1.block_sparse_moe.gate.weight":    "[]",
			}},
		// Nemotron 3 Nano: its relu² experts (up and down stacks, no gate)
		// column and row parallel, the shared expert too, the Mamba-2
		// mixer and the router whole.
		{"nemotron-3-nano", nh.Write, "backbone.layers.1.mixer.experts.up_proj", "backbone.layers.1.mixer.experts.down_proj",
			nh.Experts, nh.MoEIntermediate, nh.Hidden,
			map[string]string{
				"backbone.layers.0.mixer.in_proj.weight":                  "[]",
				"backbone.layers.2.mixer.q_proj.weight":                   "[S(model)]",
				"backbone.layers.2.mixer.o_proj.weight":                   "[R S(model)]",
				"backbone.layers.1.mixer.shared_experts.up_proj.weight":   "[S(model)]",
				"backbone.layers.1.mixer.shared_experts.down_proj.weight": "[R S(model)]",
				"backbone.layers.1.mixer.gate.weight":                     "[]",
			}},
		// LFM2-MoE: the short convolution whole on every device (in_proj's
		// thirds would each need splitting), the attention layer's
		// projections and the dense MLPs split, the router and its expert
		// bias whole.
		{"lfm2-moe", lf.Write, "model.layers.3.feed_forward.experts.gate_up_proj", "model.layers.3.feed_forward.experts.down_proj",
			lf.Experts, lf.MoEIntermediate, lf.Hidden,
			map[string]string{
				"model.layers.0.conv.in_proj.weight":       "[]",
				"model.layers.0.conv.conv.weight":          "[]",
				"model.layers.0.conv.out_proj.weight":      "[]",
				"model.layers.2.self_attn.q_proj.weight":   "[S(model)]",
				"model.layers.2.self_attn.out_proj.weight": "[R S(model)]",
				"model.layers.0.feed_forward.w1.weight":    "[S(model)]",
				"model.layers.0.feed_forward.w2.weight":    "[R S(model)]",
				"model.layers.3.feed_forward.gate.weight":  "[]",
				"model.layers.3.feed_forward.expert_bias":  "[]",
			}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := c.write(dir); err != nil {
				t.Fatal(err)
			}
			l, err := lmckpt.Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			p, err := PlanShards(l.Model, 2, 1)
			if err != nil {
				t.Fatal(err)
			}
			if got := axes(p.Weight(c.gateUp)); got != "[R S(model)]" {
				t.Errorf("%s: %s, want column (axis 1)", c.gateUp, got)
			}
			if got := axes(p.Weight(c.down)); got != "[R R S(model)]" {
				t.Errorf("%s: %s, want row (axis 2)", c.down, got)
			}
			for name, want := range c.more {
				if got := axes(p.Weight(name)); got != want {
					t.Errorf("%s: %s, want %s", name, got, want)
				}
			}
			r := shardedLMOf(t, l, Compiled, 2, 1)
			gu, down := r.tp.weights[c.gateUp], r.tp.weights[c.down]
			rows := c.i // each device's half of a gate_up stack's 2·I rows
			if strings.HasSuffix(c.gateUp, ".up_proj") {
				rows = c.i / 2 // half of an ungated up stack's I
			}
			if len(gu) != 2 || fmt.Sprint(gu[1].Shape().Dimensions) != fmt.Sprint([]int{c.e, rows, c.h}) ||
				len(down) != 2 || fmt.Sprint(down[1].Shape().Dimensions) != fmt.Sprint([]int{c.e, c.h, c.i / 2}) {
				t.Errorf("expert shards: gate_up %d x %v, down %d x %v", len(gu), gu[0].Shape(), len(down), down[0].Shape())
			}
		})
	}
}

// TestHostStateBytes: the host builds every device's shard of the layer
// state, so a state the devices split counts once and one they all hold
// whole counts once a device: the tiny Qwen2's KV caches split by KV head
// at --tp 4 (once) and whole above its 4 KV heads at --tp 8 (8 times);
// Qwen3-Next's recurrent state is whole on every device at any degree.
func TestHostStateBytes(t *testing.T) {
	f32, none := dtypes.Float32, dtypes.InvalidDType
	l := tinyLoaded(t, "Qwen2ForCausalLM", false, true)
	one, _ := lm.StateBytes(l.Model, 2, 64, f32, none)
	for tp, copies := range map[int]int64{1: 1, 4: 1, 8: 8} {
		if n, ok := HostStateBytes(l.Model, tp, 1, 2, 64, f32, none); !ok || n != copies*one {
			t.Errorf("--tp %d: %d bytes (ok %v), want %d x %d", tp, n, ok, copies, one)
		}
	}
	if n, _ := HostStateBytes(l.Model, 4, 2, 2, 64, f32, none); n != one { // the batch split over "data" too
		t.Errorf("--tp 4 --dp 2: %d bytes, want %d", n, one)
	}

	m := tinyNext(t).Model
	var kvBytes, recBytes int64
	for i := 0; i < m.Spec().Layers; i++ {
		n, _ := lm.SpecsBytes(lm.HeldState(m, i, 1, 64, none), f32, none)
		if m.LayerKind(i) == lm.KindFull {
			kvBytes += n
		} else {
			recBytes += n
		}
	}
	for tp, want := range map[int]int64{2: kvBytes + 2*recBytes, 4: 4 * (kvBytes + recBytes)} {
		if n, ok := HostStateBytes(m, tp, 1, 1, 64, f32, none); !ok || n != want {
			t.Errorf("Qwen3-Next --tp %d: %d bytes (ok %v), want %d (KV %d, recurrent %d)", tp, n, ok, want, kvBytes, recBytes)
		}
	}
}

// TestF32WeightsKept: a weight the model declares F32 (DeepSeek-V3's
// router correction bias) is held and read in float32 under bfloat16
// compute, the rest in bfloat16, and HeldBytes counts it so.
func TestF32WeightsKept(t *testing.T) {
	ds := dsref.TinyDeepSeek()
	dir := t.TempDir()
	if err := ds.Write(dir); err != nil {
		t.Fatal(err)
	}
	l, err := lmckpt.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	be := goBackend(t)
	opts := Options{DType: dtypes.BFloat16}
	r, err := NewRunner(be, l, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	const bias = "model.layers.1.mlp.gate.e_score_correction_bias"
	if dt := r.weights[bias].DType(); dt != dtypes.Float32 || !r.keepF32[bias] {
		t.Errorf("%s held as %s (kept %v), want float32", bias, dt, r.keepF32[bias])
	}
	if dt := r.weights["model.layers.1.input_layernorm.weight"].DType(); dt != dtypes.BFloat16 {
		t.Errorf("a norm held as %s, want bfloat16", dt)
	}
	if got, want := r.WeightBytes(), l.HeldBytes(HoldingOf(tpu.CapabilitiesOf(be), opts)); got != want {
		t.Errorf("holds %d bytes, HeldBytes %d", got, want)
	}
	if _, err := r.NewState().Prefill([][]int{{1, 7, 21, 33}}, 1); err != nil {
		t.Fatal(err)
	}
}

// TestRoutersNotQuantized: --quantize int8 and int4 leave a mixture of
// experts' router in its float width (lm.WeightSpec.Router), while the
// expert stacks and the projections are quantized.
func TestRoutersNotQuantized(t *testing.T) {
	dir := t.TempDir()
	if err := qwenref.TinyQwen3MoE().Write(dir); err != nil {
		t.Fatal(err)
	}
	l, err := lmckpt.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for _, q := range []string{"int8", "int4"} {
		r, err := NewRunner(goBackend(t), l, Options{Quantize: q})
		if err != nil {
			t.Fatal(err)
		}
		const router = "model.layers.1.mlp.gate.weight"
		if w := r.weights[router]; w == nil || w.DType() != dtypes.Float32 || r.weights[router+scalesSuffix] != nil {
			t.Errorf("--quantize %s: the router is held as %v", q, w)
		}
		if w := r.weights["model.layers.1.mlp.experts.gate_up_proj"]; w == nil || w.DType().IsFloat() {
			t.Errorf("--quantize %s: the expert stack is held as %v, want quantized", q, w)
		}
		if _, err := r.NewState().Prefill([][]int{{1, 7, 21, 33}}, 1); err != nil {
			t.Fatal(err)
		}
		r.Close()
	}
}
