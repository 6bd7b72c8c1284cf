package cmd

import "github.com/spf13/cobra"

// NewCmdDiffuse builds `tputool diffuse`.
func NewCmdDiffuse(f *Factory, runF func(any) error) *cobra.Command {
	return notImplemented("diffuse", "Generate images with a diffusion pipeline")
}
