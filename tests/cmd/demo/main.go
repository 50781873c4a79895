// Command demo runs the whole image-toolkit chain locally, for a person to
// watch: a registry and a git server on loopback, a real control plane, the
// three controllers, and the charts' sample objects. It prints each step as
// it happens (scan, policy choice, job, commit and diff), pushes a newer
// tag and follows it into git again, then stops everything it started.
// With --pull-request the fleet repository is on a real Gitea (bin/gitea,
// `make testenv`) and the automation proposes each update as a pull
// request instead of pushing to main.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
	"toolkit.dev/image-toolkit/tests/internal/chain"
)

func main() {
	bin := flag.String("bin", "", "directory of the controller binaries (default: bin/ of the workspace)")
	flag.DurationVar(&timeout, "timeout", 3*time.Minute, "give up after this long")
	flag.BoolVar(&pullRequest, "pull-request", false, "host the repository on Gitea and propose updates as a pull request")
	flag.Parse()
	if err := run(*bin); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

var (
	timeout     time.Duration
	pullRequest bool
)

func run(bin string) (err error) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	began := time.Now()

	dir, err := os.MkdirTemp("", "image-toolkit-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	env, err := chain.StartWith(ctx, dir, bin, []string{"6.3.0", "6.4.0", "7.0.0-rc.1"}, step, chain.Options{Gitea: pullRequest})
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			for name, p := range env.Procs {
				fmt.Fprintf(os.Stderr, "--- %s log (end) ---\n%s\n", name, p.Log())
			}
			cmd := env.Cluster.KubectlCmd(context.Background(), "get", "image-toolkit", "-A", "-o", "wide")
			cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
			_ = cmd.Run()
		}
		step("stopping the controllers, the control plane, the registry and the git server")
		err = errors.Join(err, env.Stop())
	}()
	d := &demo{env: env, c: env.Cluster.Client}

	fmt.Printf("    the fleet repository %s holds %s at podinfo 6.3.0:\n", env.RepoURL, chain.ManifestPath)
	show, err := env.FleetGit("show", "main:"+chain.ManifestPath)
	if err != nil {
		return err
	}
	fmt.Print(indent(show))

	sample := "imageupdateautomation.yaml"
	if pullRequest {
		sample = "imageupdateautomation-pullrequest.yaml"
		// The sample puts this label on its requests.
		if _, err := env.Gitea.CreateLabel(ctx, "fleet", "image-update", "#00aabb"); err != nil {
			return err
		}
	}
	step("applying the charts' samples (ImageRepository, ImagePolicies, " + sample + "), pointed at the local registry and git server")
	samples, err := env.Samples(env.Cluster.Root, sample)
	if err != nil {
		return err
	}
	head := env.Head("main")
	if err := env.Apply(ctx, samples); err != nil {
		return err
	}
	if err := d.follow(ctx, head, "6.4.0"); err != nil {
		return err
	}

	step("pushing podinfo 6.5.0 to the registry and asking for a scan (reconcile.toolkit.dev/requestedAt)")
	if err := env.PushTag(ctx, "6.5.0"); err != nil {
		return err
	}
	repo := &imagev1.ImageRepository{}
	repo.Name, repo.Namespace = "podinfo", "default"
	if err := env.RequestReconcile(ctx, repo); err != nil {
		return err
	}
	if err := d.follow(ctx, env.Head("main"), "6.5.0"); err != nil {
		return err
	}

	step("kubectl get image-toolkit -A")
	cmd := env.Cluster.KubectlCmd(ctx, "get", "image-toolkit", "-A")
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		return err
	}
	fmt.Printf("\ndone in %s\n", time.Since(began).Round(time.Second))
	return nil
}

type demo struct {
	env *chain.Env
	c   client.Client
}

