package compile

import (
	"slices"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"

	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
	"github.com/tputool/tputool/pipeline/testkit/qwenref"
	"github.com/tputool/tputool/pipeline/testkit/refcheck"
)

// mtpRunner is a compiled runner of the tiny Qwen3.5 with a random
// multi-token-prediction head (closed when the test ends), and the
// float64 reference of its checkpoint.
func mtpRunner(t *testing.T, o Options) (*Runner, *qwenref.Qwen35Model) {
	t.Helper()
	c := qwenref.TinyQwen35()
	c.MTP = true
	dir, l := lmckpt.WriteLoad(t, c.Write)
	if err := l.WithMTP(); err != nil {
		t.Fatal(err)
	}
	rm, err := qwenref.LoadQwen35(dir, c)
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewRunner(cpuBackend(t), l, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return r, rm
}

// TestMTPStateBytes: lm.MTPStateBytes, which the commands' memory
// checks add for --mtp, is what the head's cache holds once it has grown
// past its first bucket, its KV caches in the compute dtype or in int8
// with their scales; a model read without its head has none.
func TestMTPStateBytes(t *testing.T) {
	for _, kv := range []dtypes.DType{dtypes.InvalidDType, dtypes.Int8} {
		r, _ := mtpRunner(t, Options{Mode: Compiled, KVDType: kv})
		st := r.NewState()
		h, err := st.MTP()
		if err != nil {
			t.Fatal(err)
		}
		prompt := make([]int, 40)
		for i := range prompt {
			prompt[i] = 1 + i%50
		}
		if _, err := st.Prefill([][]int{prompt}, 64); err != nil {
			t.Fatal(err)
		}
		if got, err := h.Draft(7); err != nil || got == nil {
			t.Fatalf("kv %s: draft: %v, %d logits", kv, err, len(got))
		}
		var held int64
		for _, x := range h.state {
			held += int64(x.Memory())
		}
		n, ok := lm.MTPStateBytes(r.model, h.cacheLen, dtypes.Float32, kv)
		if h.cacheLen <= 32 || held == 0 || !ok || n != held {
			t.Errorf("kv %s: lm.MTPStateBytes %d (ok %v) at %d slots, the head's cache holds %d", kv, n, ok, h.cacheLen, held)
		}
		st.Release()
	}
	l := loadDir(t, "../testdata/stories260K-hf")
	if n, ok := lm.MTPStateBytes(l.Model, 64, dtypes.Float32, dtypes.InvalidDType); n != 0 || !ok {
		t.Errorf("a model without a head: lm.MTPStateBytes %d (ok %v), want 0", n, ok)
	}
}

// TestMTPCold: a head begun cold at a position (serve's lone sequence,
// BatchMTP) drafts as the float64 reference's head whose attention
// begins there, the model's hidden states those of the whole text; a
// head begun at the text's start would differ.
func TestMTPCold(t *testing.T) {
	r, rm := mtpRunner(t, Options{Mode: Compiled})
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

// TestBatchMTP drives a decode batch's head (serve's lone sequence)
// through serve.Slots, with a random head whose drafts depend on what
// its cache holds: a prompt prefilled alone into an empty batch brings
// the head that followed its prefill, which drafts as the float64
// reference's head over the whole text (at once, after one-token steps,
// and after a several-token step taken back by one); it is set aside
// while a second sequence shares the batch, and begins cold where the
// sequence runs alone after it, drafting as the reference's head begun
// there.
func TestBatchMTP(t *testing.T) {
	r, rm := mtpRunner(t, Options{Mode: Compiled})
	eng, err := NewBatch(r, BatchOptions{MaxBatch: 2, MaxContext: 128, PrefillChunk: 16, Speculate: 2, MTP: true})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	h, err := eng.MTP()
	if err != nil {
		t.Fatal(err)
	}
	b := slotsOf(t, eng)
	insert := func(prompt []int) int {
		t.Helper()
		pre, err := b.StartPrefill([][]int{prompt})
		if err != nil {
			t.Fatal(err)
		}
		for done := false; !done; {
			if _, done, err = pre.Step(); err != nil {
				t.Fatal(err)
			}
		}
		seq, err := b.Insert(pre, 0)
		if err != nil {
			t.Fatal(err)
		}
		pre.Close()
		return seq
	}
	text := []int{1, 9, 14, 60, 3, 5, 41, 27, 11}
	a := insert(text)
	decode := func(ids ...int) {
		t.Helper()
		for _, id := range ids {
			if _, err := b.Decode([]int{a}, []int{id}); err != nil {
				t.Fatal(err)
			}
			text = append(text, id)
		}
	}
	// check drafts after next and compares with the reference's head
	// begun at from.
	check := func(what string, next, from int) {
		t.Helper()
		got, err := h.Draft(next)
		if err != nil || got == nil {
			t.Fatalf("%s: draft: %v, %d logits", what, err, len(got))
		}
		want := rm.MTPLogitsFrom(append(slices.Clone(text), next), from)
		if e := refcheck.RelErr(got, want[len(want)-1]); e > 1e-4 {
			t.Errorf("%s: the head's logits are %.3g off the reference's", what, e)
		}
	}
	check("after the prompt", 33, 0)
	decode(33, 7, 50)
	check("after one-token steps", 21, 0)
	if _, err := b.DecodeMany(a, []int{21, 8, 16}); err != nil {
		t.Fatal(err)
	}
	if err := b.Rewind(1); err != nil {
		t.Fatal(err)
	}
	text = append(text, 21, 8)
	check("after a step taken back by one", 44, 0)

	// A second sequence shares the batch, then leaves.
	o := insert([]int{1, 70, 71, 72})
	for i, id := range []int{44, 12, 13} {
		if _, err := b.Decode([]int{a, o}, []int{id, 80 + i}); err != nil {
			t.Fatal(err)
		}
		text = append(text, id)
	}
	b.Free(o)
	decode(19)
	if l, err := h.Draft(25); err != nil || l != nil {
		t.Fatalf("the first draft alone again: %d logits, %v; want none (the head begins cold)", len(l), err)
	}
	from := len(text)
	decode(25, 26)
	check("alone again", 27, from)
}
