package cmd

import (
	"github.com/spf13/cobra"

	"github.com/tputool/tputool/internal/errs"
)

// notImplemented returns a command that exists in the tree (so --help lists
// it and scripts can probe for it) but fails with exit code 3 until its
// issue lands.
func notImplemented(use, short string) *cobra.Command {
	return &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.ArbitraryArgs,
		RunE: func(c *cobra.Command, args []string) error {
			return errs.Unsupportedf("tputool %s: not implemented yet", c.Name())
		},
		DisableFlagParsing: true,
	}
}
