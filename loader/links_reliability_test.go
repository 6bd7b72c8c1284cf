package loader_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/loader"
	"github.com/tputool/tputool/loader/hub/hubtest"
)

// localModel writes a transformers folder with one weight file.
func localModel(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{
		"config.json":       []byte(`{"architectures":["LlamaForCausalLM"],"model_type":"llama"}`),
		"model.safetensors": encode(t, tensor(t, "w", 2, 2)),
	} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func symlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, link); err != nil {
		t.Skip("no symlinks here:", err)
	}
}

// TestLocalModelLinksMustStayInside: a local --model folder may hold links
// between its own files and the Hugging Face cache snapshot layout (links
// into ../../blobs of the same repository), but a link leading anywhere
// else is refused with a usage error naming it, before any file is read.
func TestLocalModelLinksMustStayInside(t *testing.T) {
	outside := t.TempDir()
	secret := filepath.Join(outside, "secret.json")
	if err := os.WriteFile(secret, []byte(`{"not":"yours"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	refused := map[string]func(dir string){
		"file link to an absolute path outside": func(dir string) { symlink(t, secret, filepath.Join(dir, "tokenizer.json")) },
		"relative link climbing out": func(dir string) {
			rel, _ := filepath.Rel(dir, secret)
			symlink(t, rel, filepath.Join(dir, "tokenizer_config.json"))
		},
		"directory link outside": func(dir string) { symlink(t, outside, filepath.Join(dir, "unet")) },
		"link in a subfolder":    func(dir string) { symlink(t, "../../secret.json", filepath.Join(dir, "sub", "x.json")) },
		"replaced config.json": func(dir string) {
			os.Remove(filepath.Join(dir, "config.json"))
			symlink(t, secret, filepath.Join(dir, "config.json"))
		},
	}
	for name, mk := range refused {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "m")
			localModel(t, dir)
			if name == "link in a subfolder" {
				// ../../secret.json from m/sub/ is next to m: put it there.
				os.WriteFile(filepath.Join(filepath.Dir(dir), "secret.json"), []byte("{}"), 0o600)
			}
			mk(dir)
			_, err := resolve(context.Background(), dir, loader.Options{})
			if !errors.Is(err, errs.ErrUsage) || !strings.Contains(err.Error(), "symbolic link") || !strings.Contains(err.Error(), "outside the model folder") {
				t.Fatalf("got %v, want a usage error about the link", err)
			}
		})
	}

	allowed := map[string]func(dir string){
		"link between own files": func(dir string) {
			os.Rename(filepath.Join(dir, "model.safetensors"), filepath.Join(dir, "weights.bin.safetensors"))
			symlink(t, "weights.bin.safetensors", filepath.Join(dir, "model.safetensors"))
		},
		"directory link inside": func(dir string) {
			os.MkdirAll(filepath.Join(dir, "real"), 0o755)
			symlink(t, "real", filepath.Join(dir, "alias"))
		},
		"dangling link": func(dir string) { symlink(t, "/nonexistent/x", filepath.Join(dir, "README.md")) },
		"link in a hidden folder": func(dir string) {
			symlink(t, secret, filepath.Join(dir, ".git", "config"))
		},
	}
	for name, mk := range allowed {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "m")
			localModel(t, dir)
			mk(dir)
			if _, err := resolve(context.Background(), dir, loader.Options{}); err != nil {
				t.Fatal(err)
			}
		})
	}

	t.Run("the folder itself is a link", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "m")
		localModel(t, dir)
		alias := filepath.Join(t.TempDir(), "alias")
		symlink(t, dir, alias)
		if _, err := resolve(context.Background(), alias, loader.Options{}); err != nil {
			t.Fatal(err)
		}
	})
}

// TestCacheSnapshotAsLocalModel: a snapshot folder of the Hugging Face
// cache, written by the Hub client, is a valid local --model (its links
// go to ../../blobs of the same repository); a snapshot link into another
// repository's blobs is refused.
func TestCacheSnapshotAsLocalModel(t *testing.T) {
	srv := hubtest.New(t)
	srv.AddRepo(shardedRepo(t))
	other := shardedRepo(t)
	other.ID = "org/other"
	srv.AddRepo(other)
	c := client(t, srv)
	m, err := resolve(context.Background(), "org/llm", loader.Options{Client: c})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := resolve(context.Background(), "org/other", loader.Options{Client: c}); err != nil {
		t.Fatal(err)
	}
	local, err := resolve(context.Background(), m.Dir, loader.Options{})
	if err != nil {
		t.Fatalf("the cache snapshot %s as a local folder: %v", m.Dir, err)
	}
	if len(local.Files) == 0 {
		t.Fatal("no files")
	}
	// Re-point one file at the other repository's blob of the same content.
	otherBlobs := filepath.Join(c.Cache.RepoDir("org/other"), "blobs")
	entries, _ := os.ReadDir(otherBlobs)
	p := filepath.Join(m.Dir, "config.json")
	os.Remove(p)
	symlink(t, filepath.Join("..", "..", "..", filepath.Base(c.Cache.RepoDir("org/other")), "blobs", entries[0].Name()), p)
	if _, err := resolve(context.Background(), m.Dir, loader.Options{}); !errors.Is(err, errs.ErrUsage) || !strings.Contains(err.Error(), "config.json") {
		t.Fatalf("a link into another repository's blobs: got %v", err)
	}
}
