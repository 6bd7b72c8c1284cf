package sdckpt

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/loader/safetensors"
)

func TestGenerateLayout(t *testing.T) {
	dir := t.TempDir()
	spec := TinySDXL()
	spec.DType = "F16"
	spec.Variant = "fp16"
	require.NoError(t, Generate(dir, spec))
	mi, err := config.ReadModelIndex(filepath.Join(dir, "model_index.json"))
	require.NoError(t, err)
	require.Equal(t, "StableDiffusionXLPipeline", mi.ClassName)
	for _, c := range []string{"unet", "vae", "text_encoder", "text_encoder_2"} {
		ck, err := safetensors.OpenDir(filepath.Join(dir, c), "fp16")
		require.NoError(t, err, c)
		info, ok := ck.Info(ck.Names()[0])
		require.True(t, ok)
		require.Equal(t, safetensors.F16, info.DType)
		ck.Close()
	}
	for _, f := range []string{"vocab.json", "merges.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"} {
		_, err := os.Stat(filepath.Join(dir, "tokenizer_2", f))
		require.NoError(t, err, f)
	}
	// Same spec, same bytes.
	dir2 := t.TempDir()
	require.NoError(t, Generate(dir2, spec))
	a, _ := os.ReadFile(filepath.Join(dir, "unet", "diffusion_pytorch_model.fp16.safetensors"))
	b, _ := os.ReadFile(filepath.Join(dir2, "unet", "diffusion_pytorch_model.fp16.safetensors"))
	require.Equal(t, a, b)
}

func TestVocabularyAndSizes(t *testing.T) {
	vocab, merges := tinyVocab()
	require.Len(t, merges, len(tinyMerges), "every merge is made of existing symbols")
	require.Equal(t, "!", vocab[0], "CLIP's first byte symbol")
	require.Equal(t, "<|endoftext|>", vocab[len(vocab)-1])
	seen := map[string]bool{}
	for _, v := range vocab {
		require.False(t, seen[v], "duplicate %q", v)
		seen[v] = true
	}
	require.True(t, strings.HasSuffix(vocab[256], "</w>"))

	n := NumParameters(SD100M().UNet)
	require.Greater(t, n, int64(95e6))
	require.Less(t, n, int64(110e6))
}
