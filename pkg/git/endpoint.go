package git

import (
	"fmt"
	"net"
	"net/url"
	"regexp"
	"strings"
)

// Endpoint is a repository URL taken apart.
type Endpoint struct {
	Scheme     string // http, https or ssh
	Host, Port string // Port is set for ssh only (default 22)
	User       string
	// Path is what git-upload-pack is given over SSH; ssh only.
	Path string
	// URL is the URL as given; for http(s) it may hold credentials.
	URL string
}

// scpLike is git's short form for ssh: [user@]host:path.
var scpLike = regexp.MustCompile(`^(?:([^@/]+)@)?([^:/]+):(.*)$`)

// ParseEndpoint accepts what git accepts for a remote that a controller can
// reach: http://, https://, ssh:// and the scp-like user@host:path. Errors
// wrap ErrInvalidCredentials and never quote a password.
func ParseEndpoint(raw string) (Endpoint, error) {
	if !strings.Contains(raw, "://") {
		m := scpLike.FindStringSubmatch(raw)
		if m == nil {
			return Endpoint{}, fmt.Errorf("%w: the repository URL %q is neither a URL nor user@host:path", ErrInvalidCredentials, Redact(raw))
		}
		return Endpoint{Scheme: "ssh", Host: m[2], Port: "22", User: m[1], Path: m[3], URL: raw}, nil
	}
	scheme := strings.ToLower(raw[:strings.Index(raw, "://")])
	if scheme != "http" && scheme != "https" && scheme != "ssh" {
		return Endpoint{}, fmt.Errorf("%w: unsupported URL scheme %q (want https, http or ssh)", ErrInvalidCredentials, scheme)
	}
	u, err := url.Parse(raw)
	if err != nil || u.Hostname() == "" {
		// url.Parse errors quote the URL, which may hold a password.
		return Endpoint{}, fmt.Errorf("%w: the repository URL is not a valid URL", ErrInvalidCredentials)
	}
	ep := Endpoint{Scheme: scheme, Host: u.Hostname(), User: u.User.Username(), URL: raw}
	if ep.Scheme == "ssh" {
		if ep.Port = u.Port(); ep.Port == "" {
			ep.Port = "22"
		}
		// ssh://host/~user/repo names a path in a home directory, as
		// user@host:~user/repo does.
		ep.Path = u.Path
		if strings.HasPrefix(ep.Path, "/~") {
			ep.Path = ep.Path[1:]
		}
	}
	return ep, nil
}

// Addr is host:port of an ssh endpoint.
func (ep Endpoint) Addr() string { return net.JoinHostPort(ep.Host, ep.Port) }

// Redact hides the password of a URL, for messages.
func Redact(raw string) string {
	if u, err := url.Parse(raw); err == nil && u.User != nil {
		return u.Redacted()
	}
	if i := strings.Index(raw, "@"); i >= 0 && strings.Contains(raw[:i], "://") {
		return raw[:strings.Index(raw, "://")+3] + "xxxxx" + raw[i:]
	}
	return raw
}
