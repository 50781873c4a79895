package controller

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/apis/meta"
	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
	"toolkit.dev/image-toolkit/pkg/runtime/conditions"
	"toolkit.dev/image-toolkit/pkg/testing/testenv"
	"toolkit.dev/image-toolkit/pkg/testing/testgit"
)

// The first run makes one UpdateJob with everything the runner needs; a
// push is recorded; after it nothing changed, so no job is made; a new
// commit on the branch makes the next one.
func TestJobCreatedPushedAndShortCircuit(t *testing.T) {
	f := newFixture(t, testgit.Options{})
	on := map[string]string{"automation": "on"}
	f.policy("app", on, "1.1.0")
	f.policy("api", on, "2.0.0")
	f.policy("other", nil, "9.9.9")
	a := f.automation("fleet", func(a *imagev1.ImageUpdateAutomation) {
		a.Labels = map[string]string{"team": "platform"}
		a.Spec.PolicySelector = &metav1.LabelSelector{MatchLabels: on}
		a.Spec.Update = &imagev1.UpdateStrategy{Strategy: imagev1.UpdateStrategySetters, Path: "./apps"}
		a.Spec.GitSpec.Push = &updatev1.PushSpec{Options: map[string]string{"ci.skip": ""}}
		a.Spec.GitSpec.Commit.MessageTemplateValues = map[string]string{"env": "prod"}
	})
	pushedBefore, skippedBefore := runs(automationMetrics, OutcomePushed), runs(automationMetrics, OutcomeSkipped)
	latBefore, _ := latencies(automationMetrics)
	firstHead := f.head()

	job := waitJobs(t, f.ns, 1)[0]
	if !strings.HasPrefix(job.Name, "fleet-") || len(job.Name) != len("fleet-")+10 {
		t.Errorf("job name %q, want fleet-<10 hex digits>", job.Name)
	}
	wantSetters := []updatev1.PolicySetter{
		{Policy: f.ns + ":api", ImageRef: meta.ImageRef{Name: "ghcr.io/org/api", Tag: "2.0.0"}},
		{Policy: f.ns + ":app", ImageRef: meta.ImageRef{Name: "ghcr.io/org/app", Tag: "1.1.0"}},
	}
	if !slices.Equal(withoutTimes(job.Spec.Update.Setters), wantSetters) {
		t.Errorf("setters %+v, want %+v", job.Spec.Update.Setters, wantSetters)
	}
	s := job.Spec
	if s.Repository.URL != f.git.RepoURL("fleet") || s.Checkout.Reference.Branch != "main" || s.Update.Path != "./apps" ||
		s.Commit.Author.Email != "imagebot@example.com" || s.Commit.MessageTemplate != "Update {{ .AutomationObject }}" ||
		s.Commit.MessageTemplateValues["env"] != "prod" || s.Push == nil || len(s.Push.Options) != 1 ||
		s.Repository.Timeout == nil || s.Repository.Timeout.Duration != time.Minute {
		t.Errorf("job spec %+v", s)
	}
	owner := metav1.GetControllerOf(&job)
	if owner == nil || owner.Kind != "ImageUpdateAutomation" || owner.APIVersion != "image.toolkit.dev/v1beta1" ||
		owner.Name != "fleet" || owner.UID != a.UID {
		t.Errorf("controller reference %+v", owner)
	}
	if job.Labels[AutomationLabel] != "fleet" || job.Labels["team"] != "platform" || job.Annotations[GenerationAnnotation] != "1" {
		t.Errorf("labels %v, annotations %v", job.Labels, job.Annotations)
	}
	if n := len(latestRefTimes(job)); n != 2 {
		t.Errorf("%d setters have latestRefTime, want 2: %+v", n, job.Spec.Update.Setters)
	}
	a = waitAutomation(t, a, "reconciling", func(a *imagev1.ImageUpdateAutomation) bool {
		return conditions.IsTrue(a, conditions.ReconcilingCondition)
	})
	if a.Status.LastAutomationRunTime == nil || !strings.Contains(ready(a).Message, job.Name) {
		t.Errorf("status while the job runs: %+v", a.Status)
	}

	// The runner pushes to main.
	pushed := f.work.Commit("update images", map[string]string{"apps/app.yaml": "image: ghcr.io/org/app:1.1.0\n"})
	f.work.Push()
	finish(t, &job, updatev1.UpdateJobSucceeded, func(j *updatev1.UpdateJob) {
		j.Status.CheckoutRevision = firstHead
		j.Status.PushedCommit = pushed
		j.Status.PushedRefs = []string{"refs/heads/main"}
	})
	a = waitAutomation(t, a, "push recorded", func(a *imagev1.ImageUpdateAutomation) bool {
		return a.Status.LastPushCommit == pushed
	})
	want := imagev1.ObservedPolicies{
		"api": {Name: "ghcr.io/org/api", Tag: "2.0.0"},
		"app": {Name: "ghcr.io/org/app", Tag: "1.1.0"},
	}
	if a.Status.ObservedSourceRevision != "main@sha1:"+pushed || len(a.Status.ObservedPolicies) != 2 ||
		a.Status.ObservedPolicies["api"] != want["api"] || a.Status.ObservedPolicies["app"] != want["app"] ||
		a.Status.LastPushTime == nil || a.Status.ObservedGeneration != a.Generation ||
		a.Status.LastJob == nil || a.Status.LastJob.UID != job.UID || a.Status.LastJob.Phase != updatev1.UpdateJobSucceeded {
		t.Errorf("status after the push: %+v", a.Status)
	}
	if c := ready(a); c.Status != metav1.ConditionTrue || !strings.Contains(c.Message, "pushed commit "+pushed[:12]) {
		t.Errorf("Ready %+v", c)
	}
	if got := runs(automationMetrics, OutcomePushed) - pushedBefore; got != 1 {
		t.Errorf("pushed runs counted %v, want 1", got)
	}
	if n, _ := latencies(automationMetrics); n-latBefore != 2 {
		t.Errorf("policy_to_push_seconds observed %d times, want 2 (one per changed policy)", n-latBefore)
	}

	// Nothing changed: the head is the pushed commit, the policies are as
	// applied. A full reconciliation makes no job.
	a = request(t, a, "nothing-new")
	if n := len(jobs(t, f.ns)); n != 1 {
		t.Errorf("%d jobs after a reconciliation with nothing new, want 1", n)
	}
	if c := ready(a); c.Status != metav1.ConditionTrue || !strings.Contains(c.Message, "nothing changed") {
		t.Errorf("Ready %+v", c)
	}
	if got := runs(automationMetrics, OutcomeSkipped) - skippedBefore; got < 1 {
		t.Errorf("skipped runs counted %v", got)
	}

	// Someone else commits to main: the next run makes a job again.
	f.commit("unrelated change")
	request(t, a, "new-commit")
	next := unfinished(t, waitJobs(t, f.ns, 2))
	if next.Name == job.Name || !slices.Equal(withoutTimes(next.Spec.Update.Setters), wantSetters) {
		t.Errorf("second job %s setters %+v", next.Name, next.Spec.Update.Setters)
	}
	if times := latestRefTimes(next); len(times) != 0 {
		t.Errorf("the second job changes no policy, yet has latestRefTime on %v", times)
	}
}

