package qwen35_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/tputool/tputool/compile"
	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/pipeline/sample"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
	"github.com/tputool/tputool/pipeline/testkit/qwenref"
	"github.com/tputool/tputool/pipeline/testkit/refcheck"
)

// TestMTPMatchesReference drafts with the tiny Qwen3.5's
// multi-token-prediction head (multimodal, text-only with a tied head,
// and MoE with stacked experts) as a State's steps feed it: after a
// prefill, after a several-token step of which the last token is taken
// back (Qwen3.5's replay), and after a one-token step, each time over
// chained slots a draft left. The head's logits for the token after the
// newest must be the float64 reference's over the whole text, and its
// chained greedy drafts the reference's.
func TestMTPMatchesReference(t *testing.T) {
	const tol = 1e-4
	tied := qwenref.TinyQwen35()
	tied.CausalLM, tied.Tied, tied.Seed = true, true, 7
	moe := qwenref.TinyQwen35MoE()
	moe.Stacked = true
	next := qwenref.TinyQwen3Next()
	next.MLPOnly = []int{0} // the head's layer is dense, as layer 0 is
	for name, c := range map[string]qwenref.Qwen35{"ConditionalGeneration": qwenref.TinyQwen35(), "CausalLM-tied": tied, "MoE": moe,
		"Qwen3-Next-dense-0": next} {
		t.Run(name, func(t *testing.T) {
			c.MTP = true
			dir, l := lmckpt.WriteLoad(t, c.Write)
			if err := l.WithMTP(); err != nil {
				t.Fatal(err)
			}
			rm, err := qwenref.LoadQwen35(dir, c)
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

			// A step that feeds another token than the one the draft began
			// after leaves the head out of step: it drafts no more.
			if _, err := st.Decode([]int{(next + 1) % c.Vocab}); err != nil {
				t.Fatal(err)
			}
			if l, err := h.Draft(7); err != nil || l != nil {
				t.Errorf("a draft after a step it did not begin: %d logits, %v; want none", len(l), err)
			}

			// The test sees the order of the head's two inputs: with fc's
			// halves swapped the reference is far off.
			fc := rm.W["mtp.fc.weight"]
			hd := c.Hidden
			for row := 0; row < hd; row++ {
				a, b := fc[row*2*hd:row*2*hd+hd], fc[row*2*hd+hd:(row+1)*2*hd]
				for i := range a {
					a[i], b[i] = b[i], a[i]
				}
			}
			swapped := rm.MTPLogits(append(slices.Clone(text), 4))
			if st2, err := runOnce(r, append(slices.Clone(text), 4)); err != nil {
				t.Fatal(err)
			} else if e := refcheck.RelErr(st2, swapped[len(swapped)-1]); e <= tol {
				t.Errorf("the head matches a reference with its inputs swapped (%.3g)", e)
			}
		})
	}
}

// runOnce is the head's logits for the token after text's last, from a
// fresh State prefilled with the rest.
func runOnce(r *compile.Runner, text []int) ([]float32, error) {
	st := r.NewState()
	defer st.Release()
	h, err := st.MTP()
	if err != nil {
		return nil, err
	}
	if _, err := st.Prefill([][]int{text[:len(text)-1]}, 8); err != nil {
		return nil, err
	}
	return h.Draft(text[len(text)-1])
}

// TestMTPRefused: a checkpoint whose head is incomplete (the multimodal
// layout's three stand-ins) is refused, naming what it lacks; the go
// backend (no in-place cache writes) cannot draft with a whole one.
func TestMTPRefused(t *testing.T) {
	c := qwenref.TinyQwen35()
	_, l := lmckpt.WriteLoad(t, c.Write)
	if err := l.WithMTP(); !errors.Is(err, errs.ErrUnsupported) || !strings.Contains(err.Error(), "mtp.pre_fc_norm_embedding.weight") {
		t.Errorf("a head of stand-ins: %v, want unsupported, naming the missing tensors", err)
	}

	c.MTP = true
	_, l = lmckpt.WriteLoad(t, c.Write)
	if err := l.WithMTP(); err != nil {
		t.Fatal(err)
	}
	r, err := compile.NewRunner(refcheck.GoBackend(t), l, compile.Options{Mode: compile.Compiled})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, err := r.NewState().MTP(); !errors.Is(err, errs.ErrUnsupported) {
		t.Errorf("on the go backend: %v, want unsupported", err)
	}
}
