package bertref

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/tputool/tputool/loader/safetensors"
	"github.com/tputool/tputool/loader/tokenizer"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
)

var tiny = Config{Vocab: 64, Hidden: 32, Layers: 2, Heads: 4, Intermediate: 48, MaxPositions: 40, TypeVocab: 2, Eps: 1e-12}

func near(a, b, tol float64) bool { return math.Abs(a-b) <= tol*(1+math.Abs(b)) }

func sameRows(a, b []float64, tol float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !near(a[i], b[i], tol) {
			return false
		}
	}
	return true
}

func mustWrite(t *testing.T, c Config, seed uint64) string {
	t.Helper()
	dir := t.TempDir()
	if err := Write(dir, c, seed); err != nil {
		t.Fatal(err)
	}
	return dir
}

func mustRead(t *testing.T, dir string) map[string][]float64 {
	t.Helper()
	w, err := lmckpt.ReadFloat64(dir)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func cloneWeights(w map[string][]float64) map[string][]float64 {
	out := make(map[string][]float64, len(w))
	for k, v := range w {
		out[k] = append([]float64(nil), v...)
	}
	return out
}

func TestForwardTiny(t *testing.T) {
	dir := mustWrite(t, tiny, 7)
	ids := []int{2, 10, 11, 10, 12, 10, 3}
	h, err := Forward(dir, tiny, ids)
	if err != nil {
		t.Fatal(err)
	}
	if len(h) != len(ids) {
		t.Fatalf("%d rows, want %d", len(h), len(ids))
	}
	maxAbs := 0.0
	for i, row := range h {
		if len(row) != tiny.Hidden {
			t.Fatalf("row %d has %d values", i, len(row))
		}
		for _, v := range row {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				t.Fatalf("row %d is not finite: %v", i, row)
			}
			maxAbs = math.Max(maxAbs, math.Abs(v))
		}
	}
	if maxAbs < 0.5 {
		t.Errorf("outputs are tiny (max |h| = %g)", maxAbs)
	}
	// Id 10 at positions 1, 3 and 5 gives three different rows.
	for _, p := range [][2]int{{1, 3}, {3, 5}, {1, 5}} {
		if sameRows(h[p[0]], h[p[1]], 1e-6) {
			t.Errorf("rows %d and %d (same id) are equal", p[0], p[1])
		}
	}
	// Deterministic: the same seed gives the same outputs, another seed not.
	h2, err := Forward(mustWrite(t, tiny, 7), tiny, ids)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(h, h2) {
		t.Error("same seed, different outputs")
	}
	h3, err := Forward(mustWrite(t, tiny, 8), tiny, ids)
	if err != nil {
		t.Fatal(err)
	}
	if sameRows(h[0], h3[0], 1e-6) {
		t.Error("another seed gives the same outputs")
	}
	// Bidirectional: changing the last id changes the first row.
	ids2 := append([]int(nil), ids...)
	ids2[len(ids2)-1] = 20
	h4, err := Forward(dir, tiny, ids2)
	if err != nil {
		t.Fatal(err)
	}
	if sameRows(h[0], h4[0], 1e-9) {
		t.Error("the first row does not depend on the last token")
	}
}

// With every position row equal, the encoder is permutation-equivariant:
// permuting the ids permutes the output rows.
func TestPermutationEquivariance(t *testing.T) {
	w := cloneWeights(mustRead(t, mustWrite(t, tiny, 3)))
	pe := w["embeddings.position_embeddings.weight"]
	H := tiny.Hidden
	for p := 1; p < tiny.MaxPositions; p++ {
		copy(pe[p*H:(p+1)*H], pe[:H])
	}
	ids := []int{5, 9, 13, 21, 9, 40}
	perm := []int{3, 0, 5, 1, 4, 2}
	pids := make([]int, len(ids))
	for i, j := range perm {
		pids[i] = ids[j]
	}
	h, err := forward(w, tiny, ids)
	if err != nil {
		t.Fatal(err)
	}
	hp, err := forward(w, tiny, pids)
	if err != nil {
		t.Fatal(err)
	}
	for i, j := range perm {
		if !sameRows(hp[i], h[j], 1e-12) {
			t.Fatalf("permuted row %d != row %d", i, j)
		}
	}
	// Equal ids now give equal rows (positions 1 and 4 both hold id 9).
	if !sameRows(h[1], h[4], 1e-12) {
		t.Error("equal ids without positions give different rows")
	}
}

// The optional tensors and the name variants do not change the encoder's
// weights or outputs for a seed.
func TestLayoutVariantsSameOutputs(t *testing.T) {
	ids := []int{2, 17, 33, 8, 3}
	for _, roberta := range []bool{false, true} {
		base := tiny
		base.Roberta = roberta
		if roberta {
			base.MaxPositions, base.TypeVocab, base.Eps = 42, 1, 1e-5
		}
		want, err := Forward(mustWrite(t, base, 11), base, ids)
		if err != nil {
			t.Fatal(err)
		}
		v := base
		v.Prefix, v.GammaBeta, v.Pooler, v.PositionIDs, v.MLMHead = "bert.", true, true, true, true
		v.Arch = "BertForMaskedLM"
		if roberta {
			v.Prefix, v.Arch = "roberta.", "XLMRobertaForMaskedLM"
		}
		got, err := Forward(mustWrite(t, v, 11), v, ids)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("roberta=%v: the variant layout changes the outputs", roberta)
		}
		// Reading with the wrong names fails clearly.
		if _, err := Forward(mustWrite(t, v, 11), base, ids); err == nil || !strings.Contains(err.Error(), "no tensor") {
			t.Errorf("roberta=%v: reading a prefixed checkpoint without Prefix: err = %v", roberta, err)
		}
	}
}