// A job that finds nothing to change records the revision it saw, and the
// next run with nothing new makes no job.
func TestNoChangeRecordsRevision(t *testing.T) {
	f := newFixture(t, testgit.Options{})
	f.policy("app", nil, "1.0.0")
	a := f.automation("fleet", nil)
	before := runs(automationMetrics, OutcomeNoChange)
	job := waitJobs(t, f.ns, 1)[0]
	head := f.head()
	finish(t, &job, updatev1.UpdateJobNoChange, func(j *updatev1.UpdateJob) { j.Status.CheckoutRevision = head })
	a = waitAutomation(t, a, "no change recorded", func(a *imagev1.ImageUpdateAutomation) bool {
		return a.Status.ObservedSourceRevision == head
	})
	if a.Status.LastPushCommit != "" || a.Status.ObservedPolicies["app"].Tag != "1.0.0" || ready(a).Status != metav1.ConditionTrue {
		t.Errorf("status %+v", a.Status)
	}
	if got := runs(automationMetrics, OutcomeNoChange) - before; got != 1 {
		t.Errorf("nochange runs counted %v, want 1", got)
	}
	request(t, a, "again")
	if n := len(jobs(t, f.ns)); n != 1 {
		t.Errorf("%d jobs, want 1", n)
	}
}

