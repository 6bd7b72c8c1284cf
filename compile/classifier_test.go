package compile

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"

	"github.com/tputool/tputool/internal/errs"
	_ "github.com/tputool/tputool/pipeline/gemma3"
	"github.com/tputool/tputool/pipeline/lm"
	_ "github.com/tputool/tputool/pipeline/mistral"
	_ "github.com/tputool/tputool/pipeline/qwen2"
	_ "github.com/tputool/tputool/pipeline/qwen3"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
	"github.com/tputool/tputool/pipeline/testkit/lmref"
)

// classifierCases are tiny *ForSequenceClassification checkpoints of
// every causal family with a classification head, the features that
// distinguish them on (Qwen3's q/k norms and head_dim, Qwen2's biases,
// Mistral's sliding window shorter than the inputs, Gemma 3's (1+w)
// norms and local layers); one Qwen3 has two labels.
func classifierCases() []lmckpt.Tiny {
	rep := func(v float64, n int) []float64 {
		out := make([]float64, n)
		for i := range out {
			out[i] = v
		}
		return out
	}
	base := lmref.Config{Vocab: 64, Hidden: 32, Intermediate: 48, Layers: 2, Heads: 4, KVHeads: 2, HeadDim: 8, Eps: 1e-6,
		RopeTheta: rep(10000, 2), Window: []int{0, 0}}
	qwen3 := base
	qwen3.QKNorm, qwen3.HeadDim, qwen3.Tied = true, 16, true // Qwen3-Reranker-0.6B ties its embeddings
	qwen2 := base
	qwen2.QKVBias, qwen2.RopeTheta = true, rep(1e6, 2)
	mistral := base
	mistral.KVHeads, mistral.Window = 1, []int{6, 6}
	gemma := base
	gemma.Gemma, gemma.Tied, gemma.HeadDim, gemma.Layers = true, true, 16, 3
	gemma.Window, gemma.RopeTheta = []int{5, 0, 5}, []float64{10000, 1e6, 10000}
	return []lmckpt.Tiny{
		{Arch: "Qwen3ForSequenceClassification", Config: qwen3, Seed: 11, Labels: 1},
		{Arch: "Qwen3ForSequenceClassification", Config: qwen3, Seed: 12, Labels: 2},
		{Arch: "LlamaForSequenceClassification", Config: base, Seed: 13, Labels: 1},
		{Arch: "Qwen2ForSequenceClassification", Config: qwen2, Seed: 14, Labels: 1},
		{Arch: "MistralForSequenceClassification", Config: mistral, Seed: 15, Labels: 1},
		{Arch: "Gemma3TextForSequenceClassification", Config: gemma, Seed: 16, Labels: 1},
	}
}

// classifierPrompts are inputs of unequal lengths (so that left padding
// matters: the last token of each is at a different slot, and the first
// real token too) of random ids of a 64-token vocabulary.
func classifierPrompts() [][]int {
	r := rand.New(rand.NewPCG(5, 6))
	var out [][]int
	for _, n := range []int{5, 11, 1, 23, 8} {
		p := make([]int, n)
		for i := range p {
			p[i] = 3 + r.IntN(61)
		}
		out = append(out, p)
	}
	return out
}

