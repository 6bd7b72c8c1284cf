package compile

import (
	"testing"

	"github.com/tputool/tputool/pipeline/testkit/qwenref"
	"github.com/tputool/tputool/pipeline/testkit/refcheck"
)

// TestMTPCold: a head begun cold at a position (serve's lone sequence,
// BatchMTP) drafts as the float64 reference's head whose attention
// begins there, the model's hidden states those of the whole text; a
// head begun at the text's start would differ.
func TestMTPCold(t *testing.T) {
	c := qwenref.TinyQwen35()
	c.MTP = true
	dir := t.TempDir()
	if err := c.Write(dir); err != nil {
		t.Fatal(err)
	}
	l := loadDir(t, dir)
	if err := l.WithMTP(); err != nil {
		t.Fatal(err)
	}
	rm, err := qwenref.LoadQwen35(dir, c)
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewRunner(cpuBackend(t), l, Options{Mode: Compiled})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	st := r.NewState()
	defer st.Release()
	h, err := st.MTP()
	if err != nil {
		t.Fatal(err)
	}
	text := []int{1, 9, 14, 60, 3, 5, 41, 27, 11}
	if _, err := st.Prefill([][]int{text}, 32); err != nil {
		t.Fatal(err)
	}
	from := len(text) // the next token's position
	h.coldAt(from)
	for _, id := range []int{33, 7, 50} {
		if _, err := st.Decode([]int{id}); err != nil {
			t.Fatal(err)
		}
		text = append(text, id)
	}
	got, err := h.Draft(21)
	if err != nil || got == nil {
		t.Fatalf("draft: %v, %d logits", err, len(got))
	}
	full := append(text, 21)
	cold := rm.MTPLogitsFrom(full, from)
	if e := refcheck.RelErr(got, cold[len(cold)-1]); e > 1e-4 {
		t.Errorf("the cold head's logits are %.3g off the reference's", e)
	}
	whole := rm.MTPLogits(full)
	if e := refcheck.RelErr(got, whole[len(whole)-1]); e <= 1e-4 {
		t.Errorf("the cold head matches a head that saw the whole text (%.3g): the test cannot tell them apart", e)
	}
}
