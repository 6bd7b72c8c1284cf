package pngmeta

import (
	"bytes"
	"image"
	"image/color"
	"image/png"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestEncodeRoundTrip(t *testing.T) {
	img := image.NewNRGBA(image.Rect(0, 0, 3, 2))
	img.SetNRGBA(1, 1, color.NRGBA{R: 200, G: 10, B: 30, A: 255})
	meta := []Text{{Key: "prompt", Value: "a red fox\nin snow"}, {Key: "negative_prompt", Value: ""},
		{Key: "note", Value: "café ☕"}}
	var a, b bytes.Buffer
	require.NoError(t, Encode(&a, img, meta))
	require.NoError(t, Encode(&b, img, meta))
	require.Equal(t, a.Bytes(), b.Bytes(), "deterministic bytes")

	got, err := Read(a.Bytes())
	require.NoError(t, err)
	require.Equal(t, meta, got)
	decoded, err := png.Decode(bytes.NewReader(a.Bytes()))
	require.NoError(t, err)
	require.Equal(t, color.NRGBA{R: 200, G: 10, B: 30, A: 255}, color.NRGBAModel.Convert(decoded.At(1, 1)))

	// Chunks sit right after IHDR, before the image data.
	require.Less(t, bytes.Index(a.Bytes(), []byte("tEXt")), bytes.Index(a.Bytes(), []byte("IDAT")))
	require.Contains(t, a.String(), "iTXt")

	// A corrupted chunk is detected.
	bad := append([]byte(nil), a.Bytes()...)
	bad[bytes.Index(bad, []byte("red"))] = 'R'
	_, err = Read(bad)
	require.ErrorContains(t, err, "CRC")

	require.Error(t, Encode(&a, img, []Text{{Key: "", Value: "x"}}))
	require.Error(t, Encode(&a, img, []Text{{Key: "k", Value: "a\x00b"}}))
}
