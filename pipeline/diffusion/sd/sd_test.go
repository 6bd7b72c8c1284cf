package sd_test

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"

	_ "github.com/gomlx/gomlx/backends/simplego"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/stretchr/testify/require"

	"github.com/tputool/tputool/compile"
	"github.com/tputool/tputool/pipeline/diffusion/pngmeta"
	"github.com/tputool/tputool/pipeline/diffusion/sd"
	"github.com/tputool/tputool/pipeline/testkit/refcheck"
	"github.com/tputool/tputool/pipeline/testkit/sdckpt"
	"github.com/tputool/tputool/pipeline/testkit/sdref"
	"github.com/tputool/tputool/pipeline/torchrand"
)

// goOptions are the options the tests load with: the go backend and a
// compile.GraphExecutor on it, both freed when the test ends.
func goOptions(t testing.TB) sd.Options {
	be := refcheck.GoBackend(t)
	x := compile.NewGraphExecutor(be, compile.ExecutorOptions{})
	t.Cleanup(x.Finalize)
	return sd.Options{Backend: be, Executor: x}
}

func load(t *testing.T, spec sdckpt.Spec, opts sd.Options) *sd.Pipeline {
	t.Helper()
	return loadEdited(t, spec, opts, nil)
}

func pngBytes(t *testing.T, res *sd.Result) [][]byte {
	var out [][]byte
	for _, img := range res.Images {
		var buf bytes.Buffer
		require.NoError(t, pngmeta.Encode(&buf, img, []pngmeta.Text{{Key: "prompt", Value: "a red fox"}}))
		out = append(out, buf.Bytes())
	}
	return out
}

func maxRel(a, b []float32) float64 {
	var num, den float64
	for i := range a {
		num = math.Max(num, math.Abs(float64(a[i])-float64(b[i])))
		den = math.Max(den, math.Abs(float64(b[i])))
	}
	return num / den
}

func TestSDDeterministicAndModes(t *testing.T) {
	for _, spec := range []sdckpt.Spec{sdckpt.TinySD(), sdckpt.TinySDXL()} {
		t.Run(spec.Name, func(t *testing.T) {
			p := load(t, spec, sd.Options{})
			req := sd.Request{Prompt: "a red fox in the sky", Steps: 3, Guidance: 7.5, Width: 64, Height: 64, Batch: 1, Seed: 42}
			ctx := context.Background()

			a, err := p.Generate(ctx, req)
			require.NoError(t, err)
			require.True(t, a.NewSize)
			require.Positive(t, a.Timings.Compiles)
			require.Len(t, a.Images, 1)
			require.Equal(t, 64, a.Images[0].Bounds().Dx())

			// Same seed: same bytes, and the executables are reused.
			b, err := p.Generate(ctx, req)
			require.NoError(t, err)
			require.False(t, b.NewSize)
			require.Zero(t, b.Timings.Compiles, "second call at the same size compiles nothing")
			require.Equal(t, pngBytes(t, a), pngBytes(t, b))

			// Different seed: a different image.
			req2 := req
			req2.Seed = 43
			c, err := p.Generate(ctx, req2)
			require.NoError(t, err)
			require.NotEqual(t, pngBytes(t, a), pngBytes(t, c))

			// Eager equals compiled.
			req3 := req
			req3.Eager = true
			e, err := p.Generate(ctx, req3)
			require.NoError(t, err)
			rel := maxRel(e.Latents, a.Latents)
			t.Logf("eager vs compiled latents: %.2e", rel)
			require.LessOrEqual(t, rel, 1e-4)
		})
	}
}

