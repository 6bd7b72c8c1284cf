package compile

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"

	"github.com/tputool/tputool/internal/errs"
	_ "github.com/tputool/tputool/pipeline/bert" // BertModel, XLMRobertaModel
	"github.com/tputool/tputool/pipeline/nn"
	"github.com/tputool/tputool/pipeline/testkit/bertref"
)

// TestEmbedEncoders: BERT, XLM-RoBERTa and MPNet encoders, written with
// transformers' tensor names, give through Embed the pooled hidden
// states of the float64 reference (bertref: the forwards written from
// modeling_bert.py and modeling_mpnet.py), for a batch of inputs of
// unequal lengths (left-padded together: positions, the padding mask,
// MPNet's relative position bias and the CLS token each row's own), by
// the mean and by the first token, in both modes on both CPU backends.
// The BERT checkpoint is a BertForPreTraining's (its encoder under bert.,
// LayerNorm.gamma and .beta, the pooler, the MLM head and the
// position_ids buffer), one MPNet an MPNetForMaskedLM's with a larger
// bias table than its 32 buckets read; both load as their encoders.
func TestEmbedEncoders(t *testing.T) {
	for _, c := range []bertref.Config{
		{Vocab: 64, Hidden: 32, Layers: 2, Heads: 4, Intermediate: 48, MaxPositions: 40, TypeVocab: 2, Eps: 1e-12,
			Arch: "BertForPreTraining", Prefix: "bert.", GammaBeta: true, Pooler: true, PositionIDs: true, MLMHead: true},
		{Vocab: 64, Hidden: 32, Layers: 3, Heads: 2, Intermediate: 40, MaxPositions: 42, TypeVocab: 1, Eps: 1e-5, Roberta: true},
		{Vocab: 64, Hidden: 32, Layers: 2, Heads: 4, Intermediate: 48, MaxPositions: 42, Eps: 1e-5, MPNet: true},
		{Vocab: 64, Hidden: 32, Layers: 2, Heads: 4, Intermediate: 48, MaxPositions: 42, Eps: 1e-5, MPNet: true,
			Arch: "MPNetForMaskedLM", Prefix: "mpnet.", MLMHead: true, Buckets: 40},
	} {
		l, dir := bertLoaded(t, c, 7)
		if s := l.Model.Spec(); !s.Encoder || s.MaxPositions != 40 {
			t.Fatalf("%s: spec %+v: want an encoder of 40 positions", c.Arch, s)
		}
		// Ids from 5 on: none is a special token, nor XLM-R's pad id (1),
		// which transformers gives the padding position.
		r := rand.New(rand.NewPCG(3, 4))
		var prompts [][]int
		for _, n := range []int{9, 1, 40, 17} {
			p := make([]int, n)
			for i := range p {
				p[i] = 5 + r.IntN(c.Vocab-5)
			}
			prompts = append(prompts, p)
		}
		want := map[Pooling][][]float64{}
		for _, p := range prompts {
			h, err := bertref.Forward(dir, c, p)
			if err != nil {
				t.Fatal(err)
			}
			want[PoolMean] = append(want[PoolMean], bertref.Pool(h, "mean", false))
			want[PoolCLS] = append(want[PoolCLS], bertref.Pool(h, "cls", false))
			want[PoolLast] = append(want[PoolLast], bertref.Pool(h, "last", false))
		}
		for _, be := range []backends.Backend{cpuBackend(t), goBackend(t)} {
			for _, mode := range []Mode{Compiled, Eager} {
				t.Run(fmt.Sprintf("%s/%s/%s", l.Model.Spec().Architecture, be.Name(), mode), func(t *testing.T) {
					if mode == Eager {
						// Attention in pieces of 7 queries (nn.EncoderAttention;
						// MPNet's is whole).
						defer func(b int) { nn.EncoderBlock = b }(nn.EncoderBlock)
						nn.EncoderBlock = 7
					}
					run, err := NewRunner(be, l, Options{Mode: mode})
					if err != nil {
						t.Fatal(err)
					}
					defer run.Close()
					checkPoolings(t, run, prompts, want)
					// One input alone gives the vector it gets among others.
					alone, err := run.Embed(prompts[1:2], PoolCLS)
					if err != nil {
						t.Fatal(err)
					}
					for j, x := range alone[0] {
						if d := math.Abs(float64(x) - want[PoolCLS][1][j]); d > 2e-5 {
							t.Fatalf("alone: value %d differs by %.3g", j, d)
						}
					}
					// An encoder generates nothing.
					st := run.NewState()
					defer st.Release()
					if _, err := st.Prefill(prompts[:1], 1); !errors.Is(err, errs.ErrUnsupported) {
						t.Errorf("Prefill on an encoder: %v, want ErrUnsupported", err)
					}
				})
			}
		}
	}
}

