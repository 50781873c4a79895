package gitsource

import (
	neturl "net/url"
	"strings"
)

// RepositoryKey names a repository the same way whichever URL reaches it:
// the host, lower case, without user or port, then the path, lower case,
// without a trailing .git or slashes. https://Git.example.com/Org/App.git,
// ssh://git@git.example.com:2222/org/app and git@git.example.com:org/app
// are one repository. Dropping the port and case can make two
// repositories one key; a push then runs an automation that finds nothing
// new, which costs one branch read, never a wrong commit: the push is a
// trigger and the automation reads the branch itself.
func RepositoryKey(raw string) (string, bool) {
	raw = strings.TrimSpace(raw)
	var host, path string
	if u, err := neturl.Parse(raw); err == nil && u.Scheme != "" && u.Host != "" {
		host, path = u.Hostname(), u.Path
	} else if at, rest, ok := strings.Cut(raw, "@"); ok && !strings.Contains(at, "/") {
		// scp-like: user@host:path
		h, p, ok := strings.Cut(rest, ":")
		if !ok {
			return "", false
		}
		host, path = h, p
	} else {
		return "", false
	}
	path = strings.Trim(path, "/")
	path = strings.TrimSuffix(path, ".git")
	path = strings.Trim(path, "/")
	if host == "" || path == "" {
		return "", false
	}
	return strings.ToLower(host) + "/" + strings.ToLower(path), true
}
