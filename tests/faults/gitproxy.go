// Package faults injects faults between the controllers and the real
// servers they talk to: a git proxy that fires a hook (a kill -9) at a
// chosen moment of a push, and a registry proxy that answers with errors,
// rate limits, cut bodies or fewer tags. The proxies forward to the real
// servers; only the fault is made up.
package faults

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
)

// PushPoint is a moment of a git push over smart HTTP.
type PushPoint string

const (
	// BeforePush: the commit is made in the runner's mirror, and the
	// runner asks the server for its refs to push to (GET
	// info/refs?service=git-receive-pack). Nothing reached the server.
	BeforePush PushPoint = "before-push"
	// DuringPush: the pack is being uploaded (half of the POST
	// git-receive-pack body is read); the server never gets all of it.
	DuringPush PushPoint = "during-push"
	// AfterPush: the server has updated the branch and answered; the
	// runner has not read the answer, so it cannot have recorded it.
	AfterPush PushPoint = "after-push"
)

// PushPoints are the points, in push order.
var PushPoints = []PushPoint{BeforePush, DuringPush, AfterPush}

// GitProxy forwards to a git server, and when armed calls a hook once at a
// point of the next push. Requests that arrive while (or after) the hook
// runs get 503: their client is meant to be gone.
type GitProxy struct {
	URL string

	proxy *httputil.ReverseProxy
	srv   *httptest.Server

	mu      sync.Mutex
	point   PushPoint
	hook    func()
	fired   int
	fault   GitFault
	left    int // requests the fault still applies to; <0 means all
	faulted int
}

// Faulted counts the requests answered with a fault.
func (g *GitProxy) Faulted() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.faulted
}

// GitFault is how the git proxy answers every request while set.
type GitFault string

const (
	// GitDown answers 503, as a server being restarted.
	GitDown GitFault = "down"
	// GitHang accepts the request and never answers.
	GitHang GitFault = "hang"
	// GitReset forwards, sends half of the answer (mid-pack for a fetch)
	// and drops the connection.
	GitReset GitFault = "reset"
)

// SetFault makes the next n requests (all when n < 0) meet fault; "" ends it.
func (g *GitProxy) SetFault(f GitFault, n int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.fault, g.left = f, n
}

// takeFault returns the fault for this request, counting it.
func (g *GitProxy) takeFault() GitFault {
	g.mu.Lock()
	defer g.mu.Unlock()
	f := g.fault
	if f == "" {
		return ""
	}
	g.faulted++
	if g.left > 0 {
		g.left--
	}
	if g.left == 0 {
		g.fault = ""
	}
	return f
}

// NewGitProxy starts a proxy to the server at target (its base URL).
func NewGitProxy(target string) (*GitProxy, error) {
	u, err := url.Parse(target)
	if err != nil {
		return nil, err
	}
	g := &GitProxy{proxy: httputil.NewSingleHostReverseProxy(u)}
	g.srv = httptest.NewServer(http.HandlerFunc(g.serve))
	g.URL = g.srv.URL
	return g, nil
}

// Close stops the proxy.
func (g *GitProxy) Close() { g.srv.Close() }

// Arm makes the next push call hook at point, once.
func (g *GitProxy) Arm(point PushPoint, hook func()) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.point, g.hook = point, hook
}

// Fired counts the hooks that ran.
func (g *GitProxy) Fired() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.fired
}

// take returns the hook if the request is at the armed point, disarming it.
func (g *GitProxy) take(p PushPoint) func() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.point != p || g.hook == nil {
		return nil
	}
	h := g.hook
	g.hook, g.point = nil, ""
	g.fired++
	return h
}

func (g *GitProxy) serve(w http.ResponseWriter, req *http.Request) {
	switch g.takeFault() {
	case GitDown:
		http.Error(w, "fault injected: server down", http.StatusServiceUnavailable)
		return
	case GitHang:
		<-req.Context().Done()
		return
	case GitReset:
		rec := httptest.NewRecorder()
		g.proxy.ServeHTTP(rec, req)
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		_, _ = w.Write(rec.Body.Bytes()[:rec.Body.Len()/2])
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
		panic(http.ErrAbortHandler)
	}
	receive := strings.HasSuffix(req.URL.Path, "/git-receive-pack")
	switch {
	case strings.HasSuffix(req.URL.Path, "/info/refs") && req.URL.Query().Get("service") == "git-receive-pack":
		if h := g.take(BeforePush); h != nil {
			h()
			http.Error(w, "fault injected before the push", http.StatusServiceUnavailable)
			return
		}
	case receive && req.Method == http.MethodPost:
		if h := g.take(DuringPush); h != nil {
			// Read some of the pack so the client is mid-upload, then
			// never forward it.
			_, _ = io.CopyN(io.Discard, req.Body, 64)
			h()
			http.Error(w, "fault injected during the push", http.StatusServiceUnavailable)
			return
		}
		g.mu.Lock()
		after := g.point == AfterPush && g.hook != nil
		g.mu.Unlock()
		if after {
			// Let the server take the push completely, then fire before
			// the answer leaves.
			rec := httptest.NewRecorder()
			g.proxy.ServeHTTP(rec, req)
			if h := g.take(AfterPush); h != nil {
				h()
			}
			for k, v := range rec.Header() {
				w.Header()[k] = v
			}
			w.WriteHeader(rec.Code)
			_, _ = io.Copy(w, bytes.NewReader(rec.Body.Bytes()))
			return
		}
	}
	g.proxy.ServeHTTP(w, req)
}
