// Package chain runs the whole image-toolkit chain on loopback: an OCI
// registry, a git server with a fleet repository, the control plane and the
// three controller processes, and the charts' sample objects pointed at the
// local registry and git server. The end-to-end tests, the latency
// benchmark and `make demo` share it. With Options.Gitea the fleet
// repository is on a real forge instead, for pull requests.
package chain

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"toolkit.dev/image-toolkit/pkg/apis/meta"
	"toolkit.dev/image-toolkit/pkg/testing/testgit"
	"toolkit.dev/image-toolkit/pkg/testing/testgitea"
	"toolkit.dev/image-toolkit/tests/internal/localenv"
)

// Image is the repository the samples follow, at the local registry.
const Image = "stefanprodan/podinfo"

// Git credentials of the local server; the samples' git-credentials Secret
// holds them.
const (
	gitUser     = "imagebot"
	gitPassword = "demo-password-not-secret"
)

// Manifest is the fleet repository's deployment; %s is the registry host.
// Two markers: podinfo (the sample policy, labelled automation: enabled)
// and podinfo-beta (not selected by the sample automation).
const Manifest = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: podinfo
  namespace: default
spec:
  template:
    spec:
      containers:
      - name: podinfo
        image: %[1]s/stefanprodan/podinfo:6.3.0 # {"$imagepolicy": "default:podinfo"}
      - name: podinfo-beta
        image: %[1]s/stefanprodan/podinfo:6.3.0 # {"$imagepolicy": "default:podinfo-beta"}
