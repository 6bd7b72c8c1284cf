package tpu

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tputool/tputool/internal/errs"
)

func TestFindTPUFromTPULibraryPath(t *testing.T) {
	f := newFakeEnv(t)
	lib := f.touch(filepath.Join(f.Root, "opt", "tpu", "libtpu.so"))
	f.touch(f.sys("/usr/lib/libtpu.so")) // lower priority

	f.Vars[EnvTPULibrary] = lib
	s := FindTPU(f.Env())
	require.NotNil(t, s.Found)
	assert.Equal(t, Plugin{Name: "tpu", Kind: KindTPU, Path: lib, Source: "$TPU_LIBRARY_PATH"}, *s.Found)
	assert.Equal(t, []string{lib}, s.Searched)

	// A directory holding libtpu.so works too.
	f.Vars[EnvTPULibrary] = filepath.Dir(lib)
	s = FindTPU(f.Env())
	require.NotNil(t, s.Found)
	assert.Equal(t, lib, s.Found.Path)

	// A stale TPU_LIBRARY_PATH is reported and the search goes on.
	f.Vars[EnvTPULibrary] = filepath.Join(f.Root, "missing", "libtpu.so")
	s = FindTPU(f.Env())
	require.NotNil(t, s.Found)
	assert.Equal(t, f.sys("/usr/lib/libtpu.so"), s.Found.Path)
	assert.Equal(t, "system library dir", s.Found.Source)
	assert.Equal(t, f.Vars[EnvTPULibrary], s.Searched[0])
}

func TestFindTPUFromPJRTPluginPath(t *testing.T) {
	f := newFakeEnv(t)
	cuda := f.touch(filepath.Join(f.Root, "p1", "pjrt_c_api_cuda_plugin.so"))
	dir := filepath.Join(f.Root, "p2")
	lib := f.touch(filepath.Join(dir, "libtpu.so"))
	f.Vars[EnvPJRTPluginPath] = cuda + "::" + dir

	s := FindTPU(f.Env())
	require.NotNil(t, s.Found)
	assert.Equal(t, lib, s.Found.Path)
	assert.Equal(t, "$PJRT_PLUGIN_LIBRARY_PATH", s.Found.Source)
	assert.NotContains(t, s.Searched, cuda, "a CUDA plugin file is not a TPU candidate")
	assert.Equal(t, "$TPU_LIBRARY_PATH (not set)", s.Searched[0])
}

func TestFindTPUSitePackagesOrder(t *testing.T) {
	f := newFakeEnv(t)
	venv := filepath.Join(f.Root, "work", "venv")
	conda := filepath.Join(f.Root, "work", "conda")
	paths := map[string]string{
		"venv":   filepath.Join(venv, "lib", "python3.12", "site-packages", "libtpu", "libtpu.so"),
		"conda":  filepath.Join(conda, "lib", "python3.11", "site-packages", "libtpu", "libtpu.so"),
		"user":   f.home(".local/lib/python3.10/site-packages/libtpu/libtpu.so"),
		"pyenv":  f.home(".pyenv/versions/3.11.9/lib/python3.11/site-packages/libtpu/libtpu.so"),
		"local":  f.sys("/usr/local/lib/python3.10/dist-packages/libtpu/libtpu.so"),
		"debian": f.sys("/usr/lib/python3/dist-packages/libtpu/libtpu.so"),
	}
	for _, p := range paths {
		f.touch(p)
	}
	f.Vars["VIRTUAL_ENV"] = venv
	f.Vars["CONDA_PREFIX"] = conda

	// Remove the winner each round: the next one in priority order wins.
	for _, who := range []string{"venv", "conda", "user", "pyenv", "local", "debian"} {
		s := FindTPU(f.Env())
		require.NotNil(t, s.Found, who)
		assert.Equal(t, paths[who], s.Found.Path, who)
		assert.Equal(t, "python site-packages", s.Found.Source, who)
		require.NoError(t, os.Remove(paths[who]))
	}
	s := FindTPU(f.Env())
	assert.Nil(t, s.Found)
}