// follow prints the chain's steps until main moves from head with podinfo
// at tag.
func (d *demo) follow(ctx context.Context, head, tag string) error {
	repo := &imagev1.ImageRepository{}
	if err := d.wait(ctx, "the scan", func() (bool, error) {
		err := d.c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "podinfo"}, repo)
		r := repo.Status.LastScanResult
		return r != nil && slices.Contains(r.LatestTags, tag), err
	}); err != nil {
		return err
	}
	r := repo.Status.LastScanResult
	step(fmt.Sprintf("scan: ImageRepository podinfo found %d tags (newest: %s)", r.TagCount, strings.Join(r.LatestTags, ", ")))

	pol := &imagev1.ImagePolicy{}
	if err := d.wait(ctx, "the policy", func() (bool, error) {
		err := d.c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "podinfo"}, pol)
		return pol.Status.LatestRef != nil && pol.Status.LatestRef.Tag == tag, err
	}); err != nil {
		return err
	}
	step(fmt.Sprintf("policy: ImagePolicy podinfo (semver >=6.0.0 <7.0.0) chose %s", pol.Status.LatestRef))

	var job updatev1.UpdateJob
	if err := d.wait(ctx, "the job", func() (bool, error) {
		list := &updatev1.UpdateJobList{}
		if err := d.c.List(ctx, list, client.InNamespace("default")); err != nil {
			return false, err
		}
		for _, j := range list.Items {
			for _, s := range j.Spec.Update.Setters {
				if s.Policy == "default:podinfo" && s.Tag == tag && j.Status.Phase.Finished() {
					job = j
					return true, nil
				}
			}
		}
		return false, nil
	}); err != nil {
		return err
	}
	owner := "(none)"
	if o := metav1.GetControllerOf(&job); o != nil {
		owner = o.Name
	}
	step(fmt.Sprintf("job: ImageUpdateAutomation %s created UpdateJob %s; %s after %d attempt(s), from %s",
		owner, job.Name, job.Status.Phase, job.Status.Attempts, job.Status.CheckoutRevision))
	if job.Status.Phase != updatev1.UpdateJobSucceeded {
		return fmt.Errorf("job %s: %s %+v", job.Name, job.Status.Phase, job.Status.Conditions)
	}
	if pr := job.Status.PullRequest; pr != nil {
		return d.showRequest(ctx, pr)
	}

	if err := d.wait(ctx, "the commit", func() (bool, error) {
		h := d.env.Head("main")
		return h != head && h == job.Status.PushedCommit, nil
	}); err != nil {
		return err
	}
	out, err := d.env.FleetGit("show", "--format=commit %H%nAuthor: %an <%ae>%n%n%B", job.Status.PushedCommit)
	if err != nil {
		return err
	}
	step("commit: the git server's main branch now has")
	fmt.Print(indent(out))
	return nil
}

// showRequest prints the request the job opened or updated on Gitea, and
// its diff.
func (d *demo) showRequest(ctx context.Context, pr *updatev1.PullRequestStatus) error {
	p, err := d.env.Gitea.GetPull(ctx, "fleet", pr.Number)
	if err != nil {
		return err
	}
	step(fmt.Sprintf("pull request: #%d %s on Gitea (main untouched): %s", p.Number, pr.Action, p.HTMLURL))
	fmt.Print(indent(fmt.Sprintf("%s\n\n%s", p.Title, p.Body)))
	out, err := d.env.FleetGit("diff", "main", pr.HeadBranch)
	if err != nil {
		return err
	}
	step("diff of " + pr.HeadBranch + " against main")
	fmt.Print(indent(out))
	return nil
}

// wait polls cond until it holds.
func (d *demo) wait(ctx context.Context, what string, cond func() (bool, error)) error {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	var last error
	for {
		ok, err := cond()
		if ok {
			return nil
		}
		if err != nil {
			last = err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w (last error: %v)", what, ctx.Err(), last)
		case <-t.C:
		}
	}
}

func indent(s string) string {
	return "    " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n    ") + "\n"
}

var start = time.Now()

func step(msg string) {
	fmt.Printf("==> [%5.1fs] %s\n", time.Since(start).Seconds(), msg)
}
