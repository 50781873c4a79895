package controller

import (
	"context"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"toolkit.dev/image-toolkit/pkg/apis/meta"
	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
	"toolkit.dev/image-toolkit/pkg/runtime/conditions"
	"toolkit.dev/image-toolkit/pkg/testing/testenv"
	"toolkit.dev/image-toolkit/pkg/testing/testgit"
)

const deployment = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: podinfo
  namespace: apps
spec:
  template:
    spec:
      containers:
      - name: podinfo
        image: ghcr.io/stefanprodan/podinfo:6.4.0 # {"$imagepolicy": "apps:podinfo"}
`

var updated = strings.Replace(deployment, "podinfo:6.4.0", "podinfo:6.5.0", 1)

// newJob is a job updating apps:podinfo to 6.5.0 in the repository at url.
func newJob(ns, name, url string, mutate func(*updatev1.UpdateJob)) *updatev1.UpdateJob {
	j := &updatev1.UpdateJob{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: updatev1.UpdateJobSpec{
			Repository: updatev1.GitRepositorySpec{URL: url},
			Checkout:   updatev1.GitCheckoutSpec{Reference: updatev1.GitRepositoryRef{Branch: "main"}},
			Update: updatev1.UpdateSpec{Path: "deploy", Setters: []updatev1.PolicySetter{
				{Policy: "apps:podinfo", ImageRef: meta.ImageRef{Name: "ghcr.io/stefanprodan/podinfo", Tag: "6.5.0"}},
			}},
			Commit: updatev1.CommitSpec{
				Author:          updatev1.CommitUser{Name: "image-bot", Email: "bot@example.com"},
				MessageTemplate: `{{ range .Changed.Changes }}{{ .OldValue }} -> {{ .NewValue }}{{ end }}`,
			},
		},
	}
	if mutate != nil {
		mutate(j)
	}
	return j
}

func create(t *testing.T, objs ...client.Object) {
	t.Helper()
	for _, o := range objs {
		if err := env.Client.Create(context.Background(), o); err != nil {
			t.Fatal(err)
		}
	}
}

// waitFinished waits for the job to reach a terminal phase.
func waitFinished(t *testing.T, j *updatev1.UpdateJob) *updatev1.UpdateJob {
	t.Helper()
	got := &updatev1.UpdateJob{}
	testenv.Eventually(t, 90*time.Second, func() (bool, error) {
		err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(j), got)
		return got.Status.Phase.Finished(), err
	})
	return got
}

// repos is a git server's repository directory.
type repos interface{ BarePath(name string) string }

func head(t *testing.T, srv repos, repo, ref string) string {
	t.Helper()
	return strings.TrimSpace(testgit.Git(t, srv.BarePath(repo), "rev-parse", ref))
}

// commitsBy counts the commits on ref whose author email is email.
func commitsBy(t *testing.T, srv repos, repo, ref, email string) int {
	t.Helper()
	out := testgit.Git(t, srv.BarePath(repo), "log", "--format=%ae", ref)
	return strings.Count(out, email+"\n")
}

func TestRunPushes(t *testing.T) {
	srv := testgit.New(t, testgit.Options{})
	ns := env.Namespace(t)

	tests := []struct {
		name   string
		setup  func(c *testgit.Clone)
		mutate func(*updatev1.UpdateJob)
		// refs must all point at the pushed commit afterwards.
		refs []string
		// untouched refs keep the commit they had.
		untouched []string
		revision  string
	}{
		{name: "checkout branch", refs: []string{"refs/heads/main"}, revision: "main@sha1:"},
		{
			name: "new branch",
			mutate: func(j *updatev1.UpdateJob) {
				j.Spec.Push = &updatev1.PushSpec{Branch: "auto/podinfo"}
			},
			refs: []string{"refs/heads/auto/podinfo"}, untouched: []string{"refs/heads/main"}, revision: "main@sha1:",
		},
		{
			name: "existing branch is reset to checkout plus commit",
			setup: func(c *testgit.Clone) {
				testgit.Git(t, c.Dir, "checkout", "-q", "-b", "auto")
				c.Commit("stale work on the push branch", map[string]string{"stale.txt": "x"})
				c.Push("auto")
				testgit.Git(t, c.Dir, "checkout", "-q", "main")
			},
			mutate: func(j *updatev1.UpdateJob) { j.Spec.Push = &updatev1.PushSpec{Branch: "auto"} },
			refs:   []string{"refs/heads/auto"}, untouched: []string{"refs/heads/main"}, revision: "main@sha1:",
		},
		{
			name: "from a tag",
			setup: func(c *testgit.Clone) {
				testgit.Git(t, c.Dir, "tag", "v1.0.0")
				c.Push("v1.0.0")
				c.Commit("after the tag", map[string]string{"later.txt": "x"})
				c.Push()
			},
			mutate: func(j *updatev1.UpdateJob) {
				j.Spec.Checkout.Reference = updatev1.GitRepositoryRef{Tag: "v1.0.0"}
				j.Spec.Push = &updatev1.PushSpec{Branch: "release-1.0"}
			},
			refs: []string{"refs/heads/release-1.0"}, untouched: []string{"refs/heads/main"}, revision: "v1.0.0@sha1:",
		},
		{
			name: "semver over tags",
			setup: func(c *testgit.Clone) {
				for _, v := range []string{"v1.0.0", "v1.2.0", "v2.0.0"} {
					c.Commit(v, map[string]string{"version.txt": v})
					testgit.Git(t, c.Dir, "tag", v)
				}
				c.Push("main", "--tags")
			},
			mutate: func(j *updatev1.UpdateJob) {
				j.Spec.Checkout.Reference = updatev1.GitRepositoryRef{SemVer: "1.x"}
				j.Spec.Push = &updatev1.PushSpec{Branch: "release-1"}
			},
			refs: []string{"refs/heads/release-1"}, revision: "v1.2.0@sha1:",
		},
		{
			name: "branch and refspec",
			mutate: func(j *updatev1.UpdateJob) {
				j.Spec.Push = &updatev1.PushSpec{Refspec: "HEAD:refs/heads/mirror", Branch: "main"}
			},
			refs: []string{"refs/heads/main", "refs/heads/mirror"}, revision: "main@sha1:",
		},
		{
			name: "refspec only",
			mutate: func(j *updatev1.UpdateJob) {
				j.Spec.Push = &updatev1.PushSpec{Refspec: "refs/heads/main:refs/for/main"}
			},
			refs: []string{"refs/for/main"}, untouched: []string{"refs/heads/main"}, revision: "main@sha1:",
		},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			repo := fmt.Sprintf("push-%d", i)
			clone := srv.CreateRepo(t, repo, map[string]string{"deploy/app.yaml": deployment, "README.md": "hi\n"})
			if tt.setup != nil {
				tt.setup(clone)
			}
			before := map[string]string{}
			for _, r := range tt.untouched {
				before[r] = head(t, srv, repo, r)
			}
			j := newJob(ns, repo, srv.RepoURL(repo), tt.mutate)
			create(t, j)
			got := waitFinished(t, j)
			if got.Status.Phase != updatev1.UpdateJobSucceeded {
				t.Fatalf("phase %s: %+v", got.Status.Phase, got.Status.Conditions)
			}
			sha := got.Status.PushedCommit
			for _, r := range tt.refs {
				if h := head(t, srv, repo, r); h != sha {
					t.Errorf("%s = %s, want the pushed commit %s", r, h, sha)
				}
			}
			if strings.Join(got.Status.PushedRefs, ",") != strings.Join(tt.refs, ",") {
				t.Errorf("pushedRefs = %v, want %v", got.Status.PushedRefs, tt.refs)
			}
			for r, h := range before {
				if now := head(t, srv, repo, r); now != h {
					t.Errorf("%s moved from %s to %s", r, h, now)
				}
			}
			// The commit's parent is the checkout revision; its diff is
			// exactly the tag change; the message is the template's.
			parent := head(t, srv, repo, sha+"^")
			if !strings.HasPrefix(got.Status.CheckoutRevision, tt.revision) ||
				!strings.HasSuffix(got.Status.CheckoutRevision, parent) {
				t.Errorf("checkoutRevision %q, want %s<parent %s>", got.Status.CheckoutRevision, tt.revision, parent)
			}
			if body := testgit.Git(t, srv.BarePath(repo), "show", sha+":deploy/app.yaml"); body != updated {
				t.Errorf("deploy/app.yaml after the job:\n%s", body)
			}
			diff := testgit.Git(t, srv.BarePath(repo), "diff", "--stat", sha+"^", sha)
			if !strings.Contains(diff, "1 file changed, 1 insertion(+), 1 deletion(-)") {
				t.Errorf("diff: %s", diff)
			}
			msg := testgit.Git(t, srv.BarePath(repo), "log", "-1", "--format=%an <%ae>%n%B", sha)
			if want := "image-bot <bot@example.com>\nghcr.io/stefanprodan/podinfo:6.4.0 -> ghcr.io/stefanprodan/podinfo:6.5.0"; strings.TrimSpace(msg) != want {
				t.Errorf("commit:\n%s\nwant:\n%s", msg, want)
			}
			if got.Status.Attempts != 1 || got.Status.Result == nil || len(got.Status.Result.Files) != 1 ||
				got.Status.Result.Files[0].Path != "app.yaml" || got.Status.CompletionTime == nil {
				t.Errorf("status = %+v", got.Status)
			}
			if c := conditions.Get(got, conditions.ReadyCondition); c == nil || c.Status != metav1.ConditionTrue ||
				!strings.HasPrefix(c.Message, "pushed commit "+sha[:7]+" to ") {
				t.Errorf("Ready = %+v", c)
			}
		})
	}
}

func TestRunEventNamesTheCommit(t *testing.T) {
	srv := testgit.New(t, testgit.Options{})
	ns := env.Namespace(t)
	srv.CreateRepo(t, "events", map[string]string{"deploy/app.yaml": deployment})
	j := newJob(ns, "events", srv.RepoURL("events"), nil)
	create(t, j)
	got := waitFinished(t, j)
	want := fmt.Sprintf("pushed commit %s to main\n\nghcr.io/stefanprodan/podinfo:6.4.0 -> ghcr.io/stefanprodan/podinfo:6.5.0", got.Status.PushedCommit[:7])
	testenv.Eventually(t, 10*time.Second, func() (bool, error) {
		list := &eventsv1.EventList{}
		if err := env.Client.List(context.Background(), list, client.InNamespace(ns)); err != nil {
			return false, err
		}
		for _, e := range list.Items {
			if e.Regarding.Name == "events" && e.Type == corev1.EventTypeNormal && e.Note == want {
				return true, nil
			}
		}
		return false, nil
	})
}

func TestRunNoChange(t *testing.T) {
	srv := testgit.New(t, testgit.Options{})
	ns := env.Namespace(t)
	srv.CreateRepo(t, "nochange", map[string]string{"deploy/app.yaml": updated})
	before := head(t, srv, "nochange", "main")
	j := newJob(ns, "nochange", srv.RepoURL("nochange"), nil)
	create(t, j)
	got := waitFinished(t, j)
	if got.Status.Phase != updatev1.UpdateJobNoChange || got.Status.PushedCommit != "" ||
		!conditions.IsReady(got) || got.Status.CheckoutRevision != "main@sha1:"+before {
		t.Errorf("status = %+v", got.Status)
	}
	if after := head(t, srv, "nochange", "main"); after != before {
		t.Errorf("main moved to %s", after)
	}
}

// Specs that cannot work fail at once, Stalled, without an attempt.
func TestRunInvalidSpecs(t *testing.T) {
	srv := testgit.New(t, testgit.Options{})
	ns := env.Namespace(t)
	srv.CreateRepo(t, "invalid", map[string]string{"deploy/app.yaml": deployment, "outside": "x"})
	tests := []struct {
		name   string
		mutate func(*updatev1.UpdateJob)
		reason string
		msg    string
	}{
		{"bad template", func(j *updatev1.UpdateJob) {
			j.Spec.Commit.MessageTemplate = "{{ .Updated }}"
		}, conditions.InvalidSpecReason, "commit message template"},
		{"push options", func(j *updatev1.UpdateJob) {
			j.Spec.Push = &updatev1.PushSpec{Options: map[string]string{"ci.skip": ""}}
		}, conditions.InvalidSpecReason, "push.options are not supported"},
		{"refspec from another branch", func(j *updatev1.UpdateJob) {
			j.Spec.Push = &updatev1.PushSpec{Refspec: "refs/heads/dev:refs/heads/x"}
		}, conditions.InvalidSpecReason, "push.refspec"},
		{"path is a file", func(j *updatev1.UpdateJob) {
			j.Spec.Update.Path = "outside"
		}, updatev1.UpdateFailedReason, "not a directory"},
		{"path missing", func(j *updatev1.UpdateJob) {
			j.Spec.Update.Path = "nowhere"
		}, updatev1.UpdateFailedReason, "does not exist"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			j := newJob(ns, fmt.Sprintf("invalid-%d", i), srv.RepoURL("invalid"), tt.mutate)
			create(t, j)
			got := waitFinished(t, j)
			c := conditions.Get(got, conditions.ReadyCondition)
			if got.Status.Phase != updatev1.UpdateJobFailed || !conditions.IsTrue(got, conditions.StalledCondition) ||
				c.Reason != tt.reason || !strings.Contains(c.Message, tt.msg) {
				t.Errorf("phase %s, Ready %+v", got.Status.Phase, c)
			}
			if got.Status.Attempts > 1 {
				t.Errorf("attempts = %d; a spec error is not retried", got.Status.Attempts)
			}
		})
	}
}

// Refused credentials are retried up to backoffLimit, then the job fails;
// the password shows nowhere.
func TestRunWrongPassword(t *testing.T) {
	const password = "s3cret-passw0rd"
	srv := testgit.New(t, testgit.Options{Username: "bot", Password: password})
	ns := env.Namespace(t)
	srv.CreateRepo(t, "auth", map[string]string{"deploy/app.yaml": deployment})
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "creds", Namespace: ns},
		Data:       map[string][]byte{"username": []byte("bot"), "password": []byte("wrong-" + password)},
	}
	j := newJob(ns, "auth", srv.RepoURL("auth"), func(j *updatev1.UpdateJob) {
		j.Spec.Repository.SecretRef = &meta.LocalObjectReference{Name: "creds"}
		j.Spec.BackoffLimit = ptr.To[int32](1)
	})
	create(t, secret, j)
	got := waitFinished(t, j)
	c := conditions.Get(got, conditions.ReadyCondition)
	if got.Status.Phase != updatev1.UpdateJobFailed || got.Status.Attempts != 2 ||
		c.Reason != conditions.AuthenticationFailedReason || !strings.Contains(c.Message, "gave up after 2 attempts") {
		t.Errorf("phase %s attempts %d Ready %+v", got.Status.Phase, got.Status.Attempts, c)
	}
	list := &eventsv1.EventList{}
	if err := env.Client.List(context.Background(), list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for _, e := range list.Items {
		if strings.Contains(e.Note, password) {
			t.Errorf("event shows the password: %s", e.Note)
		}
	}
	for _, c := range got.Status.Conditions {
		if strings.Contains(c.Message, password) {
			t.Errorf("condition shows the password: %s", c.Message)
		}
	}

	// With the right password the same repository works.
	secret.Data["password"] = []byte(password)
	if err := env.Client.Update(context.Background(), secret); err != nil {
		t.Fatal(err)
	}
	ok := newJob(ns, "auth-ok", srv.RepoURL("auth"), func(j *updatev1.UpdateJob) {
		j.Spec.Repository.SecretRef = &meta.LocalObjectReference{Name: "creds"}
	})
	create(t, ok)
	if got := waitFinished(t, ok); got.Status.Phase != updatev1.UpdateJobSucceeded {
		t.Errorf("with the right password: %s %+v", got.Status.Phase, got.Status.Conditions)
	}
}

// A job that cannot finish in activeDeadlineSeconds fails: here the git
// server accepts connections and never answers.
func TestRunDeadline(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				c.Close()
			}
		}()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
		}
	}()
	ns := env.Namespace(t)
	j := newJob(ns, "deadline", "http://"+l.Addr().String()+"/silent.git", func(j *updatev1.UpdateJob) {
		j.Spec.ActiveDeadlineSeconds = ptr.To[int64](3)
	})
	create(t, j)
	got := waitFinished(t, j)
	c := conditions.Get(got, conditions.ReadyCondition)
	if got.Status.Phase != updatev1.UpdateJobFailed || c.Reason != updatev1.DeadlineExceededReason {
		t.Errorf("phase %s Ready %+v", got.Status.Phase, c)
	}
	if d := got.Status.CompletionTime.Sub(got.Status.StartTime.Time); d > 20*time.Second {
		t.Errorf("took %s to give up on a 3s deadline", d)
	}
}

func TestRunTTL(t *testing.T) {
	srv := testgit.New(t, testgit.Options{})
	ns := env.Namespace(t)
	srv.CreateRepo(t, "ttl", map[string]string{"deploy/app.yaml": deployment})
	j := newJob(ns, "ttl", srv.RepoURL("ttl"), func(j *updatev1.UpdateJob) {
		j.Spec.TTLSecondsAfterFinished = ptr.To[int32](1)
	})
	create(t, j)
	testenv.Eventually(t, 60*time.Second, func() (bool, error) {
		err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(j), &updatev1.UpdateJob{})
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	})
	if n := commitsBy(t, srv, "ttl", "main", "bot@example.com"); n != 1 {
		t.Errorf("%d commits by the job, want 1", n)
	}
}

// A runner that dies mid-job leaves it Running with a heartbeat that stops;
// after the lease another runner reclaims it and the job still makes
// exactly one commit.
func TestRunReclaimsAfterRunnerDied(t *testing.T) {
	ctx := context.Background()
	srv := testgit.New(t, testgit.Options{})
	ns := env.Namespace(t)
	srv.CreateRepo(t, "reclaim", map[string]string{"deploy/app.yaml": deployment})
	j := newJob(ns, "reclaim", srv.RepoURL("reclaim"), nil)
	// Stage what a killed runner leaves: its claim, with a heartbeat that
	// is never renewed. Then show the job to the suite's runner.
	claimedAt := time.Now()
	createKilledAfterPush(ctx, t, j, "")

	got := waitFinished(t, j)
	if got.Status.Phase != updatev1.UpdateJobSucceeded || got.Status.Attempts != 2 || got.Status.Runner != "replica-a" {
		t.Errorf("status = %+v", got.Status)
	}
	if waited := got.Status.CompletionTime.Sub(claimedAt); waited < testLease-time.Second {
		t.Errorf("reclaimed after %s, before the %s lease ran out", waited, testLease)
	}
	if n := commitsBy(t, srv, "reclaim", "main", "bot@example.com"); n != 1 {
		t.Errorf("%d commits by the job, want 1", n)
	}
}

// Two replicas share ten jobs on one repository: each job runs once, and
// the branch ends with exactly the commits the jobs name (jobs ready at
// once share one: TestJobsOfOneBranchShareACommit).
func TestRunTwoReplicasTenJobs(t *testing.T) {
	srv := testgit.New(t, testgit.Options{})
	ns := env.Namespace(t)
	files := map[string]string{}
	for i := range 10 {
		files[fmt.Sprintf("deploy/app%d.yaml", i)] = strings.ReplaceAll(deployment, "apps:podinfo", fmt.Sprintf("apps:app%d", i))
	}
	srv.CreateRepo(t, "shared", files)

	cacheDir := t.TempDir()
	second := NewJobMetrics()
	stop, err := env.StartManager(func(mgr ctrl.Manager) error {
		return newRunner(mgr, "replica-b", cacheDir, second)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer stop()

	var jobs []*updatev1.UpdateJob
	for i := range 10 {
		j := newJob(ns, fmt.Sprintf("job-%d", i), srv.RepoURL("shared"), func(j *updatev1.UpdateJob) {
			j.Spec.Update.Setters[0].Policy = fmt.Sprintf("apps:app%d", i)
		})
		jobs = append(jobs, j)
	}
	for _, j := range jobs {
		create(t, j)
	}
	runners := map[string]int{}
	commits := map[string]bool{}
	for _, j := range jobs {
		got := waitFinished(t, j)
		if got.Status.Phase != updatev1.UpdateJobSucceeded || got.Status.Attempts != 1 {
			t.Errorf("%s: phase %s attempts %d %+v", j.Name, got.Status.Phase, got.Status.Attempts, got.Status.Conditions)
		}
		runners[got.Status.Runner]++
		commits[got.Status.PushedCommit] = true
	}
	t.Logf("jobs per runner: %v", runners)
	if t.Failed() {
		list := &eventsv1.EventList{}
		_ = env.Client.List(context.Background(), list, client.InNamespace(ns))
		for _, e := range list.Items {
			t.Logf("event %s %s %s: %s", e.Regarding.Name, e.Type, e.Reason, e.Note)
		}
	}
	if n := commitsBy(t, srv, "shared", "main", "bot@example.com"); n != len(commits) || n > 10 {
		t.Errorf("%d commits by the jobs, which name %d", n, len(commits))
	}
	tree := testgit.Git(t, srv.BarePath("shared"), "grep", "-c", "podinfo:6.5.0", "main", "--", "deploy")
	if strings.Count(tree, ":1\n") != 10 {
		t.Errorf("not every file was updated:\n%s", tree)
	}
}

// Over SSH with known_hosts, signing with an SSH key: the commit on the
// server verifies with git. A wrong host key fails the job, retried, and
// nothing is pushed.
func TestRunSSHSigned(t *testing.T) {
	srv := testgit.NewSSH(t)
	ns := env.Namespace(t)
	srv.CreateRepo(t, "signed", map[string]string{"deploy/app.yaml": deployment})
	signKey, signPublic := testgit.SSHKeygen(t, "sign-pass")
	create(t,
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "ssh", Namespace: ns},
			Data: map[string][]byte{"identity": srv.ClientKey, "known_hosts": srv.KnownHosts}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "wrong-host", Namespace: ns},
			Data: map[string][]byte{"identity": srv.ClientKey, "known_hosts": srv.WrongKnownHosts(t)}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "signing", Namespace: ns},
			Data: map[string][]byte{"identity": signKey, "password": []byte("sign-pass")}},
	)
	before := head(t, srv, "signed", "main")

	bad := newJob(ns, "wrong-host", srv.RepoURL("signed"), func(j *updatev1.UpdateJob) {
		j.Spec.Repository.SecretRef = &meta.LocalObjectReference{Name: "wrong-host"}
		j.Spec.BackoffLimit = ptr.To[int32](0)
	})
	create(t, bad)
	got := waitFinished(t, bad)
	if c := conditions.Get(got, conditions.ReadyCondition); got.Status.Phase != updatev1.UpdateJobFailed ||
		c.Reason != conditions.AuthenticationFailedReason && c.Reason != conditions.GitOperationFailedReason {
		t.Errorf("wrong host key: phase %s, Ready %+v", got.Status.Phase, c)
	}
	if h := head(t, srv, "signed", "main"); h != before {
		t.Fatalf("main moved to %s with a wrong host key", h)
	}

	j := newJob(ns, "signed", srv.RepoURL("signed"), func(j *updatev1.UpdateJob) {
		j.Spec.Repository.SecretRef = &meta.LocalObjectReference{Name: "ssh"}
		j.Spec.Commit.SigningKey = &updatev1.SigningKey{
			SecretRef: meta.LocalObjectReference{Name: "signing"}, Type: updatev1.SigningKeySSH}
	})
	create(t, j)
	got = waitFinished(t, j)
	if got.Status.Phase != updatev1.UpdateJobSucceeded {
		t.Fatalf("phase %s: %+v", got.Status.Phase, got.Status.Conditions)
	}
	allowed := t.TempDir() + "/allowed_signers"
	if err := os.WriteFile(allowed, []byte("bot@example.com "+signPublic+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	testgit.Git(t, srv.BarePath("signed"), "-c", "gpg.format=ssh", "-c", "gpg.ssh.allowedSignersFile="+allowed,
		"verify-commit", got.Status.PushedCommit)
}
