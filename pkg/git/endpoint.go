package git

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"path"
	"regexp"
	"strings"
)

// Endpoint is a repository URL taken apart. It is the one parse of a git
// URL in image-toolkit: the transports dial it, the forges find their API
// and repository in it, and the webhook receiver keys repositories by it.
type Endpoint struct {
	Scheme string // lower case: http, https, ssh (scp-like URLs are ssh), ...
	Host   string // without brackets or port
	// Port is the port the URL names; for ssh it defaults to 22.
	Port string
	User string
	// Path is the repository's path: for ssh what git-upload-pack is given
	// (relative in user@host:path, ~user/... in a home directory); for
	// http(s) the URL's path.
	Path string
	// URL is the URL as given; for http(s) it may hold credentials.
	URL string
}

// scpLike is git's short form for ssh: [user@]host:path.
var scpLike = regexp.MustCompile(`^(?:([^@/]+)@)?([^:/]+):(.*)$`)

// ParseURL takes a git remote apart without judging whether it can be
// reached: scheme://[user[:password]@]host[:port]/path with any scheme, or
// git's scp-like [user@]host:path, which is ssh. Errors never quote a
// password.
func ParseURL(raw string) (Endpoint, error) {
	i := strings.Index(raw, "://")
	if i < 0 {
		m := scpLike.FindStringSubmatch(raw)
		if m == nil {
			return Endpoint{}, fmt.Errorf("the repository URL %q is neither a URL nor user@host:path", Redact(raw))
		}
		return Endpoint{Scheme: "ssh", Host: m[2], Port: "22", User: m[1], Path: m[3], URL: raw}, nil
	}
	u, err := url.Parse(raw)
	if err != nil || u.Hostname() == "" {
		// url.Parse errors quote the URL, which may hold a password.
		return Endpoint{}, errors.New("the repository URL is not a valid URL")
	}
	ep := Endpoint{Scheme: strings.ToLower(raw[:i]), Host: u.Hostname(), Port: u.Port(), User: u.User.Username(), Path: u.Path, URL: raw}
	if ep.Scheme == "ssh" {
		if ep.Port == "" {
			ep.Port = "22"
		}
		// ssh://host/~user/repo names a path in a home directory, as
		// user@host:~user/repo does.
		if strings.HasPrefix(ep.Path, "/~") {
			ep.Path = ep.Path[1:]
		}
	}
	return ep, nil
}

// ParseEndpoint accepts what git accepts for a remote that a controller can
// reach: http://, https://, ssh:// and the scp-like user@host:path. Errors
// wrap ErrInvalidCredentials and never quote a password.
func ParseEndpoint(raw string) (Endpoint, error) {
	if i := strings.Index(raw, "://"); i >= 0 {
		scheme := strings.ToLower(raw[:i])
		if scheme != "http" && scheme != "https" && scheme != "ssh" {
			return Endpoint{}, fmt.Errorf("%w: unsupported URL scheme %q (want https, http or ssh)", ErrInvalidCredentials, scheme)
		}
	}
	ep, err := ParseURL(raw)
	if err != nil {
		return Endpoint{}, fmt.Errorf("%w: %w", ErrInvalidCredentials, err)
	}
	return ep, nil
}

// Repository is the endpoint's path without slashes around it and without
// a trailing .git: org/app for https://host/org/app.git and
// git@host:org/app.git alike.
func (ep Endpoint) Repository() string {
	p := path.Clean("/" + ep.Path)
	return strings.TrimSuffix(strings.Trim(p, "/"), ".git")
}

// HostPort is the host with the URL's port, if it names one.
func (ep Endpoint) HostPort() string {
	if ep.Port == "" {
		return ep.Host
	}
	return net.JoinHostPort(ep.Host, ep.Port)
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
