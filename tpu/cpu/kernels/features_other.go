//go:build !386 && !amd64

package kernels

import "golang.org/x/sys/cpu"

func cpuFeatures() []string {
	var f []string
	if cpu.ARM64.HasASIMD {
		f = append(f, "asimd")
	}
	if cpu.ARM64.HasFPHP {
		f = append(f, "fphp")
	}
	if cpu.ARM64.HasASIMDHP {
		f = append(f, "asimdhp")
	}
	if cpu.ARM64.HasSVE {
		f = append(f, "sve")
	}
	return f
}
