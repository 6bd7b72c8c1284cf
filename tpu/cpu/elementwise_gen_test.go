package cpu

import (
	"bytes"
	"os"
	"testing"

	"github.com/tputool/tputool/tpu/cpu/internal/elementwisegen"
)

// TestElementwiseGenIsCurrent renders elementwise_gen.go from the op table
// and compares it with the committed file.
func TestElementwiseGenIsCurrent(t *testing.T) {
	want, err := elementwisegen.Render()
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(elementwisegen.FileName)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s is not what the op table in internal/elementwisegen renders: run `go generate ./tpu/cpu`", elementwisegen.FileName)
	}
}
