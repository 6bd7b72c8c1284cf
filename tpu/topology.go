package tpu

import (
	"errors"
	"regexp"
	"strconv"
	"strings"

	"github.com/tputool/tputool/internal/errs"
)

// TPU slice environment variables, as set on Cloud TPU VMs and by GKE's TPU
// device plugin.
const (
	EnvAcceleratorType    = "TPU_ACCELERATOR_TYPE"      // e.g. v6e-8, v5litepod-4, v4-16, tpu7x-8
	EnvWorkerID           = "TPU_WORKER_ID"             // this host's index in the slice
	EnvWorkerHostnames    = "TPU_WORKER_HOSTNAMES"      // comma-separated, one per host
	EnvTopology           = "TPU_TOPOLOGY"              // chip grid, e.g. 2x2x1 or 4x4
	EnvHostBounds         = "TPU_HOST_BOUNDS"           // host grid, e.g. 1,1,2
	EnvChipsPerHostBounds = "TPU_CHIPS_PER_HOST_BOUNDS" // chip grid of one host, e.g. 2,2,1
)

// Topology is the TPU slice this process runs in, read from the environment.
type Topology struct {
	AcceleratorType string `json:"accelerator_type"`
	// Generation is the catalog key ("v6e", ...).
	Generation string `json:"generation"`
	// Chips in the whole slice.
	Chips int `json:"chips"`
	// TensorCores in the whole slice.
	TensorCores int `json:"tensorcores"`
	// Hosts (TPU VMs) in the slice.
	Hosts int `json:"hosts"`
	// ChipsPerHost is the number of chips attached to each host.
	ChipsPerHost int `json:"chips_per_host"`
	// WorkerID is this host's index, or -1 when the environment does not say.
	WorkerID int `json:"worker_id"`
	// WorkerHostnames lists the slice's hosts when known.
	WorkerHostnames []string `json:"worker_hostnames,omitempty"`
	// Shape is TPU_TOPOLOGY when set (e.g. "2x4").
	Shape string `json:"shape,omitempty"`
}

// MultiHost reports whether the slice spans more than one host; one
// tputool process only drives the chips of its own host.
func (t *Topology) MultiHost() bool { return t != nil && t.Hosts > 1 }

var reAcceleratorType = regexp.MustCompile(`^([a-z]+[0-9]+[a-z]*)-([0-9]+)$`)

// ParseAcceleratorType parses a TPU accelerator type such as "v6e-8",
// "v5litepod-4", "v4-16" or "tpu7x-8" into its generation and chip count.
// On v4, v5p and v7x the suffix counts TensorCores, so "v4-16" is 8 chips.
// Errors wrap errs.ErrUsage.
func ParseAcceleratorType(s string) (Chip, int, error) {
	m := reAcceleratorType.FindStringSubmatch(strings.ToLower(strings.TrimSpace(s)))
	if m == nil {
		return Chip{}, 0, errs.Usagef("accelerator type %q: want GENERATION-COUNT such as v6e-8, v5litepod-4, v4-16 or tpu7x-8", s)
	}
	chip, ok := LookupChip(m[1])
	if !ok {
		return Chip{}, 0, errs.Unsupportedf("accelerator type %q: unknown TPU generation %q (known: %s)",
			s, m[1], strings.Join(Generations(), ", "))
	}
	n, err := strconv.Atoi(m[2])
	if err != nil || n <= 0 {
		return Chip{}, 0, errs.Usagef("accelerator type %q: count %q must be a positive integer", s, m[2])
	}
	chips := n
	if chip.SuffixCountsCores {
		if n%chip.TensorCoresPerChip != 0 {
			return Chip{}, 0, errs.Usagef("accelerator type %q: %s counts TensorCores (%d per chip), so the count must be a multiple of %d",
				s, chip.Generation, chip.TensorCoresPerChip, chip.TensorCoresPerChip)
		}
		chips = n / chip.TensorCoresPerChip
	}
	return chip, chips, nil
}

