package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"runtime"
	"time"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"toolkit.dev/image-toolkit/tk-image/internal/dashboard"
)

// defaultDashboardAddress is loopback only: the dashboard acts with the
// user's credentials, for whoever can reach it.
const defaultDashboardAddress = "localhost:9880"

func newDashboardCommand(k *kube) *cobra.Command {
	var (
		address   string
		readOnly  bool
		noBrowser bool
		hosts     []string
	)
	cmd := &cobra.Command{
		Use:   "dashboard",
		Short: "Serve the web dashboard on localhost, with your kubeconfig's credentials",
		Long: `Serve a web dashboard of the image-toolkit objects: Fleet (every automation,
its state, images current -> newest, last commit or pull request), an
Automation page (the explain data, its UpdateJobs and events), an Image page
(tags, each policy's choice and why better tags were dropped, where it is
used) and Webhooks. Pages update live as the cluster changes.

Like kubectl proxy, it talks to the API server with your kubeconfig's
credentials and has no login of its own: RBAC decides what you see and
which actions (reconcile, suspend, resume, run now) succeed. With -n it
shows one namespace, else all of them, or the kubeconfig context's
namespace when the credentials may not list automations in all.

It opens the browser unless --no-browser. An --address other than loopback
implies --read-only: anyone who reaches it would act as you.

Requests must name it by localhost or an IP address, so that a web page
cannot reach it through a DNS name it controls; behind an Ingress, name its
host with --allowed-host. In a cluster (the image-automation-controller
chart's ui values) it runs read-only with its ServiceAccount's rights.`,
		Example: `  tk-image dashboard
  tk-image dashboard -n apps --read-only --no-browser --address 127.0.0.1:8080
  tk-image dashboard --address :9880 --no-browser --allowed-host images.example.com`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runDashboard(cmd, k, address, readOnly, !noBrowser, hosts)
		},
	}
	cmd.Flags().StringVar(&address, "address", defaultDashboardAddress, "address to listen on, HOST:PORT (port 0 picks a free one)")
	cmd.Flags().BoolVar(&readOnly, "read-only", false, "show no action buttons and refuse actions")
	cmd.Flags().BoolVar(&noBrowser, "no-browser", false, "do not open the dashboard in a browser")
	cmd.Flags().StringSliceVar(&hosts, "allowed-host", nil, "a host name requests may name besides localhost and IP addresses, e.g. an Ingress's (repeat or comma-separate)")
	return cmd
}

func runDashboard(cmd *cobra.Command, k *kube, address string, readOnly, open bool, hosts []string) error {
	ctx := cmd.Context()
	out := cmd.OutOrStdout()
	// The informers log through controller-runtime, which otherwise
	// prints a stack trace asking for a logger: what the page shows is
	// the report.
	ctrllog.SetLogger(logr.Discard())
	ln, err := net.Listen("tcp", address)
	if err != nil {
		return usageError{fmt.Errorf("--address: %w", err)}
	}
	defer ln.Close()
	if !loopback(ln.Addr()) && !readOnly {
		readOnly = true
		fmt.Fprintf(cmd.ErrOrStderr(), "listening beyond loopback (%s): read-only\n", ln.Addr())
	}
	// Watches are long requests: no client-wide timeout; each request has
	// its own context deadline.
	cfg, err := watchGetter{k.flags}.ToRESTConfig()
	if err != nil {
		return fmt.Errorf("reading kubeconfig: %w", err)
	}
	// -n picks one namespace; without it, all, or the context's when the
	// credentials may not list automations in all of them.
	current, err := k.namespace()
	if err != nil {
		return err
	}
	opts := dashboard.Options{ReadOnly: readOnly, FallbackNamespace: current, User: whoAmI(ctx, cfg), AllowedHosts: hosts}
	if f := cmd.Flag("namespace"); f != nil && f.Changed {
		opts.Namespace = current
	}
	srv, err := dashboard.New(ctx, cfg, scheme, opts)
	if err != nil {
		return err
	}
	url := "http://" + displayAddr(address, ln.Addr()) + "/"
	fmt.Fprintf(out, "Dashboard: %s (Ctrl-C to stop)\n", url)
	if open {
		if err := openBrowser(url); err != nil {
			fmt.Fprintf(cmd.ErrOrStderr(), "could not open a browser (%v): open %s yourself\n", err, url)
		}
	}
	hs := &http.Server{Handler: srv, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan error, 1)
	go func() { done <- hs.Serve(ln) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// Event streams stay open until closed: Shutdown waits for none.
	_ = hs.Shutdown(sctx)
	if err := <-done; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// whoAmI names the credentials' user for the page header; empty when the
// API server does not say.
func whoAmI(ctx context.Context, cfg *rest.Config) string {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return ""
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	r, err := cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authnv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		return ""
	}
	return r.Status.UserInfo.Username
}

func loopback(a net.Addr) bool {
	tcp, ok := a.(*net.TCPAddr)
	return ok && tcp.IP.IsLoopback()
}

// displayAddr keeps the host as typed (localhost reads better than
// 127.0.0.1) with the port actually bound.
func displayAddr(typed string, bound net.Addr) string {
	host, _, err := net.SplitHostPort(typed)
	_, port, perr := net.SplitHostPort(bound.String())
	if err != nil || perr != nil || host == "" || host == "0.0.0.0" || host == "::" {
		return bound.String()
	}
	return net.JoinHostPort(host, port)
}

// openBrowser asks the desktop to open url.
func openBrowser(url string) error {
	var cmd *exec.Cmd
	switch runtime.GOOS {
	case "darwin":
		cmd = exec.Command("open", url)
	case "windows":
		cmd = exec.Command("rundll32", "url.dll,FileProtocolHandler", url)
	default:
		cmd = exec.Command("xdg-open", url)
	}
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	if err := cmd.Start(); err != nil {
		return err
	}
	go func() { _ = cmd.Wait() }()
	return nil
}
