package minimax_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/tputool/tputool/compile"
	"github.com/tputool/tputool/loader/safetensors"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/testkit/dsref"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
	"github.com/tputool/tputool/pipeline/testkit/moecheck"
	"github.com/tputool/tputool/pipeline/testkit/refcheck"
	"github.com/tputool/tputool/tpu"
)

var prompts = [][]int{{1, 7, 21, 33, 4}, {1, 9, 14, 60, 3, 5, 41, 27, 11, 19, 50}}

// TestLogitsMatchReference runs tiny MiniMax-M2s (a quarter of each head
// rotated, the top 2 of 8 experts; and the whole head rotated, the top 3,
// a tied head), in the Hub's layout and in a transformers v5 save's (whose
// logits equal the Hub layout's), on a left-padded batch of two prompts
// plus decode steps, with each experts formulation, compiled and eager, on
// the go and cpu backends (moecheck.Run), against dsref's float64
// MiniMaxM2ForCausalLM.
func TestLogitsMatchReference(t *testing.T) {
	const steps = 6
	const tol = 1e-4
	var hub map[string][]float32 // the Hub layout's logits, which a v5 save's must equal
	for _, c := range []struct {
		name string
		mm   dsref.MiniMax
		v5   bool
	}{{"m2", dsref.TinyMiniMax(), false}, {"whole-rotary", dsref.TinyMiniMaxWholeRotary(), false}, {"m2-v5", dsref.TinyMiniMax(), true}} {
		t.Run(c.name, func(t *testing.T) {
			write := c.mm.Write
			if c.v5 {
				write = func(dir string) error { return writeV5(c.mm, dir) }
			}
			dir, l := lmckpt.WriteLoad(t, write)
			rm, err := c.mm.Load(refDir(t, c.mm, dir, c.v5))
			if err != nil {
				t.Fatal(err)
			}
			got := moecheck.Run(t, "", l, rm, prompts, refcheck.GreedySequences(rm, prompts, steps), steps, tol)
			if c.v5 {
				moecheck.Same(t, "a transformers v5 save", hub, got)
			} else if c.name == "m2" {
				hub = got
			}
		})
	}
}

// refDir is the directory the reference reads: dir itself, or for a v5
// save the Hub-layout checkpoint it was made from (the reference reads the
// Hub's names).
func refDir(t *testing.T, c dsref.MiniMax, dir string, v5 bool) string {
	t.Helper()
	if !v5 {
		return dir
	}
	hub := t.TempDir()
	if err := c.Write(hub); err != nil {
		t.Fatal(err)
	}
	return hub
}

// writeV5 writes c as transformers v5 saves it: the block renamed mlp,
// the correction bias mlp.e_score_correction_bias, and the experts
// stacked (mlp.experts.gate_up_proj [E, 2I, H], each expert's w1 rows
// then its w3 rows; mlp.experts.down_proj [E, H, I], the w2s).
func writeV5(c dsref.MiniMax, dir string) error {
	hub := dir + ".hub"
	if err := c.Write(hub); err != nil {
		return err
	}
	ck, err := safetensors.OpenDir(hub, "")
	if err != nil {
		return err
	}
	defer ck.Close()
	var ts []safetensors.Tensor
	raw := func(n string) []byte {
		b, _ := ck.Raw(n)
		return append([]byte(nil), b...)
	}
	for _, n := range ck.Names() {
		if strings.Contains(n, ".experts.") {
			continue
		}
		info, _ := ck.Info(n)
		ts = append(ts, safetensors.Tensor{Name: strings.Replace(n, ".block_sparse_moe.", ".mlp.", 1), DType: info.DType, Shape: info.Shape, Data: raw(n)})
	}
	for l := 0; l < c.Layers; l++ {
		p := "model.layers." + itoa(l) + ".block_sparse_moe.experts."
		var gateUp, down []byte
		for e := 0; e < c.Experts; e++ {
			gateUp = append(gateUp, raw(p+itoa(e)+".w1.weight")...)
			gateUp = append(gateUp, raw(p+itoa(e)+".w3.weight")...)
			down = append(down, raw(p+itoa(e)+".w2.weight")...)
		}
		v := "model.layers." + itoa(l) + ".mlp.experts."
		ts = append(ts,
			safetensors.Tensor{Name: v + "gate_up_proj", DType: safetensors.F32, Shape: []int{c.Experts, 2 * c.Intermediate, c.Hidden}, Data: gateUp},
			safetensors.Tensor{Name: v + "down_proj", DType: safetensors.F32, Shape: []int{c.Experts, c.Hidden, c.Intermediate}, Data: down})
	}
	cfg, err := lmckpt.ReadConfig(hub)
	if err != nil {
		return err
	}
	return lmckpt.WriteCheckpoint(dir, cfg, ts)
}

