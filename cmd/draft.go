package cmd

import (
	"context"
	"fmt"
	"sync"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/spf13/cobra"

	"github.com/tputool/tputool/compile"
	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/internal/ui"
	"github.com/tputool/tputool/loader"
	"github.com/tputool/tputool/loader/tokenizer"
	"github.com/tputool/tputool/pipeline/generate"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/serve"
	"github.com/tputool/tputool/tpu"
)

// Speculative decoding with a draft model (generate, chat, serve): --draft-model
// names a smaller model of the same tokenizer, which proposes each step's
// draft in place of prompt lookup (generate.DraftModel).

// defaultDraftTokens is --speculate's value with --draft-model when it
// is not given.
const defaultDraftTokens = 8

// maxVocabDifference is how many more tokens one of the two tokenizers
// may have (llama.cpp's SPEC_VOCAB_MAX_SIZE_DIFFERENCE): added tokens at
// the end.
const maxVocabDifference = 128

// addDraft adds the draft model's flags.
func (s *speculateFlags) addDraft(c *cobra.Command) {
	fl := c.Flags()
	fl.StringVar(&s.Model, "draft-model", "", fmt.Sprintf("speculative decoding with a draft model: a smaller model with the same tokenizer (Hub id or directory, e.g. Qwen/Qwen3-0.6B for Qwen/Qwen3-8B) proposes up to --speculate tokens a step (default %d here: its argmax decoding greedily, draws from its own distribution sampling), and the model confirms them in one step; the tokens are those decoding without it gives (greedy), or of the same distribution (sampling, by speculative sampling's rule). It runs on the same device, in the model's dtype and mode", defaultDraftTokens))
	fl.Float64Var(&s.PMin, "draft-p-min", generate.DefaultDraftPMin, "end a draft where the draft model's (or --mtp head's) likeliest next token has less than this probability (0 to 1; 0: drafts as long as --speculate)")
	fl.StringVar(&s.Quantize, "draft-quantize", "", "hold the draft model's weights as int8 or int4 (none: as --dtype)")
}

// defaultMTPTokens is --speculate's value with --mtp when it is not
// given: the head is trained to predict one token ahead, and its
// chained guesses fall off after two (vLLM's recommended
// num_speculative_tokens for Qwen3-Next and Qwen3.5).
const defaultMTPTokens = 2

// addMTP adds --mtp (generate, chat, serve).
func (s *speculateFlags) addMTP(c *cobra.Command) {
	c.Flags().BoolVar(&s.MTP, "mtp", false, fmt.Sprintf("speculative decoding with the model's own multi-token-prediction head (mtp.* in Qwen3.5, Qwen3.5-MoE and Qwen3-Next checkpoints, the layer past num_hidden_layers in DeepSeek-V3 and GLM-4.5 ones, as vLLM's mtp method): it drafts up to --speculate tokens a step (default %d here) from the model's hidden states, and the model confirms them in one step, with the tokens of decoding without it (greedy) or of the same distribution (sampling). Its weights (one decoder layer) load with the model's", defaultMTPTokens))
}

// checkDraft checks the draft model's flags (changed reports those given
// on the command line; nil: none); --speculate defaults to
// defaultDraftTokens with --draft-model.
func (s *speculateFlags) checkDraft(changed func(string) bool) error {
	given := func(name string) bool { return changed != nil && changed(name) }
	if s.PMin < 0 || s.PMin > 1 || s.PMin != s.PMin {
		return errs.Usagef("--draft-p-min %v: want a probability, 0 to 1", s.PMin)
	}
	q, err := parseQuantize(s.Quantize)
	if err != nil {
		return errs.Usagef("--draft-quantize %q: want int8, int4 or none", s.Quantize)
	}
	s.Quantize = q
	switch {
	case s.MTP && s.Model != "":
		return errs.Usagef("--mtp and --draft-model each give the drafts: drop one")
	case s.MTP && given("draft-quantize"):
		return errs.Usagef("--draft-quantize applies to --draft-model; the --mtp head is held as the model's weights (--quantize)")
	case s.MTP && s.Draft == 0 && given("speculate"):
		return errs.Usagef("--speculate 0 turns speculation off, and --mtp speculates: drop one (--speculate defaults to %d with --mtp)", defaultMTPTokens)
	case s.MTP:
		if s.Draft == 0 {
			s.Draft = defaultMTPTokens
		}
		return nil
	case s.Model == "" && given("draft-p-min"):
		return errs.Usagef("--draft-p-min applies to --draft-model or --mtp, neither of which is given")
	case s.Model == "" && given("draft-quantize"):
		return errs.Usagef("--draft-quantize applies to --draft-model, which is not given")
	case s.Model != "" && s.Draft == 0 && given("speculate"):
		return errs.Usagef("--speculate 0 turns speculation off, and --draft-model speculates: drop one (--speculate defaults to %d with --draft-model)", defaultDraftTokens)
	case s.Model != "" && s.Draft == 0:
		s.Draft = defaultDraftTokens
	}
	return nil
}

