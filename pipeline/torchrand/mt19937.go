package torchrand

// mt19937 is the standard 32-bit Mersenne Twister (Matsumoto & Nishimura
// 1998), the engine behind torch's CPU generator
// (ATen/core/MT19937RNGEngine.h). Its output sequence equals
// std::mt19937 seeded with the same 32-bit value.
type mt19937 struct {
	state [mtN]uint32
	next  int // index of the next word to temper; mtN means "twist first"
}

const (
	mtN         = 624
	mtM         = 397
	mtMatrixA   = 0x9908b0df
	mtUpperMask = 0x80000000
	mtLowerMask = 0x7fffffff
)

// seed runs the reference init_genrand on the low 32 bits of s, as torch
// does (`seed & 0xffffffff`).
func (m *mt19937) seed(s uint64) {
	m.state[0] = uint32(s)
	for j := 1; j < mtN; j++ {
		prev := m.state[j-1]
		m.state[j] = 1812433253*(prev^(prev>>30)) + uint32(j)
	}
	m.next = mtN
}

// twist regenerates all 624 state words.
func (m *mt19937) twist() {
	s := &m.state
	for k := 0; k < mtN; k++ {
		y := (s[k] & mtUpperMask) | (s[(k+1)%mtN] & mtLowerMask)
		v := s[(k+mtM)%mtN] ^ (y >> 1)
		if y&1 != 0 {
			v ^= mtMatrixA
		}
		s[k] = v
	}
	m.next = 0
}

// uint32 returns the next tempered 32-bit output.
func (m *mt19937) uint32() uint32 {
	if m.next >= mtN {
		m.twist()
	}
	y := m.state[m.next]
	m.next++
	y ^= y >> 11
	y ^= (y << 7) & 0x9d2c5680
	y ^= (y << 15) & 0xefc60000
	y ^= y >> 18
	return y
}
