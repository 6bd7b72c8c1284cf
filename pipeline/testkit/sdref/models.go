package sdref

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/tputool/tputool/loader/safetensors"
)

// Weights maps tensor names to float64 tensors.
type Weights map[string]*T

// LoadWeights reads every tensor of a safetensors checkpoint directory.
func LoadWeights(dir string) (Weights, error) {
	c, err := safetensors.Open(dir)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	w := Weights{}
	for _, n := range c.Names() {
		info, _ := c.Info(n)
		data, err := c.Float32(n)
		if err != nil {
			return nil, err
		}
		w[n] = FromFloat32(data, info.Shape...)
	}
	return w, nil
}

func (w Weights) t(name string) *T {
	t, ok := w[name]
	if !ok {
		panic("ref: missing tensor " + name)
	}
	return t
}

func (w Weights) v(name string) []float64 { return w.t(name).Data }

func (w Weights) conv(p string, x *T, stride, pad int) *T {
	return conv2d(x, w.t(p+".weight"), w.v(p+".bias"), stride, pad, pad, pad, pad)
}

func (w Weights) lin(p string, x *T) *T {
	var b []float64
	if bt, ok := w[p+".bias"]; ok {
		b = bt.Data
	}
	wt := w.t(p + ".weight")
	if len(wt.Shape) == 4 { // a 1x1 convolution stored for a linear layer
		wt = &T{Shape: wt.Shape[:2], Data: wt.Data}
	}
	return linear(x, wt, b)
}

func (w Weights) gn(p string, x *T, groups int, eps float64) *T {
	return groupNorm(x, w.v(p+".weight"), w.v(p+".bias"), groups, eps)
}

func (w Weights) ln(p string, x *T, eps float64) *T {
	return layerNorm(x, w.v(p+".weight"), w.v(p+".bias"), eps)
}

func readJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

// ---- UNet2DConditionModel ------------------------------------------------------

// UNet is the reference UNet2DConditionModel.
type UNet struct {
	W   Weights
	cfg struct {
		BlockOut        []int    `json:"block_out_channels"`
		Down            []string `json:"down_block_types"`
		Up              []string `json:"up_block_types"`
		LayersPerBlock  int      `json:"layers_per_block"`
		Heads           any      `json:"attention_head_dim"`
		TLayers         any      `json:"transformer_layers_per_block"`
		Groups          int      `json:"norm_num_groups"`
		Eps             float64  `json:"norm_eps"`
		Flip            bool     `json:"flip_sin_to_cos"`
		Shift           float64  `json:"freq_shift"`
		Linear          bool     `json:"use_linear_projection"`
		AddType         *string  `json:"addition_embed_type"`
		AddTimeEmbedDim int      `json:"addition_time_embed_dim"`
	}
	heads, tlayers []int
}

func perBlock(v any, n int) []int {
	out := make([]int, n)
	switch x := v.(type) {
	case float64:
		for i := range out {
			out[i] = int(x)
		}
	case []any:
		for i := range out {
			out[i] = int(x[i].(float64))
		}
	case nil:
		for i := range out {
			out[i] = 1
		}
	}
	return out
}

// LoadUNet reads dir/config.json and the weights.
func LoadUNet(dir string) (*UNet, error) {
	u := &UNet{}
	if err := readJSON(filepath.Join(dir, "config.json"), &u.cfg); err != nil {
		return nil, err
	}
	var err error
	if u.W, err = LoadWeights(dir); err != nil {
		return nil, err
	}
	n := len(u.cfg.BlockOut)
	u.heads = perBlock(u.cfg.Heads, n)
	u.tlayers = perBlock(u.cfg.TLayers, n)
	return u, nil
}

func (u *UNet) resnet(p string, x, temb *T) *T {
	w, g, eps := u.W, u.cfg.Groups, u.cfg.Eps
	h := w.conv(p+".conv1", mapT(w.gn(p+".norm1", x, g, eps), silu), 1, 1)
	t := w.lin(p+".time_emb_proj", mapT(temb, silu)) // [B, C]
	B, C := h.Shape[0], h.Shape[1]
	hw := len(h.Data) / (B * C)
	for i := range h.Data {
		h.Data[i] += t.Data[(i/(C*hw))*C+(i/hw)%C]
	}
	h = w.conv(p+".conv2", mapT(w.gn(p+".norm2", h, g, eps), silu), 1, 1)
	if _, ok := w[p+".conv_shortcut.weight"]; ok {
		x = w.conv(p+".conv_shortcut", x, 1, 0)
	}
	return add(x, h)
}

