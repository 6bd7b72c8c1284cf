package tpu

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/tputool/tputool/internal/errs"
)

// SpecKind is the first part of a --device spec.
type SpecKind string

// The accepted --device kinds.
const (
	SpecAuto SpecKind = "auto"     // TPU if libtpu is found, else a CUDA GPU, else cpu
	SpecCPU  SpecKind = "cpu"      // the default CPU backend (DefaultCPUBackend)
	SpecFast SpecKind = "cpu:fast" // tputool's own CPU backend (tpu/cpu, "cpu")
	SpecGo   SpecKind = "cpu:go"   // GoMLX's pure-Go backend ("go")
	SpecTPU  SpecKind = "tpu"      // libtpu through XLA/PJRT
	SpecGPU  SpecKind = "gpu"      // the CUDA PJRT plugin through XLA/PJRT
	SpecXLA  SpecKind = "xla"      // xla:PLUGIN, a named plugin or an absolute .so path
)

// Spec is a parsed --device value.
type Spec struct {
	Kind SpecKind `json:"kind"`
	// Plugin is set for SpecXLA: a plugin name ("cpu", "cuda", "tpu", ...)
	// or an absolute path to a PJRT plugin file.
	Plugin string `json:"plugin,omitempty"`
}

// String returns the spec in --device syntax.
func (s Spec) String() string {
	if s.Kind == SpecXLA {
		return "xla:" + s.Plugin
	}
	if s.Kind == "" {
		return string(SpecAuto)
	}
	return string(s.Kind)
}

// PluginIsPath reports whether an xla spec names a file rather than a plugin.
func (s Spec) PluginIsPath() bool {
	return s.Kind == SpecXLA && strings.ContainsRune(s.Plugin, filepath.Separator)
}

var rePluginName = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]*$`)

const specSyntax = "want auto, cpu, cpu:fast, cpu:go, tpu, gpu, or xla:PLUGIN where PLUGIN is a plugin name (cpu, cuda, tpu) or an absolute path to a PJRT plugin .so"

// ParseSpec parses a --device value: auto | cpu | cpu:fast | cpu:go | tpu |
// gpu | xla:PLUGIN. The empty string means auto; cpu is the default CPU
// backend, cpu:fast tputool's own and cpu:go (or "go") GoMLX's pure-Go one;
// "cuda" is accepted for gpu.
// A relative plugin path is made absolute. Errors are *SpecError wrapping
// errs.ErrUsage.
func ParseSpec(s string) (Spec, error) {
	return parseSpec(s, "")
}

// SpecError is an error about a device spec: the spec as written (Spec,
// quoted where it did not parse) and where it came from (Source:
// "$TPUTOOL_DEVICE", or "" for the caller's own value, which the command
// line restates as its flag). Err carries the kind (errs.ErrUsage,
// errs.ErrDeviceUnavailable) and the reason.
type SpecError struct {
	Source string
	Spec   string
	Err    error
}

func (e *SpecError) Error() string { return e.Text("device") }

func (e *SpecError) Unwrap() error { return e.Err }

// Text is the error with label naming the spec's source when it has none
// of its own (cmd passes its flag).
func (e *SpecError) Text(label string) string {
	if e.Source != "" {
		label = e.Source
	}
	return label + " " + e.Spec + ": " + e.Err.Error()
}

// specErr is the SpecError of spec from source, its reason formatted with
// kind (errs.Usagef, errs.Devicef).
func specErr(source, spec string, kind func(string, ...any) error, format string, args ...any) error {
	return &SpecError{Source: source, Spec: spec, Err: kind(format, args...)}
}

func parseSpec(s, source string) (Spec, error) {
	raw := strings.TrimSpace(s)
	head, rest, hasColon := strings.Cut(raw, ":")
	switch k := strings.ToLower(head); {
	case !hasColon && (k == "" || k == "auto"):
		return Spec{Kind: SpecAuto}, nil
	case !hasColon && k == "cpu":
		return Spec{Kind: SpecCPU}, nil
	case (!hasColon && k == "go") || (k == "cpu" && strings.EqualFold(strings.TrimSpace(rest), "go")):
		return Spec{Kind: SpecGo}, nil
	case k == "cpu" && strings.EqualFold(strings.TrimSpace(rest), "fast"):
		return Spec{Kind: SpecFast}, nil
	case !hasColon && k == "tpu":
		return Spec{Kind: SpecTPU}, nil
	case !hasColon && (k == "gpu" || k == "cuda"):
		return Spec{Kind: SpecGPU}, nil
	case hasColon && (k == "xla" || k == "pjrt"):
		return parseXLAPlugin(rest, raw, source)
	}
	return Spec{}, specErr(source, strconv.Quote(s), errs.Usagef, "%s", specSyntax)
}

func parseXLAPlugin(p, raw, source string) (Spec, error) {
	p = strings.TrimSpace(p)
	if p == "" {
		return Spec{}, specErr(source, strconv.Quote(raw), errs.Usagef, "missing plugin after \"xla:\"; %s", specSyntax)
	}
	if strings.ContainsRune(p, ',') {
		// The xla backend reads ",option" suffixes from its config string.
		return Spec{}, specErr(source, strconv.Quote(raw), errs.Usagef, "plugin names and paths may not contain ','")
	}
	if strings.ContainsRune(p, filepath.Separator) || strings.HasSuffix(p, ".so") {
		abs, err := filepath.Abs(p)
		if err != nil {
			return Spec{}, specErr(source, strconv.Quote(raw), errs.Usagef, "cannot make plugin path absolute: %w", err)
		}
		return Spec{Kind: SpecXLA, Plugin: abs}, nil
	}
	name := strings.ToLower(p)
	if !rePluginName.MatchString(name) {
		return Spec{}, specErr(source, strconv.Quote(raw), errs.Usagef, "plugin name %q: want letters, digits, '_', '-' or '.', or an absolute path", p)
	}
	return Spec{Kind: SpecXLA, Plugin: name}, nil
}

// ChooseSpec picks the device spec from the caller's value (the --device
// flag) and the TPUTOOL_DEVICE environment variable: the value wins when
// the user set it (changed), then a non-empty TPUTOOL_DEVICE, then the
// value's default. fromEnv reports that TPUTOOL_DEVICE gave it; a parse
// error of that one names it as its Source.
func ChooseSpec(value string, changed bool, env Env) (spec Spec, fromEnv bool, err error) {
	if !changed {
		if v := strings.TrimSpace(env.Get(EnvDevice)); v != "" {
			spec, err = parseSpec(v, fmt.Sprintf("$%s", EnvDevice))
			return spec, true, err
		}
	}
	spec, err = parseSpec(value, "")
	return spec, false, err
}
