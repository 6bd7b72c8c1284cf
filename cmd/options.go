package cmd

import (
	"errors"
	"regexp"
	"strings"

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/loader/hub"
	"github.com/tputool/tputool/tpu"
)

// optionFlags names the flag that sets each option field that the library
// packages' errors name (errs.OptionError): compile.Options and
// BatchOptions, bench's Config and cases, inspect.Options, loader's model
// reference and Options. The commands restate them here, in one place.
var optionFlags = map[string]string{
	"Ref":          "--model",
	"Revision":     "--revision",
	"Repeat":       "--repeat",
	"Warmup":       "--warmup",
	"Modes":        "--mode",
	"Batch":        "--batch",
	"PromptLen":    "--prompt-len",
	"GenLen":       "--gen-len",
	"Steps":        "--steps",
	"Size":         "--size",
	"Context":      "--context",
	"Mode":         "--mode",
	"DType":        "--dtype",
	"KVDType":      "--kv-cache-dtype",
	"TP":           "--tp",
	"DP":           "--dp",
	"Quantize":     "--quantize",
	"Experts":      "--experts",
	"MaxBatch":     "--max-batch",
	"MaxContext":   "--max-context",
	"PrefillChunk": "--prefill-chunk",
}

// flagOf is the flag that sets a compile option field, or the field's own
// name for one no flag sets.
func flagOf(field string) string {
	if f, ok := optionFlags[field]; ok {
		return f
	}
	return field
}

// restateDevice names where the device spec came from in a tpu.SpecError
// that names no source of its own (tpu says "device SPEC"): the --device
// flag, or $TPUTOOL_DEVICE when that gave the spec. Other errors pass as
// they are.
func restateDevice(err error, fromEnv bool) error {
	var se *tpu.SpecError
	if err == nil || !errors.As(err, &se) {
		return err
	}
	label := "--device"
	if fromEnv {
		label = "$" + tpu.EnvDevice
	}
	return &restatedError{msg: strings.Replace(err.Error(), se.Error(), se.Text(label), 1), err: err}
}

// hubFlags restates the hub package's hints, which name its Client's
// fields, with the flags that set them.
var hubFlags = strings.NewReplacer(
	"HF_TOKEN or Client.Token", "HF_TOKEN or pass --token",
	"(HF_HUB_OFFLINE=1, Client.Offline) for a model in the cache, or give a local path",
	"(--offline, or HF_HUB_OFFLINE=1) for a model in the cache, or give a local path to --model",
	"(HF_HUB_OFFLINE, Client.Offline)", "(HF_HUB_OFFLINE or --offline)",
	"point HF_HUB_CACHE at a bigger disk", "point --cache-dir or HF_HUB_CACHE at a bigger disk",
	"download the files with network access first", "run `tputool download` with network access first",
)

// downloadHint is the loader's hint for a snapshot that lacks files,
// which the command line says as the command that fetches them.
var downloadHint = regexp.MustCompile("; download (\\S+) with network access first")

// restateHub restates a Hub error's hints (and a full disk's, which is
// not a Hub error) with tputool's flags and commands; other errors pass
// as they are.
func restateHub(err error) error {
	if err == nil || !errors.Is(err, errs.ErrHub) && !errors.Is(err, hub.ErrNoSpace) {
		return err
	}
	msg := downloadHint.ReplaceAllString(hubFlags.Replace(err.Error()), "; run `tputool download --model $1` with network access")
	if msg == err.Error() {
		return err
	}
	return &restatedError{msg: msg, err: err}
}

// restatedError is an error whose message names flags where the error it
// wraps named option fields; its kind (and exit code) is the wrapped
// error's.
type restatedError struct {
	msg string
	err error
}

func (e *restatedError) Error() string { return e.msg }
func (e *restatedError) Unwrap() error { return e.err }

// restateOptions restates an errs.OptionError inside err with the flags
// that set the fields it names; other errors pass as they are.
func restateOptions(err error) error {
	var oe *errs.OptionError
	if err == nil || !errors.As(err, &oe) {
		return err
	}
	return &restatedError{msg: strings.Replace(err.Error(), oe.Error(), oe.Text(flagOf), 1), err: err}
}
