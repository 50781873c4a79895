package forge

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
)

// Forge is one forge in the registry: its provider name, how its hosts are
// told, where its API is, and its client. Each forge registers itself from
// its own file (github.go, gitlab.go, gitea.go), so that adding a forge
// touches that file, its test and the API's provider enum, and nothing
// that knows the others.
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
	// Subgroups is set when repositories may be nested deeper than
	// owner/name (GitLab's groups).
	Subgroups bool
	// New makes the client; hc is Options.HTTPClient wrapped with the
	// rate-limit handling and timeouts.
	New func(opts Options, hc *http.Client) (Client, error)
}

var registry struct {
	sync.RWMutex
	forges map[Provider]Forge
}

// register adds a forge; registering a provider twice is a programming
// error.
func register(f Forge) {
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
