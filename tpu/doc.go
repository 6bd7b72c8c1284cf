// Package tpu is tputool's device layer: it turns a --device spec into an
// open GoMLX backend, finds PJRT plugins (libtpu, the CUDA plugin, the XLA
// CPU plugin) on disk, reads the TPU slice topology from the environment, and
// holds a catalog of Cloud TPU chips with a memory-fit calculator.
//
// Backends:
//
//   - "go" (github.com/gomlx/gomlx/backends/simplego) is always compiled in
//     and is the CPU device (DefaultCPUBackend); --device cpu:go names it.
//   - "cpu" (tpu/cpu, tputool's own CPU backend on the SIMD kernels of
//     tpu/cpu/kernels) is always compiled in, pure Go and Go assembly;
//     --device cpu:fast opens it.
//   - "xla" (github.com/gomlx/gomlx/backends/xla over go-xla's PJRT bindings)
//     needs cgo. Files that import it carry //go:build cgo; the !cgo build has
//     twins that return an errs.ErrDeviceUnavailable error, so the binary
//     still builds with CGO_ENABLED=0.
//
// Nothing is ever downloaded: importing this package turns off GoMLX's
// plugin auto-install (xla.EnableAutoInstall(false) and
// GOMLX_NO_AUTO_INSTALL=1). Plugins are always opened by absolute path after
// tputool's own discovery, so go-xla's name-based search never runs.
//
// Discovery and topology take an Env (environment lookup, home directory
// and a root prefix for system paths) instead of reading the process
// environment, so tests run them on fake directory trees.
//
// Nothing in this package prints. Logging from GoMLX/go-xla (klog) is
// discarded unless TPUTOOL_XLA_LOG is set or SetBackendLog is called.
package tpu
