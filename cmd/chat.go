package cmd

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/tputool/tputool/compile"
	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/internal/ui"
	"github.com/tputool/tputool/loader/tokenizer"
	"github.com/tputool/tputool/loader/tokenizer/chat"
	"github.com/tputool/tputool/pipeline/generate"
	"github.com/tputool/tputool/pipeline/serve"
)

// ChatOptions holds `tputool chat`'s inputs.
type ChatOptions struct {
	lmOptions
	// OnInterrupt installs the Ctrl-C handler while an answer runs
	// (Factory.OnInterrupt); nil: Ctrl-C ends the session.
	OnInterrupt func(func() bool) func()

	System string
	// PrefillChunk is --prefill-chunk (see GenerateOptions).
	PrefillChunk int
	// Overrides are the sampling flags given; /set changes them.
	Overrides generate.Overrides
	// Speculate is --speculate and --speculate-ngram.
	Speculate speculateFlags
}

// NewCmdChat builds `tputool chat`.
func NewCmdChat(f *Factory, runF func(context.Context, *ChatOptions) error) *cobra.Command {
	opts := &ChatOptions{lmOptions: newLMOptions(f)}
	var sampling samplingFlags
	c := &cobra.Command{
		Use:   "chat --model MODEL",
		Short: "Talk with a language model through its chat template",
		Long: `Hold a conversation with a chat model: each line you type is a user message,
rendered with the tokenizer's chat template together with the conversation so
far, and the answer streams back. The model flags are generate's.

When the new rendered conversation starts with everything already in the
model's cache (the previous prompt and answer), only the new tokens are
prefilled; otherwise the whole conversation is.

Commands:
  /bye            end the session (so does Ctrl-D, or the end of stdin)
  /clear          forget the conversation (the system message stays)
  /system TEXT    set the system message (/system alone removes it)
  /set NAME VALUE change a sampling setting: max-new-tokens, temperature,
                  top-k, top-p, min-p, repetition-penalty, seed, stop
  /help           this list

Ctrl-C stops the answer being written, not the session. On a terminal the
line can be edited (arrows, Home/End, Ctrl-A/E/K/U/W, history with up/down).
When stdin is not a terminal, each line is one user turn and nothing but the
answers is printed, one per turn; with --json each turn is one JSON object
({"type":"turn", "turn", "user", "text", "finish_reason", "seed", "metrics"}).`,
		Example: `  tputool chat --model Qwen/Qwen3-0.6B
  tputool chat --model Qwen/Qwen3-0.6B --system "Answer in one sentence." --temperature 0.7
  printf 'Hi!\nWhat is a TPU?\n' | tputool chat --model Qwen/Qwen3-0.6B --temperature 0
  printf 'Hi!\n/set temperature 0.9\nTell me a story.\n' | tputool chat -m ./my-qwen --json`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, args []string) error {
			if err := opts.requireModel(); err != nil {
				return err
			}
			if err := opts.parse(f); err != nil {
				return err
			}
			if err := sampling.overrides(c, &opts.Overrides); err != nil {
				return err
			}
			if opts.PrefillChunk < -1 {
				return errs.Usagef("--prefill-chunk %d: want a token count, 0 (timed pieces) or -1 (one piece)", opts.PrefillChunk)
			}
			if err := opts.Speculate.check(c.Flags().Changed); err != nil {
				return err
			}
			if opts.DP > 1 {
				return errs.Usagef("--dp %d: a chat is one conversation (batch 1); use --tp", opts.DP)
			}
			opts.OnInterrupt = f.OnInterrupt
			if runF != nil {
				return runF(c.Context(), opts)
			}
			return chatRun(c.Context(), opts)
		},
	}
	fl := c.Flags()
	opts.addFlags(c, false, "tensor parallelism: split attention heads and MLP over this many devices", "data parallelism (a chat is batch 1: only 1)")
	fl.StringVar(&opts.System, "system", "", "system message (/system changes it)")
	sampling.add(c, &opts.Overrides.Stop)
	fl.IntVar(&opts.PrefillChunk, "prefill-chunk", 0, "prompt tokens per prefill piece; Ctrl-C is checked between pieces (0: pieces of about 800 ms, on an accelerator of 512 tokens; -1: the whole prompt at once)")
	opts.Speculate.add(c)
	opts.Speculate.addDraft(c)
	opts.Speculate.addMTP(c)
	return c
}