`

// ManifestPath is where Manifest lives in the repository: under the sample
// automation's update.path.
const ManifestPath = "clusters/prod/podinfo.yaml"

// Env is a running chain.
type Env struct {
	// dirs is how many directories GrowIn spread the manifests over.
	dirs int

	Cluster      *localenv.Cluster
	RegistryHost string
	// Git is the git server (git http-backend); nil with Options.Gitea.
	Git *testgit.Server
	// Gitea is the forge holding the fleet repository, with Options.Gitea.
	Gitea *testgitea.Server
	// RepoURL is the fleet repository's URL.
	RepoURL string
	Procs   map[string]*localenv.Process

	img  v1.Image
	work string
	// remote is where the work clone pushes and the mirror fetches from:
	// the bare repository, or the forge's URL with credentials.
	remote string
	// mirror is a mirror clone of the forge's repository, fetched before
	// it is read (the server's own bare repository is read directly).
	mirror               string
	gitUser, gitPassword string
	stops                []func()
}

// Options change what Start starts.
type Options struct {
	// Gitea serves the fleet repository from a real Gitea (bin/gitea,
	// `make testenv`) instead of git http-backend; the Secret's password
	// is the Gitea administrator's API token, as pull requests need.
	Gitea bool
	// ControllerArgs are added to every controller's arguments, e.g.
	// --events-addr.
	ControllerArgs []string
	// ReflectorArgs are added to image-reflector-controller's arguments
	// only, e.g. --webhook-bind-address.
	ReflectorArgs []string
	// RegistryHost is a registry already running (host:port, plain HTTP)
	// to use instead of starting one, e.g. a real distribution registry
	// that sends notifications.
	RegistryHost string
}

// Start starts everything; dir holds the scratch files, bin the
// controller binaries, tags are pushed to the registry before the
// controllers start. say reports progress.
func Start(ctx context.Context, dir, bin string, tags []string, say func(string)) (e *Env, err error) {
	return StartWith(ctx, dir, bin, tags, say, Options{})
}

// StartWith is Start with options.
func StartWith(ctx context.Context, dir, bin string, tags []string, say func(string), opts Options) (e *Env, err error) {
	e = &Env{Procs: map[string]*localenv.Process{}, gitUser: gitUser, gitPassword: gitPassword}
	// The error returns below set e to nil: stop what was started through
	// its own pointer.
	started := e
	defer func() {
		if err != nil {
			started.Stop()
		}
	}()

	if opts.RegistryHost != "" {
		say("using the registry at " + opts.RegistryHost + " with " + Image + " " + strings.Join(tags, ", "))
		e.RegistryHost = opts.RegistryHost
	} else {
		say("starting a local OCI registry with " + Image + " " + strings.Join(tags, ", "))
		reg := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
		e.stops = append(e.stops, reg.Close)
		e.RegistryHost = strings.TrimPrefix(reg.URL, "http://")
	}
	if e.img, err = random.Image(512, 1); err != nil {
		return nil, err
	}
	for _, tag := range tags {
		if err := e.PushTag(ctx, tag); err != nil {
			return nil, err
		}
	}

	e.work = filepath.Join(dir, "fleet")
	if opts.Gitea {
		say("starting Gitea (bin/gitea) with the fleet repository")
		if err := e.startGitea(ctx, dir); err != nil {
			return nil, err
		}
	} else {
		say("starting a git server (git http-backend, basic auth) with the fleet repository")
		gitRoot := filepath.Join(dir, "git")
		if err := os.MkdirAll(gitRoot, 0o755); err != nil {
			return nil, err
		}
		srv, stop, err := testgit.Start(gitRoot, testgit.Options{Username: gitUser, Password: gitPassword})
		if err != nil {
			return nil, err
		}
		e.stops = append(e.stops, stop)
		e.Git = srv
		e.RepoURL = srv.RepoURL("fleet")
		e.remote = srv.BarePath("fleet")
		if err := e.createFleet(e.work); err != nil {
			return nil, err
		}
	}

	say("starting kube-apiserver and etcd from bin/testenv, with the CRDs of all three charts")
	if e.Cluster, err = localenv.Start(dir); err != nil {
		return nil, err
	}
	if bin == "" {
		bin = localenv.BinDir(e.Cluster.Root)
	}
	for _, name := range localenv.Controllers {
		args := opts.ControllerArgs
		if name == "image-reflector-controller" {
			args = append(append([]string(nil), args...), opts.ReflectorArgs...)
		}
		p, err := e.Cluster.StartController(ctx, bin, name, args...)
		if err != nil {
			return nil, err
		}
		e.Procs[name] = p
		say(fmt.Sprintf("%s ready (metrics http://%s/metrics)", name, p.MetricsAddr))
	}
	return e, nil
}

// GitCredentials are the user and password of the fleet repository's
// Secret.
func (e *Env) GitCredentials() (user, password string) { return e.gitUser, e.gitPassword }

// Stop stops the controllers, the control plane and the servers.
func (e *Env) Stop() error {
	var errs []error
	for _, name := range localenv.Controllers {
		if p := e.Procs[name]; p != nil {
			if err := p.Stop(20 * time.Second); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w\n%s", name, err, p.Log()))
			}
		}
	}
	if e.Cluster != nil {
		errs = append(errs, e.Cluster.Stop())
	}
	for i := len(e.stops) - 1; i >= 0; i-- {
		e.stops[i]()
	}
	return errors.Join(errs...)
}

// PushTag pushes the image under another tag.
func (e *Env) PushTag(ctx context.Context, tag string) error {
	ref, err := name.NewTag(e.RegistryHost+"/"+Image+":"+tag, name.Insecure)
	if err != nil {
		return err
	}
	return remote.Write(ref, e.img, remote.WithContext(ctx))
}

// PushLabelled pushes the image under another tag with labels in its
// config, as an image builder writes the org.opencontainers.image keys.
func (e *Env) PushLabelled(ctx context.Context, tag string, labels map[string]string) error {
	cfg, err := e.img.ConfigFile()
	if err != nil {
		return err
	}
	cfg = cfg.DeepCopy()
	cfg.Config.Labels = labels
	img, err := mutate.ConfigFile(e.img, cfg)
	if err != nil {
		return err
	}
	ref, err := name.NewTag(e.RegistryHost+"/"+Image+":"+tag, name.Insecure)
	if err != nil {
		return err
	}
	return remote.Write(ref, img, remote.WithContext(ctx))
}

// fleetFiles are the fleet repository's first commit.
func (e *Env) fleetFiles() map[string]string {
	return map[string]string{
		ManifestPath: fmt.Sprintf(Manifest, e.RegistryHost),
		"README.md":  "# fleet\n\nManifests kept up to date by image-toolkit.\n",
	}
}

// startGitea starts Gitea, creates the fleet repository on it, clones it as
// the work tree and mirrors it for reading.
func (e *Env) startGitea(ctx context.Context, dir string) error {
	srv, err := testgitea.Start(ctx, dir, "")
	if err != nil {
		return err
	}
	e.stops = append(e.stops, func() { srv.Stop() })
	e.Gitea = srv
	if e.RepoURL, err = srv.CreateRepo(ctx, "fleet", e.fleetFiles()); err != nil {
		return err
	}
	e.gitUser, e.gitPassword = srv.Admin, srv.Token
	u, err := url.Parse(e.RepoURL)
	if err != nil {
		return err
	}
	u.User = url.UserPassword(srv.Admin, srv.Token)
	e.remote = u.String()
	e.mirror = filepath.Join(dir, "fleet-mirror.git")
	if _, err := Git("", "clone", "-q", "--mirror", e.remote, e.mirror); err != nil {
		return err
	}
	_, err = Git("", "clone", "-q", e.remote, e.work)
	return err
}

// Pulls lists the fleet repository's pull requests in state (open, closed,
// all), with Options.Gitea.
func (e *Env) Pulls(ctx context.Context, state string) ([]testgitea.Pull, error) {
	return e.Gitea.ListPulls(ctx, "fleet", state)
}

// Commit commits files (path → content) on the fleet repository's main
// branch, as a person would, and returns the commit.
func (e *Env) Commit(files map[string]string, message string) (string, error) {
	if _, err := Git("", "-C", e.work, "pull", "-q", "--ff-only", e.remote, "main"); err != nil {
		return "", err
	}
	for p, body := range files {
		full := filepath.Join(e.work, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			return "", err
		}
		if err := os.WriteFile(full, []byte(body), 0o644); err != nil {
			return "", err
		}
	}
	for _, args := range [][]string{
		{"-C", e.work, "add", "."},
		{"-C", e.work, "commit", "-q", "-m", message},
		{"-C", e.work, "push", "-q", e.remote, "HEAD:main"},
	} {
		if _, err := Git("", args...); err != nil {
			return "", err
		}
	}
	out, err := Git("", "-C", e.work, "rev-parse", "HEAD")
	return strings.TrimSpace(out), err
}

func (e *Env) createFleet(work string) error {
	bare := e.Git.BarePath("fleet")
	steps := [][]string{
		{"init", "-q", "--bare", "--initial-branch=main", bare},
		{"-C", bare, "config", "http.receivepack", "true"},
		{"init", "-q", "--initial-branch=main", work},
	}
	for _, args := range steps {
		if _, err := Git("", args...); err != nil {
			return err
		}
	}
	for p, body := range e.fleetFiles() {
		full := filepath.Join(work, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(full, []byte(body), 0o644); err != nil {
			return err
		}
	}
	for _, args := range [][]string{
		{"-C", work, "add", "."},
		{"-C", work, "commit", "-q", "-m", "fleet: podinfo 6.3.0"},
		{"-C", work, "push", "-q", bare, "main"},
	} {
		if _, err := Git("", args...); err != nil {
			return err
		}
	}
	return nil
}

// Grow adds files YAML manifests under clusters/prod/apps to the fleet
// repository, markers of them carrying a default:podinfo marker, in one
// commit, to measure runs on a repository of realistic size. The commit is
// written by git fast-import, one stream, rather than files written and
// added one by one: 100,000 files took minutes that way.
func (e *Env) Grow(files, markers int) error {
	return e.GrowIn(files, markers, 100)
}

// GrowIn is Grow with the manifests spread over dirs directories (Grow's
// 100, team-00 to team-99; 1 puts them all in one).
func (e *Env) GrowIn(files, markers, dirs int) error {
	e.dirs = dirs
	every := files / max(markers, 1)
	var stream bytes.Buffer
	msg := fmt.Sprintf("fleet: %d more manifests", files)
	fmt.Fprintf(&stream, "commit refs/heads/main\ncommitter %s <%s> %d +0000\ndata %d\n%s\nfrom refs/heads/main^0\n",
		"fleet", "fleet@example.com", time.Now().Unix(), len(msg), msg)
	for i := range files {
		p := e.appPath(i)
		marker := ""
		if markers > 0 && i%every == 0 && i/every < markers {
			marker = ` # {"$imagepolicy": "default:podinfo"}`
		}
		body := e.app(i, 2, marker)
		fmt.Fprintf(&stream, "M 644 inline %s\ndata %d\n%s\n", p, len(body), body)
	}
	return e.load(&stream)
}

