// Package forge keeps pull (merge) requests on a forge: find the open
// request of a head branch, open one, edit its title and body, close it
// with a comment. The write-back engine proposes its changes through it.
//
// The interface is the few verbs an update stream needs and no more, so
// that the job's logic (one request per stream, kept fresh, never
// duplicated) lives once, in the engine, and each forge is a small adapter
// registered here (Register). This package holds no forge's client
// library: the built-in adapters (GitHub, GitLab, Gitea and Forgejo, over
// their official libraries) are update-job-controller/forges, which the
// front ends register at start, and a program embedding the engine can
// register its own forge the same way.
//
// What the adapters share is here: where a forge's API is (derived from
// the git URL), the rate-limit handling every request goes through
// (Retry-After, X-RateLimit-Reset), one error type that says what the
// forge answered, for the job's conditions, the keeping of a refusal's
// body that a library would not quote (KeepAnswers, CallKeepingAnswer),
// and the title prefixes by which GitLab and Gitea mark a draft
// (DraftPrefixes). Tokens never appear in errors: the libraries' messages
// are scrubbed of them.
package forge

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"toolkit.dev/image-toolkit/pkg/git"
	"toolkit.dev/image-toolkit/pkg/httpwait"
)

// Provider names a forge's API; each adapter declares its own and is
// registered under it (Register).
type Provider string

// State of a request.
type State string

const (
	Open   State = "open"
	Closed State = "closed"
	Merged State = "merged"
)

// MergeMethod is how an auto-merged request is merged.
type MergeMethod string

const (
	Merge  MergeMethod = "merge"
	Squash MergeMethod = "squash"
	Rebase MergeMethod = "rebase"
)

// Request is a pull request (GitHub, Gitea) or merge request (GitLab).
type Request struct {
	// Number is the request's number in its repository (GitLab's iid).
	Number int
	// URL is the request's web page.
	URL   string
	State State
	Title string
	Body  string
	Head  string
	Base  string
	// HeadCommit is the head branch's commit the forge knows of.
	HeadCommit string
	Draft      bool
	// Pushed is the review's current commit as a forge that reviews
	// pushed commits (PushReviewer) tells it: HeadCommit's parent, people
	// and message, from which the engine tells whether its own commit
	// would be the same one. Nil on the other forges.
	Pushed *PushedCommit
}

// PushedCommit is what a forge says of a commit under review.
type PushedCommit struct {
	Parent            string
	Author, Committer Signature
	Message           string
	// Trailer ties the review's commits to it ("Change-Id: I…").
	Trailer string
}

// Signature is a commit's author or committer.
type Signature struct {
	Name, Email string
	When        time.Time
}

// NewRequest is a request to open.
type NewRequest struct {
	Head, Base  string
	Title, Body string
	Draft       bool
	Labels      []string
	// Reviewers and Assignees are user names.
	Reviewers []string
	Assignees []string
	// AutoMerge, when set, asks the forge to merge the request once its
	// checks pass, with this method.
	AutoMerge MergeMethod
}

// Client is one repository's requests on one forge. Every call honours
// its context; the HTTP client bounds each request too.
type Client interface {
	// FindOpen returns the open request from head into base, or nil.
	FindOpen(ctx context.Context, head, base string) (*Request, error)
	// Create opens a request, then applies what the forge takes in
	// separate calls (labels, reviewers, assignees, auto-merge). A failure
	// after the request exists returns the request and the error.
	Create(ctx context.Context, req NewRequest) (*Request, error)
	// Edit sets the title and body of an open request. A draft marked by a
	// title prefix (GitLab, Gitea) keeps its prefix.
	Edit(ctx context.Context, current *Request, title, body string) (*Request, error)
	// Close comments on an open request with comment, then closes it.
	Close(ctx context.Context, current *Request, comment string) error
}

// PushReviewer is a Client of a forge on which a review is opened and
// updated by pushing a commit to a ref of the forge's own (Gerrit's
// refs/for/BRANCH), not from a head branch: the engine pushes its commit
// there, with the trailer in its message that ties it to the stream's
// review, and calls neither Create nor Edit. A review's text is its
// commit's message, so a new message is a new patch set.
type PushReviewer interface {
	Client
	// ReviewRef is the ref to push req's commit to; what it cannot carry
	// (a feature the forge lacks) is refused with ErrUnsupported.
	ReviewRef(req NewRequest) (string, error)
	// Trailer is the trailer, as "Key: value", that ties a commit to the
	// review of head into base: the open review's (open, from FindOpen),
	// so that the commit updates it, else a new review's, made from seed
	// (which differs for each new review of a stream).
	Trailer(open *Request, head, base, seed string) string
}