// chatSession is one conversation with a loaded model.
type chatSession struct {
	opts  *ChatOptions
	tok   *tokenizer.Tokenizer
	tmpl  *chat.Template
	state *compile.State // the conversation's cache, continued across turns
	// draft is --draft-model's, its cache continued across turns too
	// (nil: none).
	draft *generate.DraftModel
	spec  struct{ maxPositions int }
	gen   func() (generate.Options, error)

	system  string
	history []chat.Message
	turn    int
	// cached are the tokens in the state's cache (the last prompt and
	// its answer but the answer's last token); nil when the cache cannot
	// be continued.
	cached []int
	out    io.Writer // where answers go (the line editor on a terminal)
	nd     *ui.NDJSON
}

func chatRun(ctx context.Context, opts *ChatOptions) error {
	start := opts.Now()
	rep := opts.Reporter
	m, tok, err := opts.resolveLM(ctx)
	if err != nil {
		return err
	}
	tmpl, err := tok.ChatTemplate("")
	if err != nil {
		return fmt.Errorf("chat needs the model's chat template: %w", err)
	}
	dev, dtype, loaded, err := opts.openGenerating(m)
	if err != nil {
		return err
	}
	defer loaded.Close()
	if err := opts.Speculate.withMTP(loaded, 1); err != nil {
		return err
	}
	spec := loaded.Model.Spec()
	runner, err := compileRunner(dev, loaded, compile.Options{Mode: opts.Mode, DType: dtype, KVDType: opts.KVDType, TP: opts.TP, DP: opts.DP, Experts: opts.Experts}, opts.HostMemory, rep)
	if err != nil {
		return err
	}
	defer runner.Close()
	st := runner.NewState()
	defer st.Release()
	draft, err := opts.Speculate.openDraft(ctx, &opts.lmOptions, dev, dtype, tok, runner, 1)
	if err != nil {
		return err
	}
	if draft == nil {
		if draft, err = opts.Speculate.openMTP(rep, runner, st, 1); err != nil {
			return err
		}
	}
	defer draft.Close()
	s := &chatSession{draft: draft.Model(), opts: opts, tok: tok, tmpl: tmpl, state: st, system: opts.System, out: opts.IO.Out}
	s.spec.maxPositions = spec.MaxPositions
	s.gen = func() (generate.Options, error) {
		return generate.ResolveWith(loaded.Generation, spec.EOS, tokenizerEOS(tok), opts.Overrides)
	}
	first, err := s.gen()
	if err != nil {
		return err
	}
	opts.Speculate.apply(&first, rep, runner, 1, draft.Model()) // says whether it runs
	if err := checkStateFits(loaded.Model, 1, spec.MaxPositions, 0, opts.TP, opts.DP, dtype, opts.KVDType, opts.HostMemory); err != nil {
		rep.Warnf("a conversation as long as the model's %d positions may not fit in memory: %v", spec.MaxPositions, err)
	}
	rep.Debugf("ready in %s", opts.Now().Sub(start).Round(time.Millisecond))
	if opts.JSON {
		s.nd = ui.NewNDJSON(opts.IO.Out)
	}

	if f, ok := opts.IO.In.(*os.File); ok && opts.IO.IsStdinTTY() && opts.IO.IsStdoutTTY() && !opts.IO.IsDumbTerminal() && !opts.JSON && term.IsTerminal(int(f.Fd())) {
		return s.interactive(ctx, f)
	}
	return s.lines(ctx, opts.IO.In)
}

// lines reads one user turn per line (stdin not a terminal).
func (s *chatSession) lines(ctx context.Context, in io.Reader) error {
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		if ctx.Err() != nil {
			return fmt.Errorf("chat: %w", errs.ErrInterrupted)
		}
		done, err := s.line(ctx, strings.TrimRight(sc.Text(), "\r"))
		if err != nil || done {
			return err
		}
	}
	return sc.Err()
}

