package gitsource

import (
	"errors"
	"fmt"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/git"
	"toolkit.dev/image-toolkit/pkg/runtime/conditions"
)

// Problem is what is wrong with an automation's source, in this package's
// terms. What each means for the automation's conditions is one table,
// problems, which Error.Classify reads.
type Problem int

const (
	// InvalidSpec: the automation's spec cannot work as written.
	InvalidSpec Problem = iota + 1
	// InvalidSource: the source object cannot be written to as it is.
	InvalidSource
	// NotABranch: an Application's targetRevision is a tag, a commit or
	// a range, which no job can push to.
	NotABranch
	// SourceMissing: the source object does not exist, or no Application
	// matches; it may yet be created.
	SourceMissing
	// KindMissing: the source's kind is not installed in the cluster.
	KindMissing
	// Denied: the controller may not use the source or its Secrets here.
	Denied
	// SecretMissing: a Secret the source names does not exist (yet).
	SecretMissing
	// SecretInvalid: the Secrets hold credentials that cannot work.
	SecretInvalid
	// AuthenticationRefused: a server or a provider refused the
	// credentials, or our check of the server refused it.
	AuthenticationRefused
	// GitFailed: a git operation on the repository failed.
	GitFailed
)

// problems says what each Problem means for the automation: the reason
// its conditions report, and whether it is Stalled (retrying cannot help
// until the automation, its source or its Secrets change). Things that may
// yet appear are retried: Secrets and sources are not watched.
var problems = map[Problem]struct {
	reason  string
	stalled bool
}{
	InvalidSpec:           {conditions.InvalidSpecReason, true},
	InvalidSource:         {imagev1.InvalidSourceReason, true},
	NotABranch:            {imagev1.TargetRevisionNotBranchReason, true},
	SourceMissing:         {imagev1.SourceNotFoundReason, false},
	KindMissing:           {imagev1.SourceNotFoundReason, true},
	Denied:                {conditions.AccessDeniedReason, true},
	SecretMissing:         {conditions.SecretNotFoundReason, false},
	SecretInvalid:         {imagev1.InvalidSecretReason, true},
	AuthenticationRefused: {conditions.AuthenticationFailedReason, false},
	GitFailed:             {conditions.GitOperationFailedReason, false},
}

// Error is a problem with the automation's spec, its source or its
// Secrets: a fact about the automation, which the controller records as
// it is (it is conditions.Classified) and explain prints. Its message is
// Err's.
type Error struct {
	Problem Problem
	Err     error
}

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// Classify is the automation's reason for the problem, and whether it is
// Stalled.
func (e *Error) Classify() (string, bool) {
	p := problems[e.Problem]
	return p.reason, p.stalled
}

func problemf(p Problem, format string, args ...any) *Error {
	return &Error{Problem: p, Err: fmt.Errorf(format, args...)}
}

// GitError is err, from a git operation on the source's repository, as
// the problem it is: AuthenticationRefused when the server (or our check
// of it) refused, else GitFailed.
func GitError(err error) *Error {
	return &Error{Problem: gitProblem(err), Err: err}
}

func gitProblem(err error) Problem {
	if errors.Is(err, git.ErrAuthentication) {
		return AuthenticationRefused
	}
	return GitFailed
}
