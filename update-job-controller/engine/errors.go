package engine

import (
	"errors"
	"fmt"
	"time"

	"toolkit.dev/image-toolkit/pkg/forge"
	"toolkit.dev/image-toolkit/pkg/git"
)

// Kind is what failed, for a front end to turn into its own reasons.
type Kind string

const (
	// KindInvalid: the plan or its credentials cannot work whatever the
	// server says (always Terminal).
	KindInvalid Kind = "Invalid"
	// KindGit: a git operation (fetch, checkout, commit, push) failed.
	KindGit Kind = "Git"
	// KindAuthentication: a server refused the credentials, or our check
	// of the server (host key, TLS) refused it.
	KindAuthentication Kind = "Authentication"
	// KindUpdate: the files could not be updated.
	KindUpdate Kind = "Update"
	// KindImageMoved: BeforeCommit found a verified image's tag no
	// longer at the verified digest.
	KindImageMoved Kind = "ImageMoved"
	// KindPullRequest: the forge refused a call about the pull request.
	KindPullRequest Kind = "PullRequest"
	// KindRateLimited: the forge's rate limit is spent; RetryAfter says
	// when it resets.
	KindRateLimited Kind = "RateLimited"
)

// Error is a failed run: what failed, and whether retrying can help.
type Error struct {
	Kind Kind
	// Terminal: retrying cannot help until the plan or what it names
	// changes.
	Terminal bool
	// RetryAfter is when trying again makes sense; zero leaves it to the
	// front end.
	RetryAfter time.Duration
	Err        error
}

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

func terminal(kind Kind, err error) *Error  { return &Error{Kind: kind, Terminal: true, Err: err} }
func retryable(kind Kind, err error) *Error { return &Error{Kind: kind, Err: err} }

func invalidf(format string, args ...any) *Error {
	return terminal(KindInvalid, fmt.Errorf(format, args...))
}

// gitError classifies a git failure.
func gitError(err error) *Error {
	if errors.Is(err, git.ErrAuthentication) {
		return retryable(KindAuthentication, err)
	}
	return retryable(KindGit, err)
}

// forgeFailure classifies a forge's refusal: a refused token is
// KindAuthentication, a rate limit is retried after its reset, anything
// else is KindPullRequest with what the forge said, none of them Terminal
// (a token or a permission may be fixed meanwhile); only a feature the
// forge does not have (forge.ErrUnsupported) is KindInvalid, Terminal.
func forgeFailure(op string, err error) *Error {
	err = fmt.Errorf("%s: %w", op, err)
	var fe *forge.Error
	switch {
	case errors.Is(err, forge.ErrUnsupported):
		return terminal(KindInvalid, err)
	case !errors.As(err, &fe):
	case fe.Unauthorized():
		return retryable(KindAuthentication, err)
	case fe.RateLimited():
		return &Error{Kind: KindRateLimited, RetryAfter: fe.RetryAfter, Err: err}
	}
	return retryable(KindPullRequest, err)
}
