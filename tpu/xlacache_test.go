package tpu

import (
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tputool/tputool/internal/errs"
)

func TestCacheKeyFingerprint(t *testing.T) {
	base := CacheKey{
		Program: "decode (Int32)[1 1]",
		Plugin:  PluginID{Path: "/p/xla_cuda_plugin.so", Size: 123456, ModTime: time.Date(2025, 6, 1, 10, 0, 0, 0, time.UTC)},
		Device:  "gpu; NVIDIA H200 x1; driver 550.54.15",
	}
	fp := base.Fingerprint()
	if b, err := hex.DecodeString(fp); err != nil || len(b) != 16 {
		t.Fatalf("fingerprint %q is not 32 hex digits", fp)
	}
	// Stable: the same key (also with the time in another zone) gives the
	// same value in every process. The pinned digest is the first 16 bytes
	// of sha256 over the length-prefixed fields, recomputed with Python's
	// hashlib when it was written.
	same := base
	same.Plugin.ModTime = base.Plugin.ModTime.In(time.FixedZone("x", 3600))
	if same.Fingerprint() != fp {
		t.Error("the same key gave another fingerprint")
	}
	if fp != "d4e761abf2bd1505de4028e6205c1637" {
		t.Logf("fingerprint %s", fp)
		t.Error("the fingerprint of a fixed key changed: caches written by older builds will be missed (bump cacheKeyVersion on purpose only)")
	}
	// Any change of program, plugin or device changes it.
	changes := map[string]func(k *CacheKey){
		"program":       func(k *CacheKey) { k.Program = "decode (Int32)[2 1]" },
		"no program":    func(k *CacheKey) { k.Program = "" },
		"plugin path":   func(k *CacheKey) { k.Plugin.Path = "/q/xla_cuda_plugin.so" },
		"plugin size":   func(k *CacheKey) { k.Plugin.Size++ },
		"plugin mtime":  func(k *CacheKey) { k.Plugin.ModTime = k.Plugin.ModTime.Add(time.Second) },
		"device model":  func(k *CacheKey) { k.Device = "gpu; NVIDIA H100 80GB HBM3 x1; driver 550.54.15" },
		"driver":        func(k *CacheKey) { k.Device = "gpu; NVIDIA H200 x1; driver 560.28.03" },
		"field borders": func(k *CacheKey) { k.Program, k.Device = base.Program+"gpu", strings.TrimPrefix(base.Device, "gpu") },
	}
	seen := map[string]string{fp: "base"}
	for name, change := range changes {
		k := base
		change(&k)
		got := k.Fingerprint()
		if prev, dup := seen[got]; dup {
			t.Errorf("%s: same fingerprint as %s", name, prev)
		}
		seen[got] = name
	}
}

func TestXLACacheRoot(t *testing.T) {
	env := Env{LookupEnv: MapEnv(map[string]string{"XDG_CACHE_HOME": "/c"}), Home: "/home/u"}
	if got := XLACacheRoot(env); got != "/c/tputool/xla" {
		t.Errorf("XDG: %s", got)
	}
	// A relative XDG_CACHE_HOME is invalid by the spec: the home default applies.
	env.LookupEnv = MapEnv(map[string]string{"XDG_CACHE_HOME": "rel"})
	if got := XLACacheRoot(env); got != "/home/u/.cache/tputool/xla" {
		t.Errorf("relative XDG: %s", got)
	}
	if got := XLACacheRoot(Env{}); got != "" {
		t.Errorf("no home: %q", got)
	}
}

func TestGPUIdentity(t *testing.T) {
	f := newFakeEnv(t)
	if got := gpuIdentity(f.Env()); got != "gpu" {
		t.Errorf("no /proc: %q", got)
	}
	for _, bus := range []string{"0000:1b:00.0", "0000:2c:00.0"} {
		writeFile(t, f.sys("/proc/driver/nvidia/gpus/"+bus+"/information"),
			"Model: \t\t NVIDIA H200\nIRQ:   16\nGPU UUID: \t GPU-x\n")
	}
	writeFile(t, f.sys("/proc/driver/nvidia/version"),
		"NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 22:23:56 UTC 2024\nGCC version: gcc\n")
	want := "gpu; NVIDIA H200 x2; driver NVRM version: NVIDIA UNIX x86_64 Kernel Module 550.54.15 Tue Mar 5 22:23:56 UTC 2024"
	if got := gpuIdentity(f.Env()); got != want {
		t.Errorf("identity\n got %q\nwant %q", got, want)
	}
}

