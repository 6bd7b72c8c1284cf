package cpu

import (
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

const hugeSupported = true

// adviseHuge asks for transparent huge pages over b (aligned to them);
// a kernel without them, or with them off, refuses and nothing changes.
func adviseHuge(b []byte) { _ = unix.Madvise(b, unix.MADV_HUGEPAGE) }

// thpPath holds the kernel's transparent huge page mode, the current one
// in brackets ("always [madvise] never").
const thpPath = "/sys/kernel/mm/transparent_hugepage/enabled"

func thpMode() string { return parseTHP(os.ReadFile(thpPath)) }

// parseTHP picks the bracketed mode out of thpPath's contents.
func parseTHP(b []byte, err error) string {
	if err != nil {
		return "unknown"
	}
	s := string(b)
	i, j := strings.IndexByte(s, '['), strings.IndexByte(s, ']')
	if i < 0 || j <= i+1 {
		return "unknown"
	}
	return s[i+1 : j]
}
