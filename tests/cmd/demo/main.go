// Command demo runs the whole image-toolkit chain locally, for a person to
// watch: a registry and a git server on loopback, a real control plane, the
// three controllers, and the charts' sample objects. It prints each step as
// it happens (scan, policy choice, job, commit and diff), pushes a newer
// tag and follows it into git again, then stops everything it started.
// With --pull-request the fleet repository is on a real Gitea (bin/gitea,
// `make testenv`) and the automation proposes each update as a pull
// request instead of pushing to main. With --stay it keeps the chain
// running after the walk-through, adds objects that fail and wait in the
// ways an operator meets, serves tk-image dashboard on it, prints the
// kubeconfig and commands to try, pushes the tags typed on its standard
// input, and stops everything on Ctrl-C.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/apis/meta"
	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
	"toolkit.dev/image-toolkit/tests/internal/chain"
	"toolkit.dev/image-toolkit/tests/internal/localenv"
)

func main() {
	bin := flag.String("bin", "", "directory of the controller binaries (default: bin/ of the workspace)")
	flag.DurationVar(&timeout, "timeout", 3*time.Minute, "give up after this long")
	flag.BoolVar(&pullRequest, "pull-request", false, "host the repository on Gitea and propose updates as a pull request")
	flag.BoolVar(&stay, "stay", false, "after the walk-through, keep everything running with tk-image dashboard on it until Ctrl-C")
	flag.StringVar(&dashboardAddress, "dashboard-address", "localhost:9880", "with --stay, where tk-image dashboard listens")
	flag.Parse()
	if err := run(*bin); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

var (
	timeout          time.Duration
	pullRequest      bool
	stay             bool
	dashboardAddress string
)

func run(bin string) (err error) {
	// interrupted ends with Ctrl-C; ctx, the walk-through's, also with
	// --timeout. The chain lives as long as interrupted, so that --stay
	// keeps it after the walk-through.
	interrupted, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(interrupted, timeout)
	defer cancel()
	began := time.Now()

	dir, err := os.MkdirTemp("", "image-toolkit-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	env, err := chain.StartWith(interrupted, dir, bin, []string{"6.3.0", "6.4.0", "7.0.0-rc.1"}, step, chain.Options{Gitea: pullRequest})
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
	if stay {
		return d.stay(interrupted, bin)
	}
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
func (d *demo) showRequest(ctx context.Context, pr *meta.PullRequestStatus) error {
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

// exploreObjects are what --stay adds for a person to look at beside the
// sample, each in a state an operator meets: an automation whose git
// Secret has a wrong password (AuthenticationFailed, naming the Secret),
// a suspended one, and a policy whose ImageRepository does not exist.
func exploreObjects(repoURL string) string {
	automation := func(name, secret, extra string) string {
		return chain.Automation(repoURL, name, secret, "  policySelector:\n    matchLabels:\n      automation: enabled\n"+extra)
	}
	return chain.Broken(repoURL) + `---
` + automation("paused", "git-credentials", "  suspend: true\n")
}

// stay keeps the chain for a person to explore: it adds exploreObjects,
// serves tk-image dashboard with the chain's kubeconfig, says what to
// try, pushes each tag typed on standard input, and returns on Ctrl-C,
// when run stops everything.
func (d *demo) stay(ctx context.Context, bin string) error {
	step("adding, to explore: automation staging (its git Secret has a wrong password), automation paused (suspended), policy canary (its ImageRepository does not exist)")
	if err := d.env.Apply(ctx, exploreObjects(d.env.RepoURL)); err != nil {
		return err
	}
	kubeconfig := d.env.Cluster.Kubeconfig
	if bin == "" {
		bin = localenv.BinDir(d.env.Cluster.Root)
	}
	tk := filepath.Join(bin, "tk-image")
	dash := exec.CommandContext(ctx, tk, "dashboard", "--kubeconfig", kubeconfig, "--no-browser", "--address", dashboardAddress)
	dash.Stderr = os.Stderr
	out, err := dash.StdoutPipe()
	if err != nil {
		return err
	}
	if err := dash.Start(); err != nil {
		return fmt.Errorf("starting %s dashboard: %w", tk, err)
	}
	// tk-image prints "Dashboard: URL (Ctrl-C to stop)" once it serves.
	address := make(chan string, 1)
	go func() {
		lines := bufio.NewScanner(out)
		for lines.Scan() {
			if u, ok := strings.CutPrefix(lines.Text(), "Dashboard: "); ok {
				address <- strings.Fields(u)[0]
			}
		}
	}()
	select {
	case u := <-address:
		step("tk-image dashboard is serving " + u + " (open it in a browser)")
	case <-time.After(time.Minute):
		return errors.New("tk-image dashboard printed no address within a minute")
	case <-ctx.Done():
		return nil
	}
	fmt.Printf(`
Everything keeps running until Ctrl-C. In another terminal:

    export KUBECONFIG=%[1]s
    %[2]s get automations -A
    %[2]s explain automation fleet -n default
    %[2]s explain automation staging -n default    # why it fails, and which Secret
    %[2]s explain policy canary -n default
    kubectl get image-toolkit -A                      # bin/testenv/kubectl

Type a tag and Enter to push %[3]s/%[4]s:TAG to the registry and ask for a
scan (e.g. 6.6.0): the Fleet page follows it into git.
`, kubeconfig, tk, d.env.RegistryHost, chain.Image)
	tags := make(chan string)
	go func() {
		lines := bufio.NewScanner(os.Stdin)
		for lines.Scan() {
			if t := strings.TrimSpace(lines.Text()); t != "" {
				tags <- t
			}
		}
	}()
	for {
		select {
		case <-ctx.Done():
			fmt.Println()
			_ = dash.Wait()
			return nil
		case t := <-tags:
			if err := d.pushAndScan(ctx, t); err != nil {
				fmt.Fprintf(os.Stderr, "pushing %s: %v\n", t, err)
				continue
			}
			step("pushed " + chain.Image + ":" + t + " and asked ImageRepository podinfo to scan")
		}
	}
}

// pushAndScan pushes tag and asks the sample ImageRepository to scan.
func (d *demo) pushAndScan(ctx context.Context, tag string) error {
	if err := d.env.PushTag(ctx, tag); err != nil {
		return err
	}
	repo := &imagev1.ImageRepository{}
	repo.Name, repo.Namespace = "podinfo", "default"
	return d.env.RequestReconcile(ctx, repo)
}
