package cmd

import (
	"github.com/tputool/tputool/internal/ui"
	"github.com/tputool/tputool/loader"
)

// maxNonFiniteWarnings bounds the tensors named one by one.
const maxNonFiniteWarnings = 8

// warnNonFinite scans every weight file of the model and warns, naming
// the tensor, about NaN and infinite values: a damaged download that
// still matches its hash, or a bad fp16 conversion, otherwise shows up
// only as NaN logits or garbage output. Files that cannot be opened are
// skipped here; loading them reports the error.
func warnNonFinite(m *loader.Model, r *ui.Reporter) {
	ws, err := m.AllWeights()
	if err != nil {
		return
	}
	shown, more := 0, 0
	for _, w := range ws {
		ck, err := m.OpenCheckpoint(w.Component)
		if err != nil {
			continue
		}
		for _, nf := range ck.NonFinite() {
			if shown == maxNonFiniteWarnings {
				more++
				continue
			}
			shown++
			name := nf.Name
			if w.Component != "" {
				name = w.Component + "/" + name
			}
			r.Warnf("weights: tensor %s (%s) holds %d NaN/Inf value(s) of %d, the first at element %d; the output may be NaN or garbage",
				name, nf.DType, nf.Count, nf.Elements, nf.First)
		}
		ck.Close()
	}
	if more > 0 {
		r.Warnf("weights: %d more tensor(s) hold NaN/Inf values", more)
	}
}
