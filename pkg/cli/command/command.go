package command

import (
	"context"

	"github.com/spf13/cobra"
)

// Options is a subcommand's logic, apart from its cobra wiring.
type Options interface {
	// Complete takes the positional arguments and fills in what follows
	// from them and from the flags, such as the client and namespace.
	Complete(args []string) error
	// Validate checks every input before anything is sent.
	Validate() error
	// Run does the work.
	Run(ctx context.Context) error
}

// RunE is a cobra RunE that calls o's Complete, Validate and Run in order.
func RunE(o Options) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		if err := o.Complete(args); err != nil {
			return err
		}
		if err := o.Validate(); err != nil {
			return err
		}
		return o.Run(cmd.Context())
	}
}