func itoa(i int) string { return strconv.Itoa(i) }

// TestSwitchesMatter checks that the comparison above can fail where
// MiniMax-M2 differs from its kin: a reference norming q and k per head,
// rotating whole heads, or without the correction bias gives other
// logits than the model.
func TestSwitchesMatter(t *testing.T) {
	c := dsref.TinyMiniMax()
	dir, l := lmckpt.WriteLoad(t, c.Write)
	prompt := prompts[1]
	got := moecheck.Prefill(t, l, prompt)
	rm, err := c.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	var mutants []refcheck.Mutant
	for _, mutate := range []struct {
		name string
		f    func(c *dsref.MiniMax, m *dsref.MiniMaxModel)
	}{
		{"whole-head rotary", func(c *dsref.MiniMax, _ *dsref.MiniMaxModel) { c.RotaryDim = c.HeadDim }},
		{"no correction bias", func(_ *dsref.MiniMax, m *dsref.MiniMaxModel) {
			for n, v := range m.W {
				if strings.HasSuffix(n, "e_score_correction_bias") {
					m.W[n] = make([]float64, len(v))
				}
			}
		}},
	} {
		mc := c
		mm, err := mc.Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		mutate.f(&mc, mm)
		mm.C = mc
		mutants = append(mutants, refcheck.Mutant{Name: mutate.name, Logits: mm.Logits})
	}
	refcheck.Discriminates(t, got[0], prompt, rm.Logits, 1e-3, mutants...)
}

// TestFP8 loads a block-FP8 copy of the tiny model, as MiniMax's releases
// are stored (every projection and expert F8_E4M3 with
// weight_scale_inv; the router, the bias and the norms plain): on the cpu
// backend the experts stay as stored, and the logits are near the
// original weights' reference.
func TestFP8(t *testing.T) {
	c := dsref.TinyMiniMax()
	src := t.TempDir()
	if err := c.Write(src); err != nil {
		t.Fatal(err)
	}
	rm, err := c.Load(src)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := lmckpt.WriteFP8Copy(src, dir, lmckpt.FP8Options{Block: 8}); err != nil {
		t.Fatal(err)
	}
	l, err := lmckpt.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	be := refcheck.CPUBackend(t)
	r, err := compile.NewRunner(be, l, compile.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if f := l.HeldForm(compile.HoldingOf(tpu.CapabilitiesOf(be), compile.Options{}), "model.layers.1.self_attn.q_proj.weight"); f != lm.FormFP8 {
		t.Errorf("q_proj held as %v, want FP8 as stored", f)
	}
	logits, err := r.NewState().Prefill(prompts, 2)
	if err != nil {
		t.Fatal(err)
	}
	for b, p := range prompts {
		e := refcheck.RelErr(logits[b], rm.Logits(p)[len(p)-1])
		t.Logf("row %d: %.3g from the original weights' reference", b, e)
		if e > 0.1 {
			t.Errorf("row %d: relative error %.3g against the original weights' reference", b, e)
		}
	}
}