func (u *UNet) transformer(p string, x, ctx *T, heads, layers int) *T {
	w := u.W
	H, W := x.Shape[2], x.Shape[3]
	h := w.gn(p+".norm", x, u.cfg.Groups, 1e-6)
	if u.cfg.Linear {
		h = w.lin(p+".proj_in", toTokens(h))
	} else {
		h = toTokens(w.conv(p+".proj_in", h, 1, 0))
	}
	for i := 0; i < layers; i++ {
		b := fmt.Sprintf("%s.transformer_blocks.%d", p, i)
		n := w.ln(b+".norm1", h, 1e-5)
		h = add(h, w.lin(b+".attn1.to_out.0", attention(w.lin(b+".attn1.to_q", n), w.lin(b+".attn1.to_k", n), w.lin(b+".attn1.to_v", n), heads, false)))
		n = w.ln(b+".norm2", h, 1e-5)
		h = add(h, w.lin(b+".attn2.to_out.0", attention(w.lin(b+".attn2.to_q", n), w.lin(b+".attn2.to_k", ctx), w.lin(b+".attn2.to_v", ctx), heads, false)))
		n = w.ln(b+".norm3", h, 1e-5)
		pr := w.lin(b+".ff.net.0.proj", n)
		d2 := pr.Shape[2]
		inner := New(pr.Shape[0], pr.Shape[1], d2/2)
		for r := 0; r < pr.Shape[0]*pr.Shape[1]; r++ {
			for k := 0; k < d2/2; k++ {
				inner.Data[r*d2/2+k] = pr.Data[r*d2+k] * gelu(pr.Data[r*d2+d2/2+k])
			}
		}
		h = add(h, w.lin(b+".ff.net.2", inner))
	}
	if u.cfg.Linear {
		h = fromTokens(w.lin(p+".proj_out", h), H, W)
	} else {
		h = w.conv(p+".proj_out", fromTokens(h, H, W), 1, 0)
	}
	return add(h, x)
}

// Forward computes the predicted noise. textEmbeds and timeIDs are used by
// text_time (SDXL) models and may be nil otherwise.
func (u *UNet) Forward(sample *T, ts []float64, ctx, textEmbeds, timeIDs *T) *T {
	w, c := u.W, u.cfg
	n := len(c.BlockOut)
	emb := timestepEmbedding(ts, c.BlockOut[0], c.Flip, c.Shift)
	emb = w.lin("time_embedding.linear_2", mapT(w.lin("time_embedding.linear_1", emb), silu))
	if c.AddType != nil && *c.AddType == "text_time" {
		B, K := timeIDs.Shape[0], timeIDs.Shape[1]
		te := timestepEmbedding(timeIDs.Data, c.AddTimeEmbedDim, c.Flip, c.Shift) // [B*K, d]
		P := textEmbeds.Shape[1]
		cat := New(B, P+K*c.AddTimeEmbedDim)
		for b := 0; b < B; b++ {
			copy(cat.Data[b*cat.Shape[1]:], textEmbeds.Data[b*P:(b+1)*P])
			copy(cat.Data[b*cat.Shape[1]+P:], te.Data[b*K*c.AddTimeEmbedDim:(b+1)*K*c.AddTimeEmbedDim])
		}
		emb = add(emb, w.lin("add_embedding.linear_2", mapT(w.lin("add_embedding.linear_1", cat), silu)))
	}
	h := w.conv("conv_in", sample, 1, 1)
	skips := []*T{h}
	for i, typ := range c.Down {
		for j := 0; j < c.LayersPerBlock; j++ {
			h = u.resnet(fmt.Sprintf("down_blocks.%d.resnets.%d", i, j), h, emb)
			if typ == "CrossAttnDownBlock2D" {
				h = u.transformer(fmt.Sprintf("down_blocks.%d.attentions.%d", i, j), h, ctx, u.heads[i], u.tlayers[i])
			}
			skips = append(skips, h)
		}
		if i < n-1 {
			h = w.conv(fmt.Sprintf("down_blocks.%d.downsamplers.0.conv", i), h, 2, 1)
			skips = append(skips, h)
		}
	}
	h = u.resnet("mid_block.resnets.0", h, emb)
	h = u.transformer("mid_block.attentions.0", h, ctx, u.heads[n-1], u.tlayers[n-1])
	h = u.resnet("mid_block.resnets.1", h, emb)
	for i, typ := range c.Up {
		for j := 0; j <= c.LayersPerBlock; j++ {
			skip := skips[len(skips)-1]
			skips = skips[:len(skips)-1]
			h = u.resnet(fmt.Sprintf("up_blocks.%d.resnets.%d", i, j), concatChannels(h, skip), emb)
			if typ == "CrossAttnUpBlock2D" {
				h = u.transformer(fmt.Sprintf("up_blocks.%d.attentions.%d", i, j), h, ctx, u.heads[n-1-i], u.tlayers[n-1-i])
			}
		}
		if i < n-1 {
			h = w.conv(fmt.Sprintf("up_blocks.%d.upsamplers.0.conv", i), upsample2x(h), 1, 1)
		}
	}
	h = mapT(w.gn("conv_norm_out", h, c.Groups, c.Eps), silu)
	return w.conv("conv_out", h, 1, 1)
}

