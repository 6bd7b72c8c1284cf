package tpu

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/tputool/tputool/internal/errs"
)

// XLA compile caches on disk.
//
// go-xla v0.1.4 wraps neither PJRT_Executable_Serialize nor
// PJRT_Executable_DeserializeAndLoad, and GoMLX keeps its compiled
// executables in unexported fields, so tputool cannot store whole
// executables. What it can do is turn on the caches XLA keeps itself, which
// the GPU plugin reads from XLA_FLAGS when it first compiles:
//
//   - --xla_gpu_per_fusion_autotune_cache_dir: autotuning results (GEMM and
//     fusion configurations), one file per fusion, keyed by XLA on the
//     fusion's HLO and the GPU model;
//   - --xla_gpu_kernel_cache_file (with
//     --xla_gpu_enable_llvm_module_compilation_parallelism, which it needs):
//     compiled GPU kernels, keyed by XLA on the kernel.
//
// Both skip the slowest parts of a GPU compile (autotuning, PTX to cubin),
// not the HLO passes. libtpu and the XLA CPU plugin have no such cache.
//
// An XLA that does not know a flag named in XLA_FLAGS aborts the process,
// so a flag is only set when the plugin file contains its name (XLA
// registers flags by name); the scan is cached next to the cache.

// EnvXLACache chooses the XLA caches: "autotune" (the default), "all"
// (autotune results and kernels) or "off".
const EnvXLACache = "TPUTOOL_XLA_CACHE"

// EnvXLAFlags is the variable XLA reads its flags from.
const EnvXLAFlags = "XLA_FLAGS"

// XLA cache flags.
const (
	flagAutotuneDir     = "xla_gpu_per_fusion_autotune_cache_dir"
	flagKernelCacheFile = "xla_gpu_kernel_cache_file"
	flagLLVMParallelism = "xla_gpu_enable_llvm_module_compilation_parallelism"
)

// XLACache describes the XLA caches a device uses.
type XLACache struct {
	// Mode is "autotune" or "all".
	Mode string `json:"mode"`
	// Dir is $XDG_CACHE_HOME/tputool/xla/<Key>.
	Dir string `json:"dir"`
	// Key is CacheKey{Plugin, Device}.Fingerprint().
	Key string `json:"key"`
	// Flags are the flags added to XLA_FLAGS.
	Flags []string `json:"flags"`
	// Unknown lists wanted flags the plugin does not have.
	Unknown []string `json:"unknown,omitempty"`
	// Kept lists wanted flags XLA_FLAGS already set (the user's value wins).
	Kept []string `json:"kept,omitempty"`
}

// PluginID identifies a PJRT plugin file without loading it.
type PluginID struct {
	Path    string
	Size    int64
	ModTime time.Time
}

// PluginIdentity stats a plugin file.
func PluginIdentity(path string) (PluginID, error) {
	st, err := os.Stat(path)
	if err != nil {
		return PluginID{}, err
	}
	return PluginID{Path: path, Size: st.Size(), ModTime: st.ModTime().UTC()}, nil
}

// CacheKey identifies compiled code: what was compiled (Program; empty for
// XLA's own caches, which key their entries by content), by which compiler
// (Plugin: a new file, even at the same path, is a new key) for which
// hardware (Device: kind, models, driver).
type CacheKey struct {
	Program string
	Plugin  PluginID
	Device  string
}

// cacheKeyVersion changes when the key's encoding or the cache layout does.
const cacheKeyVersion = "tputool-xla-cache-v1"

// Fingerprint is a stable hex digest of the key: equal keys give equal
// fingerprints in every process and on every machine; any change of a
// field gives another.
func (k CacheKey) Fingerprint() string {
	h := sha256.New()
	field := func(s string) {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(s)))
		h.Write(n[:])
		h.Write([]byte(s))
	}
	field(cacheKeyVersion)
	field(k.Program)
	field(k.Plugin.Path)
	field(fmt.Sprint(k.Plugin.Size))
	field(fmt.Sprint(k.Plugin.ModTime.UTC().UnixNano()))
	field(k.Device)
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// XLACacheRoot is $XDG_CACHE_HOME/tputool/xla (~/.cache/tputool/xla); ""
// when neither is known.
func XLACacheRoot(env Env) string {
	if d := env.Get("XDG_CACHE_HOME"); filepath.IsAbs(d) {
		return filepath.Join(d, "tputool", "xla")
	}
	if env.Home == "" {
		return ""
	}
	return filepath.Join(env.Home, ".cache", "tputool", "xla")
}

