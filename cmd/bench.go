package cmd

import "github.com/spf13/cobra"

// NewCmdBench builds `tputool bench`.
func NewCmdBench(f *Factory, runF func(any) error) *cobra.Command {
	return notImplemented("bench", "Time eager against compiled execution")
}