// fakeGPUPlugin writes a file holding the given XLA flag names, as a
// plugin binary holds its flags' names.
func fakeGPUPlugin(t *testing.T, f *fakeEnv, flags ...string) string {
	p := f.sys("/opt/jax_plugins/xla_cuda12/xla_cuda_plugin.so")
	writeFile(t, p, "\x7fELF...junk..."+strings.Join(flags, "\x00junk\x00")+"\x00tail")
	return p
}

func TestPlanXLACache(t *testing.T) {
	f := newFakeEnv(t)
	plugin := fakeGPUPlugin(t, f, flagAutotuneDir, flagKernelCacheFile, flagLLVMParallelism)
	c, note, err := planXLACache(f.Env(), KindGPU, plugin)
	if err != nil || note != "" || c == nil {
		t.Fatalf("plan: %v %q %v", c, note, err)
	}
	root := filepath.Join(f.Home, ".cache", "tputool", "xla")
	if filepath.Dir(c.Dir) != root || filepath.Base(c.Dir) != c.Key || c.Mode != "autotune" {
		t.Errorf("cache %+v, want a directory under %s named by the key", c, root)
	}
	if st, err := os.Stat(c.Dir); err != nil || !st.IsDir() {
		t.Errorf("cache directory not created: %v", err)
	}
	if len(c.Flags) != 1 || c.Flags[0] != "--"+flagAutotuneDir+"="+filepath.Join(c.Dir, "autotune") {
		t.Errorf("flags %v", c.Flags)
	}
	// The same plugin and GPU give the same directory; another GPU another one.
	again, _, _ := planXLACache(f.Env(), KindGPU, plugin)
	if again.Dir != c.Dir {
		t.Errorf("directory changed between runs: %s, %s", c.Dir, again.Dir)
	}
	writeFile(t, f.sys("/proc/driver/nvidia/gpus/0000:1b:00.0/information"), "Model: NVIDIA H100\n")
	other, _, _ := planXLACache(f.Env(), KindGPU, plugin)
	if other.Dir == c.Dir {
		t.Error("another GPU model uses the same directory")
	}

	// all: kernels too, with the parallel LLVM compilation they need.
	f.Vars[EnvXLACache] = "all"
	c, _, _ = planXLACache(f.Env(), KindGPU, plugin)
	if got := strings.Join(c.Flags, " "); !strings.Contains(got, "--"+flagKernelCacheFile+"="+filepath.Join(c.Dir, "kernels.bin")) ||
		!strings.Contains(got, "--"+flagLLVMParallelism+"=true") || len(c.Flags) != 3 {
		t.Errorf("all: flags %v", c.Flags)
	}
	// The user's XLA_FLAGS win.
	f.Vars[EnvXLAFlags] = "--xla_gpu_autotune_level=0 --" + flagAutotuneDir + "=/mine"
	c, _, _ = planXLACache(f.Env(), KindGPU, plugin)
	if len(c.Kept) != 1 || c.Kept[0] != flagAutotuneDir || strings.Contains(strings.Join(c.Flags, " "), flagAutotuneDir) {
		t.Errorf("kept %v, flags %v", c.Kept, c.Flags)
	}
	delete(f.Vars, EnvXLAFlags)

	// off, other kinds: nothing.
	f.Vars[EnvXLACache] = "off"
	if c, note, err := planXLACache(f.Env(), KindGPU, plugin); c != nil || note != "" || err != nil {
		t.Errorf("off: %v %q %v", c, note, err)
	}
	f.Vars[EnvXLACache] = ""
	for _, k := range []Kind{KindTPU, KindCPU} {
		if c, _, _ := planXLACache(f.Env(), k, plugin); c != nil {
			t.Errorf("%s: %+v", k, c)
		}
	}
	f.Vars[EnvXLACache] = "sometimes"
	if _, _, err := planXLACache(f.Env(), KindGPU, plugin); !errors.Is(err, errs.ErrUsage) || !strings.Contains(err.Error(), EnvXLACache) {
		t.Errorf("bad mode: %v", err)
	}
}

