package sdref

import (
	"fmt"
	"math"
	"path/filepath"
)

// MMDiT is the reference SD3Transformer2DModel.
type MMDiT struct {
	W   Weights
	cfg struct {
		PatchSize int     `json:"patch_size"`
		Layers    int     `json:"num_layers"`
		HeadDim   int     `json:"attention_head_dim"`
		Heads     int     `json:"num_attention_heads"`
		OutC      int     `json:"out_channels"`
		PosMax    int     `json:"pos_embed_max_size"`
		QKNorm    *string `json:"qk_norm"`
	}
}

// LoadMMDiT reads dir/config.json and the weights.
func LoadMMDiT(dir string) (*MMDiT, error) {
	m := &MMDiT{}
	if err := readJSON(filepath.Join(dir, "config.json"), &m.cfg); err != nil {
		return nil, err
	}
	var err error
	m.W, err = LoadWeights(dir)
	return m, err
}

// adaLN: LayerNorm without affine (eps 1e-6), then x*(1+scale)+shift with
// scale, shift [B, D] broadcast over tokens.
func modulateRef(x *T, shift, scale []float64) *T {
	B, S, D := x.Shape[0], x.Shape[1], x.Shape[2]
	ones := make([]float64, D)
	for i := range ones {
		ones[i] = 1
	}
	n := layerNorm(x, ones, make([]float64, D), 1e-6)
	for b := 0; b < B; b++ {
		for s := 0; s < S; s++ {
			for d := 0; d < D; d++ {
				i := (b*S+s)*D + d
				n.Data[i] = n.Data[i]*(1+scale[b*D+d]) + shift[b*D+d]
			}
		}
	}
	return n
}

// chunk returns part i of k of a [B, k*D] tensor as [B*D].
func chunk(x *T, i, k int) []float64 {
	B, n := x.Shape[0], x.Shape[1]/k
	out := make([]float64, B*n)
	for b := 0; b < B; b++ {
		copy(out[b*n:], x.Data[b*x.Shape[1]+i*n:b*x.Shape[1]+(i+1)*n])
	}
	return out
}

func gated(x *T, gate []float64) *T {
	S, D := x.Shape[1], x.Shape[2]
	y := New(x.Shape...)
	for i := range x.Data {
		b := i / (S * D)
		y.Data[i] = x.Data[i] * gate[b*D+i%D]
	}
	return y
}

func (m *MMDiT) rms(x *T, w []float64) *T {
	hd := m.cfg.HeadDim
	y := New(x.Shape...)
	for r := 0; r < len(x.Data)/hd; r++ {
		ms := 0.0
		for i := 0; i < hd; i++ {
			ms += x.Data[r*hd+i] * x.Data[r*hd+i]
		}
		inv := 1 / math.Sqrt(ms/float64(hd)+1e-6)
		for i := 0; i < hd; i++ {
			y.Data[r*hd+i] = x.Data[r*hd+i] * inv * w[i]
		}
	}
	return y
}

func gelutanh(v float64) float64 {
	return 0.5 * v * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(v+0.044715*v*v*v)))
}

func catSeq(a, b *T) *T {
	B, Sa, Sb, D := a.Shape[0], a.Shape[1], b.Shape[1], a.Shape[2]
	y := New(B, Sa+Sb, D)
	for n := 0; n < B; n++ {
		copy(y.Data[n*(Sa+Sb)*D:], a.Data[n*Sa*D:(n+1)*Sa*D])
		copy(y.Data[(n*(Sa+Sb)+Sa)*D:], b.Data[n*Sb*D:(n+1)*Sb*D])
	}
	return y
}

func sliceSeq(x *T, from, to int) *T {
	B, S, D := x.Shape[0], x.Shape[1], x.Shape[2]
	y := New(B, to-from, D)
	for n := 0; n < B; n++ {
		copy(y.Data[n*(to-from)*D:], x.Data[(n*S+from)*D:(n*S+to)*D])
	}
	return y
}

