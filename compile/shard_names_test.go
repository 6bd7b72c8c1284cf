package compile

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestNoWeightNames: the split is the architectures' to declare; compile/
// reads WeightSpec.TP and never matches Hugging Face weight names.
func TestNoWeightNames(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"_proj", "lm_head", "embed_tokens"} {
			if strings.Contains(string(b), name) {
				t.Errorf("%s names weights (%q)", f, name)
			}
		}
	}
}