// Hand arithmetic for the embeddings LayerNorm (Layers 0 returns it).
func TestEmbeddingLayerNormByHand(t *testing.T) {
	c := Config{Vocab: 8, Hidden: 4, Layers: 0, Heads: 1, Intermediate: 4, MaxPositions: 4, TypeVocab: 2, Eps: 1e-12}
	w := map[string][]float64{
		"embeddings.word_embeddings.weight":       make([]float64, 8*4),
		"embeddings.position_embeddings.weight":   make([]float64, 4*4),
		"embeddings.token_type_embeddings.weight": {0, 0, 0, 1, 100, 100, 100, 100},
		"embeddings.LayerNorm.weight":             {1, 2, 1, 1},
		"embeddings.LayerNorm.bias":               {0, 0, 0, 0.5},
	}
	copy(w["embeddings.word_embeddings.weight"][3*4:], []float64{1, 2, 3, 4})
	copy(w["embeddings.position_embeddings.weight"][0:], []float64{0.5, -0.5, 0, 0})
	h, err := forward(w, c, []int{3, 3})
	if err != nil {
		t.Fatal(err)
	}
	// t=0: e = [1,2,3,4]+[.5,-.5,0,0]+[0,0,0,1] = [1.5,1.5,3,5], mean 2.75,
	// deviations [-1.25,-1.25,.25,2.25], variance 8.25/4 = 2.0625.
	s0 := math.Sqrt(2.0625)
	want0 := []float64{-1.25 / s0, 2 * -1.25 / s0, 0.25 / s0, 2.25/s0 + 0.5}
	// t=1: e = [1,2,3,5], mean 2.75, deviations [-1.75,-.75,.25,2.25],
	// variance 8.75/4 = 2.1875.
	s1 := math.Sqrt(2.1875)
	want1 := []float64{-1.75 / s1, 2 * -0.75 / s1, 0.25 / s1, 2.25/s1 + 0.5}
	if !sameRows(h[0], want0, 1e-10) || !sameRows(h[1], want1, 1e-10) {
		t.Fatalf("got %v, want %v and %v", h, want0, want1)
	}
	// eps sits inside the square root.
	c.Eps = 0.25
	h, err = forward(w, c, []int{3})
	if err != nil {
		t.Fatal(err)
	}
	if s := math.Sqrt(2.0625 + 0.25); !near(h[0][0], -1.25/s, 1e-12) {
		t.Errorf("eps 0.25: got %v, want %v", h[0][0], -1.25/s)
	}
}

// A layer with zero query/key weights attends uniformly; with identity
// value and output projections, unit LayerNorms and a zero MLP the result
// is LayerNorm(x_t + mean_s x_s).
func TestUniformAttentionByHand(t *testing.T) {
	c := Config{Vocab: 4, Hidden: 4, Layers: 1, Heads: 2, Intermediate: 3, MaxPositions: 4, TypeVocab: 1, Eps: 1e-12}
	H := 4
	eye := make([]float64, H*H)
	for i := 0; i < H; i++ {
		eye[i*H+i] = 1
	}
	ones, zeros := []float64{1, 1, 1, 1}, make([]float64, H)
	w := map[string][]float64{
		"embeddings.word_embeddings.weight":       {1, 0, 0, 0, 0, 2, 0, 0, 0, 0, 3, 1, 1, 1, 1, 1},
		"embeddings.position_embeddings.weight":   make([]float64, 4*H),
		"embeddings.token_type_embeddings.weight": zeros,
		"embeddings.LayerNorm.weight":             ones,
		"embeddings.LayerNorm.bias":               zeros,
	}
	p := "encoder.layer.0."
	for _, m := range []string{"query", "key"} {
		w[p+"attention.self."+m+".weight"] = make([]float64, H*H)
		w[p+"attention.self."+m+".bias"] = zeros
	}
	w[p+"attention.self.value.weight"], w[p+"attention.self.value.bias"] = eye, zeros
	w[p+"attention.output.dense.weight"], w[p+"attention.output.dense.bias"] = eye, zeros
	w[p+"attention.output.LayerNorm.weight"], w[p+"attention.output.LayerNorm.bias"] = ones, zeros
	w[p+"intermediate.dense.weight"], w[p+"intermediate.dense.bias"] = make([]float64, 3*H), make([]float64, 3)
	w[p+"output.dense.weight"], w[p+"output.dense.bias"] = make([]float64, H*3), zeros
	w[p+"output.LayerNorm.weight"], w[p+"output.LayerNorm.bias"] = ones, zeros
	// Row 0 [1,0,0,0]: mean .25, deviations [.75,-.25,-.25,-.25], var .1875.
	// Row 1 [0,2,0,0]: mean .5, deviations [-.5,1.5,-.5,-.5], var .75.
	s0, s1 := math.Sqrt(0.1875), math.Sqrt(0.75)
	x0 := []float64{0.75 / s0, -0.25 / s0, -0.25 / s0, -0.25 / s0}
	x1 := []float64{-0.5 / s1, 1.5 / s1, -0.5 / s1, -0.5 / s1}
	norm := func(v []float64) []float64 {
		m := (v[0] + v[1] + v[2] + v[3]) / 4
		s := 0.0
		for _, x := range v {
			s += (x - m) * (x - m)
		}
		s = math.Sqrt(s / 4)
		return []float64{(v[0] - m) / s, (v[1] - m) / s, (v[2] - m) / s, (v[3] - m) / s}
	}
	avg := make([]float64, H)
	for i := range avg {
		avg[i] = (x0[i] + x1[i]) / 2
	}
	r0, r1 := make([]float64, H), make([]float64, H)
	for i := range avg {
		r0[i], r1[i] = x0[i]+avg[i], x1[i]+avg[i]
	}
	h, err := forward(w, c, []int{0, 1})
	if err != nil {
		t.Fatal(err)
	}
	if !sameRows(h[0], norm(r0), 1e-10) || !sameRows(h[1], norm(r1), 1e-10) {
		t.Fatalf("got %v, want %v and %v", h, norm(r0), norm(r1))
	}
}

