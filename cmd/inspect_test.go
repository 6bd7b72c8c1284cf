package cmd

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tputool/tputool/loader/hub/hubtest"
	"github.com/tputool/tputool/tpu"
)

const storiesDir = "../testdata/stories260K-hf"

// storiesRepo serves testdata/stories260K-hf from a fake Hub.
func storiesRepo(t *testing.T, id string) hubtest.Repo {
	t.Helper()
	r := hubtest.Repo{ID: id}
	for _, name := range []string{"config.json", "generation_config.json", "model.safetensors", "special_tokens_map.json", "tokenizer.json", "tokenizer_config.json", "README.md"} {
		b, err := os.ReadFile(filepath.Join(storiesDir, name))
		require.NoError(t, err)
		r.Files = append(r.Files, hubtest.File{Path: name, Data: b, LFS: filepath.Ext(name) == ".safetensors"})
	}
	return r
}

// hubEnv is the environment pointing tputool at a fake Hub and a fresh cache.
func hubEnv(t *testing.T, srv *hubtest.Server) map[string]string {
	return map[string]string{"HF_ENDPOINT": srv.URL(), "HF_HUB_CACHE": t.TempDir(), "HOME": t.TempDir()}
}

// stories260K by hand: embeddings 512x64 = 32768; per layer q 64x64, k and
// v 32x64, o 64x64, gate/up/down 3x172x64, two norms 2x64 = 45440; five
// layers 227200; final norm 64; lm_head 512x64 = 32768 (the file stores it
// although the config ties it). Total 292800 float32 params in 48 tensors.
const storiesParams = 292800

func TestInspectLocalText(t *testing.T) {
	for _, tty := range []bool{false, true} {
		e := newTestFactory(t, nil)
		e.f.IOStreams.SetStdoutTTY(tty)
		require.Equal(t, ExitOK, e.run("inspect", "--model", storiesDir), e.errOut.String())
		out := e.out.String()
		assert.Contains(t, out, "LlamaForCausalLM (llama)")
		assert.Contains(t, out, "local directory")
		assert.Contains(t, out, "8 heads, 4 KV heads, head_dim 8")
		assert.Contains(t, out, "292.8K total (48 tensors)")
		assert.Contains(t, out, "F32          292.8K params, 1.1 MiB")
		assert.Contains(t, out, "Memory at bf16, batch 1, context 4096:")
		assert.Contains(t, out, "KV cache         2.5 MiB") // 5 x 2 x 4 x 8 x 2 B x 4096
		assert.Contains(t, out, "exceeds max_position_embeddings 512")
		assert.Contains(t, out, "v6e")
		if tty {
			assert.Contains(t, out, "│ v4")
		} else {
			assert.Contains(t, out, "| v4")
		}
		assert.Empty(t, e.errOut.String())
	}
}

func TestInspectJSON(t *testing.T) {
	e := newTestFactory(t, nil)
	require.Equal(t, ExitOK, e.run("inspect", "--model", storiesDir, "--json", "--batch", "4", "--context", "256", "--dtype", "f32"), e.errOut.String())
	var r struct {
		Kind       string
		Source     string
		Parameters struct{ Total, Used int64 }
		Memory     struct {
			DType   string `json:"dtype"`
			Weights int64  `json:"weights_bytes"`
			KV      int64  `json:"kv_cache_bytes"`
			Total   int64  `json:"total_bytes"`
		}
		Fit []tpu.FitResult
	}
	require.NoError(t, json.Unmarshal(e.out.Bytes(), &r), e.out.String())
	assert.Equal(t, "transformers", r.Kind)
	assert.Equal(t, "local", r.Source)
	assert.EqualValues(t, storiesParams, r.Parameters.Total)
	assert.EqualValues(t, storiesParams*4, r.Memory.Weights)
	assert.EqualValues(t, 5*2*4*8*4*256*4, r.Memory.KV) // layers, K+V, kv heads, head_dim, f32, context, batch
	assert.Equal(t, r.Memory.Weights+r.Memory.KV, r.Memory.Total)
	require.Len(t, r.Fit, len(tpu.Catalog()))
	assert.True(t, r.Fit[0].Fits)
}

