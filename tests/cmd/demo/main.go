// Command demo runs image-toolkit locally: a real control plane, the three
// controllers, the sample objects of every chart; it prints what the
// controllers made of them and stops everything it started.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"

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

	step("starting a local OCI registry with podinfo 6.4.0, 6.4.1, 6.5.0 and 7.0.0-rc.1")
	host, closeRegistry, err := localRegistry([]string{"6.4.0", "6.4.1", "6.5.0", "7.0.0-rc.1"})
	if err != nil {
		return err
	}
	defer closeRegistry()
	local := fmt.Sprintf(`apiVersion: image.toolkit.dev/v1beta1
kind: ImageRepository
metadata:
  name: local-podinfo
  namespace: default
spec:
  image: %s/stefanprodan/podinfo
  interval: 1m
  insecure: true
---
apiVersion: image.toolkit.dev/v1beta1
kind: ImagePolicy
metadata:
  name: local-podinfo
  namespace: default
spec:
  imageRepositoryRef:
    name: local-podinfo
  policy:
    semver:
      range: ">=6.0.0"
  digestReflectionPolicy: IfNotPresent
`, host)
	localFile := filepath.Join(dir, "local.yaml")
	if err := os.WriteFile(localFile, []byte(local), 0o600); err != nil {
		return err
	}

	step("applying the samples of every chart (their registry and git hosts are examples; they stay unreachable here)")
	if err := kubectl(ctx, cluster, "apply", "-f", "charts/image-reflector-controller/samples",
		"-f", "charts/image-automation-controller/samples", "-f", "charts/update-job-controller/samples",
		"-f", localFile); err != nil {
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

// localRegistry serves go-containerregistry's registry on loopback with one
// small image pushed under each tag.
func localRegistry(tags []string) (string, func(), error) {
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	host := strings.TrimPrefix(srv.URL, "http://")
	img, err := random.Image(512, 1)
	if err != nil {
		srv.Close()
		return "", nil, err
	}
	for _, tag := range tags {
		ref, err := name.NewTag(host+"/stefanprodan/podinfo:"+tag, name.Insecure)
		if err != nil {
			srv.Close()
			return "", nil, err
		}
		if err := remote.Write(ref, img); err != nil {
			srv.Close()
			return "", nil, err
		}
	}
	return host, srv.Close, nil
}

func kubectl(ctx context.Context, c *localenv.Cluster, args ...string) error {
	cmd := c.KubectlCmd(ctx, args...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	return cmd.Run()
}

func step(msg string) { fmt.Printf("==> %s\n", msg) }
