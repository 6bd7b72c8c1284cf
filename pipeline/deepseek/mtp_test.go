package deepseek_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/tputool/tputool/compile"
	"github.com/tputool/tputool/pipeline/sample"
	"github.com/tputool/tputool/pipeline/testkit/dsref"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
	"github.com/tputool/tputool/pipeline/testkit/refcheck"
)

// mtpRef is dsref's multi-token-prediction head of a DeepSeek-V3 or a
// GLM-4.5.
type mtpRef interface {
	MTPLogits(tokens []int) [][]float64
	MTPDraft(tokens []int, k int) []int
}

// TestMTPMatchesReference drafts with tiny DeepSeek-V3s' (MLA) and
// GLM-4.5s' (grouped-query attention) multi-token-prediction heads as a
// State's steps feed them: after a prefill, after a several-token step of
// which the last token is taken back, and after a one-token step, each
// time over chained slots a draft left. The head's logits for the token
// after the newest must be dsref's over the whole text (vLLM's
// deepseek_mtp), and its chained greedy drafts the reference's.
func TestMTPMatchesReference(t *testing.T) {
	const tol = 1e-4
	ds, glm := dsref.TinyDeepSeek(), dsref.TinyGLM()
	ds.MTP, glm.MTP = true, true
	qk := dsref.TinyGLMQKNorm() // tied head, q/k norms, grouped routing
	qk.MTP = true
	for _, c := range []struct {
		name  string
		write func(dir string) error
		load  func(dir string) (mtpRef, error)
		vocab int
	}{
		{"deepseek-v3", ds.Write, func(dir string) (mtpRef, error) { return ds.Load(dir) }, ds.Vocab},
		{"glm-4.5", glm.Write, func(dir string) (mtpRef, error) { return glm.Load(dir) }, glm.Vocab},
		{"glm-4.5-qk-norm-tied", qk.Write, func(dir string) (mtpRef, error) { return qk.Load(dir) }, qk.Vocab},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir, l := lmckpt.WriteLoad(t, c.write)
			if err := l.WithMTP(); err != nil {
				t.Fatal(err)
			}
			rm, err := c.load(dir)
			if err != nil {
				t.Fatal(err)
			}
			r, err := compile.NewRunner(refcheck.CPUBackend(t), l, compile.Options{Mode: compile.Compiled})
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
			text := []int{1, 9, 14, 60, 3, 5, 41, 27, 11, 19, 50}
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
				want := rm.MTPLogits(full)
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
				if ref := rm.MTPDraft(full, k); fmt.Sprint(drafts) != fmt.Sprint(ref) {
					t.Errorf("%s: drafts %v, the reference's %v", step, drafts, ref)
				}
			}
			next := sample.Argmax(rows[0])
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
		})
	}
}
