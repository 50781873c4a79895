package events

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	eventv1 "github.com/fluxcd/pkg/apis/event/v1"
	eventv1beta1 "github.com/fluxcd/pkg/apis/event/v1beta1"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
)

// received is one request as notification-controller would read it: the
// body decoded with Flux's own Event types, v1beta1 (what
// notification-controller decodes) and v1 (which adds action).
type received struct {
	event       eventv1beta1.Event
	action      string
	body        string
	contentType string
}

// receiver is an httptest server that decodes every request it gets and
// answers with handle's status (202 when handle is nil).
func receiver(t *testing.T, handle func(r *http.Request) int) (*httptest.Server, <-chan received) {
	t.Helper()
	got := make(chan received, 100)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		var rc received
		var v1 eventv1.Event
		if err := json.Unmarshal(body, &rc.event); err != nil || json.Unmarshal(body, &v1) != nil {
			t.Errorf("body is not a Flux event: %v\n%s", err, body)
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		rc.action, rc.body, rc.contentType = v1.Action, string(body), r.Header.Get("Content-Type")
		status := http.StatusAccepted
		if handle != nil {
			status = handle(r)
		}
		if status < 300 || status == http.StatusTooManyRequests {
			got <- rc
		}
		w.WriteHeader(status)
	}))
	t.Cleanup(srv.Close)
	return srv, got
}

func testScheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	s := runtime.NewScheme()
	if err := imagev1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	return s
}

// forwarder returns a started Forwarder with short pauses, stopped when the
// test ends.
func forwarder(t *testing.T, addr string, o ForwarderOptions) *Forwarder {
	t.Helper()
	f := newForwarder(t, addr, o)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = f.Start(ctx)
	}()
	t.Cleanup(func() { cancel(); <-done })
	return f
}

func newForwarder(t *testing.T, addr string, o ForwarderOptions) *Forwarder {
	t.Helper()
	o.Address, o.Controller, o.Scheme, o.Subsystem = addr, "test-controller", testScheme(t), "test"
	o.Backoff = or(o.Backoff, time.Millisecond)
	o.Timeout = or(o.Timeout, 2*time.Second)
	f, err := NewForwarder(o)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// policy is an ImagePolicy in team-a, whose events the API server refuses
// (no such namespace) unless a test made it with teamA.
func policy() *imagev1.ImagePolicy {
	return policyIn("team-a")
}

// teamA makes the namespace team-a, for the Kubernetes events of policy(),
// and empties it when the test ends.
func teamA(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a"}}
	if err := env.Client.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.DeleteAllOf(ctx, &eventsv1.Event{}, client.InNamespace("team-a")) })
	return "team-a"
}

func count(f *Forwarder, outcome string) int {
	return int(testutil.ToFloat64(f.outcomes.WithLabelValues(outcome)))
}

