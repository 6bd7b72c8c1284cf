//go:build !linux

package cpu

const hugeSupported = false

func adviseHuge(b []byte) {}

func thpMode() string { return "unsupported" }
