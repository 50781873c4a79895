// Command tk-image is the image-toolkit command line: it updates the image
// references marked in a working directory (also as a KRM function) and
// tests image policies offline, with the controllers' own code.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"toolkit.dev/image-toolkit/pkg/version"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// usageError is a bad command line: exit code 2.
type usageError struct{ error }

// reportedError was already reported to the user: exit code 1, no message.
type reportedError struct{ error }

// run executes the command line and returns the exit code: 0 on success, 2
// for bad arguments, 1 for other failures.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	root := newRootCommand(stdin, stdout, stderr)
	root.SetArgs(args)
	err := root.Execute()
	var usage usageError
	var reported reportedError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &reported):
		return 1
	case errors.As(err, &usage):
		fmt.Fprintf(stderr, "tk-image: %v\nRun 'tk-image --help' for usage.\n", err)
		return 2
	default:
		fmt.Fprintf(stderr, "tk-image: %v\n", err)
		return 1
	}
}

func newRootCommand(stdin io.Reader, stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:           "tk-image",
		Short:         "GitOps image update automation for Kubernetes",
		SilenceUsage:  true,
		SilenceErrors: true,
		Args:          usageArgs(cobra.NoArgs),
		// With a RunE, cobra checks Args, so unknown commands are errors.
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	root.AddCommand(&cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintln(cmd.OutOrStdout(), version.String("tk-image"))
			return err
		},
	})
	root.AddCommand(newUpdateCommand())
	root.AddCommand(newPolicyCommand())
	return root
}

// usageArgs makes an argument check's failure a usage error.
func usageArgs(check cobra.PositionalArgs) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if err := check(cmd, args); err != nil {
			return usageError{err}
		}
		return nil
	}
}