// Forward predicts the flow for latents [B, C, H, W], timesteps [B],
// context [B, T, J] and pooled [B, P].
func (m *MMDiT) Forward(latents *T, ts []float64, ctx, pooled *T) *T {
	w, c := m.W, m.cfg
	p := c.PatchSize
	B, H, W := latents.Shape[0], latents.Shape[2], latents.Shape[3]
	hp, wp := H/p, W/p
	x := w.conv("pos_embed.proj", latents, p, 0)
	h := toTokens(x) // [B, hp*wp, D]
	D := h.Shape[2]
	pos := w.t("pos_embed.pos_embed")
	top, left := (c.PosMax-hp)/2, (c.PosMax-wp)/2
	for b := 0; b < B; b++ {
		for i := 0; i < hp; i++ {
			for j := 0; j < wp; j++ {
				src := ((top+i)*c.PosMax + left + j) * D
				dst := (b*hp*wp + i*wp + j) * D
				for d := 0; d < D; d++ {
					h.Data[dst+d] += pos.Data[src+d]
				}
			}
		}
	}
	temb := timestepEmbedding(ts, 256, true, 0)
	temb = w.lin("time_text_embed.timestep_embedder.linear_2", mapT(w.lin("time_text_embed.timestep_embedder.linear_1", temb), silu))
	pe := w.lin("time_text_embed.text_embedder.linear_2", mapT(w.lin("time_text_embed.text_embedder.linear_1", pooled), silu))
	temb = add(temb, pe)
	act := mapT(temb, silu)
	cx := w.lin("context_embedder", ctx)
	for i := 0; i < c.Layers; i++ {
		pfx := fmt.Sprintf("transformer_blocks.%d", i)
		pre := i == c.Layers-1
		ada := w.lin(pfx+".norm1.linear", act)
		nh := modulateRef(h, chunk(ada, 0, 6), chunk(ada, 1, 6))
		adac := w.lin(pfx+".norm1_context.linear", act)
		var nc *T
		if pre {
			nc = modulateRef(cx, chunk(adac, 1, 2), chunk(adac, 0, 2))
		} else {
			nc = modulateRef(cx, chunk(adac, 0, 6), chunk(adac, 1, 6))
		}
		q, k, v := w.lin(pfx+".attn.to_q", nh), w.lin(pfx+".attn.to_k", nh), w.lin(pfx+".attn.to_v", nh)
		aq, ak, av := w.lin(pfx+".attn.add_q_proj", nc), w.lin(pfx+".attn.add_k_proj", nc), w.lin(pfx+".attn.add_v_proj", nc)
		if c.QKNorm != nil {
			q, k = m.rms(q, w.v(pfx+".attn.norm_q.weight")), m.rms(k, w.v(pfx+".attn.norm_k.weight"))
			aq, ak = m.rms(aq, w.v(pfx+".attn.norm_added_q.weight")), m.rms(ak, w.v(pfx+".attn.norm_added_k.weight"))
		}
		n := h.Shape[1]
		att := attention(catSeq(q, aq), catSeq(k, ak), catSeq(v, av), c.Heads, false)
		h = add(h, gated(w.lin(pfx+".attn.to_out.0", sliceSeq(att, 0, n)), chunk(ada, 2, 6)))
		ff := w.lin(pfx+".ff.net.2", mapT(w.lin(pfx+".ff.net.0.proj", modulateRef(h, chunk(ada, 3, 6), chunk(ada, 4, 6))), gelutanh))
		h = add(h, gated(ff, chunk(ada, 5, 6)))
		if !pre {
			ca := w.lin(pfx+".attn.to_add_out", sliceSeq(att, n, att.Shape[1]))
			cx = add(cx, gated(ca, chunk(adac, 2, 6)))
			cff := w.lin(pfx+".ff_context.net.2", mapT(w.lin(pfx+".ff_context.net.0.proj", modulateRef(cx, chunk(adac, 3, 6), chunk(adac, 4, 6))), gelutanh))
			cx = add(cx, gated(cff, chunk(adac, 5, 6)))
		}
	}
	ada := w.lin("norm_out.linear", act)
	h = modulateRef(h, chunk(ada, 1, 2), chunk(ada, 0, 2))
	h = w.lin("proj_out", h) // [B, hp*wp, p*p*C]
	C := c.OutC
	out := New(B, C, H, W)
	for b := 0; b < B; b++ {
		for i := 0; i < hp; i++ {
			for j := 0; j < wp; j++ {
				for pi := 0; pi < p; pi++ {
					for pj := 0; pj < p; pj++ {
						for ch := 0; ch < C; ch++ {
							src := (b*hp*wp+i*wp+j)*p*p*C + (pi*p+pj)*C + ch
							out.Data[((b*C+ch)*H+i*p+pi)*W+j*p+pj] = h.Data[src]
						}
					}
				}
			}
		}
	}
	return out
}