// A policy's new latest image makes a job at once, not at the next
// interval (an hour); a policy the selector excludes makes none.
func TestPolicyChangeTriggersImmediately(t *testing.T) {
	f := newFixture(t, testgit.Options{})
	on := map[string]string{"automation": "on"}
	app := f.policy("app", on, "1.0.0")
	other := f.policy("other", map[string]string{"automation": "off"}, "1.0.0")
	a := f.automation("fleet", func(a *imagev1.ImageUpdateAutomation) {
		a.Spec.PolicySelector = &metav1.LabelSelector{MatchLabels: on}
	})
	job := waitJobs(t, f.ns, 1)[0]
	finish(t, &job, updatev1.UpdateJobNoChange, func(j *updatev1.UpdateJob) { j.Status.CheckoutRevision = f.head() })
	waitAutomation(t, a, "no change recorded", func(a *imagev1.ImageUpdateAutomation) bool { return a.Status.LastJob != nil })

	// The excluded policy changes, then a full reconciliation runs: it
	// still sees nothing to do.
	setLatest(t, other, "2.0.0")
	request(t, a, "after-excluded-change")
	if n := len(jobs(t, f.ns)); n != 1 {
		t.Fatalf("%d jobs after an excluded policy changed, want 1", n)
	}

	setLatest(t, app, "1.1.0")
	next := unfinished(t, waitJobs(t, f.ns, 2))
	if want := []updatev1.PolicySetter{{Policy: f.ns + ":app", ImageRef: meta.ImageRef{Name: "ghcr.io/org/app", Tag: "1.1.0"}}}; !slices.Equal(withoutTimes(next.Spec.Update.Setters), want) {
		t.Errorf("setters %+v, want %+v", next.Spec.Update.Setters, want)
	}
	if times := latestRefTimes(next); len(times) != 1 || times[0] != f.ns+":app" {
		t.Errorf("latestRefTime on %v, want only the changed policy", times)
	}
}

// A failed job makes the automation not ready with the job's reason; the
// same inputs are not retried before the interval, but a reconcile
// request retries them at once under a new name.
func TestFailedJob(t *testing.T) {
	f := newFixture(t, testgit.Options{})
	f.policy("app", nil, "1.0.0")
	a := f.automation("fleet", nil)
	before := runs(automationMetrics, OutcomeFailed)
	job := waitJobs(t, f.ns, 1)[0]
	finish(t, &job, updatev1.UpdateJobFailed, func(j *updatev1.UpdateJob) {
		conditions.MarkFailed(j, conditions.GitOperationFailedReason, "push rejected: non-fast-forward")
	})
	a = waitAutomation(t, a, "failure recorded", func(a *imagev1.ImageUpdateAutomation) bool {
		return a.Status.LastJob != nil && a.Status.LastJob.Phase == updatev1.UpdateJobFailed
	})
	c := ready(a)
	if c.Status != metav1.ConditionFalse || c.Reason != conditions.GitOperationFailedReason ||
		!strings.Contains(c.Message, "push rejected: non-fast-forward") || !strings.Contains(c.Message, job.Name) {
		t.Errorf("Ready %+v", c)
	}
	if conditions.IsTrue(a, conditions.StalledCondition) || a.Status.ObservedSourceRevision != "" {
		t.Errorf("status after a failure: %+v", a.Status)
	}
	if got := runs(automationMetrics, OutcomeFailed) - before; got != 1 {
		t.Errorf("failed runs counted %v, want 1", got)
	}
	// The reconciliation that recorded the failure would have made the
	// retry before writing the status.
	if n := len(jobs(t, f.ns)); n != 1 {
		t.Fatalf("%d jobs right after the failure, want 1 until the interval passes", n)
	}

	request(t, a, "retry")
	retry := unfinished(t, waitJobs(t, f.ns, 2))
	if retry.Name == job.Name || retry.Annotations[InputsAnnotation] != job.Annotations[InputsAnnotation] {
		t.Errorf("retry %s (inputs %s) of %s (inputs %s)", retry.Name, retry.Annotations[InputsAnnotation], job.Name, job.Annotations[InputsAnnotation])
	}
}

