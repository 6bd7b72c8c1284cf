//go:build 386 || amd64

package kernels

import "golang.org/x/sys/cpu"

func cpuFeatures() []string {
	x := cpu.X86
	var f []string
	add := func(ok bool, name string) {
		if ok {
			f = append(f, name)
		}
	}
	add(x.HasAVX, "avx")
	add(x.HasAVX2, "avx2")
	add(x.HasFMA, "fma")
	add(x.HasF16C, "f16c")
	add(x.HasAVX512F, "avx512f")
	add(x.HasAVX512BW, "avx512bw")
	add(x.HasAVX512VL, "avx512vl")
	add(x.HasAVX512DQ, "avx512dq")
	add(x.HasAVX512BF16, "avx512_bf16")
	add(x.HasAVX512VNNI, "avx512_vnni")
	return f
}
