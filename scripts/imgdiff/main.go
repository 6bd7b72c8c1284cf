// Command imgdiff compares two images of the same size pixel by pixel and
// prints one JSON object: the largest and the mean absolute difference of
// the 8-bit channels (R, G, B, A), the PSNR in dB and whether the files are
// byte for byte equal. It exits 1 when a difference is over the limits, 2
// on bad input. scripts/device-check.sh uses it to compare the images of
// two devices.
//
//	go run ./scripts/imgdiff -max 16 -mean 1 a.png b.png
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"image"
	_ "image/png"
	"math"
	"os"
)

// Diff is the comparison of two images.
type Diff struct {
	A, B      string
	Width     int     `json:"width"`
	Height    int     `json:"height"`
	MaxAbs    int     `json:"max_abs"`
	MeanAbs   float64 `json:"mean_abs"`
	PSNR      float64 `json:"psnr_db"` // +Inf (printed as -1) when equal
	SameBytes bool    `json:"same_bytes"`
	OK        bool    `json:"ok"`
}

func load(path string) ([]byte, image.Image, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	img, _, err := image.Decode(bytes.NewReader(b))
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	return b, img, nil
}

// compare computes the differences of two decoded images.
func compare(a, b image.Image) (Diff, error) {
	ra, rb := a.Bounds(), b.Bounds()
	if ra.Dx() != rb.Dx() || ra.Dy() != rb.Dy() {
		return Diff{}, fmt.Errorf("sizes differ: %dx%d and %dx%d", ra.Dx(), ra.Dy(), rb.Dx(), rb.Dy())
	}
	d := Diff{Width: ra.Dx(), Height: ra.Dy()}
	var sum, sq float64
	n := 0
	for y := 0; y < ra.Dy(); y++ {
		for x := 0; x < ra.Dx(); x++ {
			c1 := rgba8(a.At(ra.Min.X+x, ra.Min.Y+y).RGBA())
			c2 := rgba8(b.At(rb.Min.X+x, rb.Min.Y+y).RGBA())
			for k := range c1 {
				v := c1[k] - c2[k]
				if v < 0 {
					v = -v
				}
				d.MaxAbs = max(d.MaxAbs, v)
				sum += float64(v)
				sq += float64(v * v)
				n++
			}
		}
	}
	if n > 0 {
		d.MeanAbs = sum / float64(n)
		mse := sq / float64(n)
		d.PSNR = -1
		if mse > 0 {
			d.PSNR = 10 * math.Log10(255*255/mse)
		}
	}
	return d, nil
}

func rgba8(r, g, b, a uint32) [4]int {
	return [4]int{int(r >> 8), int(g >> 8), int(b >> 8), int(a >> 8)}
}

func main() {
	maxAbs := flag.Int("max", 16, "largest allowed difference of one channel (0-255)")
	meanAbs := flag.Float64("mean", 1.0, "largest allowed mean difference over all channels")
	flag.Parse()
	if flag.NArg() != 2 {
		fmt.Fprintln(os.Stderr, "usage: imgdiff [-max N] [-mean X] A.png B.png")
		os.Exit(2)
	}
	ba, a, err := load(flag.Arg(0))
	if err != nil {
		fmt.Fprintln(os.Stderr, "imgdiff:", err)
		os.Exit(2)
	}
	bb, b, err := load(flag.Arg(1))
	if err != nil {
		fmt.Fprintln(os.Stderr, "imgdiff:", err)
		os.Exit(2)
	}
	d, err := compare(a, b)
	if err != nil {
		fmt.Fprintf(os.Stderr, "imgdiff: %s and %s: %v\n", flag.Arg(0), flag.Arg(1), err)
		os.Exit(1)
	}
	d.A, d.B = flag.Arg(0), flag.Arg(1)
	d.SameBytes = bytes.Equal(ba, bb)
	d.OK = d.MaxAbs <= *maxAbs && d.MeanAbs <= *meanAbs
	out, _ := json.Marshal(d)
	fmt.Println(string(out))
	if !d.OK {
		os.Exit(1)
	}
}
