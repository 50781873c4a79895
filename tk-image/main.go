// Command tk-image is the image-toolkit command line. Against a cluster it
// creates, lists, reconciles, suspends, resumes and deletes the image-toolkit
// objects, runs ad-hoc UpdateJobs, explains why an image was (or was not)
// updated, and migrates Flux image automation manifests. Offline it updates
// the image references marked in a working directory (also as a KRM function)
// and tests image policies, with the controllers' own code.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	"k8s.io/klog/v2"

	"toolkit.dev/image-toolkit/pkg/version"
)

func main() {
	// client-go's discovery logs each failed attempt through klog
	// ("E1202 … memcache.go:381] Couldn't get current server API group
	// list", three times) before the error it returns, which tk-image
	// reports once, with what to do.
	klog.SetLogger(logr.Discard())
	display, args := invocation(argv0(), os.Args[1:])
	displayName = display
	os.Exit(run(args, os.Stdin, os.Stdout, os.Stderr))
}

// displayName is how help names the command when it is not tk-image, e.g.
// "kubectl tk-image" when run as a kubectl plugin.
var displayName string

// usageError is a bad command line: exit code 2.
type usageError struct{ error }

// reportedError was already reported to the user: exit code 1, no message.
type reportedError struct{ error }

// run executes the command line and returns the exit code: 0 on success, 2
// for bad arguments, 1 for other failures.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	root := newRootCommand(stdin, stdout, stderr)
	root.SetArgs(args)
	// Ctrl-C ends waits and watches cleanly, with their own message.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cmd, err := root.ExecuteContextC(ctx)
	var usage usageError
	var reported reportedError
	// cobra's own checks of required and mutually exclusive flags come
	// back as plain errors; they are usage errors all the same.
	if err != nil && (strings.HasPrefix(err.Error(), "required flag(s)") || strings.HasPrefix(err.Error(), "if any flags in the group")) {
		err = usageError{err}
	}
	switch {
	case err == nil:
		return 0
	case errors.As(err, &reported):
		return 1
	case errors.As(err, &usage):
		// The help of the command the user typed, not the root's.
		path := "tk-image"
		if cmd != nil {
			path = cmd.CommandPath()
		}
		if displayName != "" {
			path = displayName + strings.TrimPrefix(path, "tk-image")
		}
		fmt.Fprintf(stderr, "tk-image: %v\nRun '%s --help' for usage.\n", err, path)
		return 2
	default:
		if msg, ok := unreachable(err); ok {
			fmt.Fprintf(stderr, "tk-image: %s\n", msg)
			return 1
		}
		fmt.Fprintf(stderr, "tk-image: %v\n", err)
		return 1
	}
}

// unreachable says what to do about an API server that did not answer:
// client-go's "Get https://…/api?timeout=30s: dial tcp …: connection
// refused", or the same for http://localhost:8080, its fallback when the
// kubeconfig names no cluster, says neither.
func unreachable(err error) (string, bool) {
	var uerr *url.Error
	if !errors.As(err, &uerr) {
		return "", false
	}
	var dns *net.DNSError
	var opErr *net.OpError
	if !errors.As(uerr.Err, &dns) && !errors.As(uerr.Err, &opErr) && !errors.Is(uerr.Err, context.DeadlineExceeded) && !os.IsTimeout(uerr.Err) {
		return "", false
	}
	u, perr := url.Parse(uerr.URL)
	// Only the API server's paths: a registry's (/v2/…) or a git server's
	// failure is reported as it is.
	if perr != nil || !(u.Path == "/api" || u.Path == "/apis" || strings.HasPrefix(u.Path, "/api/") ||
		strings.HasPrefix(u.Path, "/apis/") || u.Path == "/version") {
		return "", false
	}
	server := u.Scheme + "://" + u.Host
	if server == "http://localhost:8080" {
		return fmt.Sprintf("no Kubernetes cluster is configured: the kubeconfig (--kubeconfig, $KUBECONFIG or ~/.kube/config) names none, "+
			"so the client tried %s (%v); point it at a cluster, e.g. kubectl config use-context NAME", server, uerr.Err), true
	}
	return fmt.Sprintf("cannot reach the Kubernetes API server at %s: %v; is the cluster up, and is it the one meant? "+
		"(kubectl config current-context; --context or --kubeconfig choose another)", server, uerr.Err), true
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
	if displayName != "" {
		root.Annotations = map[string]string{cobra.CommandDisplayNameAnnotation: displayName}
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
			_, err := fmt.Fprintln(cmd.OutOrStdout(), version.String("tk-image")+linkedLibraries)
			return err
		},
	})
	k := newKube()
	k.addFlags(root)
	k.registerFlagCompletions(root)
	root.AddCommand(
		newUpdateCommand(),
		newDiscoverCommand(k),
		newPolicyCommand(),
		newCreateCommand(k),
		newGetCommand(k),
		newJobCommand(k),
		newReconcileCommand(k),
		newReleaseCommand(k),
		newApproveCommand(k),
		newSuspendCommand(k, true),
		newSuspendCommand(k, false),
		newDeleteCommand(k),
		newExplainCommand(k),
		newMigrateCommand(k),
		newDashboardCommand(k),
	)
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
