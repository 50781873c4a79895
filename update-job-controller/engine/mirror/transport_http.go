package mirror

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strings"

	git2go "github.com/libgit2/git2go/v34"

	"toolkit.dev/image-toolkit/pkg/git"
)

// httpTransport speaks smart HTTP (gitprotocol-http(5)) for libgit2. It is
// stateless: every action is a request of its own.
type httpTransport struct{}

func (httpTransport) Action(remoteURL string, action git2go.SmartServiceAction) (git2go.SmartSubtransportStream, error) {
	s, err := lookup(remoteURL)
	if err != nil {
		return nil, err
	}
	switch action {
	case git2go.SmartServiceActionUploadpackLs:
		return s.infoRefs("git-upload-pack")
	case git2go.SmartServiceActionReceivepackLs:
		return s.infoRefs("git-receive-pack")
	case git2go.SmartServiceActionUploadpack:
		return s.newHTTPStream(http.MethodPost, "git-upload-pack"), nil
	case git2go.SmartServiceActionReceivepack:
		return s.newHTTPStream(http.MethodPost, "git-receive-pack"), nil
	}
	return nil, s.fail(fmt.Errorf("unknown git service action %d", action))
}

func (httpTransport) Close() error { return nil }
func (httpTransport) Free()        {}

// prepareHTTP makes the client of an HTTP(S) session.
func (s *session) prepareHTTP() error {
	u, err := url.Parse(s.url)
	if err != nil {
		return fmt.Errorf("%w: the repository URL is not a valid URL", git.ErrInvalidCredentials)
	}
	base := *u
	base.User, base.RawQuery, base.Fragment, base.RawFragment = nil, "", "", ""
	base.Path, base.RawPath = strings.TrimSuffix(base.Path, "/"), ""
	s.base = &base
	s.client, err = s.auth.HTTPClient(s.url)
	return err
}

// service returns the URL of a path under the repository.
func (s *session) service(path, query string) string {
	u := *s.base
	u.Path += path
	u.RawQuery = query
	return u.String()
}

// infoRefs starts a fetch or push: GET info/refs, the refs advertisement.
func (s *session) infoRefs(service string) (git2go.SmartSubtransportStream, error) {
	h := s.newHTTPStream(http.MethodGet, service)
	if err := h.send(); err != nil {
		return nil, err
	}
	if final := h.resp.Request.URL; final.Path != s.base.Path+"/info/refs" {
		path, ok := strings.CutSuffix(final.Path, "/info/refs")
		if !ok {
			h.Free()
			return nil, s.fail(fmt.Errorf("%s redirects to %s, which is not a git repository URL", git.Redact(s.url), final.Redacted()))
		}
		moved := *final
		moved.Path, moved.RawPath, moved.RawQuery = path, "", ""
		s.base = &moved
	}
	return h, nil
}

// httpStream is one request. For a POST, libgit2 writes the body, which
// is sent with a Content-Length when libgit2 first reads the response:
// CGI servers such as git http-backend need the length, and a job's push
// (a commit) is small enough to hold in memory.
type httpStream struct {
	s       *session
	method  string
	service string
	body    bytes.Buffer
	ctx     context.Context
	cancel  context.CancelFunc
	watch   *git.Watchdog
	resp    *http.Response
	err     error // returned by the next Read
}

func (s *session) newHTTPStream(method, service string) *httpStream {
	ctx, cancel := context.WithCancel(s.ctx)
	h := &httpStream{s: s, method: method, service: service, ctx: ctx, cancel: cancel}
	h.watch = git.NewWatchdog(s.idle, cancel)
	s.onClose(h.Free)
	return h
}

func (h *httpStream) Write(p []byte) (int, error) {
	if h.method != http.MethodPost || h.resp != nil {
		return 0, h.s.fail(errors.New("libgit2 wrote to a finished HTTP request"))
	}
	return h.body.Write(p)
}

func (h *httpStream) Read(p []byte) (int, error) {
	if h.resp == nil && h.err == nil {
		h.err = h.send()
	}
	if h.err != nil {
		return 0, h.err
	}
	h.watch.Arm()
	n, err := h.resp.Body.Read(p)
	h.watch.Disarm()
	switch {
	case err == io.EOF:
		h.err = io.EOF
	case err != nil:
		h.err = h.s.fail(h.s.ioError(fmt.Errorf("reading the response of %s: %w", h.service, err), h.watch.Fired()))
	}
	if n > 0 {
		return n, nil // the error, if any, comes with the next read
	}
	return 0, h.err
}

func (h *httpStream) Free() {
	h.watch.Disarm()
	if h.resp != nil {
		h.resp.Body.Close()
	}
	h.cancel()
}

// send makes the request and checks the response's status and type.
func (h *httpStream) send() error {
	s := h.s
	var req *http.Request
	var err error
	if h.method == http.MethodGet {
		req, err = http.NewRequestWithContext(h.ctx, http.MethodGet, s.service("/info/refs", "service="+h.service), nil)
	} else {
		req, err = http.NewRequestWithContext(h.ctx, http.MethodPost, s.service("/"+h.service, ""), bytes.NewReader(h.body.Bytes()))
	}
	if err != nil {
		return s.fail(err)
	}
	wantType := "application/x-" + h.service + "-advertisement"
	if h.method == http.MethodGet {
		req.Header.Set("Accept", "*/*")
		req.Header.Set("Pragma", "no-cache")
	} else {
		req.Header.Set("Content-Type", "application/x-"+h.service+"-request")
		wantType = "application/x-" + h.service + "-result"
		req.Header.Set("Accept", wantType)
	}
	s.auth.Authorize(req, s.url)

	h.watch.Arm()
	resp, err := s.client.Do(req)
	h.watch.Disarm()
	if err != nil {
		// The URL is in the message of the operation.
		return s.fail(s.ioError(git.RequestError(err, req.URL.Hostname()), h.watch.Fired()))
	}
	h.resp = resp
	if resp.StatusCode != http.StatusOK {
		h.watch.Arm() // statusError reads the body
		defer h.watch.Disarm()
		return s.fail(s.auth.StatusError(resp))
	}
	if ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); ct != wantType {
		return s.fail(fmt.Errorf("%s %s answered with content type %q, not %q: not a smart git HTTP server",
			req.Method, req.URL.Redacted(), ct, wantType))
	}
	return nil
}
