// Package humanize formats numbers for people: byte counts in binary units.
// Commands use it for output, tpu for the reasons in its fit results.
package humanize

import "fmt"

// Bytes renders a byte count in binary units ("1.5 GiB").
func Bytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 5; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
