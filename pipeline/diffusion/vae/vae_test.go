package vae_test

import (
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/gomlx/gomlx/backends"
	_ "github.com/gomlx/gomlx/backends/simplego"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/stretchr/testify/require"

	"github.com/tputool/tputool/compile"
	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/loader/safetensors"
	"github.com/tputool/tputool/pipeline/diffusion/blocks"
	"github.com/tputool/tputool/pipeline/diffusion/vae"
	"github.com/tputool/tputool/pipeline/testkit/refcheck"
	"github.com/tputool/tputool/pipeline/testkit/sdckpt"
	"github.com/tputool/tputool/pipeline/testkit/sdref"
)

func TestVAEEncoderAndDecoderMatchReference(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, sdckpt.Generate(dir, sdckpt.TinySD()))
	b, err := os.ReadFile(filepath.Join(dir, "vae", "config.json"))
	require.NoError(t, err)
	cfg, err := vae.ParseConfig(b)
	require.NoError(t, err)
	require.Equal(t, 8, cfg.ScaleFactor())
	ck, err := safetensors.Open(filepath.Join(dir, "vae"))
	require.NoError(t, err)
	defer ck.Close()
	backend, err := backends.NewWithConfig("go:ops_sequential")
	require.NoError(t, err)
	defer backend.Finalize()
	m, err := vae.Load(blocks.FromCheckpoint(ck), cfg, backend, true, blocks.OptionsFor(backend))
	require.NoError(t, err)
	require.True(t, m.HasEncoder())
	rv, err := sdref.LoadVAE(filepath.Join(dir, "vae"))
	require.NoError(t, err)

	img := make([]float32, 1*3*16*24)
	for i := range img {
		img[i] = float32(math.Cos(float64(i) * 0.11))
	}
	wantEnc := rv.Encode(sdref.FromFloat32(img, 1, 3, 16, 24))
	x := compile.NewGraphExecutor(backend, compile.ExecutorOptions{})
	defer x.Finalize()
	for _, eager := range []bool{false, true} {
		got, err := m.Encode(x, tensors.FromFlatDataAndDimensions(img, 1, 3, 16, 24), eager)
		require.NoError(t, err)
		require.Equal(t, []int{1, 8, 2, 3}, got.Shape().Dimensions)
		e := refcheck.RelErr(tensors.MustCopyFlatData[float32](got), wantEnc.Data)
		t.Logf("encode eager=%v: %.2e", eager, e)
		require.LessOrEqual(t, e, 1e-4)
	}

	// Decoder-only loading checks the encoder's tensors but does not load them.
	d, err := vae.Load(blocks.FromCheckpoint(ck), cfg, backend, false, blocks.OptionsFor(backend))
	require.NoError(t, err)
	require.False(t, d.HasEncoder())
	_, err = d.Encode(x, tensors.FromFlatDataAndDimensions(img, 1, 3, 16, 24), false)
	require.Error(t, err)
	require.Less(t, len(d.Weights.Params)-countLoaded(d.Weights), len(d.Weights.Params))
	require.Positive(t, len(d.Weights.Params)-countLoaded(d.Weights), "encoder tensors are skipped")
}

func countLoaded(w *blocks.Weights) int {
	n := 0
	for _, t := range w.Tensors {
		if t != nil {
			n++
		}
	}
	return n
}

func TestVAEConfig(t *testing.T) {
	c, err := vae.ParseConfig([]byte(`{"_class_name": "AutoencoderKL", "block_out_channels": [128, 256, 512, 512],
		"down_block_types": ["DownEncoderBlock2D","DownEncoderBlock2D","DownEncoderBlock2D","DownEncoderBlock2D"],
		"up_block_types": ["UpDecoderBlock2D","UpDecoderBlock2D","UpDecoderBlock2D","UpDecoderBlock2D"],
		"layers_per_block": 2, "latent_channels": 4, "scaling_factor": 0.13025,
		"latents_mean": null, "force_upcast": true}`))
	require.NoError(t, err)
	require.Equal(t, 8, c.ScaleFactor())
	require.Equal(t, 32, c.NormNumGroups)
	require.InDelta(t, 0.13025, *c.ScalingFactor, 0)
	require.Nil(t, c.LatentsMean)

	_, err = vae.ParseConfig([]byte(`{"_class_name": "AutoencoderTiny"}`))
	require.ErrorIs(t, err, errs.ErrUnsupported)
	// latents_mean without latents_std loads, as in diffusers (the SDXL
	// pipeline then divides by scaling_factor only); a length other than
	// latent_channels does not.
	m, err := vae.ParseConfig([]byte(`{"block_out_channels": [32], "latents_mean": [0,0,0,0]}`))
	require.NoError(t, err)
	require.Nil(t, m.LatentsStd)
	_, err = vae.ParseConfig([]byte(`{"block_out_channels": [32], "latents_mean": [1,2], "latents_std": [2,4,1,1]}`))
	require.ErrorContains(t, err, "latents_mean has 2 entries, want latent_channels=4")
}