// TestScoreCausalClassifiers: a decoder's *ForSequenceClassification
// gives through Runner.Score, for a batch of inputs of different
// lengths, in both modes and on both CPU backends, the float64
// reference's logits: score.weight times the final normed hidden states
// of each input's last token (lmref.Score, transformers'
// GenericForSequenceClassification on the unpadded input). The same
// logits come from the causal LM of the same weights: its Embed's
// last-token vectors times score.weight. The spec marks the model a
// classifier that does not generate.
func TestScoreCausalClassifiers(t *testing.T) {
	prompts := classifierPrompts()
	for _, tc := range classifierCases() {
		t.Run(fmt.Sprintf("%s/labels%d", tc.Arch, tc.Labels), func(t *testing.T) {
			dir := t.TempDir()
			if err := tc.Write(dir); err != nil {
				t.Fatal(err)
			}
			l := loadDir(t, dir)
			s := l.Model.Spec()
			if !s.Classifier || s.Generates() || s.Encoder || s.TieEmbeddings {
				t.Errorf("spec: Classifier %v, Generates %v, Encoder %v, TieEmbeddings %v; want a classifier that does not generate, no tied head",
					s.Classifier, s.Generates(), s.Encoder, s.TieEmbeddings)
			}
			ref, err := lmref.Load(dir, tc.Config)
			if err != nil {
				t.Fatal(err)
			}
			want := make([][]float64, len(prompts))
			for i, p := range prompts {
				want[i] = ref.Score(p)
			}
			check := func(what string, got [][]float32, tol float64) {
				t.Helper()
				if len(got) != len(prompts) {
					t.Fatalf("%s: %d results for %d inputs", what, len(got), len(prompts))
				}
				for i, g := range got {
					if len(g) != tc.Labels {
						t.Fatalf("%s: input %d: %d scores, want %d", what, i, len(g), tc.Labels)
					}
					for k, v := range g {
						if d := math.Abs(float64(v) - want[i][k]); d > tol*math.Max(1, math.Abs(want[i][k])) {
							t.Errorf("%s: input %d (%d tokens), label %d: %v, want the reference's %v", what, i, len(prompts[i]), k, v, want[i][k])
						}
					}
				}
			}
			for _, be := range []backends.Backend{goBackend(t), cpuBackend(t)} {
				for _, mode := range []Mode{Compiled, Eager} {
					r, err := NewRunner(be, l, Options{Mode: mode})
					if err != nil {
						t.Fatal(err)
					}
					got, err := r.Score(prompts)
					r.Close()
					if err != nil {
						t.Fatalf("%s/%s: %v", be.Name(), mode, err)
					}
					check(fmt.Sprintf("%s/%s", be.Name(), mode), got, 1e-4)
				}
			}
			// bfloat16 compute: the head still reads f32 hidden states.
			r, err := NewRunner(goBackend(t), l, Options{Mode: Compiled, DType: dtypes.BFloat16})
			if err != nil {
				t.Fatal(err)
			}
			got, err := r.Score(prompts)
			r.Close()
			if err != nil {
				t.Fatal(err)
			}
			check("bf16", got, 0.1)

			// The causal LM of the same weights: its last-token vectors
			// (Embed, left-padded) times score.weight.
			causal := tc
			causal.Arch, causal.Labels = lmckpt.CausalArch(tc.Arch), 0
			cdir := t.TempDir()
			if err := causal.Write(cdir); err != nil {
				t.Fatal(err)
			}
			cr, err := NewRunner(goBackend(t), loadDir(t, cdir), Options{Mode: Compiled})
			if err != nil {
				t.Fatal(err)
			}
			defer cr.Close()
			vecs, err := cr.Embed(prompts, PoolLast)
			if err != nil {
				t.Fatal(err)
			}
			score := ref.W["score.weight"]
			h := tc.Config.Hidden
			fromLM := make([][]float32, len(vecs))
			for i, v := range vecs {
				for k := range tc.Labels {
					var dot float64
					for j := range h {
						dot += float64(v[j]) * score[k*h+j]
					}
					fromLM[i] = append(fromLM[i], float32(dot))
				}
			}
			check("causal LM's Embed times score.weight", fromLM, 1e-4)
		})
	}
}

