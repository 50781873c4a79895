// Command tk-image is the image-toolkit command line: create resources, run
// ad-hoc UpdateJobs, test policies offline and update image references in a
// working directory.
package main

import (
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"toolkit.dev/image-toolkit/pkg/version"
)

func main() {
	if err := newRootCommand(os.Stdout, os.Stderr).Execute(); err != nil {
		os.Exit(1)
	}
}

func newRootCommand(stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:           "tk-image",
		Short:         "GitOps image update automation for Kubernetes",
		SilenceUsage:  true,
		SilenceErrors: false,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.AddCommand(&cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintln(cmd.OutOrStdout(), version.String("tk-image"))
			return err
		},
	})
	return root
}
