//go:build unix

package inspect_test

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/tputool/tputool/loader"
	"github.com/tputool/tputool/loader/hub"
	"github.com/tputool/tputool/pipeline/inspect"
)

type benchTensor struct {
	name  string
	shape []int
}

// writeSparseShard writes a safetensors file whose data section is a hole:
// the header is real, the file has its real size, no disk is used.
func writeSparseShard(b *testing.B, path string, ts []benchTensor) {
	type entry struct {
		DType   string  `json:"dtype"`
		Shape   []int   `json:"shape"`
		Offsets []int64 `json:"data_offsets"`
	}
	h := map[string]entry{}
	var off int64
	for _, t := range ts {
		n := int64(2)
		for _, d := range t.shape {
			n *= int64(d)
		}
		h[t.name] = entry{"BF16", t.shape, []int64{off, off + n}}
		off += n
	}
	hj, _ := json.Marshal(h)
	for len(hj)%8 != 0 {
		hj = append(hj, ' ')
	}
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	var pre [8]byte
	binary.LittleEndian.PutUint64(pre[:], uint64(len(hj)))
	f.Write(pre[:])
	f.Write(hj)
	if err := f.Truncate(int64(8+len(hj)) + off); err != nil {
		b.Fatal(err)
	}
	f.Close()
}

// cacheModel lays a sharded checkpoint out in a huggingface_hub cache
// (blobs, snapshot symlinks, refs/main) and returns the cache dir.
func cacheModel(b *testing.B, repo, cfg string, tensors []benchTensor, shards int) string {
	dir := b.TempDir()
	commit := "0123456789abcdef0123456789abcdef01234567"
	rd := filepath.Join(dir, hub.RepoFolderName(repo))
	snap := filepath.Join(rd, "snapshots", commit)
	for _, d := range []string{filepath.Join(rd, "blobs"), filepath.Join(rd, "refs"), snap} {
		os.MkdirAll(d, 0o755)
	}
	os.WriteFile(filepath.Join(rd, "refs", "main"), []byte(commit), 0o644)
	put := func(name string, write func(p string)) {
		blob := filepath.Join(rd, "blobs", "blob-"+filepath.Base(name))
		write(blob)
		os.Symlink("../../blobs/"+filepath.Base(blob), filepath.Join(snap, name))
	}
	put("config.json", func(p string) { os.WriteFile(p, []byte(cfg), 0o644) })
	weightMap := map[string]string{}
	per := (len(tensors) + shards - 1) / shards
	for s := 0; s < shards; s++ {
		name := fmt.Sprintf("model-%05d-of-%05d.safetensors", s+1, shards)
		part := tensors[s*per : min((s+1)*per, len(tensors))]
		for _, t := range part {
			weightMap[t.name] = name
		}
		put(name, func(p string) { writeSparseShard(b, p, part) })
	}
	idx, _ := json.Marshal(map[string]any{"metadata": map[string]any{}, "weight_map": weightMap})
	put("model.safetensors.index.json", func(p string) { os.WriteFile(p, idx, 0o644) })
	return dir
}

func llama7B() (string, []benchTensor) {
	cfg := `{"architectures":["LlamaForCausalLM"],"model_type":"llama","hidden_size":4096,"intermediate_size":11008,
"num_hidden_layers":32,"num_attention_heads":32,"num_key_value_heads":32,"vocab_size":32000,"max_position_embeddings":4096}`
	ts := []benchTensor{{"model.embed_tokens.weight", []int{32000, 4096}}, {"model.norm.weight", []int{4096}}, {"lm_head.weight", []int{32000, 4096}}}
	for i := 0; i < 32; i++ {
		p := fmt.Sprintf("model.layers.%d.", i)
		ts = append(ts,
			benchTensor{p + "self_attn.q_proj.weight", []int{4096, 4096}}, benchTensor{p + "self_attn.k_proj.weight", []int{4096, 4096}},
			benchTensor{p + "self_attn.v_proj.weight", []int{4096, 4096}}, benchTensor{p + "self_attn.o_proj.weight", []int{4096, 4096}},
			benchTensor{p + "mlp.gate_proj.weight", []int{11008, 4096}}, benchTensor{p + "mlp.up_proj.weight", []int{11008, 4096}},
			benchTensor{p + "mlp.down_proj.weight", []int{4096, 11008}},
			benchTensor{p + "input_layernorm.weight", []int{4096}}, benchTensor{p + "post_attention_layernorm.weight", []int{4096}})
	}
	return cfg, ts
}

