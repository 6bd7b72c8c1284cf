package cpu

import (
	"errors"
	"testing"
)

// The kernel's mode is the bracketed word of the sysfs file; anything
// else is unknown. With the placement off, HugePages says so whatever the
// kernel's mode.
func TestHugePagesMode(t *testing.T) {
	for in, want := range map[string]string{
		"always [madvise] never\n": "madvise",
		"[always] madvise never\n": "always",
		"always madvise [never]\n": "never",
		"always madvise never\n":   "unknown",
		"[]":                       "unknown",
	} {
		if got := parseTHP([]byte(in), nil); got != want {
			t.Errorf("parseTHP(%q) = %q, want %q", in, got, want)
		}
	}
	if got := parseTHP(nil, errors.New("no such file")); got != "unknown" {
		t.Errorf("unreadable: %q, want unknown", got)
	}
	withHugePages(t, false, func() {
		if got := HugePages(); got != "off" {
			t.Errorf("HugePages() with the placement off = %q, want off", got)
		}
	})
}
