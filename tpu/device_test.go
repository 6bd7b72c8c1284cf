package tpu

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tputool/tputool/internal/errs"
)

func TestAutoInstallDisabled(t *testing.T) {
	assert.Equal(t, "1", os.Getenv(EnvNoAutoInstall))
}

func TestOpenCPURunsAGraph(t *testing.T) {
	d, err := OpenEnv(Spec{Kind: SpecCPU}, newFakeEnv(t).Env())
	require.NoError(t, err)
	defer d.Close()

	assert.Equal(t, KindCPU, d.Kind)
	assert.Equal(t, DefaultCPUBackend, d.BackendName)
	assert.Equal(t, "cpu", d.Platform)
	assert.Empty(t, d.PluginPath)
	assert.Equal(t, 1, d.NumDevices)
	assert.Equal(t, "cpu", d.Spec)
	assert.Equal(t, dtypes.Float32, d.ComputeDType)
	assert.Equal(t, "Float32", d.ComputeDTypeName)
	assert.Equal(t, "cpu ("+DefaultCPUBackend+", 1 device)", d.String())

	// x*x + 1 on the default CPU backend.
	out, err := graph.ExecOnce(d.Backend, func(x *graph.Node) *graph.Node {
		return graph.Add(graph.Mul(x, x), graph.Const(x.Graph(), float32(1)))
	}, []float32{1, 2, 3})
	require.NoError(t, err)
	assert.Equal(t, []float32{2, 5, 10}, out.Value())

	d.Close()
	d.Close() // idempotent
	assert.True(t, d.Backend.IsFinalized())
}

// TestCPUBackendCapabilities: tputool's own CPU backend computes in host
// memory, reads Linear weights as they are (no blocked layout), and has
// the in-place cache update and 16-bit dtypes.
func TestCPUBackendCapabilities(t *testing.T) {
	d, err := OpenEnv(Spec{Kind: SpecFast}, newFakeEnv(t).Env())
	require.NoError(t, err)
	defer d.Close()
	assert.Equal(t, BackendCPU, d.BackendName)
	assert.Equal(t, "cpu:fast", d.Spec)
	assert.Equal(t, Capabilities{Backend: BackendCPU, HostMemory: true, NarrowWeights: true, MXFP4: true, FP8: true, Int4Groups: true, NVFP4: true, DynamicSlice: true, DynamicUpdateSlice: true,
		Pad: true, Reverse: true, Gather: true, Float16: true, BFloat16: true}, d.Capabilities)
	out, err := execRecovered(d.Backend, func(x *graph.Node) *graph.Node {
		start := graph.Const(x.Graph(), int32(1))
		return graph.DynamicSlice(x, []*graph.Node{start}, []int{2})
	}, []float32{1, 2, 3})
	require.NoError(t, err)
	assert.Equal(t, []float32{2, 3}, out)
}

func TestGoBackendCapabilities(t *testing.T) {
	d, err := OpenEnv(Spec{Kind: SpecGo}, newFakeEnv(t).Env())
	require.NoError(t, err)
	defer d.Close()

	// The facts come from the backend's own capability table...
	raw := d.Backend.Capabilities()
	assert.Equal(t, raw.Operations[backends.OpTypeDynamicSlice], d.Capabilities.DynamicSlice)
	assert.Equal(t, raw.Operations[backends.OpTypeDynamicUpdateSlice], d.Capabilities.DynamicUpdateSlice)
	assert.Equal(t, raw.DTypes[dtypes.Float16], d.Capabilities.Float16)
	assert.Equal(t, raw.Operations[backends.OpTypeGather], d.Supports(backends.OpTypeGather))
	// ...and for GoMLX v0.26.0's go backend they are:
	assert.Equal(t, Capabilities{Backend: BackendGo, HostMemory: true, BlockedMatmul: true, Gather: true, BFloat16: true}, d.Capabilities)
	assert.True(t, d.SupportsDType(dtypes.BFloat16))
	assert.False(t, d.SupportsDType(dtypes.Float16))

	// And they match what the backend really does: DynamicSlice fails.
	_, err = execRecovered(d.Backend, func(x *graph.Node) *graph.Node {
		start := graph.Const(x.Graph(), int32(1))
		return graph.DynamicSlice(x, []*graph.Node{start}, []int{2})
	}, []float32{1, 2, 3})
	assert.Error(t, err, "the go backend has no DynamicSlice")
}

// execRecovered runs a one-output graph, turning panics into errors.
func execRecovered(b backends.Backend, fn func(*graph.Node) *graph.Node, args ...any) (v any, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v", r)
		}
	}()
	out, err := graph.ExecOnce(b, fn, args...)
	if err != nil {
		return nil, err
	}
	return out.Value(), nil
}

