package tpu

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/gomlx/gomlx/backends"
	_ "github.com/gomlx/gomlx/backends/simplego" // registers the "go" backend
	"github.com/gomlx/gomlx/pkg/core/dtypes"

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/tpu/cpu"
)

// Backend names as GoMLX registers them.
const (
	BackendCPU = cpu.BackendName // tputool's own CPU backend (tpu/cpu)
	BackendGo  = "go"            // GoMLX's pure-Go backend (simplego)
	BackendXLA = "xla"
)

// DefaultCPUBackend is the backend --device cpu, and auto without an
// accelerator, open: tputool's own CPU engine (tpu/cpu). --device cpu:fast
// names it explicitly, --device cpu:go opens GoMLX's go backend (the
// per-op reference the tests compare with).
const DefaultCPUBackend = BackendCPU

// Capabilities are the backend facts execution branches on, decided once
// when the device opens (CapabilitiesOf) and handed to compile/ and to the
// commands' memory checks. The op and dtype facts come from the backend's
// own backends.Capabilities.
type Capabilities struct {
	// Backend is the backend's name as GoMLX registers it: "cpu", "go" or
	// "xla".
	Backend string `json:"backend"`
	// HostMemory reports a backend that computes in this process's memory
	// (the CPU backends): host RAM bounds every buffer it allocates, so
	// the commands check their largest buffers against it beforehand.
	HostMemory bool `json:"host_memory"`
	// BlockedMatmul reports a backend whose matmul wants Matmul weights in
	// the blocked layout of nn.Blocked (GoMLX's go backend, whose
	// DotGeneral otherwise copies each large weight at every call).
	BlockedMatmul bool `json:"blocked_matmul"`
	// NarrowWeights reports a backend whose DotGeneral reads a bf16/f16
	// weight through a ConvertDType to f32 in place (tputool's own cpu
	// backend): executors then hold Matmul weights in their checkpoint
	// dtype and convert them in the graph where they are used (nn.Linear,
	// nn.Embedding gathers first), instead of converting them on the host.
	NarrowWeights bool `json:"narrow_weights"`
	// MXFP4 reports a backend that multiplies MXFP4 expert stacks as
	// checkpoints store them (nn.DequantizeMXFP4's form under nn.PairDot:
	// tputool's cpu backend): executors then hold such weights as their
	// blocks and scales, about 4.25 bits a weight, instead of decoding
	// them at load.
	MXFP4 bool `json:"mxfp4"`
	// FP8 reports a backend that multiplies FP8 E4M3 weights with block
	// scales as checkpoints store them (nn.DequantizeFP8's form under a
	// DotGeneral: tpu/cpu/fp8.go).
	FP8 bool `json:"fp8"`
	// Int4Groups reports a backend that multiplies 4-bit weights with a
	// scale (and a min) per group of input columns, the form GPTQ, AWQ and
	// compressed-tensors 4-bit checkpoints decode to
	// (nn.DequantizeInt4Groups under a DotGeneral: tpu/cpu/quant.go).
	Int4Groups bool `json:"int4_groups"`
	// NVFP4 reports a backend that multiplies NVFP4 weights as
	// compressed-tensors checkpoints store them (nn.DequantizeNVFP4's form
	// under a DotGeneral: tpu/cpu/quant.go).
	NVFP4              bool `json:"nvfp4"`
	DynamicSlice       bool `json:"dynamic_slice"`
	DynamicUpdateSlice bool `json:"dynamic_update_slice"`
	Pad                bool `json:"pad"`
	Reverse            bool `json:"reverse"`
	Gather             bool `json:"gather"`
	Float16            bool `json:"float16"`
	BFloat16           bool `json:"bfloat16"`
	// Sort (and so TopK) and While have no backend op in GoMLX v0.26.0 on
	// any backend; they are always false. Do sorting and loops on the host.
	Sort  bool `json:"sort"`
	While bool `json:"while"`
}

// CapabilitiesOf reads the capability facts from a backend.
func CapabilitiesOf(b backends.Backend) Capabilities {
	c := b.Capabilities()
	name := b.String()
	return Capabilities{
		Backend:            name,
		HostMemory:         name == BackendGo || name == BackendCPU,
		BlockedMatmul:      name == BackendGo,
		NarrowWeights:      name == BackendCPU,
		MXFP4:              name == BackendCPU,
		FP8:                name == BackendCPU,
		Int4Groups:         name == BackendCPU,
		NVFP4:              name == BackendCPU,
		DynamicSlice:       c.Operations[backends.OpTypeDynamicSlice],
		DynamicUpdateSlice: c.Operations[backends.OpTypeDynamicUpdateSlice],
		Pad:                c.Operations[backends.OpTypePad],
		Reverse:            c.Operations[backends.OpTypeReverse],
		Gather:             c.Operations[backends.OpTypeGather],
		Float16:            c.DTypes[dtypes.Float16],
		BFloat16:           c.DTypes[dtypes.BFloat16],
	}
}

