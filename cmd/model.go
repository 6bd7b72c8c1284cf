package cmd

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/internal/ui"
	"github.com/tputool/tputool/loader"
	"github.com/tputool/tputool/loader/hub"
)

// resolveFunc resolves a parsed --model; loader.ResolveRef outside tests.
type resolveFunc func(ctx context.Context, ref loader.Ref, o loader.Options) (*loader.Checkpoint, error)

// resolveCheckpoint parses --model and resolves it with resolve: a Hub id
// through the client hubClient builds, a local directory without one
// (--revision, in lo.Revision, is then a usage error).
func resolveCheckpoint(ctx context.Context, resolve resolveFunc, hubClient func() *hub.Client, model string, lo loader.Options) (*loader.Checkpoint, error) {
	ref, err := loader.ParseRef(model)
	if err != nil {
		return nil, err
	}
	if !ref.Local {
		if err := checkRevisions(ref, lo.Revision); err != nil {
			return nil, err
		}
		lo.Client = hubClient()
	} else if lo.Revision != "" {
		return nil, errs.Usagef("--revision applies to Hub models, not the local directory %s", model)
	}
	return resolve(ctx, ref, lo)
}

// checkRevisions refuses a Hub --model ORG/NAME@REV with a --revision
// that names another revision: neither would silently win.
func checkRevisions(ref loader.Ref, revision string) error {
	if ref.Revision != "" && revision != "" && ref.Revision != revision {
		return errs.Usagef("--model %s and --revision %s name different revisions: give one", ref.Raw, revision)
	}
	return nil
}

// modelLabel names a model in results: the --model value as given for a
// local directory, the Hub id otherwise.
func modelLabel(m *loader.Checkpoint) string {
	if m.Local() {
		return m.Ref.Raw
	}
	return m.Name()
}

// addRetriesFlag adds --retries to a command that may download from the Hub.
func addRetriesFlag(c *cobra.Command, retries *int) {
	c.Flags().IntVar(retries, "retries", hub.DefaultRetries, "retries per Hub request after network errors, 5xx and 429")
}

// checkRetries validates --retries.
func checkRetries(retries int) error {
	if retries < 0 {
		return errs.Usagef("--retries %d: must not be negative", retries)
	}
	return nil
}

// retryingHubClient returns a lazy Hub client (Factory.HubClient) that
// retries each request as often as --retries says.
func (f *Factory) retryingHubClient(retries int) func() *hub.Client {
	return func() *hub.Client {
		hc := f.HubClient()
		hc.Retries = retries
		return hc
	}
}

// debugRecompile is the OnRecompile hook of compile.Options,
// compile.ExecutorOptions and compile.Program: a --verbose line per
// executable compiled again, naming its first input shapes (a whole
// step's inputs are every weight's: hundreds).
func debugRecompile(rep *ui.Reporter) func(program, shapes string) {
	return func(program, shapes string) {
		rep.Debugf("compile: %s compiles again for new input shapes %s", program, firstShapes(shapes, recompileShapes))
	}
}

// recompileShapes is how many input shapes a recompile's line names.
const recompileShapes = 8

// firstShapes is the first n of the space-separated input shapes
// ("(Int32)[1 3] (Float32)[1 3 768] …"), and how many more there are.
func firstShapes(shapes string, n int) string {
	parts := strings.SplitAfter(shapes, " (")
	if len(parts) <= n {
		return shapes
	}
	return strings.TrimSuffix(strings.Join(parts[:n], ""), " (") + fmt.Sprintf(" … and %d more", len(parts)-n)
}
