package cmd

import (
	"github.com/gomlx/gomlx/pkg/core/dtypes"

	"github.com/tputool/tputool/compile"
	"github.com/tputool/tputool/internal/ui"
	"github.com/tputool/tputool/loader"
	"github.com/tputool/tputool/pipeline/lm"
	_ "github.com/tputool/tputool/pipeline/models" // the text architectures tputool runs
	"github.com/tputool/tputool/tpu"
)

// The route from --model to a running language model, one for generate
// and bench (and the commands to come): resolveModel gives the
// *loader.Model (config.json read once), openLM checks its checkpoint
// against the architecture, and compileLM converts the weights and builds
// the executables on the device.

// computeDType is the dtype a model runs in: --dtype when given
// (InvalidDType means auto), else the device's preferred one.
func computeDType(flag dtypes.DType, dev *tpu.Device) dtypes.DType {
	if flag == dtypes.InvalidDType {
		return dev.ComputeDType
	}
	return flag
}

// openLM loads the language model m, strictly checked against its
// architecture, and describes it under --verbose.
func openLM(m *loader.Model, dev *tpu.Device, dtype dtypes.DType, rep *ui.Reporter) (*lm.Loaded, error) {
	l, err := lm.Load(m)
	if err != nil {
		return nil, err
	}
	spec := l.Model.Spec()
	rep.Debugf("model %s: %s, %d layers, hidden %d, vocab %d; %s on %s (%s)",
		m.Name(), spec.Architecture, spec.Layers, spec.Hidden, spec.VocabSize, dtype, dev.Spec, dev.BackendName)
	return l, nil
}

// compileLM builds l's runner on dev, with the device's capabilities:
// the weights are converted (with a warning per tensor holding NaN or
// Inf) and the executables compiled as o says; recompiles and the parallel
// layout are reported under --verbose.
func compileLM(dev *tpu.Device, l *lm.Loaded, o compile.Options, rep *ui.Reporter) (*compile.LM, error) {
	nonFinite := newNonFiniteWarnings(rep)
	l.OnNonFinite = nonFinite.note // weights are checked as NewLM converts them
	o.OnRecompile = debugRecompile(rep)
	o.Caps = &dev.Capabilities
	r, err := compile.NewLM(dev.Backend, l, o)
	nonFinite.done()
	if err != nil {
		return nil, err
	}
	rep.Debugf("%s mode ready", o.Mode)
	if par := r.Parallel(); par.Devices > 1 {
		rep.Debugf("parallel: TP %d x DP %d over %d devices, %d weights split", par.TP, par.DP, par.Devices, par.Split)
	}
	return r, nil
}