func TestOpenTPUMissing(t *testing.T) {
	f := newFakeEnv(t)
	_, err := OpenEnv(Spec{Kind: SpecTPU}, f.Env())
	require.ErrorIs(t, err, errs.ErrDeviceUnavailable)
	msg := err.Error()
	for _, want := range []string{
		"device tpu: no TPU runtime (libtpu.so) found",
		"$TPU_LIBRARY_PATH (not set)",
		"$PJRT_PLUGIN_LIBRARY_PATH (not set)",
		f.home(".local/lib/python3*/site-packages/libtpu/libtpu.so"),
		f.sys("/usr/lib/python3*/dist-packages/libtpu/libtpu.so"),
		f.sys("/usr/lib/libtpu.so"),
		f.sys("/usr/local/lib/libtpu.so"),
		"pip install libtpu",
		`pip install "jax[tpu]"`,
		"export TPU_LIBRARY_PATH=/path/to/libtpu.so",
	} {
		assert.Contains(t, msg, want)
	}
	if !XLACompiled() {
		assert.Contains(t, msg, "built without cgo")
	}
}

func TestOpenGPUMissing(t *testing.T) {
	_, err := OpenEnv(Spec{Kind: SpecGPU}, newFakeEnv(t).Env())
	require.ErrorIs(t, err, errs.ErrDeviceUnavailable)
	assert.Contains(t, err.Error(), "device gpu: no CUDA PJRT plugin")
	assert.Contains(t, err.Error(), `pip install "jax[cuda12]"`)
}

func TestOpenXLAPluginMissing(t *testing.T) {
	f := newFakeEnv(t)
	p := filepath.Join(f.Root, "nope", "pjrt_c_api_cpu_plugin.so")
	_, err := OpenEnv(Spec{Kind: SpecXLA, Plugin: p}, f.Env())
	require.ErrorIs(t, err, errs.ErrDeviceUnavailable)
	assert.ErrorIs(t, err, os.ErrNotExist)
	assert.Contains(t, err.Error(), p)

	_, err = OpenEnv(Spec{Kind: SpecXLA, Plugin: f.Root}, f.Env())
	require.ErrorIs(t, err, errs.ErrDeviceUnavailable)
	assert.Contains(t, err.Error(), "is a directory")

	_, err = OpenEnv(Spec{Kind: SpecXLA, Plugin: "cpu"}, f.Env())
	require.ErrorIs(t, err, errs.ErrDeviceUnavailable)
	assert.Contains(t, err.Error(), "device xla:cpu: no PJRT plugin named \"cpu\"")
}

// garbagePlugin writes a file that exists but is not a shared library.
func garbagePlugin(t *testing.T, p string) string {
	t.Helper()
	writeFile(t, p, strings.Repeat("this is not an ELF shared object\n", 8))
	return p
}

// checkLoadFailure checks the error for a plugin that exists but cannot be
// loaded: with cgo it names the file and carries dlopen's message; without
// cgo it says how to rebuild.
func checkLoadFailure(t *testing.T, err error, path string) {
	t.Helper()
	require.Error(t, err)
	assert.ErrorIs(t, err, errs.ErrDeviceUnavailable)
	assert.Contains(t, err.Error(), path)
	if XLACompiled() {
		assert.Contains(t, err.Error(), "could not be loaded")
		assert.Contains(t, err.Error(), "dlopen: "+path+": invalid ELF header", "dlopen's own error is kept")
	} else {
		assert.Contains(t, err.Error(), "built without cgo; rebuild with CGO_ENABLED=1")
	}
}

func TestOpenGarbagePlugin(t *testing.T) {
	f := newFakeEnv(t)
	p := garbagePlugin(t, filepath.Join(f.Root, "plugins", "pjrt_c_api_bogus_plugin.so"))
	_, err := OpenEnv(Spec{Kind: SpecXLA, Plugin: p}, f.Env())
	checkLoadFailure(t, err, p)
}

func TestOpenGarbageLibTPU(t *testing.T) {
	f := newFakeEnv(t)
	p := garbagePlugin(t, filepath.Join(f.Root, "opt", "libtpu.so"))
	f.Vars[EnvTPULibrary] = p
	_, err := OpenEnv(Spec{Kind: SpecTPU}, f.Env())
	checkLoadFailure(t, err, p)
	assert.Contains(t, err.Error(), "device tpu: tpu plugin "+p+" ")
}