// ---- AutoencoderKL -------------------------------------------------------------

// VAE is the reference AutoencoderKL.
type VAE struct {
	W   Weights
	cfg struct {
		BlockOut       []int `json:"block_out_channels"`
		LayersPerBlock int   `json:"layers_per_block"`
		Groups         int   `json:"norm_num_groups"`
	}
}

// LoadVAE reads dir/config.json and the weights.
func LoadVAE(dir string) (*VAE, error) {
	v := &VAE{}
	if err := readJSON(filepath.Join(dir, "config.json"), &v.cfg); err != nil {
		return nil, err
	}
	var err error
	v.W, err = LoadWeights(dir)
	return v, err
}

func (v *VAE) resnet(p string, x *T) *T {
	w, g := v.W, v.cfg.Groups
	h := w.conv(p+".conv1", mapT(w.gn(p+".norm1", x, g, 1e-6), silu), 1, 1)
	h = w.conv(p+".conv2", mapT(w.gn(p+".norm2", h, g, 1e-6), silu), 1, 1)
	if _, ok := w[p+".conv_shortcut.weight"]; ok {
		x = w.conv(p+".conv_shortcut", x, 1, 0)
	}
	return add(x, h)
}

func (v *VAE) mid(p string, x *T) *T {
	w := v.W
	h := v.resnet(p+".resnets.0", x)
	H, W := h.Shape[2], h.Shape[3]
	a := toTokens(w.gn(p+".attentions.0.group_norm", h, v.cfg.Groups, 1e-6))
	q := w.lin(p+".attentions.0.to_q", a)
	k := w.lin(p+".attentions.0.to_k", a)
	vv := w.lin(p+".attentions.0.to_v", a)
	o := w.lin(p+".attentions.0.to_out.0", attention(q, k, vv, 1, false))
	h = add(fromTokens(o, H, W), h)
	return v.resnet(p+".resnets.1", h)
}

// Decode maps unscaled latents [B, 4, h, w] to images.
func (v *VAE) Decode(z *T) *T {
	w, n := v.W, len(v.cfg.BlockOut)
	if _, ok := w["post_quant_conv.weight"]; ok {
		z = w.conv("post_quant_conv", z, 1, 0)
	}
	h := w.conv("decoder.conv_in", z, 1, 1)
	h = v.mid("decoder.mid_block", h)
	for i := 0; i < n; i++ {
		for j := 0; j <= v.cfg.LayersPerBlock; j++ {
			h = v.resnet(fmt.Sprintf("decoder.up_blocks.%d.resnets.%d", i, j), h)
		}
		if i < n-1 {
			h = w.conv(fmt.Sprintf("decoder.up_blocks.%d.upsamplers.0.conv", i), upsample2x(h), 1, 1)
		}
	}
	h = mapT(w.gn("decoder.conv_norm_out", h, v.cfg.Groups, 1e-6), silu)
	return w.conv("decoder.conv_out", h, 1, 1)
}

