package cmd

import "testing"

// TestFirstShapes: a recompile's line names its first input shapes and
// counts the rest.
func TestFirstShapes(t *testing.T) {
	for _, c := range []struct {
		in   string
		n    int
		want string
	}{
		{"(Int32)[1 3] (Int32)[1] (Int32)", 8, "(Int32)[1 3] (Int32)[1] (Int32)"},
		{"(Int32)[1 3] (Int32)[1] (Int32) (Float32)[1 3 768]", 2, "(Int32)[1 3] (Int32)[1] … and 2 more"},
		{"(Int32)[1 3] (Int32)[1]", 2, "(Int32)[1 3] (Int32)[1]"},
	} {
		if got := firstShapes(c.in, c.n); got != c.want {
			t.Errorf("firstShapes(%q, %d) = %q, want %q", c.in, c.n, got, c.want)
		}
	}
}
