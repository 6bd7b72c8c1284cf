package hub_test

import (
	"context"
	"errors"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/tputool/tputool/loader/hub"
	"github.com/tputool/tputool/loader/hub/hubtest"
)

// A name that is only not a portable path (a backslash, a drive letter)
// is left out of the listing with a warning naming it, where it failed
// the whole repository; downloading it is refused by name. A name that
// climbs or is absolute still refuses the listing (TestListingNamesThat-
// EscapeAreRefused, loader).
func TestUnsafeNamesAreSkippedFromTheListing(t *testing.T) {
	srv := hubtest.New(t)
	repo := tinyRepo()
	bad := []string{`weights\model.bin`, "C:evil.txt"}
	for _, name := range bad {
		repo.Files = append(repo.Files, hubtest.File{Path: name, Data: []byte("x")})
	}
	srv.AddRepo(repo)
	c, rec := newClient(t, srv)
	ctx := context.Background()
	s, err := c.Snapshot(ctx, "org/tiny", hub.SnapshotOptions{})
	if err != nil {
		t.Fatalf("one odd name failed the listing: %v", err)
	}
	want := []string{"config.json", "model.safetensors", "tokenizer/tokenizer.json"}
	if !slices.Equal(s.RepoFiles, want) || !slices.Equal(s.Files, want) {
		t.Errorf("files %v / %v, want %v", s.RepoFiles, s.Files, want)
	}
	for _, name := range bad {
		if !strings.Contains(rec.all(), strconv.Quote(name)) {
			t.Errorf("no warning names %q: %s", name, rec.all())
		}
		_, err := c.Download(ctx, "org/tiny", "main", name)
		if !errors.Is(err, hub.ErrEntryNotFound) || !strings.Contains(err.Error(), "file name") {
			t.Errorf("Download(%q) = %v, want a refusal naming the file", name, err)
		}
	}
	if st := hubtest.CheckCache(t, c.Cache.Dir); st.Pointers != 3 {
		t.Errorf("cache %+v, want the three good files", st)
	}
	for _, name := range []string{"../escape.txt", "/abs.txt", `w\..\x.txt`} {
		srv := hubtest.New(t)
		repo := tinyRepo()
		repo.Files = append(repo.Files, hubtest.File{Path: name, Data: []byte("x")})
		srv.AddRepo(repo)
		c, _ := newClient(t, srv)
		if _, err := c.Snapshot(ctx, "org/tiny", hub.SnapshotOptions{}); !errors.Is(err, hub.ErrMetadata) {
			t.Errorf("%q: %v, want the listing refused", name, err)
		}
	}
}