// app is manifest i of Grow, with replicas and marker (a line comment, or
// empty).
func (e *Env) app(i, replicas int, marker string) string {
	return fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata:
  name: app-%05d
  namespace: team-%02d
spec:
  replicas: %d
  template:
    spec:
      containers:
      - name: app
        image: %s/%s:6.3.0%s
        ports:
        - containerPort: 8080
`, i, i%100, replicas, e.RegistryHost, Image, marker)
}

// load runs a git fast-import stream in the work tree and pushes main.
func (e *Env) load(stream *bytes.Buffer) error {
	cmd := exec.Command("git", "-C", e.work, "fast-import", "--quiet")
	cmd.Stdin = stream
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("git fast-import: %w\n%s", err, out)
	}
	for _, args := range [][]string{
		{"-C", e.work, "reset", "-q", "--hard", "main"},
		{"-C", e.work, "push", "-q", e.remote, "main"},
	} {
		if _, err := Git("", args...); err != nil {
			return err
		}
	}
	return nil
}

// appPath is where Grow writes manifest i.
func (e *Env) appPath(i int) string {
	return path.Join("clusters/prod/apps", fmt.Sprintf("team-%02d", i%max(e.dirs, 1)), fmt.Sprintf("app-%05d.yaml", i))
}

// History adds commits to the fleet repository after Grow(files, ...):
// each changes the replicas of a few of its unmarked manifests, as people
// do between the automation's commits, so that a run meets a history to
// walk. One git fast-import stream, like Grow's.
func (e *Env) History(commits, files int) error {
	var stream bytes.Buffer
	when := time.Now().Unix()
	for c := range commits {
		msg := fmt.Sprintf("fleet: scale, change %d", c+1)
		fmt.Fprintf(&stream, "commit refs/heads/main\ncommitter %s <%s> %d +0000\ndata %d\n%s\n",
			"person", "person@example.com", when+int64(c), len(msg), msg)
		if c == 0 {
			stream.WriteString("from refs/heads/main^0\n")
		}
		for k := range 5 {
			// Files 1..files-1 that are not marked (Grow marks multiples
			// of files/markers, 0 among them).
			i := 1 + (c*5+k)*7919%(files-1)
			if i%(files/100) == 0 {
				i++
			}
			p := e.appPath(i)
			body := e.app(i, 3+c%5, "")
			fmt.Fprintf(&stream, "M 644 inline %s\ndata %d\n%s\n", p, len(body), body)
		}
	}
	return e.load(&stream)
}

// Git runs git with a fixed identity and no user or system config.
func Git(dir string, args ...string) (string, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=demo", "GIT_AUTHOR_EMAIL=demo@example.com",
		"GIT_COMMITTER_NAME=demo", "GIT_COMMITTER_EMAIL=demo@example.com",
		"GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null",
		// No automatic gc: on a large repository it runs detached after
		// the command and still writes when the test removes its files.
		"GIT_CONFIG_COUNT=1", "GIT_CONFIG_KEY_0=gc.auto", "GIT_CONFIG_VALUE_0=0")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("git %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// Head returns the commit a branch of the fleet repository points at, or ""
// when it does not exist.
func (e *Env) Head(branch string) string {
	out, err := e.FleetGit("rev-parse", "--verify", "-q", "refs/heads/"+branch)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(out)
}

// FleetGit runs git in the fleet repository on the server (with
// Options.Gitea, in a mirror fetched first).
func (e *Env) FleetGit(args ...string) (string, error) {
	if e.mirror == "" {
		return Git(e.Git.BarePath("fleet"), args...)
	}
	if _, err := Git(e.mirror, "fetch", "-q", "--prune", e.remote, "+refs/heads/*:refs/heads/*"); err != nil {
		return "", err
	}
	return Git(e.mirror, args...)
}

// Samples returns the charts' sample objects (but the UpdateJob sample,
// whose one-off job targets another repository layout), pointed at the
// local registry and git server, plus the git-credentials Secret they name.
// automation names the automation sample of the image-automation-controller
// chart to use; the default is imageupdateautomation.yaml.
func (e *Env) Samples(root string, automation ...string) (string, error) {
	auto := "imageupdateautomation.yaml"
	if len(automation) > 0 {
		auto = automation[0]
	}
	var docs []string
	for _, f := range []string{
		"charts/image-reflector-controller/samples/imagerepository.yaml",
		"charts/image-reflector-controller/samples/imagepolicy.yaml",
		"charts/image-automation-controller/samples/" + auto,
	} {
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			return "", err
		}
		docs = append(docs, string(b))
	}
	all := strings.Join(docs, "\n---\n")
	r := strings.NewReplacer(
		"image: ghcr.io/stefanprodan/podinfo\n", "image: "+e.RegistryHost+"/"+Image+"\n  insecure: true\n",
		"url: https://git.example.com/org/fleet.git", "url: "+e.RepoURL,
	)
	out := r.Replace(all)
	if !strings.Contains(out, e.RegistryHost) || !strings.Contains(out, e.RepoURL) {
		return "", errors.New("the chart samples no longer name ghcr.io/stefanprodan/podinfo and https://git.example.com/org/fleet.git")
	}
	return out + "---\n" + e.CredentialsSecret("git-credentials"), nil
}

// CredentialsSecret is a Secret named name, in namespace default, with the
// git server's username and password: the samples' git-credentials, for a
// test that writes its own objects instead of applying the samples.
func (e *Env) CredentialsSecret(name string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Secret
metadata:
  name: %s
  namespace: default
stringData:
  username: %s
  password: %s
`, name, e.gitUser, e.gitPassword)
}