// gpuIdentity describes the NVIDIA GPUs and driver from /proc (no library
// is loaded): "gpu; NVIDIA H200 x8; driver 550.54.15" or "gpu" when /proc
// has nothing.
func gpuIdentity(env Env) string {
	parts := []string{string(KindGPU)}
	infos, _ := filepath.Glob(env.sys("/proc/driver/nvidia/gpus/*/information"))
	models := map[string]int{}
	for _, f := range infos {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "Model" {
				models[strings.TrimSpace(v)]++
			}
		}
	}
	var names []string
	for m, n := range models {
		names = append(names, fmt.Sprintf("%s x%d", m, n))
	}
	sort.Strings(names)
	parts = append(parts, names...)
	if b, err := os.ReadFile(env.sys("/proc/driver/nvidia/version")); err == nil {
		first, _, _ := strings.Cut(string(b), "\n")
		parts = append(parts, "driver "+strings.Join(strings.Fields(first), " "))
	}
	return strings.Join(parts, "; ")
}

// flagSet reports whether XLA_FLAGS already sets a flag.
func flagSet(xlaFlags, name string) bool {
	for _, f := range strings.Fields(xlaFlags) {
		f = strings.TrimLeft(f, "-")
		if f == name || strings.HasPrefix(f, name+"=") {
			return true
		}
	}
	return false
}

// planXLACache works out the XLA caches for a plugin of a kind: nil when
// none applies (not a GPU, turned off, no cache directory). It creates the
// cache directory and scans the plugin for the flags' names. A problem
// that only costs the cache is a note; a bad TPUTOOL_XLA_CACHE is a usage
// error.
func planXLACache(env Env, kind Kind, plugin string) (*XLACache, string, error) {
	mode := env.Get(EnvXLACache)
	switch strings.ToLower(mode) {
	case "", "autotune", "on", "1", "true":
		mode = "autotune"
	case "all":
		mode = "all"
	case "off", "0", "false", "none":
		return nil, "", nil
	default:
		return nil, "", errs.Usagef("$%s=%q: want autotune (the default), all or off", EnvXLACache, mode)
	}
	if kind != KindGPU {
		return nil, "", nil
	}
	root := XLACacheRoot(env)
	if root == "" {
		return nil, "XLA compile cache off: neither $XDG_CACHE_HOME nor a home directory is known", nil
	}
	id, err := PluginIdentity(plugin)
	if err != nil {
		return nil, "", nil // the load fails next, with the file named
	}
	key := CacheKey{Plugin: id, Device: gpuIdentity(env)}.Fingerprint()
	c := &XLACache{Mode: mode, Key: key, Dir: filepath.Join(root, key)}
	if err := os.MkdirAll(c.Dir, 0o755); err != nil {
		return nil, fmt.Sprintf("XLA compile cache off: %v", err), nil
	}
	want := [][2]string{{flagAutotuneDir, filepath.Join(c.Dir, "autotune")}}
	if mode == "all" {
		want = append(want, [2]string{flagKernelCacheFile, filepath.Join(c.Dir, "kernels.bin")},
			[2]string{flagLLVMParallelism, "true"})
	}
	names := make([]string, len(want))
	for i, w := range want {
		names[i] = w[0]
	}
	has, err := pluginFlags(filepath.Join(c.Dir, "flags.json"), plugin, names)
	if err != nil {
		return nil, fmt.Sprintf("XLA compile cache off: reading %s: %v", plugin, err), nil
	}
	existing := env.Get(EnvXLAFlags)
	for _, w := range want {
		switch {
		case !has[w[0]]:
			c.Unknown = append(c.Unknown, w[0])
		case flagSet(existing, w[0]):
			c.Kept = append(c.Kept, w[0])
		default:
			c.Flags = append(c.Flags, "--"+w[0]+"="+w[1])
		}
	}
	if mode == "all" && !has[flagKernelCacheFile] && has[flagLLVMParallelism] {
		// Parallel LLVM compilation is only wanted for the kernel cache.
		c.Flags = slices.DeleteFunc(c.Flags, func(f string) bool { return f == "--"+flagLLVMParallelism+"=true" })
	}
	if len(c.Flags) == 0 && len(c.Kept) == 0 {
		return nil, fmt.Sprintf("XLA compile cache off: %s does not know %s", plugin, strings.Join(c.Unknown, ", ")), nil
	}
	return c, "", nil
}

