package unet_test

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/backends"
	_ "github.com/gomlx/gomlx/backends/simplego"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/stretchr/testify/require"

	"github.com/tputool/tputool/compile"
	"github.com/tputool/tputool/loader/safetensors"
	"github.com/tputool/tputool/pipeline/diffusion/blocks"
	"github.com/tputool/tputool/pipeline/diffusion/unet"
	"github.com/tputool/tputool/pipeline/testkit/refcheck"
	"github.com/tputool/tputool/pipeline/testkit/sdckpt"
	"github.com/tputool/tputool/pipeline/testkit/sdref"
)

func randn(rng *rand.Rand, n int, scale float64) []float32 {
	out := make([]float32, n)
	for i := range out {
		out[i] = float32(rng.NormFloat64() * scale)
	}
	return out
}

func loadUNet(t *testing.T, dir string, backend backends.Backend) *unet.Model {
	b, err := os.ReadFile(filepath.Join(dir, "unet", "config.json"))
	require.NoError(t, err)
	cfg, err := unet.ParseConfig(b)
	require.NoError(t, err)
	r, err := cfg.Resolve()
	require.NoError(t, err)
	ck, err := safetensors.Open(filepath.Join(dir, "unet"))
	require.NoError(t, err)
	defer ck.Close()
	m, err := unet.Load(blocks.FromCheckpoint(ck), r, backend, blocks.Options{})
	require.NoError(t, err)
	return m
}

func TestUNetMatchesReference(t *testing.T) {
	for _, spec := range []sdckpt.Spec{sdckpt.TinySD(), sdckpt.TinySDXL()} {
		t.Run(spec.Name, func(t *testing.T) {
			dir := t.TempDir()
			require.NoError(t, sdckpt.Generate(dir, spec))
			backend := refcheck.GoBackend(t)
			m := loadUNet(t, dir, backend)
			rf, err := sdref.LoadUNet(filepath.Join(dir, "unet"))
			require.NoError(t, err)

			const B, H, W, S = 2, 8, 16, 5
			rng := rand.New(rand.NewPCG(7, 7))
			sample := randn(rng, B*4*H*W, 1)
			ts := []float32{981, 21}
			ctx := randn(rng, B*S*spec.UNet.CrossDim, 1)
			in := unet.Inputs[*tensors.Tensor]{
				Sample:    tensors.FromFlatDataAndDimensions(sample, B, 4, H, W),
				Timesteps: tensors.FromFlatDataAndDimensions(ts, B),
				Context:   tensors.FromFlatDataAndDimensions(ctx, B, S, spec.UNet.CrossDim),
			}
			var textEmbeds, timeIDs *sdref.T
			if spec.XL {
				te := randn(rng, B*spec.UNet.PooledDim, 1)
				ids := []float32{64, 128, 0, 0, 64, 128, 32, 32, 0, 8, 64, 64}
				in.TextEmbeds = tensors.FromFlatDataAndDimensions(te, B, spec.UNet.PooledDim)
				in.TimeIDs = tensors.FromFlatDataAndDimensions(ids, B, 6)
				textEmbeds = sdref.FromFloat32(te, B, spec.UNet.PooledDim)
				timeIDs = sdref.FromFloat32(ids, B, 6)
			}
			want := rf.Forward(sdref.FromFloat32(sample, B, 4, H, W), []float64{981, 21},
				sdref.FromFloat32(ctx, B, S, spec.UNet.CrossDim), textEmbeds, timeIDs)

			x := compile.NewGraphExecutor(backend, compile.ExecutorOptions{})
			defer x.Finalize()
			compiled, err := m.Compiled(x, in)
			require.NoError(t, err)
			got := tensors.MustCopyFlatData[float32](compiled)
			require.Equal(t, []int{B, 4, H, W}, compiled.Shape().Dimensions)
			e := refcheck.RelErr(got, want.Data)
			t.Logf("compiled vs float64 reference: %.2e", e)
			require.LessOrEqual(t, e, 1e-4)

			before := x.Stats().Sum()
			eager, err := m.Eager(x, in)
			require.NoError(t, err)
			first := x.Stats().Sum()
			// Blocks of the same structure and shapes share executables:
			// the first eager pass already reuses some.
			require.Positive(t, first.Hits-before.Hits, "shared block executables")
			t.Logf("eager pass: %d block calls, %d executables", first.Hits-before.Hits+first.Misses-before.Misses, first.Misses-before.Misses)
			gotE := tensors.MustCopyFlatData[float32](eager)
			e = refcheck.RelErr(gotE, want.Data)
			t.Logf("eager vs float64 reference: %.2e", e)
			require.LessOrEqual(t, e, 1e-4)

			// Running again hits the caches: no new executables.
			n := x.Stats().Executables
			_, err = m.Eager(x, in)
			require.NoError(t, err)
			require.Equal(t, n, x.Stats().Executables)
		})
	}
}

func TestUNetStrictLoading(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, sdckpt.Generate(dir, sdckpt.TinySD()))
	b, err := os.ReadFile(filepath.Join(dir, "unet", "config.json"))
	require.NoError(t, err)
	cfg, err := unet.ParseConfig(b)
	require.NoError(t, err)
	r, err := cfg.Resolve()
	require.NoError(t, err)
	ck, err := safetensors.Open(filepath.Join(dir, "unet"))
	require.NoError(t, err)
	defer ck.Close()

	src := &editedSource{Source: blocks.FromCheckpoint(ck),
		drop:   "mid_block.resnets.0.conv1.weight",
		extra:  "mid_block.surprise.weight",
		resize: map[string][]int{"conv_in.bias": {7}}}
	_, err = unet.Load(src, r, nil, blocks.Options{})
	require.Error(t, err)
	msg := err.Error()
	require.Contains(t, msg, `missing tensor "mid_block.resnets.0.conv1.weight"`)
	require.Contains(t, msg, `unused tensor "mid_block.surprise.weight"`)
	require.Contains(t, msg, `tensor "conv_in.bias" has shape [7], want [16]`)
	require.True(t, strings.HasPrefix(msg, "unet: checkpoint does not match its config"), msg)
}

// editedSource drops, adds and reshapes tensors of a source.
type editedSource struct {
	blocks.Source
	drop, extra string
	resize      map[string][]int
}

func (s *editedSource) Names() []string {
	var out []string
	for _, n := range s.Source.Names() {
		if n != s.drop {
			out = append(out, n)
		}
	}
	return append(out, s.extra)
}

func (s *editedSource) Shape(name string) ([]int, bool) {
	switch {
	case name == s.drop:
		return nil, false
	case name == s.extra:
		return []int{1}, true
	case s.resize[name] != nil:
		return s.resize[name], true
	}
	return s.Source.Shape(name)
}
