package cmd

import "github.com/spf13/cobra"

// NewCmdGenerate builds `tputool generate`.
func NewCmdGenerate(f *Factory, runF func(any) error) *cobra.Command {
	return notImplemented("generate", "Generate text with a language model, streamed")
}
