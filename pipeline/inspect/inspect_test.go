package inspect_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tputool/tputool/loader"
	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/loader/hub"
	"github.com/tputool/tputool/loader/hub/hubtest"
	"github.com/tputool/tputool/loader/safetensors"
	"github.com/tputool/tputool/pipeline/inspect"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
	"github.com/tputool/tputool/tpu"
)

// hybridConfig is a Qwen3.5-shaped config: a multimodal wrapper whose
// text_config has three gated-delta-net layers and one full-attention
// layer, and 4 experts with 2 active per token.
const hybridConfig = `{
  "architectures": ["Qwen3_5ForConditionalGeneration"],
  "model_type": "qwen3_5",
  "vision_config": {"depth": 1, "hidden_size": 16},
  "text_config": {
    "model_type": "qwen3_5_text",
    "num_hidden_layers": 4, "hidden_size": 16, "intermediate_size": 24,
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8,
    "vocab_size": 32, "max_position_embeddings": 1024, "tie_word_embeddings": false,
    "layer_types": ["linear_attention", "linear_attention", "linear_attention", "full_attention"],
    "linear_num_key_heads": 2, "linear_num_value_heads": 4,
    "linear_key_head_dim": 4, "linear_value_head_dim": 6, "linear_conv_kernel_dim": 4,
    "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 8,
    "some_future_field": {"kept": true}
  }
}`

type spec struct {
	name  string
	dtype safetensors.DType
	shape []int
}

func (s spec) tensor(t *testing.T) safetensors.Tensor {
	n := 1
	for _, d := range s.shape {
		n *= d
	}
	x, err := safetensors.Float32Tensor(s.name, s.dtype, s.shape, make([]float32, n))
	if err != nil {
		t.Fatal(err)
	}
	return x
}

// hybridTensors lists the checkpoint; the comments give each tensor's
// parameter count for the hand computation in TestHybridNumbers.
func hybridTensors() (shard1, shard2 []spec) {
	bf, f32 := safetensors.BF16, safetensors.F32
	shard1 = []spec{
		{"model.language_model.embed_tokens.weight", bf, []int{32, 16}}, // 512
		{"lm_head.weight", bf, []int{32, 16}},                           // 512
		{"model.language_model.norm.weight", f32, []int{16}},            // 16
		{"model.visual.blocks.0.attn.qkv.weight", bf, []int{48, 16}},    // 768 vision
		{"model.visual.patch_embed.proj.weight", f32, []int{16, 12}},    // 192 vision
		{"mtp.fc.weight", bf, []int{16, 32}},                            // 512 mtp
	}
	for i := 0; i < 4; i++ {
		p := fmt.Sprintf("model.language_model.layers.%d.", i)
		layer := []spec{
			{p + "input_layernorm.weight", f32, []int{16}}, // 16
			{p + "mlp.gate.weight", bf, []int{4, 16}},      // 64 router
		}
		if i == 3 {
			layer = append(layer, spec{p + "self_attn.q_proj.weight", bf, []int{32, 16}}) // 512
		} else {
			layer = append(layer, spec{p + "linear_attn.in_proj.weight", bf, []int{16, 16}}) // 256
		}
		for e := 0; e < 4; e++ { // 3 x 128 per expert
			q := fmt.Sprintf("%smlp.experts.%d.", p, e)
			layer = append(layer, spec{q + "gate_proj.weight", bf, []int{8, 16}},
				spec{q + "up_proj.weight", bf, []int{8, 16}}, spec{q + "down_proj.weight", bf, []int{16, 8}})
		}
		if i < 2 {
			shard1 = append(shard1, layer...)
		} else {
			shard2 = append(shard2, layer...)
		}
	}
	return shard1, shard2
}

// writeHybrid writes the checkpoint as two shards plus an index.
func writeHybrid(t *testing.T) (dir string, files map[string][]byte) {
	dir = t.TempDir()
	s1, s2 := hybridTensors()
	files = map[string][]byte{"config.json": []byte(hybridConfig)}
	weightMap := map[string]string{}
	var total int64
	for name, specs := range map[string][]spec{"model-00001-of-00002.safetensors": s1, "model-00002-of-00002.safetensors": s2} {
		var ts []safetensors.Tensor
		for _, s := range specs {
			x := s.tensor(t)
			ts = append(ts, x)
			weightMap[s.name] = name
			total += int64(len(x.Data))
		}
		b, err := safetensors.Encode(ts, map[string]string{"format": "pt"})
		if err != nil {
			t.Fatal(err)
		}
		files[name] = b
	}
	files["model.safetensors.index.json"], _ = json.Marshal(map[string]any{
		"metadata": map[string]any{"total_size": total}, "weight_map": weightMap})
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir, files
}

