package cmd

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/tputool/tputool/internal/humanize"
	"github.com/tputool/tputool/internal/ui"
	"github.com/tputool/tputool/tpu"
	"github.com/tputool/tputool/tpu/cpu"
	"github.com/tputool/tputool/tpu/cpu/kernels"
)

// DevicesOptions holds `tputool devices`'s inputs.
type DevicesOptions struct {
	IO *ui.IOStreams
	// Inventory lists backends, plugins and devices without loading any.
	Inventory func() *tpu.Inventory
	// Open opens the --device the user chose; nil when left on auto.
	Open func() (*tpu.Device, error)
	JSON bool
}

// DevicesResult is the --json document.
type DevicesResult struct {
	*tpu.Inventory
	// Selected is the device --device opened (only when one was chosen).
	Selected *tpu.Device `json:"selected,omitempty"`
	// CPUFeatures are the instruction-set features the CPU kernels detected
	// and use (e.g. avx2, fma, avx512f, avx512_bf16); empty off x86.
	CPUFeatures []string `json:"cpu_features"`
	// HugePages is how the CPU engine places weights and large values:
	// the kernel's transparent huge page mode ("madvise", "always",
	// "never"), "off" (TPUTOOL_HUGE_PAGES=0), "unsupported" or "unknown".
	HugePages string `json:"huge_pages"`
}

// NewCmdDevices builds `tputool devices`.
func NewCmdDevices(f *Factory, runF func(context.Context, *DevicesOptions) error) *cobra.Command {
	opts := &DevicesOptions{IO: f.IOStreams}
	return &cobra.Command{
		Use:   "devices",
		Short: "List backends, devices and PJRT plugins",
		Long: `List the backends compiled into this binary, the PJRT plugins found on disk,
the devices they give, the TPU topology from the environment, and the device
--device auto would pick. Nothing is loaded, so it is safe to run while
another process holds the TPU.

With --device (or TPUTOOL_DEVICE) set to something other than auto, the
device is also opened, and the command fails with exit code 4 when it cannot
be: the message lists every path searched and the command that installs the
missing runtime.`,
		Example: `  tputool devices
  tputool devices --json
  tputool --device tpu devices
  tputool --device xla:/opt/pjrt/pjrt_c_api_cpu_plugin.so devices`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, args []string) error {
			opts.JSON = f.Global.JSON
			opts.Inventory = func() *tpu.Inventory { return tpu.List(f.DeviceEnv()) }
			if f.DeviceExplicit() {
				opts.Open = f.Device
			}
			if runF != nil {
				return runF(c.Context(), opts)
			}
			return devicesRun(c.Context(), opts)
		},
	}
}

func devicesRun(_ context.Context, opts *DevicesOptions) error {
	res := DevicesResult{Inventory: opts.Inventory(), CPUFeatures: kernels.Features(), HugePages: cpu.HugePages()}
	for i, b := range res.Backends { // tpu says "device SPEC"; the command line selects it with --device
		if spec, ok := strings.CutPrefix(b.Note, "device "); ok {
			res.Backends[i].Note = "--device " + spec
		}
	}
	if res.CPUFeatures == nil {
		res.CPUFeatures = []string{}
	}
	if opts.Open != nil {
		d, err := opts.Open()
		if err != nil {
			return err
		}
		res.Selected = d
	}
	if opts.JSON {
		return opts.IO.WriteJSON(res)
	}
	out := opts.IO.Out
	tbl := opts.IO.NewTable("DEVICE", "KIND", "BACKEND", "USABLE", "DETAILS")
	for _, d := range res.Devices {
		usable := "yes"
		if !d.Usable {
			usable = "no"
		}
		tbl.Append(d.Name, string(d.Kind), d.Backend, usable, deviceDetails(d))
	}
	if err := tbl.Render(); err != nil {
		return err
	}
	var backends []string
	for _, b := range res.Backends {
		s := b.Name
		if !b.Available {
			s += " (not in this binary)"
		}
		backends = append(backends, s)
	}
	fmt.Fprintf(out, "Backends: %s\n", strings.Join(backends, ", "))
	if len(res.CPUFeatures) > 0 {
		fmt.Fprintf(out, "CPU features: %s\n", strings.Join(res.CPUFeatures, " "))
	}
	fmt.Fprintf(out, "Huge pages for weights: %s\n", res.HugePages)
	if res.Auto != "" {
		fmt.Fprintf(out, "--device auto picks: %s\n", res.Auto)
	}
	if t := res.Topology; t != nil {
		fmt.Fprintf(out, "TPU slice: %s (%s, %d chips on %d host(s), %d per host", t.AcceleratorType, t.Generation, t.Chips, t.Hosts, t.ChipsPerHost)
		if t.WorkerID >= 0 {
			fmt.Fprintf(out, ", this is worker %d", t.WorkerID)
		}
		fmt.Fprintln(out, ")")
	}
	if res.Selected != nil {
		fmt.Fprintf(out, "Selected: %s\n", res.Selected)
	}
	for _, n := range res.Notes {
		fmt.Fprintf(out, "Note: %s\n", n)
	}
	return nil
}

func deviceDetails(d tpu.DeviceInfo) string {
	var parts []string
	if d.Generation != "" {
		parts = append(parts, fmt.Sprintf("%s x%d, %s HBM/chip", d.Generation, d.Chips, humanize.Bytes(d.HBMBytesPerChip)))
	}
	if d.Cores > 0 {
		parts = append(parts, fmt.Sprintf("%d cores", d.Cores))
	}
	if d.MemoryBytes > 0 {
		parts = append(parts, humanize.Bytes(d.MemoryBytes))
	}
	if d.PluginPath != "" {
		parts = append(parts, d.PluginPath)
	}
	if d.Note != "" {
		parts = append(parts, d.Note)
	}
	return strings.Join(parts, ", ")
}