// TopologyFromEnv reads the slice topology from TPU_ACCELERATOR_TYPE and
// the other TPU_* variables. It returns nil, nil when TPU_ACCELERATOR_TYPE
// is unset (not on a TPU VM). Malformed values are errors naming the
// variable (errs.ErrUsage).
func TopologyFromEnv(env Env) (*Topology, error) {
	acc := strings.TrimSpace(env.Get(EnvAcceleratorType))
	if acc == "" {
		return nil, nil
	}
	chip, chips, err := ParseAcceleratorType(acc)
	if err != nil {
		return nil, wrapEnvErr(EnvAcceleratorType, err)
	}
	t := &Topology{
		AcceleratorType: acc,
		Generation:      chip.Generation,
		Chips:           chips,
		TensorCores:     chips * chip.TensorCoresPerChip,
		WorkerID:        -1,
		Shape:           strings.TrimSpace(env.Get(EnvTopology)),
	}
	if t.Shape != "" {
		dims, err := parseDims(t.Shape, "x")
		if err != nil {
			return nil, errs.Usagef("$%s=%q: %v", EnvTopology, t.Shape, err)
		}
		if p := product(dims); p != chips {
			return nil, errs.Usagef("$%s=%q is %d chips but $%s=%q is %d chips", EnvTopology, t.Shape, p, EnvAcceleratorType, acc, chips)
		}
	}
	if h := strings.TrimSpace(env.Get(EnvWorkerHostnames)); h != "" {
		for _, name := range strings.Split(h, ",") {
			if name = strings.TrimSpace(name); name != "" {
				t.WorkerHostnames = append(t.WorkerHostnames, name)
			}
		}
	}

	// Hosts: the host grid wins, then the hostname list, then the catalog.
	switch hb := strings.TrimSpace(env.Get(EnvHostBounds)); {
	case hb != "":
		dims, err := parseDims(hb, ",")
		if err != nil {
			return nil, errs.Usagef("$%s=%q: %v", EnvHostBounds, hb, err)
		}
		t.Hosts = product(dims)
	case len(t.WorkerHostnames) > 0:
		t.Hosts = len(t.WorkerHostnames)
	default:
		t.Hosts = chip.Hosts(chips)
	}
	if cb := strings.TrimSpace(env.Get(EnvChipsPerHostBounds)); cb != "" {
		dims, err := parseDims(cb, ",")
		if err != nil {
			return nil, errs.Usagef("$%s=%q: %v", EnvChipsPerHostBounds, cb, err)
		}
		t.ChipsPerHost = product(dims)
	} else {
		t.ChipsPerHost = (chips + t.Hosts - 1) / t.Hosts
	}
	if t.Hosts*t.ChipsPerHost != chips {
		return nil, errs.Usagef("TPU slice %q has %d chips, but the environment describes %d host(s) of %d chip(s)",
			acc, chips, t.Hosts, t.ChipsPerHost)
	}

	if w := strings.TrimSpace(env.Get(EnvWorkerID)); w != "" {
		id, err := strconv.Atoi(w)
		if err != nil || id < 0 {
			return nil, errs.Usagef("$%s=%q: want a non-negative integer", EnvWorkerID, w)
		}
		if id >= t.Hosts {
			return nil, errs.Usagef("$%s=%d is out of range for a slice of %d host(s)", EnvWorkerID, id, t.Hosts)
		}
		t.WorkerID = id
	} else if t.Hosts == 1 {
		t.WorkerID = 0
	}
	return t, nil
}

func wrapEnvErr(name string, err error) error {
	if errors.Is(err, errs.ErrUnsupported) {
		return errs.Unsupportedf("$%s: %w", name, err)
	}
	return errs.Usagef("$%s: %w", name, err)
}

// parseDims parses "2x2x1" (sep "x") or "2,2,1" (sep ",").
func parseDims(s, sep string) ([]int, error) {
	parts := strings.Split(s, sep)
	dims := make([]int, 0, len(parts))
	for _, p := range parts {
		n, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil || n <= 0 {
			return nil, errs.Usagef("want positive integers separated by %q", sep)
		}
		dims = append(dims, n)
	}
	return dims, nil
}

func product(dims []int) int {
	p := 1
	for _, d := range dims {
		p *= d
	}
	return p
}
