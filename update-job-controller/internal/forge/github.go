package forge

import (
	"errors"
	"net/http"
)

// Placeholder until the GitHub adapter lands (being written now).
func newGitHub(opts Options, hc *http.Client) (Client, error) {
	return nil, errors.New("github: not written yet")
}
