package deepseek_test

import (
	"testing"

	"github.com/tputool/tputool/compile"
	"github.com/tputool/tputool/pipeline/testkit/dsref"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
	"github.com/tputool/tputool/pipeline/testkit/mtpcheck"
	"github.com/tputool/tputool/pipeline/testkit/refcheck"
)

// TestMTPMatchesReference drafts with tiny DeepSeek-V3s' (MLA; and
// DeepSeek-V3.2's, whose head's layer has its indexer) and
// GLM-4.5s' (grouped-query attention) multi-token-prediction heads as a
// State's steps feed them (mtpcheck.Follow): the head's logits must be
// dsref's (vLLM's deepseek_mtp) within 1e-4, and its chained greedy
// drafts the reference's.
func TestMTPMatchesReference(t *testing.T) {
	const tol = 1e-4
	ds, glm := dsref.TinyDeepSeek(), dsref.TinyGLM()
	ds.MTP, glm.MTP = true, true
	qk := dsref.TinyGLMQKNorm() // tied head, q/k norms, grouped routing
	qk.MTP = true
	v32 := dsref.TinyDeepSeekV32() // the head's layer has its indexer too
	v32.MTP = true
	for _, c := range []struct {
		name  string
		write func(dir string) error
		load  func(dir string) (mtpcheck.Ref, error)
	}{
		{"deepseek-v3", ds.Write, func(dir string) (mtpcheck.Ref, error) { return ds.Load(dir) }},
		{"glm-4.5", glm.Write, func(dir string) (mtpcheck.Ref, error) { return glm.Load(dir) }},
		{"glm-4.5-qk-norm-tied", qk.Write, func(dir string) (mtpcheck.Ref, error) { return qk.Load(dir) }},
		{"deepseek-v3.2", v32.Write, func(dir string) (mtpcheck.Ref, error) { return v32.Load(dir) }},
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
			mtpcheck.Follow(t, st, rm, []int{1, 9, 14, 60, 3, 5, 41, 27, 11, 19, 50}, tol)
		})
	}
}