// pluginFlags reports which of names occur in the plugin file, reusing the
// answer stored in cacheFile (the cache directory is per plugin file).
func pluginFlags(cacheFile, plugin string, names []string) (map[string]bool, error) {
	var stored map[string]bool
	if b, err := os.ReadFile(cacheFile); err == nil && json.Unmarshal(b, &stored) == nil {
		complete := true
		for _, n := range names {
			if _, ok := stored[n]; !ok {
				complete = false
			}
		}
		if complete {
			return stored, nil
		}
	}
	has, err := fileContains(plugin, names)
	if err != nil {
		return nil, err
	}
	for k, v := range stored {
		if _, ok := has[k]; !ok {
			has[k] = v
		}
	}
	if b, err := json.Marshal(has); err == nil {
		_ = os.WriteFile(cacheFile, b, 0o644) // only a shortcut for the next run
	}
	return has, nil
}

// fileContains reports which strings occur in a file, reading it once in
// chunks (plugins are hundreds of megabytes).
func fileContains(path string, names []string) (map[string]bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	has := make(map[string]bool, len(names))
	longest := 0
	for _, n := range names {
		has[n] = false
		longest = max(longest, len(n))
	}
	const chunk = 4 << 20
	buf := make([]byte, 0, chunk+longest)
	for {
		n, err := io.ReadFull(f, buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		for _, name := range names {
			if !has[name] && bytes.Contains(buf, []byte(name)) {
				has[name] = true
			}
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return has, nil
		}
		if err != nil {
			return nil, err
		}
		// Keep the tail, so a name across the chunk boundary is found.
		tail := min(longest-1, len(buf))
		copy(buf, buf[len(buf)-tail:])
		buf = buf[:tail]
	}
}

// xlaCacheSetup is the XLA_FLAGS change made before loading one plugin.
type xlaCacheSetup struct {
	cache     *XLACache
	note      string
	prev      string
	hadPrev   bool
	installed bool
}

// setupXLACache sets XLA_FLAGS for a GPU plugin about to be loaded; undo
// restores it when the load fails.
func setupXLACache(env Env, c candidate) (*xlaCacheSetup, error) {
	s := &xlaCacheSetup{}
	if c.backend != BackendXLA || !xlaCompiled {
		return s, nil
	}
	cache, note, err := planXLACache(env, c.kind, c.path)
	if err != nil {
		return nil, err
	}
	s.cache, s.note = cache, note
	if cache == nil || len(cache.Flags) == 0 {
		return s, nil
	}
	// The plugin reads the process environment (the C one: with cgo,
	// os.Setenv updates it).
	s.prev, s.hadPrev = os.LookupEnv(EnvXLAFlags)
	flags := strings.TrimSpace(s.prev + " " + strings.Join(cache.Flags, " "))
	if err := os.Setenv(EnvXLAFlags, flags); err != nil {
		s.cache, s.note = nil, fmt.Sprintf("XLA compile cache off: setting %s: %v", EnvXLAFlags, err)
		return s, nil
	}
	s.installed = true
	return s, nil
}

func (s *xlaCacheSetup) undo() {
	if !s.installed {
		return
	}
	if s.hadPrev {
		_ = os.Setenv(EnvXLAFlags, s.prev)
	} else {
		_ = os.Unsetenv(EnvXLAFlags)
	}
	s.installed = false
}
