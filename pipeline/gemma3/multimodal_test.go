package gemma3_test

import (
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tputool/tputool/compile"
	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/loader/safetensors"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
	"github.com/tputool/tputool/pipeline/testkit/refcheck"
)

// tiny is a small Gemma3ForCausalLM with local and global layers, a window
// shorter than the prompt and attention soft-capping; its logits match
// transformers' code in pipeline/testkit/lmref.
func tiny(tied bool) lmckpt.Tiny {
	c := lmckpt.Config{Vocab: 64, Hidden: 32, Intermediate: 48, Layers: 4, Heads: 4, KVHeads: 2, HeadDim: 16, Eps: 1e-6, Gemma: true, Tied: tied}
	c.Window = []int{4, 4, 0, 4}
	c.RopeTheta = []float64{10000, 10000, 1e6, 10000}
	c.QueryScale = 1 / math.Sqrt(24)
	c.AttnSoftcap = 20
	return lmckpt.Tiny{Arch: "Gemma3ForCausalLM", Config: c, Seed: 11}
}

var prompt = []int{2, 9, 14, 60, 3, 5, 41, 27, 11}

// logits loads the checkpoint in dir and returns its prefill logits for
// prompt and those of two decode steps, and the tensors it skipped.
func logits(t *testing.T, dir string) ([][]float32, []lm.SkippedGroup) {
	t.Helper()
	l, err := lmckpt.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	r, err := compile.NewRunner(refcheck.GoBackend(t), l, compile.Options{Mode: compile.Compiled})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	st := r.NewState()
	first, err := st.Prefill([][]int{prompt}, 2)
	if err != nil {
		t.Fatal(err)
	}
	out := [][]float32{first[0]}
	for _, tok := range []int{17, 33} {
		next, err := st.Decode([]int{tok})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, next[0])
	}
	return out, l.Skipped()
}

// TestConditionalGenerationMatchesCausalLM writes one tiny Gemma 3 text
// model as Gemma3ForCausalLM and as Gemma3ForConditionalGeneration in both
// layouts real checkpoints use (the first uploads' language_model.model.*
// and transformers' later model.language_model.*), tied and untied, each
// with vision-tower and projector tensors, and checks that the multimodal
// class's logits are exactly the causal LM's and that it skips the five
// vision tensors. The untied original-layout one also says
// final_logit_softcapping 30 in its text_config, which
// Gemma3ForConditionalGeneration does not apply.
func TestConditionalGenerationMatchesCausalLM(t *testing.T) {
	for _, tied := range []bool{true, false} {
		causal := tiny(tied)
		dir := t.TempDir()
		if err := causal.Write(dir); err != nil {
			t.Fatal(err)
		}
		want, skipped := logits(t, dir)
		if len(want) != 3 || len(want[0]) != causal.Config.Vocab {
			t.Fatalf("causal LM logits %d x %d", len(want), len(want[0]))
		}
		if len(skipped) != 0 {
			t.Fatalf("causal LM skipped %v", skipped)
		}
		for _, layout := range []lmckpt.Gemma3Layout{lmckpt.Gemma3Original, lmckpt.Gemma3Saved} {
			t.Run(fmt.Sprintf("%s/tied=%v", layout, tied), func(t *testing.T) {
				mm := tiny(tied)
				if layout == lmckpt.Gemma3Original && !tied {
					mm.Config.FinalSoftcap = 30
				}
				cfg, ts, err := mm.Gemma3Multimodal(layout)
				if err != nil {
					t.Fatal(err)
				}
				var names []string
				for _, x := range ts {
					names = append(names, x.Name)
				}
				head := "lm_head.weight"
				if layout == lmckpt.Gemma3Original {
					head = "language_model.lm_head.weight"
				}
				if !slices.Contains(names, "vision_tower.vision_model.post_layernorm.weight") && !slices.Contains(names, "model.vision_tower.vision_model.post_layernorm.weight") ||
					slices.Contains(names, head) == tied {
					t.Fatalf("tensors %v", names)
				}
				dir := t.TempDir()
				if err := lmckpt.WriteCheckpoint(dir, cfg, ts); err != nil {
					t.Fatal(err)
				}
				// inspect checks the stored names with lm.Expect.
				mc, err := config.ReadModel(filepath.Join(dir, "config.json"))
				if err != nil {
					t.Fatal(err)
				}
				m, err := lm.New(mc)
				if err != nil {
					t.Fatal(err)
				}
				ck, err := safetensors.OpenDir(dir, "")
				if err != nil {
					t.Fatal(err)
				}
				defer ck.Close()
				if p := lm.Expect(m, ck).Problems(); len(p) != 0 {
					t.Errorf("lm.Expect on the stored names: %v", p)
				}
				got, skipped := logits(t, dir)
				for i := range want {
					if !slices.Equal(got[i], want[i]) {
						t.Fatalf("step %d: logits differ from Gemma3ForCausalLM's (relative error %.3g)", i, relErr(got[i], want[i]))
					}
				}
				if len(skipped) != 1 || skipped[0].Tensors != 5 || !strings.Contains(skipped[0].Reason, "vision tower") {
					t.Errorf("skipped %+v, want the 5 vision-tower and projector tensors", skipped)
				}
			})
		}
	}
}

func relErr(a, b []float32) float64 {
	w := make([]float64, len(b))
	for i, v := range b {
		w[i] = float64(v)
	}
	return refcheck.RelErr(a, w)
}

// TestConditionalGenerationMissingTensor: a Gemma3ForConditionalGeneration
// checkpoint without one of its text model's tensors does not load, and
// the error names the tensor (as transformers reads it), in both layouts;
// lm.Expect, what inspect runs on the stored names, names it too.
func TestConditionalGenerationMissingTensor(t *testing.T) {
	const missing = "model.language_model.layers.2.mlp.up_proj.weight"
	for _, layout := range []lmckpt.Gemma3Layout{lmckpt.Gemma3Original, lmckpt.Gemma3Saved} {
		t.Run(layout.String(), func(t *testing.T) {
			cfg, ts, err := tiny(true).Gemma3Multimodal(layout)
			if err != nil {
				t.Fatal(err)
			}
			stored := missing
			if layout == lmckpt.Gemma3Original {
				stored = "language_model.model.layers.2.mlp.up_proj.weight"
			}
			n := len(ts)
			ts = slices.DeleteFunc(ts, func(x safetensors.Tensor) bool { return x.Name == stored })
			if len(ts) != n-1 {
				t.Fatalf("no tensor %s to drop", stored)
			}
			dir := t.TempDir()
			if err := lmckpt.WriteCheckpoint(dir, cfg, ts); err != nil {
				t.Fatal(err)
			}
			_, err = lmckpt.Load(dir)
			if err == nil || !errors.Is(err, errs.ErrUnsupported) || !strings.Contains(err.Error(), missing) {
				t.Fatalf("load without %s: %v", stored, err)
			}
			t.Log(err)
			if strings.Contains(err.Error(), "unused") {
				t.Errorf("a renamed or skipped tensor reported unused: %v", err)
			}
		})
	}
}
