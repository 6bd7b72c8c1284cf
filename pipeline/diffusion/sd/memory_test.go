package sd_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/tputool/tputool/pipeline/diffusion/sd"
	"github.com/tputool/tputool/pipeline/testkit/sdckpt"
)

// LargestBuffer against sizes computed by hand from the tiny specs (VAE
// scale factor 8, VAE block_out_channels[0] = 8, float32).
func TestLargestBuffer(t *testing.T) {
	sd3 := sdckpt.TinySD3()
	sd3.Name, sd3.Transformer.Heads = "tiny-sd3-12-heads", 12
	pipes := map[string]*sd.Pipeline{}
	for _, spec := range []sdckpt.Spec{sdckpt.TinySD(), sdckpt.TinySDXL(), sdckpt.TinySD3(), sd3} {
		pipes[spec.Name] = load(t, spec, sd.Options{})
	}
	for _, tc := range []struct {
		pipe  string
		req   sd.Request
		bytes float64
		what  string
	}{
		// UNet level 0 has attention with 2 heads over 64x64 = 4096 latent
		// positions; CFG doubles the rows.
		{"tiny-sd", sd.Request{Width: 512, Height: 512, Batch: 1, Guidance: 7.5}, 2 * 2 * 4096 * 4096 * 4,
			"the UNet's self-attention scores at 64x64 latents (2 x 2 heads x 4096^2, float32)"},
		{"tiny-sd", sd.Request{Width: 512, Height: 512, Batch: 1, Guidance: 1}, 1 * 2 * 4096 * 4096 * 4,
			"the UNet's self-attention scores at 64x64 latents (1 x 2 heads x 4096^2, float32)"},
		// At 64x64 pixels the full-resolution VAE map (3 x 8 x 64 x 64)
		// outgrows the UNet's scores (6 x 2 x 64^2).
		{"tiny-sd", sd.Request{Width: 64, Height: 64, Batch: 3, Guidance: 7.5}, 3 * 8 * 64 * 64 * 4,
			"the VAE decoder's full-resolution feature map (3 x 8 x 64 x 64, float32)"},
		// SDXL's first level has no attention; level 1 (32x32, 4 heads):
		// 2 x 4 x 1024^2 x 4 B = 32 MiB, below the VAE's 4096^2 x 4 B.
		{"tiny-sdxl", sd.Request{Width: 512, Height: 640, Batch: 1, Guidance: 5}, 64 * 80 * 64 * 80 * 4,
			"the VAE decoder's mid-block attention scores (1 x 5120^2 latent positions, float32)"},
		// SD3, patch 2: 256 px = 32x32 latents = 256 image tokens.
		{"tiny-sd3", sd.Request{Width: 256, Height: 256, Batch: 1, Guidance: 7}, 1024 * 1024 * 4,
			"the VAE decoder's mid-block attention scores (1 x 1024^2 latent positions, float32)"},
		{"tiny-sd3-12-heads", sd.Request{Width: 256, Height: 256, Batch: 1, Guidance: 7}, 2 * 12 * 256 * 256 * 4,
			"the transformer's attention scores (2 x 12 heads x 256^2 image tokens, float32)"},
	} {
		got := pipes[tc.pipe].LargestBuffer(tc.req)
		assert.Equal(t, tc.bytes, got.Bytes, "%s %+v", tc.pipe, tc.req)
		assert.Equal(t, tc.what, got.What, "%s %+v", tc.pipe, tc.req)
	}
}
