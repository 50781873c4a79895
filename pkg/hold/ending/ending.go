// Package ending decides whether a recorded hold still lasts, by the rules
// of pkg/hold's doc: a release, spec.holdFor after the commit that made it,
// or the policy choosing an image newer than the one rolled back from ends
// it. It works on the API's recorded holds (updatev1.Hold) and returns the
// API's reasons, so it is apart from pkg/hold, which the write-back engine
// imports without the API types.
package ending

import (
	"fmt"
	"strings"
	"time"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/apis/meta"
	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
	"toolkit.dev/image-toolkit/pkg/hold"
	"toolkit.dev/image-toolkit/pkg/setters"
)

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

// markerOf parses a hold's setter (NAMESPACE:NAME[:FIELD]); a setter that
// does not parse (none is recorded so) sets a whole reference.
func markerOf(setter string) setters.Marker {
	m, _ := setters.ParseMarkerValue(setter)
	return m
}

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
	key := hold.Policy(h.Setter)
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
