package kernels

import (
	"slices"
	"testing"
)

func TestFeaturesMatchDispatch(t *testing.T) {
	f := Features()
	switch Dispatch() {
	case "avx512":
		for _, want := range []string{"avx2", "fma", "f16c", "avx512f", "avx512bw"} {
			if !slices.Contains(f, want) {
				t.Errorf("dispatch avx512 but Features() %v lacks %q", f, want)
			}
		}
	case "avx2":
		for _, want := range []string{"avx2", "fma", "f16c"} {
			if !slices.Contains(f, want) {
				t.Errorf("dispatch avx2 but Features() %v lacks %q", f, want)
			}
		}
	case "generic":
	default:
		t.Fatalf("Dispatch() = %q", Dispatch())
	}
	if len(f) > 0 {
		f[0] = "changed"
		if Features()[0] == "changed" {
			t.Fatal("Features returns the package's own slice")
		}
	}
}

func TestSetLevelCapsAtDetected(t *testing.T) {
	old := setLevel(levelAVX512 + 1)
	defer setLevel(old)
	if level > detected {
		t.Fatalf("setLevel raised the level to %v above the detected %v", level, detected)
	}
}
