package tpu

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tputool/tputool/internal/errs"
)

func fitByGen(t *testing.T, req FitRequest) map[string]FitResult {
	t.Helper()
	rs, err := FitAll(req)
	require.NoError(t, err)
	require.Len(t, rs, len(Generations()))
	out := map[string]FitResult{}
	for _, r := range rs {
		out[r.Generation] = r
	}
	return out
}

// An 8B-parameter model in bf16 (16e9 bytes) with a 2 GiB KV cache and the
// default 15% headroom: total = ceil((16e9 + 2147483648) * 1.15)
// = ceil(20869606195.2) = 20869606196 bytes.
func TestFit8B(t *testing.T) {
	const total = int64(20869606196)
	req := FitRequest{WeightBytes: 16e9, StateBytes: 2 << 30, NumHeads: 32, NumKVHeads: 8}
	got := fitByGen(t, req)
	for gen, want := range map[string]FitResult{
		// v4's smallest slice is 4 chips: 20869606196/4 = 5217401549 <= 32 GiB.
		"v4": {Chips: 4, Hosts: 1, TP: 4, PerChipBytes: 5217401549, HBMBytes: 32 << 30},
		// v5e: 1 chip needs 19.4 GiB > 16 GiB; 4 chips need 4.9 GiB each.
		"v5e": {Chips: 4, Hosts: 1, TP: 4, PerChipBytes: 5217401549, HBMBytes: 16 << 30},
		"v5p": {Chips: 4, Hosts: 1, TP: 4, PerChipBytes: 5217401549, HBMBytes: 95 << 30},
		// v6e: 19.4 GiB fits one 32 GiB chip.
		"v6e": {Chips: 1, Hosts: 1, TP: 1, PerChipBytes: total, HBMBytes: 32 << 30},
		"v7x": {Chips: 1, Hosts: 1, TP: 1, PerChipBytes: total, HBMBytes: 192 << 30},
	} {
		want.Generation, want.Fits, want.TotalBytes = gen, true, total
		assert.Equal(t, want, got[gen], gen)
	}

	// With only 2 KV heads, 4 v5e chips split 4 ways with the KV heads
	// and caches whole on each: ceil((16e9/4 + 2 GiB) * 1.15) =
	// 7069606196 bytes per chip.
	req.NumKVHeads = 2
	r := fitByGen(t, req)["v5e"]
	assert.Equal(t, FitResult{Generation: "v5e", Fits: true, Chips: 4, Hosts: 1, TP: 4,
		TotalBytes: total, PerChipBytes: 7069606196, HBMBytes: 16 << 30}, r)
	// With 1e9 of those weights in the k/v projections, whole on each
	// chip too: ceil((15e9/4 + 1e9 + 2 GiB) * 1.15) = 7932106196.
	req.KVWeightBytes = 1e9
	r = fitByGen(t, req)["v5e"]
	assert.Equal(t, 4, r.TP)
	assert.Equal(t, int64(7932106196), r.PerChipBytes)
	// A state so large that holding it whole on every chip costs more
	// than splitting fewer ways: 12e9 of KV cache, 2 KV heads, 4 chips:
	// TP 4 needs (16e9/4 + 12e9) * 1.15 = 18.4e9 > 16 GiB, TP 2
	// 28e9/2 * 1.15 = 16.1e9, which fits.
	big := FitRequest{WeightBytes: 16e9, StateBytes: 12e9, NumHeads: 32, NumKVHeads: 2}
	r = fitByGen(t, big)["v5e"]
	assert.Equal(t, FitResult{Generation: "v5e", Fits: true, Chips: 4, Hosts: 1, TP: 2,
		TotalBytes: 32200000000, PerChipBytes: 161e8, HBMBytes: 16 << 30}, r)
	// 100e9 of state fits no v5e slice; the least share is TP 2's.
	big.StateBytes = 100e9
	r = fitByGen(t, big)["v5e"]
	assert.False(t, r.Fits)
	assert.Equal(t, 2, r.TP)
	assert.Contains(t, r.Reason, "at tensor-parallel degree 2, the least share of the degrees the head counts allow")

	// State every chip holds whole at any degree (recurrent state, other
	// layers' caches): 8 GiB of the 12e9, at TP 4 over 8 KV heads:
	// ceil(((16e9 + 12e9 - 8 GiB) / 4 + 8 GiB) * 1.15) = 15458818586.
	whole := FitRequest{WeightBytes: 16e9, StateBytes: 12e9, WholeStateBytes: 8 << 30, NumHeads: 32, NumKVHeads: 8}
	r = fitByGen(t, whole)["v5e"]
	assert.Equal(t, 4, r.TP)
	assert.Equal(t, int64(15458818586), r.PerChipBytes)
	// Nothing to hold: every allowed degree ties at 0, and the larger
	// one is taken.
	r = fitByGen(t, FitRequest{NumHeads: 8, NumKVHeads: 2})["v5p"]
	assert.Equal(t, 4, r.TP)

}

