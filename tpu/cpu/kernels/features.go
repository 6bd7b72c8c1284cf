package kernels

// level is the instruction-set level the kernels dispatch on. It is set once
// at init from CPUID; tests lower it with setLevel to exercise every path on
// one machine.
type isaLevel int

const (
	levelGeneric isaLevel = iota // portable Go
	levelAVX2                    // AVX2 + FMA (+ F16C)
	levelAVX512                  // AVX-512 F/BW/VL/DQ
)

func (l isaLevel) String() string {
	switch l {
	case levelAVX2:
		return "avx2"
	case levelAVX512:
		return "avx512"
	}
	return "generic"
}

var (
	detected = detectLevel()
	level    = detected
)

// setLevel switches dispatch to l (capped at what the CPU has) and returns the
// previous level. For tests and benchmarks; not safe while kernels run.
func setLevel(l isaLevel) isaLevel {
	old := level
	level = min(l, detected)
	return old
}

// Features reports the CPU features the kernels detected at start-up, by the
// names Linux /proc/cpuinfo uses: "avx2", "fma", "f16c", "avx512f",
// "avx512bw", "avx512vl", "avx512dq", "avx512_bf16", "avx512_vnni". On other
// architectures it lists what golang.org/x/sys/cpu reports there (for example
// "asimd" on arm64). The slice is a fresh copy.
func Features() []string {
	return append([]string(nil), cpuFeatures()...)
}

// Dispatch names the kernel path in use: "avx512", "avx2" or "generic".
func Dispatch() string { return level.String() }
