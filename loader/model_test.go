package loader_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/loader"
	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/loader/hub"
	"github.com/tputool/tputool/loader/hub/hubtest"
	"github.com/tputool/tputool/loader/safetensors"
)

func encode(t *testing.T, tensors ...safetensors.Tensor) []byte {
	t.Helper()
	b, err := safetensors.Encode(tensors, nil)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func tensor(t *testing.T, name string, shape ...int) safetensors.Tensor {
	t.Helper()
	n := 1
	for _, d := range shape {
		n *= d
	}
	x, err := safetensors.Float32Tensor(name, safetensors.BF16, shape, make([]float32, n))
	if err != nil {
		t.Fatal(err)
	}
	return x
}

func jsonBytes(v any) []byte { b, _ := json.Marshal(v); return b }

// shardedRepo is a transformers repo with two shards, a pickle twin and
// files Resolve should not fetch.
func shardedRepo(t *testing.T) hubtest.Repo {
	s1 := encode(t, tensor(t, "model.embed_tokens.weight", 32, 8))
	s2 := encode(t, tensor(t, "lm_head.weight", 32, 8))
	index := jsonBytes(map[string]any{"metadata": map[string]any{"total_size": 1024}, "weight_map": map[string]string{
		"model.embed_tokens.weight": "model-00001-of-00002.safetensors",
		"lm_head.weight":            "model-00002-of-00002.safetensors",
	}})
	return hubtest.Repo{ID: "org/llm", Files: []hubtest.File{
		{Path: "config.json", Data: []byte(`{"architectures":["LlamaForCausalLM"],"model_type":"llama"}`)},
		{Path: "generation_config.json", Data: []byte(`{"eos_token_id":[1,2]}`)},
		{Path: "tokenizer.json", Data: []byte(`{}`)},
		{Path: "tokenizer_config.json", Data: []byte(`{}`)},
		{Path: "README.md", Data: []byte("# readme")},
		{Path: "model.safetensors.index.json", Data: index},
		{Path: "model-00001-of-00002.safetensors", Data: s1, LFS: true},
		{Path: "model-00002-of-00002.safetensors", Data: s2, LFS: true},
		{Path: "pytorch_model.bin", Data: []byte("pickle"), LFS: true},
		{Path: "onnx/model.onnx", Data: []byte("onnx"), LFS: true},
	}}
}

func client(t *testing.T, srv *hubtest.Server) *hub.Client {
	return &hub.Client{Endpoint: srv.URL(), Cache: hub.Cache{Dir: t.TempDir()}, Retries: 2,
		Sleep: func(context.Context, time.Duration) error { return nil }}
}

func fetched(srv *hubtest.Server) []string {
	var out []string
	for _, r := range srv.Requests() {
		if r.Server == "hub" && r.Method == "HEAD" {
			_, file, _ := strings.Cut(r.Path, "/resolve/")
			_, file, _ = strings.Cut(file, "/")
			out = append(out, file)
		}
	}
	slices.Sort(out)
	return out
}

func TestResolveHubTransformers(t *testing.T) {
	srv := hubtest.New(t)
	commit := srv.AddRepo(shardedRepo(t))
	c := client(t, srv)
	ctx := context.Background()
	m, err := resolve(ctx, "org/llm", loader.Options{Client: c})
	if err != nil {
		t.Fatal(err)
	}
	if m.Kind != loader.Transformers || m.Commit != commit || m.Config.Architecture() != "LlamaForCausalLM" {
		t.Fatalf("model = %+v", m)
	}
	want := []string{"config.json", "generation_config.json", "model-00001-of-00002.safetensors",
		"model-00002-of-00002.safetensors", "model.safetensors.index.json", "tokenizer.json", "tokenizer_config.json"}
	if got := fetched(srv); !slices.Equal(got, want) {
		t.Errorf("fetched %q, want %q", got, want)
	}
	ck, err := m.OpenCheckpoint("")
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	if ck.Len() != 2 {
		t.Errorf("checkpoint has %d tensors", ck.Len())
	}
	g, err := m.Generation()
	if err != nil || len(g.EOSTokenID) != 2 {
		t.Errorf("generation = %+v, %v", g, err)
	}

	// Again, online: one listing request, nothing downloaded.
	srv.ResetLog()
	if _, err := resolve(ctx, "org/llm", loader.Options{Client: c}); err != nil {
		t.Fatal(err)
	}
	if n := srv.Count(nil); n != 1 {
		t.Errorf("cached model: %d requests, want 1 (the listing): %+v", n, srv.Requests())
	}
	// Offline or pinned to the commit: no request at all.
	srv.ResetLog()
	c.Offline = true
	mo, err := resolve(ctx, "org/llm", loader.Options{Client: c})
	if err != nil || !mo.FromCache || mo.Dir != m.Dir {
		t.Fatalf("offline: %+v, %v", mo, err)
	}
	c.Offline = false
	if _, err := resolve(ctx, "org/llm@"+commit, loader.Options{Client: c}); err != nil {
		t.Fatal(err)
	}
	if n := srv.Count(nil); n != 0 {
		t.Errorf("offline/pinned resolve made %d requests", n)
	}
}

func TestResolveMetadataOnlyReadsRemoteHeaders(t *testing.T) {
	srv := hubtest.New(t)
	srv.AddRepo(shardedRepo(t))
	c := client(t, srv)
	m, err := resolve(context.Background(), "org/llm", loader.Options{Client: c, MetadataOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := fetched(srv), []string{"config.json", "generation_config.json", "model.safetensors.index.json"}; !slices.Equal(got, want) {
		t.Errorf("fetched %q, want %q", got, want)
	}
	files, err := m.AllWeightFiles()
	if err != nil || len(files) != 2 {
		t.Fatalf("weights %q, %v", files, err)
	}
	srv.ResetLog()
	h, size, err := m.ReadHeader(context.Background(), files[1])
	if err != nil || len(h.Tensors) != 1 || h.Tensors[0].Name != "lm_head.weight" || size <= 0 {
		t.Fatalf("remote header: %+v %d %v", h, size, err)
	}
	if n := srv.Count(func(r hubtest.Request) bool { return r.Server == "cdn" }); n != 2 {
		t.Errorf("CDN requests for one header = %d, want 2", n)
	}
	if n := srv.Count(func(r hubtest.Request) bool { return r.Server == "cdn" && r.Range == "" }); n != 0 {
		t.Error("a whole file was requested")
	}
	// Offline, the same model (configs cached) still resolves metadata-only.
	c.Offline = true
	if _, err := resolve(context.Background(), "org/llm", loader.Options{Client: c, MetadataOnly: true}); err != nil {
		t.Errorf("offline metadata: %v", err)
	}
	// but not for a full load, since the weights were never downloaded.
	_, err = resolve(context.Background(), "org/llm", loader.Options{Client: c})
	if !errors.Is(err, hub.ErrNotCached) || !strings.Contains(err.Error(), "download org/llm with network access first") {
		t.Errorf("offline full load without weights: %v", err)
	}
}

func diffusersRepo(t *testing.T) hubtest.Repo {
	unet := encode(t, tensor(t, "conv_in.weight", 4, 4))
	te := encode(t, tensor(t, "text_model.embeddings.token_embedding.weight", 16, 4))
	return hubtest.Repo{ID: "org/sd", Files: []hubtest.File{
		{Path: "model_index.json", Data: []byte(`{"_class_name":"StableDiffusionPipeline","unet":["diffusers","UNet2DConditionModel"],"text_encoder":["transformers","CLIPTextModel"],"scheduler":["diffusers","DDIMScheduler"],"tokenizer":["transformers","CLIPTokenizer"],"safety_checker":[null,null]}`)},
		{Path: "unet/config.json", Data: []byte(`{"_class_name":"UNet2DConditionModel"}`)},
		{Path: "unet/diffusion_pytorch_model.safetensors", Data: unet, LFS: true},
		{Path: "unet/diffusion_pytorch_model.fp16.safetensors", Data: unet, LFS: true},
		{Path: "unet/diffusion_pytorch_model.bin", Data: []byte("pickle"), LFS: true},
		{Path: "text_encoder/config.json", Data: []byte(`{"architectures":["CLIPTextModel"]}`)},
		{Path: "text_encoder/model.safetensors", Data: te, LFS: true},
		{Path: "scheduler/scheduler_config.json", Data: []byte(`{"_class_name":"DDIMScheduler"}`)},
		{Path: "tokenizer/vocab.json", Data: []byte(`{}`)},
		{Path: "tokenizer/merges.txt", Data: []byte("#version: 0.2\n")},
		{Path: "sd_v1.ckpt", Data: []byte("pickle"), LFS: true},
	}}
}

func TestResolveDiffusers(t *testing.T) {
	srv := hubtest.New(t)
	srv.AddRepo(diffusersRepo(t))
	c := client(t, srv)
	m, err := resolve(context.Background(), "org/sd", loader.Options{Client: c})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"model_index.json", "scheduler/scheduler_config.json", "text_encoder/config.json", "text_encoder/model.safetensors",
		"tokenizer/merges.txt", "tokenizer/vocab.json", "unet/config.json", "unet/diffusion_pytorch_model.safetensors"}
	if got := fetched(srv); !slices.Equal(got, want) {
		t.Errorf("fetched %q, want %q", got, want)
	}
	if m.Kind != loader.Diffusers || m.Index.ClassName != "StableDiffusionPipeline" {
		t.Fatalf("model = %+v", m)
	}
	if got := m.Components(); !slices.Equal(got, []string{"scheduler", "text_encoder", "tokenizer", "unet"}) {
		t.Errorf("components %q", got)
	}
	var cfg struct {
		ClassName string `json:"_class_name"`
	}
	if err := config.ReadJSONFile(m.Path("scheduler/scheduler_config.json"), &cfg); err != nil || cfg.ClassName != "DDIMScheduler" {
		t.Errorf("scheduler config %+v %v", cfg, err)
	}
	ck, err := m.OpenCheckpoint("unet")
	if err != nil {
		t.Fatal(err)
	}
	ck.Close()

	srv.ResetLog()
	if _, err := resolve(context.Background(), "org/sd", loader.Options{Client: c, Variant: "fp16"}); err != nil {
		t.Fatal(err)
	}
	if got := fetched(srv); !slices.Equal(got, []string{"unet/diffusion_pytorch_model.fp16.safetensors"}) {
		t.Errorf("fp16 variant fetched %q", got)
	}
}

func TestResolvePickleOnlyIsUnsupported(t *testing.T) {
	srv := hubtest.New(t)
	srv.AddRepo(hubtest.Repo{ID: "org/old", Files: []hubtest.File{
		{Path: "config.json", Data: []byte(`{"model_type":"gpt2"}`)},
		{Path: "pytorch_model.bin", Data: []byte("pickle"), LFS: true},
	}})
	_, err := resolve(context.Background(), "org/old", loader.Options{Client: client(t, srv)})
	if !errors.Is(err, errs.ErrUnsupported) || !strings.Contains(err.Error(), "pickle") {
		t.Errorf("err = %v", err)
	}
	if n := srv.Count(func(r hubtest.Request) bool { return strings.HasSuffix(r.Path, ".bin") }); n != 0 {
		t.Error("the pickle file was requested")
	}
}

func TestResolveLocalDir(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{"model_type":"llama"}`), 0o644)
	safetensors.WriteFile(filepath.Join(dir, "model.safetensors"), []safetensors.Tensor{tensor(t, "w", 2, 2)}, nil)
	m, err := resolve(context.Background(), dir, loader.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !m.Local() || m.Dir != dir || !slices.Equal(m.Files, []string{"config.json", "model.safetensors"}) {
		t.Errorf("model = %+v", m)
	}
	h, _, err := m.ReadHeader(context.Background(), "model.safetensors")
	if err != nil || h.Tensors[0].Name != "w" {
		t.Errorf("header: %v", err)
	}
	empty := t.TempDir()
	// A folder that is not a model is a usage error naming what is missing.
	if _, err := resolve(context.Background(), empty, loader.Options{}); !errors.Is(err, errs.ErrUsage) || !errors.Is(err, loader.ErrNotModelFolder) {
		t.Errorf("empty dir: %v", err)
	}
}

func TestParseRef(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		in      string
		local   bool
		repo    string
		rev     string
		wantErr bool
	}{
		{"Qwen/Qwen3-0.6B", false, "Qwen/Qwen3-0.6B", "", false},
		{"Qwen/Qwen3-0.6B@refs/pr/3", false, "Qwen/Qwen3-0.6B", "refs/pr/3", false},
		{"gpt2@0123456789abcdef0123456789abcdef01234567", false, "gpt2", "0123456789abcdef0123456789abcdef01234567", false},
		{dir, true, "", "", false},
		{"./does-not-exist", false, "", "", true},
		{"~/definitely/not/here/x", false, "", "", true},
		{"a/b/c", false, "", "", true},
		{"org/name@", false, "", "", true},
		{"", false, "", "", true},
	}
	for _, tc := range cases {
		r, err := loader.ParseRef(tc.in)
		if tc.wantErr {
			if err == nil || !errors.Is(err, errs.ErrUsage) {
				t.Errorf("%q: err = %v, want a usage error", tc.in, err)
			}
			continue
		}
		if err != nil || r.Local != tc.local || r.RepoID != tc.repo || r.Revision != tc.rev {
			t.Errorf("%q: %+v, %v", tc.in, r, err)
		}
	}
}

// resolve parses a --model value and resolves it, as the commands do.
func resolve(ctx context.Context, model string, o loader.Options) (*loader.Checkpoint, error) {
	ref, err := loader.ParseRef(model)
	if err != nil {
		return nil, err
	}
	return loader.ResolveRef(ctx, ref, o)
}
