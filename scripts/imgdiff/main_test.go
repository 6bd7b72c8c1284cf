package main

import (
	"image"
	"image/color"
	"testing"
)

func TestCompare(t *testing.T) {
	a := image.NewNRGBA(image.Rect(0, 0, 2, 2))
	b := image.NewNRGBA(image.Rect(0, 0, 2, 2))
	for i := range a.Pix {
		v := uint8(100)
		if i%4 == 3 {
			v = 255 // opaque, so colors are not premultiplied
		}
		a.Pix[i], b.Pix[i] = v, v
	}
	d, err := compare(a, b)
	if err != nil || d.MaxAbs != 0 || d.MeanAbs != 0 || d.PSNR != -1 {
		t.Fatalf("equal images: %+v %v", d, err)
	}
	b.Set(1, 1, color.NRGBA{R: 110, G: 100, B: 96, A: 255})
	d, _ = compare(a, b)
	// 16 channels, differences 10 and 4: MSE 116/16, PSNR 39.5 dB.
	if d.MaxAbs != 10 || d.MeanAbs != 14.0/16 || d.PSNR < 39.4 || d.PSNR > 39.6 {
		t.Errorf("one pixel off: %+v", d)
	}
	if _, err := compare(a, image.NewNRGBA(image.Rect(0, 0, 3, 2))); err == nil {
		t.Error("different sizes compared")
	}
}