// TestInspectKVCacheDType: --kv-cache-dtype counts the KV caches as
// generate holds them, named in the memory header and the JSON.
func TestInspectKVCacheDType(t *testing.T) {
	e := newTestFactory(t, nil)
	require.Equal(t, ExitOK, e.run("inspect", "--model", storiesDir, "--context", "256", "--kv-cache-dtype", "int8"), e.errOut.String())
	assert.Contains(t, e.out.String(), "Memory at bf16, int8 KV cache, batch 1, context 256:")
	assert.Contains(t, e.out.String(), "KV cache         120.0 KiB") // 5 layers, K+V, 4 heads, 8 codes + a 4-byte scale, 256 positions

	e = newTestFactory(t, nil)
	require.Equal(t, ExitOK, e.run("inspect", "--model", storiesDir, "--json", "--context", "256", "--kv-cache-dtype", "f32"), e.errOut.String())
	var r struct {
		Memory struct {
			DType string `json:"dtype"`
			KVDT  string `json:"kv_cache_dtype"`
			KV    int64  `json:"kv_cache_bytes"`
		}
	}
	require.NoError(t, json.Unmarshal(e.out.Bytes(), &r), e.out.String())
	assert.Equal(t, "bf16", r.Memory.DType)
	assert.Equal(t, "f32", r.Memory.KVDT)
	assert.EqualValues(t, 5*2*4*8*4*256, r.Memory.KV)

	e = newTestFactory(t, nil) // auto: --dtype's, not named
	require.Equal(t, ExitOK, e.run("inspect", "--model", storiesDir, "--json", "--context", "256", "--kv-cache-dtype", "auto"), e.errOut.String())
	assert.NotContains(t, e.out.String(), "kv_cache_dtype")

	// int8 only where tputool knows the caches: exit 3 naming the flag.
	dir := t.TempDir()
	raw, err := os.ReadFile(filepath.Join(storiesDir, "config.json"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "config.json"), []byte(strings.Replace(string(raw), `"LlamaForCausalLM"`, `"RwkvForCausalLM"`, 1)), 0o644))
	weights, err := os.ReadFile(filepath.Join(storiesDir, "model.safetensors"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "model.safetensors"), weights, 0o644))
	e = newTestFactory(t, nil)
	assert.Equal(t, ExitUnsupported, e.run("inspect", "--model", dir, "--kv-cache-dtype", "int8"))
	assert.Contains(t, e.errOut.String(), "--kv-cache-dtype int8: tputool does not run RwkvForCausalLM")
}

func TestInspectRemoteDownloadsNoWeights(t *testing.T) {
	srv := hubtest.New(t)
	srv.AddRepo(storiesRepo(t, "org/stories"))
	env := hubEnv(t, srv)
	e := newTestFactory(t, env)
	require.Equal(t, ExitOK, e.run("inspect", "--model", "org/stories", "--json"), e.errOut.String())
	var r struct {
		Source     string
		Parameters struct{ Total int64 }
	}
	require.NoError(t, json.Unmarshal(e.out.Bytes(), &r))
	assert.Equal(t, "remote", r.Source)
	assert.EqualValues(t, storiesParams, r.Parameters.Total)
	assert.Zero(t, srv.Count(func(r hubtest.Request) bool { return r.Server == "cdn" && r.Range == "" }), "a weight file was downloaded")
	blobs, _ := os.ReadDir(filepath.Join(env["HF_HUB_CACHE"], "models--org--stories", "blobs"))
	assert.Len(t, blobs, 2, "only config.json and generation_config.json are cached")

	// Offline, the cached configs answer but the headers need the network.
	e = newTestFactory(t, env)
	assert.Equal(t, ExitHub, e.run("--offline", "inspect", "--model", "org/stories"))
	assert.Contains(t, e.errOut.String(), "offline")
}

func TestInspectCachedModelIsOffline(t *testing.T) {
	srv := hubtest.New(t)
	srv.AddRepo(storiesRepo(t, "org/stories"))
	env := hubEnv(t, srv)
	e := newTestFactory(t, env)
	require.Equal(t, ExitOK, e.run("download", "--model", "org/stories"), e.errOut.String())
	srv.ResetLog()
	e = newTestFactory(t, env)
	require.Equal(t, ExitOK, e.run("--offline", "inspect", "--model", "org/stories"), e.errOut.String())
	assert.Contains(t, e.out.String(), "from the cache")
	assert.Zero(t, srv.Count(nil), "offline inspect made requests")
}

func TestInspectFlagsAndErrors(t *testing.T) {
	var got *InspectOptions
	e := newTestFactory(t, nil)
	cmd := NewCmdInspect(e.f, func(_ context.Context, o *InspectOptions) error { got = o; return nil })
	cmd.SetArgs([]string{"--model", "org/x@v1", "-b", "8", "-c", "32768", "--dtype", "f16", "--retries", "2"})
	require.NoError(t, cmd.Execute())
	assert.Equal(t, "org/x@v1", got.Model)
	assert.Equal(t, 8, got.Batch)
	assert.Equal(t, 32768, got.Context)
	assert.Equal(t, "f16", got.DType)
	assert.Equal(t, 2, got.Retries)

	for _, args := range [][]string{
		{"inspect"},
		{"inspect", "--model", storiesDir, "--batch", "0"},
		{"inspect", "--model", storiesDir, "--dtype", "int4"},
		{"inspect", "--model", storiesDir, "--kv-cache-dtype", "int4"},
		{"inspect", "--model", "./no/such/dir"},
		{"inspect", "--model", storiesDir, "--revision", "main"},
	} {
		e := newTestFactory(t, nil)
		assert.Equal(t, ExitUsage, e.run(args...), "%v: %s", args, e.errOut.String())
	}
	srv := hubtest.New(t)
	e = newTestFactory(t, hubEnv(t, srv))
	assert.Equal(t, ExitHub, e.run("inspect", "--model", "org/missing"))
	assert.Contains(t, e.errOut.String(), "repository not found: org/missing")
}