// Only the newest --job-history-limit finished jobs are kept.
func TestJobHistoryLimit(t *testing.T) {
	f := newFixture(t, testgit.Options{})
	f.policy("app", nil, "1.0.0")
	a := f.automation("fleet", nil)
	var names []string
	for i := range 4 {
		job := unfinished(t, waitJobs(t, f.ns, min(i, historyLimit)+1))
		names = append(names, job.Name)
		finish(t, &job, updatev1.UpdateJobFailed, nil)
		waitAutomation(t, a, "failure recorded", func(a *imagev1.ImageUpdateAutomation) bool {
			return a.Status.LastJob != nil && a.Status.LastJob.UID == job.UID
		})
		if i < 3 {
			request(t, a, "run-"+string(rune('a'+i)))
		}
	}
	var kept []string
	testenv.Eventually(t, waitFor, func() (bool, error) {
		kept = kept[:0]
		for _, j := range jobs(t, f.ns) {
			kept = append(kept, j.Name)
		}
		return len(kept) == historyLimit, nil
	})
	want := slices.Clone(names[len(names)-historyLimit:])
	slices.Sort(kept)
	slices.Sort(want)
	if !slices.Equal(kept, want) {
		t.Errorf("kept %v, want the newest %v", kept, want)
	}
}

// Restarting the controller while a job runs adopts the job: no second
// one, even when the status never recorded the first.
func TestRestartMakesNoDuplicate(t *testing.T) {
	f := newFixture(t, testgit.Options{})
	shard := map[string]string{shardLabel: "restart"}
	f.policy("app", shard, "1.0.0")
	a := f.automation("fleet", func(a *imagev1.ImageUpdateAutomation) { a.Labels = shard })
	start := func() func() {
		stop, err := env.StartManagerWith(func(o *ctrl.Options) {
			o.Cache.DefaultLabelSelector = labels.SelectorFromSet(shard)
		}, func(mgr ctrl.Manager) error {
			return newReconciler(mgr).SetupWithManager(context.Background(), mgr, controller.Options{})
		})
		if err != nil {
			t.Fatal(err)
		}
		return stop
	}

	stop := start()
	job := waitJobs(t, f.ns, 1)[0]
	if job.Labels[shardLabel] != "restart" {
		t.Errorf("job labels %v lack the automation's shard label", job.Labels)
	}
	waitAutomation(t, a, "reconciling", func(a *imagev1.ImageUpdateAutomation) bool {
		return conditions.IsTrue(a, conditions.ReconcilingCondition)
	})
	stop()

	// As if the controller died between creating the job and writing the
	// status.
	cur := &imagev1.ImageUpdateAutomation{}
	if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(a), cur); err != nil {
		t.Fatal(err)
	}
	cur.Status = imagev1.ImageUpdateAutomationStatus{}
	if err := env.Client.Status().Update(context.Background(), cur); err != nil {
		t.Fatal(err)
	}

	stop = start()
	defer stop()
	a = request(t, a, "after-restart")
	if js := jobs(t, f.ns); len(js) != 1 {
		t.Fatalf("%d jobs after the restart, want the one adopted", len(js))
	}
	if c := conditions.Get(a, conditions.ReconcilingCondition); c == nil || !strings.Contains(c.Message, job.Name) {
		t.Errorf("Reconciling %+v does not name the running job %s", c, job.Name)
	}
	if lr := a.Status.LastAutomationRunTime; lr == nil || !lr.Equal(&job.CreationTimestamp) {
		t.Errorf("lastAutomationRunTime %v, want the adopted job's creation %v", lr, job.CreationTimestamp)
	}
	finish(t, &job, updatev1.UpdateJobNoChange, func(j *updatev1.UpdateJob) { j.Status.CheckoutRevision = f.head() })
	waitAutomation(t, a, "outcome recorded", func(a *imagev1.ImageUpdateAutomation) bool {
		return a.Status.LastJob != nil && a.Status.LastJob.UID == job.UID
	})
}