// CommitLister is a Client that lists the commits from one revision to
// another (a compare), so that a pull request can name the source changes
// an image brings; a forge without it gets none listed.
type CommitLister interface {
	// Commits are the commits reachable from to and not from from,
	// oldest first, at most max; the count of all of them beside.
	Commits(ctx context.Context, from, to string, max int) ([]Commit, int, error)
}

// Commit is one commit a forge lists: its name and its message's first
// line, as the forge gave it.
type Commit struct {
	SHA, Subject string
}

// Options say which forge and repository a Client talks to.
type Options struct {
	Provider Provider
	// APIURL is the API's base URL, e.g. https://api.github.com/,
	// https://gitlab.example.com/ or https://gitea.example.com/.
	APIURL string
	// Repository is owner/name, or GitLab's full project path
	// (group/subgroup/project), or what the forge's Forge.Repository made
	// of the git URL's path.
	Repository string
	Token      string
	// Username is the user the token is the password of (the Secret's
	// username beside its password), for a forge whose API takes such a
	// token by basic authentication (a Bitbucket app password, an Azure
	// DevOps personal access token); empty for a bearer token.
	Username string
	// HTTPClient carries TLS trust and the proxy; New wraps its transport
	// with the rate-limit handling and a per-request timeout.
	HTTPClient *http.Client
	// Timeout bounds each request; zero means DefaultTimeout.
	Timeout time.Duration
	// MaxRateLimitWait is the longest a rate-limited request waits before
	// it is tried again; a longer wait is returned as an Error with
	// RetryAfter. Zero means DefaultMaxRateLimitWait.
	MaxRateLimitWait time.Duration
	// OnResponse is told of every response (or failed request, status 0).
	OnResponse func(method string, status int)
}

// Defaults of Options.
const (
	DefaultTimeout          = 30 * time.Second
	DefaultMaxRateLimitWait = time.Minute
)

// New returns the Client of opts.Provider.
func New(opts Options) (Client, error) {
	if opts.Token == "" {
		return nil, errors.New("no API token: the Secret needs token, password or bearerToken")
	}
	f, ok := lookup(opts.Provider)
	if !ok {
		return nil, fmt.Errorf("unknown forge provider %q: want %s", opts.Provider, providerList())
	}
	owner, name, ok := strings.Cut(opts.Repository, "/")
	if (!ok && !f.Flat) || owner == "" || (ok && name == "") {
		return nil, fmt.Errorf("repository %q is not owner/name", opts.Repository)
	}
	return f.New(opts, Wrap(opts.HTTPClient, opts))
}

// Endpoint is where a repository's forge API is.
type Endpoint struct {
	Provider   Provider
	APIURL     string
	Repository string
}

