package gitsource

import (
	"strings"

	"toolkit.dev/image-toolkit/pkg/git"
)

// RepositoryKey names a repository the same way whichever URL reaches it:
// the host, lower case, without user or port, then the path, lower case,
// without a trailing .git or slashes. https://Git.example.com/Org/App.git,
// ssh://git@git.example.com:2222/org/app and git@git.example.com:org/app
// are one repository. Dropping the port and case can make two
// repositories one key; a push then runs an automation that finds nothing
// new, which costs one branch read, never a wrong commit: the push is a
// trigger and the automation reads the branch itself. The URL is taken
// apart by git.ParseURL, the parse the transports and forges use.
func RepositoryKey(raw string) (string, bool) {
	ep, err := git.ParseURL(strings.TrimSpace(raw))
	if err != nil {
		return "", false
	}
	repo := ep.Repository()
	if ep.Host == "" || repo == "" {
		return "", false
	}
	return strings.ToLower(ep.Host) + "/" + strings.ToLower(repo), true
}
