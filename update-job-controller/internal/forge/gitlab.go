package forge

import (
	"errors"
	"net/http"
)

// Placeholder until the GitLab adapter lands (being written now).
func newGitLab(opts Options, hc *http.Client) (Client, error) {
	return nil, errors.New("gitlab: not written yet")
}
