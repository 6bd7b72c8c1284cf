//go:build windows

package hub

import "golang.org/x/sys/windows"

// diskFree returns the bytes the caller may still write on the volume
// that holds dir (GetDiskFreeSpaceEx, honouring quotas).
func diskFree(dir string) (int64, error) {
	p, err := windows.UTF16PtrFromString(dir)
	if err != nil {
		return 0, err
	}
	var avail, total, free uint64
	if err := windows.GetDiskFreeSpaceEx(p, &avail, &total, &free); err != nil {
		return 0, err
	}
	return clampInt64(avail), nil
}
