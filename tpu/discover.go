package tpu

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/tputool/tputool/internal/errs"
)

// Kind is the class of device a backend drives.
type Kind string

// Device kinds.
const (
	KindCPU   Kind = "cpu"
	KindTPU   Kind = "tpu"
	KindGPU   Kind = "gpu"
	KindOther Kind = "other" // a PJRT plugin tputool does not recognise
)

// Plugin is a PJRT plugin file found on disk.
type Plugin struct {
	// Name is the PJRT platform the plugin serves: "tpu", "cuda", "cpu",
	// or NAME from a pjrt_c_api_NAME_plugin.so file.
	Name string `json:"name"`
	Kind Kind   `json:"kind"`
	// Path is the absolute path of the plugin file.
	Path string `json:"path"`
	// Source says which search location found it, e.g. "$TPU_LIBRARY_PATH"
	// or "python site-packages".
	Source string `json:"source"`
}

// Search is the outcome of looking for one plugin.
type Search struct {
	// Target is what was looked for: "tpu", "cuda", "cpu", ...
	Target string `json:"target"`
	// Searched lists every path or glob pattern examined, in order.
	// Environment variables that were not set appear as "$NAME (not set)".
	Searched []string `json:"searched"`
	// Found is the first match, nil when nothing was found.
	Found *Plugin `json:"found,omitempty"`
}

// Install hints quoted in "not found" errors.
const (
	tpuInstallHint = `Install libtpu and run again:
  pip install libtpu        (or: pip install "jax[tpu]")
If libtpu.so is somewhere else, point tputool at it:
  export TPU_LIBRARY_PATH=/path/to/libtpu.so`
	gpuInstallHint = `Install the CUDA PJRT plugin and run again:
  pip install "jax[cuda12]"   (or "jax[cuda13]"; provides jax_plugins/xla_cuda1N/xla_cuda_plugin.so)
If the plugin is somewhere else, point tputool at it:
  export PJRT_PLUGIN_LIBRARY_PATH=/path/to/xla_cuda_plugin.so   (or give the device as xla:/path/to/plugin.so)`
	cpuPluginInstallHint = `Install the XLA CPU PJRT plugin into ~/.local/lib/go-xla with:
  go run github.com/gomlx/go-xla/cmd/pjrt_installer@latest
or point tputool at it with PJRT_PLUGIN_LIBRARY_PATH; the device cpu (tputool's own CPU engine) needs no plugin.`
)

// NotFoundError is the errs.ErrDeviceUnavailable error for a failed search:
// it lists every place searched and how to install the plugin.
func (s Search) NotFoundError(spec string) error {
	var b strings.Builder
	switch s.Target {
	case "tpu":
		b.WriteString("no TPU runtime (libtpu.so) found")
	case "cuda":
		b.WriteString("no CUDA PJRT plugin (xla_cuda_plugin.so / pjrt_c_api_cuda_plugin.so) found")
	default:
		fmt.Fprintf(&b, "no PJRT plugin named %q (pjrt_c_api_%s_plugin.so) found", s.Target, s.Target)
	}
	b.WriteString(". Searched, in order:\n")
	for _, p := range s.Searched {
		b.WriteString("  ")
		b.WriteString(p)
		b.WriteByte('\n')
	}
	switch s.Target {
	case "tpu":
		b.WriteString(tpuInstallHint)
	case "cuda":
		b.WriteString(gpuInstallHint)
	case "cpu":
		b.WriteString(cpuPluginInstallHint)
	default:
		fmt.Fprintf(&b, "Put pjrt_c_api_%s_plugin.so in one of these places, set PJRT_PLUGIN_LIBRARY_PATH, or give the device as xla:/absolute/path/to/plugin.so", s.Target)
	}
	if !xlaCompiled {
		b.WriteString("\nNote: " + noCgoMessage + ".")
	}
	return specErr("", spec, errs.Devicef, "%s", b.String())
}

// searcher records the locations it examines and keeps the first match.
type searcher struct {
	Search
}

// try examines a file path or glob pattern; the first existing regular
// file wins. It reports whether the search is done.
func (s *searcher) try(pattern, source string) bool {
	if s.Found != nil {
		return true
	}
	s.Searched = append(s.Searched, pattern)
	var matches []string
	if strings.ContainsAny(pattern, "*?[") {
		matches = globSorted(pattern)
	} else {
		matches = []string{pattern}
	}
	for _, m := range matches {
		if isFile(m) {
			name := pluginNameFromPath(m)
			if name == "" {
				name = s.Target
			}
			abs, err := filepath.Abs(m)
			if err != nil {
				abs = m
			}
			s.Found = &Plugin{Name: name, Kind: kindOfPlugin(name), Path: abs, Source: source}
			return true
		}
	}
	return false
}