// Device is an open backend plus the facts about it the rest of tputool
// needs. Close it when done.
type Device struct {
	// Backend is the GoMLX backend to build and run graphs on.
	Backend backends.Backend `json:"-"`
	// Spec is the --device spec that was asked for.
	Spec string `json:"spec"`
	// Kind is what the backend drives: cpu, tpu, gpu (or other).
	Kind Kind `json:"kind"`
	// BackendName is "cpu", "go" or "xla".
	BackendName string `json:"backend"`
	// Platform is the PJRT platform ("tpu", "cuda", "cpu"); "cpu" for go.
	Platform string `json:"platform"`
	// PluginPath is the PJRT plugin file, empty for the go backend.
	PluginPath string `json:"plugin_path,omitempty"`
	// NumDevices is the backend's device count (PJRT devices; a v7x chip
	// shows up as two).
	NumDevices int `json:"num_devices"`
	// Description is the backend's own one-line description.
	Description string `json:"description"`
	// DeviceDescriptions holds one line per device from the backend.
	DeviceDescriptions []string `json:"device_descriptions,omitempty"`
	// Capabilities of the backend.
	Capabilities Capabilities `json:"capabilities"`
	// ComputeDType is the preferred dtype for activations and matmuls:
	// Float32 on CPUs, BFloat16 on TPUs and GPUs.
	ComputeDType dtypes.DType `json:"-"`
	// ComputeDTypeName is ComputeDType's name, for JSON output.
	ComputeDTypeName string `json:"compute_dtype"`
	// Topology is the TPU slice from the environment (TPU devices only).
	Topology *Topology `json:"topology,omitempty"`
	// Notes records fallbacks taken by auto, e.g. a TPU runtime that
	// failed to load before the CPU was chosen.
	Notes []string `json:"notes,omitempty"`
	// XLACache is the on-disk XLA compile cache (GPU plugins; see
	// xlacache.go), nil when none is used.
	XLACache *XLACache `json:"xla_cache,omitempty"`

	caps backends.Capabilities
}

// Supports reports whether the backend implements a GoMLX op.
func (d *Device) Supports(op backends.OpType) bool { return d.caps.Operations[op] }

// SupportsDType reports whether the backend handles a dtype.
func (d *Device) SupportsDType(dt dtypes.DType) bool { return d.caps.DTypes[dt] }

// SetActivations sets how the products of models compiled from now on
// treat their activations (cpu.Backend.SetActivations): "int8" quantises
// them to int8 per block of 32 in the products with int4 weights
// (--quantize int4), "bf16" rounds them to bfloat16 in the products with
// bf16 weights and weights held compact, "f32" keeps them. Only tputool's CPU engine has the
// narrow kinds.
func (d *Device) SetActivations(kind string) error {
	b, ok := d.Backend.(*cpu.Backend)
	if !ok {
		if kind == "" || kind == "f32" {
			return nil
		}
		return errs.Unsupportedf("%s activations run on tputool's CPU engine only (device cpu:fast), not on the %s backend", kind, d.BackendName)
	}
	return b.SetActivations(kind)
}

// Activations is the activations kind SetActivations set: "f32" (also
// on backends other than tputool's CPU engine), "int8" or "bf16".
func (d *Device) Activations() string {
	if b, ok := d.Backend.(*cpu.Backend); ok {
		return b.Activations()
	}
	return "f32"
}

// Close releases the backend. It is safe to call more than once.
func (d *Device) Close() {
	if d != nil && d.Backend != nil && !d.Backend.IsFinalized() {
		d.Backend.Finalize()
	}
}

// String is a one-line summary such as "tpu (xla, 8 devices, /path/libtpu.so)".
func (d *Device) String() string {
	s := fmt.Sprintf("%s (%s, %d device", d.Kind, d.BackendName, d.NumDevices)
	if d.NumDevices != 1 {
		s += "s"
	}
	if d.PluginPath != "" {
		s += ", " + d.PluginPath
	}
	return s + ")"
}

// XLACompiled reports whether this binary includes the XLA backend (cgo).
func XLACompiled() bool { return xlaCompiled }

// candidate is one backend Open may try.
type candidate struct {
	kind     Kind
	backend  string
	platform string
	path     string // plugin file, xla only
}