// TestInspectNamesMissingTensor: a config with one layer more than the
// weights hold is printed, with the tensors it lacks, and exits 3 naming
// the first one (as generate refuses it), text and JSON alike.
func TestInspectNamesMissingTensor(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"config.json", "model.safetensors"} {
		b, err := os.ReadFile(filepath.Join(storiesDir, name))
		require.NoError(t, err)
		if name == "config.json" {
			var cfg map[string]any
			require.NoError(t, json.Unmarshal(b, &cfg))
			cfg["num_hidden_layers"] = 6
			b, err = json.Marshal(cfg)
			require.NoError(t, err)
		}
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), b, 0o644))
	}
	const first = `missing tensor "model.layers.5.input_layernorm.weight" (shape [64])`
	e := newTestFactory(t, nil)
	require.Equal(t, ExitUnsupported, e.run("inspect", "--model", dir))
	assert.Contains(t, e.out.String(), "The checkpoint does not load with its config (9 mismatches):\n  "+first)
	assert.Contains(t, e.errOut.String(), first+" (and 8 more mismatches)")

	e = newTestFactory(t, nil)
	require.Equal(t, ExitUnsupported, e.run("inspect", "--model", dir, "--json"))
	var r struct {
		Supported  bool
		Mismatches []struct{ Kind, Tensor string }
	}
	require.NoError(t, json.Unmarshal(e.out.Bytes(), &r), e.out.String())
	assert.True(t, r.Supported)
	require.Len(t, r.Mismatches, 9)
	assert.Equal(t, "missing", r.Mismatches[0].Kind)
	assert.Equal(t, "model.layers.5.input_layernorm.weight", r.Mismatches[0].Tensor)
}

// TestInspectHeadroom: --headroom 0 counts no headroom (the library
// reads 0 as its default, 15%), and a value out of range is a usage error
// naming the flag.
func TestInspectHeadroom(t *testing.T) {
	total := func(headroom string) int64 {
		e := newTestFactory(t, nil)
		require.Equal(t, ExitOK, e.run("inspect", "--model", storiesDir, "--json", "--context", "256", "--headroom", headroom), e.errOut.String())
		var r struct {
			Memory struct {
				Total int64 `json:"total_bytes"`
			}
			Fit []tpu.FitResult
		}
		require.NoError(t, json.Unmarshal(e.out.Bytes(), &r), e.out.String())
		require.NotEmpty(t, r.Fit)
		if headroom == "0" {
			assert.Equal(t, r.Memory.Total, r.Fit[0].TotalBytes)
		}
		return r.Fit[0].TotalBytes
	}
	assert.Less(t, total("0"), total("0.15"))

	e := newTestFactory(t, nil)
	require.Equal(t, ExitOK, e.run("inspect", "--model", storiesDir, "--headroom", "0"), e.errOut.String())
	assert.Contains(t, e.out.String(), "(with 0% headroom)")

	for _, h := range []string{"-0.1", "11", "NaN"} {
		e := newTestFactory(t, nil)
		assert.Equal(t, ExitUsage, e.run("inspect", "--model", storiesDir, "--headroom", h), h)
		assert.Contains(t, e.errOut.String(), "--headroom "+h+": want a fraction from 0 to 10", h)
	}
}

// TestModelRevisionConflict: --model ORG/NAME@REV with a --revision naming
// another revision is a usage error, before any request; the same
// revision twice is fine.
func TestModelRevisionConflict(t *testing.T) {
	srv := hubtest.New(t)
	srv.AddRepo(storiesRepo(t, "org/stories"))
	env := hubEnv(t, srv)
	for _, args := range [][]string{
		{"inspect", "--model", "org/stories@v1", "--revision", "main"},
		{"download", "--model", "org/stories@v1", "--revision", "main"},
		{"generate", "--model", "org/stories@v1", "--revision", "main", "-p", "hi"},
	} {
		e := newTestFactory(t, env)
		assert.Equal(t, ExitUsage, e.run(args...), "%v: %s", args, e.errOut.String())
		assert.Contains(t, e.errOut.String(), "--model org/stories@v1 and --revision main name different revisions")
	}
	assert.Zero(t, srv.Count(nil), "a refused command made requests")

	e := newTestFactory(t, env)
	require.Equal(t, ExitOK, e.run("inspect", "--model", "org/stories@main", "--revision", "main"), e.errOut.String())
}
