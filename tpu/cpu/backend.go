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
	// int8Act: int4 products quantise their activations to int8 per
	// block of 32 (kernels.GemmInt4Q8NT) in executables compiled after it
	// is set.
	int8Act atomic.Bool
}

// SetInt8Activations makes the products with int4 weights of the
// executables compiled from now on quantise their activations to int8
// per block of 32 and multiply in integers (kernels.GemmInt4Q8NT: VNNI
// where the CPU has it), instead of multiplying the f32 activations. The
// results differ from the f32 path by what int8 activations cost (about
// 0.5% of a product); it is opt-in for that reason.
func (b *Backend) SetInt8Activations(on bool) { b.int8Act.Store(on) }

var _ backends.Backend = (*Backend)(nil)

// New returns a CPU backend. The config string is a comma-separated list of
// options: "threads=N" sets the kernels' thread count for the whole
// process, and "act=int8" is SetInt8Activations(true).
func New(config string) (backends.Backend, error) {
	var int8Act bool
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
			if value != "int8" {
				return nil, fmt.Errorf("cpu backend: act=%q: want int8", value)
			}
			int8Act = true
		default:
			return nil, fmt.Errorf("cpu backend: unknown option %q (known: threads=N, act=int8)", key)
		}
	}
	b := &Backend{}
	b.int8Act.Store(int8Act)
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