// A 70B model in bf16 (140e9 bytes), no KV cache, 25% headroom:
// total = 175e9 bytes exactly.
func TestFit70B(t *testing.T) {
	req := FitRequest{WeightBytes: 140e9, Headroom: new(0.25), NumHeads: 64, NumKVHeads: 8}
	got := fitByGen(t, req)

	// v4: 4 chips need 43.75e9 > 34359738368; 8 chips need 21.875e9.
	assert.Equal(t, FitResult{Generation: "v4", Fits: true, Chips: 8, Hosts: 2, TP: 8,
		TotalBytes: 175e9, PerChipBytes: 21875e6, HBMBytes: 32 << 30}, got["v4"])
	// v5p: 43.75e9 <= 95 GiB on the smallest (4-chip) slice.
	assert.Equal(t, 4, got["v5p"].Chips)
	assert.Equal(t, int64(4375e7), got["v5p"].PerChipBytes)
	// v6e: 8 chips, one host.
	assert.Equal(t, FitResult{Generation: "v6e", Fits: true, Chips: 8, Hosts: 1, TP: 8,
		TotalBytes: 175e9, PerChipBytes: 21875e6, HBMBytes: 32 << 30}, got["v6e"])
	// v7x: 175e9 <= 192 GiB = 206158430208 on one chip.
	assert.Equal(t, 1, got["v7x"].Chips)

	// v5e: 16 chips (10.9375e9 each) on 4 hosts, TP 16 over the 8 KV
	// heads (each chip holds them all; there is no state to repeat), as
	// without head constraints.
	want := FitResult{Generation: "v5e", Fits: true, Chips: 16, Hosts: 4, TP: 16,
		TotalBytes: 175e9, PerChipBytes: 109375e5, HBMBytes: 16 << 30}
	assert.Equal(t, want, got["v5e"])
	req.NumHeads, req.NumKVHeads = 0, 0
	assert.Equal(t, want, fitByGen(t, req)["v5e"])

	// 6 heads cap tensor parallelism at 6, and 175e9/6 > 16 GiB.
	req.NumHeads, req.NumKVHeads = 6, 6
	v5e := fitByGen(t, req)["v5e"]
	assert.False(t, v5e.Fits)
	assert.Equal(t, 6, v5e.TP)
	assert.Contains(t, v5e.Reason, "largest tensor-parallel degree the head counts allow (6)")
	assert.Contains(t, v5e.Reason, "16 GiB of a v5e chip")
}

// TestFitHugeStateAboveKVHeads: a share that overflows an int64 above
// the KV heads (8e18 of state whole on every chip, with headroom) clamps
// to the largest one instead of wrapping to a negative share that would
// "fit"; the least share is then TP 2's, which does not fit either.
func TestFitHugeStateAboveKVHeads(t *testing.T) {
	v6e, _ := LookupChip("v6e")
	r, err := FitChip(v6e, FitRequest{WeightBytes: 1e18, StateBytes: 8e18, NumHeads: 32, NumKVHeads: 2})
	require.NoError(t, err)
	assert.False(t, r.Fits)
	assert.Equal(t, 2, r.TP)
	assert.Positive(t, r.PerChipBytes)
}

func TestFitTooBig(t *testing.T) {
	v6e, _ := LookupChip("v6e")
	r, err := FitChip(v6e, FitRequest{WeightBytes: 10 << 40}) // 10 TiB
	require.NoError(t, err)
	assert.False(t, r.Fits)
	assert.Equal(t, 256, r.Chips)
	assert.Contains(t, r.Reason, "even on 256 chips")
}

func TestFitValidation(t *testing.T) {
	for _, req := range []FitRequest{
		{WeightBytes: -1},
		{StateBytes: -5},
		{WeightBytes: 1, Headroom: new(-0.1)},
		{WeightBytes: 1, NumKVHeads: -2},
		{WeightBytes: 1, KVWeightBytes: 2},
		{WeightBytes: 1, KVWeightBytes: -1},
		{StateBytes: 1, WholeStateBytes: 2},
		{StateBytes: 1, WholeStateBytes: -1},
	} {
		_, err := FitAll(req)
		assert.ErrorIs(t, err, errs.ErrUsage, "%+v", req)
	}
}

func TestTPDegree(t *testing.T) {
	for _, tc := range []struct{ chips, heads, kv, want int }{
		{8, 32, 8, 8},
		{16, 32, 8, 16}, // more chips than KV heads: each holds them all
		{8, 16, 2, 8},   // Qwen3-Next's 2 KV heads
		{12, 24, 8, 8},  // 12 neither divides 8 nor is a multiple of it
		{4, 0, 0, 4},
		{6, 12, 4, 4},
		{3, 0, 2, 2},
		{8, 12, 0, 6},
		{1, 32, 8, 1},
		{8, 7, 7, 7},
		{4, 7, 7, 1},
	} {
		assert.Equal(t, tc.want, TPDegree(tc.chips, tc.heads, tc.kv), "%+v", tc)
	}
}
