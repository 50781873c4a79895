package forges

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"toolkit.dev/image-toolkit/pkg/forge"
	"toolkit.dev/image-toolkit/pkg/git"
)

// rest is a forge's API spoken as JSON over HTTP, for the forges whose
// calls an update stream needs are a handful of REST requests: Bitbucket
// Cloud and Data Center, which have no official Go library, and Azure
// DevOps, whose official library (azure-devops-go-api) would link its
// whole generated client into the job controller for five calls. Each
// call is a method, a path under the API's root, a query and a JSON body,
// and the JSON answer; a refusal is a forge.Error that quotes the forge's
// own words (message reads its error shape).
type rest struct {
	provider forge.Provider
	// root is the API's root, ending in a slash.
	root string
	// hc is forge.Wrap's client: rate limits, a timeout per request.
	hc *http.Client
	// basic sends the token as username's password; else it is a
	// bearer token.
	basic           bool
	username, token string
	message         func(body []byte) (string, error)
	// guard is what the API puts before its JSON to keep browsers from
	// running it as a script (Gerrit's ")]}'"), removed before decoding.
	guard string
}

// maxAnswer bounds what is read of an answer: a page of requests is a
// few hundred KiB at most.
const maxAnswer = 8 << 20

// newREST is the API of opts; a token with a user is sent by basic
// authentication.
func newREST(p forge.Provider, opts forge.Options, hc *http.Client, message func([]byte) (string, error)) (*rest, error) {
	u, err := url.Parse(opts.APIURL)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return nil, fmt.Errorf("%s: API URL %s is not an http(s) URL", p, git.Redact(opts.APIURL))
	}
	root := opts.APIURL
	if !strings.HasSuffix(root, "/") {
		root += "/"
	}
	return &rest{provider: p, root: root, hc: hc, basic: opts.Username != "", username: opts.Username, token: opts.Token, message: message}, nil
}

// call sends method path?query with in as its JSON body (none when nil)
// and decodes the answer into out (ignored when nil).
func (c *rest) call(ctx context.Context, op, method, path string, query url.Values, in, out any) error {
	target := c.root + path
	if len(query) > 0 {
		target += "?" + query.Encode()
	}
	var body io.Reader
	if in != nil {
		data, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("%s: %s: %w", c.provider, op, err)
		}
		// A bytes.Reader lets the rate-limit handling send it again.
		body = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, target, body)
	if err != nil {
		return fmt.Errorf("%s: %s: %w", c.provider, op, err)
	}
	req.Header.Set("Accept", "application/json")
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.basic {
		req.SetBasicAuth(c.username, c.token)
	} else {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return forge.NewError(c.provider, op, nil, err, c.token)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if err != nil {
		return forge.NewError(c.provider, op, nil, err, c.token)
	}
	switch {
	case resp.StatusCode == http.StatusNonAuthoritativeInfo:
		// Azure DevOps answers a token it does not accept with its
		// sign-in page and 203, not 401.
		return &forge.Error{Provider: c.provider, Op: op, StatusCode: http.StatusUnauthorized,
			Message: "the server answered with its sign-in page (HTTP 203): the token was not accepted"}
	case resp.StatusCode >= 300:
		msg := forge.AnswerMessage(data, c.message)
		if msg == "" {
			msg = http.StatusText(resp.StatusCode)
		}
		return forge.NewError(c.provider, op, resp, errors.New(msg), c.token)
	}
	data = bytes.TrimPrefix(bytes.TrimSpace(data), []byte(c.guard))
	if out == nil || len(bytes.TrimSpace(data)) == 0 {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		msg := "the answer is not the API's JSON (" + err.Error() + ")"
		if bytes.HasPrefix(bytes.TrimSpace(data), []byte("<")) {
			msg = "the answer is an HTML page, not the API's JSON: is the API URL right?"
		}
		return &forge.Error{Provider: c.provider, Op: op, StatusCode: resp.StatusCode, Message: msg}
	}
	return nil
}

// unsupported refuses what a forge cannot do as asked: the spec must
// change, so it is not retried.
func unsupported(p forge.Provider, format string, args ...any) error {
	return fmt.Errorf("%s: %s: %w", p, fmt.Sprintf(format, args...), forge.ErrUnsupported)
}

// pathEscape escapes each part of a path built from names.
func pathEscape(parts ...string) string {
	for i, p := range parts {
		parts[i] = url.PathEscape(p)
	}
	return strings.Join(parts, "/")
}
