package writeback

import (
	"errors"
	"testing"
)

// Only remotes the engine fetches pass: a file:// URL, another scheme or a
// path is refused with what it is.
func TestLocalRepositoryIsRefused(t *testing.T) {
	for raw, want := range map[string]string{
		"https://github.com/org/fleet.git": "",
		"http://127.0.0.1:8080/fleet.git":  "",
		"ssh://git@host:2222/org/fleet":    "",
		"git@github.com:org/fleet.git":     "",
		"file:///srv/fleet.git":            "is a local repository (file://)",
		"FILE:///srv/fleet.git":            "is a local repository (file://)",
		"git://host/fleet":                 "has the scheme git",
		"/srv/fleet.git":                   "is a local path",
		"./fleet":                          "is a local path",
		"fleet":                            "is a local path",
		`C:\fleet`:                         "is a local path",
	} {
		if got := LocalRepository(raw); got != want {
			t.Errorf("LocalRepository(%q) = %q, want %q", raw, got, want)
		}
	}
	if err := (&Plan{Repository: "file:///srv/fleet.git"}).Validate(); !errors.Is(err, ErrInvalid) {
		t.Errorf("a file:// plan: %v, want an invalid plan", err)
	}
}