func (s *searcher) notSet(envName string) {
	s.Searched = append(s.Searched, "$"+envName+" (not set)")
}

// pluginFileNames are the file names a plugin for platform name may have,
// following go-xla's conventions.
func pluginFileNames(name string) []string {
	return []string{"pjrt_c_api_" + name + "_plugin.so", "pjrt-plugin-" + name + ".so", "pjrt_plugin_" + name + ".so"}
}

var (
	rePJRTFile   = regexp.MustCompile(`^pjrt_c_api_(.+)_plugin\.so$`)
	rePJRTFile2  = regexp.MustCompile(`^pjrt[-_]plugin[-_](.+)\.so$`)
	reLibTPUFile = regexp.MustCompile(`^libtpu.*\.so(\.[0-9.]+)?$`)
	reXLACUDA    = regexp.MustCompile(`^xla_cuda.*plugin\.so$`)
)

// pluginNameFromPath returns the platform a plugin file serves, judging by
// its file name, or "" when the name says nothing.
func pluginNameFromPath(p string) string {
	base := filepath.Base(p)
	if m := rePJRTFile.FindStringSubmatch(base); m != nil {
		return strings.ToLower(m[1])
	}
	if m := rePJRTFile2.FindStringSubmatch(base); m != nil {
		return strings.ToLower(m[1])
	}
	if reLibTPUFile.MatchString(base) {
		return "tpu"
	}
	if reXLACUDA.MatchString(base) {
		return "cuda"
	}
	return ""
}

func kindOfPlugin(name string) Kind {
	switch {
	case name == "tpu":
		return KindTPU
	case name == "cpu":
		return KindCPU
	case name == "gpu", strings.HasPrefix(name, "cuda"), strings.HasPrefix(name, "rocm"):
		return KindGPU
	}
	return KindOther
}

// pythonSiteDirs returns glob patterns for python3 site-packages and
// dist-packages directories, most specific first: the active virtualenv
// and conda env, the environments of the python3 programs on $PATH (a
// virtualenv that is not activated but first on PATH, as on machines whose
// python3 is /opt/…/.venv/bin/python3), the user's installs, then system
// pythons. Nothing is run.
func pythonSiteDirs(env Env) []string {
	var dirs []string
	for _, v := range []string{"VIRTUAL_ENV", "CONDA_PREFIX"} {
		if p := env.Get(v); p != "" {
			dirs = append(dirs, filepath.Join(p, "lib", "python3*", "site-packages"))
		}
	}
	dirs = append(dirs, pathPythonSiteDirs(env, dirs)...)
	if env.Home != "" {
		dirs = append(dirs,
			filepath.Join(env.Home, ".local", "lib", "python3*", "site-packages"),
			filepath.Join(env.Home, ".pyenv", "versions", "*", "lib", "python3*", "site-packages"),
			filepath.Join(env.Home, "miniconda3", "lib", "python3*", "site-packages"),
			filepath.Join(env.Home, "miniforge3", "lib", "python3*", "site-packages"),
			filepath.Join(env.Home, "anaconda3", "lib", "python3*", "site-packages"),
		)
	}
	for _, base := range []string{"/usr/local/lib", "/usr/lib", "/usr/lib64", "/opt/conda/lib"} {
		dirs = append(dirs,
			env.sys(filepath.Join(base, "python3*", "site-packages")),
			env.sys(filepath.Join(base, "python3*", "dist-packages")))
	}
	return dirs
}

// pathPythonSiteDirs returns PREFIX/lib/python3*/site-packages for each
// absolute $PATH entry PREFIX/bin that holds a python3 (an environment's
// prefix is the directory above its bin/, whatever bin/python3 links to),
// skipping the system prefixes searched anyway and those in have.
func pathPythonSiteDirs(env Env, have []string) []string {
	seen := map[string]bool{}
	for _, d := range have {
		seen[d] = true
	}
	var dirs []string
	for _, bin := range splitPathList(env.Get("PATH")) {
		if !filepath.IsAbs(bin) || filepath.Base(bin) != "bin" || !isFile(filepath.Join(bin, "python3")) {
			continue
		}
		prefix := filepath.Dir(filepath.Clean(bin))
		switch prefix {
		case "/", "/usr", "/usr/local":
			continue // their lib/python3* are among the system directories
		}
		d := filepath.Join(prefix, "lib", "python3*", "site-packages")
		if !seen[d] {
			seen[d] = true
			dirs = append(dirs, d)
		}
	}
	return dirs
}

