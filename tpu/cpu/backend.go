// Package cpu is tputool's own CPU backend for GoMLX: a
// backends.Backend that records a graph of nodes with their shapes, and
// runs it with an executor that reuses buffers, writes in place where it
// can, and calls the SIMD kernels of tpu/cpu/kernels for the matrix
// products. Ops it does not implement fail with an error naming the op
// (the notimplemented base of GoMLX), never a panic.
//
// It registers itself with GoMLX as BackendName ("cpu"). See
// docs/cpu-engine.md for the design, the op list and how to add an op.
package cpu

import (
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/shapes"

	"github.com/tputool/tputool/tpu/cpu/kernels"
)

// BackendName is the name the backend registers with GoMLX, and what its
// Name() and String() return.
const BackendName = "cpu"

func init() {
	backends.Register(BackendName, New)
}

// Backend implements backends.Backend on the host CPU.
type Backend struct {
	finalized atomic.Bool
	// act is how the products of executables compiled from now on treat
	// their activations (SetActivations), read at Compile.
	act atomic.Int32
	// weights holds the shared buffers (the loader's weights), packed
	// for huge pages (hostmem.go).
	weights arena
	// spares holds large memory executions freed, for any execution's
	// next large values (spares.go).
	spares spares
}

// actKind is what the products do with their f32 activations.
type actKind int32

const (
	// actF32 multiplies them as they are: the default and the reference.
	actF32 actKind = iota
	// actInt8: products with int4 or int8 weights quantise their
	// activations to int8 per block of 32 and multiply in integers
	// (kernels.GemmInt4Q8NT, GemmInt8Q8NT: VNNI where the CPU has it).
	actInt8
	// actBF16: products with bf16 weights or weights held compact round
	// their activations to bf16 and multiply pairs (kernels.GemmBF16DotNT,
	// GemmInt8DotNT and its kin for the other compact formats: VDPBF16PS
	// where the CPU has AVX512_BF16).
	actBF16
)

// ReleaseSpares drops the large memory that executions freed and the
// backend keeps for the next ones (spares.go), so that the collector can
// return it to the system: for a server going idle after its warm-up.
func (b *Backend) ReleaseSpares() { b.spares.release() }

// SetActivations sets how the products of the executables compiled from
// now on treat their activations: "f32" (or "") multiplies them as they
// are; "int8" quantises them to int8 per block of 32 in the products with
// int4 and int8 weights (about 0.5% of a product off the f32 result); "bf16"
// rounds them to bfloat16 in the products with bf16 weights and weights
// held compact (int8, int4, grouped int4, FP8, NVFP4, MXFP4; 2⁻⁹ of each
// activation, about 0.1-0.3% of a product; compact weights are rounded to
// bf16 too in products of 16 rows or more). The narrow kinds
// are faster and opt-in for what they cost in accuracy.
func (b *Backend) SetActivations(kind string) error {
	k, err := parseAct(kind)
	if err != nil {
		return err
	}
	b.act.Store(int32(k))
	return nil
}

// Activations is the kind SetActivations last set: "f32", "int8" or
// "bf16".
func (b *Backend) Activations() string {
	switch actKind(b.act.Load()) {
	case actInt8:
		return "int8"
	case actBF16:
		return "bf16"
	}
	return "f32"
}

func parseAct(kind string) (actKind, error) {
	switch kind {
	case "", "f32":
		return actF32, nil
	case "int8":
		return actInt8, nil
	case "bf16":
		return actBF16, nil
	}
	return 0, fmt.Errorf("cpu backend: activations %q: want f32, int8 or bf16", kind)
}

var _ backends.Backend = (*Backend)(nil)

// New returns a CPU backend. The config string is a comma-separated list of
// options: "threads=N" sets the kernels' thread count for the whole
// process, and "act=KIND" is SetActivations(KIND).
func New(config string) (backends.Backend, error) {
	act := actF32
	for _, part := range strings.Split(config, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		key, value, _ := strings.Cut(part, "=")
		switch key {
		case "threads":
			var n int
			if _, err := fmt.Sscanf(value, "%d", &n); err != nil || n < 1 {
				return nil, fmt.Errorf("cpu backend: threads=%q: want a positive integer", value)
			}
			kernels.SetThreads(n)
		case "act":
			var err error
			if act, err = parseAct(value); err != nil {
				return nil, err
			}
		default:
			return nil, fmt.Errorf("cpu backend: unknown option %q (known: threads=N, act=f32|int8|bf16)", key)
		}
	}
	b := &Backend{}
	b.act.Store(int32(act))
	return b, nil
}

// Name implements backends.Backend.
func (b *Backend) Name() string { return BackendName }

// String implements backends.Backend.
func (b *Backend) String() string { return BackendName }

// Description implements backends.Backend.
func (b *Backend) Description() string {
	return fmt.Sprintf("tputool CPU backend (%d threads, %s)", kernels.Threads(), strings.Join(featuresOrNone(), " "))
}

func featuresOrNone() []string {
	if f := kernels.Features(); len(f) > 0 {
		return f
	}
	return []string{runtime.GOARCH}
}

// NumDevices implements backends.Backend: one device, the host.
func (b *Backend) NumDevices() int { return 1 }

// DeviceDescription implements backends.Backend.
func (b *Backend) DeviceDescription(deviceNum backends.DeviceNum) string {
	return fmt.Sprintf("cpu:%d (%s/%s, %d threads)", deviceNum, runtime.GOOS, runtime.GOARCH, kernels.Threads())
}

// Capabilities implements backends.Backend.
func (b *Backend) Capabilities() backends.Capabilities { return capabilities.Clone() }

// Builder implements backends.Backend.
func (b *Backend) Builder(name string) backends.Builder { return newBuilder(b, name) }

// Finalize implements backends.Backend.
func (b *Backend) Finalize() { b.finalized.Store(true) }

// IsFinalized implements backends.Backend.
func (b *Backend) IsFinalized() bool { return b.finalized.Load() }

func (b *Backend) checkDevice(deviceNum backends.DeviceNum) error {
	if b.finalized.Load() {
		return fmt.Errorf("cpu backend: already finalized")
	}
	if deviceNum != 0 {
		return fmt.Errorf("cpu backend: only device 0 exists, got %d", deviceNum)
	}
	return nil
}

// supportedDTypes are the dtypes buffers and the executor handle.
var supportedDTypes = []dtypes.DType{
	dtypes.Bool, dtypes.Int8, dtypes.Int16, dtypes.Int32, dtypes.Int64,
	dtypes.Uint8, dtypes.Uint16, dtypes.Uint32, dtypes.Uint64,
	dtypes.Float16, dtypes.BFloat16, dtypes.Float32, dtypes.Float64,
}

func dtypeSupported(dt dtypes.DType) bool {
	for _, d := range supportedDTypes {
		if d == dt {
			return true
		}
	}
	return false
}

func checkShape(s shapes.Shape) error {
	if !dtypeSupported(s.DType) {
		return fmt.Errorf("cpu backend: dtype %s is not supported", s.DType)
	}
	for _, d := range s.Dimensions {
		if d < 0 {
			return fmt.Errorf("cpu backend: negative dimension in %s", s)
		}
	}
	return nil
}
