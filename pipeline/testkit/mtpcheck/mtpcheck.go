// Package mtpcheck drafts with a model's multi-token-prediction head as a
// compile.State's steps feed it and compares the head with its float64
// reference: the check the MTP families' tests share (Qwen3.5 and
// Qwen3-Next, DeepSeek-V3 and GLM-4.5). It imports compile, so it is
// apart from refcheck, which compile's own tests use.
package mtpcheck

import (
	"fmt"
	"slices"
	"testing"

	"github.com/tputool/tputool/compile"
	"github.com/tputool/tputool/pipeline/sample"
	"github.com/tputool/tputool/pipeline/testkit/refcheck"
)

// Ref is a float64 reference of a model with its head: the head's logits
// at every MTP position of a text (position i predicting token i+2), and
// its greedy chained drafts after a text.
type Ref interface {
	MTPLogits(tokens []int) [][]float64
	MTPDraft(tokens []int, k int) []int
}

// Follow drafts with st's head as st's steps feed it: after a prefill of
// text, after a three-token step of which the last token is taken back,
// and after a one-token step, each time over chained slots a draft left.
// Each time the head's logits for the token after the newest must be
// ref's over the whole text within tol, and its chained greedy drafts
// ref's. It returns the head and the text the model has run, and the
// token after it, which it has not.
func Follow(t *testing.T, st *compile.State, ref Ref, text []int, tol float64) (h *compile.MTP, fed []int, next int) {
	t.Helper()
	h, err := st.MTP()
	if err != nil {
		t.Fatal(err)
	}
	text = slices.Clone(text)
	rows, err := st.Prefill([][]int{text}, 32)
	if err != nil {
		t.Fatal(err)
	}
	check := func(step string, next, k int) {
		t.Helper()
		got, err := h.Draft(next)
		if err != nil || got == nil {
			t.Fatalf("%s: draft: %v, %d logits", step, err, len(got))
		}
		full := append(slices.Clone(text), next)
		want := ref.MTPLogits(full)
		if e := refcheck.RelErr(got, want[len(want)-1]); e > tol {
			t.Errorf("%s: the head's logits are %.3g off the reference's", step, e)
		}
		drafts := []int{sample.Argmax(got)}
		for len(drafts) < k {
			l, err := h.Chain(drafts[len(drafts)-1])
			if err != nil {
				t.Fatalf("%s: chain: %v", step, err)
			}
			drafts = append(drafts, sample.Argmax(l))
		}
		if want := ref.MTPDraft(full, k); fmt.Sprint(drafts) != fmt.Sprint(want) {
			t.Errorf("%s: drafts %v, the reference's %v", step, drafts, want)
		}
	}
	next = sample.Argmax(rows[0])
	check("after the prefill", next, 3)

	rows, err = st.DecodeMany([]int{next, 5, 9})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Rewind(1); err != nil {
		t.Fatal(err)
	}
	text = append(text, next, 5)
	next = sample.Argmax(rows[1])
	check("after a step taken back by one", next, 2)

	rows, err = st.Decode([]int{next})
	if err != nil {
		t.Fatal(err)
	}
	text = append(text, next)
	next = sample.Argmax(rows[0])
	check("after a one-token step", next, 2)
	return h, text, next
}
