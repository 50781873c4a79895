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
package hold

import (
	"fmt"
	"strings"
	"time"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/apis/meta"
	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
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

// Rank says whether the policy prefers tag a to tag b; ok is false when
// the policy cannot tell without more than the tags.
type Rank func(a, b string) (newer, ok bool)

// Input is what decides whether a recorded hold still lasts.
type Input struct {
	Hold updatev1.Hold
	// Choice is the policy's image now; nil when the policy is gone or
	// has none.
	Choice *meta.ImageRef
	// Rank orders the policy's tags; nil when the policy has no order.
	Rank Rank
	// HoldFor is spec.holdFor; zero is none.
	HoldFor time.Duration
	// Released is set when a release names the hold.
	Released bool
	Now      time.Time
}

// Decision says whether a hold ended, and why.
type Decision struct {
	// Ended is the reason it ended (imagev1.HoldReleasedReason,
	// HoldExpiredReason, NewerImageReason); empty while it lasts.
	Ended string
	// Ends is when holdFor ends it; nil without holdFor.
	Ends *time.Time
	// Message says why it lasts or ended.
	Message string
}

// Decide says whether the hold still lasts.
func Decide(in Input) Decision {
	h := in.Hold
	var d Decision
	if in.HoldFor > 0 && h.Since != nil {
		ends := h.Since.Add(in.HoldFor)
		d.Ends = &ends
	}
	who := fmt.Sprintf("%s set by %s in %s", h.Value, orUnknown(h.Author), short(h.Commit))
	switch {
	case in.Released:
		d.Ended, d.Message = imagev1.HoldReleasedReason, who+": released"
	case d.Ends != nil && !in.Now.Before(*d.Ends):
		d.Ended, d.Message = imagev1.HoldExpiredReason, fmt.Sprintf("%s: holdFor %s has passed", who, in.HoldFor)
	case in.Choice != nil && newer(h, *in.Choice, in.Rank):
		want, _ := markerOf(h.Setter).Value(*in.Choice, h.Value)
		d.Ended, d.Message = imagev1.NewerImageReason, fmt.Sprintf("%s: the policy chose %s, newer than %s rolled back from", who, want, h.From)
	default:
		d.Message = fmt.Sprintf("%s over %s; held until the policy chooses a newer image than %s", who, h.From, h.From)
		if in.Choice == nil {
			d.Message = fmt.Sprintf("%s over %s; held: the policy has no image", who, h.From)
		}
		if d.Ends != nil {
			d.Message += ", a release, or " + d.Ends.UTC().Format(time.RFC3339)
		} else {
			d.Message += " or a release"
		}
	}
	return d
}

// newer reports whether the choice is newer than the value the hold
// rolled back from, as the marker's field can tell.
func newer(h updatev1.Hold, choice meta.ImageRef, rank Rank) bool {
	m := markerOf(h.Setter)
	want, ok := m.Value(choice, h.Value)
	if !ok || want == h.From || want == h.Value {
		return false
	}
	var from string
	switch m.Field {
	case setters.FieldTag:
		from = h.From
	case setters.FieldRef:
		ref, err := setters.ParseImage(h.From)
		if err != nil || !setters.SameRepository(ref.Name, choice.Name) {
			// Another image altogether: no order to ask.
			return true
		}
		from = ref.Tag
	default:
		// Names and digests have no order: another one is what ends it.
		return true
	}
	if from == choice.Tag {
		// The same tag again (a new digest): not newer.
		return false
	}
	if rank == nil {
		return true
	}
	n, ok := rank(choice.Tag, from)
	return n || !ok
}

// markerOf parses a setter (NAMESPACE:NAME[:FIELD]).
func markerOf(setter string) setters.Marker {
	parts := strings.SplitN(setter, ":", 3)
	if len(parts) == 3 {
		return setters.Marker{Policy: parts[0] + ":" + parts[1], Field: setters.Field(parts[2])}
	}
	return setters.Marker{Policy: setter}
}

// Policy returns the policy key (NAMESPACE:NAME) a setter names.
func Policy(setter string) string { return markerOf(setter).Policy }

func orUnknown(s string) string {
	if s == "" {
		return "someone"
	}
	return s
}

func short(commit string) string {
	if len(commit) > 12 {
		return commit[:12]
	}
	return commit
}

// Matches reports whether a release naming sel covers the hold: sel is
// empty (all holds), the hold's setter, its policy key, or its policy's
// name.
func Matches(h updatev1.Hold, sel []string) bool {
	if len(sel) == 0 {
		return true
	}
	key := Policy(h.Setter)
	_, name, _ := strings.Cut(key, ":")
	for _, s := range sel {
		if s == h.Setter || s == key || s == name || s == h.Path {
			return true
		}
	}
	return false
}

// ParseRelease splits the release-holds annotation into its token and the
// setters, policies or paths it names.
func ParseRelease(value string) (token string, sel []string) {
	f := strings.Fields(value)
	if len(f) == 0 {
		return "", nil
	}
	return f[0], f[1:]
}