// resolve turns a spec into the backends to try, in order. Only auto has
// more than one. It looks at files only; nothing is loaded.
func resolve(spec Spec, env Env) ([]candidate, []string, error) {
	cpu := candidate{kind: KindCPU, backend: DefaultCPUBackend, platform: "cpu"}
	switch spec.Kind {
	case SpecCPU:
		return []candidate{cpu}, nil, nil
	case SpecFast:
		return []candidate{{kind: KindCPU, backend: BackendCPU, platform: "cpu"}}, nil, nil
	case SpecGo:
		return []candidate{{kind: KindCPU, backend: BackendGo, platform: "cpu"}}, nil, nil
	case SpecTPU:
		s := FindTPU(env)
		if s.Found == nil {
			return nil, nil, s.NotFoundError(spec.String())
		}
		return []candidate{xlaCandidate(*s.Found)}, nil, nil
	case SpecGPU:
		s := FindGPU(env)
		if s.Found == nil {
			return nil, nil, s.NotFoundError(spec.String())
		}
		return []candidate{xlaCandidate(*s.Found)}, nil, nil
	case SpecXLA:
		if spec.PluginIsPath() {
			st, err := os.Stat(spec.Plugin)
			if err != nil {
				return nil, nil, specErr("", spec.String(), errs.Devicef, "plugin file: %w", err)
			}
			if st.IsDir() {
				return nil, nil, specErr("", spec.String(), errs.Devicef, "%s is a directory; give the plugin .so file", spec.Plugin)
			}
			name := pluginNameFromPath(spec.Plugin)
			if name == "" {
				name = "unknown"
			}
			return []candidate{xlaCandidate(Plugin{Name: name, Kind: kindOfPlugin(name), Path: spec.Plugin})}, nil, nil
		}
		s := FindPlugin(env, spec.Plugin)
		if s.Found == nil {
			return nil, nil, s.NotFoundError(spec.String())
		}
		return []candidate{xlaCandidate(*s.Found)}, nil, nil
	case SpecAuto, "":
		var (
			out   []candidate
			notes []string
		)
		if s := FindTPU(env); s.Found != nil {
			switch {
			case !tpuPresent(env):
				notes = append(notes, fmt.Sprintf("tpu not tried: libtpu found at %s, but no TPU device (/dev/accel*, /dev/vfio/N) or $%s", s.Found.Path, EnvAcceleratorType))
			case !xlaCompiled:
				notes = append(notes, fmt.Sprintf("tpu not tried: libtpu found at %s, but %s", s.Found.Path, noCgoMessage))
			default:
				out = append(out, xlaCandidate(*s.Found))
			}
		}
		if s := FindGPU(env); s.Found != nil {
			switch {
			case !nvidiaPresent(env):
				notes = append(notes, fmt.Sprintf("gpu not tried: CUDA plugin found at %s, but no NVIDIA device (/dev/nvidiaN)", s.Found.Path))
			case !xlaCompiled:
				notes = append(notes, fmt.Sprintf("gpu not tried: CUDA plugin found at %s, but %s", s.Found.Path, noCgoMessage))
			default:
				out = append(out, xlaCandidate(*s.Found))
			}
		}
		return append(out, cpu), notes, nil
	}
	return nil, nil, specErr("", strconv.Quote(spec.String()), errs.Usagef, "%s", specSyntax)
}

func xlaCandidate(p Plugin) candidate {
	platform := p.Name
	if p.Kind == KindGPU && platform == "gpu" {
		platform = "cuda"
	}
	return candidate{kind: p.Kind, backend: BackendXLA, platform: platform, path: p.Path}
}

// OpenEnv opens the device a spec names:
//
//   - cpu: DefaultCPUBackend.
//   - cpu:fast: tputool's own CPU backend (tpu/cpu).
//   - cpu:go: GoMLX's pure-Go backend.
//   - tpu: libtpu found by FindTPU, through XLA/PJRT.
//   - gpu: the CUDA plugin found by FindGPU, through XLA/PJRT.
//   - xla:NAME / xla:/abs/path.so: that PJRT plugin.
//   - auto: the TPU when libtpu is found and TPU hardware is present, else
//     a CUDA GPU, else cpu. A TPU or GPU that fails to load is recorded in
//     Device.Notes and the next choice is tried.
//
// Every failure to find or load a device wraps errs.ErrDeviceUnavailable
// and names the file involved; a panic in a backend constructor is
// recovered into such an error.
func OpenEnv(spec Spec, env Env) (*Device, error) {
	cands, notes, err := resolve(spec, env)
	if err != nil {
		return nil, err
	}
	for i, c := range cands {
		xc, err := setupXLACache(env, c)
		if err != nil {
			return nil, err
		}
		d, err := openCandidate(spec, c)
		if err == nil {
			d.Notes = notes
			if d.XLACache = xc.cache; xc.note != "" {
				d.Notes = append(d.Notes, xc.note)
			}
			if d.Kind == KindTPU {
				if t, terr := TopologyFromEnv(env); terr != nil {
					d.Notes = append(d.Notes, "TPU topology: "+terr.Error())
				} else {
					d.Topology = t
				}
			}
			return d, nil
		}
		xc.undo()
		if i == len(cands)-1 {
			return nil, err
		}
		notes = append(notes, fmt.Sprintf("%s not used: %v", c.kind, err))
	}
	panic("unreachable: resolve returns at least one candidate")
}