// interactive runs the session on a terminal with line editing: the
// terminal is raw while a line is read and cooked while the answer runs,
// so Ctrl-C reaches the answer as a signal.
func (s *chatSession) interactive(ctx context.Context, f *os.File) error {
	fd := int(f.Fd())
	in := &ctrlCReader{r: f}
	t := term.NewTerminal(struct {
		io.Reader
		io.Writer
	}{in, s.opts.IO.Out}, ">>> ")
	fmt.Fprintln(s.opts.IO.ErrOut, "Type a message; /help for commands, /bye or Ctrl-D to leave.")
	for {
		if ctx.Err() != nil {
			return fmt.Errorf("chat: %w", errs.ErrInterrupted)
		}
		old, err := term.MakeRaw(fd)
		if err != nil {
			return err
		}
		in.sawCtrlC = false
		line, err := t.ReadLine()
		term.Restore(fd, old)
		if errors.Is(err, io.EOF) {
			if in.sawCtrlC {
				fmt.Fprintln(s.opts.IO.ErrOut, "^C (Ctrl-D or /bye to leave)")
				continue
			}
			fmt.Fprintln(s.opts.IO.Out)
			return nil
		}
		if err != nil && !errors.Is(err, term.ErrPasteIndicator) {
			return err
		}
		done, err := s.line(ctx, line)
		if err != nil || done {
			return err
		}
	}
}

// ctrlCReader notes a Ctrl-C byte on its way to the line editor, which
// reports Ctrl-C and Ctrl-D alike as io.EOF.
type ctrlCReader struct {
	r        io.Reader
	sawCtrlC bool
}

func (c *ctrlCReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if slices.Contains(p[:n], 3) {
		c.sawCtrlC = true
	}
	return n, err
}

const chatHelp = `/bye            end the session (or Ctrl-D)
/clear          forget the conversation
/system TEXT    set the system message (/system alone removes it)
/set NAME VALUE change a sampling setting (max-new-tokens, temperature, top-k, top-p, min-p, repetition-penalty, seed, stop)
/help           this list`

// line handles one line: a command or a user turn. It reports whether the
// session ends. Errors of a command or a turn are printed and the session
// goes on; only fatal errors end it.
func (s *chatSession) line(ctx context.Context, line string) (bool, error) {
	trimmed := strings.TrimSpace(line)
	if trimmed == "" {
		return false, nil
	}
	if !strings.HasPrefix(trimmed, "/") {
		return false, s.answer(ctx, line)
	}
	cmd, arg, _ := strings.Cut(trimmed, " ")
	arg = strings.TrimSpace(arg)
	switch cmd {
	case "/bye", "/exit", "/quit":
		return true, nil
	case "/clear":
		s.history = nil
		s.cached = nil
		s.note("conversation cleared")
	case "/system":
		s.system = arg
		if arg == "" {
			s.note("system message removed")
		} else {
			s.note("system message set")
		}
	case "/set":
		name, value, _ := strings.Cut(arg, " ")
		name = strings.TrimPrefix(name, "--")
		next := s.opts.Overrides
		next.Stop = slices.Clone(next.Stop)
		if err := setSampling(&next, name, value); err != nil {
			s.noteErr(err)
			return false, nil
		}
		old := s.opts.Overrides
		s.opts.Overrides = next
		if _, err := s.gen(); err != nil {
			s.opts.Overrides = old
			s.noteErr(err)
			return false, nil
		}
		s.note(fmt.Sprintf("set %s %s", name, strings.TrimSpace(value)))
	case "/help", "/?":
		s.note(chatHelp)
	default:
		s.note(fmt.Sprintf("unknown command %s\n%s", cmd, chatHelp))
	}
	return false, nil
}

// note prints a session message on stderr: as it is, or under --json as
// an NDJSON log line, so that stderr stays NDJSON there.
func (s *chatSession) note(msg string) {
	if s.nd != nil {
		s.opts.Reporter.Infof("%s", msg)
		return
	}
	fmt.Fprintln(s.opts.IO.ErrOut, msg)
}

// noteErr prints an error the session goes on after (a bad /set, a turn
// that failed): "error: ..." on stderr, or a warning log line under --json
// (an "error" object is the command's own failure, with its exit code).
func (s *chatSession) noteErr(err error) {
	if s.nd != nil {
		s.opts.Reporter.Warnf("%v", err)
		return
	}
	fmt.Fprintln(s.opts.IO.ErrOut, "error:", err)
}