// Apply applies YAML with the cluster's kubectl.
func (e *Env) Apply(ctx context.Context, yaml string) error {
	cmd := e.Cluster.KubectlCmd(ctx, "apply", "-n", "default", "-f", "-")
	cmd.Stdin = strings.NewReader(yaml)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("kubectl apply: %w\n%s", err, out)
	}
	return nil
}

// RequestReconcile sets the reconcile-request annotation on an object.
func (e *Env) RequestReconcile(ctx context.Context, obj client.Object) error {
	_, err := e.RequestReconcileToken(ctx, obj)
	return err
}

// RequestReconcileToken is RequestReconcile, returning the request's value,
// which the controller copies to status.lastHandledReconcileAt when done.
func (e *Env) RequestReconcileToken(ctx context.Context, obj client.Object) (string, error) {
	if err := e.Cluster.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
		return "", err
	}
	patch := client.MergeFrom(obj.DeepCopyObject().(client.Object))
	a := obj.GetAnnotations()
	if a == nil {
		a = map[string]string{}
	}
	token := time.Now().Format(time.RFC3339Nano)
	a[meta.ReconcileRequestAnnotation] = token
	obj.SetAnnotations(a)
	return token, e.Cluster.Client.Patch(ctx, obj, patch)
}

// Automation is an ImageUpdateAutomation of the fleet repository at
// repoURL with the git Secret secret, pushing to a branch of its name,
// over ./clusters/prod; extra is YAML added under its spec (indented two
// spaces), e.g. a policySelector.
func Automation(repoURL, name, secret, extra string) string {
	return `apiVersion: image.toolkit.dev/v1beta1
kind: ImageUpdateAutomation
metadata:
  name: ` + name + `
spec:
  interval: 5m
  git:
    repository:
      url: ` + repoURL + `
      secretRef:
        name: ` + secret + `
    checkout:
      ref:
        branch: main
    commit:
      author:
        name: imagebot
        email: imagebot@example.com
    push:
      branch: ` + name + `
  update:
    path: ./clusters/prod
` + extra
}

// Broken is what fails in the ways an operator meets first, beside the
// samples: automation staging, whose git Secret git-staging has a wrong
// password (AuthenticationFailed, naming the Secret), and policy canary,
// whose ImageRepository does not exist. The demo's --stay and the
// dashboard's browser test apply it.
func Broken(repoURL string) string {
	return Automation(repoURL, "staging", "git-staging", `  policySelector:
    matchLabels:
      automation: enabled
`) + `---
apiVersion: v1
kind: Secret
metadata:
  name: git-staging
stringData:
  username: imagebot
  password: not-the-password
---
apiVersion: image.toolkit.dev/v1beta1
kind: ImagePolicy
metadata:
  name: canary
spec:
  imageRepositoryRef:
    name: canary
  policy:
    semver:
      range: ">=1.0.0"
`
}