// Resolve finds the forge, its API and the repository's path from the git
// URL, with the provider and API URL the spec sets (either may be empty).
// Without a provider, the registered forges tell it by the host's name:
// one of a forge's public hosts, else the one forge whose word the name
// holds (with the built-in forges, github.com and "github" hosts are
// GitHub, gitlab.com and "gitlab" hosts GitLab, codeberg.org and "gitea"
// or "forgejo" hosts Gitea). The API is the forge's APIURL, reached over
// https unless the git URL is plain http (a test or a trusted network).
func Resolve(gitURL string, provider Provider, apiURL string) (*Endpoint, error) {
	if strings.HasPrefix(strings.ToLower(gitURL), "file://") {
		return resolveLocal(gitURL, provider, apiURL)
	}
	u, err := git.ParseURL(gitURL)
	if err != nil {
		return nil, fmt.Errorf("repository URL %s is not a URL", git.Redact(gitURL))
	}
	host := strings.ToLower(u.Host)
	f, ok := lookup(provider)
	if provider == "" {
		if f, err = detect(host); err != nil {
			return nil, err
		}
		ok = true
	}
	if !ok {
		return nil, fmt.Errorf("unknown forge provider %q: want %s", provider, providerList())
	}
	repo := u.Repository()
	if apiURL == "" {
		scheme := "https"
		if u.Scheme == "http" {
			scheme = "http"
		}
		hostport := u.HostPort()
		if u.Scheme == "ssh" {
			hostport = u.Host // the API is not on the SSH port
		}
		apiURL = scheme + "://" + hostport + "/"
		if f.APIURL != nil {
			apiURL = f.APIURL(scheme, host, hostport)
		}
	} else {
		a, err := url.Parse(apiURL)
		if err != nil || (a.Scheme != "https" && a.Scheme != "http") || a.Host == "" {
			return nil, fmt.Errorf("pullRequest.apiURL %q is not an http(s) URL", apiURL)
		}
		// An instance under a path (https://host/gitlab/) serves its
		// repositories under the same path.
		if prefix := strings.Trim(a.Path, "/"); prefix != "" && strings.EqualFold(a.Hostname(), host) {
			repo = strings.TrimPrefix(strings.TrimPrefix(repo, prefix), "/")
		}
		if !strings.HasSuffix(apiURL, "/") {
			apiURL += "/"
		}
	}
	if f.Repository != nil {
		if repo, err = f.Repository(host, repo); err != nil {
			return nil, fmt.Errorf("%s: %w", git.Redact(gitURL), err)
		}
	}
	parts := strings.Split(repo, "/")
	if (len(parts) < 2 && !f.Flat) || slices.Contains(parts, "") || (!f.Subgroups && len(parts) > 2) {
		return nil, fmt.Errorf("cannot read the repository's owner and name from %s (path %q)", git.Redact(gitURL), repo)
	}
	return &Endpoint{Provider: f.Provider, APIURL: apiURL, Repository: repo}, nil
}

// resolveLocal is Resolve of a repository on this machine's disk
// (file:///srv/git/team/fleet.git, which an embedder's engine may run): it
// has no host to tell the forge by, so the provider must be named; the
// repository is the path's last two parts (team/fleet), and the API URL is
// the one given (http(s) or file), or none.
func resolveLocal(gitURL string, provider Provider, apiURL string) (*Endpoint, error) {
	f, ok := lookup(provider)
	switch {
	case provider == "":
		return nil, fmt.Errorf("a repository on this machine (file://) has no host to tell its forge by: name its provider, %s", providerList())
	case !ok:
		return nil, fmt.Errorf("unknown forge provider %q: want %s", provider, providerList())
	}
	u, err := url.Parse(gitURL)
	if err != nil {
		return nil, fmt.Errorf("repository URL %s is not a URL", git.Redact(gitURL))
	}
	parts := strings.Split(strings.Trim(strings.TrimSuffix(u.Path, ".git"), "/"), "/")
	if len(parts) < 2 || parts[len(parts)-1] == "" || parts[len(parts)-2] == "" {
		return nil, fmt.Errorf("cannot read the repository's owner and name from %s (path %q)", git.Redact(gitURL), u.Path)
	}
	if apiURL != "" {
		a, err := url.Parse(apiURL)
		if err != nil || (a.Scheme != "https" && a.Scheme != "http" && a.Scheme != "file") {
			return nil, fmt.Errorf("pullRequest.apiURL %q is not an http(s) or file URL", apiURL)
		}
	}
	return &Endpoint{Provider: f.Provider, APIURL: apiURL, Repository: strings.Join(parts[len(parts)-2:], "/")}, nil
}

// ErrUnsupported is wrapped by an adapter's refusal of what its forge
// cannot do as asked (labels on a forge without them): only a change to
// the spec helps, so the engine does not retry it.
var ErrUnsupported = errors.New("the forge has no such feature")

// Error is a forge's refusal of a call, or a call that got no answer.
type Error struct {
	Provider Provider
	// Op says what was being done, e.g. "creating the pull request".
	Op string
	// StatusCode is the HTTP status; 0 when no response came, or when the
	// refusal came inside a successful response (GitHub's GraphQL errors).
	StatusCode int
	// Message is what the forge said (or the transport's error).
	Message string
	// RetryAfter is how long the forge asked to wait (rate limits).
	RetryAfter time.Duration
}

func (e *Error) Error() string {
	if e.StatusCode == 0 {
		return fmt.Sprintf("%s: %s: %s", e.Provider, e.Op, e.Message)
	}
	msg := fmt.Sprintf("%s: %s: %d %s", e.Provider, e.Op, e.StatusCode, http.StatusText(e.StatusCode))
	if e.Message != "" {
		msg += ": " + e.Message
	}
	switch {
	case e.StatusCode == http.StatusNotFound:
		msg += " (the repository or request does not exist, or the token cannot see it)"
	case e.StatusCode == http.StatusForbidden && e.RetryAfter == 0:
		msg += " (the token lacks a permission or scope this needs)"
	}
	if e.RetryAfter > 0 {
		msg += fmt.Sprintf(" (rate limited: retry in %s)", e.RetryAfter.Round(time.Second))
	}
	return msg
}

