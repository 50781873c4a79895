package controller

import (
	"bytes"
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/apis/meta"
	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
	"toolkit.dev/image-toolkit/pkg/gitsource"
	"toolkit.dev/image-toolkit/pkg/receiver"
	"toolkit.dev/image-toolkit/pkg/runtime/conditions"
	"toolkit.dev/image-toolkit/pkg/testing/testenv"
	"toolkit.dev/image-toolkit/pkg/testing/testgit"
)

// gitWebhook creates a Secret with token and a GitWebhook of type typ
// selecting automations labelled hook=yes, and waits for its path.
func gitWebhook(t *testing.T, ns, typ, token string) *imagev1.GitWebhook {
	t.Helper()
	create(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "hook-token"},
		Data: map[string][]byte{receiver.TokenKey: []byte(token)}})
	w := &imagev1.GitWebhook{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "push"},
		Spec: imagev1.GitWebhookSpec{Type: typ, SecretRef: meta.LocalObjectReference{Name: "hook-token"},
			AutomationSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"hook": "yes"}}}}
	create(t, w)
	testenv.Eventually(t, waitFor, func() (bool, error) {
		err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(w), w)
		return err == nil && w.Status.WebhookPath != "" && conditions.IsReady(w), err
	})
	return w
}

// post sends a call to the suite's receiver and returns the status.
func post(t *testing.T, path, body string, header map[string]string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, hooksURL+path, bytes.NewBufferString(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// annotated reports whether the automation carries a reconcile request.
func annotated(t *testing.T, a *imagev1.ImageUpdateAutomation) bool {
	t.Helper()
	got := &imagev1.ImageUpdateAutomation{}
	if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(a), got); err != nil {
		t.Fatal(err)
	}
	_, ok := got.Annotations[meta.ReconcileRequestAnnotation]
	return ok
}

// A push to an automation's checkout branch runs it at once, not at its
// next interval (an hour): a commit someone else pushed makes a job
// within seconds. The push reaches exactly the automations of the
// webhook's namespace and selector whose repository (however its URL is
// spelled, inline or through a Flux GitRepository) and branch it names;
// a push to another branch or repository, a wrong token and a push
// naming the automation's own last commit make no job.
func TestGitPushRunsAutomation(t *testing.T) {
	f := newFixture(t, testgit.Options{})
	const token = "push-t0ken"
	w := gitWebhook(t, f.ns, imagev1.GitWebhookGeneric, token)
	auth := map[string]string{"Authorization": "Bearer " + token}
	hook := map[string]string{"hook": "yes"}
	// hooked follows app, the others their own policy: automations that
	// share a policy take turns (createJob), and this test wants each to
	// make its job when asked.
	f.policy("app", map[string]string{"app": "yes"}, "1.0.0")
	f.policy("other", map[string]string{"other": "yes"}, "1.0.0")
	others := func(a *imagev1.ImageUpdateAutomation) {
		a.Labels = hook
		a.Spec.PolicySelector = &metav1.LabelSelector{MatchLabels: map[string]string{"other": "yes"}}
	}

	a := f.automation("hooked", func(a *imagev1.ImageUpdateAutomation) {
		a.Labels = hook
		a.Spec.PolicySelector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "yes"}}
	})
	// The same repository spelled otherwise, through a GitRepository.
	url := strings.TrimSuffix(f.git.RepoURL("fleet"), ".git") + "/"
	create(t, gitRepository(f.ns, "fleet", map[string]any{"url": url, "interval": "1h", "ref": map[string]any{"branch": "main"}}))
	viaSource := f.automation("via-source", func(a *imagev1.ImageUpdateAutomation) {
		others(a)
		a.Spec.SourceRef = &imagev1.CrossNamespaceSourceReference{Kind: "GitRepository", Name: "fleet"}
		a.Spec.GitSpec.Repository, a.Spec.GitSpec.Checkout = nil, nil
	})
	// An Argo CD Application tracking HEAD: the default branch, which a
	// push does not name.
	f.application("web", "apps", "Kustomize", nil)
	app := &unstructured.Unstructured{}
	app.SetGroupVersionKind(gitsource.ApplicationGVK)
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: f.ns, Name: "web"}, app); err != nil {
		t.Fatal(err)
	}
	if err := unstructured.SetNestedField(app.Object, "HEAD", "spec", "source", "targetRevision"); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Update(context.Background(), app); err != nil {
		t.Fatal(err)
	}
	viaApplication := f.automation("via-application", func(a *imagev1.ImageUpdateAutomation) {
		others(a)
		a.Spec.SourceRef = &imagev1.CrossNamespaceSourceReference{Kind: "Application", Name: "web"}
		a.Spec.GitSpec.Repository, a.Spec.GitSpec.Checkout = nil, nil
	})
	otherBranch := f.automation("other-branch", func(a *imagev1.ImageUpdateAutomation) {
		others(a)
		a.Spec.GitSpec.Checkout.Reference.Branch = "release"
	})
	unselected := f.automation("unselected", func(a *imagev1.ImageUpdateAutomation) {
		a.Spec.PolicySelector = &metav1.LabelSelector{MatchLabels: map[string]string{"other": "yes"}}
	})

	// The first run; its job finds nothing.
	first := waitJobsOf(t, a, 1)[0]
	finish(t, &first, updatev1.UpdateJobNoChange, func(j *updatev1.UpdateJob) { j.Status.CheckoutRevision = f.head() })
	waitAutomation(t, a, "first run recorded", func(a *imagev1.ImageUpdateAutomation) bool { return a.Status.ObservedSourceRevision == f.head() })
	requests := testutil.ToFloat64(hookMetrics.Requested.WithLabelValues("generic"))

	// Its own head, pushed again: the run finds it as it was, no job.
	body := `{"repository":"` + f.git.RepoURL("fleet") + `","branch":"main"}`
	if got := post(t, w.Status.WebhookPath, body, auth); got != http.StatusAccepted {
		t.Fatalf("push: %d, want 202", got)
	}
	waitAutomation(t, a, "the request handled", func(a *imagev1.ImageUpdateAutomation) bool { return a.Status.LastHandledReconcileAt != "" })
	if n := len(jobsOf(t, a)); n != 1 {
		t.Fatalf("%d jobs after a push of the head already seen, want 1", n)
	}
	if !annotated(t, viaSource) || !annotated(t, viaApplication) || annotated(t, otherBranch) || annotated(t, unselected) {
		t.Errorf("requests on via-source %v, via-application %v (want true), other-branch %v, unselected %v (want false)",
			annotated(t, viaSource), annotated(t, viaApplication), annotated(t, otherBranch), annotated(t, unselected))
	}

	// Refused and unrelated calls change nothing.
	handled := waitAutomation(t, a, "", func(*imagev1.ImageUpdateAutomation) bool { return true }).Status.LastHandledReconcileAt
	if got := post(t, w.Status.WebhookPath, body, map[string]string{"Authorization": "Bearer guess"}); got != http.StatusForbidden {
		t.Errorf("wrong token: %d, want 403", got)
	}
	for _, other := range []string{
		`{"repository":"` + f.git.RepoURL("fleet") + `","branch":"feature"}`,
		`{"repository":"` + f.git.RepoURL("other") + `","branch":"main"}`,
	} {
		if got := post(t, w.Status.WebhookPath, other, auth); got != http.StatusAccepted {
			t.Errorf("%s: %d, want 202", other, got)
		}
	}

	// Someone pushes to main: the automation runs now.
	f.commit("edited by hand")
	if got := post(t, w.Status.WebhookPath, body, auth); got != http.StatusAccepted {
		t.Fatalf("push: %d, want 202", got)
	}
	// The job is created before the run's status (with the handled
	// request) is written: wait for both.
	waitJobsOf(t, a, 2)
	waitAutomation(t, a, "the push after the commit handled", func(a *imagev1.ImageUpdateAutomation) bool {
		return a.Status.LastHandledReconcileAt != handled
	})
	// Two pushes of main, each to three automations, and the push of
	// feature to the one tracking HEAD (the receiver does not look up the
	// default branch); the other calls matched none.
	if n := testutil.ToFloat64(hookMetrics.Requested.WithLabelValues("generic")) - requests; n != 7 {
		t.Errorf("run requests %v, want 7", n)
	}
	// The webhook's status counts its calls: four accepted (two of them
	// about nothing the automations follow), the wrong token refused.
	testenv.Eventually(t, waitFor, func() (bool, error) {
		err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(w), w)
		c := w.Status.Calls
		return err == nil && c != nil && c.Accepted == 4 && c.Refused == 1, err
	})
	if c := w.Status.Calls; c.LastAccepted == nil || c.LastRefused == nil || c.LastRefusedReason != receiver.ReasonBadAuth {
		t.Errorf("status.calls = %+v, want last times and the refusal's reason %q", c, receiver.ReasonBadAuth)
	}
}

// jobsOf lists the automation's UpdateJobs.
func jobsOf(t *testing.T, a *imagev1.ImageUpdateAutomation) []updatev1.UpdateJob {
	t.Helper()
	var out []updatev1.UpdateJob
	for _, j := range jobs(t, a.Namespace) {
		if j.Labels[AutomationLabel] == a.Name {
			out = append(out, j)
		}
	}
	return out
}

// waitJobsOf waits until the automation has n UpdateJobs.
func waitJobsOf(t *testing.T, a *imagev1.ImageUpdateAutomation, n int) []updatev1.UpdateJob {
	t.Helper()
	var js []updatev1.UpdateJob
	testenv.Eventually(t, waitFor, func() (bool, error) {
		js = jobsOf(t, a)
		return len(js) == n, nil
	})
	return js
}
