package hub

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Defaults shared with huggingface_hub's constants.py.
const (
	DefaultEndpoint        = "https://huggingface.co"
	DefaultRevision        = "main"
	DefaultEtagTimeout     = 10 * time.Second
	DefaultDownloadTimeout = 10 * time.Second
)

// Env is the Hub configuration read from the environment, resolved the way
// huggingface_hub resolves it.
type Env struct {
	// Endpoint is HF_ENDPOINT without a trailing slash.
	Endpoint string
	// Home is HF_HOME ($XDG_CACHE_HOME/huggingface, ~/.cache/huggingface).
	Home string
	// CacheDir is HF_HUB_CACHE (legacy HUGGINGFACE_HUB_CACHE), else Home/hub.
	CacheDir string
	// Token is HF_TOKEN (legacy HUGGING_FACE_HUB_TOKEN), else the contents of
	// HF_TOKEN_PATH (default Home/token); empty when none is set.
	Token Token
	// TokenSource says where Token came from ("HF_TOKEN", a file path), for
	// verbose logs; it never contains the token itself.
	TokenSource string
	// Offline is HF_HUB_OFFLINE (or TRANSFORMERS_OFFLINE) set to 1/ON/YES/TRUE.
	Offline bool
	// EtagTimeout is HF_HUB_ETAG_TIMEOUT: how long a metadata request may take
	// before tputool falls back to the cache.
	EtagTimeout time.Duration
	// DownloadTimeout is HF_HUB_DOWNLOAD_TIMEOUT: how long a download may go
	// without receiving a byte.
	DownloadTimeout time.Duration
}

// EnvFrom reads the configuration through lookup (os.LookupEnv, or a map in
// tests). HOME is read through lookup too, falling back to os.UserHomeDir.
func EnvFrom(lookup func(string) (string, bool)) Env {
	get := func(k string) string { v, _ := lookup(k); return v }
	expand := func(p string) string { return expandPath(p, lookup) }

	e := Env{
		Endpoint:        strings.TrimRight(get("HF_ENDPOINT"), "/"),
		EtagTimeout:     secondsOr(get("HF_HUB_ETAG_TIMEOUT"), DefaultEtagTimeout),
		DownloadTimeout: secondsOr(get("HF_HUB_DOWNLOAD_TIMEOUT"), DefaultDownloadTimeout),
		Offline:         IsTrue(get("HF_HUB_OFFLINE")) || IsTrue(get("TRANSFORMERS_OFFLINE")),
	}
	if e.Endpoint == "" {
		e.Endpoint = DefaultEndpoint
	}
	if h := get("HF_HOME"); h != "" {
		e.Home = expand(h)
	} else {
		xdg := get("XDG_CACHE_HOME")
		if xdg == "" {
			xdg = filepath.Join(homeDir(lookup), ".cache")
		}
		e.Home = filepath.Join(expand(xdg), "huggingface")
	}
	switch {
	case get("HF_HUB_CACHE") != "":
		e.CacheDir = expand(get("HF_HUB_CACHE"))
	case get("HUGGINGFACE_HUB_CACHE") != "":
		e.CacheDir = expand(get("HUGGINGFACE_HUB_CACHE"))
	default:
		e.CacheDir = filepath.Join(e.Home, "hub")
	}
	if t := cleanToken(get("HF_TOKEN")); t != "" {
		e.Token, e.TokenSource = Token(t), "HF_TOKEN"
	} else if t := cleanToken(get("HUGGING_FACE_HUB_TOKEN")); t != "" {
		e.Token, e.TokenSource = Token(t), "HUGGING_FACE_HUB_TOKEN"
	} else {
		path := get("HF_TOKEN_PATH")
		if path == "" {
			path = filepath.Join(e.Home, "token")
		} else {
			path = expand(path)
		}
		if b, err := os.ReadFile(path); err == nil {
			if t := cleanToken(string(b)); t != "" {
				e.Token, e.TokenSource = Token(t), path
			}
		}
	}
	return e
}

// IsTrue reports whether an environment value is one of huggingface_hub's
// true values: 1, ON, YES, TRUE (any case).
func IsTrue(v string) bool {
	switch strings.ToUpper(strings.TrimSpace(v)) {
	case "1", "ON", "YES", "TRUE":
		return true
	}
	return false
}

func secondsOr(v string, def time.Duration) time.Duration {
	if v == "" {
		return def
	}
	f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
	if err != nil || f <= 0 {
		return def
	}
	return time.Duration(f * float64(time.Second))
}

func homeDir(lookup func(string) (string, bool)) string {
	if h, ok := lookup("HOME"); ok && h != "" {
		return h
	}
	h, err := os.UserHomeDir()
	if err != nil {
		return "."
	}
	return h
}

// expandPath expands a leading ~ and $VAR/${VAR} references the way
// Python's os.path.expandvars(os.path.expanduser(p)) does: unknown
// variables are left as written.
func expandPath(p string, lookup func(string) (string, bool)) string {
	return os.Expand(expandUser(p, lookup), func(name string) string {
		if v, ok := lookup(name); ok {
			return v
		}
		return "${" + name + "}"
	})
}

// ExpandUser expands a leading "~/" with the user's home directory.
func ExpandUser(p string) string { return expandUser(p, os.LookupEnv) }

func expandUser(p string, lookup func(string) (string, bool)) string {
	if p == "~" || strings.HasPrefix(p, "~/") {
		return homeDir(lookup) + p[1:]
	}
	return p
}

func cleanToken(t string) string {
	t = strings.ReplaceAll(t, "\r", "")
	t = strings.ReplaceAll(t, "\n", "")
	return strings.TrimSpace(t)
}
