package qwen35_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/tputool/tputool/compile"
	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
	"github.com/tputool/tputool/pipeline/testkit/mtpcheck"
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
			h, text, next := mtpcheck.Follow(t, st, rm, []int{1, 9, 14, 60, 3, 5, 41, 27, 11, 19, 50}, tol)

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
