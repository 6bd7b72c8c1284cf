package compile

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gomlx/gomlx/backends"

	_ "github.com/tputool/tputool/pipeline/modernbert" // ModernBertModel, ModernBertForSequenceClassification
	"github.com/tputool/tputool/pipeline/nn"
	"github.com/tputool/tputool/pipeline/testkit/bertref"
	"github.com/tputool/tputool/pipeline/testkit/modernbertref"
)

// modernInputs are random inputs of the given lengths over ids from 4 up
// (none a special token of the tiny configs below).
func modernInputs(seed uint64, vocab int, lens ...int) [][]int {
	r := rand.New(rand.NewPCG(seed, seed+1))
	var out [][]int
	for _, n := range lens {
		p := make([]int, n)
		for i := range p {
			p[i] = 4 + r.IntN(vocab-4)
		}
		out = append(out, p)
	}
	return out
}

// TestEmbedModernBert: ModernBERT encoders, written with transformers'
// tensor names (modernbertref), give through Embed the pooled final
// hidden states of the float64 reference written from
// modeling_modernbert.py, for a batch of inputs of unequal lengths
// (left-padded together: each row's rotary positions, padding mask and
// local window its own), by the mean, the first and the last token, in
// both modes on both CPU backends. The windows (2 on either side) are
// shorter than most inputs, so a local layer's mask, its rotary base and
// which layers are global all show. The configs cover the 4.48 keys and
// transformers 5's layer_types and rope_parameters, biases on and off, a
// masked-LM checkpoint (its encoder under model., its head skipped), a
// null local_rope_theta and another activation. The eager runs attend in
// pieces of 7 queries (nn.EncoderBlock), as a long input does.
func TestEmbedModernBert(t *testing.T) {
	base := modernbertref.Config{Vocab: 64, Hidden: 32, Intermediate: 40, Layers: 4, Heads: 4, MaxPositions: 64,
		LocalAttention: 4, GlobalEvery: 3, PadID: 0, CLSID: 1, SepID: 2}
	withBias := base
	withBias.NormBias, withBias.AttentionBias, withBias.MLPBias = true, true, true
	withBias.NewStyleConfig, withBias.GlobalEvery, withBias.Layers = true, 2, 3
	mlm := base
	mlm.MaskedLM, mlm.LocalThetaNull, mlm.Act, mlm.LocalAttention = true, true, "gelu_pytorch_tanh", 6
	for _, c := range []modernbertref.Config{base, withBias, mlm} {
		dir := t.TempDir()
		if err := modernbertref.Write(dir, c, 9); err != nil {
			t.Fatal(err)
		}
		l := loadDir(t, dir)
		if s := l.Model.Spec(); !s.Encoder || s.MaxPositions != 64 || s.TokenTypes != 0 {
			t.Fatalf("%s: spec %+v: want an encoder of 64 positions without token types", c.Arch(), s)
		}
		prompts := modernInputs(3, c.Vocab, 9, 1, 23, 5)
		want := map[Pooling][][]float64{}
		for _, p := range prompts {
			h, err := modernbertref.Forward(dir, c, p)
			if err != nil {
				t.Fatal(err)
			}
			want[PoolMean] = append(want[PoolMean], bertref.Pool(h, "mean", false))
			want[PoolCLS] = append(want[PoolCLS], bertref.Pool(h, "cls", false))
			want[PoolLast] = append(want[PoolLast], bertref.Pool(h, "last", false))
		}
		for _, be := range []backends.Backend{cpuBackend(t), goBackend(t)} {
			for _, mode := range []Mode{Compiled, Eager} {
				t.Run(fmt.Sprintf("%s/new-style=%v/%s/%s", c.Arch(), c.NewStyleConfig, be.Name(), mode), func(t *testing.T) {
					if mode == Eager {
						// Attention in pieces of 7 queries (nn.EncoderAttention),
						// their windows reaching into the next piece.
						defer func(b int) { nn.EncoderBlock = b }(nn.EncoderBlock)
						nn.EncoderBlock = 7
					}
					run, err := NewRunner(be, l, Options{Mode: mode})
					if err != nil {
						t.Fatal(err)
					}
					defer run.Close()
					checkPoolings(t, run, prompts, want)
				})
			}
		}
	}
}

// TestScoreModernBert: ModernBertForSequenceClassification's scores are
// the reference's for each classifier_pooling (the first token, and the
// mean over each row's own tokens under left padding), with and without
// the head's biases, in both modes on both CPU backends.
func TestScoreModernBert(t *testing.T) {
	for _, c := range []modernbertref.Config{
		{Vocab: 64, Hidden: 32, Intermediate: 40, Layers: 3, Heads: 2, MaxPositions: 48, LocalAttention: 4,
			PadID: 0, CLSID: 1, SepID: 2, Scorer: true, Labels: 1, ClassifierPooling: "mean"},
		{Vocab: 64, Hidden: 32, Intermediate: 40, Layers: 3, Heads: 2, MaxPositions: 48, LocalAttention: 4,
			PadID: 0, CLSID: 1, SepID: 2, Scorer: true, Labels: 3, ClassifierPooling: "cls",
			ClassifierBias: true, NormBias: true, ClassifierAct: "silu", NewStyleConfig: true},
	} {
		dir := t.TempDir()
		if err := modernbertref.Write(dir, c, 13); err != nil {
			t.Fatal(err)
		}
		l := loadDir(t, dir)
		inputs := modernInputs(5, c.Vocab, 12, 1, 30, 7)
		var want [][]float64
		for _, in := range inputs {
			s, err := modernbertref.Score(dir, c, in)
			if err != nil {
				t.Fatal(err)
			}
			want = append(want, s)
		}
		for _, be := range []backends.Backend{cpuBackend(t), goBackend(t)} {
			for _, mode := range []Mode{Compiled, Eager} {
				t.Run(fmt.Sprintf("%s/%s/%s/%s", c.Arch(), c.ClassifierPooling, be.Name(), mode), func(t *testing.T) {
					run, err := NewRunner(be, l, Options{Mode: mode})
					if err != nil {
						t.Fatal(err)
					}
					defer run.Close()
					got, err := run.Score(inputs)
					if err != nil {
						t.Fatal(err)
					}
					for i := range want {
						if len(got[i]) != c.Labels {
							t.Fatalf("input %d: %d scores, want %d", i, len(got[i]), c.Labels)
						}
						for j, x := range got[i] {
							if d := math.Abs(float64(x) - want[i][j]); d > 2e-5 {
								t.Errorf("input %d, label %d: %v, want %v", i, j, x, want[i][j])
							}
						}
					}
				})
			}
		}
	}
}
