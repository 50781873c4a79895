package forge

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"

	"toolkit.dev/image-toolkit/pkg/git"
)

// Forge is one forge in the registry: its provider name, how its hosts are
// told, where its API is, and its client. Each adapter is one such value
// (update-job-controller/forges has the built-in ones), so that adding a
// forge is that value, its test and, for the controllers, the API's
// provider enum, and nothing that knows the others.
type Forge struct {
	Provider Provider
	// Hosts are the forge's public hosts (github.com): a repository there
	// is this forge's.
	Hosts []string
	// Words are what the host names of self-hosted instances usually hold
	// ("gitlab" in gitlab.example.com).
	Words []string
	// APIURL is the API's root for a repository on host (hostport keeps
	// the port of an http(s) URL), reached over scheme; nil is
	// scheme://hostport/.
	APIURL func(scheme, host, hostport string) string
	// CommitPage is the path of a commit's web page under its
	// repository's, before the commit's hash ("/commit/" on GitHub and
	// Gitea, "/-/commit/" on GitLab); empty when the forge has none to
	// link to.
	CommitPage string
	// ComparePage is the path (and query) under the repository's page of
	// the changes from commit from to commit to; nil when the forge has
	// no such page to link to.
	ComparePage func(from, to string) string
	// Web is the host and path (no slashes at its ends) of the
	// repository's web page, from its git URL's (an https page's host,
	// or an SSH URL's), where the forge serves git under another path
	// (Bitbucket Data Center's scm/KEY/slug is projects/KEY/repos/slug on
	// the web); nil keeps them.
	Web func(host, path string) (string, string)
	// Subgroups is set when repositories may be nested deeper than
	// owner/name (GitLab's groups).
	Subgroups bool
	// Flat is set when a repository may be one name alone, not under an
	// owner (Gerrit's projects).
	Flat bool
	// Repository reads the repository's path, as Options.Repository, from
	// the git URL's host and path (no slashes or .git at its ends) where
	// the forge serves git under another path than its API names
	// (Bitbucket Data Center's scm/KEY/slug is KEY/slug, Azure DevOps'
	// org/project/_git/repo is org/project/repo); nil keeps the path.
	Repository func(host, path string) (string, error)
	// New makes the client; hc is Options.HTTPClient wrapped with the
	// rate-limit handling and timeouts.
	New func(opts Options, hc *http.Client) (Client, error)
}

var registry struct {
	sync.RWMutex
	forges map[Provider]Forge
}

// Register adds a forge, for every Resolve and New after it (a program
// registers its forges at start, before any job). Registering a provider
// twice is a programming error and panics.
func Register(f Forge) {
	registry.Lock()
	defer registry.Unlock()
	if registry.forges == nil {
		registry.forges = map[Provider]Forge{}
	}
	if _, dup := registry.forges[f.Provider]; dup {
		panic("forge: " + string(f.Provider) + " registered twice")
	}
	registry.forges[f.Provider] = f
}

func lookup(p Provider) (Forge, bool) {
	registry.RLock()
	defer registry.RUnlock()
	f, ok := registry.forges[p]
	return f, ok
}

// Providers are the registered forges' names, sorted.
func Providers() []Provider {
	registry.RLock()
	defer registry.RUnlock()
	var out []Provider
	for p := range registry.forges {
		out = append(out, p)
	}
	slices.Sort(out)
	return out
}

// providerList is "a, b or c", for messages.
func providerList() string {
	var names []string
	for _, p := range Providers() {
		names = append(names, string(p))
	}
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// detect tells the forge of a host (lower case): one of its public hosts,
// else the one forge whose word the name holds. A name holding the words
// of two forges is not guessed at.
func detect(host string) (Forge, error) {
	registry.RLock()
	defer registry.RUnlock()
	var byWord []Forge
	for _, f := range registry.forges {
		if slices.Contains(f.Hosts, host) {
			return f, nil
		}
		if slices.ContainsFunc(f.Words, func(w string) bool { return strings.Contains(host, w) }) {
			byWord = append(byWord, f)
		}
	}
	switch len(byWord) {
	case 1:
		return byWord[0], nil
	case 0:
		return Forge{}, fmt.Errorf("cannot tell which forge %s is: name its provider, %s (an automation's spec.git.push.pullRequest.provider, tk-image's --pr-provider)", host, providerList())
	}
	slices.SortFunc(byWord, func(a, b Forge) int { return strings.Compare(string(a.Provider), string(b.Provider)) })
	return Forge{}, fmt.Errorf("cannot tell which forge %s is: its name fits both %s and %s; name its provider (an automation's spec.git.push.pullRequest.provider, tk-image's --pr-provider)",
		host, byWord[0].Provider, byWord[1].Provider)
}

// CommitURL is the web page of commit on the forge that serves address:
// the forge of provider when it is set, else the registered forge its host
// tells, as Resolve tells it. It is empty when no registered forge serves
// address (a plain git server has no commit pages: a link would 404), or
// address is not one a browser opens (a local path). SSH addresses map to
// their host's https pages.
func CommitURL(address string, provider Provider, commit string) string {
	base := WebURL(address)
	if base == "" || commit == "" {
		return ""
	}
	f, ok := lookup(provider)
	if provider == "" {
		u, _ := url.Parse(base)
		var err error
		f, err = detect(strings.ToLower(u.Hostname()))
		ok = err == nil
	}
	if !ok || f.CommitPage == "" {
		return ""
	}
	if f.Web != nil {
		u, err := url.Parse(base)
		if err != nil {
			return ""
		}
		host, path := f.Web(u.Host, strings.Trim(u.Path, "/"))
		u.Host, u.Path = host, "/"+path
		base = u.String()
	}
	return base + f.CommitPage + url.PathEscape(commit)
}

// CompareURL is the web page of the changes from commit from to commit
// to in the repository at address: on the forge of provider when it is
// set, else the registered forge its host tells; empty when none does, or
// the forge has no such page.
func CompareURL(address string, provider Provider, from, to string) string {
	base := WebURL(address)
	if base == "" || from == "" || to == "" {
		return ""
	}
	u, err := url.Parse(base)
	if err != nil {
		return ""
	}
	f, ok := lookup(provider)
	if provider == "" {
		f, err = detect(strings.ToLower(u.Hostname()))
		ok = err == nil
	}
	if !ok || f.ComparePage == nil {
		return ""
	}
	if f.Web != nil {
		host, path := f.Web(u.Host, strings.Trim(u.Path, "/"))
		u.Host, u.Path = host, "/"+path
	}
	return u.String() + f.ComparePage(url.PathEscape(from), url.PathEscape(to))
}

// WebURL is a git address as a web address: https for SSH (on the host's
// https port), no credentials, no .git suffix; empty when it has no host.
// The address is read by pkg/git's one parser, git's scp-like form too.
func WebURL(address string) string {
	ep, err := git.ParseURL(address)
	if err != nil || ep.Host == "" {
		return ""
	}
	u := url.URL{Scheme: ep.Scheme, Host: ep.HostPort(), Path: strings.TrimSuffix(strings.TrimSuffix("/"+strings.TrimPrefix(ep.Path, "/"), "/"), ".git")}
	switch ep.Scheme {
	case "ssh":
		u.Scheme, u.Host = "https", ep.Host
	case "http", "https":
	default:
		return ""
	}
	return u.String()
}