// Unauthorized reports whether the forge refused the token itself.
func (e *Error) Unauthorized() bool { return e.StatusCode == http.StatusUnauthorized }

// RateLimited reports whether the forge asked to wait.
func (e *Error) RateLimited() bool {
	return e.RetryAfter > 0 || e.StatusCode == http.StatusTooManyRequests
}

// NewError makes the Error of a failed call from the library's error and
// the HTTP response it got, if any. token is scrubbed from the message.
func NewError(p Provider, op string, resp *http.Response, err error, token string) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%s: %s: %w", p, op, err)
	}
	e := &Error{Provider: p, Op: op, Message: firstLine(err.Error())}
	if resp != nil {
		e.StatusCode = resp.StatusCode
		if isRateLimited(resp) {
			e.RetryAfter = max(RetryAfter(resp, time.Now()), time.Second)
		}
	}
	if token != "" {
		e.Message = strings.ReplaceAll(e.Message, token, "xxxxx")
	}
	return e
}

// CallKeepingAnswer runs call with a context under which KeepAnswers
// keeps the body of a failed answer, and turns call's failure into an
// Error that quotes the forge's words from that body (read by message,
// see AnswerMessage), or else the library's error.
func CallKeepingAnswer(ctx context.Context, p Provider, op, token string, message func([]byte) (string, error),
	call func(context.Context) (*http.Response, error)) error {
	answer := &keptAnswer{}
	resp, err := call(context.WithValue(ctx, keptAnswerKey{}, answer))
	if err == nil {
		return nil
	}
	if msg := AnswerMessage(answer.body, message); msg != "" {
		err = errors.New(msg)
	}
	return NewError(p, op, resp, err, token)
}

// The GitLab and Gitea libraries quote a refusal in part or not at all
// (GitLab's 404 is ErrNotFound alone, though "404 Project Not Found" is
// not a missing merge request; Gitea's SDK quotes only a message, and
// nothing of a merge it reports by status), and what the forge said is in
// the body, which the library has read and closed by the time it returns.
// So a transport keeps the body of a failed answer for the call that
// asked, through the request's context.
type (
	keptAnswerKey struct{}
	keptAnswer    struct{ body []byte }
	answerKeeper  struct{ next http.RoundTripper }
)

// maxKeptAnswer bounds the body kept: the forges' error bodies are short,
// and a proxy's error page need not be kept whole.
const maxKeptAnswer = 64 << 10

// KeepAnswers returns a copy of hc whose transport keeps failed answers'
// bodies for CallKeepingAnswer.
func KeepAnswers(hc *http.Client) *http.Client {
	c := &http.Client{}
	if hc != nil {
		*c = *hc
	}
	next := c.Transport
	if next == nil {
		next = http.DefaultTransport
	}
	c.Transport = answerKeeper{next: next}
	return c
}

func (t answerKeeper) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(req)
	answer, ok := req.Context().Value(keptAnswerKey{}).(*keptAnswer)
	if err != nil || !ok || resp.StatusCode < http.StatusBadRequest {
		return resp, err
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxKeptAnswer))
	resp.Body.Close()
	answer.body = body
	// The library reads the body again for its own error.
	resp.Body = io.NopCloser(bytes.NewReader(body))
	return resp, nil
}

// AnswerMessage is what an error body says: what message reads from the
// forge's JSON; a body that is not JSON, as it is (a rate limit's "Retry
// later"); and of an HTML page, from a proxy or a URL that is not the API,
// only that it is one. Empty when there is no body.
func AnswerMessage(body []byte, message func([]byte) (string, error)) string {
	text := strings.TrimSpace(string(body))
	if text == "" {
		return ""
	}
	msg, err := message(body)
	switch {
	case err == nil:
		return msg
	case strings.HasPrefix(text, "<"):
		return "an HTML page, not the API's JSON"
	}
	return text
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	if len(s) > 512 {
		s = s[:512] + "..."
	}
	return s
}

