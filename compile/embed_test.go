package compile

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/tensors"

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/pipeline/lm"
	_ "github.com/tputool/tputool/pipeline/opt" // OPTForCausalLM, for TestEmbedProjectedOut
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
	"github.com/tputool/tputool/pipeline/testkit/optref"
)

// embedPrompts returns prompts of the given lengths of random ids of the
// stories model's vocabulary (512 ids, the first three special).
func embedPrompts(r *rand.Rand, lens ...int) [][]int {
	out := make([][]int, len(lens))
	for i, n := range lens {
		out[i] = make([]int, n)
		for j := range out[i] {
			out[i][j] = 3 + r.IntN(500)
		}
	}
	return out
}

// TestEmbedLastIsWhatTheHeadProjects: the stories model ties its head to
// the embedding matrix E, so the logits that follow a prompt are E times
// its last-token embedding. Embed's vectors, multiplied by E here, must
// give Prefill's logits, in both modes on both CPU backends, for a batch
// of prompts of unequal lengths (left padding).
func TestEmbedLastIsWhatTheHeadProjects(t *testing.T) {
	l, err := lmckpt.Load("../testdata/stories260K-hf")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	prompts := embedPrompts(rand.New(rand.NewPCG(1, 2)), 7, 40, 1)
	for _, be := range []backends.Backend{cpuBackend(t), goBackend(t)} {
		for _, mode := range []Mode{Compiled, Eager} {
			t.Run(fmt.Sprintf("%s/%s", be.Name(), mode), func(t *testing.T) {
				r, err := NewRunner(be, l, Options{Mode: mode})
				if err != nil {
					t.Fatal(err)
				}
				defer r.Close()
				vecs, err := r.Embed(prompts, PoolLast)
				if err != nil {
					t.Fatal(err)
				}
				st := r.NewState()
				defer st.Release()
				logits, err := st.Prefill(prompts, 1)
				if err != nil {
					t.Fatal(err)
				}
				h, v := r.spec.Hidden, r.spec.VocabSize
				if len(vecs) != len(prompts) || len(vecs[0]) != h {
					t.Fatalf("%d vectors of %d, want %d of %d", len(vecs), len(vecs[0]), len(prompts), h)
				}
				var emb []float32
				if err := tensors.ConstFlatData(r.weights["model.embed_tokens.weight"], func(w []float32) { emb = append(emb, w...) }); err != nil {
					t.Fatal(err)
				}
				for i, vec := range vecs {
					worst := 0.0
					for tok := range v {
						var dot float64
						for j := range h {
							dot += float64(vec[j]) * float64(emb[tok*h+j])
						}
						worst = math.Max(worst, math.Abs(dot-float64(logits[i][tok])))
					}
					if worst > 1e-3 {
						t.Errorf("prompt %d (%d tokens): E·embedding differs from the logits by %g", i, len(prompts[i]), worst)
					}
				}
			})
		}
	}
}

// TestEmbedProjectedOut: OPT-350M's final hidden states are the
// decoder's output projected out to word_embed_proj_dim, which the tied
// head multiplies: Embed's vectors are that wide, and times the
// embedding matrix they give Prefill's logits.
func TestEmbedProjectedOut(t *testing.T) {
	c := optref.Tiny350M()
	dir := t.TempDir()
	if err := c.Write(dir); err != nil {
		t.Fatal(err)
	}
	l, err := lmckpt.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if w := lm.FinalWidth(l.Model); w != c.EmbedDim {
		t.Fatalf("FinalWidth %d, want %d", w, c.EmbedDim)
	}
	r, err := NewRunner(cpuBackend(t), l, Options{Mode: Compiled})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	prompts := [][]int{{2, 7, 21, 33, 4}, {2, 9, 14}}
	vecs, err := r.Embed(prompts, PoolLast)
	if err != nil {
		t.Fatal(err)
	}
	st := r.NewState()
	defer st.Release()
	logits, err := st.Prefill(prompts, 1)
	if err != nil {
		t.Fatal(err)
	}
	e := c.EmbedDim
	var emb []float32
	if err := tensors.ConstFlatData(r.weights["model.embed_tokens.weight"], func(w []float32) { emb = append(emb, w...) }); err != nil {
		t.Fatal(err)
	}
	for i, vec := range vecs {
		if len(vec) != e {
			t.Fatalf("vector %d has %d values, want %d", i, len(vec), e)
		}
		worst := 0.0
		for tok := range c.Vocab {
			var dot float64
			for j := range e {
				dot += float64(vec[j]) * float64(emb[tok*e+j])
			}
			worst = math.Max(worst, math.Abs(dot-float64(logits[i][tok])))
		}
		if worst > 1e-3 {
			t.Errorf("prompt %d: E·embedding differs from the logits by %g", i, worst)
		}
	}
}

// TestEmbedMean: a causal model's hidden state at position t is the last
// one of the prompt's first t+1 tokens, so the mean pooling of a prompt
// is the mean of the last-token embeddings of its prefixes. A mean that
// counted the left padding of the shorter prompt, or missed a token,
// fails it.
func TestEmbedMean(t *testing.T) {
	r := storiesRunner(t)
	prompts := embedPrompts(rand.New(rand.NewPCG(3, 4)), 9, 20)
	means, err := r.Embed(prompts, PoolMean)
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range prompts {
		var prefixes [][]int
		for n := 1; n <= len(p); n++ {
			prefixes = append(prefixes, p[:n])
		}
		lasts, err := r.Embed(prefixes, PoolLast)
		if err != nil {
			t.Fatal(err)
		}
		for j := range means[i] {
			var want float64
			for _, v := range lasts {
				want += float64(v[j])
			}
			want /= float64(len(lasts))
			if d := math.Abs(want - float64(means[i][j])); d > 1e-4 {
				t.Fatalf("prompt %d, dimension %d: mean %g, the prefixes' mean %g", i, j, means[i][j], want)
			}
		}
	}
}

// TestEmbedErrors: an empty prompt, one beyond the model's positions and
// an id outside the vocabulary are usage errors naming the problem.
func TestEmbedErrors(t *testing.T) {
	r := storiesRunner(t)
	for _, c := range []struct {
		prompts [][]int
		usage   bool
	}{
		{[][]int{{5}, {}}, true},
		{embedPrompts(rand.New(rand.NewPCG(5, 6)), 513), true},
		{[][]int{{5, 512}}, false},
	} {
		_, err := r.Embed(c.prompts, PoolLast)
		if err == nil {
			t.Fatalf("prompts of %d tokens: no error", len(c.prompts[len(c.prompts)-1]))
		}
		if c.usage != errors.Is(err, errs.ErrUsage) {
			t.Errorf("%v: usage error %v, want %v", err, !c.usage, c.usage)
		}
	}
	if _, err := ParsePooling("max"); err == nil {
		t.Error(`ParsePooling("max"): no error`)
	}
}