// goXLADirs are go-xla's own plugin install directories (user first).
func goXLADirs(env Env) []string {
	var dirs []string
	if env.Home != "" {
		dirs = append(dirs,
			filepath.Join(env.Home, ".local", "lib", "go-xla"),
			filepath.Join(env.Home, ".local", "lib", "gomlx", "pjrt"))
	}
	return append(dirs, env.sys("/usr/local/lib/go-xla"), env.sys("/usr/local/lib/gomlx/pjrt"))
}

// ldLibraryDirs returns the absolute entries of LD_LIBRARY_PATH.
func ldLibraryDirs(env Env) []string {
	var out []string
	for _, d := range splitPathList(env.Get("LD_LIBRARY_PATH")) {
		if filepath.IsAbs(d) {
			out = append(out, d)
		}
	}
	return out
}

// searchPJRTPath examines $PJRT_PLUGIN_LIBRARY_PATH: file entries that
// serve the target, and the given file names inside directory entries.
func (s *searcher) searchPJRTPath(env Env, fileNames []string) {
	v, ok := env.Lookup(EnvPJRTPluginPath)
	if !ok || strings.TrimSpace(v) == "" {
		s.notSet(EnvPJRTPluginPath)
		return
	}
	src := "$" + EnvPJRTPluginPath
	for _, entry := range splitPathList(v) {
		if isDir(entry) {
			for _, f := range fileNames {
				if s.try(filepath.Join(entry, f), src) {
					return
				}
			}
			continue
		}
		if n := pluginNameFromPath(entry); n != "" && !sameTarget(n, s.Target) {
			// A plugin for another platform: not searched for this one.
			continue
		}
		if s.try(entry, src) {
			return
		}
	}
}

func sameTarget(name, target string) bool {
	if target == "cuda" {
		return kindOfPlugin(name) == KindGPU
	}
	return name == target
}

// FindTPU looks for libtpu, in order: $TPU_LIBRARY_PATH (a file or a
// directory holding libtpu.so), $PJRT_PLUGIN_LIBRARY_PATH, libtpu/libtpu.so
// in python site-packages (pip install libtpu / jax[tpu]), go-xla's install
// directories, then /lib, /usr/lib and /usr/local/lib.
func FindTPU(env Env) Search {
	s := &searcher{Search{Target: "tpu"}}
	if v, ok := env.Lookup(EnvTPULibrary); ok && strings.TrimSpace(v) != "" {
		for _, entry := range splitPathList(v) {
			p := entry
			if isDir(entry) {
				p = filepath.Join(entry, "libtpu.so")
			}
			if s.try(p, "$"+EnvTPULibrary) {
				return s.Search
			}
		}
	} else {
		s.notSet(EnvTPULibrary)
	}
	s.searchPJRTPath(env, append([]string{"libtpu.so"}, pluginFileNames("tpu")...))
	for _, d := range pythonSiteDirs(env) {
		if s.try(filepath.Join(d, "libtpu", "libtpu.so"), "python site-packages") {
			return s.Search
		}
	}
	for _, d := range goXLADirs(env) {
		if s.try(filepath.Join(d, "pjrt_c_api_tpu_plugin.so"), "go-xla install dir") {
			return s.Search
		}
	}
	for _, d := range []string{"/lib", "/usr/lib", "/usr/local/lib"} {
		if s.try(env.sys(filepath.Join(d, "libtpu.so")), "system library dir") {
			return s.Search
		}
	}
	return s.Search
}

// FindGPU looks for the CUDA PJRT plugin, in order: $PJRT_PLUGIN_LIBRARY_PATH,
// go-xla's install directories, jax's jax_plugins/xla_cuda*/xla_cuda_plugin.so
// in python site-packages (pip install "jax[cuda12]"), LD_LIBRARY_PATH, then
// /usr/local/lib and /usr/lib.
func FindGPU(env Env) Search {
	s := &searcher{Search{Target: "cuda"}}
	names := append(pluginFileNames("cuda"), "xla_cuda_plugin.so")
	s.searchPJRTPath(env, names)
	for _, d := range goXLADirs(env) {
		if s.try(filepath.Join(d, "pjrt_c_api_cuda_plugin.so"), "go-xla install dir") {
			return s.Search
		}
	}
	for _, d := range pythonSiteDirs(env) {
		if s.try(filepath.Join(d, "jax_plugins", "xla_cuda*", "xla_cuda_plugin.so"), "python site-packages") {
			return s.Search
		}
	}
	for _, d := range ldLibraryDirs(env) {
		if s.try(filepath.Join(d, "pjrt_c_api_cuda_plugin.so"), "$LD_LIBRARY_PATH") {
			return s.Search
		}
	}
	for _, d := range []string{"/usr/local/lib", "/usr/lib"} {
		if s.try(env.sys(filepath.Join(d, "pjrt_c_api_cuda_plugin.so")), "system library dir") {
			return s.Search
		}
	}
	return s.Search
}

