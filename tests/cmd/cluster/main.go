// Command cluster runs a single-node Kubernetes cluster from real parts
// (package tests/internal/cluster) until interrupted, with the images of
// `make images` imported: `make cluster` runs it. It prints the kubeconfig
// and how long the node took to become Ready.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"toolkit.dev/image-toolkit/tests/internal/cluster"
)

func main() {
	var o cluster.Options
	var noImages bool
	flag.StringVar(&o.Root, "root", "", "repository root (go.work, bin/); found above the working directory when empty")
	flag.StringVar(&o.Dir, "dir", "", "directory of the cluster's files and logs, kept after exit; a temp dir, removed on exit, when empty")
	flag.BoolVar(&noImages, "no-images", false, "do not import the make images tarballs")
	flag.Parse()
	o.Log = os.Stderr

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	start := time.Now()
	c, err := cluster.Start(ctx, o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "cluster:", err)
		os.Exit(1)
	}
	ready := time.Since(start)
	code := 0
	if !noImages {
		ts, err := cluster.ProjectImages(c.Root())
		if err == nil {
			err = c.ImportImages(ctx, ts...)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "cluster:", err)
			code = 1
		} else {
			fmt.Printf("imported %d images from bin/images\n", len(ts))
		}
	}
	if code == 0 {
		fmt.Printf(`
node %s Ready at %s, %s after start (images imported after %s)
logs: %s/logs

  export KUBECONFIG=%s
  bin/testenv/kubectl get nodes

Pods reach servers on the host at %s. Ctrl-C stops the cluster and removes it.
`, c.NodeName(), c.NodeIP(), ready.Round(100*time.Millisecond), time.Since(start).Round(100*time.Millisecond),
			c.Dir(), c.Kubeconfig(), c.NodeIP())
		<-ctx.Done()
	}
	fmt.Fprintln(os.Stderr, "cluster: stopping")
	if err := c.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "cluster: stop:", err)
		code = 1
	}
	os.Exit(code)
}
