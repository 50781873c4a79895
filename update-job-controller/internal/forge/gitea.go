package forge

import (
	"errors"
	"net/http"
)

// Placeholder until the Gitea adapter lands (being written now).
func newGitea(opts Options, hc *http.Client) (Client, error) {
	return nil, errors.New("gitea: not written yet")
}