// An independent re-derivation of one random layer on two tokens: for two
// keys the softmax is a logistic function of the score difference, and the
// LayerNorm variance is taken as E[x²] - E[x]².
func TestOneLayerTwoTokensIndependent(t *testing.T) {
	for _, heads := range []int{1, 2} {
		c := Config{Vocab: 6, Hidden: 4, Layers: 1, Heads: heads, Intermediate: 5, MaxPositions: 3, TypeVocab: 2, Eps: 1e-6}
		w := mustRead(t, mustWrite(t, c, uint64(20+heads)))
		ids := []int{4, 1}
		got, err := forward(w, c, ids)
		if err != nil {
			t.Fatal(err)
		}
		const H, I = 4, 5
		at := func(name string, r, col, cols int) float64 { return w[name][r*cols+col] }
		ln := func(v []float64, prefix string) []float64 {
			var s, s2 float64
			for _, x := range v {
				s += x
				s2 += x * x
			}
			m := s / H
			sd := math.Sqrt(s2/H - m*m + c.Eps)
			out := make([]float64, H)
			for i := range v {
				out[i] = (v[i]-m)/sd*w[prefix+".weight"][i] + w[prefix+".bias"][i]
			}
			return out
		}
		dense := func(v []float64, name string, out int) []float64 {
			r := make([]float64, out)
			for o := 0; o < out; o++ {
				r[o] = w[name+".bias"][o]
				for i := range v {
					r[o] += at(name+".weight", o, i, len(v)) * v[i]
				}
			}
			return r
		}
		var x [2][]float64
		for tk := 0; tk < 2; tk++ {
			e := make([]float64, H)
			for i := 0; i < H; i++ {
				e[i] = at("embeddings.word_embeddings.weight", ids[tk], i, H) +
					at("embeddings.position_embeddings.weight", tk, i, H) +
					at("embeddings.token_type_embeddings.weight", 0, i, H)
			}
			x[tk] = ln(e, "embeddings.LayerNorm")
		}
		p := "encoder.layer.0."
		var q, k, v [2][]float64
		for tk := 0; tk < 2; tk++ {
			q[tk] = dense(x[tk], p+"attention.self.query", H)
			k[tk] = dense(x[tk], p+"attention.self.key", H)
			v[tk] = dense(x[tk], p+"attention.self.value", H)
		}
		d := H / heads
		for tk := 0; tk < 2; tk++ {
			ctx := make([]float64, H)
			for hd := 0; hd < heads; hd++ {
				var s [2]float64
				for j := hd * d; j < (hd+1)*d; j++ {
					s[0] += q[tk][j] * k[0][j]
					s[1] += q[tk][j] * k[1][j]
				}
				p1 := 1 / (1 + math.Exp((s[0]-s[1])/math.Sqrt(float64(d))))
				for j := hd * d; j < (hd+1)*d; j++ {
					ctx[j] = (1-p1)*v[0][j] + p1*v[1][j]
				}
			}
			a := dense(ctx, p+"attention.output.dense", H)
			for i := range a {
				a[i] += x[tk][i]
			}
			a = ln(a, p+"attention.output.LayerNorm")
			mid := dense(a, p+"intermediate.dense", I)
			for i, z := range mid {
				mid[i] = z * (1 + math.Erf(z/math.Sqrt(2))) / 2
			}
			o := dense(mid, p+"output.dense", H)
			for i := range o {
				o[i] += a[i]
			}
			want := ln(o, p+"output.LayerNorm")
			if !sameRows(got[tk], want, 1e-9) {
				t.Errorf("heads %d token %d: got %v, want %v", heads, tk, got[tk], want)
			}
		}
	}
}

// With no layers each output row is its own token's embedding, so
// perturbing one position row shows which positions a token reads.
func TestPositions(t *testing.T) {
	check := func(c Config, ids []int, wantPos []int) {
		t.Helper()
		if got := PositionIDs(c, ids); !reflect.DeepEqual(got, wantPos) {
			t.Fatalf("roberta=%v PositionIDs(%v) = %v, want %v", c.Roberta, ids, got, wantPos)
		}
		w := mustRead(t, mustWrite(t, c, 5))
		base, err := forward(w, c, ids)
		if err != nil {
			t.Fatal(err)
		}
		for row := 0; row < c.MaxPositions; row++ {
			pw := cloneWeights(w)
			pe := pw[c.Prefix+"embeddings.position_embeddings.weight"]
			pe[row*c.Hidden] += 1
			h, err := forward(pw, c, ids)
			if err != nil {
				t.Fatal(err)
			}
			for tk := range ids {
				changed := !sameRows(h[tk], base[tk], 0)
				if reads := wantPos[tk] == row; changed != reads {
					t.Errorf("roberta=%v ids %v: token %d changed=%v when position row %d moves (its position is %d)",
						c.Roberta, ids, tk, changed, row, wantPos[tk])
				}
			}
		}
	}
	bert := Config{Vocab: 16, Hidden: 8, Layers: 0, Heads: 2, Intermediate: 8, MaxPositions: 6, TypeVocab: 2, Eps: 1e-12}
	check(bert, []int{2, 7, 7, 3}, []int{0, 1, 2, 3})
	rob := bert
	rob.Roberta, rob.TypeVocab, rob.Eps = true, 1, 1e-5
	check(rob, []int{0, 7, 7, 2}, []int{2, 3, 4, 5})
	// A pad id inside the input takes position padding_idx and does not
	// advance the count (create_position_ids_from_input_ids).
	check(rob, []int{0, 7, 1, 2}, []int{2, 3, 1, 4})

	// XLM-RoBERTa's max_position_embeddings holds two more rows than the
	// longest input.
	if _, err := Forward(mustWrite(t, rob, 5), rob, []int{0, 5, 6, 7, 2}); err == nil {
		t.Error("5 ids with 6 XLM-RoBERTa positions: no error")
	}
	if _, err := Forward(mustWrite(t, bert, 5), bert, []int{0, 5, 6, 7, 8, 2}); err != nil {
		t.Errorf("6 ids with 6 BERT positions: %v", err)
	}
	if _, err := Forward(mustWrite(t, bert, 5), bert, []int{0, 16}); err == nil {
		t.Error("id 16 in a vocabulary of 16: no error")
	}
}

