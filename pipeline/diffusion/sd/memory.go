package sd

import "fmt"

// Buffer is one activation that a request holds in memory at once.
type Buffer struct {
	// What names the tensor and its shape.
	What string
	// Bytes is its size; a float64 because absurd requests overflow int64.
	Bytes float64
}

// LargestBuffer returns the largest single activation that req (validated:
// sizes filled in) materializes, among three it cannot avoid: the attention
// scores of the denoiser's largest attention level (with
// classifier-free guidance the conditional and unconditional rows run
// together), the scores of the VAE decoder's mid-block attention over every
// latent position, and the VAE decoder's full-resolution feature map.
// Nothing here is sliced or tiled, and everything is float32, so the peak
// memory of the request is at least this much; the estimate ignores
// weights, every other activation and the text tokens of SD3's joint
// attention, so it is a lower bound, fit for refusing requests that cannot
// run, not for predicting the peak.
func (p *Pipeline) LargestBuffer(req Request) Buffer {
	const f32 = 4
	rows := req.Batch
	if req.Guidance > 1 {
		rows *= 2
	}
	lh, lw := req.Height/p.VAEScaleFactor, req.Width/p.VAEScaleFactor
	var best Buffer
	consider := func(bytes float64, format string, args ...any) {
		if bytes > best.Bytes {
			best = Buffer{What: fmt.Sprintf(format, args...), Bytes: bytes}
		}
	}
	scores := func(rows, heads, tokens int) float64 {
		return float64(rows) * float64(heads) * float64(tokens) * float64(tokens) * f32
	}
	switch {
	case p.SD3 && p.Transformer != nil:
		c := p.Transformer.Cfg
		if c.PatchSize > 0 {
			n := (lh / c.PatchSize) * (lw / c.PatchSize)
			consider(scores(rows, c.NumAttentionHeads, n),
				"the transformer's attention scores (%d x %d heads x %d^2 image tokens, float32)", rows, c.NumAttentionHeads, n)
		}
	case p.UNet != nil:
		c := p.UNet.Cfg
		for i, t := range c.Down {
			if t != "CrossAttnDownBlock2D" || i >= len(c.Heads) {
				continue
			}
			n := (lh >> i) * (lw >> i)
			consider(scores(rows, c.Heads[i], n),
				"the UNet's self-attention scores at %dx%d latents (%d x %d heads x %d^2, float32)", lw>>i, lh>>i, rows, c.Heads[i], n)
		}
	}
	if p.VAE != nil {
		c := p.VAE.Cfg
		if c.MidAttention() {
			n := lh * lw
			consider(scores(req.Batch, 1, n),
				"the VAE decoder's mid-block attention scores (%d x %d^2 latent positions, float32)", req.Batch, n)
		}
		if len(c.BlockOutChannels) > 0 {
			ch := c.BlockOutChannels[0]
			consider(float64(req.Batch)*float64(ch)*float64(req.Height)*float64(req.Width)*f32,
				"the VAE decoder's full-resolution feature map (%d x %d x %d x %d, float32)", req.Batch, ch, req.Height, req.Width)
		}
	}
	return best
}
