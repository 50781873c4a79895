package faults

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
)

// RegistryFault is how the registry proxy answers tag listings
// (GET /v2/<name>/tags/list); everything else is forwarded untouched.
type RegistryFault string

const (
	// NoFault forwards.
	NoFault RegistryFault = ""
	// Error500 answers 500 Internal Server Error.
	Error500 RegistryFault = "500"
	// RateLimited answers 429 with Retry-After: 1.
	RateLimited RegistryFault = "429"
	// Truncated sends the real listing's headers and half its body, then
	// closes the connection.
	Truncated RegistryFault = "truncated"
	// Empty answers 200 with an empty tag list, as a registry whose
	// index is being rebuilt may.
	Empty RegistryFault = "empty"
	// Hide answers 200 with the real list minus the hidden tags, as a
	// registry that garbage-collected or only partly replicated them.
	Hide RegistryFault = "hide"
)

// RegistryProxy forwards to a registry and answers tag listings with the
// fault set.
type RegistryProxy struct {
	Host string // host:port, plain HTTP

	proxy    *httputil.ReverseProxy
	srv      *httptest.Server
	mu       sync.Mutex
	fault    RegistryFault
	hidden   []string
	left     int          // listings the fault still applies to; <0 means all
	Listings atomic.Int64 // tag listings answered
	Faulted  atomic.Int64 // of them, with a fault
}

// NewRegistryProxy starts a proxy to the registry at host (plain HTTP).
func NewRegistryProxy(host string) *RegistryProxy {
	u := &url.URL{Scheme: "http", Host: host}
	p := &RegistryProxy{proxy: httputil.NewSingleHostReverseProxy(u)}
	p.srv = httptest.NewServer(http.HandlerFunc(p.serve))
	p.Host = strings.TrimPrefix(p.srv.URL, "http://")
	return p
}

// Close stops the proxy.
func (p *RegistryProxy) Close() { p.srv.Close() }

// Set makes the next n tag listings (every one when n < 0) answer with
// fault; hidden are the tags Hide leaves out.
func (p *RegistryProxy) Set(fault RegistryFault, n int, hidden ...string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.fault, p.left, p.hidden = fault, n, hidden
}

func (p *RegistryProxy) serve(w http.ResponseWriter, req *http.Request) {
	if !strings.HasSuffix(req.URL.Path, "/tags/list") {
		p.proxy.ServeHTTP(w, req)
		return
	}
	p.Listings.Add(1)
	p.mu.Lock()
	fault, hidden := p.fault, slices.Clone(p.hidden)
	if p.left > 0 {
		p.left--
	}
	if p.left == 0 {
		p.fault = NoFault
	}
	p.mu.Unlock()
	if fault != NoFault {
		p.Faulted.Add(1)
	}
	switch fault {
	case NoFault:
		p.proxy.ServeHTTP(w, req)
	case Error500:
		http.Error(w, `{"errors":[{"code":"UNKNOWN","message":"fault injected"}]}`, http.StatusInternalServerError)
	case RateLimited:
		w.Header().Set("Retry-After", "1")
		http.Error(w, `{"errors":[{"code":"TOOMANYREQUESTS","message":"fault injected"}]}`, http.StatusTooManyRequests)
	case Truncated, Empty, Hide:
		rec := httptest.NewRecorder()
		p.proxy.ServeHTTP(rec, req)
		body := rec.Body.Bytes()
		if rec.Code == http.StatusOK && fault != Truncated {
			var list struct {
				Name string   `json:"name"`
				Tags []string `json:"tags"`
			}
			if err := json.Unmarshal(body, &list); err == nil {
				if fault == Empty {
					list.Tags = []string{}
				}
				list.Tags = slices.DeleteFunc(list.Tags, func(t string) bool { return slices.Contains(hidden, t) })
				body, _ = json.Marshal(list)
			}
		}
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.Header().Set("Content-Length", fmt.Sprint(len(body)))
		if fault == Truncated {
			// Promise the whole body, send half, hang up.
			w.WriteHeader(rec.Code)
			_, _ = io.Copy(w, bytes.NewReader(body[:len(body)/2]))
			if f, ok := w.(http.Flusher); ok {
				f.Flush()
			}
			panic(http.ErrAbortHandler)
		}
		w.WriteHeader(rec.Code)
		_, _ = w.Write(body)
	}
}