func TestCheckpointLayout(t *testing.T) {
	for _, c := range []Config{
		tiny,
		{Vocab: 50, Hidden: 8, Layers: 1, Heads: 2, Intermediate: 12, MaxPositions: 10, TypeVocab: 2, Eps: 1e-12,
			Arch: "BertForMaskedLM", Prefix: "bert.", GammaBeta: true, Pooler: true, PositionIDs: true, MLMHead: true},
		{Vocab: 50, Hidden: 8, Layers: 1, Heads: 2, Intermediate: 12, MaxPositions: 12, TypeVocab: 1, Eps: 1e-5,
			Roberta: true, Prefix: "roberta.", Arch: "XLMRobertaForMaskedLM", PositionIDs: true, MLMHead: true, Pooler: true},
	} {
		dir := mustWrite(t, c, 1)
		ck, err := safetensors.Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		shapes := map[string][]int{}
		for _, n := range ck.Names() {
			info, _ := ck.Info(n)
			shapes[n] = info.Shape
			want := safetensors.F32
			if strings.HasSuffix(n, "position_ids") {
				want = safetensors.I64
			}
			if info.DType != want {
				t.Errorf("%s: dtype %s", n, info.DType)
			}
		}
		ck.Close()
		H, P, V, I := c.Hidden, c.Prefix, c.Vocab, c.Intermediate
		lw, lb := ".weight", ".bias"
		if c.GammaBeta {
			lw, lb = ".gamma", ".beta"
		}
		want := map[string][]int{
			P + "embeddings.word_embeddings.weight":       {V, H},
			P + "embeddings.position_embeddings.weight":   {c.MaxPositions, H},
			P + "embeddings.token_type_embeddings.weight": {c.TypeVocab, H},
			P + "embeddings.LayerNorm" + lw:               {H},
			P + "embeddings.LayerNorm" + lb:               {H},
		}
		for l := 0; l < c.Layers; l++ {
			p := fmt.Sprintf("%sencoder.layer.%d.", P, l)
			for _, m := range []string{"query", "key", "value"} {
				want[p+"attention.self."+m+".weight"] = []int{H, H}
				want[p+"attention.self."+m+".bias"] = []int{H}
			}
			want[p+"attention.output.dense.weight"] = []int{H, H}
			want[p+"attention.output.dense.bias"] = []int{H}
			want[p+"attention.output.LayerNorm"+lw] = []int{H}
			want[p+"attention.output.LayerNorm"+lb] = []int{H}
			want[p+"intermediate.dense.weight"] = []int{I, H}
			want[p+"intermediate.dense.bias"] = []int{I}
			want[p+"output.dense.weight"] = []int{H, I}
			want[p+"output.dense.bias"] = []int{H}
			want[p+"output.LayerNorm"+lw] = []int{H}
			want[p+"output.LayerNorm"+lb] = []int{H}
		}
		if c.Pooler {
			want[P+"pooler.dense.weight"] = []int{H, H}
			want[P+"pooler.dense.bias"] = []int{H}
		}
		if c.PositionIDs {
			want[P+"embeddings.position_ids"] = []int{1, c.MaxPositions}
		}
		if c.MLMHead && c.Roberta {
			want["lm_head.dense.weight"] = []int{H, H}
			want["lm_head.dense.bias"] = []int{H}
			want["lm_head.layer_norm.weight"] = []int{H}
			want["lm_head.layer_norm.bias"] = []int{H}
			want["lm_head.bias"] = []int{V}
		} else if c.MLMHead {
			want["cls.predictions.transform.dense.weight"] = []int{H, H}
			want["cls.predictions.transform.dense.bias"] = []int{H}
			want["cls.predictions.transform.LayerNorm"+lw] = []int{H}
			want["cls.predictions.transform.LayerNorm"+lb] = []int{H}
			want["cls.predictions.bias"] = []int{V}
		}
		if !reflect.DeepEqual(shapes, want) {
			t.Errorf("%+v:\n got %v\nwant %v", c, shapes, want)
		}
		if c.PositionIDs {
			pos := mustRead(t, dir)[P+"embeddings.position_ids"]
			for i, v := range pos {
				if v != float64(i) {
					t.Fatalf("position_ids[%d] = %v", i, v)
				}
			}
		}

		b, err := os.ReadFile(filepath.Join(dir, "config.json"))
		if err != nil {
			t.Fatal(err)
		}
		var cfg map[string]any
		if err := json.Unmarshal(b, &cfg); err != nil {
			t.Fatal(err)
		}
		wantCfg := map[string]any{
			"architectures": []any{c.arch()}, "model_type": "bert", "pad_token_id": 0.0,
			"hidden_act": "gelu", "position_embedding_type": "absolute", "torch_dtype": "float32",
			"vocab_size": float64(V), "hidden_size": float64(H), "num_hidden_layers": float64(c.Layers),
			"num_attention_heads": float64(c.Heads), "intermediate_size": float64(I),
			"max_position_embeddings": float64(c.MaxPositions), "type_vocab_size": float64(c.TypeVocab),
			"layer_norm_eps": c.Eps, "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1,
		}
		if c.Roberta {
			wantCfg["model_type"], wantCfg["pad_token_id"] = "xlm-roberta", 1.0
			wantCfg["bos_token_id"], wantCfg["eos_token_id"] = 0.0, 2.0
		}
		for k, v := range wantCfg {
			if !reflect.DeepEqual(cfg[k], v) {
				t.Errorf("config.json %s = %v, want %v", k, cfg[k], v)
			}
		}
	}
	if got := (Config{}).arch(); got != "BertModel" {
		t.Errorf("default arch %q", got)
	}
	if got := (Config{Roberta: true}).arch(); got != "XLMRobertaModel" {
		t.Errorf("default roberta arch %q", got)
	}
	bad := tiny
	bad.Heads = 5
	if err := Write(t.TempDir(), bad, 1); err == nil {
		t.Error("hidden 32 with 5 heads: no error")
	}
}

func TestPool(t *testing.T) {
	h := [][]float64{{3, 0, -1}, {1, 4, 1}, {-1, 2, 3}}
	cases := []struct {
		mode      string
		normalize bool
		want      []float64
	}{
		{"cls", false, []float64{3, 0, -1}},
		{"last", false, []float64{-1, 2, 3}},
		{"mean", false, []float64{1, 2, 1}},
		{"max", false, []float64{3, 4, 3}},
		{"cls", true, []float64{3 / math.Sqrt(10), 0, -1 / math.Sqrt(10)}},
		{"mean", true, []float64{1 / math.Sqrt(6), 2 / math.Sqrt(6), 1 / math.Sqrt(6)}},
	}
	for _, tc := range cases {
		if got := Pool(h, tc.mode, tc.normalize); !sameRows(got, tc.want, 1e-12) {
			t.Errorf("Pool(%s, %v) = %v, want %v", tc.mode, tc.normalize, got, tc.want)
		}
	}
	if got := Pool([][]float64{{0, 0}}, "cls", true); got[0] != 0 || got[1] != 0 {
		t.Errorf("normalizing zeros: %v", got)
	}
	if got := Pool(h, "cls", false); &got[0] == &h[0][0] {
		t.Error("Pool aliases its input")
	}
	defer func() {
		if recover() == nil {
			t.Error("unknown mode: no panic")
		}
	}()
	Pool(h, "median", false)
}