func TestPlanXLACacheUnknownFlags(t *testing.T) {
	f := newFakeEnv(t)
	// An older plugin: no autotune cache flag; setting it would abort XLA.
	plugin := fakeGPUPlugin(t, f, flagLLVMParallelism)
	c, note, err := planXLACache(f.Env(), KindGPU, plugin)
	if err != nil || c != nil || !strings.Contains(note, "does not know "+flagAutotuneDir) {
		t.Errorf("old plugin: %+v %q %v", c, note, err)
	}
	// all on a plugin with the autotune cache only: no LLVM flag without the kernel cache.
	plugin = fakeGPUPlugin(t, f, flagAutotuneDir, flagLLVMParallelism)
	f.Vars[EnvXLACache] = "all"
	c, _, _ = planXLACache(f.Env(), KindGPU, plugin)
	if c == nil || len(c.Flags) != 1 || len(c.Unknown) != 1 || c.Unknown[0] != flagKernelCacheFile {
		t.Errorf("all on autotune-only plugin: %+v", c)
	}
}

func TestPluginFlagsCached(t *testing.T) {
	dir := t.TempDir()
	plugin := filepath.Join(dir, "p.so")
	writeFile(t, plugin, "xx"+flagAutotuneDir+"yy")
	cache := filepath.Join(dir, "flags.json")
	has, err := pluginFlags(cache, plugin, []string{flagAutotuneDir, flagKernelCacheFile})
	if err != nil || !has[flagAutotuneDir] || has[flagKernelCacheFile] {
		t.Fatalf("scan: %v %v", has, err)
	}
	// The stored answer is used without reading the plugin again.
	if err := os.Remove(plugin); err != nil {
		t.Fatal(err)
	}
	has, err = pluginFlags(cache, plugin, []string{flagKernelCacheFile})
	if err != nil || has[flagKernelCacheFile] {
		t.Errorf("cached: %v %v", has, err)
	}
	// A name not asked before needs the file.
	if _, err := pluginFlags(cache, plugin, []string{flagLLVMParallelism}); err == nil {
		t.Error("a new name was answered without the plugin")
	}
}

func TestFileContainsAcrossChunks(t *testing.T) {
	p := filepath.Join(t.TempDir(), "big.so")
	const chunk = 4 << 20
	data := make([]byte, 2*chunk+100)
	name := flagKernelCacheFile
	copy(data[chunk-7:], name) // straddles the first chunk boundary
	copy(data[len(data)-len(flagAutotuneDir):], flagAutotuneDir)
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	has, err := fileContains(p, []string{name, flagAutotuneDir, flagLLVMParallelism})
	if err != nil {
		t.Fatal(err)
	}
	if !has[name] || !has[flagAutotuneDir] || has[flagLLVMParallelism] {
		t.Errorf("found %v", has)
	}
}

// TestOpenGPUPluginSetsAndRestoresXLAFlags: a GPU plugin that fails to load
// is exit 4, and XLA_FLAGS is back to what it was.
func TestOpenGPUPluginSetsAndRestoresXLAFlags(t *testing.T) {
	if !xlaCompiled {
		t.Skip("needs cgo")
	}
	f := newFakeEnv(t)
	plugin := fakeGPUPlugin(t, f, flagAutotuneDir)
	t.Setenv(EnvXLAFlags, "--xla_dump_to=/tmp/x")
	f.Vars[EnvXLAFlags] = "--xla_dump_to=/tmp/x"
	spec, err := ParseSpec("xla:" + plugin)
	if err != nil {
		t.Fatal(err)
	}
	xc, err := setupXLACache(f.Env(), candidate{kind: KindGPU, backend: BackendXLA, platform: "cuda", path: plugin})
	if err != nil || xc.cache == nil {
		t.Fatalf("setup: %+v %v", xc, err)
	}
	if got := os.Getenv(EnvXLAFlags); got != "--xla_dump_to=/tmp/x "+xc.cache.Flags[0] {
		t.Errorf("XLA_FLAGS during the load: %q", got)
	}
	xc.undo()
	if got := os.Getenv(EnvXLAFlags); got != "--xla_dump_to=/tmp/x" {
		t.Errorf("XLA_FLAGS after undo: %q", got)
	}
	_, err = OpenEnv(spec, f.Env())
	if !errors.Is(err, errs.ErrDeviceUnavailable) || !strings.Contains(err.Error(), "could not be loaded") {
		t.Fatalf("garbage GPU plugin: %v", err)
	}
	if got := os.Getenv(EnvXLAFlags); got != "--xla_dump_to=/tmp/x" {
		t.Errorf("XLA_FLAGS after a failed load: %q", got)
	}
}
