package conditions

import (
	"errors"
	"fmt"
	"strings"
	"syscall"
	"time"
)

// Failure is why a reconcile did not succeed, in the terms of conditions:
// the reason to report, whether retrying can help, and when to look again.
// Domain packages return typed errors of their own: a Classified error
// says what it means and AsFailure reads it; an error that is a fact of
// the domain alone (git.ErrAuthentication, policy.InvalidError) is turned
// into a Failure by the phase that calls the package, in one place. Record
// records it.
type Failure struct {
	Reason string
	// Stalled: retrying cannot help until the object or something it needs
	// changes.
	Stalled bool
	// RetryAfter is when to look again; zero leaves it to the reconciler
	// (for a Stalled failure: not until something changes).
	RetryAfter time.Duration
	Err        error
	// Secrets are values the message must not show (tokens, passwords a
	// server echoed back); the conditions and events get it redacted.
	Secrets []string
}

func (f *Failure) Error() string { return f.Err.Error() }
func (f *Failure) Unwrap() error { return f.Err }

// Stall is a failure retrying cannot fix.
func Stall(reason string, err error) *Failure {
	return &Failure{Reason: reason, Stalled: true, Err: err}
}

// Stallf is Stall with a formatted message.
func Stallf(reason, format string, args ...any) *Failure {
	return Stall(reason, fmt.Errorf(format, args...))
}

// Retry is a failure worth retrying. A failure caused by a full file
// system is StorageFull whatever step it hit: the operator's remedy is
// the same (free or grow the volume), and the step's own reason would send
// them to the registry or git server instead.
func Retry(reason string, err error) *Failure {
	if NoSpace(err) {
		reason = StorageFullReason
	}
	return &Failure{Reason: reason, Err: err}
}

// NoSpace reports whether err says a file system is full or over quota:
// ENOSPC or EDQUOT in its chain, or, for libgit2's errors, which carry only
// the message, strerror's words for them.
func NoSpace(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		return true
	}
	msg := strings.ToLower(err.Error())
	return strings.Contains(msg, "no space left on device") || strings.Contains(msg, "disk quota exceeded")
}

// Retryf is Retry with a formatted message.
func Retryf(reason, format string, args ...any) *Failure {
	return Retry(reason, fmt.Errorf(format, args...))
}

// After sets when to look again.
func (f *Failure) After(d time.Duration) *Failure {
	f.RetryAfter = d
	return f
}

// Redacting names values the failure's message must not show.
func (f *Failure) Redacting(secrets ...string) *Failure {
	f.Secrets = append(f.Secrets, secrets...)
	return f
}

// Classified is implemented by a domain package's errors that know what
// they mean for the object the package works for: the reason to report,
// and whether retrying cannot help (stalled). The package declares its
// errors and their classification beside them, in its own terms, and
// builds no Failure; Classify reads them. The outermost one in an error's
// chain wins, so a package that wraps another's error says what it means
// for its own object.
type Classified interface {
	error
	Classify() (reason string, stalled bool)
}

// Classify finds what err means for a reconcile: the Failure in its chain,
// else the Failure a Classified error in its chain says (a retried one is
// StorageFull when a file system is full, as with Retry). It reports false
// for an error that is neither, which is unexpected and retried.
func Classify(err error) (*Failure, bool) {
	var f *Failure
	if errors.As(err, &f) {
		return f, true
	}
	var c Classified
	if !errors.As(err, &c) {
		return nil, false
	}
	reason, stalled := c.Classify()
	if stalled {
		return Stall(reason, err), true
	}
	return Retry(reason, err), true
}

// AsFailure is err's Failure (Classify); any other error is a retryable
// failure with reason Failed.
func AsFailure(err error) *Failure {
	if f, ok := Classify(err); ok {
		return f
	}
	return Retry(FailedReason, err)
}

// Record marks f on obj with the message msg (already redacted): Stalled
// for a failure retrying cannot fix, else Ready=False, both with f's
// reason. It returns f's RetryAfter. It is the one function that writes
// a failure: pkg/runtime/reconcile calls it for every failure a phase
// returns, and a phase calls it itself only for a failure that is an
// outcome it records rather than its own (an UpdateJob's failed attempt,
// an automation's failed job).
func Record(obj Setter, f *Failure, msg string) time.Duration {
	if f.Stalled {
		MarkStalled(obj, f.Reason, "%s", msg)
	} else {
		MarkFailed(obj, f.Reason, "%s", msg)
	}
	return f.RetryAfter
}
