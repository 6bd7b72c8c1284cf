package tpu

import (
	"fmt"
	"math"

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/internal/humanize"
)

// DefaultHeadroom is the fraction added on top of weights and KV cache for
// activations, XLA scratch buffers and the runtime's own reservations. 15%
// sits in the middle of the 10-20% that serving stacks typically leave
// free on a TPU; see docs/devices.md.
const DefaultHeadroom = 0.15

// MaxHeadroom is the largest headroom a fit takes.
const MaxHeadroom = 10

// FitRequest describes a model's memory needs.
type FitRequest struct {
	// WeightBytes is the size of the weights in the dtype they will run in.
	WeightBytes int64 `json:"weight_bytes"`
	// StateBytes is the KV cache (or recurrent state) for the longest
	// context and batch to be served (lm.StateBytes).
	StateBytes int64 `json:"state_bytes"`
	// KVWeightBytes is the part of WeightBytes in the key and value
	// projections (lm.KVColumn), which every chip holds whole at a TP
	// degree above the KV heads; 0 when unknown.
	KVWeightBytes int64 `json:"kv_weight_bytes,omitempty"`
	// WholeStateBytes is the part of StateBytes every chip holds whole at
	// any TP degree: recurrent state, and KV caches of layers whose KV
	// heads are not NumKVHeads (Gemma 4's global layers); 0 when unknown.
	WholeStateBytes int64 `json:"whole_state_bytes,omitempty"`
	// Headroom is the fraction added for activations and runtime buffers,
	// 0 to MaxHeadroom; nil means DefaultHeadroom.
	Headroom *float64 `json:"headroom"`
	// NumHeads and NumKVHeads, when > 0, constrain the tensor-parallel
	// degree: it must divide the heads, since attention is split by head,
	// and divide the KV heads or be a multiple of them (then every chip
	// holds the KV heads and caches whole, as --tp does).
	NumHeads   int `json:"num_heads,omitempty"`
	NumKVHeads int `json:"num_kv_heads,omitempty"`
}

// FitResult is the smallest usual slice of one generation that holds a model.
type FitResult struct {
	Generation string `json:"generation"`
	// Fits is false when no slice size in the catalog is enough.
	Fits bool `json:"fits"`
	// Chips is the smallest usual slice size that holds the model.
	Chips int `json:"chips"`
	// Hosts is the number of TPU VMs that slice spans.
	Hosts int `json:"hosts"`
	// TP is the suggested tensor-parallel degree: of those the head counts
	// allow up to Chips, the one whose share per chip is least (see
	// bestTP). Chips beyond TP would hold replicas (data parallelism) and
	// do not add memory for one replica.
	TP int `json:"tp"`
	// TotalBytes is (weights + state) * (1 + headroom).
	TotalBytes int64 `json:"total_bytes"`
	// PerChipBytes is TotalBytes / TP, rounded up; where TP is above the
	// KV heads, the KV projections and the state count whole on every
	// chip: ((weights - KV weights) / TP + KV weights + state) *
	// (1 + headroom).
	PerChipBytes int64 `json:"per_chip_bytes"`
	// HBMBytes is the HBM of one chip.
	HBMBytes int64 `json:"hbm_bytes"`
	// Reason explains a result that does not fit.
	Reason string `json:"reason,omitempty"`
}

func (r FitRequest) validate() (float64, error) {
	if r.WeightBytes < 0 || r.StateBytes < 0 || r.KVWeightBytes < 0 || r.WholeStateBytes < 0 {
		return 0, errs.Usagef("memory fit: weight bytes (%d), KV projection bytes (%d), state bytes (%d) and whole state bytes (%d) must not be negative",
			r.WeightBytes, r.KVWeightBytes, r.StateBytes, r.WholeStateBytes)
	}
	if r.KVWeightBytes > r.WeightBytes || r.WholeStateBytes > r.StateBytes {
		return 0, errs.Usagef("memory fit: KV projection bytes (%d) are part of the weight bytes (%d), whole state bytes (%d) part of the state bytes (%d)",
			r.KVWeightBytes, r.WeightBytes, r.WholeStateBytes, r.StateBytes)
	}
	if r.NumHeads < 0 || r.NumKVHeads < 0 {
		return 0, errs.Usagef("memory fit: head counts must not be negative (heads %d, kv heads %d)", r.NumHeads, r.NumKVHeads)
	}
	h := DefaultHeadroom
	if r.Headroom != nil {
		h = *r.Headroom
	}
	if !(h >= 0 && h <= MaxHeadroom) { // NaN too
		return 0, errs.Usagef("memory fit: headroom %v must be a fraction between 0 and %d", h, MaxHeadroom)
	}
	return h, nil
}

// totalBytes is (weights + state) * (1 + headroom), rounded up.
func (r FitRequest) totalBytes(headroom float64) int64 {
	total := math.Ceil((float64(r.WeightBytes) + float64(r.StateBytes)) * (1 + headroom))
	if total >= math.MaxInt64 { // converting it would wrap to a negative size that "fits"
		return math.MaxInt64
	}
	return int64(total)
}

