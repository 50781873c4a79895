// Command demo runs image-toolkit locally: a real control plane, the three
// controllers, the sample objects of every chart; it prints what the
// controllers made of them and stops everything it started.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"toolkit.dev/image-toolkit/tests/internal/localenv"
)

func main() {
	bin := flag.String("bin", "", "directory of the controller binaries (default: bin/ of the workspace)")
	settle := flag.Duration("settle", 5*time.Second, "how long to let the controllers work before printing")
	flag.Parse()
	if err := run(*bin, *settle); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func run(bin string, settle time.Duration) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	dir, err := os.MkdirTemp("", "image-toolkit-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	step("starting kube-apiserver and etcd from bin/testenv, with the CRDs of all three charts")
	cluster, err := localenv.Start(dir)
	if err != nil {
		return err
	}
	defer func() {
		step("stopping the control plane")
		_ = cluster.Stop()
	}()
	if bin == "" {
		bin = localenv.BinDir(cluster.Root)
	}

	var procs []*localenv.Process
	defer func() {
		for _, p := range procs {
			step("stopping " + p.Name)
			if err := p.Stop(15 * time.Second); err != nil {
				fmt.Fprintf(os.Stderr, "%v\n%s\n", err, p.Log())
			}
		}
	}()
	for _, name := range localenv.Controllers {
		p, err := cluster.StartController(ctx, bin, name)
		if err != nil {
			return err
		}
		procs = append(procs, p)
		fmt.Printf("    %s ready (metrics http://%s/metrics)\n", name, p.MetricsAddr)
	}

	step("applying the samples of every chart")
	if err := kubectl(ctx, cluster, "apply", "-f", "charts/image-reflector-controller/samples",
		"-f", "charts/image-automation-controller/samples", "-f", "charts/update-job-controller/samples"); err != nil {
		return err
	}
	select {
	case <-time.After(settle):
	case <-ctx.Done():
		return ctx.Err()
	}

	step("kubectl get image-toolkit (every kind of the category)")
	if err := kubectl(ctx, cluster, "get", "image-toolkit", "-A"); err != nil {
		return err
	}
	step("kubectl get updatejobs -o wide")
	return kubectl(ctx, cluster, "get", "updatejobs", "-A", "-o", "wide")
}

func kubectl(ctx context.Context, c *localenv.Cluster, args ...string) error {
	cmd := c.KubectlCmd(ctx, args...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	return cmd.Run()
}

func step(msg string) { fmt.Printf("==> %s\n", msg) }