func TestSDInitialLatentsMatchTorchrand(t *testing.T) {
	p := load(t, sdckpt.TinySDXL(), sd.Options{})
	req := sd.Request{Prompt: "fox", Steps: 2, Guidance: 3, Width: 64, Height: 32, Batch: 2, Seed: 1234}
	r, err := p.Generate(context.Background(), req)
	require.NoError(t, err)
	s, err := p.NewScheduler("")
	require.NoError(t, err)
	require.NoError(t, s.SetTimesteps(2))
	// randn_tensor((2, 4, 32/8, 64/8), generator=torch.Generator().manual_seed(1234)) * init_noise_sigma
	want := torchrand.NewGenerator(1234).Randn(2, 4, 4, 8)
	sigma := float32(s.InitNoiseSigma())
	require.Greater(t, sigma, float32(1), "Euler's init_noise_sigma")
	for i := range want {
		want[i] *= sigma
	}
	require.Equal(t, []int{2, 4, 4, 8}, r.LatentShape)
	require.Equal(t, want, r.InitialLatents)
}

func TestSDBatchAndNegative(t *testing.T) {
	var warnings []string
	p := load(t, sdckpt.TinySD(), sd.Options{Warn: func(format string, args ...any) {
		warnings = append(warnings, fmt.Sprintf(format, args...))
	}})
	ctx := context.Background()
	req := sd.Request{Prompt: "a blue dog", NegativePrompt: "cat", HasNegative: true, Steps: 2, Guidance: 5,
		Width: 64, Height: 64, Batch: 2, Seed: 1}
	r, err := p.Generate(ctx, req)
	require.NoError(t, err)
	require.Len(t, r.Images, 2)
	require.NotEqual(t, r.Images[0].Pix, r.Images[1].Pix, "batch elements get different noise")

	// The first image of a batch starts from the first half of the batch
	// noise, so with guidance off it is not the single-image result
	// (diffusers draws the whole batch from one generator).
	req.Batch = 1
	r1, err := p.Generate(ctx, req)
	require.NoError(t, err)
	require.True(t, r1.NewSize, "a different UNet batch is a new executable")

	// A new size compiles again.
	req.Width, req.Height = 32, 32
	r2, err := p.Generate(ctx, req)
	require.NoError(t, err)
	require.True(t, r2.NewSize)
	require.Positive(t, r2.Timings.Compiles)
	require.Equal(t, 32, r2.Images[0].Bounds().Dx())
	require.Len(t, warnings, 2, "the batch change and the size change each warn")
	require.Contains(t, warnings[1], "new size 32x32")

	// Back to a size already compiled: no compilation, no warning.
	req.Width, req.Height = 64, 64
	r3, err := p.Generate(ctx, req)
	require.NoError(t, err)
	require.False(t, r3.NewSize)
	require.Zero(t, r3.Timings.Compiles)
	require.Len(t, warnings, 2)
}

func TestSDValidate(t *testing.T) {
	p := load(t, sdckpt.TinySD(), sd.Options{})
	for _, req := range []sd.Request{
		{Steps: 2, Batch: 1, Width: 60, Height: 64},
		{Steps: 0, Batch: 1, Width: 64, Height: 64},
		{Steps: 2, Batch: 0, Width: 64, Height: 64},
	} {
		_, err := p.Generate(context.Background(), req)
		require.Error(t, err)
	}
	_, err := p.Generate(context.Background(), sd.Request{Steps: 1, Batch: 1, Width: 64, Height: 64, Scheduler: "nope"})
	require.ErrorContains(t, err, "unknown scheduler")
	// Cancelled context.
	cctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = p.Generate(cctx, sd.Request{Steps: 2, Batch: 1, Width: 64, Height: 64})
	require.ErrorIs(t, err, context.Canceled)
}

func TestSDTokenizerFromVocabAndMerges(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, sdckpt.Generate(dir, sdckpt.TinySD()))
	withJSON, err := sd.Load(dir, goOptions(t))
	require.NoError(t, err)
	defer withJSON.Close()
	require.NoError(t, os.Remove(filepath.Join(dir, "tokenizer", "tokenizer.json")))
	without, err := sd.Load(dir, goOptions(t))
	require.NoError(t, err)
	defer without.Close()
	req := sd.Request{Prompt: "The red fox, and the blue sky!", Steps: 1, Guidance: 1, Width: 32, Height: 32, Batch: 1, Seed: 3}
	a, err := withJSON.Generate(context.Background(), req)
	require.NoError(t, err)
	b, err := without.Generate(context.Background(), req)
	require.NoError(t, err)
	require.Equal(t, a.Images[0].Pix, b.Images[0].Pix)
}