// TPDegree returns the largest tensor-parallel degree <= chips that divides
// the heads (> 0) and divides the KV heads (> 0) or is a multiple of them.
func TPDegree(chips, numHeads, numKVHeads int) int {
	for d := chips; d > 1; d-- {
		if TPAllowed(d, numHeads, numKVHeads) {
			return d
		}
	}
	return 1
}

// TPAllowed reports whether the head counts (> 0; 0 unknown) allow TP
// degree d: it divides the heads, and divides the KV heads or is a
// multiple of them (the KV heads then whole on every device), as
// compile.CheckParallel takes them.
func TPAllowed(d, numHeads, numKVHeads int) bool {
	return (numHeads <= 0 || numHeads%d == 0) && (numKVHeads <= 0 || numKVHeads%d == 0 || d%numKVHeads == 0)
}

// perChip is one chip's share of req at TP degree tp, with headroom,
// rounded up: the weights and the state split tp ways, except what every
// chip holds whole: the whole state (recurrent, other layers' KV caches)
// at any degree above 1, and where tp is above the KV heads the KV
// projections and every KV cache too.
func (r FitRequest) perChip(tp int, headroom float64) int64 {
	above := r.NumKVHeads > 0 && r.NumKVHeads%tp != 0
	if tp == 1 || (!above && r.WholeStateBytes == 0) {
		return ceilDiv(r.totalBytes(headroom), int64(tp))
	}
	weights, whole := float64(r.WeightBytes), float64(r.WholeStateBytes)
	split := float64(r.StateBytes - r.WholeStateBytes)
	if above { // the KV projections and caches whole too
		weights -= float64(r.KVWeightBytes)
		whole += float64(r.KVWeightBytes) + split
		split = 0
	}
	per := math.Ceil(((weights+split)/float64(tp) + whole) * (1 + headroom))
	if per >= math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(per)
}

// bestTP is the TP degree <= chips the head counts allow whose share per
// chip is the smallest (the larger degree on a tie): the largest one,
// unless it is above the KV heads and the state held whole on every chip
// outweighs what a smaller degree splits.
func (r FitRequest) bestTP(chips int, headroom float64) (tp int, per int64) {
	tp, per = 1, r.perChip(1, headroom)
	for d := 2; d <= chips; d++ {
		if !TPAllowed(d, r.NumHeads, r.NumKVHeads) {
			continue
		}
		if p := r.perChip(d, headroom); p <= per {
			tp, per = d, p
		}
	}
	return tp, per
}

// FitChip finds the smallest of chip's usual slice sizes whose tensor-parallel
// shards fit in HBM: the smallest per-chip share of the TP degrees the
// slice allows (bestTP) <= HBM per chip.
func FitChip(chip Chip, req FitRequest) (FitResult, error) {
	headroom, err := req.validate()
	if err != nil {
		return FitResult{}, err
	}
	total := req.totalBytes(headroom)
	res := FitResult{Generation: chip.Generation, TotalBytes: total, HBMBytes: chip.HBMBytes()}
	for _, n := range chip.SliceSizes {
		tp, per := req.bestTP(n, headroom)
		res.Chips, res.Hosts, res.TP, res.PerChipBytes = n, chip.Hosts(n), tp, per
		if per <= res.HBMBytes {
			res.Fits = true
			return res, nil
		}
	}
	largest := chip.SliceSizes[len(chip.SliceSizes)-1]
	switch {
	case res.TP < TPDegree(largest, req.NumHeads, req.NumKVHeads):
		res.Reason = fmt.Sprintf("needs %s per chip at tensor-parallel degree %d, the least share of the degrees the head counts allow (above it the KV caches are whole on every chip), over the %d GiB of a %s chip",
			humanize.Bytes(res.PerChipBytes), res.TP, chip.HBMGiB, chip.Generation)
	case res.TP < largest:
		res.Reason = fmt.Sprintf("needs %s per chip at the largest tensor-parallel degree the head counts allow (%d), over the %d GiB of a %s chip",
			humanize.Bytes(res.PerChipBytes), res.TP, chip.HBMGiB, chip.Generation)
	default:
		res.Reason = fmt.Sprintf("needs %s per chip even on %d chips, over the %d GiB of a %s chip",
			humanize.Bytes(res.PerChipBytes), largest, chip.HBMGiB, chip.Generation)
	}
	return res, nil
}

// FitAll runs FitChip for every generation in the catalog, oldest first.
func FitAll(req FitRequest) ([]FitResult, error) {
	out := make([]FitResult, 0, len(catalog))
	for _, c := range Catalog() {
		r, err := FitChip(c, req)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

func ceilDiv(a, b int64) int64 { return a/b + min(a%b, 1) } // (a+b-1)/b overflows near MaxInt64
