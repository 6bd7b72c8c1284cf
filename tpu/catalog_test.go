package tpu

import (
	"slices"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCatalogPublishedFigures(t *testing.T) {
	// Google Cloud's published per-chip figures (docs/devices.md cites them).
	type fig struct {
		hbmGiB, gbps int
		tflops       float64
		perHost      int
		prefix       string
	}
	want := map[string]fig{
		"v4":  {32, 1200, 275, 4, "v4"},
		"v5e": {16, 819, 197, 8, "v5litepod"},
		"v5p": {95, 2765, 459, 4, "v5p"},
		"v6e": {32, 1638, 918, 8, "v6e"},
		"v7x": {192, 7380, 2307, 4, "tpu7x"},
	}
	assert.Equal(t, []string{"v4", "v5e", "v5p", "v6e", "v7x"}, Generations())
	for _, c := range Catalog() {
		w, ok := want[c.Generation]
		require.True(t, ok, c.Generation)
		assert.Equal(t, w, fig{c.HBMGiB, c.HBMGBps, c.BF16TFLOPs, c.ChipsPerHost, c.AcceleratorPrefix}, c.Generation)
		assert.Equal(t, int64(c.HBMGiB)<<30, c.HBMBytes())
		assert.Contains(t, c.Source, "https://cloud.google.com/tpu/docs/")
		assert.NotEmpty(t, c.Name)
	}
}

func TestCatalogSanity(t *testing.T) {
	for _, c := range Catalog() {
		assert.Positive(t, c.BF16TFLOPs)
		assert.Positive(t, c.HBMGBps)
		assert.True(t, slices.IsSorted(c.SliceSizes), c.Generation)
		assert.Equal(t, len(c.SliceSizes), len(slices.Compact(slices.Clone(c.SliceSizes))), c.Generation)
		assert.Contains(t, c.SliceSizes, c.ChipsPerHost, "a full host is a slice size: %s", c.Generation)
		assert.Contains(t, []int{1, 2}, c.TensorCoresPerChip)
		assert.Equal(t, c.SuffixCountsCores, c.TensorCoresPerChip == 2, c.Generation)
		assert.GreaterOrEqual(t, c.DevicesPerChip, 1)
		for _, n := range c.SliceSizes {
			h := c.Hosts(n)
			assert.GreaterOrEqual(t, h*max(c.ChipsPerHost, 4), n, "%s: %d chips on %d hosts", c.Generation, n, h)
		}
		// Round trip: the accelerator type of a full host parses back.
		suffix := c.ChipsPerHost * c.TensorCoresPerChip
		if !c.SuffixCountsCores {
			suffix = c.ChipsPerHost
		}
		chip, chips, err := ParseAcceleratorType(c.AcceleratorPrefix + "-" + strconv.Itoa(suffix))
		require.NoError(t, err)
		assert.Equal(t, c.Generation, chip.Generation)
		assert.Equal(t, c.ChipsPerHost, chips)
	}
}

func TestCatalogHosts(t *testing.T) {
	v6e, _ := LookupChip("v6e")
	assert.Equal(t, 1, v6e.Hosts(1))
	assert.Equal(t, 1, v6e.Hosts(8))
	assert.Equal(t, 4, v6e.Hosts(16))
	assert.Equal(t, 64, v6e.Hosts(256))
	v4, _ := LookupChip("v4")
	assert.Equal(t, 1, v4.Hosts(4))
	assert.Equal(t, 2, v4.Hosts(8))
}

func TestLookupChip(t *testing.T) {
	for alias, gen := range map[string]string{
		"v5litepod": "v5e", "V5E": "v5e", "trillium": "v6e", "tpu7x": "v7x", "Ironwood": "v7x", "v5p": "v5p", " v4 ": "v4",
	} {
		c, ok := LookupChip(alias)
		require.True(t, ok, alias)
		assert.Equal(t, gen, c.Generation, alias)
	}
	_, ok := LookupChip("v3")
	assert.False(t, ok)

	// Catalog and LookupChip hand out copies.
	c := Catalog()
	c[0].SliceSizes[0] = 999
	c[0].HBMGiB = 1
	again, _ := LookupChip(c[0].Generation)
	assert.NotEqual(t, 999, again.SliceSizes[0])
	assert.NotEqual(t, 1, again.HBMGiB)
}