func TestFindTPUGoXLAAndSystem(t *testing.T) {
	f := newFakeEnv(t)
	gx := f.touch(f.home(".local/lib/go-xla/pjrt_c_api_tpu_plugin.so"))
	f.touch(f.sys("/usr/local/lib/libtpu.so"))
	s := FindTPU(f.Env())
	require.NotNil(t, s.Found)
	assert.Equal(t, gx, s.Found.Path)

	require.NoError(t, os.Remove(gx))
	s = FindTPU(f.Env())
	require.NotNil(t, s.Found)
	assert.Equal(t, f.sys("/usr/local/lib/libtpu.so"), s.Found.Path)

	// A directory named like the library is not a plugin.
	require.NoError(t, os.Remove(f.sys("/usr/local/lib/libtpu.so")))
	require.NoError(t, os.MkdirAll(f.sys("/usr/lib/libtpu.so"), 0o755))
	assert.Nil(t, FindTPU(f.Env()).Found)
}

func TestFindTPUNotFoundError(t *testing.T) {
	f := newFakeEnv(t)
	f.Vars["VIRTUAL_ENV"] = "/venvs/x"
	s := FindTPU(f.Env())
	require.Nil(t, s.Found)

	want := []string{
		"$TPU_LIBRARY_PATH (not set)",
		"$PJRT_PLUGIN_LIBRARY_PATH (not set)",
		"/venvs/x/lib/python3*/site-packages/libtpu/libtpu.so",
		f.home(".local/lib/python3*/site-packages/libtpu/libtpu.so"),
		f.home(".pyenv/versions/*/lib/python3*/site-packages/libtpu/libtpu.so"),
		f.sys("/usr/local/lib/python3*/site-packages/libtpu/libtpu.so"),
		f.sys("/usr/lib/python3*/dist-packages/libtpu/libtpu.so"),
		f.home(".local/lib/go-xla/pjrt_c_api_tpu_plugin.so"),
		f.sys("/usr/local/lib/go-xla/pjrt_c_api_tpu_plugin.so"),
		f.sys("/usr/lib/libtpu.so"),
		f.sys("/usr/local/lib/libtpu.so"),
	}
	for _, w := range want {
		assert.Contains(t, s.Searched, w)
	}
	assert.Equal(t, f.sys("/usr/local/lib/libtpu.so"), s.Searched[len(s.Searched)-1])

	err := s.NotFoundError("tpu")
	require.ErrorIs(t, err, errs.ErrDeviceUnavailable)
	msg := err.Error()
	assert.True(t, strings.HasPrefix(msg, "device tpu: no TPU runtime (libtpu.so) found. Searched, in order:\n"), msg)
	for _, p := range s.Searched {
		assert.Contains(t, msg, "\n  "+p+"\n")
	}
	assert.Contains(t, msg, "pip install libtpu")
	assert.Contains(t, msg, `pip install "jax[tpu]"`)
	assert.Contains(t, msg, "export TPU_LIBRARY_PATH=/path/to/libtpu.so")
}

func TestFindGPU(t *testing.T) {
	f := newFakeEnv(t)
	site := f.touch(f.sys("/usr/local/lib/python3.11/site-packages/jax_plugins/xla_cuda12/xla_cuda_plugin.so"))
	s := FindGPU(f.Env())
	require.NotNil(t, s.Found)
	assert.Equal(t, Plugin{Name: "cuda", Kind: KindGPU, Path: site, Source: "python site-packages"}, *s.Found)

	// go-xla's own install wins over jax's.
	gx := f.touch(f.sys("/usr/local/lib/go-xla/pjrt_c_api_cuda_plugin.so"))
	s = FindGPU(f.Env())
	require.NotNil(t, s.Found)
	assert.Equal(t, gx, s.Found.Path)
	assert.Equal(t, "go-xla install dir", s.Found.Source)

	// And PJRT_PLUGIN_LIBRARY_PATH wins over both.
	explicit := f.touch(filepath.Join(f.Root, "x", "xla_cuda_plugin.so"))
	f.Vars[EnvPJRTPluginPath] = explicit
	s = FindGPU(f.Env())
	require.NotNil(t, s.Found)
	assert.Equal(t, explicit, s.Found.Path)
	assert.Equal(t, "cuda", s.Found.Name)
}

