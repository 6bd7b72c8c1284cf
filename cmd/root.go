// Package cmd holds tputool's cobra commands: flags, options and output.
// No ML logic lives here; commands call loader/, pipeline/, compile/ and
// tpu/ and render what they return.
//
// Each command follows one pattern: an XOptions struct (dependencies first,
// then flag values), NewCmdX(f, runF) whose RunE only validates and then
// calls runF (tests) or xRun, and xRun(ctx, opts) doing the work.
package cmd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"runtime/pprof"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/loader/hub"
	"github.com/tputool/tputool/tpu"
)

// Main runs tputool and returns the process exit code. main.go calls
// os.Exit(cmd.Main()) and nothing else.
//
// The first Ctrl-C (or SIGTERM) cancels the command's context: it says
// "stopping…", and the command ends its work and exits 130 with what it
// has. A second one exits 130 at once. A command may take Ctrl-C itself
// while it runs (chat cancels the answer, not the session): see
// Factory.OnInterrupt.
func Main() int {
	f := NewFactory()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	go watchSignals(f, sigs, cancel, os.Exit)
	return int(Run(ctx, f, os.Args[1:]))
}

// watchSignals handles SIGINT and SIGTERM for Main: a SIGINT goes to the
// command's interrupt handler when it has one and takes it; otherwise the
// first signal cancels the context with a note on stderr, and the second
// exits 130 at once.
func watchSignals(f *Factory, sigs <-chan os.Signal, cancel func(), exit func(int)) {
	stopping := false
	for s := range sigs {
		if s == os.Interrupt && f.interrupt() {
			continue
		}
		if !stopping {
			stopping = true
			cancel()
			signalNote(f, "stopping… (Ctrl-C again to quit at once)")
			continue
		}
		signalNote(f, "interrupted")
		exit(int(ExitInterrupted))
		return
	}
}

// Run executes the command line with the given factory and returns the exit
// code; errors are printed to stderr (as an NDJSON "error" object under
// --json).
func Run(ctx context.Context, f *Factory, args []string) ExitCode {
	root := NewCmdRoot(f)
	root.SetArgs(args)
	defer f.Close()
	_, err := root.ExecuteContextC(ctx)
	if err == nil {
		return ExitOK
	}
	if strings.HasPrefix(err.Error(), "unknown command ") {
		err = errs.Usagef("%s", err) // cobra's legacy root argument check
	}
	if ctx.Err() != nil && !errors.Is(err, errs.ErrInterrupted) {
		err = fmt.Errorf("%w: %w", errs.ErrInterrupted, err)
	}
	err = restateHub(restateOptions(err))
	code := ExitCodeFor(err)
	printError(f, err, code)
	return code
}

// signalNote prints a line about a signal on stderr (an NDJSON
// "interrupt" event under --json).
func signalNote(f *Factory, msg string) {
	if f.Global.JSON {
		b, _ := json.Marshal(map[string]any{"type": "interrupt", "message": msg})
		fmt.Fprintln(f.IOStreams.ErrOut, string(b))
		return
	}
	fmt.Fprintln(f.IOStreams.ErrOut, msg)
}

func printError(f *Factory, err error, code ExitCode) {
	msg := err.Error()
	if f.Global.JSON {
		b, _ := json.Marshal(map[string]any{"type": "error", "exit_code": int(code), "message": msg})
		fmt.Fprintln(f.IOStreams.ErrOut, string(b))
		return
	}
	prefix := "error: "
	if f.IOStreams.ColorEnabled() {
		prefix = "\x1b[31merror:\x1b[0m "
	}
	fmt.Fprintln(f.IOStreams.ErrOut, prefix+msg)
	if code == ExitUsage {
		fmt.Fprintln(f.IOStreams.ErrOut, "Run 'tputool --help' or 'tputool COMMAND --help' for usage.")
	}
}

