package controller

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/apis/meta"
	"toolkit.dev/image-toolkit/pkg/receiver"
	"toolkit.dev/image-toolkit/pkg/runtime/conditions"
	"toolkit.dev/image-toolkit/pkg/testing/testenv"
)

// healthWebhook creates a HealthWebhook of type typ with its token Secret
// and returns its URL once the reconciler has given it its path.
func healthWebhook(t *testing.T, ns, name, typ, token string) string {
	t.Helper()
	create(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-token"},
		Data: map[string][]byte{receiver.TokenKey: []byte(token)}})
	wh := &imagev1.HealthWebhook{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: imagev1.HealthWebhookSpec{Type: typ, SecretRef: meta.LocalObjectReference{Name: name + "-token"}}}
	create(t, wh)
	waitReason(t, wh, conditions.SucceededReason)
	if wh.Status.WebhookPath != receiver.Path([]byte(token), name, ns) {
		t.Fatalf("webhookPath %q", wh.Status.WebhookPath)
	}
	return healthReceiver + wh.Status.WebhookPath
}

// fluxEvent is an event as Flux's notification-controller posts it to a
// generic or generic-hmac Provider (fluxcd/pkg/apis/event/v1beta1 Event,
// its metadata stripped of the kind's group as notification-controller
// does), for kustomize-controller's Kustomization flux-system/apps.
func fluxEvent(severity, reason, revision, message string, at time.Time) []byte {
	return fmt.Appendf(nil, `{"involvedObject":{"kind":"Kustomization","namespace":"flux-system","name":"apps","uid":"0b0e","apiVersion":"kustomize.toolkit.fluxcd.io/v1","resourceVersion":"42"},`+
		`"severity":%q,"timestamp":%q,"message":%q,"reason":%q,"metadata":{"revision":%q,"commit_status":"update"},"reportingController":"kustomize-controller","reportingInstance":"kustomize-controller-6d5c"}`,
		severity, at.UTC().Format(time.RFC3339), message, reason, revision)
}

// post sends body to url with headers and returns the status code.
func post(t *testing.T, url string, body []byte, headers ...string) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("gotk-component", "kustomize-controller")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

func pushedKustomization(hook string) imagev1.HealthObjectReference {
	return imagev1.HealthObjectReference{APIVersion: "kustomize.toolkit.fluxcd.io/v1", Kind: "Kustomization",
		Namespace: "flux-system", Name: "apps", WebhookRef: &meta.LocalObjectReference{Name: hook}}
}

// A promotion reads the health dev's Flux pushes (notification-controller's
// generic-hmac Provider) to a HealthWebhook, for a dev cluster the
// controllers cannot reach: before any event it waits and says so; a
// forged event (a wrong HMAC, no signature) is refused and changes
// nothing; dev's failed health check is a wait on a Degraded object; dev's
// success event at the upstream commit promotes exactly the upstream's
// image; and an older event that arrives late does not undo it.
func TestPromotionReadsHealthPushedByFlux(t *testing.T) {
	ns := namespace(t)
	create(t, appRepository(ns))
	setUpstream := upstreamAutomation(t, ns, "dev")
	v2 := meta.ImageRef{Name: "registry.example/app", Tag: "1.2.0", Digest: "sha256:" + strings.Repeat("2", 64)}
	setUpstream("app-dev", v2, "main@sha1:"+devCommit)
	url := healthWebhook(t, ns, "dev", imagev1.HealthFluxHMAC, "hmac-key")

	prod := promotionPolicy(ns, "prod", "app", imagev1.PromotionSource{Automation: "dev"}, 0, pushedKustomization("dev"))
	create(t, prod)
	t.Cleanup(func() {
		if t.Failed() {
			_ = env.Client.Get(context.Background(), client.ObjectKeyFromObject(prod), prod)
			t.Logf("status: %+v", prod.Status)
		}
	})
	c := waitReason(t, prod, imagev1.UpstreamNotHealthyReason)
	if !strings.Contains(c.Message, "Kustomization/flux-system/apps@dev") || !strings.Contains(c.Message, "received nothing") {
		t.Errorf("before any event the wait does not say none came: %s", c.Message)
	}

	now := time.Now().Truncate(time.Second)
	healthy := fluxEvent("info", "ReconciliationSucceeded", "main@sha1:"+devCommit, "Reconciliation finished in 2s, next run in 10m", now)
	for _, forged := range []struct {
		name    string
		headers []string
		want    int
	}{
		{"no signature", nil, http.StatusUnauthorized},
		{"another key's signature", []string{"X-Signature", receiver.Sign([]byte("not-the-key"), healthy)}, http.StatusForbidden},
		{"a bearer token instead", []string{"Authorization", "Bearer hmac-key"}, http.StatusUnauthorized},
	} {
		if got := post(t, url, healthy, forged.headers...); got != forged.want {
			t.Errorf("%s: answered %d, want %d", forged.name, got, forged.want)
		}
	}
	if got := post(t, healthReceiver+receiver.Path([]byte("guess"), "dev", ns), healthy, "X-Signature", receiver.Sign([]byte("guess"), healthy)); got != http.StatusNotFound {
		t.Errorf("a path of another token: answered %d, want 404", got)
	}
	time.Sleep(time.Second) // what a forged event would have woken
	getPolicy(t, prod)
	if prod.Status.LatestRef != nil {
		t.Fatalf("a forged event promoted %v", prod.Status.LatestRef)
	}

	failed := fluxEvent("error", "HealthCheckFailed", "main@sha1:"+devCommit, "health check failed after 5m: Deployment/apps/app not ready", now)
	if got := post(t, url, failed, "X-Signature", receiver.Sign([]byte("hmac-key"), failed)); got != http.StatusOK {
		t.Fatalf("dev's failure event: answered %d", got)
	}
	testenv.Eventually(t, waitFor, func() (bool, error) {
		getPolicy(t, prod)
		c := conditions.Get(prod, conditions.ReadyCondition)
		return c != nil && strings.Contains(c.Message, "Kustomization/flux-system/apps@dev is Degraded"), nil
	})
	if prod.Status.LatestRef != nil {
		t.Fatalf("promoted %v while dev's health check fails", prod.Status.LatestRef)
	}

	later := fluxEvent("info", "ReconciliationSucceeded", "main@sha1:"+devCommit, "Reconciliation finished in 1s, next run in 10m", now.Add(time.Second))
	if got := post(t, url, later, "X-Signature", receiver.Sign([]byte("hmac-key"), later)); got != http.StatusOK {
		t.Fatalf("dev's success event: answered %d", got)
	}
	waitReason(t, prod, conditions.SucceededReason)
	if got := prod.Status.LatestRef; got == nil || *got != v2 {
		t.Fatalf("latestRef %v, want the upstream's %v", got, v2)
	}
	if st := prod.Status.Promotion; st == nil || len(st.Health) != 1 || st.Health[0].Object != "Kustomization/flux-system/apps@dev" || st.Health[0].State != "Healthy" {
		t.Errorf("status.promotion.health %+v, want dev's pushed Kustomization healthy", st)
	}

	// The failure, re-sent late by a retry, is older than what is recorded.
	if got := post(t, url, failed, "X-Signature", receiver.Sign([]byte("hmac-key"), failed)); got != http.StatusOK {
		t.Fatalf("the late failure event: answered %d", got)
	}
	wh := &imagev1.HealthWebhook{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "dev"}}
	testenv.Eventually(t, waitFor, func() (bool, error) {
		if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(wh), wh); err != nil {
			return false, err
		}
		calls := wh.Status.Calls
		return calls != nil && calls.Accepted >= 3 && calls.Refused >= 3, nil
	})
	p := wh.Pushed("kustomize.toolkit.fluxcd.io", "Kustomization", "flux-system", "apps")
	if p == nil || p.State != "Healthy" || p.Revision != "main@sha1:"+devCommit {
		t.Errorf("recorded %+v after a late older event, want the newer Healthy", p)
	}
	if len(wh.Status.Objects) != 1 {
		t.Errorf("%d objects recorded, want 1", len(wh.Status.Objects))
	}
}