// eventually waits up to 10 s for cond.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// An event arrives as notification-controller reads it, decoded with Flux's
// own types: the object with its API version, severity from the event
// type, reason, action, the redacted message, metadata under the object's
// API group, the reporting controller; and Kubernetes still gets it.
func TestForwardedEventIsFluxEvent(t *testing.T) {
	tests := []struct {
		name     string
		record   func(r *Recorder, ctx context.Context, msg string)
		severity string
		k8s      string
	}{
		{"normal is info", func(r *Recorder, ctx context.Context, msg string) {
			r.Normal(ctx, policy(), "NewImage", "Select", msg, "hunter22")
		}, "info", "Normal NewImage"},
		{"warning is error", func(r *Recorder, ctx context.Context, msg string) {
			r.Warning(ctx, policy(), "AuthenticationFailed", "Select", msg, "hunter22")
		}, "error", "Warning AuthenticationFailed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv, got := receiver(t, nil)
			f := forwarder(t, srv.URL+"/", ForwarderOptions{})
			ns := teamA(t)
			r := New(newWriter(t, nil)).ForwardTo(f).WithMetadata(map[string]string{
				MetaRevision:                    "main@sha1:0123456789abcdef0123456789abcdef01234567",
				MetaPullRequest:                 "https://bot:tok3n@git.example.com/fleet/pulls/3",
				"event.toolkit.fluxcd.io/extra": "qualified keys are kept",
				MetaChanges:                     "",
			})
			before := time.Now().Add(-time.Second)
			tt.record(r, context.Background(), "token hunter22 used for https://u:pa55@r.example.com at 100%")

			var k8s []string
			for _, e := range eventsIn(t, ns) {
				k8s = append(k8s, e.Type+" "+e.Reason+" "+e.Note)
			}
			if len(k8s) != 1 || !strings.HasPrefix(k8s[0], tt.k8s+" token *** used") {
				t.Errorf("Kubernetes events %q", k8s)
			}
			var rc received
			select {
			case rc = <-got:
			case <-time.After(10 * time.Second):
				t.Fatal("no event arrived")
			}
			e := rc.event
			if rc.contentType != "application/json" {
				t.Errorf("Content-Type %q", rc.contentType)
			}
			obj := e.InvolvedObject
			if obj.APIVersion != "image.toolkit.dev/v1beta1" || obj.Kind != "ImagePolicy" || obj.Namespace != "team-a" ||
				obj.Name != "app" || obj.UID != "uid-1" {
				t.Errorf("involvedObject = %+v", obj)
			}
			if e.Severity != tt.severity || e.Reason != strings.Fields(tt.k8s)[1] || rc.action != "Select" {
				t.Errorf("severity %q reason %q action %q", e.Severity, e.Reason, rc.action)
			}
			if want := "token *** used for https://u:***@r.example.com at 100%"; e.Message != want {
				t.Errorf("message %q, want %q", e.Message, want)
			}
			if e.ReportingController != "test-controller" || e.ReportingInstance == "" {
				t.Errorf("reporting %q %q", e.ReportingController, e.ReportingInstance)
			}
			if e.Timestamp.Time.Before(before) || e.Timestamp.Time.After(time.Now().Add(time.Second)) {
				t.Errorf("timestamp %v", e.Timestamp)
			}
			want := map[string]string{
				"image.toolkit.dev/" + eventv1beta1.MetaRevisionKey: "main@sha1:0123456789abcdef0123456789abcdef01234567",
				"image.toolkit.dev/pullRequest":                     "https://bot:***@git.example.com/fleet/pulls/3",
				"event.toolkit.fluxcd.io/extra":                     "qualified keys are kept",
			}
			if fmt.Sprint(e.Metadata) != fmt.Sprint(want) {
				t.Errorf("metadata %v, want %v", e.Metadata, want)
			}
			for _, secret := range []string{"hunter22", "pa55", "tok3n"} {
				if strings.Contains(rc.body, secret) {
					t.Errorf("the body carries the secret %q: %s", secret, rc.body)
				}
			}
			eventually(t, "sent counted", func() bool { return count(f, OutcomeSent) == 1 })
		})
	}
}

// Each answer of the endpoint leads to the outcome it should: success at
// once, retries with backoff after no answer or a 5xx until success or the
// last attempt, no retry for a refusal, and notification-controller's 429
// for a duplicate taken as delivered.
func TestForwarderRetries(t *testing.T) {
	tests := []struct {
		name     string
		statuses []int // answers in turn, the last repeated; none: the endpoint is down
		requests int
		retries  int
		outcome  string
	}{
		{"accepted", []int{202}, 1, 0, OutcomeSent},
		{"5xx then accepted", []int{503, 500, 200}, 3, 2, OutcomeSent},
		{"request timeout then accepted", []int{408, 202}, 2, 1, OutcomeSent},
		{"duplicate", []int{429}, 1, 0, OutcomeSent},
		{"refused", []int{400}, 1, 0, OutcomeFailed},
		{"5xx every time", []int{503}, 3, 2, OutcomeFailed},
		{"endpoint down", nil, 0, 2, OutcomeFailed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var requests atomic.Int32
			srv, _ := receiver(t, func(*http.Request) int {
				n := int(requests.Add(1))
				return tt.statuses[min(n, len(tt.statuses))-1]
			})
			addr := srv.URL
			if tt.statuses == nil {
				srv.Close() // connection refused
			}
			f := forwarder(t, addr, ForwarderOptions{Attempts: 3})
			New(newWriter(t, nil)).ForwardTo(f).Normal(context.Background(), policy(), "NewImage", "Select", "m")

			eventually(t, tt.outcome, func() bool { return count(f, tt.outcome) == 1 })
			if n := int(requests.Load()); n != tt.requests {
				t.Errorf("%d requests, want %d", n, tt.requests)
			}
			if n := int(testutil.ToFloat64(f.retries)); n != tt.retries {
				t.Errorf("%d retries, want %d", n, tt.retries)
			}
			if s, fl, d := count(f, OutcomeSent), count(f, OutcomeFailed), count(f, OutcomeDropped); s+fl+d != 1 {
				t.Errorf("outcomes sent %d failed %d dropped %d, want one in all", s, fl, d)
			}
		})
	}
}