// FindPlugin looks for the PJRT plugin serving a platform name. "tpu" is
// FindTPU and "cuda"/"gpu" is FindGPU; any other name (e.g. "cpu") is
// searched as pjrt_c_api_NAME_plugin.so (or pjrt-plugin-NAME.so) in
// $PJRT_PLUGIN_LIBRARY_PATH, go-xla's install directories, LD_LIBRARY_PATH,
// /usr/local/lib and /usr/lib.
func FindPlugin(env Env, name string) Search {
	name = strings.ToLower(strings.TrimSpace(name))
	switch name {
	case "tpu":
		return FindTPU(env)
	case "cuda", "gpu":
		return FindGPU(env)
	}
	s := &searcher{Search{Target: name}}
	names := pluginFileNames(name)
	s.searchPJRTPath(env, names)
	dirs := append(goXLADirs(env), ldLibraryDirs(env)...)
	dirs = append(dirs, env.sys("/usr/local/lib"), env.sys("/usr/lib"))
	for _, d := range dirs {
		src := "go-xla install dir"
		if !strings.Contains(d, "go-xla") && !strings.Contains(d, "gomlx") {
			src = "library dir"
		}
		for _, f := range names {
			if s.try(filepath.Join(d, f), src) {
				return s.Search
			}
		}
	}
	return s.Search
}

// Discovery is every PJRT plugin found, plus what was searched.
type Discovery struct {
	// Plugins found: the TPU, CUDA and CPU plugins first (when present),
	// then any other pjrt_c_api_*_plugin.so in the plugin directories.
	Plugins []Plugin `json:"plugins"`
	// Searches for the tpu, cuda and cpu plugins, in that order.
	Searches []Search `json:"searches"`
}

// Discover looks for every plugin tputool can use. It only looks at files;
// nothing is loaded.
func Discover(env Env) Discovery {
	var d Discovery
	have := map[string]bool{}
	for _, s := range []Search{FindTPU(env), FindGPU(env), FindPlugin(env, "cpu")} {
		d.Searches = append(d.Searches, s)
		if s.Found != nil {
			d.Plugins = append(d.Plugins, *s.Found)
			have[s.Found.Path] = true
		}
	}
	// Other plugins sitting in the plugin directories.
	var dirs []string
	for _, e := range splitPathList(env.Get(EnvPJRTPluginPath)) {
		switch n := pluginNameFromPath(e); {
		case isDir(e):
			dirs = append(dirs, e)
		case isFile(e) && n != "" && !have[e]:
			d.Plugins = append(d.Plugins, Plugin{Name: n, Kind: kindOfPlugin(n), Path: e, Source: "$" + EnvPJRTPluginPath})
			have[e] = true
		}
	}
	dirs = append(dirs, goXLADirs(env)...)
	for _, dir := range dirs {
		for _, pat := range []string{"pjrt_c_api_*_plugin.so", "pjrt-plugin-*.so", "pjrt_plugin_*.so"} {
			for _, m := range globSorted(filepath.Join(dir, pat)) {
				if have[m] || !isFile(m) {
					continue
				}
				n := pluginNameFromPath(m)
				if n == "" || hasPluginNamed(d.Plugins, n) {
					continue
				}
				d.Plugins = append(d.Plugins, Plugin{Name: n, Kind: kindOfPlugin(n), Path: m, Source: "plugin dir"})
				have[m] = true
			}
		}
	}
	return d
}

func hasPluginNamed(ps []Plugin, name string) bool {
	for _, p := range ps {
		if p.Name == name {
			return true
		}
	}
	return false
}

// tpuPresent reports whether this machine shows signs of TPU hardware:
// /dev/accel* (v4, v5e, v6e), /dev/vfio/<n> (v5p, v6e, v7x), or a TPU VM's
// TPU_ACCELERATOR_TYPE. auto only tries libtpu when one is present.
func tpuPresent(env Env) bool {
	if env.Get(EnvAcceleratorType) != "" {
		return true
	}
	return len(globSorted(env.sys("/dev/accel[0-9]*"))) > 0 || len(globSorted(env.sys("/dev/vfio/[0-9]*"))) > 0
}

// nvidiaPresent reports whether an NVIDIA GPU device node exists.
func nvidiaPresent(env Env) bool {
	return len(globSorted(env.sys("/dev/nvidia[0-9]*"))) > 0
}
