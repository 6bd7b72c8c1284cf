package cmd

import "github.com/spf13/cobra"

// NewCmdInspect builds `tputool inspect`.
func NewCmdInspect(f *Factory, runF func(any) error) *cobra.Command {
	return notImplemented("inspect", "Show what a checkpoint holds and which TPU slice it fits")
}
