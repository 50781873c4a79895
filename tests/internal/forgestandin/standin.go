// Package forgestandin serves stand-ins for the forges that cannot run
// here: Bitbucket Cloud, Bitbucket Data Center and Azure DevOps are
// hosted services or licensed products, with no build a test can start on
// loopback. Each stand-in is a small stateful HTTP server that speaks the
// forge's pull request REST API as the vendor's public documentation
// describes it (request paths, query parameters, JSON bodies, auth
// headers, paging, error shapes): Atlassian's Bitbucket Cloud REST API 2.0
// (developer.atlassian.com/cloud/bitbucket/rest/api-group-pullrequests/),
// Bitbucket Data Center's REST API 1.0 (developer.atlassian.com/server/
// bitbucket/rest/, "Pull requests") and Microsoft's Azure DevOps REST API
// 7.1 (learn.microsoft.com/rest/api/azure/devops/git/pull-requests and
// pull-request-threads).
//
// A stand-in serves the forge's API only: the repository's git side is a
// real git server the test runs, and the stand-in asks it (Config.Branch)
// whether a branch a request names exists, as the forge would look into
// its own repository. What a stand-in does not recognise (a path, a
// parameter, a body field outside the documented subset, a wrong token)
// it refuses with the forge's own error shape and status, and records in
// Refusals, so that a test fails on anything the real forge would not have
// taken. It is stricter than the forges in one way: a body field outside
// the documented request schema is refused, where a forge would drop it
// without a word (a misspelt field is then caught here, not lost there).
package forgestandin

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// Pull is a pull request as a stand-in holds it, in the forge's words
// where the forges differ (State, AutoMerge).
type Pull struct {
	Number int
	// URL is the request's web page, as the forge's answers link it.
	URL         string
	Title, Body string
	// Head and Base are branch names (not refs/heads/…).
	Head, Base string
	// State is the forge's: OPEN, MERGED, DECLINED (Bitbucket); active,
	// completed, abandoned (Azure DevOps).
	State string
	Draft bool
	// Reviewers are as the request named them: account ids or {uuid}s
	// (Bitbucket Cloud), user names (Data Center), identity ids (Azure).
	Reviewers []string
	// Labels are Azure DevOps' tags; Bitbucket has none.
	Labels []string
	// AutoMerge is the merge strategy the request was set to merge itself
	// with (Data Center's strategy id, Azure DevOps' completion
	// options.mergeStrategy), "" when none.
	AutoMerge string
	// AutoMergeSetBy is the identity that set Azure DevOps' auto-complete.
	AutoMergeSetBy string
	// Comments are the comments' texts, in order.
	Comments []string
	// Version is Data Center's optimistic-locking version.
	Version int
	// Edits counts the changes of title or description.
	Edits int
}

// Open tells whether the request is open, in any forge's word.
func (p *Pull) Open() bool { return p.State == "OPEN" || p.State == "active" }

// Config is what every stand-in needs to know of its repository.
type Config struct {
	// Username and Token are the credentials the forge accepts: with a
	// username, by basic authentication; without, a bearer token (Azure
	// DevOps: a personal access token by basic authentication with any
	// username).
	Username, Token string
	// Branch is the commit a branch of the repository points at, ok false
	// when it has no such branch: the real git server's answer.
	Branch func(name string) (commit string, ok bool)
	// Users are who may be asked to review: account ids or {uuid}s
	// (Bitbucket Cloud), user names (Data Center), identity ids (Azure
	// DevOps). Anyone else is refused, as the forge refuses a user it does
	// not know.
	Users []string
}

// Server is a running stand-in.
type Server struct {
	// URL is the API's root, the automation's pullRequest.apiURL.
	URL string
	// Web is where the forge's web pages are: the server's root.
	Web string

	cfg   Config
	route func(s *Server, w http.ResponseWriter, r *http.Request)

	mu       sync.Mutex
	pulls    []*Pull
	refusals []string
	calls    []string
}

func start(t testing.TB, apiPath string, cfg Config, route func(*Server, http.ResponseWriter, *http.Request)) *Server {
	t.Helper()
	s := &Server{cfg: cfg, route: route}
	srv := httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(srv.Close)
	s.Web = srv.URL
	s.URL = srv.URL + apiPath
	return s
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, r.Method+" "+r.URL.RequestURI())
	s.route(s, w, r)
}

