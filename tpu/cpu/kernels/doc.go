// Package kernels holds the numeric kernels of tputool's own CPU engine:
// matrix products over f32, bf16, f16 and int8 weights read in the
// Hugging Face [out, in] layout, fused row kernels (RMSNorm, softmax,
// SiLU·up, residual add) and the worker pool they run on.
//
// On amd64 the hot loops are Go assembly (Plan 9 syntax) with an AVX-512 and
// an AVX2+FMA path, chosen once at start-up from CPUID through
// golang.org/x/sys/cpu. Every kernel also has a portable Go version, used on
// other architectures, under the purego build tag, and on x86 machines
// without AVX2+FMA. No cgo and no GOEXPERIMENT are needed.
//
// Conventions: matrices are row-major slices with an explicit row stride
// (lda, ldb, ldc >= the row width). "NT" products compute C = A·Bᵀ where B is
// [n, k], the layout of a Linear weight [out, in], read in place without a
// transposed copy. Accumulation is always in f32. Kernels panic on slices too
// short for the shapes they are given (a programming error of the caller, like
// an index out of range); they never allocate in proportion to bad input.
//
// See docs/cpu-engine.md, section "Kernels", for the design and measurements.
package kernels