// Wrap returns a client whose transport is base's (http.DefaultTransport
// when nil) behind the rate-limit handling, with a per-request timeout.
func Wrap(base *http.Client, opts Options) *http.Client {
	c := &http.Client{}
	if base != nil {
		*c = *base
	}
	next := c.Transport
	if next == nil {
		next = http.DefaultTransport
	}
	c.Transport = &limiter{next: next, maxWait: cmpOr(opts.MaxRateLimitWait, DefaultMaxRateLimitWait), observe: opts.OnResponse}
	c.Timeout = cmpOr(opts.Timeout, DefaultTimeout)
	return c
}

func cmpOr(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// limiter honours rate limits: a response that says to wait (429, or 403
// with Retry-After or an exhausted X-RateLimit-Remaining) is retried once
// the wait is over, when the wait is short and the request can be sent
// again; otherwise the response goes to the library, whose error becomes
// an Error with RetryAfter.
type limiter struct {
	next    http.RoundTripper
	maxWait time.Duration
	observe func(method string, status int)
}

const maxRateLimitRetries = 3

func (l *limiter) RoundTrip(req *http.Request) (*http.Response, error) {
	for try := 0; ; try++ {
		resp, err := l.next.RoundTrip(req)
		if l.observe != nil {
			status := 0
			if resp != nil {
				status = resp.StatusCode
			}
			l.observe(req.Method, status)
		}
		if err != nil || !isRateLimited(resp) || try >= maxRateLimitRetries {
			return resp, err
		}
		wait := RetryAfter(resp, time.Now())
		if wait > l.maxWait || (req.Body != nil && req.GetBody == nil) {
			return resp, nil
		}
		again := req.Clone(req.Context())
		if req.GetBody != nil {
			body, err := req.GetBody()
			if err != nil {
				return resp, nil
			}
			again.Body = body
		}
		resp.Body.Close()
		t := time.NewTimer(max(wait, 100*time.Millisecond))
		select {
		case <-req.Context().Done():
			t.Stop()
			return nil, req.Context().Err()
		case <-t.C:
		}
		req = again
	}
}

func isRateLimited(resp *http.Response) bool {
	switch resp.StatusCode {
	case http.StatusTooManyRequests:
		return true
	case http.StatusForbidden:
		return resp.Header.Get("Retry-After") != "" || resp.Header.Get("X-RateLimit-Remaining") == "0" ||
			resp.Header.Get("RateLimit-Remaining") == "0"
	}
	return false
}

// RetryAfter is how long a rate-limited response asks to wait: its
// Retry-After (seconds or an HTTP date), else the reset time of
// X-RateLimit-Reset (GitHub) or RateLimit-Reset (GitLab), in Unix seconds;
// zero when it says nothing.
func RetryAfter(resp *http.Response, now time.Time) time.Duration {
	if wait, ok := httpwait.RetryAfter(resp.Header, now); ok {
		return wait
	}
	for _, h := range []string{"X-RateLimit-Reset", "RateLimit-Reset"} {
		if s, err := strconv.ParseInt(strings.TrimSpace(resp.Header.Get(h)), 10, 64); err == nil && s > 0 {
			return max(time.Unix(s, 0).Sub(now), 0)
		}
	}
	return 0
}

// DraftPrefixes are the title prefixes by which a forge marks a draft
// (GitLab, Gitea), in any case, and the one it puts on a new draft.
type DraftPrefixes struct {
	Known []string
	Add   string
}

// Prefix is title's draft prefix with the spaces after it, or "" when
// title has none.
func (d DraftPrefixes) Prefix(title string) string {
	for _, p := range d.Known {
		if len(title) >= len(p) && strings.EqualFold(title[:len(p)], p) {
			rest := strings.TrimLeft(title[len(p):], " ")
			return title[:len(title)-len(rest)]
		}
	}
	return ""
}

// Create is the title of a new request: a draft's is marked, unless the
// title (from a template) is already.
func (d DraftPrefixes) Create(title string, draft bool) string {
	if !draft || d.Prefix(title) != "" {
		return title
	}
	return d.Add + title
}

// Edit keeps a draft a draft when the job rewrites its title, with the
// prefix it had. A request a person took out of draft has no prefix to
// keep, and none is added back.
func (d DraftPrefixes) Edit(current *Request, title string) string {
	if !current.Draft || d.Prefix(title) != "" {
		return title
	}
	if p := d.Prefix(current.Title); p != "" {
		if !strings.HasSuffix(p, " ") {
			p += " "
		}
		return p + title
	}
	return d.Add + title
}