func TestHybridNumbers(t *testing.T) {
	dir, files := writeHybrid(t)
	m, err := resolve(context.Background(), dir, loader.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var fitReq tpu.FitRequest
	r, err := inspect.Run(context.Background(), m, inspect.Options{Batch: 2, Context: 100, DType: "bf16",
		Fit: func(req tpu.FitRequest) ([]tpu.FitResult, error) { fitReq = req; return tpu.FitAll(req) }})
	if err != nil {
		t.Fatal(err)
	}
	checkHybrid(t, r, files)
	if r.Source != "local" {
		t.Errorf("source %q", r.Source)
	}
	// Weights 17568 B; state = KV 12800 + recurrent 3744, the recurrent
	// state whole on every chip under tensor parallelism.
	if fitReq.WeightBytes != 17568 || fitReq.StateBytes != 16544 || fitReq.WholeStateBytes != 3744 || fitReq.NumHeads != 4 || fitReq.NumKVHeads != 2 {
		t.Errorf("fit request %+v", fitReq)
	}
	if len(r.Fit) != len(tpu.Catalog()) {
		t.Fatalf("fit rows %d", len(r.Fit))
	}
	for i, f := range r.Fit {
		// A tiny model fits the smallest slice, at TP 2 where it has two
		// chips or more: at 4, above the 2 KV heads, its state (about the
		// size of its weights) would sit whole on every chip.
		chip := tpu.Catalog()[i]
		if !f.Fits || f.Chips != chip.SliceSizes[0] || f.TP != min(chip.SliceSizes[0], 2) {
			t.Errorf("fit %s = %+v", chip.Generation, f)
		}
	}
}

// checkHybrid compares a report with the values computed by hand:
//
//	text path: embed 512 + lm_head 512 + norm 16 + 4 layers x (layernorm 16
//	  + router 64) + q_proj 512 + 3 x in_proj 256 + 16 experts x 384
//	  = 512+512+16+320+512+768+6144 = 8784
//	skipped:  vision 768+192 = 960 (2 tensors), mtp 512 (1 tensor)
//	total:    8784 + 960 + 512 = 10256
//	experts:  6144; active = 8784 - 6144 + 6144*2/4 = 5712
//	F32:      16 + 4x16 + 192 = 272 params (1088 B); BF16: 9984 (19968 B)
//	weights at bf16: 8784 x 2 = 17568 B
//	KV: 1 full layer x batch 2 x 100 tokens x 2 (K,V) x 2 heads x 8 dims x 2 B = 12800 B
//	recurrent: 3 layers x batch 2 x [conv (2x2x4 + 4x6) x 3 x 2 B (bf16) + matrix 4x4x6 x 4 B]
//	  = 3 x 2 x (240 + 384) = 3744 B
func checkHybrid(t *testing.T, r *inspect.Report, files map[string][]byte) {
	t.Helper()
	p := r.Params
	if p.Total != 10256 || p.Used != 8784 || p.Experts != 6144 || p.Active != 5712 || p.Bytes != 21056 {
		t.Errorf("params %+v", p)
	}
	want := []inspect.DTypeCount{{DType: "BF16", Params: 9984, Bytes: 19968}, {DType: "F32", Params: 272, Bytes: 1088}}
	if fmt.Sprint(p.ByDType) != fmt.Sprint(want) {
		t.Errorf("by dtype %+v, want %+v", p.ByDType, want)
	}
	if p.Tensors != 6+4*15 {
		t.Errorf("tensors %d", p.Tensors)
	}
	var fileBytes int64
	for _, name := range []string{"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"} {
		fileBytes += int64(len(files[name]))
	}
	if p.FileBytes != fileBytes || len(r.Files) != 2 {
		t.Errorf("files %+v (%d bytes), want %d", r.Files, p.FileBytes, fileBytes)
	}
	if fmt.Sprint(r.Skipped) != fmt.Sprint([]inspect.SkippedGroup{{Kind: "mtp", Tensors: 1, Params: 512}, {Kind: "vision", Tensors: 2, Params: 960}}) {
		t.Errorf("skipped %+v", r.Skipped)
	}
	tx := r.Text
	if tx.Layers != 4 || tx.FullAttentionLayers != 1 || tx.LinearAttentionLayers != 3 || tx.Heads != 4 || tx.KVHeads != 2 ||
		tx.HeadDim != 8 || tx.Vocab != 32 || tx.MoE == nil || tx.MoE.Experts != 4 || tx.MoE.ExpertsPerToken != 2 {
		t.Errorf("text %+v", tx)
	}
	mem := r.Memory
	if mem.Weights != 17568 || mem.KVCache != 12800 || mem.Recurrent != 3744 || mem.Total != 34112 || mem.DType != "bf16" {
		t.Errorf("memory %+v", mem)
	}
	if !strings.Contains(strings.Join(r.Notes, "\n"), "text-only path") {
		t.Errorf("notes %q", r.Notes)
	}
	if r.Architecture != "Qwen3_5ForConditionalGeneration" || r.Kind != "transformers" {
		t.Errorf("arch %q kind %q", r.Architecture, r.Kind)
	}
}

func TestHybridRemoteMatchesLocal(t *testing.T) {
	_, files := writeHybrid(t)
	var hf []hubtest.File
	for name, b := range files {
		hf = append(hf, hubtest.File{Path: name, Data: b, LFS: strings.HasSuffix(name, ".safetensors")})
	}
	srv := hubtest.New(t)
	srv.AddRepo(hubtest.Repo{ID: "org/hybrid", Files: hf})
	c := &hub.Client{Endpoint: srv.URL(), Cache: hub.Cache{Dir: t.TempDir()}, Retries: 1,
		Sleep: func(context.Context, time.Duration) error { return nil }}
	m, err := resolve(context.Background(), "org/hybrid", loader.Options{Client: c, MetadataOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	r, err := inspect.Run(context.Background(), m, inspect.Options{Batch: 2, Context: 100})
	if err != nil {
		t.Fatal(err)
	}
	checkHybrid(t, r, files)
	if r.Source != "remote" || !r.Files[0].Remote {
		t.Errorf("source %q", r.Source)
	}
	// Two range reads per shard, never a whole file.
	if n := srv.Count(func(r hubtest.Request) bool { return r.Server == "cdn" }); n != 4 {
		t.Errorf("CDN requests %d, want 4", n)
	}
	if n := srv.Count(func(r hubtest.Request) bool { return r.Server == "cdn" && r.Range == "" }); n != 0 {
		t.Error("a weight file was downloaded")
	}
}

func TestDTypesAndOptions(t *testing.T) {
	dir, _ := writeHybrid(t)
	m, err := resolve(context.Background(), dir, loader.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for dtype, want := range map[string]int64{"f32": 35136, "auto": 17728, "fp8": 8784} {
		r, err := inspect.Run(context.Background(), m, inspect.Options{DType: dtype})
		if err != nil {
			t.Fatal(err)
		}
		if r.Memory.Weights != want {
			t.Errorf("%s weights = %d, want %d", dtype, r.Memory.Weights, want)
		}
	}
	r, err := inspect.Run(context.Background(), m, inspect.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// Defaults: batch 1, context 4096, bf16: KV = 4096 x 64 B; recurrent = 3 x 624 B.
	if r.Memory.Batch != 1 || r.Memory.Context != 4096 || r.Memory.KVCache != 4096*64 || r.Memory.Recurrent != 1872 {
		t.Errorf("defaults %+v", r.Memory)
	}
	if !strings.Contains(strings.Join(r.Notes, "\n"), "exceeds max_position_embeddings 1024") {
		t.Errorf("notes %q", r.Notes)
	}
	if _, err := inspect.Run(context.Background(), m, inspect.Options{DType: "int3"}); err == nil {
		t.Error("bad dtype accepted")
	}
}

func TestTextConfigVariants(t *testing.T) {
	parse := func(s string) *inspect.Text {
		t.Helper()
		m, err := config.ParseModel([]byte(s))
		if err != nil {
			t.Fatal(err)
		}
		tx, err := inspect.TextConfig(m)
		if err != nil {
			t.Fatal(err)
		}
		return tx
	}
	// GPT-2 spellings, MHA defaults.
	g := parse(`{"n_layer": 2, "n_embd": 12, "n_head": 3, "vocab_size": 50, "n_positions": 64}`)
	if g.KVHeads != 3 || g.HeadDim != 4 || g.FullAttentionLayers != 2 || g.MaxPositions != 64 {
		t.Errorf("gpt2 %+v", g)
	}
	// Mistral-style model-wide sliding window: KV capped at the window.
	s := parse(`{"num_hidden_layers": 2, "hidden_size": 8, "num_attention_heads": 2, "num_key_value_heads": 1, "sliding_window": 50}`)
	if s.SlidingAttentionLayers != 2 || s.StateBytes(1, 100, 2).KVCache != 2*50*2*1*4*2 {
		t.Errorf("sliding %+v %+v", s, s.StateBytes(1, 100, 2))
	}
	// Qwen2 turns it off.
	q := parse(`{"num_hidden_layers": 2, "hidden_size": 8, "num_attention_heads": 2, "sliding_window": 50, "use_sliding_window": false}`)
	if q.FullAttentionLayers != 2 {
		t.Errorf("qwen2 %+v", q)
	}
	// Qwen2 with the window on, and dots.llm1 (no use_sliding_window):
	// the layers from max_window_layers on slide.
	w := parse(`{"num_hidden_layers": 4, "hidden_size": 8, "num_attention_heads": 2, "sliding_window": 50, "use_sliding_window": true, "max_window_layers": 3}`)
	d := parse(`{"num_hidden_layers": 4, "hidden_size": 8, "num_attention_heads": 2, "sliding_window": 50, "max_window_layers": 4}`)
	if w.FullAttentionLayers != 3 || w.SlidingAttentionLayers != 1 || w.SlidingWindow != 50 || d.FullAttentionLayers != 4 || d.SlidingAttentionLayers != 0 {
		t.Errorf("max_window_layers: %+v, %+v", w, d)
	}
	// ERNIE 4.5's moe_* spellings.
	e := parse(`{"num_hidden_layers": 2, "hidden_size": 8, "num_attention_heads": 2, "moe_num_experts": 8, "moe_k": 2, "moe_num_shared_experts": 1}`)
	if e.MoE == nil || e.MoE.Experts != 8 || e.MoE.ExpertsPerToken != 2 || e.MoE.SharedExperts != 1 {
		t.Errorf("ernie %+v", e.MoE)
	}
	// Early Qwen3-Next configs: full_attention_interval.
	n := parse(`{"num_hidden_layers": 8, "hidden_size": 8, "num_attention_heads": 2, "full_attention_interval": 4,
		"linear_num_key_heads": 1, "linear_num_value_heads": 1, "linear_key_head_dim": 2, "linear_value_head_dim": 2, "linear_conv_kernel_dim": 4}`)
	if n.FullAttentionLayers != 2 || n.LinearAttentionLayers != 6 {
		t.Errorf("qwen3-next %+v", n)
	}
	m, _ := config.ParseModel([]byte(`{"num_hidden_layers": 2, "hidden_size": 8, "num_attention_heads": 2, "layer_types": ["linear_attention", "full_attention"]}`))
	if _, err := inspect.TextConfig(m); err == nil || !strings.Contains(err.Error(), "linear_num_key_heads") {
		t.Errorf("missing linear dims: %v", err)
	}
	m, _ = config.ParseModel([]byte(`{"hidden_size": 8}`))
	if _, err := inspect.TextConfig(m); err == nil || !strings.Contains(err.Error(), "num_hidden_layers") {
		t.Errorf("missing layers: %v", err)
	}
}

func TestDiffusersComponents(t *testing.T) {
	dir := t.TempDir()
	write := func(rel string, b []byte) {
		p := filepath.Join(dir, rel)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("model_index.json", []byte(`{"_class_name":"StableDiffusionPipeline","unet":["diffusers","UNet2DConditionModel"],"text_encoder":["transformers","CLIPTextModel"],"vae":["diffusers","AutoencoderKL"],"scheduler":["diffusers","EulerDiscreteScheduler"]}`))
	enc := func(specs ...spec) []byte {
		var ts []safetensors.Tensor
		for _, s := range specs {
			ts = append(ts, s.tensor(t))
		}
		b, err := safetensors.Encode(ts, nil)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	write("unet/config.json", []byte(`{"_class_name":"UNet2DConditionModel"}`))
	write("unet/diffusion_pytorch_model.safetensors", enc(spec{"conv_in.weight", safetensors.F16, []int{8, 4, 3, 3}}, spec{"conv_in.bias", safetensors.F16, []int{8}})) // 296
	write("text_encoder/config.json", []byte(`{"architectures":["CLIPTextModel"]}`))
	write("text_encoder/model.safetensors", enc(spec{"text_model.embeddings.token_embedding.weight", safetensors.F32, []int{10, 4}})) // 40
	write("vae/config.json", []byte(`{"_class_name":"AutoencoderKL"}`))
	write("vae/diffusion_pytorch_model.safetensors", enc(spec{"decoder.conv_out.weight", safetensors.F32, []int{3, 4, 3, 3}})) // 108
	write("scheduler/scheduler_config.json", []byte(`{"_class_name":"EulerDiscreteScheduler"}`))
	m, err := resolve(context.Background(), dir, loader.Options{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := inspect.Run(context.Background(), m, inspect.Options{})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, c := range r.Components {
		got[c.Name] = c.Params
	}
	if r.ClassName != "StableDiffusionPipeline" || got["unet"] != 296 || got["text_encoder"] != 40 || got["vae"] != 108 || got["scheduler"] != 0 || len(r.Components) != 4 {
		t.Errorf("components %+v", r.Components)
	}
	// bf16 memory: (296 + 40 + 108) x 2; no KV cache.
	if r.Params.Total != 444 || r.Memory.Weights != 888 || r.Memory.KVCache != 0 || r.Text != nil {
		t.Errorf("params %+v memory %+v", r.Params, r.Memory)
	}
}

// A GPTQ copy of a checkpoint counts the same parameters as the original
// (a packed word holds eight values; scales, zero points and indices hold
// none), and so does an NVFP4 copy (two values a byte) and, at a compute dtype, the weights take what the decoded ones
// take; as stored, its files' bytes.
func TestQuantizedCheckpointCounts(t *testing.T) {
	src, _ := filepath.Abs("../../testdata/stories260K-hf")
	gptq := t.TempDir()
	if err := lmckpt.WriteInt4Copy(src, gptq, lmckpt.Int4Options{Format: "gptq", Group: 32}); err != nil {
		t.Fatal(err)
	}
	run := func(dir, dtype string) *inspect.Report {
		t.Helper()
		m, err := resolve(context.Background(), dir, loader.Options{})
		if err != nil {
			t.Fatal(err)
		}
		r, err := inspect.Run(context.Background(), m, inspect.Options{DType: dtype})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	orig, q := run(src, "f32"), run(gptq, "f32")
	if q.Params.Total != orig.Params.Total || q.Params.Used != orig.Params.Used {
		t.Errorf("GPTQ copy: %d params (%d used), the original %d (%d)", q.Params.Total, q.Params.Used, orig.Params.Total, orig.Params.Used)
	}
	if q.Memory.Weights != orig.Memory.Weights {
		t.Errorf("GPTQ copy at f32: weights %d bytes, the original %d", q.Memory.Weights, orig.Memory.Weights)
	}
	var int4 int64
	for _, d := range q.Params.ByDType {
		if d.DType == "INT4" {
			int4 = d.Params
		}
	}
	if int4 == 0 || int4%(64*64) != 0 {
		t.Errorf("INT4 params %d, want whole 64x64 projections", int4)
	}
	// As stored (auto, the checkpoint's own dtypes): the packed
	// projections take their stored bytes, less than the original's f32.
	if stored, full := run(gptq, "auto").Memory.Weights, run(src, "auto").Memory.Weights; stored >= full {
		t.Errorf("as stored: GPTQ copy %d bytes, the original %d", stored, full)
	}
	// NVFP4 (compressed-tensors): two values a byte of weight_packed,
	// counted as FP4; scales (E4M3) and global scales hold none.
	nv := t.TempDir()
	if err := lmckpt.WriteInt4Copy(src, nv, lmckpt.Int4Options{Format: "nvfp4"}); err != nil {
		t.Fatal(err)
	}
	r := run(nv, "f32")
	if r.Params.Total != orig.Params.Total || r.Memory.Weights != orig.Memory.Weights {
		t.Errorf("NVFP4 copy: %d params, %d bytes at f32; the original %d, %d", r.Params.Total, r.Memory.Weights, orig.Params.Total, orig.Memory.Weights)
	}
	var fp4 int64
	for _, d := range r.Params.ByDType {
		if d.DType == "FP4" {
			fp4 = d.Params
		}
	}
	for _, c := range [][2]string{
		{r.Quantization, "compressed-tensors: nvfp4-pack-quantized 4-bit by group of 16; 1 ignored"},
		{q.Quantization, "gptq, 4 bits, groups of 32"},
		{orig.Quantization, ""},
	} {
		if c[0] != c[1] {
			t.Errorf("quantization %q, want %q", c[0], c[1])
		}
	}
	if fp4 == 0 || fp4 >= r.Params.Total {
		t.Errorf("FP4 params %d of %d, want the projections packed (not the embedding)", fp4, r.Params.Total)
	}
}