// Argo CD Notifications' webhook (the template of docs/policies.md) is
// read as the Application it is about, with a bearer token; other kinds'
// events are answered and recorded nowhere; a body that is no event is
// refused with a reason.
func TestHealthWebhookReadsArgoCDAndRefusesTheRest(t *testing.T) {
	ns := namespace(t)
	argo := healthWebhook(t, ns, "argo", imagev1.HealthArgoCD, "argo-token")
	flux := healthWebhook(t, ns, "flux", imagev1.HealthFlux, "flux-token")
	app := []byte(`{"metadata":{"name":"guestbook","namespace":"argocd"},"status":{"sync":{"status":"Synced","revision":"` + devCommit + `"},` +
		`"health":{"status":"Healthy"},"operationState":{"phase":"Succeeded","syncResult":{"revision":"` + devCommit + `"}}}}`)
	if got := post(t, argo, app, "Authorization", "Bearer wrong"); got != http.StatusForbidden {
		t.Errorf("a wrong token: answered %d, want 403", got)
	}
	if got := post(t, argo, app, "Authorization", "Bearer argo-token"); got != http.StatusOK {
		t.Fatalf("Argo CD's notification: answered %d", got)
	}
	gitRepo := []byte(`{"involvedObject":{"kind":"GitRepository","namespace":"flux-system","name":"flux-system","apiVersion":"source.toolkit.fluxcd.io/v1"},"severity":"info","timestamp":"2026-12-07T10:00:00Z","message":"stored artifact","reason":"NewArtifact"}`)
	if got := post(t, flux, gitRepo, "Authorization", "Bearer flux-token"); got != http.StatusOK {
		t.Errorf("a GitRepository's event: answered %d, want 200", got)
	}
	if got := post(t, flux, []byte(`{"hello":"world"}`), "Authorization", "Bearer flux-token"); got != http.StatusBadRequest {
		t.Errorf("a body that is no event: answered %d, want 400", got)
	}

	wh := &imagev1.HealthWebhook{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "argo"}}
	testenv.Eventually(t, waitFor, func() (bool, error) {
		if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(wh), wh); err != nil {
			return false, err
		}
		return len(wh.Status.Objects) == 1, nil
	})
	if p := wh.Pushed("argoproj.io", "Application", "argocd", "guestbook"); p == nil || p.State != "Healthy" || p.Revision != devCommit {
		t.Errorf("recorded %+v, want guestbook Healthy at %s", wh.Status.Objects, devCommit)
	}
	fh := &imagev1.HealthWebhook{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "flux"}}
	testenv.Eventually(t, waitFor, func() (bool, error) {
		if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(fh), fh); err != nil {
			return false, err
		}
		calls := fh.Status.Calls
		return calls != nil && calls.Accepted == 1 && calls.Refused == 1 && calls.LastRefusedReason == receiver.ReasonBadPayload, nil
	})
	if len(fh.Status.Objects) != 0 {
		t.Errorf("a GitRepository's event was recorded: %+v", fh.Status.Objects)
	}
}
