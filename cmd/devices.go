package cmd

import "github.com/spf13/cobra"

// NewCmdDevices builds `tputool devices`.
func NewCmdDevices(f *Factory, runF func(any) error) *cobra.Command {
	return notImplemented("devices", "List backends, devices and PJRT plugins")
}