// openedDraft is a draft model opened for a command: the proposer, its
// runner and what to release. A nil *openedDraft is none.
type openedDraft struct {
	model  *generate.DraftModel
	runner *compile.Runner
	loaded *lm.Loaded
	close  func()
}

// Model is the draft model's proposer (nil: none).
func (d *openedDraft) Model() *generate.DraftModel {
	if d == nil {
		return nil
	}
	return d.model
}

// Close releases the draft model (none: nothing).
func (d *openedDraft) Close() {
	if d != nil {
		d.close()
	}
}

// Executables is how many executables the draft model's runner has
// compiled (none: 0).
func (d *openedDraft) Executables() int {
	if d == nil || d.runner == nil { // an MTP head's are the model's runner's
		return 0
	}
	return d.runner.Stats().Executables
}

// openDraft loads --draft-model where speculation will run (prompts
// prompts a Run on a target that speculates; apply warns otherwise), on
// dev as the model runs (dtype, mode, KV caches, experts), its weights as
// --draft-quantize says. Its tokenizer must be tok's (checkDraftVocab),
// and its runner Rewindable (to any earlier token). A failure of the draft
// model while generating warns once. nil where there is none.
func (s *speculateFlags) openDraft(ctx context.Context, o *lmOptions, dev *tpu.Device, dtype dtypes.DType, tok *tokenizer.Tokenizer, target *compile.Runner, prompts int) (*openedDraft, error) {
	if s.Model == "" || s.Draft == 0 || !target.Speculates() || prompts > 1 {
		return nil, nil
	}
	m, err := resolveCheckpoint(ctx, o.Resolve, o.HubClient, s.Model, loader.Options{})
	if err != nil {
		return nil, fmt.Errorf("--draft-model: %w", err)
	}
	if m.Kind != loader.Transformers {
		return nil, errs.Unsupportedf("--draft-model %s is a %s pipeline, not a language model", m.Name(), m.Kind)
	}
	dtok, err := tokenizer.LoadDir(m.Dir)
	if err != nil {
		return nil, fmt.Errorf("--draft-model: %w", err)
	}
	if err := checkDraftVocab(tok, dtok, m.Name()); err != nil {
		return nil, err
	}
	loaded, err := openModel(m, dev, dtype, o.Reporter)
	if err != nil {
		return nil, fmt.Errorf("--draft-model: %w", err)
	}
	spec := loaded.Model.Spec()
	if err := compile.GenerateError(spec); err != nil {
		loaded.Close()
		return nil, fmt.Errorf("--draft-model: %w", err)
	}
	r, err := compileRunner(dev, loaded, compile.Options{Mode: o.Mode, DType: dtype, KVDType: o.KVDType, Experts: o.Experts, Quantize: s.Quantize}, o.HostMemory, o.Reporter)
	if err != nil {
		loaded.Close()
		return nil, fmt.Errorf("--draft-model: %w", err)
	}
	st := r.NewState()
	d, err := generate.NewDraftModel(st, min(target.Spec().VocabSize, spec.VocabSize), spec.MaxPositions)
	if err != nil {
		r.Close()
		loaded.Close()
		return nil, errs.Unsupportedf("--draft-model %s: %s on this device cannot take its caches back to any earlier token (a draft model with recurrent state, or --experts host)", m.Name(), spec.Architecture)
	}
	d.PMin = s.PMin
	var once sync.Once
	d.OnError = func(err error) {
		once.Do(func() {
			o.Reporter.Warnf("--draft-model: %v (that step decoded without a draft; the draft model sits out a while after each failure)", err)
		})
	}
	o.Reporter.Debugf("draft model %s: %s, %d layers, hidden %d", m.Name(), spec.Architecture, spec.Layers, spec.Hidden)
	return &openedDraft{model: d, runner: r, loaded: loaded, close: func() {
		st.Release()
		r.Close()
		loaded.Close()
	}}, nil
}

// withMTP makes loaded read the model's multi-token-prediction head
// where --mtp will draft with it: a Run of one prompt (prompts: a Run's).
// A model without a head is refused (exit 3).
func (s *speculateFlags) withMTP(loaded *lm.Loaded, prompts int) error {
	if !s.MTP || s.Draft == 0 || prompts > 1 {
		return nil
	}
	if err := loaded.WithMTP(); err != nil {
		return fmt.Errorf("--mtp: %w", err)
	}
	return nil
}