// NewCmdRoot builds the command tree.
func NewCmdRoot(f *Factory) *cobra.Command {
	g := f.Global
	root := &cobra.Command{
		Use:   "tputool <command> [flags]",
		Short: "Run Hugging Face models on TPUs, GPUs and CPUs",
		Long: `tputool runs Hugging Face Hub models (LLMs and diffusion pipelines) on Google
TPUs through XLA/PJRT, on GPUs through PJRT plugins, and anywhere on a pure-Go
CPU backend. One binary: generate text, make images, benchmark eager against
compiled execution, and inspect what a checkpoint holds and where it fits.

Results go to stdout (text, image paths, JSON); progress, logs and metrics go
to stderr, with progress bars only on a terminal.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(c *cobra.Command, args []string) error {
			if g.Quiet && g.Verbose {
				return errs.Usagef("--quiet and --verbose cannot be used together")
			}
			// --device wins over TPUTOOL_DEVICE; an error names the one used.
			spec, fromEnv, err := tpu.ChooseSpec(g.Device, c.Flags().Changed("device"), tpu.Env{LookupEnv: f.LookupEnv})
			if err != nil {
				return restateDevice(err, fromEnv)
			}
			g.DeviceSpec, g.DeviceFromEnv = spec, fromEnv
			if g.Verbose {
				tpu.SetBackendLog(f.IOStreams.ErrOut)
			}
			if !c.Flags().Changed("offline") && hub.IsTrue(f.Getenv("HF_HUB_OFFLINE")) {
				g.Offline = true
			}
			return startCPUProfile(f)
		},
		Example: `  tputool --version
  tputool generate --model Qwen/Qwen3-0.6B --prompt "Why is the sky blue?"
  tputool chat --model Qwen/Qwen3-0.6B
  tputool diffuse --model stabilityai/sd-turbo --prompt "a red fox" -o fox.png
  tputool bench --model Qwen/Qwen3-0.6B --batch 1,8
  tputool inspect --model Qwen/Qwen3.5-9B --context 32768
  tputool devices --json`,
	}
	var showVersion bool
	root.Flags().BoolVar(&showVersion, "version", false, "print the version (as tputool version; with --json, its JSON)")
	root.RunE = func(c *cobra.Command, args []string) error {
		if showVersion {
			return versionRun(c.Context(), &VersionOptions{IO: f.IOStreams, Build: f.Build, JSON: g.JSON})
		}
		if len(args) > 0 {
			return errs.Usagef("unknown command %q for \"tputool\"", args[0])
		}
		return c.Help()
	}
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return errs.Usagef("%s", err)
	})
	root.SetHelpTemplate(root.HelpTemplate() + "\n" + exitCodeHelp + envHelp)

	pf := root.PersistentFlags()
	pf.StringVar(&g.Device, "device", "auto", "device: auto, cpu (cpu:fast is tputool's own CPU engine, cpu:go GoMLX's go backend), tpu, gpu, or xla:PLUGIN_OR_PATH (env TPUTOOL_DEVICE)")
	pf.BoolVar(&g.JSON, "json", false, "print results as JSON on stdout (and NDJSON events on stderr)")
	pf.BoolVarP(&g.Quiet, "quiet", "q", false, "print only results, warnings and errors")
	pf.BoolVarP(&g.Verbose, "verbose", "v", false, "print timings, metrics and debug details to stderr")
	pf.BoolVar(&g.NoProgress, "no-progress", false, "never draw progress bars (plain progress lines instead)")
	pf.StringVar(&g.CacheDir, "cache-dir", "", "Hugging Face cache directory (default: HF_HUB_CACHE, HF_HOME/hub, ~/.cache/huggingface/hub)")
	pf.BoolVar(&g.Offline, "offline", false, "use only the local cache, never the network (env HF_HUB_OFFLINE=1)")
	pf.StringVar(&g.Token, "token", "", "Hugging Face access token (default: HF_TOKEN, then HF_HOME/token); never printed")
	pf.StringVar(&g.CPUProfile, "cpuprofile", "", "write a Go CPU profile of the command to this file (pprof format: go tool pprof FILE)")
	_ = root.RegisterFlagCompletionFunc("device", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return []string{"auto", "cpu", "tpu", "gpu", "xla:"}, cobra.ShellCompDirectiveNoSpace
	})

	for _, sub := range []*cobra.Command{
		NewCmdGenerate(f, nil),
		NewCmdEmbed(f, nil),
		NewCmdRerank(f, nil),
		NewCmdPerplexity(f, nil),
		NewCmdChat(f, nil),
		NewCmdServe(f, nil),
		NewCmdDiffuse(f, nil),
		NewCmdBench(f, nil),
		NewCmdInspect(f, nil),
		NewCmdDownload(f, nil),
		NewCmdCache(f, nil),
		NewCmdDevices(f, nil),
		NewCmdVersion(f, nil),
	} {
		root.AddCommand(sub)
	}
	root.SetIn(f.IOStreams.In)
	root.SetOut(f.IOStreams.Out) // before the completion command, which keeps the writer
	root.SetErr(f.IOStreams.ErrOut)
	root.InitDefaultCompletionCmd() // here rather than at Execute, so requireSubcommand sees it
	requireSubcommand(root)
	wrapArgErrors(root)
	return root
}

// requireSubcommand makes each command that only groups others (cache,
// completion) print its help when run alone and refuse an unknown
// subcommand as a usage error (exit 2), where cobra would print the help
// and exit 0, which a script takes for success.
func requireSubcommand(c *cobra.Command) {
	for _, sub := range c.Commands() {
		requireSubcommand(sub)
	}
	if c.HasParent() && !c.Runnable() && c.HasSubCommands() {
		c.Args = cobra.NoArgs
		c.RunE = func(c *cobra.Command, args []string) error { return c.Help() }
	}
}

// wrapArgErrors makes every positional-argument validation error a usage
// error (exit 2), like flag errors.
func wrapArgErrors(c *cobra.Command) {
	if validate := c.Args; validate != nil {
		c.Args = func(c *cobra.Command, args []string) error {
			if err := validate(c, args); err != nil {
				return errs.Usagef("%s", err)
			}
			return nil
		}
	}
	for _, sub := range c.Commands() {
		wrapArgErrors(sub)
	}
}

const envHelp = `
Environment:
  TPUTOOL_DEVICE         default for --device
  TPUTOOL_XLA_CACHE      XLA compile caches on GPU plugins: autotune (default), all, off
  TPUTOOL_XLA_LOG        keep GoMLX/go-xla log output on stderr
  TPUTOOL_API_KEY        serve's API key (default for --api-key; never printed)
  HF_TOKEN               Hugging Face token (HF_HOME/token is read too)
  HF_HOME, HF_HUB_CACHE  cache location
  HF_ENDPOINT            Hub endpoint (default https://huggingface.co)
  HF_HUB_OFFLINE=1       same as --offline
  NO_COLOR               disable colour
`

// startCPUProfile starts --cpuprofile's profile, which Factory.Close
// stops and writes: the host side of a command, where a device run spends
// its time outside the device (tputool's own code, PJRT's calls, copies).
// A file that cannot be created is a usage error naming the flag.
func startCPUProfile(f *Factory) error {
	path := f.Global.CPUProfile
	if path == "" || f.stopProfile != nil {
		return nil
	}
	file, err := os.Create(path)
	if err != nil {
		return errs.Usagef("--cpuprofile %s: %v", path, err)
	}
	if err := pprof.StartCPUProfile(file); err != nil {
		file.Close()
		return errs.Usagef("--cpuprofile %s: %v", path, err)
	}
	f.stopProfile = func() {
		pprof.StopCPUProfile()
		if err := file.Close(); err != nil {
			fmt.Fprintf(f.IOStreams.ErrOut, "warning: --cpuprofile %s: %v\n", path, err)
		}
	}
	return nil
}