// A Flux GitRepository gives the URL, credentials, timeout and ref; the
// automation's checkout ref wins; a change to the GitRepository makes a
// run at once.
func TestFluxGitRepositorySource(t *testing.T) {
	f := newFixture(t, testgit.Options{Username: "bot", Password: "s3cret"})
	f.work.Push("main:release")
	create(t, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "git-auth", Namespace: f.ns},
		Data:       map[string][]byte{"username": []byte("bot"), "password": []byte("s3cret")},
	})
	repo := gitRepository(f.ns, "fleet", map[string]any{
		"url": f.git.RepoURL("fleet"), "interval": "5m", "timeout": "30s",
		"secretRef": map[string]any{"name": "git-auth"},
		"ref":       map[string]any{"branch": "main"},
	})
	create(t, repo)
	f.policy("app", nil, "1.0.0")
	flux := func(name string, checkout *updatev1.GitCheckoutSpec) *imagev1.ImageUpdateAutomation {
		return f.automation(name, func(a *imagev1.ImageUpdateAutomation) {
			a.Spec.SourceRef = &imagev1.CrossNamespaceSourceReference{Kind: "GitRepository", Name: "fleet"}
			a.Spec.GitSpec.Repository = nil
			a.Spec.GitSpec.Checkout = checkout
		})
	}
	a := flux("from-source", nil)
	job := waitJobs(t, f.ns, 1)[0]
	r := job.Spec.Repository
	if r.URL != f.git.RepoURL("fleet") || r.SecretRef == nil || r.SecretRef.Name != "git-auth" ||
		r.Timeout == nil || r.Timeout.Duration != 30*time.Second || job.Spec.Checkout.Reference != (updatev1.GitRepositoryRef{Branch: "main"}) {
		t.Errorf("job from the GitRepository: %+v", job.Spec)
	}

	// Both automations select policy app: they take turns (createJob), so
	// the first job ends before the second automation makes one.
	finish(t, &job, updatev1.UpdateJobNoChange, func(j *updatev1.UpdateJob) { j.Status.CheckoutRevision = f.head() })
	waitAutomation(t, a, "outcome recorded", func(a *imagev1.ImageUpdateAutomation) bool { return a.Status.LastJob != nil })
	override := flux("override", &updatev1.GitCheckoutSpec{Reference: updatev1.GitRepositoryRef{Branch: "release"}})
	js := waitJobs(t, f.ns, 2)
	if got := js[1].Spec.Checkout.Reference; got != (updatev1.GitRepositoryRef{Branch: "release"}) {
		t.Errorf("checkout %+v, want the automation's branch release", got)
	}
	release := "release@sha1:" + strings.TrimSpace(testgit.Git(t, f.git.BarePath("fleet"), "rev-parse", "release"))
	finish(t, &js[1], updatev1.UpdateJobNoChange, func(j *updatev1.UpdateJob) { j.Status.CheckoutRevision = release })
	waitAutomation(t, override, "outcome recorded", func(a *imagev1.ImageUpdateAutomation) bool { return a.Status.LastJob != nil })

	// The GitRepository moves to another branch: its automation runs now.
	if err := unstructured.SetNestedField(repo.Object, "release", "spec", "ref", "branch"); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Update(context.Background(), repo); err != nil {
		t.Fatal(err)
	}
	for _, j := range waitJobs(t, f.ns, 3) {
		if j.Name == js[0].Name || j.Name == js[1].Name {
			continue
		}
		if got := j.Spec.Checkout.Reference.Branch; got != "release" || metav1.GetControllerOf(&j).Name != "from-source" {
			t.Errorf("after the GitRepository changed: job %s checks out %q", j.Name, got)
		}
	}
}