func envMap(kv ...string) func(string) (string, bool) {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

// HF_HUB_DISABLE_IMPLICIT_TOKEN: neither HF_TOKEN nor the token file is
// sent (get_token_to_send with token=None); only an explicit token is.
func TestDisableImplicitToken(t *testing.T) {
	home := t.TempDir()
	os.WriteFile(filepath.Join(home, "token"), []byte("hf_file"), 0o600)
	for _, v := range []string{"1", "true", "Yes", "ON"} {
		for _, kv := range [][]string{{"HF_TOKEN", "hf_env"}, {"HUGGING_FACE_HUB_TOKEN", "hf_legacy"}, {}} {
			e := hub.EnvFrom(envMap(append([]string{"HF_HOME", home, "HF_HUB_DISABLE_IMPLICIT_TOKEN", v}, kv...)...))
			if e.Token.IsSet() || e.TokenSource != "" || !e.DisableImplicitToken {
				t.Errorf("DISABLE_IMPLICIT_TOKEN=%s %v: token from %q", v, kv, e.TokenSource)
			}
		}
	}
	for _, v := range []string{"", "0", "false", "no"} {
		e := hub.EnvFrom(envMap("HF_HOME", home, "HF_HUB_DISABLE_IMPLICIT_TOKEN", v))
		if e.Token.Reveal() != "hf_file" {
			t.Errorf("DISABLE_IMPLICIT_TOKEN=%q: token %q, want the file's", v, e.Token.Reveal())
		}
	}
	// An explicit token (tputool's --token sets Client.Token) is sent.
	srv := hubtest.New(t)
	srv.AddRepo(hubtest.Repo{ID: "org/private", Private: true, Files: []hubtest.File{{Path: "config.json", Data: cfgJSON}}})
	env := hub.EnvFrom(envMap("HF_HOME", home, "HF_TOKEN", srv.Token, "HF_HUB_DISABLE_IMPLICIT_TOKEN", "1", "HF_ENDPOINT", srv.URL()))
	env.CacheDir = t.TempDir()
	c := hub.New(env)
	if _, err := c.Download(context.Background(), "org/private", "main", "config.json"); !errors.Is(err, hub.ErrRepoNotFound) {
		t.Errorf("implicit token sent: %v", err)
	}
	c.Token = hub.Token(srv.Token)
	if _, err := c.Download(context.Background(), "org/private", "main", "config.json"); err != nil {
		t.Errorf("explicit token: %v", err)
	}
}

// Offline is _is_true(HF_HUB_OFFLINE or TRANSFORMERS_OFFLINE): a set
// HF_HUB_OFFLINE decides alone, and _is_true takes no surrounding spaces.
func TestOfflineLikeHuggingfaceHub(t *testing.T) {
	cases := []struct {
		hf, tf string
		want   bool
	}{
		{"", "", false},
		{"1", "", true},
		{"", "1", true},
		{"0", "1", false},
		{"false", "yes", false},
		{"TRUE", "0", true},
		{" 1", "", false},
	}
	for _, tc := range cases {
		lookup := envMap("HOME", "/h")
		if tc.hf != "" {
			lookup = envMap("HOME", "/h", "HF_HUB_OFFLINE", tc.hf, "TRANSFORMERS_OFFLINE", tc.tf)
		} else if tc.tf != "" {
			lookup = envMap("HOME", "/h", "HF_HUB_OFFLINE", "", "TRANSFORMERS_OFFLINE", tc.tf)
		}
		if got := hub.EnvFrom(lookup).Offline; got != tc.want {
			t.Errorf("HF_HUB_OFFLINE=%q TRANSFORMERS_OFFLINE=%q: offline %v, want %v", tc.hf, tc.tf, got, tc.want)
		}
	}
}

// Paths expand as os.path.expandvars(os.path.expanduser(p)) on POSIX:
// unknown variables stay exactly as written, known ones (even empty) are
// replaced once, ~ and ~user take a home.
func TestPathExpansionLikePython(t *testing.T) {
	cases := []struct {
		cache, want string
	}{
		{"$NOPE/c", "$NOPE/c"},
		{"${NOPE}/c", "${NOPE}/c"},
		{"/a/$NOPE${NOPE}x", "/a/$NOPE${NOPE}x"},
		{"$HOME/c", "/home/me/c"},
		{"${HOME}c", "/home/mec"},
		{"/x/$EMPTY/c", "/x//c"},
		{"/x/$$HOME", "/x/$/home/me"},
		{"/x/$", "/x/$"},
		{"/x/${HOME", "/x/${HOME"},
		{"/x/$-y", "/x/$-y"},
		{"/x/${}", "/x/${}"},
		{"/x/$LOOP", "/x/$HOME"}, // values are not expanded again
		{"~", "/home/me"},
		{"~/c", "/home/me/c"},
		{"~nosuchuser_tputool/c", "~nosuchuser_tputool/c"},
		{"/x/~/c", "/x/~/c"},
	}
	for _, tc := range cases {
		lookup := envMap("HOME", "/home/me", "EMPTY", "", "LOOP", "$HOME", "HF_HUB_CACHE", tc.cache)
		if got := hub.EnvFrom(lookup).CacheDir; got != tc.want {
			t.Errorf("HF_HUB_CACHE=%q: %q, want %q", tc.cache, got, tc.want)
		}
	}
	if u, err := user.Current(); err == nil && u.HomeDir != "" {
		want := strings.TrimRight(u.HomeDir, "/") + "/c"
		if got := hub.EnvFrom(envMap("HOME", "/elsewhere", "HF_HUB_CACHE", "~"+u.Username+"/c")).CacheDir; got != want {
			t.Errorf("~%s/c: %q, want %q", u.Username, got, want)
		}
	}
	// The default cache goes through the expansion once more, as
	// constants.py expands HF_HUB_CACHE's default built from HF_HOME.
	if got := hub.EnvFrom(envMap("HF_HOME", "$A", "A", "$B", "B", "/bee")).CacheDir; got != "/bee/hub" {
		t.Errorf("default cache under HF_HOME=$A: %q", got)
	}
	// expanduser drops the home's trailing slashes, and never yields "".
	if got := hub.EnvFrom(envMap("HOME", "/home/me/", "HF_HUB_CACHE", "~/c")).CacheDir; got != "/home/me/c" {
		t.Errorf("~/c with HOME=/home/me/: %q", got)
	}
	if got := hub.EnvFrom(envMap("HOME", "/", "HF_HUB_CACHE", "~")).CacheDir; got != "/" {
		t.Errorf("~ with HOME=/: %q", got)
	}
}
