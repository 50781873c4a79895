package webhook

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/apis/meta"
	"toolkit.dev/image-toolkit/pkg/receiver"
)

type fixture struct {
	c       client.Client
	srv     *Server
	url     string
	token   []byte
	metrics *Metrics
}

// repositoryPathField is the fake client's index of ImageRepositories by
// indexRepositoryPath.
const repositoryPathField = ".spec.image.path"

// start runs a receiver over a fake API with one webhook of type typ in
// namespace "team" (selector: app=yes) and these ImageRepositories:
// team/app (127.0.0.1:5000/team/app, selected), team/nginx (nginx,
// selected), team/unselected (127.0.0.1:5000/team/app, not selected),
// other/app (127.0.0.1:5000/team/app, another namespace).
func start(t *testing.T, typ string, o Options) *fixture {
	t.Helper()
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = imagev1.AddToScheme(scheme)
	token := []byte("s3cret")
	wh := &imagev1.ImageWebhook{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "registry"},
		Spec: imagev1.ImageWebhookSpec{Type: typ, SecretRef: meta.LocalObjectReference{Name: "hook"},
			ImageRepositorySelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "yes"}}}}
	wh.Status.WebhookPath = receiver.Path(token, wh.Name, wh.Namespace)
	repo := func(ns, name, image string, selected bool) *imagev1.ImageRepository {
		r := &imagev1.ImageRepository{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: imagev1.ImageRepositorySpec{Image: image, Interval: metav1.Duration{Duration: time.Hour}}}
		if selected {
			r.Labels = map[string]string{"app": "yes"}
		}
		return r
	}
	c := fake.NewClientBuilder().WithScheme(scheme).
		WithIndex(&imagev1.ImageWebhook{}, PathIndex, indexPath).
		WithIndex(&imagev1.ImageRepository{}, repositoryPathField, indexRepositoryPath).
		WithObjects(wh,
			&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "hook"}, Data: map[string][]byte{receiver.TokenKey: token}},
			repo("team", "app", "127.0.0.1:5000/team/app", true),
			repo("team", "nginx", "nginx", true),
			repo("team", "unselected", "127.0.0.1:5000/team/app", false),
			repo("other", "app", "127.0.0.1:5000/team/app", true)).
		Build()
	m := NewMetrics()
	if o.Window == 0 {
		o.Window = 50 * time.Millisecond
	}
	o.Log = logr.Discard()
	// The index.Index of SetupIndexes follows an informer (tested in its
	// package against an API server); here the fake client's field index
	// answers the same lookups.
	byPath := func(ctx context.Context, path string) ([]types.NamespacedName, error) {
		var list imagev1.ImageRepositoryList
		if err := c.List(ctx, &list, client.MatchingFields{repositoryPathField: path}); err != nil {
			return nil, err
		}
		var keys []types.NamespacedName
		for _, r := range list.Items {
			keys = append(keys, client.ObjectKeyFromObject(&r))
		}
		return keys, nil
	}
	srv := New(c, byPath, c, m, o)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, l) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return &fixture{c: c, srv: srv, url: "http://" + l.Addr().String() + wh.Status.WebhookPath, token: token, metrics: m}
}