// Recording never waits for the endpoint: while it hangs on one event, the
// queue fills, and the events beyond it are dropped and counted, each call
// returning at once. When the endpoint answers again, what was queued is
// sent.
func TestRecorderNeverBlocks(t *testing.T) {
	release := make(chan struct{})
	var entered sync.Once
	hanging := make(chan struct{})
	srv, _ := receiver(t, func(r *http.Request) int {
		entered.Do(func() { close(hanging) })
		select {
		case <-release:
		case <-r.Context().Done():
		}
		return http.StatusAccepted
	})
	const queue, more = 3, 50
	f := forwarder(t, srv.URL, ForwarderOptions{QueueSize: queue, Timeout: time.Minute})
	r := New(newWriter(t, nil)).ForwardTo(f)
	ctx := context.Background()

	r.Normal(ctx, policy(), "NewImage", "Select", "first")
	<-hanging
	start := time.Now()
	for i := range more {
		r.Warning(ctx, policy(), "ScanFailed", "Scan", fmt.Sprintf("event %d", i))
	}
	// Each record still writes its Kubernetes event; a record waiting
	// for the endpoint would take its minute's timeout.
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("%d events took %s to record while the endpoint hangs", more, d)
	}
	if n := count(f, OutcomeDropped); n != more-queue {
		t.Errorf("%d dropped, want %d (queue of %d, one in flight)", n, more-queue, queue)
	}
	if got := testutil.ToFloat64(f.length); got != queue {
		t.Errorf("queue length %v, want %d", got, queue)
	}
	close(release)
	eventually(t, "the queued events sent", func() bool { return count(f, OutcomeSent) == queue+1 })
	if n := count(f, OutcomeFailed); n != 0 {
		t.Errorf("%d failed", n)
	}
}

// While the endpoint is down, each event is tried Attempts times and then
// given up, and events beyond the queue are dropped: every event is counted
// once, as failed or dropped, and none waits for ever.
func TestForwarderEndpointDown(t *testing.T) {
	srv, _ := receiver(t, nil)
	srv.Close()
	const queue, total, attempts = 2, 10, 3
	// A pause long enough that the first event is still being retried
	// when the others are recorded.
	f := forwarder(t, srv.URL, ForwarderOptions{QueueSize: queue, Attempts: attempts, Backoff: 100 * time.Millisecond})
	r := New(newWriter(t, nil)).ForwardTo(f)
	r.Normal(context.Background(), policy(), "NewImage", "Select", "first")
	eventually(t, "the first retry", func() bool { return testutil.ToFloat64(f.retries) >= 1 })
	for i := 1; i < total; i++ {
		r.Normal(context.Background(), policy(), "NewImage", "Select", fmt.Sprint(i))
	}
	eventually(t, "every event counted", func() bool {
		return count(f, OutcomeFailed)+count(f, OutcomeDropped) == total
	})
	if fl, d := count(f, OutcomeFailed), count(f, OutcomeDropped); fl != queue+1 || d != total-queue-1 {
		t.Errorf("failed %d dropped %d, want %d and %d", fl, d, queue+1, total-queue-1)
	}
	if n := int(testutil.ToFloat64(f.retries)); n != (queue+1)*(attempts-1) {
		t.Errorf("%d retries, want %d", n, (queue+1)*(attempts-1))
	}
}

// At shutdown the events still queued are tried once, and events recorded
// after it are dropped and counted, not left waiting.
func TestForwarderFlushesAtShutdown(t *testing.T) {
	srv, got := receiver(t, nil)
	f := newForwarder(t, srv.URL, ForwarderOptions{})
	r := New(newWriter(t, nil)).ForwardTo(f)
	for i := range 3 {
		r.Normal(context.Background(), policy(), "NewImage", "Select", fmt.Sprint(i))
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := f.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if n := count(f, OutcomeSent); n != 3 || len(got) != 3 {
		t.Errorf("%d sent, %d received, want 3", n, len(got))
	}
	r.Normal(context.Background(), policy(), "NewImage", "Select", "late")
	if n := count(f, OutcomeDropped); n != 1 {
		t.Errorf("%d dropped after shutdown, want 1", n)
	}
}

// Only http and https URLs with a host are endpoints, and an address's
// credentials stay out of the error.
func TestValidateAddress(t *testing.T) {
	tests := []struct {
		addr string
		ok   bool
	}{
		{"http://notification-controller.flux-system.svc.cluster.local./", true},
		{"https://events.example.com:8443/hook", true},
		{"notification-controller:80", false},
		{"ftp://example.com/", false},
		{"http://", false},
		{"http://bot:s3cret@%zz", false},
	}
	for _, tt := range tests {
		t.Run(tt.addr, func(t *testing.T) {
			err := ValidateAddress(tt.addr)
			if (err == nil) != tt.ok {
				t.Fatalf("ValidateAddress(%q) = %v", tt.addr, err)
			}
			if err != nil && strings.Contains(err.Error(), "s3cret") {
				t.Errorf("error shows the password: %v", err)
			}
		})
	}
}