// TestCausalClassifierGeneratesNothing: a causal classifier's Runner
// refuses to generate (its steps, NewBatch: errs.ErrUnsupported saying
// it is a sequence classifier), and NewEncoder serves it for its scores
// only: the engine's Embed gives Runner.Score's logits, its generating
// methods are refused, and without Scores NewEncoder is a usage error.
func TestCausalClassifierGeneratesNothing(t *testing.T) {
	tc := classifierCases()[0]
	dir := t.TempDir()
	if err := tc.Write(dir); err != nil {
		t.Fatal(err)
	}
	l := loadDir(t, dir)
	prompts := classifierPrompts()
	refused := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, errs.ErrUnsupported) || !strings.Contains(err.Error(), "is a sequence classifier (a cross-encoder)") {
			t.Errorf("%s: %v, want ErrUnsupported saying it is a sequence classifier", what, err)
		}
	}
	r, err := NewRunner(goBackend(t), l, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	st := r.NewState()
	_, err = st.Prefill(prompts[:1], 4)
	refused("Prefill", err)
	st.Release()
	want, err := r.Score(prompts)
	if err != nil {
		t.Fatal(err)
	}

	if _, err := NewEncoder(r, EncoderOptions{}); !errors.Is(err, errs.ErrUsage) || !strings.Contains(err.Error(), "Scores") {
		t.Errorf("NewEncoder without Scores: %v, want a usage error naming Scores", err)
	}
	enc, err := NewEncoder(r, EncoderOptions{Scores: true, MaxContext: 64})
	if err != nil {
		t.Fatal(err)
	}
	got, err := enc.Embed(prompts)
	if err != nil {
		t.Fatal(err)
	}
	for i := range want {
		if len(got[i]) != 1 || got[i][0] != want[i][0] {
			t.Errorf("Encoder.Embed input %d: %v, want Runner.Score's %v", i, got[i], want[i])
		}
	}
	_, err = enc.StartPrefill(prompts[:1])
	refused("Encoder.StartPrefill", err)
	_, err = enc.Decode([]int{0}, []int{5})
	refused("Encoder.Decode", err)

	r2, err := NewRunner(goBackend(t), l, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Close()
	_, err = NewBatch(r2, BatchOptions{MaxBatch: 2, MaxContext: 64})
	refused("NewBatch", err)
	if err := GenerateError(r2.Spec()); err == nil {
		t.Error("GenerateError: nil for a classifier")
	}
	if _, ok := l.Model.(lm.Scorer); !ok {
		t.Error("the classifier is not an lm.Scorer")
	}
}

// TestScoreTrailingPad: a causal classifier whose config names a
// pad_token_id pools at each input's last token that is not the pad, as
// GenericForSequenceClassification does: an input ending in pad ids
// scores as the input without them, one of pad ids alone as its first
// token; without pad_token_id the last token is pooled whatever it is.
func TestScoreTrailingPad(t *testing.T) {
	tc := classifierCases()[0]
	dir := t.TempDir()
	if err := tc.Write(dir); err != nil {
		t.Fatal(err)
	}
	ref, err := lmref.Load(dir, tc.Config)
	if err != nil {
		t.Fatal(err)
	}
	const pad = 0 // the prompts' ids start at 3
	prompts := classifierPrompts()
	padded := [][]int{append(slices.Clone(prompts[0]), pad, pad), {pad, pad, pad}, prompts[1], append(slices.Clone(prompts[3]), pad)}
	bare := [][]int{prompts[0], {pad}, prompts[1], prompts[3]}
	score := func(t *testing.T) [][]float32 {
		t.Helper()
		r, err := NewRunner(cpuBackend(t), loadDir(t, dir), Options{Mode: Compiled})
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		got, err := r.Score(padded)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	// Without pad_token_id: the trailing pads are tokens like any other.
	got := score(t)
	if w := ref.Score(padded[0])[0]; math.Abs(float64(got[0][0])-w) > 1e-4*math.Max(1, math.Abs(w)) {
		t.Errorf("no pad_token_id: %v, want the reference's %v on the input as given", got[0][0], w)
	}
	b, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(b, &cfg); err != nil {
		t.Fatal(err)
	}
	cfg["pad_token_id"] = pad
	if b, err = json.Marshal(cfg); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	got = score(t)
	for i, in := range bare {
		w := ref.Score(in)[0]
		if d := math.Abs(float64(got[i][0]) - w); d > 1e-4*math.Max(1, math.Abs(w)) {
			t.Errorf("input %d (%d tokens, %d trailing pads): %v, want the reference's %v without them", i, len(padded[i]), len(padded[i])-len(in), got[i][0], w)
		}
	}
}
