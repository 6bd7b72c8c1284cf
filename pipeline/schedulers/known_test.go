package schedulers

import (
	"errors"
	"testing"

	"github.com/tputool/tputool/internal/errs"
)

// Every implemented class is reachable from --scheduler by its diffusers
// class name, not only the classes a short name points at.
func TestEveryClassReachable(t *testing.T) {
	base := map[string]any{"_class_name": "PNDMScheduler", "num_train_timesteps": 1000}
	for _, class := range Classes() {
		if !Known(class) {
			t.Errorf("Known(%q) = false", class)
		}
		if _, err := FromShortName(class, base); err != nil {
			t.Errorf("FromShortName(%q): %v", class, err)
		}
	}
	for _, name := range Names() {
		if !Known(name) {
			t.Errorf("Known(%q) = false", name)
		}
	}
	if Known("NoSuchScheduler") {
		t.Error(`Known("NoSuchScheduler") = true`)
	}
	if _, err := FromShortName("NoSuchScheduler", base); !errors.Is(err, errs.ErrUsage) {
		t.Errorf("unknown name: %v, want a usage error", err)
	}
}
