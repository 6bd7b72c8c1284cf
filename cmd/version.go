package cmd

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/tputool/tputool/internal/ui"
)

// VersionOptions holds `tputool version`'s inputs.
type VersionOptions struct {
	IO    *ui.IOStreams
	Build BuildInfo
	JSON  bool
}

// NewCmdVersion builds `tputool version`.
func NewCmdVersion(f *Factory, runF func(context.Context, *VersionOptions) error) *cobra.Command {
	opts := &VersionOptions{IO: f.IOStreams, Build: f.Build}
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version of tputool and its engine",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, args []string) error {
			opts.JSON = f.Global.JSON
			if runF != nil {
				return runF(c.Context(), opts)
			}
			return versionRun(c.Context(), opts)
		},
	}
}

func versionRun(_ context.Context, opts *VersionOptions) error {
	b := opts.Build
	if opts.JSON {
		return opts.IO.WriteJSON(b)
	}
	commit := b.Commit
	if len(commit) > 12 {
		commit = commit[:12]
	}
	if b.Modified {
		commit += "+dirty"
	}
	line := "tputool " + b.Version
	if commit != "" {
		line += " (" + commit + ")"
	}
	cgo := "off (pure Go: CPU backend only)"
	if b.CGO {
		cgo = "on (XLA/PJRT plugins available)"
	}
	_, err := fmt.Fprintf(opts.IO.Out, "%s\n%s %s, gomlx %s, go-xla %s, cgo %s\n",
		line, b.GoVersion, b.Platform, orUnknown(b.GoMLX), orUnknown(b.GoXLA), cgo)
	return err
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}
