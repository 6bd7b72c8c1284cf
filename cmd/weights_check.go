package cmd

import (
	"sync"

	"github.com/tputool/tputool/internal/ui"
	"github.com/tputool/tputool/loader/safetensors"
)

// maxNonFiniteWarnings bounds the tensors named one by one.
const maxNonFiniteWarnings = 8

// nonFiniteWarnings warns, naming the tensor, about weights that hold NaN
// or infinite values: a damaged download that still matches its hash, or
// a bad fp16 conversion, otherwise shows up only as NaN logits or garbage
// output. The loaders find them while they convert the weights
// (lm.Loaded.OnNonFinite, sd.Options.OnNonFinite take note); done adds
// the count of tensors beyond the first maxNonFiniteWarnings.
type nonFiniteWarnings struct {
	r *ui.Reporter

	mu          sync.Mutex
	shown, more int
}

func newNonFiniteWarnings(r *ui.Reporter) *nonFiniteWarnings { return &nonFiniteWarnings{r: r} }

// note warns about one tensor (diffusers names are component/tensor).
func (w *nonFiniteWarnings) note(nf safetensors.NonFiniteTensor) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.shown == maxNonFiniteWarnings {
		w.more++
		return
	}
	w.shown++
	w.r.Warnf("weights: tensor %s (%s) holds %d NaN/Inf value(s) of %d, the first at element %d; the output may be NaN or garbage",
		nf.Name, nf.DType, nf.Count, nf.Elements, nf.First)
}

// done reports the tensors not named, once loading is over.
func (w *nonFiniteWarnings) done() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.more > 0 {
		w.r.Warnf("weights: %d more tensor(s) hold NaN/Inf values", w.more)
		w.more = 0
	}
}