func gitRepository(ns, name string, spec map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	u.SetAPIVersion("source.toolkit.fluxcd.io/v1")
	u.SetKind("GitRepository")
	u.SetNamespace(ns)
	u.SetName(name)
	return u
}

// Problems the automation cannot get past are Stalled, with a reason,
// before any job exists.
func TestStalled(t *testing.T) {
	f := newFixture(t, testgit.Options{})
	f.policy("app", nil, "1.0.0")
	create(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "no-known-hosts", Namespace: f.ns},
		Data: map[string][]byte{"identity": []byte("x")}})
	other := env.Namespace(t)
	create(t, gitRepository(other, "elsewhere", map[string]any{"url": f.git.RepoURL("fleet"), "interval": "5m"}))
	create(t, gitRepository(f.ns, "azure", map[string]any{"url": f.git.RepoURL("fleet"), "interval": "5m", "provider": "azure"}))
	source := func(ns, name string) func(*imagev1.ImageUpdateAutomation) {
		return func(a *imagev1.ImageUpdateAutomation) {
			a.Spec.SourceRef = &imagev1.CrossNamespaceSourceReference{Name: name, Namespace: ns}
			a.Spec.GitSpec.Repository, a.Spec.GitSpec.Checkout = nil, nil
		}
	}
	tests := []struct {
		name   string
		mutate func(*imagev1.ImageUpdateAutomation)
		reason string
		msg    string
	}{
		{"bad-template", func(a *imagev1.ImageUpdateAutomation) {
			a.Spec.GitSpec.Commit.MessageTemplate = "{{ range .Updated.Images }}{{ . }}{{ end }}"
		}, imagev1.InvalidMessageTemplateReason, ".Updated"},
		{"bad-selector", func(a *imagev1.ImageUpdateAutomation) {
			a.Spec.PolicySelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "a", Operator: "Near"}}}
		}, imagev1.InvalidPolicySelectorReason, "Near"},
		{"cross-namespace", source(other, "elsewhere"), conditions.AccessDeniedReason, "cross-namespace references are disabled"},
		// A provider issues tokens for https:// only; this repository is http://.
		{"cloud-provider", source("", "azure"), imagev1.InvalidSecretReason, "provider azure issues credentials for https:// URLs only"},
		{"ssh-without-known-hosts", func(a *imagev1.ImageUpdateAutomation) {
			a.Spec.GitSpec.Repository.URL = "ssh://git@127.0.0.1:1/fleet.git"
			a.Spec.GitSpec.Repository.SecretRef = &meta.LocalObjectReference{Name: "no-known-hosts"}
		}, imagev1.InvalidSecretReason, "needs known_hosts"},
		{"nowhere-to-push", func(a *imagev1.ImageUpdateAutomation) {
			a.Spec.GitSpec.Checkout.Reference = updatev1.GitRepositoryRef{Tag: "v1.0.0"}
		}, conditions.InvalidSpecReason, "spec.git.push.branch"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := f.automation(tt.name, tt.mutate)
			a = waitAutomation(t, a, "stalled", func(a *imagev1.ImageUpdateAutomation) bool {
				return conditions.IsTrue(a, conditions.StalledCondition)
			})
			s := conditions.Get(a, conditions.StalledCondition)
			if s.Reason != tt.reason || !strings.Contains(s.Message, tt.msg) || ready(a).Reason != tt.reason ||
				ready(a).Status != metav1.ConditionFalse || a.Status.ObservedGeneration != a.Generation {
				t.Errorf("Stalled %+v, Ready %+v; want reason %s, message with %q", s, ready(a), tt.reason, tt.msg)
			}
		})
	}
	if n := len(jobs(t, f.ns)); n != 0 {
		t.Errorf("%d jobs made by stalled automations", n)
	}
}

