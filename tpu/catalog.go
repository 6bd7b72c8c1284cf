package tpu

import (
	"slices"
	"strings"
)

// Chip describes one Cloud TPU generation. Figures are Google Cloud's
// published per-chip numbers (see Source and docs/devices.md).
type Chip struct {
	// Generation is the catalog key: "v4", "v5e", "v5p", "v6e", "v7x".
	Generation string `json:"generation"`
	// Name is the marketing name, e.g. "TPU v6e (Trillium)".
	Name string `json:"name"`
	// AcceleratorPrefix is how TPU_ACCELERATOR_TYPE spells the generation
	// ("v5litepod" for v5e, "tpu7x" for v7x).
	AcceleratorPrefix string `json:"accelerator_prefix"`
	// HBMGiB is the HBM capacity per chip in GiB.
	HBMGiB int `json:"hbm_gib"`
	// HBMGBps is the HBM bandwidth per chip in GB/s.
	HBMGBps int `json:"hbm_gbps"`
	// BF16TFLOPs is the peak bf16 compute per chip.
	BF16TFLOPs float64 `json:"bf16_tflops"`
	// TensorCoresPerChip: 2 on v4, v5p and v7x, 1 on v5e and v6e.
	TensorCoresPerChip int `json:"tensorcores_per_chip"`
	// DevicesPerChip is how many PJRT devices one chip shows up as: 1 on
	// megacore chips (v4, v5p), 2 on v7x (two chiplets).
	DevicesPerChip int `json:"devices_per_chip"`
	// ChipsPerHost is the most chips one TPU VM (host) holds. Multi-host
	// slices of v5e/v6e use 4-chip hosts.
	ChipsPerHost int `json:"chips_per_host"`
	// SuffixCountsCores is true where the accelerator-type suffix counts
	// TensorCores instead of chips (v4-16 is 8 chips).
	SuffixCountsCores bool `json:"suffix_counts_tensorcores"`
	// SliceSizes are the usual slice sizes in chips, ascending.
	SliceSizes []int `json:"slice_sizes"`
	// Source is the Google Cloud page the figures come from.
	Source string `json:"source"`
}

// HBMBytes is the HBM capacity per chip in bytes.
func (c Chip) HBMBytes() int64 { return int64(c.HBMGiB) << 30 }

// Hosts returns how many TPU VMs a slice of this many chips spans: one host
// up to ChipsPerHost chips, 4-chip hosts beyond that.
func (c Chip) Hosts(chips int) int {
	if chips <= c.ChipsPerHost {
		return 1
	}
	return (chips + 3) / 4
}

// catalog is ordered oldest generation first.
var catalog = []Chip{
	{
		Generation: "v4", Name: "TPU v4", AcceleratorPrefix: "v4",
		HBMGiB: 32, HBMGBps: 1200, BF16TFLOPs: 275,
		TensorCoresPerChip: 2, DevicesPerChip: 1, ChipsPerHost: 4, SuffixCountsCores: true,
		SliceSizes: []int{4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096},
		Source:     "https://cloud.google.com/tpu/docs/v4",
	},
	{
		Generation: "v5e", Name: "TPU v5e", AcceleratorPrefix: "v5litepod",
		HBMGiB: 16, HBMGBps: 819, BF16TFLOPs: 197,
		TensorCoresPerChip: 1, DevicesPerChip: 1, ChipsPerHost: 8,
		SliceSizes: []int{1, 4, 8, 16, 32, 64, 128, 256},
		Source:     "https://cloud.google.com/tpu/docs/v5e",
	},
	{
		Generation: "v5p", Name: "TPU v5p", AcceleratorPrefix: "v5p",
		HBMGiB: 95, HBMGBps: 2765, BF16TFLOPs: 459,
		TensorCoresPerChip: 2, DevicesPerChip: 1, ChipsPerHost: 4, SuffixCountsCores: true,
		SliceSizes: []int{4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 6144},
		Source:     "https://cloud.google.com/tpu/docs/v5p",
	},
	{
		Generation: "v6e", Name: "TPU v6e (Trillium)", AcceleratorPrefix: "v6e",
		HBMGiB: 32, HBMGBps: 1638, BF16TFLOPs: 918,
		TensorCoresPerChip: 1, DevicesPerChip: 1, ChipsPerHost: 8,
		SliceSizes: []int{1, 4, 8, 16, 32, 64, 128, 256},
		Source:     "https://cloud.google.com/tpu/docs/v6e",
	},
	{
		Generation: "v7x", Name: "TPU7x (Ironwood)", AcceleratorPrefix: "tpu7x",
		HBMGiB: 192, HBMGBps: 7380, BF16TFLOPs: 2307,
		TensorCoresPerChip: 2, DevicesPerChip: 2, ChipsPerHost: 4, SuffixCountsCores: true,
		SliceSizes: []int{1, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096},
		Source:     "https://cloud.google.com/tpu/docs/tpu7x",
	},
}

// generationAliases maps other spellings (accelerator-type prefixes, code
// names) to catalog keys.
var generationAliases = map[string]string{
	"v4": "v4", "tpuv4": "v4",
	"v5e": "v5e", "v5litepod": "v5e", "v5lite": "v5e", "tpuv5e": "v5e",
	"v5p": "v5p", "tpuv5p": "v5p",
	"v6e": "v6e", "trillium": "v6e", "tpuv6e": "v6e",
	"v7x": "v7x", "tpu7x": "v7x", "v7": "v7x", "tpu7": "v7x", "ironwood": "v7x",
}

// Catalog returns the chip catalog, oldest generation first. The slice is a
// copy; callers may modify it.
func Catalog() []Chip {
	out := make([]Chip, len(catalog))
	for i, c := range catalog {
		c.SliceSizes = slices.Clone(c.SliceSizes)
		out[i] = c
	}
	return out
}

// LookupChip finds a generation by catalog key or alias ("v6e", "trillium",
// "v5litepod", "tpu7x", ...), case-insensitively.
func LookupChip(name string) (Chip, bool) {
	key, ok := generationAliases[strings.ToLower(strings.TrimSpace(name))]
	if !ok {
		return Chip{}, false
	}
	for _, c := range catalog {
		if c.Generation == key {
			c.SliceSizes = slices.Clone(c.SliceSizes)
			return c, true
		}
	}
	return Chip{}, false
}

// Generations lists the catalog keys, oldest first.
func Generations() []string {
	out := make([]string, len(catalog))
	for i, c := range catalog {
		out[i] = c.Generation
	}
	return out
}
