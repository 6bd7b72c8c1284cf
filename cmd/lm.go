package cmd

import (
	"fmt"
	"time"

	"github.com/gomlx/gomlx/pkg/core/dtypes"

	"github.com/tputool/tputool/compile"
	"github.com/tputool/tputool/internal/ui"
	"github.com/tputool/tputool/loader"
	"github.com/tputool/tputool/loader/tokenizer"
	"github.com/tputool/tputool/pipeline/generate"
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
	rep.Debugf("model %s: %s, %d layers, hidden %d, vocab %d; %s on %s",
		m.Name(), spec.Architecture, spec.Layers, spec.Hidden, spec.VocabSize, dtype, deviceLabel(dev))
	return l, nil
}

// compileLM builds l's runner on dev, with the device's capabilities:
// the weights are checked against host memory as they will be held
// (checkWeightsFit), converted or quantised (with a warning per tensor
// holding NaN or Inf) and the executables compiled as o says; the held
// weights, recompiles and the parallel layout are reported under
// --verbose.
func compileLM(dev *tpu.Device, l *lm.Loaded, o compile.Options, rep *ui.Reporter) (*compile.LM, error) {
	hostMemory, _ := tpu.HostMemory(tpu.OSEnv())
	if err := checkWeightsFit(dev, l, o, hostMemory); err != nil {
		return nil, err
	}
	nonFinite := newNonFiniteWarnings(rep)
	l.OnNonFinite = nonFinite.note // weights are checked as NewLM converts them
	o.OnRecompile = debugRecompile(rep)
	o.Caps = &dev.Capabilities
	r, err := compile.NewLM(dev.Backend, l, o)
	nonFinite.done()
	if err != nil {
		return nil, err
	}
	gcHeadroom(dev, r.WeightBytes())
	rep.Debugf("%s", weightsLine(l, r, holdingOf(dev, o)))
	rep.Debugf("%s mode ready", o.Mode)
	if par := r.Parallel(); par.Devices > 1 {
		rep.Debugf("parallel: TP %d x DP %d over %d devices, %d weights split", par.TP, par.DP, par.Devices, par.Split)
	}
	return r, nil
}

// deviceLabel names the device a spec resolved to, for --verbose: "cpu
// (go backend)", "tpu (xla backend, 4 devices)", with what was asked for
// when that differs ("cpu (go backend; asked for auto)").
func deviceLabel(dev *tpu.Device) string {
	s := fmt.Sprintf("%s (%s backend", dev.Kind, dev.BackendName)
	if dev.NumDevices > 1 {
		s += fmt.Sprintf(", %d devices", dev.NumDevices)
	}
	if dev.Spec != "" && dev.Spec != string(dev.Kind) {
		s += "; asked for " + dev.Spec
	}
	return s + ")"
}

// streamDecoder returns the stream decoder of one row: primed with the last
// tokens of its prompt as context, so the first generated token keeps the
// leading space it has in the decode of prompt plus continuation (" and",
// not "and"). A context that leaves a character incomplete is dropped.
func streamDecoder(tok *tokenizer.Tokenizer, prompt []int) generate.StreamDecoder {
	ctx := prompt[max(0, len(prompt)-4):]
	d := tok.NewStreamDecoder(true)
	got := ""
	for _, id := range ctx {
		got += d.Add(id)
	}
	if got != tok.Decode(ctx, true) {
		return tok.NewStreamDecoder(true)
	}
	return d
}

// prefillSlowAfter is how long a prefill runs before it shows progress:
// short prompts print nothing.
const prefillSlowAfter = time.Second

// prefillReporter shows prefill progress: a bar on a terminal (tokens done
// of N, rate), plain lines or NDJSON progress events otherwise, once a
// prefill has run for a second; under --verbose a line with its time and
// rate when it ends. on is generate.Options.OnPrefill.
type prefillReporter struct {
	rep   *ui.Reporter
	now   func() time.Time
	start time.Time
	task  *ui.Task
}

func newPrefillReporter(rep *ui.Reporter, now func() time.Time) *prefillReporter {
	return &prefillReporter{rep: rep, now: now}
}

// begin marks the start of a prefill.
func (p *prefillReporter) begin() {
	p.start, p.task = p.now(), nil
}

func (p *prefillReporter) on(done, total int) {
	now := p.now()
	if p.task == nil && done < total && now.Sub(p.start) >= prefillSlowAfter {
		p.task = p.rep.Start("prefill", int64(total), ui.UnitTokens)
	}
	if p.task != nil {
		p.task.Set(int64(done))
	}
	if done < total {
		return
	}
	if p.task != nil {
		p.task.Done()
		p.task = nil
	}
	took := now.Sub(p.start)
	rate := 0.0
	if took > 0 {
		rate = float64(total) / took.Seconds()
	}
	p.rep.Debugf("prefill: %d tokens in %s (%.1f tokens/s)", total, took.Round(time.Millisecond), rate)
}

// end clears a progress bar left by a prefill that did not finish.
func (p *prefillReporter) end() {
	if p.task != nil {
		p.task.Done()
		p.task = nil
	}
}
