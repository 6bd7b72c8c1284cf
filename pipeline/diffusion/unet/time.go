package unet

import (
	"fmt"

	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive

	"github.com/tputool/tputool/pipeline/diffusion/blocks"
	"github.com/tputool/tputool/pipeline/nn"
)

// TimeEmbedding is time_proj (sinusoidal Timesteps) + time_embedding
// (TimestepEmbedding: linear_1, act, linear_2), plus for SDXL the
// "text_time" addition: add_time_proj over the flattened time ids,
// concatenated after the pooled text embeddings, through add_embedding,
// added to the time embedding.
//
// Inputs: timesteps [B]; with text_time also text_embeds [B, P] and
// time_ids [B, K]. Output: emb [B, time_embed_dim].
type TimeEmbedding struct {
	dim              int
	flip             bool
	shift            float64
	act              string
	lin1, lin2       *blocks.LinearLayer
	addDim           int
	addLin1, addLin2 *blocks.LinearLayer
	ps               []*blocks.Param
}

func newTimeEmbedding(l *blocks.Loader, r *Resolved) *TimeEmbedding {
	t := &TimeEmbedding{dim: r.BlockOut[0], flip: r.FlipSinToCos, shift: r.FreqShift, act: r.Act}
	t.lin1 = blocks.NewLinear(l, "time_embedding.linear_1", t.dim, r.TimeEmbedDim, true)
	t.lin2 = blocks.NewLinear(l, "time_embedding.linear_2", r.TimeEmbedDim, r.TimeEmbedDim, true)
	t.ps = append(t.lin1.Params(), t.lin2.Params()...)
	if r.AdditionTextTime {
		t.addDim = r.AdditionTimeEmbedDim
		t.addLin1 = blocks.NewLinear(l, "add_embedding.linear_1", r.ProjectionClassDim, r.TimeEmbedDim, true)
		t.addLin2 = blocks.NewLinear(l, "add_embedding.linear_2", r.TimeEmbedDim, r.TimeEmbedDim, true)
		t.ps = append(t.ps, t.addLin1.Params()...)
		t.ps = append(t.ps, t.addLin2.Params()...)
	}
	return t
}

// Key implements blocks.Block.
func (t *TimeEmbedding) Key() string {
	return fmt.Sprintf("time_emb(%d,%v,%g,%s,add%d)", t.dim, t.flip, t.shift, t.act, t.addDim)
}

// Params implements blocks.Block.
func (t *TimeEmbedding) Params() []*blocks.Param { return t.ps }

// Apply implements blocks.Block.
func (t *TimeEmbedding) Apply(w blocks.Bind, in []*Node) []*Node {
	ts := in[0]
	b := ts.Shape().Dimensions[0]
	emb := blocks.TimestepSinusoid(ts, t.dim, t.flip, t.shift) // [B, dim]
	emb = t.lin2.Apply(w, nn.Activate(t.act, t.lin1.Apply(w, emb)))
	if t.addLin1 != nil {
		text, ids := in[1], in[2]
		k := ids.Shape().Dimensions[1]
		timeEmb := blocks.TimestepSinusoid(Reshape(ids, b*k), t.addDim, t.flip, t.shift) // [B*K, addDim]
		timeEmb = Reshape(timeEmb, b, k*t.addDim)
		add := Concatenate([]*Node{text, timeEmb}, 1) // [B, P + K*addDim]
		emb = Add(emb, t.addLin2.Apply(w, nn.Activate(t.act, t.addLin1.Apply(w, add))))
	}
	return []*Node{emb}
}
