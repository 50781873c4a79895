package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	eventv1 "github.com/fluxcd/pkg/apis/event/v1beta1"

	"toolkit.dev/image-toolkit/pkg/testing/testenv"
	"toolkit.dev/image-toolkit/tests/internal/chain"
)

// fluxReceiver stands in for notification-controller's event endpoint: it
// decodes each request with Flux's own Event type, and refuses what does
// not decode, as notification-controller does.
type fluxReceiver struct {
	mu     sync.Mutex
	events []eventv1.Event
	bodies []string
}

func (r *fluxReceiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(req.Body)
	var e eventv1.Event
	if err == nil {
		err = json.Unmarshal(body, &e)
	}
	if err != nil || req.Method != http.MethodPost {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	r.events = append(r.events, e)
	r.bodies = append(r.bodies, string(body))
	r.mu.Unlock()
	w.WriteHeader(http.StatusAccepted)
}

// find returns the first event from controller about kind with reason,
// its metadata as notification-controller passes it on to providers: only
// the keys under the involved object's API group, without the prefix.
func (r *fluxReceiver) find(controller, kind, reason string) (eventv1.Event, map[string]string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range r.events {
		if e.ReportingController != controller || e.InvolvedObject.Kind != kind || e.Reason != reason {
			continue
		}
		prefix := e.InvolvedObject.GroupVersionKind().Group + "/"
		md := map[string]string{}
		for k, v := range e.Metadata {
			if key, ok := strings.CutPrefix(k, prefix); ok {
				md[key] = v
			}
		}
		return e, md, true
	}
	return eventv1.Event{}, nil, false
}

func (r *fluxReceiver) dump() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.bodies, "\n")
}

// The three controller processes, run with --events-addr, send their
// events to an endpoint that reads them with Flux's Event type: the
// reflector's new image, and the automation's and the job's push with the
// commit it pushed, its revision and the values it replaced, in the
// metadata notification-controller hands its providers. No credential
// travels with them, and each controller counts them sent.
func TestEventsForwarded(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	recv := &fluxReceiver{}
	srv := httptest.NewServer(recv)
	defer srv.Close()

	env, root := startChain(ctx, t, []string{"6.3.0", "6.4.0"}, chain.Options{ControllerArgs: []string{"--events-addr=" + srv.URL + "/"}})
	samples, err := env.Samples(root)
	if err != nil {
		t.Fatal(err)
	}
	start := env.Head("main")
	if err := env.Apply(ctx, samples); err != nil {
		t.Fatal(err)
	}
	pushed := waitHead(t, env, "main", start)
	image := env.RegistryHost + "/" + chain.Image

	type want struct {
		controller, kind, reason, name string
		metadata                       map[string]string
	}
	pushMeta := map[string]string{
		"commit":   pushed,
		"revision": "main@sha1:" + pushed,
		"changes":  image + ":6.3.0 → " + image + ":6.4.0",
	}
	for _, w := range []want{
		{"image-reflector-controller", "ImagePolicy", "NewImage", "podinfo", map[string]string{"latestImage": image + ":6.4.0"}},
		{"update-job-controller", "UpdateJob", "Succeeded", "", pushMeta},
		{"image-automation-controller", "ImageUpdateAutomation", "Pushed", "fleet", pushMeta},
	} {
		t.Run(w.controller, func(t *testing.T) {
			var e eventv1.Event
			var md map[string]string
			testenv.Eventually(t, 60*time.Second, func() (bool, error) {
				var ok bool
				e, md, ok = recv.find(w.controller, w.kind, w.reason)
				return ok, nil
			})
			obj := e.InvolvedObject
			if obj.Namespace != "default" || (w.name != "" && obj.Name != w.name) || obj.UID == "" ||
				!strings.HasSuffix(obj.APIVersion, ".toolkit.dev/v1beta1") {
				t.Errorf("involvedObject %+v", obj)
			}
			if e.Severity != eventv1.EventSeverityInfo || e.Message == "" || e.Timestamp.IsZero() || e.ReportingInstance == "" {
				t.Errorf("event %+v", e)
			}
			for k, v := range w.metadata {
				// The latest image may carry its digest.
				if got := md[k]; got != v && !strings.HasPrefix(got, v+"@") {
					t.Errorf("metadata %s = %q, want %q (all: %v)", k, got, v, md)
				}
			}
		})
	}

	// The git password (in the job's Secret) is in no event.
	if strings.Contains(recv.dump(), "demo-password-not-secret") {
		t.Errorf("an event carries the git password:\n%s", recv.dump())
	}
	for name, p := range env.Procs {
		prefix := map[string]string{"image-reflector-controller": "reflector", "image-automation-controller": "automation",
			"update-job-controller": "updatejob"}[name]
		body, err := p.Metrics(ctx)
		if err != nil {
			t.Fatal(err)
		}
		metric := fmt.Sprintf("imagetoolkit_%s_forwarded_events_total", prefix)
		if sent := metricSum(body, metric+`{outcome="sent"}`); sent < 1 {
			t.Errorf("%s: %s{outcome=\"sent\"} = %v", name, metric, sent)
		}
		for _, outcome := range []string{"failed", "dropped"} {
			if n := metricSum(body, metric+`{outcome="`+outcome+`"}`); n != 0 {
				t.Errorf("%s: %v events %s", name, n, outcome)
			}
		}
	}
	if t.Failed() {
		t.Logf("events received:\n%s", recv.dump())
	}
}