// TestEncoderRefusesBatch: serving (continuous batching) an encoder is
// refused, saying what it is.
func TestEncoderRefusesBatch(t *testing.T) {
	c := bertref.Config{Vocab: 40, Hidden: 16, Layers: 1, Heads: 2, Intermediate: 24, MaxPositions: 16, TypeVocab: 2, Eps: 1e-12}
	l, _ := bertLoaded(t, c, 1)
	r, err := NewRunner(cpuBackend(t), l, Options{Mode: Compiled})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, err := NewBatch(r, BatchOptions{MaxBatch: 2}); !errors.Is(err, errs.ErrUnsupported) {
		t.Fatalf("NewBatch on an encoder: %v, want ErrUnsupported", err)
	}
}

// TestScoreCrossEncoders: a BertForSequenceClassification (pairs with
// token types: the second text's ids carry type 1 as id + VocabSize) and
// an XLMRobertaForSequenceClassification (one type) give through Score
// the reference's classifier logits (bertref.Score, from modeling_bert.py
// and modeling_xlm_roberta.py), for pairs of unequal lengths scored
// together, in both modes on both CPU backends; a model without a head
// is refused.
func TestScoreCrossEncoders(t *testing.T) {
	for _, c := range []bertref.Config{
		{Vocab: 64, Hidden: 32, Layers: 2, Heads: 4, Intermediate: 48, MaxPositions: 40, TypeVocab: 2, Eps: 1e-12, Labels: 1, Prefix: "bert."},
		{Vocab: 64, Hidden: 32, Layers: 2, Heads: 2, Intermediate: 40, MaxPositions: 42, TypeVocab: 1, Eps: 1e-5, Roberta: true, Labels: 3, Prefix: "roberta."},
	} {
		l, dir := bertLoaded(t, c, 21)
		r := rand.New(rand.NewPCG(5, 6))
		var inputs [][]int
		var want [][]float64
		for _, n := range [][2]int{{3, 9}, {1, 1}, {12, 20}, {5, 2}} {
			ids, types := make([]int, 0, n[0]+n[1]), make([]int, 0, n[0]+n[1])
			for part, k := range n {
				for range k {
					ids = append(ids, 5+r.IntN(c.Vocab-5))
					if c.TypeVocab > 1 {
						types = append(types, part)
					} else {
						types = append(types, 0)
					}
				}
			}
			in := make([]int, len(ids))
			for i, id := range ids {
				in[i] = id + types[i]*c.Vocab
			}
			s, err := bertref.Score(dir, c, ids, types)
			if err != nil {
				t.Fatal(err)
			}
			inputs, want = append(inputs, in), append(want, s)
		}
		for _, be := range []backends.Backend{cpuBackend(t), goBackend(t)} {
			for _, mode := range []Mode{Compiled, Eager} {
				t.Run(fmt.Sprintf("%s/%s/%s", l.Model.Spec().Architecture, be.Name(), mode), func(t *testing.T) {
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
	// An encoder without a classifier has no scores.
	l, _ := bertLoaded(t, bertref.Config{Vocab: 40, Hidden: 16, Layers: 1, Heads: 2, Intermediate: 24, MaxPositions: 16, TypeVocab: 2, Eps: 1e-12}, 1)
	run, err := NewRunner(cpuBackend(t), l, Options{Mode: Compiled})
	if err != nil {
		t.Fatal(err)
	}
	defer run.Close()
	if _, err := run.Score([][]int{{5, 6}}); !errors.Is(err, errs.ErrUnsupported) {
		t.Errorf("Score without a classifier: %v, want ErrUnsupported", err)
	}
}

// TestScoreBF16: under bf16 compute the classifier head still runs in
// f32: the scores are near the f32 reference (the encoder's bf16 costs
// what it costs) and are not all on bf16's grid, as a head in bf16 would
// leave them (steps of 1/16 around the ms-marco models' 8 to 16).
func TestScoreBF16(t *testing.T) {
	c := bertref.Config{Vocab: 64, Hidden: 32, Layers: 2, Heads: 4, Intermediate: 48, MaxPositions: 40, TypeVocab: 2, Eps: 1e-12, Labels: 1, Prefix: "bert."}
	l, dir := bertLoaded(t, c, 21)
	r := rand.New(rand.NewPCG(9, 10))
	var inputs [][]int
	var want []float64
	for n := 2; n < 12; n++ {
		ids, types := make([]int, n), make([]int, n)
		in := make([]int, n)
		for i := range ids {
			ids[i] = 5 + r.IntN(c.Vocab-5)
			if i > n/2 {
				types[i] = 1
			}
			in[i] = ids[i] + types[i]*c.Vocab
		}
		s, err := bertref.Score(dir, c, ids, types)
		if err != nil {
			t.Fatal(err)
		}
		inputs, want = append(inputs, in), append(want, s[0])
	}
	run, err := NewRunner(cpuBackend(t), l, Options{Mode: Compiled, DType: dtypes.BFloat16})
	if err != nil {
		t.Fatal(err)
	}
	defer run.Close()
	got, err := run.Score(inputs)
	if err != nil {
		t.Fatal(err)
	}
	offGrid := 0
	for i, g := range got {
		if d := math.Abs(float64(g[0]) - want[i]); d > 0.1 {
			t.Errorf("input %d: %v, want about %v (bf16 encoder)", i, g[0], want[i])
		}
		if math.Float32bits(g[0])&0xFFFF != 0 {
			offGrid++
		}
	}
	if offGrid == 0 {
		t.Errorf("every score is a bf16 value: the head ran in bf16")
	}
}

// TestEncoderRowsSplit: inputs whose attention scores exceed the budget
// run fewer at a time, and give the vectors they give together.
func TestEncoderRowsSplit(t *testing.T) {
	c := bertref.Config{Vocab: 64, Hidden: 32, Layers: 2, Heads: 4, Intermediate: 48, MaxPositions: 40, TypeVocab: 2, Eps: 1e-12}
	l, _ := bertLoaded(t, c, 3)
	run, err := NewRunner(cpuBackend(t), l, Options{Mode: Compiled})
	if err != nil {
		t.Fatal(err)
	}
	defer run.Close()
	r := rand.New(rand.NewPCG(1, 1))
	var prompts [][]int
	for _, n := range []int{30, 7, 25, 12, 3} {
		p := make([]int, n)
		for i := range p {
			p[i] = 5 + r.IntN(59)
		}
		prompts = append(prompts, p)
	}
	whole, err := run.Embed(prompts, PoolMean)
	if err != nil {
		t.Fatal(err)
	}
	old := encoderScoreBudget
	encoderScoreBudget = 2 * 4 * 30 * 30 * 4 // two rows of the longest
	defer func() { encoderScoreBudget = old }()
	if got := run.encoderRows(prompts); got != 2 {
		t.Fatalf("encoderRows = %d, want 2", got)
	}
	split, err := run.Embed(prompts, PoolMean)
	if err != nil {
		t.Fatal(err)
	}
	for i := range whole {
		for j := range whole[i] {
			if d := math.Abs(float64(whole[i][j] - split[i][j])); d > 1e-5 {
				t.Fatalf("input %d value %d: %v split, %v together", i, j, split[i][j], whole[i][j])
			}
		}
	}
	// Attention in pieces of 10 queries holds a piece's scores at a time:
	// three rows of the longest fit where two whole ones did.
	defer func(b int) { nn.EncoderBlock = b }(nn.EncoderBlock)
	nn.EncoderBlock = 10
	if got, want := EncoderScoreBytes(l.Model.Spec(), 1, 30), int64(4*10*30*4); got != want {
		t.Errorf("EncoderScoreBytes(1 row of 30) = %d, want %d", got, want)
	}
	if got := run.encoderRows(prompts); got != 5 {
		t.Errorf("encoderRows in pieces = %d, want all 5", got)
	}
}

// checkPoolings: run's embeddings of prompts pooled by the mean, the
// first and the last token are within 2e-5 of want's, each pooling's
// reference vectors (the final hidden states are LayerNorm outputs, of
// size about 1: f32 against float64).
func checkPoolings(t *testing.T, run *Runner, prompts [][]int, want map[Pooling][][]float64) {
	t.Helper()
	for _, pool := range []Pooling{PoolMean, PoolCLS, PoolLast} {
		got, err := run.Embed(prompts, pool)
		if err != nil {
			t.Fatal(err)
		}
		var worst float64
		for i := range prompts {
			for j, x := range got[i] {
				worst = max(worst, math.Abs(float64(x)-want[pool][i][j]))
			}
		}
		if worst > 2e-5 {
			t.Errorf("%s pooling: largest difference from the reference %.3g, want <= 2e-5", pool, worst)
		}
	}
}