func TestSDLoadErrors(t *testing.T) {
	dir := t.TempDir()
	_, err := sd.Load(dir, goOptions(t))
	require.ErrorContains(t, err, "model_index.json")
	_, err = sd.Load(dir, sd.Options{Backend: refcheck.GoBackend(t)})
	require.ErrorContains(t, err, "no executor")

	require.NoError(t, sdckpt.Generate(dir, sdckpt.TinySD()))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "model_index.json"),
		[]byte(`{"_class_name": "KandinskyPipeline", "unet": ["diffusers", "UNet2DConditionModel"]}`), 0o644))
	_, err = sd.Load(dir, goOptions(t))
	require.ErrorContains(t, err, "KandinskyPipeline")
}

func TestSDFP16Variant(t *testing.T) {
	spec := sdckpt.TinySD()
	spec.DType = "F16"
	spec.Variant = "fp16"
	p := load(t, spec, sd.Options{})
	r, err := p.Generate(context.Background(), sd.Request{Prompt: "fox", Steps: 1, Guidance: 1, Width: 32, Height: 32, Batch: 1, Seed: 5})
	require.NoError(t, err)
	require.Len(t, r.Images, 1)
}

// TestVAEAndTextEncoderMatchReference checks the pipeline's VAE decoder and
// text encoders against the float64 reference.
func TestVAEAndTextEncoderMatchReference(t *testing.T) {
	for _, spec := range []sdckpt.Spec{sdckpt.TinySD(), sdckpt.TinySDXL(), sdckpt.TinySD3()} {
		t.Run(spec.Name, func(t *testing.T) {
			dir := t.TempDir()
			require.NoError(t, sdckpt.Generate(dir, spec))
			p, err := sd.Load(dir, goOptions(t))
			require.NoError(t, err)
			defer p.Close()

			ids := [][]int{{546, 320, 520, 547, 547, 547, 547}, {546, 513, 537, 524, 540, 547, 0}}
			encoders := []string{"text_encoder"}
			if spec.XL || spec.SD3 {
				encoders = append(encoders, "text_encoder_2")
			}
			for i, name := range encoders {
				rc, err := sdref.LoadCLIP(filepath.Join(dir, name))
				require.NoError(t, err)
				last, penult, pooled := rc.Forward(ids)
				for _, eager := range []bool{false, true} {
					out, err := p.EncodeText(i, ids, eager)
					require.NoError(t, err)
					for _, c := range []struct {
						name string
						got  []float32
						want *sdref.T
					}{
						{"last_hidden_state", flat(out.LastHidden), last},
						{"hidden_states[-2]", flat(out.Penultimate), penult},
						{"pooled", flat(out.Pooled), pooled},
					} {
						e := refcheck.RelErr(c.got, c.want.Data)
						t.Logf("%s %s eager=%v: %.2e", name, c.name, eager, e)
						require.LessOrEqual(t, e, 1e-4, "%s %s", name, c.name)
					}
				}
			}

			rv, err := sdref.LoadVAE(filepath.Join(dir, "vae"))
			require.NoError(t, err)
			lc := p.LatentChannels()
			z := make([]float32, 2*lc*4*6)
			for i := range z {
				z[i] = float32(math.Sin(float64(i)*0.37)) * 1.5
			}
			want := rv.Decode(sdref.FromFloat32(z, 2, lc, 4, 6))
			for _, eager := range []bool{false, true} {
				got, err := p.VAE.Decode(p.Executor(), tensorOf(z, 2, lc, 4, 6), eager)
				require.NoError(t, err)
				require.Equal(t, want.Shape, got.Shape().Dimensions)
				e := refcheck.RelErr(flat(got), want.Data)
				t.Logf("vae decode eager=%v: %.2e", eager, e)
				require.LessOrEqual(t, e, 1e-4)
			}
		})
	}
}