// openMTP readies --mtp's drafts on st, a State of target, whose runner
// loaded the head (withMTP): nil where speculation will not run (apply
// warns) or --mtp is not given.
func (s *speculateFlags) openMTP(rep *ui.Reporter, target *compile.Runner, st *compile.State, prompts int) (*openedDraft, error) {
	if prompts > 1 {
		return nil, nil // apply says why it does not speculate
	}
	if ok, err := s.mtpRuns(target); !ok {
		return nil, err
	}
	h, err := st.MTP()
	if err != nil {
		return nil, fmt.Errorf("--mtp: %w", err)
	}
	d := s.mtpDraft(h, target)
	var once sync.Once
	d.OnError = func(err error) {
		once.Do(func() {
			rep.Warnf("--mtp: %v (that step decoded without a draft; the head drafts no more until the model's cache begins afresh)", err)
		})
	}
	rep.Debugf("multi-token-prediction head: drafts of up to %d tokens", s.Draft)
	return &openedDraft{model: d, close: func() {}}, nil
}

// serveMTP readies --mtp's drafts for serve's lone sequence on batch,
// whose runner loaded the head (withMTP): nil where --mtp is not given
// (speculation off is said by the caller).
func (s *speculateFlags) serveMTP(target *compile.Runner, batch *compile.Batch) (*generate.DraftModel, error) {
	if ok, err := s.mtpRuns(target); !ok || batch == nil {
		return nil, err
	}
	h, err := batch.MTP()
	if err != nil {
		return nil, fmt.Errorf("--mtp: %w", err)
	}
	return s.mtpDraft(h, target), nil
}

// mtpRuns reports whether --mtp drafts on target: given, and on a runner
// that speculates (where it does not, the caller says why); one that
// speculates but cannot draft with its head is refused.
func (s *speculateFlags) mtpRuns(target *compile.Runner) (bool, error) {
	switch {
	case !s.MTP || s.Draft == 0 || !target.Speculates():
		return false, nil
	case !target.HasMTP():
		return false, errs.Unsupportedf("--mtp: the multi-token-prediction head drafts in compiled mode (--mode compiled)")
	}
	return true, nil
}

// mtpDraft proposes drafts with the head h of target's model, ended as
// --draft-p-min says.
func (s *speculateFlags) mtpDraft(h generate.MTPDrafter, target *compile.Runner) *generate.DraftModel {
	d := generate.NewMTPDraft(h, target.Spec().VocabSize)
	d.PMin = s.PMin
	return d
}

// checkStateFits refuses a generation of one prompt of longest tokens
// and maxNew more whose KV caches, the model's (m) and the draft
// model's (drafts of up to speculate tokens), together exceed the host's
// memory (checkStateFits for the two); none is a no-op.
func (d *openedDraft) checkStateFits(m lm.Model, longest, maxNew, speculate int, dtype, kv dtypes.DType, hostMemoryFn func() int64) error {
	if d == nil || d.loaded == nil || hostMemoryFn == nil { // an MTP head's cache counts in the model's (checkStateFits)
		return nil
	}
	_, a, okA := stateNeed(m, 1, longest, maxNew, dtype, kv)
	_, b, okB := stateNeed(d.loaded.Model, 1, longest, maxNew+speculate, dtype, kv)
	return checkHostMemory("the KV caches of the model and the draft model", a+b, !okA || !okB || a+b < a, hostMemoryFn(),
		fmt.Sprintf("lower --max-new-tokens (now %d)%s", maxNew, narrowerKV(kv)))
}

// checkDraftVocab refuses a draft model whose tokenizer is not the
// model's: every id both have must be the same token, and one may have
// at most maxVocabDifference more.
func checkDraftVocab(model, draft *tokenizer.Tokenizer, name string) error {
	a, b := model.VocabSize(), draft.VocabSize()
	if a-b > maxVocabDifference || b-a > maxVocabDifference {
		return errs.Usagef("--draft-model %s: its tokenizer has %d tokens and the model's %d: a draft model needs the model's tokenizer", name, b, a)
	}
	for id := range min(a, b) {
		x, _ := model.IDToToken(id)
		y, _ := draft.IDToToken(id)
		if x != y {
			return errs.Usagef("--draft-model %s: its token %d is %q and the model's %q: a draft model needs the model's tokenizer", name, id, y, x)
		}
	}
	return nil
}

// draftWarnings is serve's Observer with a warning at the first failure
// of its draft model (a sequence decodes one token a step then; the
// metrics count every failure).
type draftWarnings struct {
	serve.Observer
	rep  *ui.Reporter
	flag string // --draft-model or --mtp
	once sync.Once
}

func (w *draftWarnings) DraftFailed(err error) {
	w.Observer.DraftFailed(err)
	w.once.Do(func() {
		w.rep.Warnf("%s: %v (that step decoded one token; tputool_draft_errors_total counts the failures)", w.flag, err)
	})
}