func openCandidate(spec Spec, c candidate) (*Device, error) {
	var (
		b   backends.Backend
		err error
	)
	switch c.backend {
	case BackendCPU:
		b, err = newCPUBackend()
	case BackendGo:
		b, err = newGoBackend()
	case BackendXLA:
		b, err = newXLABackend(spec, c)
	default:
		return nil, errs.Devicef("unknown backend %q", c.backend)
	}
	if err != nil {
		return nil, err
	}
	d := &Device{
		Backend:     b,
		Spec:        spec.String(),
		Kind:        c.kind,
		BackendName: c.backend,
		Platform:    c.platform,
		PluginPath:  c.path,
		NumDevices:  b.NumDevices(),
		Description: b.Description(),
		caps:        b.Capabilities(),
	}
	for i := 0; i < d.NumDevices && i < 64; i++ {
		d.DeviceDescriptions = append(d.DeviceDescriptions, b.DeviceDescription(backends.DeviceNum(i)))
	}
	d.Capabilities = CapabilitiesOf(b)
	d.ComputeDType = dtypes.Float32
	if (c.kind == KindTPU || c.kind == KindGPU) && d.Capabilities.BFloat16 {
		d.ComputeDType = dtypes.BFloat16
	}
	d.ComputeDTypeName = d.ComputeDType.String()
	return d, nil
}

// newCPUBackend opens tputool's own CPU backend.
func newCPUBackend() (backends.Backend, error) {
	b, err := cpu.New("")
	if err != nil {
		return nil, errs.Devicef("cpu backend: %w", err)
	}
	return b, nil
}

// newGoBackend opens the pure-Go backend, turning a constructor panic into
// an error.
func newGoBackend() (b backends.Backend, err error) {
	defer func() {
		if r := recover(); r != nil {
			b, err = nil, errs.Devicef("go backend: constructor panicked: %v", r)
		}
	}()
	// ops_sequential: in its default (dynamic) mode the go backend of
	// GoMLX v0.26.0 runs independent ops in pool workers that then wait on
	// the same pool for their own sub-tasks (DotGeneral's batch split), and
	// with 2*NumCPU slots all taken it deadlocks (seen with 2 cores on the
	// diffusion UNet). Intra-op parallelism stays on.
	b, err = backends.NewWithConfig(BackendGo + ":ops_sequential")
	if err != nil {
		return nil, errs.Devicef("go backend: %w", err)
	}
	return b, nil
}

// pluginLabel names a plugin file for messages; an xla:/path spec already
// names it.
func pluginLabel(spec Spec, c candidate) string {
	if spec.PluginIsPath() {
		return "the plugin file"
	}
	return fmt.Sprintf("%s plugin %s", c.platform, filepath.Clean(c.path))
}

// reDlopenFailure picks dlerror()'s text out of go-xla's load error.
var reDlopenFailure = regexp.MustCompile(`failed to dynamically load PJRT plugin from "(.*?)": "`)

// loadError keeps a short message for a plugin load failure while still
// unwrapping to the backend's full error.
type loadError struct {
	msg   string
	cause error
}

func (e *loadError) Error() string { return e.msg }
func (e *loadError) Unwrap() error { return e.cause }

// conciseLoadError shortens go-xla's errors for a failed dlopen ("dlopen:
// <dlerror text>") and for a library that is not a PJRT plugin; other
// errors are returned as they are.
func conciseLoadError(err error, path string) error {
	msg := err.Error()
	if m := reDlopenFailure.FindStringSubmatch(msg); m != nil {
		return &loadError{msg: fmt.Sprintf("dlopen: %s (check its dependencies with `ldd %s`)", m[1], path), cause: err}
	}
	if strings.Contains(msg, "undefined symbol: GetPjrtApi") {
		return &loadError{msg: "not a PJRT plugin: the library does not export GetPjrtApi", cause: err}
	}
	return err
}

// noCgoMessage explains why a binary without cgo cannot use XLA.
const noCgoMessage = "this tputool binary was built without cgo; rebuild with CGO_ENABLED=1 to use XLA/PJRT plugins"