// A virtualenv that is first on PATH but not activated (no $VIRTUAL_ENV),
// as the python of the H200 device machine is: its site-packages is
// searched through the python3 in its bin/.
func TestFindGPUPathVenv(t *testing.T) {
	f := newFakeEnv(t)
	venv := filepath.Join(f.Root, "opt", "torch", ".venv")
	f.touch(filepath.Join(venv, "bin", "python3"))
	plugin := f.touch(filepath.Join(venv, "lib", "python3.12", "site-packages", "jax_plugins", "xla_cuda13", "xla_cuda_plugin.so"))
	noPython := filepath.Join(f.Root, "opt", "other")
	f.touch(filepath.Join(noPython, "lib", "python3.12", "site-packages", "jax_plugins", "xla_cuda12", "xla_cuda_plugin.so"))
	require.NoError(t, os.MkdirAll(filepath.Join(noPython, "bin"), 0o755))
	f.Vars["PATH"] = strings.Join([]string{filepath.Join(noPython, "bin"), "relative/bin", filepath.Join(venv, "bin"), "/usr/bin"}, string(os.PathListSeparator))

	s := FindGPU(f.Env())
	require.NotNil(t, s.Found, "searched %v", s.Searched)
	assert.Equal(t, Plugin{Name: "cuda", Kind: KindGPU, Path: plugin, Source: "python site-packages"}, *s.Found)
	for _, p := range s.Searched {
		assert.NotContains(t, p, noPython, "a bin/ without python3 is not an environment")
		assert.NotContains(t, p, "relative", "relative PATH entries are skipped")
	}

	// The activated environment comes first.
	active := filepath.Join(f.Root, "active")
	first := f.touch(filepath.Join(active, "lib", "python3.11", "site-packages", "jax_plugins", "xla_cuda12", "xla_cuda_plugin.so"))
	f.Vars["VIRTUAL_ENV"] = active
	s = FindGPU(f.Env())
	require.NotNil(t, s.Found)
	assert.Equal(t, first, s.Found.Path)
}

func TestFindGPUNotFoundError(t *testing.T) {
	f := newFakeEnv(t)
	f.Vars["LD_LIBRARY_PATH"] = "/opt/cuda/lib64:relative/dir"
	s := FindGPU(f.Env())
	require.Nil(t, s.Found)
	assert.Contains(t, s.Searched, "/opt/cuda/lib64/pjrt_c_api_cuda_plugin.so")
	assert.Contains(t, s.Searched, f.sys("/usr/lib/python3*/site-packages/jax_plugins/xla_cuda*/xla_cuda_plugin.so"))
	for _, p := range s.Searched {
		assert.NotContains(t, p, "relative/dir", "relative LD_LIBRARY_PATH entries are skipped")
	}
	err := s.NotFoundError("gpu")
	require.ErrorIs(t, err, errs.ErrDeviceUnavailable)
	assert.Contains(t, err.Error(), "device gpu: no CUDA PJRT plugin")
	assert.Contains(t, err.Error(), `pip install "jax[cuda12]"`)
	assert.Contains(t, err.Error(), "\n  "+f.home(".local/lib/go-xla/pjrt_c_api_cuda_plugin.so")+"\n")
}