// Encode maps images [B, 3, H, W] to the moments [B, 8, H/f, W/f].
func (v *VAE) Encode(x *T) *T {
	w, n := v.W, len(v.cfg.BlockOut)
	h := w.conv("encoder.conv_in", x, 1, 1)
	for i := 0; i < n; i++ {
		for j := 0; j < v.cfg.LayersPerBlock; j++ {
			h = v.resnet(fmt.Sprintf("encoder.down_blocks.%d.resnets.%d", i, j), h)
		}
		if i < n-1 {
			p := fmt.Sprintf("encoder.down_blocks.%d.downsamplers.0.conv", i)
			h = conv2d(h, w.t(p+".weight"), w.v(p+".bias"), 2, 0, 1, 0, 1)
		}
	}
	h = v.mid("encoder.mid_block", h)
	h = mapT(w.gn("encoder.conv_norm_out", h, v.cfg.Groups, 1e-6), silu)
	h = w.conv("encoder.conv_out", h, 1, 1)
	if _, ok := w["quant_conv.weight"]; ok {
		h = w.conv("quant_conv", h, 1, 0)
	}
	return h
}

// ---- CLIP text model -----------------------------------------------------------

// CLIP is the reference CLIPTextModel[WithProjection].
type CLIP struct {
	W   Weights
	cfg struct {
		Layers int     `json:"num_hidden_layers"`
		Heads  int     `json:"num_attention_heads"`
		Act    string  `json:"hidden_act"`
		Eps    float64 `json:"layer_norm_eps"`
		Eos    int     `json:"eos_token_id"`
	}
}

// LoadCLIP reads dir/config.json and the weights.
func LoadCLIP(dir string) (*CLIP, error) {
	c := &CLIP{}
	if err := readJSON(filepath.Join(dir, "config.json"), &c.cfg); err != nil {
		return nil, err
	}
	var err error
	c.W, err = LoadWeights(dir)
	return c, err
}

// Forward returns last_hidden_state, hidden_states[-2] and the pooled
// output (projected when the checkpoint has text_projection).
func (c *CLIP) Forward(ids [][]int) (last, penult, pooled *T) {
	w := c.W
	tok := w.t("text_model.embeddings.token_embedding.weight")
	pos := w.t("text_model.embeddings.position_embedding.weight")
	B, S, D := len(ids), len(ids[0]), tok.Shape[1]
	h := New(B, S, D)
	for b := range ids {
		for s, id := range ids[b] {
			for d := 0; d < D; d++ {
				h.Data[(b*S+s)*D+d] = tok.Data[id*D+d] + pos.Data[s*D+d]
			}
		}
	}
	for i := 0; i < c.cfg.Layers; i++ {
		if i == c.cfg.Layers-1 {
			penult = h
		}
		p := fmt.Sprintf("text_model.encoder.layers.%d", i)
		n := w.ln(p+".layer_norm1", h, c.cfg.Eps)
		a := attention(w.lin(p+".self_attn.q_proj", n), w.lin(p+".self_attn.k_proj", n), w.lin(p+".self_attn.v_proj", n), c.cfg.Heads, true)
		h = add(h, w.lin(p+".self_attn.out_proj", a))
		m := w.lin(p+".mlp.fc2", mapT(w.lin(p+".mlp.fc1", w.ln(p+".layer_norm2", h, c.cfg.Eps)), act(c.cfg.Act)))
		h = add(h, m)
	}
	last = w.ln("text_model.final_layer_norm", h, c.cfg.Eps)
	pooled = New(B, D)
	for b, row := range ids {
		at := 0
		for s, id := range row {
			if (c.cfg.Eos == 2 && id > row[at]) || (c.cfg.Eos != 2 && id == c.cfg.Eos) {
				at = s
				if c.cfg.Eos != 2 {
					break
				}
			}
		}
		copy(pooled.Data[b*D:], last.Data[(b*S+at)*D:(b*S+at+1)*D])
	}
	if _, ok := w["text_projection.weight"]; ok {
		pooled = w.lin("text_projection", pooled)
	}
	return last, penult, pooled
}