func TestOpenAuto(t *testing.T) {
	f := newFakeEnv(t)
	d, err := OpenEnv(Spec{Kind: SpecAuto}, f.Env())
	require.NoError(t, err)
	assert.Equal(t, KindCPU, d.Kind)
	assert.Empty(t, d.Notes)
	d.Close()

	// libtpu installed but no TPU hardware: auto does not even try it.
	lib := garbagePlugin(t, f.home(".local/lib/python3.11/site-packages/libtpu/libtpu.so"))
	d, err = OpenEnv(Spec{Kind: SpecAuto}, f.Env())
	require.NoError(t, err)
	assert.Equal(t, KindCPU, d.Kind)
	require.Len(t, d.Notes, 1)
	assert.Contains(t, d.Notes[0], "tpu not tried: libtpu found at "+lib+", but no TPU device")
	d.Close()

	// With a TPU device node, auto tries libtpu; it fails to load and auto
	// falls back to the CPU, saying why.
	f.touch(f.sys("/dev/accel0"))
	d, err = OpenEnv(Spec{Kind: SpecAuto}, f.Env())
	require.NoError(t, err)
	defer d.Close()
	assert.Equal(t, KindCPU, d.Kind)
	require.Len(t, d.Notes, 1)
	if XLACompiled() {
		assert.Contains(t, d.Notes[0], "tpu not used: ")
		assert.Contains(t, d.Notes[0], "invalid ELF header")
	} else {
		assert.Contains(t, d.Notes[0], "tpu not tried: ")
		assert.Contains(t, d.Notes[0], "built without cgo")
	}
}

func TestResolveXLAPluginKinds(t *testing.T) {
	f := newFakeEnv(t)
	for file, want := range map[string]candidate{
		"libtpu.so":                  {kind: KindTPU, backend: BackendXLA, platform: "tpu"},
		"xla_cuda_plugin.so":         {kind: KindGPU, backend: BackendXLA, platform: "cuda"},
		"pjrt_c_api_cpu_plugin.so":   {kind: KindCPU, backend: BackendXLA, platform: "cpu"},
		"pjrt_c_api_metal_plugin.so": {kind: KindOther, backend: BackendXLA, platform: "metal"},
		"weird.so":                   {kind: KindOther, backend: BackendXLA, platform: "unknown"},
	} {
		p := f.touch(filepath.Join(f.Root, "k", file))
		cands, _, err := resolve(Spec{Kind: SpecXLA, Plugin: p}, f.Env())
		require.NoError(t, err, file)
		want.path = p
		assert.Equal(t, []candidate{want}, cands, file)
	}
}

func TestErrorsAreDeviceUnavailable(t *testing.T) {
	// Every Open failure maps to exit code 4 through errs.ErrDeviceUnavailable.
	f := newFakeEnv(t)
	for _, spec := range []Spec{{Kind: SpecTPU}, {Kind: SpecGPU}, {Kind: SpecXLA, Plugin: "rocm"}} {
		_, err := OpenEnv(spec, f.Env())
		assert.True(t, errors.Is(err, errs.ErrDeviceUnavailable), spec.String())
	}
}

// buildSharedLib compiles C source into a shared library, skipping the test
// when no C compiler is installed.
func buildSharedLib(t *testing.T, dir, name, src string) string {
	t.Helper()
	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Skip("no C compiler to build a test library")
	}
	c := filepath.Join(dir, name+".c")
	writeFile(t, c, src)
	out := filepath.Join(dir, name)
	if b, err := exec.Command(cc, "-shared", "-fPIC", "-o", out, c).CombinedOutput(); err != nil {
		t.Skipf("cc cannot build a shared library: %v\n%s", err, b)
	}
	return out
}

func TestOpenLibraryThatIsNotAPlugin(t *testing.T) {
	dir := t.TempDir()
	p := buildSharedLib(t, dir, "pjrt_c_api_nosym_plugin.so", "int not_pjrt(void) { return 1; }\n")
	_, err := OpenEnv(Spec{Kind: SpecXLA, Plugin: p}, Env{})
	require.ErrorIs(t, err, errs.ErrDeviceUnavailable)
	assert.Contains(t, err.Error(), p)
	if XLACompiled() {
		assert.Contains(t, err.Error(), "not a PJRT plugin: the library does not export GetPjrtApi")
	} else {
		assert.Contains(t, err.Error(), "built without cgo")
	}
}

// A plugin whose GetPjrtApi returns NULL makes go-xla v0.1.4 hand back a
// nil plugin without an error, and the xla backend then panics on it: Open
// must recover that into an error.
func TestOpenPluginReturningNilAPIRecoversPanic(t *testing.T) {
	dir := t.TempDir()
	p := buildSharedLib(t, dir, "pjrt_c_api_nullapi_plugin.so", "void *GetPjrtApi(void) { return 0; }\n")
	_, err := OpenEnv(Spec{Kind: SpecXLA, Plugin: p}, Env{})
	require.ErrorIs(t, err, errs.ErrDeviceUnavailable)
	assert.Contains(t, err.Error(), p)
	if XLACompiled() {
		assert.Contains(t, err.Error(), "the XLA backend panicked")
	} else {
		assert.Contains(t, err.Error(), "built without cgo")
	}
}