// A Secret or GitRepository that does not exist yet (e.g. applied after the
// automation) is waited for, not Stalled: once it appears the run goes on.
func TestMissingDependencyIsRetried(t *testing.T) {
	f := newFixture(t, testgit.Options{})
	f.policy("app", nil, "1.0.0")
	tests := []struct {
		name   string
		mutate func(*imagev1.ImageUpdateAutomation)
		reason string
		msg    string
		appear client.Object
	}{
		{"secret", func(a *imagev1.ImageUpdateAutomation) {
			a.Spec.GitSpec.Repository.SecretRef = &meta.LocalObjectReference{Name: "late"}
		}, conditions.SecretNotFoundReason, "Secret " + f.ns + "/late",
			&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "late", Namespace: f.ns}}},
		{"source", func(a *imagev1.ImageUpdateAutomation) {
			a.Spec.SourceRef = &imagev1.CrossNamespaceSourceReference{Name: "late"}
			a.Spec.GitSpec.Repository, a.Spec.GitSpec.Checkout = nil, nil
		}, imagev1.SourceNotFoundReason, "GitRepository " + f.ns + "/late not found",
			gitRepository(f.ns, "late", map[string]any{"url": f.git.RepoURL("fleet"), "interval": "5m",
				"ref": map[string]any{"branch": "main"}})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := f.automation(tt.name, tt.mutate)
			a = waitAutomation(t, a, "waiting", func(a *imagev1.ImageUpdateAutomation) bool {
				return ready(a).Reason == tt.reason
			})
			if c := ready(a); c.Status != metav1.ConditionFalse || !strings.Contains(c.Message, tt.msg) ||
				conditions.IsTrue(a, conditions.StalledCondition) {
				t.Errorf("Ready %+v, Stalled %v", c, conditions.Get(a, conditions.StalledCondition))
			}
			create(t, tt.appear)
			var job updatev1.UpdateJob
			testenv.Eventually(t, 30*time.Second, func() (bool, error) {
				for _, j := range jobs(t, f.ns) {
					if metav1.IsControlledBy(&j, a) {
						job = j
						return true, nil
					}
				}
				return false, nil
			})
			// The next case's automation selects policy app too: it takes
			// its turn once this job has ended (createJob).
			finish(t, &job, updatev1.UpdateJobNoChange, func(j *updatev1.UpdateJob) { j.Status.CheckoutRevision = f.head() })
		})
	}
}

// The git server refuses the credentials: not ready, the password is in no
// message, and no job is made.
func TestBranchHeadAuthFailure(t *testing.T) {
	f := newFixture(t, testgit.Options{Username: "bot", Password: "right-password"})
	create(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "git-auth", Namespace: f.ns},
		Data: map[string][]byte{"username": []byte("bot"), "password": []byte("wrong-password")}})
	f.policy("app", nil, "1.0.0")
	before := runs(automationMetrics, OutcomeFailed)
	a := f.automation("fleet", func(a *imagev1.ImageUpdateAutomation) {
		a.Spec.GitSpec.Repository.SecretRef = &meta.LocalObjectReference{Name: "git-auth"}
	})
	a = waitAutomation(t, a, "auth failure", func(a *imagev1.ImageUpdateAutomation) bool {
		return ready(a).Reason == conditions.AuthenticationFailedReason
	})
	if c := ready(a); c.Status != metav1.ConditionFalse || !strings.Contains(c.Message, "401") || strings.Contains(c.Message, "wrong-password") {
		t.Errorf("Ready %+v", c)
	}
	if conditions.IsTrue(a, conditions.StalledCondition) {
		t.Error("an authentication failure is Stalled; the Secret may be fixed")
	}
	if runs(automationMetrics, OutcomeFailed) <= before {
		t.Error("the failed run was not counted")
	}
	if n := len(jobs(t, f.ns)); n != 0 {
		t.Errorf("%d jobs made without the branch head", n)
	}
}