func TestFindPluginCPU(t *testing.T) {
	f := newFakeEnv(t)
	assert.Nil(t, FindPlugin(f.Env(), "cpu").Found)
	err := FindPlugin(f.Env(), "cpu").NotFoundError("xla:cpu")
	assert.Contains(t, err.Error(), `no PJRT plugin named "cpu" (pjrt_c_api_cpu_plugin.so)`)
	assert.Contains(t, err.Error(), "pjrt_installer")

	ld := f.touch(filepath.Join(f.Root, "ld", "pjrt_c_api_cpu_plugin.so"))
	f.Vars["LD_LIBRARY_PATH"] = filepath.Dir(ld)
	s := FindPlugin(f.Env(), "CPU")
	require.NotNil(t, s.Found)
	assert.Equal(t, Plugin{Name: "cpu", Kind: KindCPU, Path: ld, Source: "library dir"}, *s.Found)

	gx := f.touch(f.home(".local/lib/go-xla/pjrt_c_api_cpu_plugin.so"))
	s = FindPlugin(f.Env(), "cpu")
	require.NotNil(t, s.Found)
	assert.Equal(t, gx, s.Found.Path)

	// "tpu" and "cuda" are routed to their dedicated searches.
	assert.Equal(t, "tpu", FindPlugin(f.Env(), "tpu").Target)
	assert.Equal(t, "cuda", FindPlugin(f.Env(), "gpu").Target)
}

func TestDiscover(t *testing.T) {
	f := newFakeEnv(t)
	tpu := f.touch(f.home(".local/lib/python3.11/site-packages/libtpu/libtpu.so"))
	cuda := f.touch(f.home(".local/lib/go-xla/pjrt_c_api_cuda_plugin.so"))
	cpu := f.touch(f.home(".local/lib/go-xla/pjrt_c_api_cpu_plugin.so"))
	other := f.touch(f.sys("/usr/local/lib/go-xla/pjrt_c_api_metal_plugin.so"))
	extraDir := filepath.Join(f.Root, "extra")
	rocm := f.touch(filepath.Join(extraDir, "pjrt-plugin-rocm.so"))
	f.Vars[EnvPJRTPluginPath] = extraDir

	d := Discover(f.Env())
	require.Len(t, d.Searches, 3)
	assert.Equal(t, []string{"tpu", "cuda", "cpu"}, []string{d.Searches[0].Target, d.Searches[1].Target, d.Searches[2].Target})
	var got []string
	for _, p := range d.Plugins {
		got = append(got, p.Name+"="+p.Path)
	}
	assert.Equal(t, []string{"tpu=" + tpu, "cuda=" + cuda, "cpu=" + cpu, "rocm=" + rocm, "metal=" + other}, got)
	assert.Equal(t, KindGPU, d.Plugins[3].Kind)
	assert.Equal(t, KindOther, d.Plugins[4].Kind)
}

func TestPluginNameFromPath(t *testing.T) {
	for in, want := range map[string]string{
		"/a/pjrt_c_api_cpu_plugin.so":  "cpu",
		"/a/pjrt_c_api_CUDA_plugin.so": "cuda",
		"/a/pjrt-plugin-rocm.so":       "rocm",
		"/a/pjrt_plugin_metal.so":      "metal",
		"/a/libtpu.so":                 "tpu",
		"/a/libtpu-nightly.so":         "tpu",
		"/a/xla_cuda_plugin.so":        "cuda",
		"/a/libfoo.so":                 "",
	} {
		assert.Equal(t, want, pluginNameFromPath(in), in)
	}
}

func TestDevicePresence(t *testing.T) {
	f := newFakeEnv(t)
	assert.False(t, tpuPresent(f.Env()))
	assert.False(t, nvidiaPresent(f.Env()))
	f.touch(f.sys("/dev/vfio/vfio")) // the vfio control node alone is not a TPU
	assert.False(t, tpuPresent(f.Env()))
	f.touch(f.sys("/dev/vfio/0"))
	assert.True(t, tpuPresent(f.Env()))
	f.touch(f.sys("/dev/nvidiactl"))
	assert.False(t, nvidiaPresent(f.Env()))
	f.touch(f.sys("/dev/nvidia0"))
	assert.True(t, nvidiaPresent(f.Env()))

	g := newFakeEnv(t)
	g.Vars[EnvAcceleratorType] = "v6e-8"
	assert.True(t, tpuPresent(g.Env()))
}
