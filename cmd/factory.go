package cmd

import (
	"os"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/tputool/tputool/internal/ui"
	"github.com/tputool/tputool/tpu"
)

// GlobalOptions are the persistent flags every command shares.
type GlobalOptions struct {
	// Device is the --device flag as given; DeviceSpec is the spec the
	// root command chose from it and TPUTOOL_DEVICE, parsed once, and
	// DeviceFromEnv says TPUTOOL_DEVICE gave it (errors then name it).
	Device        string
	DeviceSpec    tpu.Spec
	DeviceFromEnv bool
	JSON          bool
	Quiet         bool
	Verbose       bool
	NoProgress    bool
	CacheDir      string
	Offline       bool
	Token         string
	// CPUProfile is --cpuprofile: a file for a Go CPU profile of the
	// whole command (pprof format), "" for none.
	CPUProfile string
}

// Factory carries the dependencies commands are built from. Fields are
// plain values or lazy funcs so tests can replace each one.
type Factory struct {
	IOStreams *ui.IOStreams
	Global    *GlobalOptions
	// LookupEnv reads the environment (tests pass a map).
	LookupEnv func(string) (string, bool)
	// Now is the clock.
	Now func() time.Time
	// Build describes this binary.
	Build BuildInfo

	// DeviceEnv is what device discovery looks at (tests build a fake
	// tree; a real process uses tpu.OSEnv with LookupEnv).
	DeviceEnv func() tpu.Env

	reporterOnce sync.Once
	reporter     *ui.Reporter

	deviceMu sync.Mutex
	device   *tpu.Device

	interruptMu sync.Mutex
	onInterrupt func() bool

	// stopProfile ends --cpuprofile's profile (Close calls it).
	stopProfile func()
}

// OnInterrupt installs fn as the handler of Ctrl-C (SIGINT) while a
// command runs: fn returns true when it took the interrupt (chat cancels
// the current answer), false to let Main stop the command as usual. It
// returns a func that removes the handler.
func (f *Factory) OnInterrupt(fn func() bool) (remove func()) {
	f.interruptMu.Lock()
	f.onInterrupt = fn
	f.interruptMu.Unlock()
	return func() {
		f.interruptMu.Lock()
		f.onInterrupt = nil
		f.interruptMu.Unlock()
	}
}

// interrupt offers a Ctrl-C to the command's handler.
func (f *Factory) interrupt() bool {
	f.interruptMu.Lock()
	fn := f.onInterrupt
	f.interruptMu.Unlock()
	return fn != nil && fn()
}

// DeviceExplicit reports whether the user chose a device (flag or
// TPUTOOL_DEVICE) rather than leaving it on auto.
func (f *Factory) DeviceExplicit() bool {
	return f.Global.DeviceSpec.Kind != "" && f.Global.DeviceSpec.Kind != tpu.SpecAuto
}

// HostMemory is the host's physical memory in bytes as DeviceEnv shows it,
// 0 when unknown; the memory checks of generate, diffuse and bench use it.
func (f *Factory) HostMemory() int64 {
	n, _ := tpu.HostMemory(f.DeviceEnv())
	return n
}

// Device opens the device of Global.DeviceSpec, once per process; later
// calls return the same device. Errors wrap errs.ErrDeviceUnavailable
// (exit 4).
func (f *Factory) Device() (*tpu.Device, error) {
	f.deviceMu.Lock()
	defer f.deviceMu.Unlock()
	if f.device != nil {
		return f.device, nil
	}
	d, err := tpu.OpenEnv(f.Global.DeviceSpec, f.DeviceEnv())
	if err != nil {
		return nil, restateDevice(err, f.Global.DeviceFromEnv)
	}
	f.device = d
	return d, nil
}

// Close releases what the factory opened.
func (f *Factory) Close() {
	f.deviceMu.Lock()
	defer f.deviceMu.Unlock()
	f.device.Close()
	f.device = nil
	if f.stopProfile != nil {
		f.stopProfile()
		f.stopProfile = nil
	}
}

// Getenv returns the variable or "".
func (f *Factory) Getenv(key string) string {
	v, _ := f.LookupEnv(key)
	return v
}

// Reporter returns the stderr progress/log reporter configured by the global
// flags. It must only be called after flags are parsed (inside RunE).
func (f *Factory) Reporter() *ui.Reporter {
	f.reporterOnce.Do(func() {
		g := f.Global
		o := ui.ReporterOptions{JSON: g.JSON, Quiet: g.Quiet, Verbose: g.Verbose, NoProgress: g.NoProgress, Now: f.Now}
		if g.JSON && g.Quiet {
			// --quiet keeps the warnings, and --json keeps stderr NDJSON.
			o.Printer = quietJSONPrinter{ui.NewJSONPrinter(f.IOStreams.ErrOut, 5*time.Second)}
		}
		f.reporter = ui.NewReporter(f.IOStreams, o)
	})
	return f.reporter
}

// quietJSONPrinter is the stderr printer of --json --quiet: warnings as
// NDJSON log lines, and no progress, events or other logs.
type quietJSONPrinter struct{ json ui.Printer }

func (p quietJSONPrinter) Log(level ui.Level, msg string) {
	if level >= ui.LevelWarning {
		p.json.Log(level, msg)
	}
}

func (quietJSONPrinter) Event(string, string, map[string]any) {}

func (quietJSONPrinter) StartTask(ui.TaskStatus) ui.TaskPrinter { return noTaskPrinter{} }

// noTaskPrinter shows nothing of a task.
type noTaskPrinter struct{}

func (noTaskPrinter) Update(ui.TaskStatus) {}
func (noTaskPrinter) Done(ui.TaskStatus)   {}

// NewFactory returns the factory for a real process.
func NewFactory() *Factory {
	f := &Factory{
		LookupEnv: os.LookupEnv,
		Now:       time.Now,
		Global:    &GlobalOptions{},
		Build:     ReadBuildInfo(),
	}
	f.IOStreams = ui.System(f.Getenv)
	f.DeviceEnv = func() tpu.Env {
		env := tpu.OSEnv()
		env.LookupEnv = f.LookupEnv
		return env
	}
	return f
}

// Version is set at link time: -ldflags "-X github.com/tputool/tputool/cmd.Version=v0.1.0".
var Version = "dev"

// BuildInfo describes the binary for `tputool version` and bench headers.
type BuildInfo struct {
	Version   string `json:"version"`
	Commit    string `json:"commit,omitempty"`
	Modified  bool   `json:"modified,omitempty"`
	GoVersion string `json:"go_version"`
	GoMLX     string `json:"gomlx"`
	GoXLA     string `json:"go_xla"`
	CGO       bool   `json:"cgo"`
	Platform  string `json:"platform"`
}

// ReadBuildInfo reads the module versions and VCS stamp of this binary.
func ReadBuildInfo() BuildInfo {
	b := BuildInfo{Version: Version, CGO: cgoEnabled, Platform: runtime.GOOS + "/" + runtime.GOARCH, GoVersion: runtime.Version()}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return b
	}
	b.GoVersion = info.GoVersion
	if b.Version == "dev" && info.Main.Version != "" && info.Main.Version != "(devel)" {
		b.Version = strings.TrimPrefix(info.Main.Version, "v")
	}
	for _, d := range info.Deps {
		switch d.Path {
		case "github.com/gomlx/gomlx":
			b.GoMLX = d.Version
		case "github.com/gomlx/go-xla":
			b.GoXLA = d.Version
		}
	}
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			b.Commit = s.Value
		case "vcs.modified":
			b.Modified = s.Value == "true"
		}
	}
	return b
}
