package tpu

import (
	"flag"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"
)

// Environment variables read by this package.
const (
	// EnvDevice holds the default --device spec; the flag wins when set.
	EnvDevice = "TPUTOOL_DEVICE"
	// EnvTPULibrary points at libtpu.so (a file, or a directory holding it).
	EnvTPULibrary = "TPU_LIBRARY_PATH"
	// EnvPJRTPluginPath is go-xla's ':'-separated list of plugin files or
	// directories.
	EnvPJRTPluginPath = "PJRT_PLUGIN_LIBRARY_PATH"
	// EnvNoAutoInstall disables GoMLX's plugin auto-install; set by init.
	EnvNoAutoInstall = "GOMLX_NO_AUTO_INSTALL"
	// EnvXLALog, when non-empty, keeps GoMLX/go-xla klog output on stderr.
	EnvXLALog = "TPUTOOL_XLA_LOG"
)

// backendLogMu serialises SetBackendLog.
var backendLogMu sync.Mutex

func init() {
	// Nothing may be downloaded silently: GoMLX's xla backend auto-installs
	// PJRT plugins from the network unless this is set. The cgo file also
	// calls xla.EnableAutoInstall(false), which is what actually counts
	// after xla's own init has run.
	_ = os.Setenv(EnvNoAutoInstall, "1")
	if os.Getenv(EnvXLALog) == "" {
		SetBackendLog(nil)
	}
}

// SetBackendLog routes the klog output of GoMLX and go-xla (plugin loading
// warnings and the like) to w; nil discards it, which is the default unless
// TPUTOOL_XLA_LOG is set. Messages from inside a PJRT plugin itself are
// written by C++ code straight to file descriptor 2 and are not affected.
// klog's settings are process-wide: calls are serialised (commands run in
// parallel in tests each set it under --verbose).
func SetBackendLog(w io.Writer) {
	backendLogMu.Lock()
	defer backendLogMu.Unlock()
	if w == nil {
		klog.SetLogger(logr.Discard())
		return
	}
	klog.ClearLogger()
	// Write every severity to w only: not to stderr as well (klog copies
	// ERROR and above to stderr unless the threshold is raised), and never
	// to log files.
	fs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(fs)
	_ = fs.Set("logtostderr", "false")
	_ = fs.Set("alsologtostderr", "false")
	_ = fs.Set("stderrthreshold", "FATAL")
	klog.SetOutput(w)
}

// Env is the part of the outside world that discovery and topology parsing
// look at. Tests build one over a t.TempDir(); OSEnv returns the real one.
type Env struct {
	// LookupEnv reads an environment variable (os.LookupEnv in OSEnv).
	LookupEnv func(key string) (string, bool)
	// Home is the user's home directory ("" skips the per-user locations).
	Home string
	// Root is prepended to fixed system paths such as /usr/lib, /dev and
	// /proc ("" or "/" means the real root). Paths taken from environment
	// variables are used as given.
	Root string
}

// OSEnv returns the Env of the running process.
func OSEnv() Env {
	home, _ := os.UserHomeDir()
	return Env{LookupEnv: os.LookupEnv, Home: home}
}

// Get returns the value of an environment variable, "" when unset.
func (e Env) Get(key string) string {
	v, _ := e.Lookup(key)
	return v
}

// Lookup is like os.LookupEnv over this Env.
func (e Env) Lookup(key string) (string, bool) {
	if e.LookupEnv == nil {
		return "", false
	}
	return e.LookupEnv(key)
}

// sys maps an absolute system path under Root.
func (e Env) sys(p string) string {
	if e.Root == "" || e.Root == "/" {
		return p
	}
	return filepath.Join(e.Root, p)
}

// MapEnv returns a LookupEnv function over a fixed map, for tests and for
// callers that want to describe another environment.
func MapEnv(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		v, ok := m[k]
		return v, ok
	}
}

// isFile reports whether p exists and is not a directory (symlinks followed).
func isFile(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir()
}

func isDir(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}

// globSorted expands a glob pattern, sorted, ignoring malformed patterns.
func globSorted(pattern string) []string {
	m, err := filepath.Glob(pattern)
	if err != nil {
		return nil
	}
	sort.Strings(m)
	return m
}

// splitPathList splits a ':'-separated list, dropping empty entries.
func splitPathList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ":") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
