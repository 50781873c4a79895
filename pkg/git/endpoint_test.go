package git

import (
	"errors"
	"strings"
	"testing"
)

// One parse serves the transports, the forges and the webhook receiver:
// every spelling git accepts comes apart into the same pieces.
func TestParseURLTakesEverySpellingApart(t *testing.T) {
	tests := []struct {
		raw  string
		want Endpoint
		repo string
	}{
		{"https://github.com/org/app.git", Endpoint{Scheme: "https", Host: "github.com", Path: "/org/app.git"}, "org/app"},
		{"HTTPS://Git.Example.com/Org/App/", Endpoint{Scheme: "https", Host: "Git.Example.com", Path: "/Org/App/"}, "Org/App"},
		{"http://gitea:3000/org/app", Endpoint{Scheme: "http", Host: "gitea", Port: "3000", Path: "/org/app"}, "org/app"},
		{"https://user:token@git.example.com/group/sub/app.git", Endpoint{Scheme: "https", Host: "git.example.com", User: "user", Path: "/group/sub/app.git"}, "group/sub/app"},
		{"http://[::1]:8080/org/app", Endpoint{Scheme: "http", Host: "::1", Port: "8080", Path: "/org/app"}, "org/app"},
		{"ssh://git@github.com/org/app.git", Endpoint{Scheme: "ssh", Host: "github.com", Port: "22", User: "git", Path: "/org/app.git"}, "org/app"},
		{"ssh://git@git.example.com:2222/org/app", Endpoint{Scheme: "ssh", Host: "git.example.com", Port: "2222", User: "git", Path: "/org/app"}, "org/app"},
		{"ssh://host/~user/app.git", Endpoint{Scheme: "ssh", Host: "host", Port: "22", Path: "~user/app.git"}, "~user/app"},
		{"git@github.com:org/app.git", Endpoint{Scheme: "ssh", Host: "github.com", Port: "22", User: "git", Path: "org/app.git"}, "org/app"},
		{"github.com:org/app", Endpoint{Scheme: "ssh", Host: "github.com", Port: "22", Path: "org/app"}, "org/app"},
		{"git@host:~user/app", Endpoint{Scheme: "ssh", Host: "host", Port: "22", User: "git", Path: "~user/app"}, "~user/app"},
		{"git://git.example.com/org/app.git", Endpoint{Scheme: "git", Host: "git.example.com", Path: "/org/app.git"}, "org/app"},
	}
	for _, tt := range tests {
		got, err := ParseURL(tt.raw)
		if err != nil {
			t.Errorf("ParseURL(%q): %v", tt.raw, err)
			continue
		}
		tt.want.URL = tt.raw
		if got != tt.want {
			t.Errorf("ParseURL(%q) = %+v, want %+v", tt.raw, got, tt.want)
		}
		if r := got.Repository(); r != tt.repo {
			t.Errorf("ParseURL(%q).Repository() = %q, want %q", tt.raw, r, tt.repo)
		}
	}
}

func TestParseURLRefusesWhatIsNotARemote(t *testing.T) {
	for _, raw := range []string{"", "app", "/srv/git/app.git", "git@host", "https://", "https://:pass@/x", "http://%zz/"} {
		if ep, err := ParseURL(raw); err == nil {
			t.Errorf("ParseURL(%q) = %+v, want an error", raw, ep)
		}
	}
	_, err := ParseURL("https://user:s3cret@%zz/")
	if err == nil || strings.Contains(err.Error(), "s3cret") {
		t.Errorf("error %v: want one that does not quote the password", err)
	}
}

// ParseEndpoint narrows ParseURL to what a controller can reach, and its
// errors say the spec (not the server) is at fault.
func TestParseEndpointAcceptsReachableSchemesOnly(t *testing.T) {
	for raw, want := range map[string]string{
		"https://h/o/r":     "",
		"ssh://h/o/r":       "",
		"git@h:o/r":         "",
		"git://h/o/r":       `unsupported URL scheme "git"`,
		"file:///srv/r.git": `unsupported URL scheme "file"`,
		"not a url":         "neither a URL nor user@host:path",
		"http://%zz/":       "not a valid URL",
	} {
		_, err := ParseEndpoint(raw)
		switch {
		case want == "" && err != nil:
			t.Errorf("ParseEndpoint(%q): %v", raw, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want) || !errors.Is(err, ErrInvalidCredentials)):
			t.Errorf("ParseEndpoint(%q) = %v, want an ErrInvalidCredentials error with %q", raw, err, want)
		}
	}
}

func TestHostPortKeepsTheURLsPort(t *testing.T) {
	for raw, want := range map[string]string{
		"https://h/o/r":     "h",
		"http://h:3000/o/r": "h:3000",
		"ssh://h:2222/o/r":  "h:2222",
		"http://[::1]:80/o": "[::1]:80",
	} {
		ep, _ := ParseURL(raw)
		if got := ep.HostPort(); got != want {
			t.Errorf("ParseURL(%q).HostPort() = %q, want %q", raw, got, want)
		}
	}
}