func (f *fixture) post(t *testing.T, url string, body string, h map[string]string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range h {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// requested returns the ImageRepositories carrying a reconcile request.
func (f *fixture) requested(t *testing.T) []string {
	t.Helper()
	var list imagev1.ImageRepositoryList
	if err := f.c.List(context.Background(), &list); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, r := range list.Items {
		if _, ok := r.Annotations[meta.ReconcileRequestAnnotation]; ok {
			out = append(out, r.Namespace+"/"+r.Name)
		}
	}
	return out
}

func waitRequested(t *testing.T, f *fixture, want string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		got := strings.Join(f.requested(t), ",")
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("requested scans: got %q, want %q", got, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A burst of authenticated pushes about one repository answers 202 at
// once and requests exactly one scan, of exactly the selected repository
// of the webhook's namespace with that canonical name; the latency to the
// scan's start is observed once the reconciler reports it.
func TestBurstTriggersOneScanOfTheNamedRepository(t *testing.T) {
	f := start(t, imagev1.WebhookDistribution, Options{})
	auth := map[string]string{"Authorization": "Bearer " + string(f.token), "Content-Type": "application/vnd.docker.distribution.events.v1+json"}
	for range 5 {
		if got := f.post(t, f.url, distributionPush, auth); got != http.StatusAccepted {
			t.Fatalf("status %d", got)
		}
	}
	waitRequested(t, f, "team/app")
	time.Sleep(100 * time.Millisecond) // a second request would come after the window
	if got := testutil.ToFloat64(f.metrics.Requested.WithLabelValues("distribution")); got != 1 {
		t.Errorf("scan requests = %v, want 1", got)
	}
	if got := testutil.ToFloat64(f.metrics.Coalesced.WithLabelValues("distribution")); got != 4 {
		t.Errorf("coalesced = %v, want 4", got)
	}
	if got := testutil.ToFloat64(f.metrics.Accepted.WithLabelValues("distribution")); got != 5 {
		t.Errorf("accepted = %v, want 5", got)
	}
	var r imagev1.ImageRepository
	_ = f.c.Get(context.Background(), client.ObjectKey{Namespace: "team", Name: "app"}, &r)
	f.srv.ScanStarted("team", "app", r.Annotations[meta.ReconcileRequestAnnotation])
	if got := testutil.CollectAndCount(f.metrics.StartDelay); got != 1 {
		t.Errorf("latency series = %d", got)
	}
}

// Short names match their canonical form: a generic call about
// docker.io/library/nginx triggers the ImageRepository of "nginx".
func TestCanonicalMatch(t *testing.T) {
	f := start(t, imagev1.WebhookGeneric, Options{})
	body := `{"repositories":["docker.io/library/nginx:1.27"]}`
	if got := f.post(t, f.url, body, map[string]string{"Authorization": "Bearer " + string(f.token)}); got != http.StatusAccepted {
		t.Fatalf("status %d", got)
	}
	waitRequested(t, f, "team/nginx")
}

// A name is looked up by its path and its host then checked: a call about
// the same path on another host triggers nothing, and one about the
// repository's own host triggers it.
func TestNameOnAnotherHostIsNotMatched(t *testing.T) {
	f := start(t, imagev1.WebhookGeneric, Options{})
	auth := map[string]string{"Authorization": "Bearer " + string(f.token)}
	if got := f.post(t, f.url, `{"repositories":["127.0.0.2:5000/team/app:1.0.0"]}`, auth); got != http.StatusAccepted {
		t.Fatalf("status %d", got)
	}
	// Past the 50 ms window with room: a scan would be requested by now.
	time.Sleep(500 * time.Millisecond)
	if got := f.requested(t); len(got) != 0 {
		t.Fatalf("another host's push requested scans of %v", got)
	}
	if got := f.post(t, f.url, `{"repositories":["127.0.0.1:5000/team/app:1.0.0"]}`, auth); got != http.StatusAccepted {
		t.Fatalf("status %d", got)
	}
	waitRequested(t, f, "team/app")
}

// Every refusal has its status and is counted by reason, and nothing is
// scanned: unknown path, wrong method, missing and wrong credentials, a
// bad signature, an oversized body, a malformed payload, the rate limit.
func TestRefusals(t *testing.T) {
	tests := []struct {
		name, typ, path, method, body string
		header                        map[string]string
		status                        int
		reason                        string
	}{
		{"unknown path", imagev1.WebhookGeneric, "/hook/0000", "POST", "{}", nil, 404, receiver.ReasonNotFound},
		{"not a hook", imagev1.WebhookGeneric, "/metrics", "POST", "{}", nil, 404, receiver.ReasonNotFound},
		{"GET", imagev1.WebhookGeneric, "", "GET", "", nil, 405, receiver.ReasonMethod},
		{"no token", imagev1.WebhookGeneric, "", "POST", `{"repositories":["nginx"]}`, nil, 401, receiver.ReasonMissingAuth},
		{"wrong token", imagev1.WebhookGeneric, "", "POST", `{"repositories":["nginx"]}`, map[string]string{"Authorization": "Bearer x"}, 403, receiver.ReasonBadAuth},
		{"bad hmac", imagev1.WebhookGenericHMAC, "", "POST", `{"repositories":["nginx"]}`, map[string]string{"X-Signature": receiver.Sign([]byte("x"), []byte(`{"repositories":["nginx"]}`))}, 403, receiver.ReasonBadSignature},
		{"too large", imagev1.WebhookDockerHub, "", "POST", strings.Repeat(" ", 2<<10), nil, 413, receiver.ReasonTooLarge},
		{"malformed", imagev1.WebhookDockerHub, "", "POST", `{"repository":`, nil, 400, receiver.ReasonBadPayload},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := start(t, tt.typ, Options{MaxBody: 1 << 10})
			url := f.url
			if tt.path != "" {
				url = f.url[:strings.Index(f.url, "/hook/")] + tt.path
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, tt.method, url, bytes.NewBufferString(tt.body))
			for k, v := range tt.header {
				req.Header.Set(k, v)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tt.status {
				t.Errorf("status %d, want %d", resp.StatusCode, tt.status)
			}
			typ := tt.typ
			if tt.reason == receiver.ReasonNotFound {
				typ = "unknown"
			}
			if got := testutil.ToFloat64(f.metrics.Rejected.WithLabelValues(typ, tt.reason)); got != 1 {
				t.Errorf("rejected{%s,%s} = %v", typ, tt.reason, got)
			}
			time.Sleep(80 * time.Millisecond)
			if got := f.requested(t); len(got) != 0 {
				t.Errorf("scans requested: %v", got)
			}
		})
	}
}

// Calls beyond a webhook's burst are refused with 429 and Retry-After.
func TestRateLimit(t *testing.T) {
	f := start(t, imagev1.WebhookQuay, Options{Rate: 0.001, Burst: 2})
	var codes []int
	for range 3 {
		codes = append(codes, f.post(t, f.url, quayPush, nil))
	}
	if codes[0] != 202 || codes[1] != 202 || codes[2] != 429 {
		t.Fatalf("statuses %v, want 202 202 429", codes)
	}
	if got := testutil.ToFloat64(f.metrics.Rejected.WithLabelValues("quay", receiver.ReasonRateLimited)); got != 1 {
		t.Errorf("rate_limited = %v", got)
	}
}

// A rotated token moves the path: the old path is refused at once, even
// before the reconciler rewrites the status.
func TestRotatedToken(t *testing.T) {
	f := start(t, imagev1.WebhookDockerHub, Options{})
	var sec corev1.Secret
	ctx := context.Background()
	if err := f.c.Get(ctx, client.ObjectKey{Namespace: "team", Name: "hook"}, &sec); err != nil {
		t.Fatal(err)
	}
	sec.Data[receiver.TokenKey] = []byte("rotated")
	if err := f.c.Update(ctx, &sec); err != nil {
		t.Fatal(err)
	}
	if got := f.post(t, f.url, dockerHubPush, nil); got != http.StatusForbidden {
		t.Fatalf("status %d, want 403", got)
	}
}

// Senders that do not name the host match by path on any host: a GitLab
// project triggers the selected repositories at or below its path, a
// Nexus component the repository of its name.
func TestPathMatch(t *testing.T) {
	tests := []struct {
		typ, body string
		header    map[string]string
	}{
		{imagev1.WebhookGitLab, `{"object_kind":"tag_push","ref":"refs/tags/v1","project":{"path_with_namespace":"Team"}}`,
			map[string]string{"X-Gitlab-Token": "s3cret"}},
		{imagev1.WebhookNexus, strings.Replace(nexusComponent, "team/app", "Team/App", 1),
			map[string]string{"X-Nexus-Webhook-Id": "rm:repository:component", "X-Nexus-Webhook-Signature": nexusSig([]byte("s3cret"), []byte(strings.Replace(nexusComponent, "team/app", "Team/App", 1)))}},
	}
	for _, tt := range tests {
		t.Run(tt.typ, func(t *testing.T) {
			f := start(t, tt.typ, Options{})
			if got := f.post(t, f.url, tt.body, tt.header); got != http.StatusAccepted {
				t.Fatalf("status %d", got)
			}
			waitRequested(t, f, "team/app")
		})
	}
}

// A suspended webhook authenticates the call, answers 200 and requests
// nothing.
func TestSuspended(t *testing.T) {
	f := start(t, imagev1.WebhookQuay, Options{})
	var wh imagev1.ImageWebhook
	ctx := context.Background()
	if err := f.c.Get(ctx, client.ObjectKey{Namespace: "team", Name: "registry"}, &wh); err != nil {
		t.Fatal(err)
	}
	wh.Spec.Suspend = true
	if err := f.c.Update(ctx, &wh); err != nil {
		t.Fatal(err)
	}
	body := strings.Replace(quayPush, "quay.io/mynamespace/repository", "127.0.0.1:5000/team/app", 1)
	if got := f.post(t, f.url, body, nil); got != http.StatusOK {
		t.Fatalf("status %d, want 200", got)
	}
	time.Sleep(100 * time.Millisecond)
	if got := f.requested(t); len(got) != 0 {
		t.Errorf("scans requested while suspended: %v", got)
	}
	if got := testutil.ToFloat64(f.metrics.Rejected.WithLabelValues("quay", receiver.ReasonSuspended)); got != 1 {
		t.Errorf("suspended = %v", got)
	}
}
