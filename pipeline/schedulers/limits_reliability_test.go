package schedulers

import (
	"strings"
	"testing"
)

// TestHostileTrainTimesteps: a scheduler_config.json asking for 1e12
// training timesteps is an error naming the field for every scheduler
// class, instead of allocating the schedule tables (which aborted the
// process with an out-of-memory error).
func TestHostileTrainTimesteps(t *testing.T) {
	for _, class := range Classes() {
		for _, n := range []float64{1e12, 1 << 21} {
			// 2^21 would fit in memory; it is refused as a value no real
			// scheduler has, so that no class can build 1e12-entry tables.
			_, err := New(class, map[string]any{"num_train_timesteps": n})
			if err == nil || !strings.Contains(err.Error(), "num_train_timesteps") {
				t.Errorf("%s %g: error %q does not name num_train_timesteps", class, n, err)
			}
		}
	}
}