// answer runs one user turn: render the conversation, prefill what the
// cache does not hold, stream the answer.
func (s *chatSession) answer(ctx context.Context, user string) error {
	rep := s.opts.Reporter
	errOut := s.opts.IO.ErrOut
	var msgs []chat.Message
	if s.system != "" {
		msgs = append(msgs, chat.Message{Role: "system", Content: s.system})
	}
	msgs = append(msgs, s.history...)
	msgs = append(msgs, chat.Message{Role: "user", Content: user})
	text, err := s.tmpl.Render(ctx, chat.Input{Messages: msgs, AddGenerationPrompt: true})
	if err != nil {
		if errors.Is(err, errs.ErrLimit) {
			return err
		}
		s.noteErr(err)
		return nil
	}
	ids, err := s.tok.Encode(text, false)
	if err != nil {
		return err
	}
	gen, err := s.gen()
	if err != nil {
		return err
	}
	room := s.spec.maxPositions - len(ids)
	if room <= 0 {
		s.noteErr(fmt.Errorf("the conversation (%d tokens) fills the model's %d positions: /clear to start over", len(ids), s.spec.maxPositions))
		return nil
	}
	gen.MaxNewTokens = min(gen.MaxNewTokens, room)
	if n := len(s.cached); n > 0 && len(ids) > n && slices.Equal(ids[:n], s.cached) {
		gen.Cached = generate.UsableCache(s.state, [][]int{ids}, n) // 0 past a LongRoPE switch the cache is short of
	}
	s.cached = nil
	gen.NewDecoder = func(prompt []int) generate.StreamDecoder { return s.tok.StreamDecoderAfter(prompt) }
	if serve.IsHarmony(s.tmpl) { // GPT-OSS: the final channel is the answer; the analysis shows under -v
		gen.NewDecoder = newHarmonyDecoder(s.tok, func(r string) { rep.Debugf("reasoning: %s", r) })
	}
	gen.Now = s.opts.Now
	gen.PrefillChunk = s.opts.PrefillChunk
	gen.Speculate, gen.SpeculateNgram, gen.DraftModel = s.opts.Speculate.Draft, s.opts.Speculate.Ngram, s.draft
	progress := newPrefillReporter(rep, s.opts.Now)
	gen.OnPrefill = progress.on
	if gen.Sampling.Temperature > 0 {
		rep.Debugf("sampling with seed %d", gen.Sampling.Seed)
	}
	if gen.Cached > 0 {
		rep.Debugf("reusing %d cached tokens, prefilling %d", gen.Cached, len(ids)-gen.Cached)
	}
	if s.nd == nil {
		gen.OnEvent = func(e generate.Event) { io.WriteString(s.out, e.Text) }
	}

	answerCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	if s.opts.OnInterrupt != nil {
		remove := s.opts.OnInterrupt(func() bool { cancel(); return true })
		defer remove()
	}
	progress.begin()
	res, metrics, err := generate.Run(answerCtx, s.state, [][]int{ids}, gen)
	progress.end()
	if res == nil && err != nil {
		if ctx.Err() != nil {
			return err
		}
		s.noteErr(err)
		return nil
	}
	r := res[0]
	s.turn++
	interrupted := errors.Is(err, errs.ErrInterrupted)
	if ctx.Err() != nil { // the session itself was stopped (SIGTERM)
		return err
	}
	if s.nd != nil {
		s.nd.Write(map[string]any{"type": "turn", "turn": s.turn, "user": user, "text": r.Text,
			"finish_reason": r.FinishReason, "seed": gen.Sampling.Seed, "metrics": metrics})
	} else {
		io.WriteString(s.out, "\n")
		if interrupted {
			fmt.Fprintln(errOut, "(answer interrupted)")
		}
	}
	if s.opts.Verbose && s.nd == nil {
		fmt.Fprint(errOut, metrics.Summary())
		if metrics.PromptCachedCount > 0 {
			fmt.Fprintf(errOut, "prompt cached count:  %d token(s)\n", metrics.PromptCachedCount)
		}
	}
	if interrupted && len(r.TokenIDs) == 0 {
		return nil // stopped during prefill: the turn did not happen
	}
	s.history = append(s.history, chat.Message{Role: "user", Content: user}, chat.Message{Role: "assistant", Content: r.Text})
	// The cache holds the prompt and every generated token but the last
	// (never fed back); an answer stopped before its first token leaves
	// it incomplete.
	if len(r.TokenIDs) > 0 {
		s.cached = append(slices.Clone(ids), r.TokenIDs[:len(r.TokenIDs)-1]...)
	}
	return nil
}
