package loader_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tputool/tputool/loader"
	"github.com/tputool/tputool/loader/hub"
	"github.com/tputool/tputool/loader/hub/hubtest"
)

// escapingShards are weight_map values that would leave the model folder.
var escapingShards = []string{
	"../outside.safetensors",
	"sub/../../outside.safetensors",
	"/etc/outside.safetensors",
	`..\outside.safetensors`,
	"C:/outside.safetensors", // a drive on Windows; on Unix a folder "C:" the model lacks
}

// errNamesEntry reports whether err explains the refusal: the weight_map
// entry, or (for "C:/..." on Unix) the missing shard.
func errNamesEntry(err error, shard string) bool {
	return err != nil && (strings.Contains(err.Error(), "weight_map") || strings.Contains(err.Error(), "names shard "+shard))
}

// TestWeightMapEscapesAreRefused: an index naming a shard outside the
// model folder fails with an error naming the entry, for a local folder
// and for a Hub model (before any weight is requested), and nothing
// outside is opened.
func TestWeightMapEscapesAreRefused(t *testing.T) {
	for _, shard := range escapingShards {
		index := jsonBytes(map[string]any{"weight_map": map[string]string{"model.embed_tokens.weight": shard}})
		t.Run("local "+shard, func(t *testing.T) {
			root := t.TempDir()
			dir := filepath.Join(root, "m")
			os.MkdirAll(dir, 0o755)
			os.WriteFile(filepath.Join(root, "outside.safetensors"), encode(t, tensor(t, "model.embed_tokens.weight", 2, 2)), 0o644)
			os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{"architectures":["LlamaForCausalLM"],"model_type":"llama"}`), 0o644)
			os.WriteFile(filepath.Join(dir, "model.safetensors.index.json"), index, 0o644)
			m, err := resolve(context.Background(), dir, loader.Options{})
			if err == nil {
				_, err = m.AllWeightFiles()
			}
			if err == nil {
				_, err = m.OpenCheckpoint("")
			}
			if !errNamesEntry(err, shard) {
				t.Fatalf("got %v, want an error naming the weight_map entry", err)
			}
		})
		t.Run("hub "+shard, func(t *testing.T) {
			srv := hubtest.New(t)
			srv.AddRepo(hubtest.Repo{ID: "org/evil", Files: []hubtest.File{
				{Path: "config.json", Data: []byte(`{"architectures":["LlamaForCausalLM"],"model_type":"llama"}`)},
				{Path: "model.safetensors.index.json", Data: index},
			}})
			_, err := resolve(context.Background(), "org/evil", loader.Options{Client: client(t, srv)})
			if !errNamesEntry(err, shard) {
				t.Fatalf("got %v, want an error naming the weight_map entry", err)
			}
			for _, r := range srv.Requests() {
				if strings.Contains(r.Path, "outside") {
					t.Errorf("requested %s", r.Path)
				}
			}
		})
	}
}

// TestListingNamesThatEscapeAreRefused: a Hub listing whose file names
// would leave the snapshot folder is refused as a whole (ErrMetadata)
// before anything is downloaded; nothing is written outside the cache.
func TestListingNamesThatEscapeAreRefused(t *testing.T) {
	for _, name := range []string{"../evil.json", "a/../../evil.json", "/etc/evil.json", `sub\..\..\evil.json`, "./config.json", "a//b.json"} {
		t.Run(name, func(t *testing.T) {
			srv := hubtest.New(t)
			srv.AddRepo(hubtest.Repo{ID: "org/evil", Files: []hubtest.File{
				{Path: "config.json", Data: []byte(`{"architectures":["LlamaForCausalLM"],"model_type":"llama"}`)},
				{Path: name, Data: []byte(`{}`)},
			}})
			c := client(t, srv)
			_, err := resolve(context.Background(), "org/evil", loader.Options{Client: c})
			if !errors.Is(err, hub.ErrMetadata) || !strings.Contains(err.Error(), "repository listing") {
				t.Fatalf("got %v, want the listing refused", err)
			}
			if n := srv.Count(func(r hubtest.Request) bool { return r.Method == "HEAD" || r.Server == "cdn" }); n != 0 {
				t.Errorf("%d file requests after a refused listing", n)
			}
			parent := filepath.Dir(c.Cache.Dir)
			if _, err := os.Stat(filepath.Join(parent, "evil.json")); err == nil {
				t.Error("a file was written outside the cache")
			}
			// A single-file download of such a name is refused too.
			if _, err := c.Download(context.Background(), "org/evil", "main", name); err == nil {
				t.Error("Download accepted", name)
			}
		})
	}
}
