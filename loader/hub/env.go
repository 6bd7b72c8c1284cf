package hub

import (
	"os"
	"os/user"
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
	// Offline is HF_HUB_OFFLINE set to 1/ON/YES/TRUE, or when HF_HUB_OFFLINE
	// is unset or empty, TRANSFORMERS_OFFLINE (HF_HUB_OFFLINE=0 wins over
	// TRANSFORMERS_OFFLINE=1, as in huggingface_hub).
	Offline bool
	// DisableImplicitToken is HF_HUB_DISABLE_IMPLICIT_TOKEN: Token stays
	// empty whatever HF_TOKEN or the token file hold, as huggingface_hub's
	// get_token_to_send sends no token it was not given explicitly. A token
	// set on the Client afterwards (tputool's --token) is still sent.
	DisableImplicitToken bool
	// EtagTimeout is HF_HUB_ETAG_TIMEOUT: how long a metadata request may take
	// before tputool falls back to the cache.
	EtagTimeout time.Duration
	// DownloadTimeout is HF_HUB_DOWNLOAD_TIMEOUT: how long a download may go
	// without receiving a byte.
	DownloadTimeout time.Duration
}

// EnvFrom reads the configuration through lookup (os.LookupEnv, or a map in
// tests). HOME is read through lookup too, falling back to the password
// database, then os.UserHomeDir.
func EnvFrom(lookup func(string) (string, bool)) Env {
	get := func(k string) string { v, _ := lookup(k); return v }
	expand := func(p string) string { return expandPath(p, lookup) }

	e := Env{
		Endpoint:             strings.TrimRight(get("HF_ENDPOINT"), "/"),
		EtagTimeout:          secondsOr(get("HF_HUB_ETAG_TIMEOUT"), DefaultEtagTimeout),
		DownloadTimeout:      secondsOr(get("HF_HUB_DOWNLOAD_TIMEOUT"), DefaultDownloadTimeout),
		Offline:              IsTrue(firstSet(get("HF_HUB_OFFLINE"), get("TRANSFORMERS_OFFLINE"))),
		DisableImplicitToken: IsTrue(get("HF_HUB_DISABLE_IMPLICIT_TOKEN")),
	}
	if e.Endpoint == "" {
		e.Endpoint = DefaultEndpoint
	}
	if h := get("HF_HOME"); h != "" {
		e.Home = expand(h)
	} else {
		xdg := get("XDG_CACHE_HOME")
		if xdg == "" {
			xdg = filepath.Join(expandUser("~", lookup), ".cache")
		}
		e.Home = filepath.Join(expand(xdg), "huggingface")
	}
	// As constants.py, the defaults built from HF_HOME go through
	// expandvars(expanduser()) once more.
	switch {
	case get("HF_HUB_CACHE") != "":
		e.CacheDir = expand(get("HF_HUB_CACHE"))
	case get("HUGGINGFACE_HUB_CACHE") != "":
		e.CacheDir = expand(get("HUGGINGFACE_HUB_CACHE"))
	default:
		e.CacheDir = expand(filepath.Join(e.Home, "hub"))
	}
	if e.DisableImplicitToken {
		return e
	}
	if t := cleanToken(get("HF_TOKEN")); t != "" {
		e.Token, e.TokenSource = Token(t), "HF_TOKEN"
	} else if t := cleanToken(get("HUGGING_FACE_HUB_TOKEN")); t != "" {
		e.Token, e.TokenSource = Token(t), "HUGGING_FACE_HUB_TOKEN"
	} else {
		path := get("HF_TOKEN_PATH")
		if path == "" {
			path = filepath.Join(e.Home, "token")
		}
		path = expand(path)
		if b, err := os.ReadFile(path); err == nil {
			if t := cleanToken(string(b)); t != "" {
				e.Token, e.TokenSource = Token(t), path
			}
		}
	}
	return e
}

// IsTrue reports whether an environment value is one of huggingface_hub's
// true values: 1, ON, YES, TRUE in any case, and nothing else (no spaces
// around), as constants._is_true.
func IsTrue(v string) bool {
	switch strings.ToUpper(v) {
	case "1", "ON", "YES", "TRUE":
		return true
	}
	return false
}

// firstSet is Python's `a or b` on two environment values: a unless it is
// empty (or unset).
func firstSet(a, b string) string {
	if a != "" {
		return a
	}
	return b
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

// homeDir is what os.path.expanduser("~") gives: $HOME when it is set
// (even empty), else the password database's home of the current user.
func homeDir(lookup func(string) (string, bool)) string {
	if h, ok := lookup("HOME"); ok {
		return h
	}
	if u, err := user.Current(); err == nil && u.HomeDir != "" {
		return u.HomeDir
	}
	h, err := os.UserHomeDir()
	if err != nil {
		return "."
	}
	return h
}

// expandPath is Python's os.path.expandvars(os.path.expanduser(p)) on
// POSIX, the way constants.py reads HF_HOME, HF_HUB_CACHE and
// HF_TOKEN_PATH.
func expandPath(p string, lookup func(string) (string, bool)) string {
	return expandVars(expandUser(p, lookup), lookup)
}

// expandVars is posixpath.expandvars: $NAME (NAME made of ASCII letters,
// digits and _) and ${NAME} are replaced by the variable's value when it
// is set, even to ""; an unknown variable, a lone $ and an unclosed ${ stay
// as written. Values are not expanded again.
func expandVars(p string, lookup func(string) (string, bool)) string {
	if !strings.Contains(p, "$") {
		return p
	}
	var b strings.Builder
	for i := 0; i < len(p); {
		if p[i] != '$' || i+1 >= len(p) {
			b.WriteByte(p[i])
			i++
			continue
		}
		var name string
		end := -1 // index after the reference
		if p[i+1] == '{' {
			if j := strings.IndexByte(p[i+2:], '}'); j >= 0 {
				name, end = p[i+2:i+2+j], i+3+j
			}
		} else {
			j := i + 1
			for j < len(p) && isWordByte(p[j]) {
				j++
			}
			if j > i+1 {
				name, end = p[i+1:j], j
			}
		}
		if end < 0 {
			b.WriteByte('$')
			i++
			continue
		}
		if v, ok := lookup(name); ok {
			b.WriteString(v)
		} else {
			b.WriteString(p[i:end])
		}
		i = end
	}
	return b.String()
}

func isWordByte(c byte) bool {
	return c == '_' || '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
}

// ExpandUser expands a leading "~" or "~user" as os.path.expanduser does.
func ExpandUser(p string) string { return expandUser(p, os.LookupEnv) }

// expandUser is posixpath.expanduser: "~" and "~/..." take $HOME (else the
// password database's home), "~user/..." that user's home; an unknown user
// leaves p as it is. The home's trailing slashes are dropped, and an empty
// result is "/".
func expandUser(p string, lookup func(string) (string, bool)) string {
	if !strings.HasPrefix(p, "~") {
		return p
	}
	i := strings.IndexByte(p, '/')
	if i < 0 {
		i = len(p)
	}
	var home string
	if i == 1 {
		home = homeDir(lookup)
	} else {
		u, err := user.Lookup(p[1:i])
		if err != nil {
			return p
		}
		home = u.HomeDir
	}
	if out := strings.TrimRight(home, "/") + p[i:]; out != "" {
		return out
	}
	return "/"
}

func cleanToken(t string) string {
	t = strings.ReplaceAll(t, "\r", "")
	t = strings.ReplaceAll(t, "\n", "")
	return strings.TrimSpace(t)
}
