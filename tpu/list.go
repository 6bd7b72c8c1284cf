package tpu

import (
	"bufio"
	"os"
	"runtime"
	"strconv"
	"strings"
)

// BackendInfo says whether a GoMLX backend is compiled into this binary.
type BackendInfo struct {
	Name      string `json:"name"`
	Available bool   `json:"available"`
	Note      string `json:"note,omitempty"`
}

// DeviceInfo is one device `tputool devices` shows. Nothing is opened to
// produce it; Usable says whether Open is expected to work.
type DeviceInfo struct {
	// Name is the --device value that selects it ("cpu", "tpu", "gpu",
	// "xla:cpu", "xla:NAME").
	Name    string `json:"name"`
	Kind    Kind   `json:"kind"`
	Backend string `json:"backend"`
	// Usable is false when the backend is not compiled in or the hardware
	// is missing; Note says why.
	Usable bool   `json:"usable"`
	Note   string `json:"note,omitempty"`
	// PluginPath is the PJRT plugin file (xla devices).
	PluginPath string `json:"plugin_path,omitempty"`
	// Cores and MemoryBytes describe the host CPU (cpu device).
	Cores       int   `json:"cores,omitempty"`
	MemoryBytes int64 `json:"memory_bytes,omitempty"`
	// Generation, Chips (attached to this host) and HBMBytesPerChip come
	// from the TPU topology in the environment and the chip catalog.
	Generation      string `json:"generation,omitempty"`
	Chips           int    `json:"chips,omitempty"`
	HBMBytesPerChip int64  `json:"hbm_bytes_per_chip,omitempty"`
}

// Inventory is what `tputool devices` reports.
type Inventory struct {
	Backends []BackendInfo `json:"backends"`
	Devices  []DeviceInfo  `json:"devices"`
	Plugins  []Plugin      `json:"plugins"`
	// Auto is the device --device auto would try first.
	Auto string `json:"auto"`
	// Topology is the TPU slice from TPU_* variables, nil off TPU VMs.
	Topology *Topology `json:"topology,omitempty"`
	// Searches are the plugin searches behind Plugins.
	Searches []Search `json:"searches"`
	Notes    []string `json:"notes,omitempty"`
}

// List reports the backends compiled in, the PJRT plugins on disk, the
// devices they give and the TPU topology from the environment. It only
// looks at files and variables; no plugin is loaded, so it is safe to run
// while another process holds the TPU.
func List(env Env) *Inventory {
	inv := &Inventory{
		Backends: []BackendInfo{{Name: BackendGo, Available: true}, {Name: BackendCPU, Available: true, Note: "device cpu:fast"}},
	}
	xb := BackendInfo{Name: BackendXLA, Available: xlaCompiled}
	if !xlaCompiled {
		xb.Note = noCgoMessage
	}
	inv.Backends = append(inv.Backends, xb)

	mem, _ := hostMemory(env)
	inv.Devices = append(inv.Devices, DeviceInfo{
		Name: "cpu", Kind: KindCPU, Backend: DefaultCPUBackend, Usable: true,
		Cores: runtime.NumCPU(), MemoryBytes: mem,
	})

	topo, err := TopologyFromEnv(env)
	if err != nil {
		inv.Notes = append(inv.Notes, "TPU topology: "+err.Error())
	}
	inv.Topology = topo

	disc := Discover(env)
	inv.Plugins, inv.Searches = disc.Plugins, disc.Searches
	if inv.Plugins == nil {
		inv.Plugins = []Plugin{}
	}
	xlaNote := func(present bool, missing string) (bool, string) {
		switch {
		case !xlaCompiled:
			return false, noCgoMessage
		case !present:
			return false, missing
		}
		return true, ""
	}
	for _, p := range disc.Plugins {
		d := DeviceInfo{Kind: p.Kind, Backend: BackendXLA, PluginPath: p.Path}
		switch p.Kind {
		case KindTPU:
			d.Name = "tpu"
			d.Usable, d.Note = xlaNote(tpuPresent(env), "no TPU device found (/dev/accel*, /dev/vfio/N)")
			if topo != nil {
				if c, ok := LookupChip(topo.Generation); ok {
					d.Generation, d.Chips, d.HBMBytesPerChip = c.Generation, topo.ChipsPerHost, c.HBMBytes()
				}
			}
		case KindGPU:
			d.Name = "gpu"
			d.Usable, d.Note = xlaNote(nvidiaPresent(env), "no NVIDIA device found (/dev/nvidiaN)")
		default:
			d.Name = "xla:" + p.Name
			d.Usable, d.Note = xlaNote(true, "")
			if p.Kind == KindCPU {
				d.Cores, d.MemoryBytes = runtime.NumCPU(), mem
			}
		}
		inv.Devices = append(inv.Devices, d)
	}

	// Hardware with no plugin to drive it.
	if (topo != nil || tpuPresent(env)) && !hasPluginKind(disc.Plugins, KindTPU) {
		inv.Devices = append(inv.Devices, DeviceInfo{Name: "tpu", Kind: KindTPU, Backend: BackendXLA,
			Note: `TPU hardware present but libtpu not found: pip install libtpu (or pip install "jax[tpu]"), or export TPU_LIBRARY_PATH=/path/to/libtpu.so`})
	}
	if nvidiaPresent(env) && !hasPluginKind(disc.Plugins, KindGPU) {
		inv.Devices = append(inv.Devices, DeviceInfo{Name: "gpu", Kind: KindGPU, Backend: BackendXLA,
			Note: `NVIDIA GPU present but no CUDA PJRT plugin found: pip install "jax[cuda12]"`})
	}

	cands, notes, err := resolve(Spec{Kind: SpecAuto}, env)
	if err == nil && len(cands) > 0 {
		inv.Auto = string(cands[0].kind)
	}
	inv.Notes = append(inv.Notes, notes...)
	return inv
}

// HostMemory is the host's physical memory (MemTotal of /proc/meminfo
// under env.Root); 0 with an error where that is unknown.
func HostMemory(env Env) (int64, error) { return hostMemory(env) }

// hostMemory reads MemTotal from /proc/meminfo (under env.Root).
func hostMemory(env Env) (int64, error) {
	f, err := os.Open(env.sys("/proc/meminfo"))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == "MemTotal:" {
			kb, err := strconv.ParseInt(fields[1], 10, 64)
			if err != nil {
				return 0, err
			}
			return kb * 1024, nil
		}
	}
	return 0, sc.Err()
}

func hasPluginKind(ps []Plugin, k Kind) bool {
	for _, p := range ps {
		if p.Kind == k {
			return true
		}
	}
	return false
}