// The branch head is read over SSH, with the host key checked.
func TestSSHSource(t *testing.T) {
	ns := env.Namespace(t)
	s := testgit.NewSSH(t)
	s.CreateRepo(t, "fleet", map[string]string{"app.yaml": "image: a:1\n"})
	create(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "ssh", Namespace: ns},
		Data: map[string][]byte{"identity": s.ClientKey, "known_hosts": s.KnownHosts}})
	create(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "ssh-wrong-host", Namespace: ns},
		Data: map[string][]byte{"identity": s.ClientKey, "known_hosts": s.WrongKnownHosts(t)}})
	f := &fixture{t: t, ns: ns}
	f.policy("app", nil, "1.0.0")
	ssh := func(name, secret string) *imagev1.ImageUpdateAutomation {
		return f.automation(name, func(a *imagev1.ImageUpdateAutomation) {
			a.Spec.GitSpec.Repository = &updatev1.GitRepositorySpec{URL: s.RepoURL("fleet"), SecretRef: &meta.LocalObjectReference{Name: secret}}
		})
	}
	wrong := ssh("wrong-host", "ssh-wrong-host")
	waitAutomation(t, wrong, "host key refused", func(a *imagev1.ImageUpdateAutomation) bool {
		return ready(a).Reason == conditions.AuthenticationFailedReason && strings.Contains(ready(a).Message, "host key")
	})
	ssh("fleet", "ssh")
	job := waitJobs(t, ns, 1)[0]
	if metav1.GetControllerOf(&job).Name != "fleet" {
		t.Errorf("job %s belongs to %v", job.Name, metav1.GetControllerOf(&job))
	}
}

// A suspended automation makes no job until it is resumed.
func TestSuspend(t *testing.T) {
	f := newFixture(t, testgit.Options{})
	f.policy("app", nil, "1.0.0")
	suspended := f.automation("suspended", func(a *imagev1.ImageUpdateAutomation) { a.Spec.Suspend = true })
	f.automation("active", nil)
	js := waitJobs(t, f.ns, 1)
	if metav1.GetControllerOf(&js[0]).Name != "active" {
		t.Fatalf("job %s is not the active automation's", js[0].Name)
	}
	// Both select policy app: automations that share a policy take turns
	// (createJob), so the active one's job ends first.
	finish(t, &js[0], updatev1.UpdateJobNoChange, func(j *updatev1.UpdateJob) { j.Status.CheckoutRevision = f.head() })
	patch := client.RawPatch("application/merge-patch+json", []byte(`{"spec":{"suspend":false}}`))
	if err := env.Client.Patch(context.Background(), suspended, patch); err != nil {
		t.Fatal(err)
	}
	js = waitJobs(t, f.ns, 2)
	if metav1.GetControllerOf(&js[1]).Name != "suspended" {
		t.Errorf("job %s is not the resumed automation's", js[1].Name)
	}
}

// latestRefTimes lists the policies of the job's setters that carry a
// latestRefTime.
func latestRefTimes(job updatev1.UpdateJob) []string {
	var out []string
	for _, s := range job.Spec.Update.Setters {
		if s.LatestRefTime != nil {
			out = append(out, s.Policy)
		}
	}
	return out
}

// withoutTimes drops latestRefTime, to compare setters by value.
func withoutTimes(setters []updatev1.PolicySetter) []updatev1.PolicySetter {
	out := slices.Clone(setters)
	for i := range out {
		out[i].LatestRefTime = nil
	}
	return out
}
