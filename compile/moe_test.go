package compile

import (
	"fmt"
	"testing"
)

// TestGroupTokens checks the host-side grouping: groups in ascending
// expert order, tokens in order within a group, capacity a power of two,
// the group count rounded up to a multiple of k, padding tokens skipped,
// and every choice's slot holding that token.
func TestGroupTokens(t *testing.T) {
	// 4 tokens, top-2 of 8 experts; token 0 is left padding.
	ids := []int32{
		7, 7, // padding (would be invalid as a pair, but is never read)
		3, 5,
		5, 1,
		3, 5,
	}
	g, err := groupTokens(ids, 4, 2, 8, func(tok int) bool { return tok == 0 })
	if err != nil {
		t.Fatal(err)
	}
	// Active experts 1 {2}, 3 {1, 3}, 5 {1, 2, 3}: A = 3 -> 4 (multiple of k=2), C = 4.
	if g.a != 4 || g.c != 4 {
		t.Fatalf("A=%d C=%d, want 4 and 4", g.a, g.c)
	}
	if fmt.Sprint(g.experts) != "[1 3 5 1]" {
		t.Errorf("experts %v, want [1 3 5 1]", g.experts)
	}
	if fmt.Sprint(g.perm) != "[2 0 0 0 1 3 0 0 1 2 3 0 0 0 0 0]" {
		t.Errorf("perm %v", g.perm)
	}
	for tok := 1; tok < 4; tok++ {
		for j := 0; j < 2; j++ {
			s := g.slot[tok*2+j]
			a, c := int(s)/g.c, int(s)%g.c
			if g.experts[a] != int(ids[tok*2+j]) || g.perm[s] != int32(tok) || c >= g.c {
				t.Errorf("token %d choice %d: slot %d (group %d expert %d, holds token %d)", tok, j, s, a, g.experts[a], g.perm[s])
			}
		}
	}
	if g.slot[0] != 0 || g.slot[1] != 0 {
		t.Errorf("padding token slots %v, want 0", g.slot[:2])
	}

	// Batch 1, top-8 of 64: exactly the 8 chosen experts, capacity 1.
	one := []int32{9, 2, 40, 63, 0, 17, 33, 5}
	g, err = groupTokens(one, 1, 8, 64, func(int) bool { return false })
	if err != nil {
		t.Fatal(err)
	}
	if g.a != 8 || g.c != 1 || fmt.Sprint(g.experts) != "[0 2 5 9 17 33 40 63]" {
		t.Errorf("batch 1: A=%d C=%d experts %v", g.a, g.c, g.experts)
	}

	if _, err := groupTokens([]int32{8}, 1, 1, 8, func(int) bool { return false }); err == nil {
		t.Error("expert id 8 of 8 accepted")
	}
	if _, err := groupTokens([]int32{-2}, 1, 1, 8, func(int) bool { return false }); err == nil {
		t.Error("expert id -2 accepted")
	}

	// Expert -1 (a Routing's pair that runs no expert): not grouped, its
	// slot 0; the other choices as before.
	g, err = groupTokens([]int32{4, -1, -1, -1}, 2, 2, 8, func(int) bool { return false })
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(g.experts) != "[4 4]" || g.c != 1 || fmt.Sprint(g.slot) != "[0 0 0 0]" || g.perm[0] != 0 {
		t.Errorf("no-expert pairs: experts %v C=%d slots %v perm %v", g.experts, g.c, g.slot, g.perm)
	}
}
