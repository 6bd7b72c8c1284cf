package clip

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tputool/tputool/internal/errs"
)

func TestParseConfig(t *testing.T) {
	c, err := ParseConfig([]byte(`{"architectures": ["CLIPTextModelWithProjection"], "hidden_size": 1280,
		"num_attention_heads": 20, "num_hidden_layers": 32, "hidden_act": "gelu", "projection_dim": 1280,
		"eos_token_id": 49407}`))
	require.NoError(t, err)
	require.True(t, c.WithProjection)
	require.Equal(t, 49408, c.VocabSize)
	require.Equal(t, 77, c.MaxPositionEmbeddings)
	require.Equal(t, 1e-5, c.LayerNormEps)

	_, err = ParseConfig([]byte(`{"architectures": ["T5EncoderModel"]}`))
	require.ErrorIs(t, err, errs.ErrUnsupported)
	_, err = ParseConfig([]byte(`{"hidden_act": "relu6"}`))
	require.ErrorIs(t, err, errs.ErrUnsupported)
	_, err = ParseConfig([]byte(`{"hidden_size": 100, "num_attention_heads": 3}`))
	require.ErrorContains(t, err, "not divisible")
}

func TestEOSPositions(t *testing.T) {
	ids := [][]int{{49406, 320, 49407, 49407}, {49406, 49407, 0, 0}}
	eos := 49407
	c := &Config{EosTokenID: &eos}
	require.Equal(t, []float32{0, 0, 1, 0, 0, 1, 0, 0}, c.EOSPositions(ids))
	legacy := 2 // transformers' legacy rule: the first position of the largest id
	c = &Config{EosTokenID: &legacy}
	require.Equal(t, []float32{0, 0, 1, 0, 0, 1, 0, 0}, c.EOSPositions(ids))
	require.Equal(t, []float32{1, 0}, c.EOSPositions([][]int{{5, 3}}))
}