// qwen3MoE is shaped like Qwen3-30B-A3B: 48 layers of 128 experts, about
// 18.9k tensors, the worst case for header parsing.
func qwen3MoE() (string, []benchTensor) {
	cfg := `{"architectures":["Qwen3MoeForCausalLM"],"model_type":"qwen3_moe","hidden_size":2048,"intermediate_size":6144,
"num_hidden_layers":48,"num_attention_heads":32,"num_key_value_heads":4,"head_dim":128,"vocab_size":151936,
"max_position_embeddings":40960,"num_experts":128,"num_experts_per_tok":8,"moe_intermediate_size":768}`
	ts := []benchTensor{{"model.embed_tokens.weight", []int{151936, 2048}}, {"model.norm.weight", []int{2048}}, {"lm_head.weight", []int{151936, 2048}}}
	for i := 0; i < 48; i++ {
		p := fmt.Sprintf("model.layers.%d.", i)
		ts = append(ts,
			benchTensor{p + "self_attn.q_proj.weight", []int{4096, 2048}}, benchTensor{p + "self_attn.k_proj.weight", []int{512, 2048}},
			benchTensor{p + "self_attn.v_proj.weight", []int{512, 2048}}, benchTensor{p + "self_attn.o_proj.weight", []int{2048, 4096}},
			benchTensor{p + "self_attn.q_norm.weight", []int{128}}, benchTensor{p + "self_attn.k_norm.weight", []int{128}},
			benchTensor{p + "input_layernorm.weight", []int{2048}}, benchTensor{p + "post_attention_layernorm.weight", []int{2048}},
			benchTensor{p + "mlp.gate.weight", []int{128, 2048}})
		for e := 0; e < 128; e++ {
			q := fmt.Sprintf("%smlp.experts.%d.", p, e)
			ts = append(ts, benchTensor{q + "gate_proj.weight", []int{768, 2048}}, benchTensor{q + "up_proj.weight", []int{768, 2048}},
				benchTensor{q + "down_proj.weight", []int{2048, 768}})
		}
	}
	return cfg, ts
}

// benchInspectCached measures `tputool --offline inspect --model REPO` minus
// printing: resolve from the cache, read every shard header, compute.
func benchInspectCached(b *testing.B, cfg string, ts []benchTensor, shards int) {
	dir := cacheModel(b, "org/m", cfg, ts, shards)
	c := &hub.Client{Cache: hub.Cache{Dir: dir}, Offline: true}
	ctx := context.Background()
	b.ResetTimer()
	cpu0 := cpuTime()
	defer func() {
		// CPU time per op: wall time on a shared, oversubscribed machine
		// measures the neighbours too.
		b.ReportMetric(float64((cpuTime()-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
	}()
	for i := 0; i < b.N; i++ {
		m, err := resolve(ctx, "org/m", loader.Options{Client: c, MetadataOnly: true})
		if err != nil {
			b.Fatal(err)
		}
		r, err := inspect.Run(ctx, m, inspect.Options{})
		if err != nil {
			b.Fatal(err)
		}
		if r.Params.Tensors != len(ts) {
			b.Fatalf("%d tensors", r.Params.Tensors)
		}
	}
}

// go test ./loader/inspect -run '^$' -bench InspectCached
func BenchmarkInspectCachedLlama7B(b *testing.B) {
	cfg, ts := llama7B()
	benchInspectCached(b, cfg, ts, 2)
}

func BenchmarkInspectCachedQwen3MoE30B(b *testing.B) {
	cfg, ts := qwen3MoE()
	benchInspectCached(b, cfg, ts, 16)
}

// cpuTime is the process's user+system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