func TestTokenizer(t *testing.T) {
	dir := t.TempDir()
	if err := WriteTokenizer(dir, 100); err != nil {
		t.Fatal(err)
	}
	tk, err := tokenizer.LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if tk.VocabSize() != 100 {
		t.Errorf("vocab size %d", tk.VocabSize())
	}
	id := func(s string) int {
		t.Helper()
		i, ok := tk.TokenToID(s)
		if !ok {
			t.Fatalf("no token %q", s)
		}
		return i
	}
	for i, s := range []string{"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"} {
		if id(s) != i || !tk.IsSpecial(i) {
			t.Errorf("%s: id %d special %v", s, id(s), tk.IsSpecial(id(s)))
		}
	}
	if pad, ok := tk.Pad(); !ok || pad != 0 {
		t.Errorf("pad = %d, %v", pad, ok)
	}
	encode := func(text string, special bool) []int {
		t.Helper()
		ids, err := tk.Encode(text, special)
		if err != nil {
			t.Fatal(err)
		}
		return ids
	}
	tokens := func(ss ...string) []int {
		var ids []int
		for _, s := range ss {
			ids = append(ids, id(s))
		}
		return ids
	}
	ids := encode("What is a TPU?", true)
	if want := tokens("[CLS]", "what", "is", "a", "tpu", "?", "[SEP]"); !reflect.DeepEqual(ids, want) {
		t.Errorf("encode: %v, want %v", ids, want)
	}
	if got := tk.Decode(ids, true); got != "what is a tpu?" {
		t.Errorf("decode: %q", got)
	}
	if got := encode("Zebra", false); !reflect.DeepEqual(got, tokens("z", "##e", "##b", "##r", "##a")) {
		t.Errorf("zebra: %v", got)
	}
	if got := encode("Running models", false); !reflect.DeepEqual(got, tokens("run", "##n", "##ing", "model", "##s")) {
		t.Errorf("running models: %v", got)
	}
	if got := tk.Decode(encode("Hello, world! Zebra running.", true), true); got != "hello, world! zebra running." {
		t.Errorf("round trip: %q", got)
	}
	// Accents are stripped with lowercase on (strip_accents null).
	if got := encode("Héllo", false); !reflect.DeepEqual(got, tokens("hello")) {
		t.Errorf("accents: %v", got)
	}
	// Every letter and ##letter is present from FullTokenizerVocab on.
	full := TokenizerVocab(FullTokenizerVocab)
	for ch := 'a'; ch <= 'z'; ch++ {
		for _, s := range []string{string(ch), "##" + string(ch)} {
			found := false
			for _, v := range full {
				found = found || v == s
			}
			if !found {
				t.Errorf("%q missing from the first %d entries", s, FullTokenizerVocab)
			}
		}
	}

	b, err := os.ReadFile(filepath.Join(dir, "tokenizer_config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(b, &cfg); err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]any{"do_lower_case": true, "model_max_length": 512.0, "cls_token": "[CLS]",
		"sep_token": "[SEP]", "pad_token": "[PAD]", "unk_token": "[UNK]", "mask_token": "[MASK]",
		"tokenizer_class": "BertTokenizer"} {
		if cfg[k] != v {
			t.Errorf("tokenizer_config.json %s = %v, want %v", k, cfg[k], v)
		}
	}

	// Exact sizes, including the smallest; the vocabulary ids are dense.
	for _, n := range []int{40, 64, 75, 200} {
		d := t.TempDir()
		if err := WriteTokenizer(d, n); err != nil {
			t.Fatal(err)
		}
		tk, err := tokenizer.LoadDir(d)
		if err != nil {
			t.Fatal(err)
		}
		if tk.VocabSize() != n {
			t.Errorf("vocab %d: size %d", n, tk.VocabSize())
		}
		for i := 0; i < n; i++ {
			if _, ok := tk.IDToToken(i); !ok {
				t.Errorf("vocab %d: no id %d", n, i)
			}
		}
		ids, err := tk.Encode("What is a TPU?", true)
		if err != nil || len(ids) != 7 {
			t.Errorf("vocab %d: %v %v", n, ids, err)
		}
	}
	if err := WriteTokenizer(t.TempDir(), 39); err == nil {
		t.Error("vocab 39: no error")
	}
}

func TestSentenceTransformers(t *testing.T) {
	for _, mode := range []string{"cls", "mean", "last", "max"} {
		dir := t.TempDir()
		if err := WriteSentenceTransformers(dir, 32, mode, 128); err != nil {
			t.Fatal(err)
		}
		var modules []map[string]any
		readJSON(t, filepath.Join(dir, "modules.json"), &modules)
		want := []map[string]any{
			{"idx": 0.0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
			{"idx": 1.0, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
			{"idx": 2.0, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"},
		}
		if !reflect.DeepEqual(modules, want) {
			t.Errorf("modules.json: %v", modules)
		}
		var pool map[string]any
		readJSON(t, filepath.Join(dir, "1_Pooling", "config.json"), &pool)
		on := 0
		for k, v := range pool {
			if strings.HasPrefix(k, "pooling_mode_") && v == true {
				on++
			}
		}
		key := map[string]string{"cls": "pooling_mode_cls_token", "mean": "pooling_mode_mean_tokens",
			"last": "pooling_mode_lasttoken", "max": "pooling_mode_max_tokens"}[mode]
		if on != 1 || pool[key] != true || pool["word_embedding_dimension"] != 32.0 || pool["include_prompt"] != true || len(pool) != 8 {
			t.Errorf("%s: pooling config %v", mode, pool)
		}
		if st, err := os.Stat(filepath.Join(dir, "2_Normalize")); err != nil || !st.IsDir() {
			t.Errorf("2_Normalize: %v", err)
		}
		var sb map[string]any
		readJSON(t, filepath.Join(dir, "sentence_bert_config.json"), &sb)
		if sb["max_seq_length"] != 128.0 || sb["do_lower_case"] != false {
			t.Errorf("sentence_bert_config.json: %v", sb)
		}
	}
	if err := WriteSentenceTransformers(t.TempDir(), 32, "weighted", 128); err == nil {
		t.Error("unknown mode: no error")
	}
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

var tinyMPNet = Config{Vocab: 64, Hidden: 32, Layers: 2, Heads: 4, Intermediate: 48, MaxPositions: 40, Eps: 1e-5, MPNet: true}

func TestMPNetCheckpointLayout(t *testing.T) {
	for _, c := range []Config{
		tinyMPNet,
		{Vocab: 50, Hidden: 8, Layers: 2, Heads: 2, Intermediate: 12, MaxPositions: 12, Eps: 1e-5, MPNet: true, Buckets: 16,
			Arch: "MPNetForMaskedLM", Prefix: "mpnet.", GammaBeta: true, Pooler: true, PositionIDs: true, MLMHead: true},
	} {
		dir := mustWrite(t, c, 1)
		ck, err := safetensors.Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		shapes := map[string][]int{}
		for _, n := range ck.Names() {
			info, _ := ck.Info(n)
			shapes[n] = info.Shape
			want := safetensors.F32
			if strings.HasSuffix(n, "position_ids") {
				want = safetensors.I64
			}
			if info.DType != want {
				t.Errorf("%s: dtype %s", n, info.DType)
			}
			if strings.Contains(n, "token_type") {
				t.Errorf("MPNet checkpoint has %s", n)
			}
		}
		ck.Close()
		H, P, V, I := c.Hidden, c.Prefix, c.Vocab, c.Intermediate
		lw, lb := ".weight", ".bias"
		if c.GammaBeta {
			lw, lb = ".gamma", ".beta"
		}
		want := map[string][]int{
			P + "embeddings.word_embeddings.weight":      {V, H},
			P + "embeddings.position_embeddings.weight":  {c.MaxPositions, H},
			P + "embeddings.LayerNorm" + lw:              {H},
			P + "embeddings.LayerNorm" + lb:              {H},
			P + "encoder.relative_attention_bias.weight": {c.buckets(), c.Heads},
		}
		for l := 0; l < c.Layers; l++ {
			p := fmt.Sprintf("%sencoder.layer.%d.", P, l)
			for _, m := range []string{"q", "k", "v", "o"} {
				want[p+"attention.attn."+m+".weight"] = []int{H, H}
				want[p+"attention.attn."+m+".bias"] = []int{H}
			}
			want[p+"attention.LayerNorm"+lw] = []int{H}
			want[p+"attention.LayerNorm"+lb] = []int{H}
			want[p+"intermediate.dense.weight"] = []int{I, H}
			want[p+"intermediate.dense.bias"] = []int{I}
			want[p+"output.dense.weight"] = []int{H, I}
			want[p+"output.dense.bias"] = []int{H}
			want[p+"output.LayerNorm"+lw] = []int{H}
			want[p+"output.LayerNorm"+lb] = []int{H}
		}
		if c.Pooler {
			want[P+"pooler.dense.weight"] = []int{H, H}
			want[P+"pooler.dense.bias"] = []int{H}
		}
		if c.PositionIDs {
			want[P+"embeddings.position_ids"] = []int{1, c.MaxPositions}
		}
		if c.MLMHead {
			want["lm_head.dense.weight"] = []int{H, H}
			want["lm_head.dense.bias"] = []int{H}
			want["lm_head.layer_norm.weight"] = []int{H}
			want["lm_head.layer_norm.bias"] = []int{H}
			want["lm_head.bias"] = []int{V}
		}
		if !reflect.DeepEqual(shapes, want) {
			t.Errorf("%+v:\n got %v\nwant %v", c, shapes, want)
		}

		var cfg map[string]any
		readJSON(t, filepath.Join(dir, "config.json"), &cfg)
		wantCfg := map[string]any{
			"architectures": []any{c.arch()}, "model_type": "mpnet",
			"pad_token_id": 1.0, "bos_token_id": 0.0, "eos_token_id": 2.0,
			"hidden_act": "gelu", "layer_norm_eps": c.Eps, "relative_attention_num_buckets": float64(c.buckets()),
			"vocab_size": float64(V), "hidden_size": float64(H), "num_hidden_layers": float64(c.Layers),
			"num_attention_heads": float64(c.Heads), "intermediate_size": float64(I),
			"max_position_embeddings": float64(c.MaxPositions),
			"hidden_dropout_prob":     0.1, "attention_probs_dropout_prob": 0.1,
		}
		for k, v := range wantCfg {
			if !reflect.DeepEqual(cfg[k], v) {
				t.Errorf("config.json %s = %v, want %v", k, cfg[k], v)
			}
		}
		for _, k := range []string{"type_vocab_size", "position_embedding_type"} {
			if _, ok := cfg[k]; ok {
				t.Errorf("MPNet config.json has %s", k)
			}
		}
	}
	if got := (Config{MPNet: true}).arch(); got != "MPNetModel" {
		t.Errorf("default MPNet arch %q", got)
	}
	bad := tinyMPNet
	bad.Roberta = true
	if err := Write(t.TempDir(), bad, 1); err == nil {
		t.Error("MPNet and Roberta together: no error")
	}
	bad = tinyMPNet
	bad.Buckets = -1
	if err := Write(t.TempDir(), bad, 1); err == nil {
		t.Error("negative buckets: no error")
	}
}

// MPNetBucket by hand. rel is memory_position - context_position (key
// index minus query index); n = -rel. For 32 buckets: half = 16 and
// exact = 8; n < 0 (key after query) adds 16; |n| < 8 is its own bucket;
// otherwise 8 + trunc(8·ln(|n|/8)/ln(128/8)) = 8 + trunc(2·log2(|n|/8)),
// at most 15.
func TestMPNetBucket(t *testing.T) {
	cases := []struct{ rel, buckets, maxDist, want int }{
		{0, 32, 128, 0},
		{-1, 32, 128, 1},  // n = 1, key before query: lower half
		{1, 32, 128, 17},  // n = -1: 16 + 1
		{-7, 32, 128, 7},  // last exact bucket
		{7, 32, 128, 23},  // 16 + 7
		{-8, 32, 128, 8},  // 8 + trunc(2·log2(1)) = 8
		{8, 32, 128, 24},  // 16 + 8
		{-15, 32, 128, 9}, // 2·log2(1.875) = 1.81
		{-16, 32, 128, 10},
		{-31, 32, 128, 11},  // 2·log2(3.875) = 3.91
		{-32, 32, 128, 12},  // 2·log2(4) = 4
		{-63, 32, 128, 13},  // 2·log2(7.875) = 5.95
		{-64, 32, 128, 14},  // 2·log2(8) = 6
		{-90, 32, 128, 14},  // 2·log2(11.25) = 6.98
		{-91, 32, 128, 15},  // 2·log2(11.375) = 7.02
		{91, 32, 128, 31},   // 16 + 15
		{90, 32, 128, 30},   // 16 + 14
		{-127, 32, 128, 15}, // 2·log2(15.875) = 7.98
		{-128, 32, 128, 15}, // 8 + 8 = 16, clamped to 15
		{128, 32, 128, 31},
		{-1000, 32, 128, 15},
		{1 << 30, 32, 128, 31},
		// 16 buckets, max distance 64: half 8, exact 4,
		// 4 + trunc(4·ln(n/4)/ln(16)) = 4 + trunc(log2(n/4)), at most 7.
		{-3, 16, 64, 3},
		{3, 16, 64, 11},
		{-20, 16, 64, 6}, // log2(5) = 2.32
		{20, 16, 64, 14},
		{-64, 16, 64, 7}, // 4 + 4, clamped
	}
	for _, tc := range cases {
		if got := MPNetBucket(tc.rel, tc.buckets, tc.maxDist); got != tc.want {
			t.Errorf("MPNetBucket(%d, %d, %d) = %d, want %d", tc.rel, tc.buckets, tc.maxDist, got, tc.want)
		}
	}
	// Every distance for 32 / 128 against integer arithmetic: for d >= 8
	// the bucket is 8 + k for the largest k with 8·log16(d/8) >= k, i.e.
	// d^8 >= 8^8·16^k = 2^(24+4k), at most 15.
	for d := 0; d <= 200; d++ {
		want := d
		if d >= 8 {
			d8 := uint64(1)
			for i := 0; i < 8; i++ {
				d8 *= uint64(d)
			}
			k := 0
			for k < 8 && d8 >= uint64(1)<<(24+4*(k+1)) {
				k++
			}
			want = min(8+k, 15)
		}
		if got := MPNetBucket(-d, 32, 128); got != want {
			t.Errorf("MPNetBucket(%d) = %d, want %d", -d, got, want)
		}
		up := want + 16
		if d == 0 {
			up = 0
		}
		if got := MPNetBucket(d, 32, 128); got != up {
			t.Errorf("MPNetBucket(%d) = %d, want %d", d, got, up)
		}
	}
	defer func() {
		if recover() == nil {
			t.Error("2 buckets: no panic")
		}
	}()
	MPNetBucket(1, 2, 128)
}

// perturbBucket returns a copy of w with head h of bias row b moved by dv.
func perturbBucket(c Config, w map[string][]float64, b, h int, dv float64) map[string][]float64 {
	pw := cloneWeights(w)
	pw[c.Prefix+"encoder.relative_attention_bias.weight"][b*c.Heads+h] += dv
	return pw
}

func changedRows(a, b [][]float64) []int {
	var out []int
	for i := range a {
		if !reflect.DeepEqual(a[i], b[i]) {
			out = append(out, i)
		}
	}
	return out
}

// Forward reads exactly the bias rows of the distances in the input.
func TestMPNetForwardUsesRelativeBias(t *testing.T) {
	c := tinyMPNet
	w := mustRead(t, mustWrite(t, c, 5))
	ids := []int{0, 7, 9, 12, 2} // no pad id: position ids 2..6
	base, err := forward(w, c, ids)
	if err != nil {
		t.Fatal(err)
	}
	// Distances key-query in -4..4 reach buckets 0..4 (key at or before the
	// query) and 17..20 (key after it).
	reached := map[int]bool{0: true, 1: true, 2: true, 3: true, 4: true, 17: true, 18: true, 19: true, 20: true}
	for b := 0; b < 32; b++ {
		for h := 0; h < c.Heads; h++ {
			got, err := forward(perturbBucket(c, w, b, h, 0.7), c, ids)
			if err != nil {
				t.Fatal(err)
			}
			if changed := len(changedRows(got, base)) > 0; changed != reached[b] {
				t.Errorf("bucket %d head %d: output changed = %v, want %v", b, h, changed, reached[b])
			}
		}
	}
	// With one layer only the query that sees a distance changes: rel +4
	// (bucket 20) is query 0 reading key 4, rel -4 (bucket 4) query 4
	// reading key 0.
	one := c
	one.Layers = 1
	w1 := mustRead(t, mustWrite(t, one, 5))
	base1, err := forward(w1, one, ids)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ bucket, row int }{{20, 0}, {4, 4}} {
		got, err := forward(perturbBucket(one, w1, tc.bucket, 1, 0.7), one, ids)
		if err != nil {
			t.Fatal(err)
		}
		if rows := changedRows(got, base1); !reflect.DeepEqual(rows, []int{tc.row}) {
			t.Errorf("bucket %d: rows %v changed, want [%d]", tc.bucket, rows, tc.row)
		}
	}
}

// For one token only bucket 0 (distance 0) is read, and as the softmax over
// a single key is 1 even its value does not change the output; a NaN there
// shows that it is read.
func TestMPNetOneToken(t *testing.T) {
	c := tinyMPNet
	c.Layers = 1
	w := mustRead(t, mustWrite(t, c, 6))
	ids := []int{9}
	base, err := forward(w, c, ids)
	if err != nil {
		t.Fatal(err)
	}
	for b := 0; b < 32; b++ {
		got, err := forward(perturbBucket(c, w, b, b%c.Heads, 3), c, ids)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, base) {
			t.Errorf("one token: bucket %d changes the output", b)
		}
		got, err = forward(perturbBucket(c, w, b, 0, math.NaN()), c, ids)
		if err != nil {
			t.Fatal(err)
		}
		if nan := math.IsNaN(got[0][0]); nan != (b == 0) {
			t.Errorf("one token: NaN in bucket %d gives NaN output = %v", b, nan)
		}
	}
	// A one-row table is enough for one token but not for two.
	small := c
	small.Buckets = 1
	ws := mustRead(t, mustWrite(t, small, 6))
	if _, err := forward(ws, small, ids); err != nil {
		t.Errorf("one token, one bucket: %v", err)
	}
	if _, err := forward(ws, small, []int{9, 9}); err == nil || !strings.Contains(err.Error(), "bucket") {
		t.Errorf("two tokens, one bucket: err = %v", err)
	}

	// By hand: the context is v(x), x = LayerNorm(word[9] + position[2]).
	const H, I = 32, 48
	dense := func(v []float64, name string, out int) []float64 {
		r := make([]float64, out)
		for o := range r {
			r[o] = w[name+".bias"][o]
			for i, x := range v {
				r[o] += w[name+".weight"][o*len(v)+i] * x
			}
		}
		return r
	}
	ln := func(v []float64, prefix string) []float64 {
		var s, s2 float64
		for _, x := range v {
			s += x
			s2 += x * x
		}
		m := s / H
		sd := math.Sqrt(s2/H - m*m + c.Eps)
		out := make([]float64, H)
		for i := range v {
			out[i] = (v[i]-m)/sd*w[prefix+".weight"][i] + w[prefix+".bias"][i]
		}
		return out
	}
	e := make([]float64, H)
	for i := range e {
		e[i] = w["embeddings.word_embeddings.weight"][9*H+i] + w["embeddings.position_embeddings.weight"][2*H+i]
	}
	x := ln(e, "embeddings.LayerNorm")
	p := "encoder.layer.0."
	a := dense(dense(x, p+"attention.attn.v", H), p+"attention.attn.o", H)
	for i := range a {
		a[i] += x[i]
	}
	a = ln(a, p+"attention.LayerNorm")
	mid := dense(a, p+"intermediate.dense", I)
	for i, z := range mid {
		mid[i] = z * (1 + math.Erf(z/math.Sqrt(2))) / 2
	}
	o := dense(mid, p+"output.dense", H)
	for i := range o {
		o[i] += a[i]
	}
	if want := ln(o, p+"output.LayerNorm"); !sameRows(base[0], want, 1e-9) {
		t.Errorf("one token: got %v, want %v", base[0], want)
	}
}

// An independent re-derivation of one MPNet layer on two tokens: for two
// keys the softmax is a logistic function of the difference of the biased
// scores. Query 0 reads key 0 at rel 0 (bucket 0) and key 1 at rel +1
// (bucket 17); query 1 reads key 0 at rel -1 (bucket 1) and key 1 at rel 0.
func TestMPNetOneLayerTwoTokensIndependent(t *testing.T) {
	for _, heads := range []int{1, 2} {
		c := Config{Vocab: 6, Hidden: 4, Layers: 1, Heads: heads, Intermediate: 5, MaxPositions: 4, Eps: 1e-6, MPNet: true}
		w := mustRead(t, mustWrite(t, c, uint64(30+heads)))
		ids := []int{4, 3}
		got, err := forward(w, c, ids)
		if err != nil {
			t.Fatal(err)
		}
		const H, I = 4, 5
		ln := func(v []float64, prefix string) []float64 {
			var s, s2 float64
			for _, x := range v {
				s += x
				s2 += x * x
			}
			m := s / H
			sd := math.Sqrt(s2/H - m*m + c.Eps)
			out := make([]float64, H)
			for i := range v {
				out[i] = (v[i]-m)/sd*w[prefix+".weight"][i] + w[prefix+".bias"][i]
			}
			return out
		}
		dense := func(v []float64, name string, out int) []float64 {
			r := make([]float64, out)
			for o := range r {
				r[o] = w[name+".bias"][o]
				for i, x := range v {
					r[o] += w[name+".weight"][o*len(v)+i] * x
				}
			}
			return r
		}
		var x [2][]float64
		for tk := 0; tk < 2; tk++ {
			e := make([]float64, H)
			for i := range e {
				// Position ids 2 and 3 (padding_idx 1 + 1 + t).
				e[i] = w["embeddings.word_embeddings.weight"][ids[tk]*H+i] +
					w["embeddings.position_embeddings.weight"][(2+tk)*H+i]
			}
			x[tk] = ln(e, "embeddings.LayerNorm")
		}
		p := "encoder.layer.0."
		var q, k, v [2][]float64
		for tk := 0; tk < 2; tk++ {
			q[tk] = dense(x[tk], p+"attention.attn.q", H)
			k[tk] = dense(x[tk], p+"attention.attn.k", H)
			v[tk] = dense(x[tk], p+"attention.attn.v", H)
		}
		rb := w["encoder.relative_attention_bias.weight"]
		bucket := [2][2]int{{0, 17}, {1, 0}}
		d := H / heads
		for tk := 0; tk < 2; tk++ {
			ctx := make([]float64, H)
			for hd := 0; hd < heads; hd++ {
				var s [2]float64
				for j := hd * d; j < (hd+1)*d; j++ {
					s[0] += q[tk][j] * k[0][j]
					s[1] += q[tk][j] * k[1][j]
				}
				for key := 0; key < 2; key++ {
					s[key] = s[key]/math.Sqrt(float64(d)) + rb[bucket[tk][key]*heads+hd]
				}
				p1 := 1 / (1 + math.Exp(s[0]-s[1]))
				for j := hd * d; j < (hd+1)*d; j++ {
					ctx[j] = (1-p1)*v[0][j] + p1*v[1][j]
				}
			}
			a := dense(ctx, p+"attention.attn.o", H)
			for i := range a {
				a[i] += x[tk][i]
			}
			a = ln(a, p+"attention.LayerNorm")
			mid := dense(a, p+"intermediate.dense", I)
			for i, z := range mid {
				mid[i] = z * (1 + math.Erf(z/math.Sqrt(2))) / 2
			}
			o := dense(mid, p+"output.dense", H)
			for i := range o {
				o[i] += a[i]
			}
			if want := ln(o, p+"output.LayerNorm"); !sameRows(got[tk], want, 1e-9) {
				t.Errorf("heads %d token %d: got %v, want %v", heads, tk, got[tk], want)
			}
		}
	}
}

// Position ids follow create_position_ids_from_input_ids (padding_idx 1),
// but the relative bias uses token indices: with pad ids inside the input,
// ids [0 1 1 5] sit at positions [2 1 1 3] (largest position distance 2)
// while query 0 still reads key 3 at rel +3 (bucket 19).
func TestMPNetPositionsAndBiasIndices(t *testing.T) {
	c := Config{Vocab: 16, Hidden: 8, Layers: 0, Heads: 2, Intermediate: 8, MaxPositions: 6, Eps: 1e-5, MPNet: true}
	for _, tc := range []struct{ ids, pos []int }{
		{[]int{0, 7, 7, 2}, []int{2, 3, 4, 5}},
		{[]int{0, 7, 1, 2}, []int{2, 3, 1, 4}},
	} {
		if got := PositionIDs(c, tc.ids); !reflect.DeepEqual(got, tc.pos) {
			t.Fatalf("PositionIDs(%v) = %v, want %v", tc.ids, got, tc.pos)
		}
		w := mustRead(t, mustWrite(t, c, 5))
		base, err := forward(w, c, tc.ids)
		if err != nil {
			t.Fatal(err)
		}
		for row := 0; row < c.MaxPositions; row++ {
			pw := cloneWeights(w)
			pw["embeddings.position_embeddings.weight"][row*c.Hidden] += 1
			h, err := forward(pw, c, tc.ids)
			if err != nil {
				t.Fatal(err)
			}
			for tk := range tc.ids {
				if changed, reads := !sameRows(h[tk], base[tk], 0), tc.pos[tk] == row; changed != reads {
					t.Errorf("ids %v: token %d changed=%v when position row %d moves", tc.ids, tk, changed, row)
				}
			}
		}
	}
	if _, err := Forward(mustWrite(t, c, 5), c, []int{0, 5, 6, 7, 2}); err == nil {
		t.Error("5 ids with 6 MPNet positions: no error")
	}

	one := c
	one.Layers = 1
	w := mustRead(t, mustWrite(t, one, 8))
	ids := []int{0, 1, 1, 5}
	base, err := forward(w, one, ids)
	if err != nil {
		t.Fatal(err)
	}
	got, err := forward(perturbBucket(one, w, 19, 0, 0.7), one, ids)
	if err != nil {
		t.Fatal(err)
	}
	if rows := changedRows(got, base); !reflect.DeepEqual(rows, []int{0}) {
		t.Errorf("bucket 19 (rel +3): rows %v changed, want [0]", rows)
	}
}

// The optional tensors, the name variants and a larger bias table do not
// change MPNet's outputs for a seed (rows from 32 on are never read, and
// the first 32 rows are drawn first).
func TestMPNetLayoutVariantsSameOutputs(t *testing.T) {
	ids := []int{0, 17, 33, 8, 40, 2}
	want, err := Forward(mustWrite(t, tinyMPNet, 11), tinyMPNet, ids)
	if err != nil {
		t.Fatal(err)
	}
	v := tinyMPNet
	v.Prefix, v.GammaBeta, v.Pooler, v.PositionIDs, v.MLMHead = "mpnet.", true, true, true, true
	v.Arch, v.Buckets = "MPNetForMaskedLM", 64
	got, err := Forward(mustWrite(t, v, 11), v, ids)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Error("the variant layout changes the outputs")
	}
	if _, err := Forward(mustWrite(t, v, 11), tinyMPNet, ids); err == nil || !strings.Contains(err.Error(), "no tensor") {
		t.Errorf("reading a prefixed checkpoint without Prefix: err = %v", err)
	}
	// A BERT reading of an MPNet checkpoint fails on the names.
	bert := tinyMPNet
	bert.MPNet, bert.TypeVocab = false, 2
	if _, err := Forward(mustWrite(t, tinyMPNet, 11), bert, ids); err == nil || !strings.Contains(err.Error(), "no tensor") {
		t.Errorf("BERT reading of an MPNet checkpoint: err = %v", err)
	}
	// Sixteen buckets cannot hold bucket 17 (rel +1).
	s := tinyMPNet
	s.Buckets = 16
	if _, err := Forward(mustWrite(t, s, 11), s, ids); err == nil || !strings.Contains(err.Error(), "bucket") {
		t.Errorf("16 buckets: err = %v", err)
	}
}
