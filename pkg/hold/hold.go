// Package hold decides when a person's edit of a marked value wins over
// the policy: whether a value is held, and when a hold ends.
//
// A hold is a hand rollback or pin of a value the automation had written:
// the commit that last changed the value's line is not the automation's,
// and the value that commit replaced was. The second half matters as much
// as the first. Every repository starts with values a person wrote (the
// manifests as first committed), and an automation that counted those as
// holds would never update anything; only replacing what the automation
// itself wrote says "not this image". Both facts come from the history
// the update job already has in its mirror (a blame of one line at the
// checkout and at the commit's parent), so finding holds costs no clone;
// and the automation's commits are told by their author, the
// spec.git.commit.author the jobs write with, which is what a reader of
// git log sees too.
//
// A hold lasts until the first of:
//   - a release: tk-image release, or the release-holds annotation;
//   - spec.holdFor after the commit that made it;
//   - the policy choosing an image newer than the one rolled back from,
//     by the policy's own order: the person rolled back from a bad image,
//     and a newer one is what the policy was waiting for. Where the policy
//     cannot order the two (build-time ranking, a promotion, a name or
//     digest marker), any other choice than the one rolled back from ends
//     it.
//
// The hold is recorded per marked value (file, marker, commit): other
// markers of the same file and policy keep updating, and a later hand
// edit of a released value is a new hold.
//
// This package is the first half, what the update job reads in git: it
// imports no API type, so that the write-back engine stays free of
// Kubernetes. The second half, whether a recorded hold (the API's
// updatev1.Hold) still lasts, is pkg/hold/ending, which the automation
// controller and tk-image use.
package hold

import (
	"strings"

	"toolkit.dev/image-toolkit/pkg/setters"
)

// Line is the commit that last changed a line: its hash and author email.
type Line struct {
	Commit, Email string
}

// Seen is what the job reads about one marked value it would change.
type Seen struct {
	// Automation is the email the automation's commits are authored with.
	Automation string
	// Last is the commit that last changed the value's line.
	Last Line
	// Previous is the value the marker had in Last's parent, and Before
	// the commit that last changed that line there; HasPrevious is false
	// when the parent had no such marker (a new file or marker, a root
	// commit).
	Previous    string
	HasPrevious bool
	Before      Line
	// Value is the value now.
	Value string
}

// Held reports whether the value is held: a person replaced the value the
// automation had written.
func Held(s Seen) bool {
	return s.HasPrevious && s.Previous != s.Value && !ByAutomation(s.Last, s.Automation) && ByAutomation(s.Before, s.Automation)
}

// ByAutomation reports whether the automation, whose commits are authored
// with email, made the commit of l.
func ByAutomation(l Line, email string) bool {
	return email != "" && strings.EqualFold(strings.TrimSpace(l.Email), strings.TrimSpace(email))
}

// Policy returns the policy key (NAMESPACE:NAME) a setter names.
func Policy(setter string) string {
	if m, ok := setters.ParseMarkerValue(setter); ok {
		return m.Policy
	}
	return setter
}