// Pulls are the stand-in's requests, copies, in the order they were
// opened.
func (s *Server) Pulls() []Pull {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Pull, len(s.pulls))
	for i, p := range s.pulls {
		out[i] = *p
		out[i].Reviewers = slices.Clone(p.Reviewers)
		out[i].Labels = slices.Clone(p.Labels)
		out[i].Comments = slices.Clone(p.Comments)
	}
	return out
}

// Seed adds a request made before the test, e.g. by a person: one the
// job must tell apart from its own. It gets the next number.
func (s *Server) Seed(p Pull) Pull {
	s.mu.Lock()
	defer s.mu.Unlock()
	p.Number = len(s.pulls) + 1
	s.pulls = append(s.pulls, &p)
	return p
}

// Refusals are the requests the stand-in refused, with why: a test that
// expects none fails on any.
func (s *Server) Refusals() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.refusals)
}

// Calls are the requests served, as METHOD URI.
func (s *Server) Calls() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.calls)
}

// refuse answers status with the forge's error body, and records why.
func (s *Server) refuse(w http.ResponseWriter, r *http.Request, status int, body any, why string) {
	s.refusals = append(s.refusals, fmt.Sprintf("%s %s: %d %s", r.Method, r.URL.RequestURI(), status, why))
	writeJSON(w, status, body)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// pull is the request numbered n, nil when there is none.
func (s *Server) pull(n int) *Pull {
	if n < 1 || n > len(s.pulls) {
		return nil
	}
	return s.pulls[n-1]
}

// add opens a request with the next number.
func (s *Server) add(p *Pull) *Pull {
	p.Number = len(s.pulls) + 1
	s.pulls = append(s.pulls, p)
	return p
}

// openFrom is the open request from head into base, nil when none.
func (s *Server) openFrom(head, base string) *Pull {
	for _, p := range s.pulls {
		if p.Open() && p.Head == head && p.Base == base {
			return p
		}
	}
	return nil
}

// commit is the branch's commit in the real git repository, "" when the
// repository has no such branch.
func (s *Server) commit(branch string) string {
	if s.cfg.Branch == nil {
		return ""
	}
	c, ok := s.cfg.Branch(branch)
	if !ok {
		return ""
	}
	return c
}

func (s *Server) knownUser(u string) bool { return slices.Contains(s.cfg.Users, u) }

// authorized checks the Authorization header against the configured
// credentials: basic with the username, else a bearer token.
func (s *Server) authorized(r *http.Request) bool {
	h := r.Header.Get("Authorization")
	if s.cfg.Username != "" {
		return h == basic(s.cfg.Username, s.cfg.Token)
	}
	return h == "Bearer "+s.cfg.Token
}

func basic(user, password string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+password))
}

// decode reads a JSON object body into out, which must be a pointer to a
// struct whose fields are the documented request schema: a field outside
// it, or no JSON object, is an error that names it.
func decode(r *http.Request, out any) error {
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		return fmt.Errorf("Content-Type %q is not application/json", ct)
	}
	data, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(out); err != nil {
		return fmt.Errorf("body %s: %w", data, err)
	}
	return nil
}

// noBody checks a request documented without a body sends none.
func noBody(r *http.Request) error {
	data, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		return err
	}
	if len(bytes.TrimSpace(data)) > 0 {
		return fmt.Errorf("unexpected body %s", data)
	}
	return nil
}

// queryOnly checks the query names only documented parameters.
func queryOnly(r *http.Request, allowed ...string) error {
	for k := range r.URL.Query() {
		if !slices.Contains(allowed, k) {
			return fmt.Errorf("query parameter %q is not one of %v", k, allowed)
		}
	}
	return nil
}

// intParam is query parameter name as a number from lo to hi, def when
// absent; ok is false when it is not one (the stand-in refuses it).
func intParam(q url.Values, name string, def, lo, hi int) (n int, ok bool) {
	v := q.Get(name)
	if v == "" {
		return def, true
	}
	n, err := strconv.Atoi(v)
	return n, err == nil && n >= lo && n <= hi
}
