package kernels

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

func BenchmarkZZSmallMBF16(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, sz := range [][3]int{{8, 2048, 768}, {8, 768, 2048}, {4, 2048, 768}, {16, 2048, 768}, {32, 2048, 768}} {
		m, n, k := sz[0], sz[1], sz[2]
		a := randMat(r, m, k, k)
		bw := make([]uint16, n*k)
		for i := range bw {
			bw[i] = uint16(0x3c00 + r.IntN(512))
		}
		c := make([]float32, m*n)
		b.Run(fmt.Sprintf("m%d_%dx%d", m, n, k), func(b *testing.B) {
			for b.Loop() {
				GemmBF16NT(m, n, k, a, k, bw, k, c, n)
			}
			b.ReportMetric(float64(2*m*n*k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOPS")
		})
	}
}
