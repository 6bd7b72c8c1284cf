package loader_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tputool/tputool/loader"
	"github.com/tputool/tputool/loader/hub"
)

// FuzzParseRef: any --model value parses to a local directory that exists
// or to a valid Hub id and revision, or fails with a usage error; never a
// panic.
func FuzzParseRef(f *testing.F) {
	for _, s := range []string{"org/name", "org/name@main", "org/name@refs/pr/1", "gpt2", ".", "..", "./x", "~/m", "/",
		"org/name@", "@main", "org/../etc", "a/b/c", "org/name@../../x", "org/name@/abs", "C:\\x", "\x00", " ", "org--x/y"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := loader.ParseRef(s)
		if err != nil {
			return
		}
		if r.Local {
			if !filepath.IsAbs(r.Path) {
				t.Fatalf("%q: local path %q is not absolute", s, r.Path)
			}
			if st, err := os.Stat(r.Path); err != nil || !st.IsDir() {
				t.Fatalf("%q: local path %q is not a directory", s, r.Path)
			}
			return
		}
		if err := hub.ValidateRepoID(r.RepoID); err != nil {
			t.Fatalf("%q: accepted repo id %q: %v", s, r.RepoID, err)
		}
		if r.Revision != "" {
			if err := hub.CheckRevision(r.Revision); err != nil {
				t.Fatalf("%q: accepted revision %q: %v", s, r.Revision, err)
			}
		}
	})
}

// FuzzResolveLocal writes an arbitrary weight index (and, for diffusers,
// an arbitrary model_index.json) into a model folder whose parent holds
// shards that must never be reached, resolves it and lists its weights.
// The property: no panic, and every weight file Resolve accepts is a file
// of the folder (a local slash path it lists), never outside it.
func FuzzResolveLocal(f *testing.F) {
	f.Add([]byte(`{"weight_map":{"a":"model-00001-of-00002.safetensors","b":"sub/b.safetensors"}}`), []byte(`{}`), false)
	f.Add([]byte(`{"weight_map":{"a":"../outside.safetensors"}}`), []byte(`{}`), false)
	f.Add([]byte(`{"weight_map":{"a":"/tmp/outside.safetensors"}}`), []byte(`{}`), false)
	f.Add([]byte(`{"weight_map":{"a":"sub/../../outside.safetensors"}}`), []byte(`{}`), false)
	f.Add([]byte(`{"weight_map":{"a":"model-00001-of-00002.safetensors"}}`),
		[]byte(`{"_class_name":"StableDiffusionPipeline","unet":["diffusers","UNet2DConditionModel"],"vae":["diffusers","AutoencoderKL"]}`), true)
	f.Add([]byte(`{"weight_map":{"a":"../outside.safetensors"}}`), []byte(`{"_class_name":"X","..":["diffusers","Y"],"../x":["a","b"]}`), true)
	root := f.TempDir()
	n := 0
	f.Fuzz(func(t *testing.T, index, modelIndex []byte, diffusers bool) {
		n++
		base := filepath.Join(root, "case", strings.Repeat("d", n%3+1))
		os.RemoveAll(filepath.Join(root, "case"))
		dir := filepath.Join(base, "model")
		write := func(rel string, data []byte) {
			p := filepath.Join(dir, filepath.FromSlash(rel))
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, data, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		// Bait outside the model folder.
		if err := os.MkdirAll(base, 0o755); err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(base, "outside.safetensors"), []byte("x"), 0o644)
		comp := ""
		if diffusers {
			write("model_index.json", modelIndex)
			comp = "unet/"
			write(comp+"config.json", []byte(`{}`))
			write(comp+"diffusion_pytorch_model.safetensors.index.json", index)
		} else {
			write("config.json", []byte(`{"architectures":["LlamaForCausalLM"],"model_type":"llama"}`))
			write("model.safetensors.index.json", index)
		}
		write(comp+"model-00001-of-00002.safetensors", []byte("x"))
		write(comp+"sub/b.safetensors", []byte("x"))
		m, err := resolve(context.Background(), dir, loader.Options{})
		if err != nil {
			return
		}
		files, err := m.AllWeightFiles()
		if err != nil {
			return
		}
		for _, f := range files {
			if !filepath.IsLocal(filepath.FromSlash(f)) || !m.HasFile(f) {
				t.Fatalf("accepted weight file %q outside %s", f, dir)
			}
			rel, err := filepath.Rel(dir, m.Path(f))
			if err != nil || !filepath.IsLocal(rel) {
				t.Fatalf("weight file %q resolves to %s, outside %s", f, m.Path(f), dir)
			}
		}
	})
}