func flat(t *tensors.Tensor) []float32 { return tensors.MustCopyFlatData[float32](t) }

func tensorOf(v []float32, dims ...int) *tensors.Tensor {
	return tensors.FromFlatDataAndDimensions(v, dims...)
}

func TestSD3Pipeline(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, sdckpt.Generate(dir, sdckpt.TinySD3()))
	p, err := sd.Load(dir, goOptions(t))
	require.NoError(t, err)
	defer p.Close()
	require.True(t, p.SD3)
	require.Equal(t, 7.0, p.DefaultGuidance())
	require.Equal(t, 16, p.SizeMultiple())
	w, h := p.DefaultSize()
	require.Equal(t, 64, w)
	require.Equal(t, 64, h)

	ctx := context.Background()
	req := sd.Request{Prompt: "a red fox", Steps: 3, Guidance: 7, Width: 64, Height: 32, Batch: 1, Seed: 11}
	a, err := p.Generate(ctx, req)
	require.NoError(t, err)
	require.Equal(t, "FlowMatchEulerDiscreteScheduler", a.Scheduler)
	require.Equal(t, []int{1, 16, 4, 8}, a.LatentShape)
	require.Equal(t, torchrand.NewGenerator(11).Randn(1, 16, 4, 8), a.InitialLatents, "flow matching: init_noise_sigma is 1")
	b, err := p.Generate(ctx, req)
	require.NoError(t, err)
	require.Equal(t, pngBytes(t, a), pngBytes(t, b))
	req.Eager = true
	e, err := p.Generate(ctx, req)
	require.NoError(t, err)
	require.LessOrEqual(t, maxRel(e.Latents, a.Latents), 1e-4)
	req.Eager = false
	req.Seed = 12
	c, err := p.Generate(ctx, req)
	require.NoError(t, err)
	require.NotEqual(t, pngBytes(t, a), pngBytes(t, c))

	// Too large for pos_embed_max_size 16: (16 patches * 2) * 8 = 256 pixels.
	_, err = p.Generate(ctx, sd.Request{Prompt: "x", Steps: 1, Batch: 1, Width: 272, Height: 64})
	require.ErrorContains(t, err, "at most 256x256")

	// Conditioning: [uncond; cond] rows of 77 CLIP tokens (penultimate
	// states of both encoders side by side, zero-padded to
	// joint_attention_dim 48) followed by 256 zero T5 tokens; pooled is both
	// projections concatenated.
	ctxData, shape, pooled, err := p.Conditioning(sd.Request{Prompt: "a red fox", Steps: 1, Guidance: 7, Width: 64, Height: 64, Batch: 1})
	require.NoError(t, err)
	require.Equal(t, []int{2, 77 + 256, 48}, shape)
	require.Len(t, pooled, 2*32)
	ids := [][]int{{546, 320, 520, 323, 532, 547}}
	for len(ids[0]) < 77 {
		ids[0] = append(ids[0], 547)
	}
	o1, err := p.EncodeText(0, ids, false)
	require.NoError(t, err)
	pen1 := flat(o1.Penultimate)
	row := ctxData[333*48 : 2*333*48] // the conditional row (after the unconditional one)
	for tok := 0; tok < 333; tok++ {
		for f := 0; f < 48; f++ {
			v := row[tok*48+f]
			switch {
			case tok >= 77 || f >= 32:
				require.Zero(t, v, "token %d feature %d", tok, f)
			case f < 16:
				require.InDelta(t, pen1[tok*16+f], v, 1e-6)
			}
		}
	}
}
