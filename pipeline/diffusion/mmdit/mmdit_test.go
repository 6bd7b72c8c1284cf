package mmdit_test

import (
	"math/rand/v2"
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
	"github.com/tputool/tputool/pipeline/diffusion/mmdit"
	"github.com/tputool/tputool/pipeline/testkit/refcheck"
	"github.com/tputool/tputool/pipeline/testkit/sdckpt"
	"github.com/tputool/tputool/pipeline/testkit/sdref"
)

func randn(rng *rand.Rand, n int) []float32 {
	out := make([]float32, n)
	for i := range out {
		out[i] = float32(rng.NormFloat64())
	}
	return out
}

func TestMMDiTMatchesReference(t *testing.T) {
	for _, qk := range []bool{true, false} {
		spec := sdckpt.TinySD3()
		spec.Transformer.QKNorm = qk
		dir := t.TempDir()
		require.NoError(t, sdckpt.Generate(dir, spec))
		b, err := os.ReadFile(filepath.Join(dir, "transformer", "config.json"))
		require.NoError(t, err)
		cfg, err := mmdit.ParseConfig(b)
		require.NoError(t, err)
		ck, err := safetensors.Open(filepath.Join(dir, "transformer"))
		require.NoError(t, err)
		backend, err := backends.NewWithConfig("go:ops_sequential")
		require.NoError(t, err)
		m, err := mmdit.Load(blocks.FromCheckpoint(ck), cfg, backend, blocks.OptionsFor(backend))
		ck.Close()
		require.NoError(t, err)
		rm, err := sdref.LoadMMDiT(filepath.Join(dir, "transformer"))
		require.NoError(t, err)

		// 6x10 latents: 3x5 patches, an off-centre crop of the 16x16 table.
		const B, C, H, W, T = 2, 16, 6, 10, 7
		rng := rand.New(rand.NewPCG(3, 4))
		lat, ctx, pooled := randn(rng, B*C*H*W), randn(rng, B*T*cfg.JointAttentionDim), randn(rng, B*cfg.PooledProjectionDim)
		ts := []float32{1000, 333.5}
		want := rm.Forward(sdref.FromFloat32(lat, B, C, H, W), []float64{1000, 333.5},
			sdref.FromFloat32(ctx, B, T, cfg.JointAttentionDim), sdref.FromFloat32(pooled, B, cfg.PooledProjectionDim))
		in := mmdit.Inputs[*tensors.Tensor]{
			Latents:   tensors.FromFlatDataAndDimensions(lat, B, C, H, W),
			Timesteps: tensors.FromFlatDataAndDimensions(ts, B),
			Context:   tensors.FromFlatDataAndDimensions(ctx, B, T, cfg.JointAttentionDim),
			Pooled:    tensors.FromFlatDataAndDimensions(pooled, B, cfg.PooledProjectionDim),
		}
		x := compile.NewGraphExecutor(backend, compile.ExecutorOptions{})
		for _, eager := range []bool{false, true} {
			var out *tensors.Tensor
			if eager {
				out, err = m.Eager(x, in)
			} else {
				out, err = m.Compiled(x, in)
			}
			require.NoError(t, err)
			require.Equal(t, []int{B, C, H, W}, out.Shape().Dimensions)
			e := refcheck.RelErr(tensors.MustCopyFlatData[float32](out), want.Data)
			t.Logf("qk_norm=%v eager=%v vs float64 reference: %.2e", qk, eager, e)
			require.LessOrEqual(t, e, 1e-4)
		}
		backend.Finalize()
	}
}

func TestMMDiTConfig(t *testing.T) {
	_, err := mmdit.ParseConfig([]byte(`{"dual_attention_layers": [0, 1]}`))
	require.ErrorIs(t, err, errs.ErrUnsupported)
	_, err = mmdit.ParseConfig([]byte(`{"qk_norm": "layer_norm"}`))
	require.ErrorIs(t, err, errs.ErrUnsupported)
	c, err := mmdit.ParseConfig([]byte(`{"num_attention_heads": 24, "attention_head_dim": 64, "caption_projection_dim": 1536}`))
	require.NoError(t, err)
	require.Equal(t, 1536, c.Inner())
	require.Equal(t, 96, c.PosEmbedMaxSize)
}
