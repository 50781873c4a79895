package ending

import (
	"strings"
	"testing"
	"time"

	"github.com/Masterminds/semver/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/apis/meta"
	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
)

func semverRank(a, b string) (bool, bool) {
	va, errA := semver.StrictNewVersion(a)
	vb, errB := semver.StrictNewVersion(b)
	if errA != nil || errB != nil {
		return false, false
	}
	return va.GreaterThan(vb), true
}

func TestDecide(t *testing.T) {
	since := metav1.NewTime(time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC))
	tagHold := updatev1.Hold{HoldKey: updatev1.HoldKey{Path: "apps/prod.yaml", Setter: "apps:podinfo:tag", Commit: "0123456789abcdef0123"},
		Value: "1.1.0", From: "1.2.0", Author: "Jane <jane@example.com>", Since: &since}
	refHold := tagHold
	refHold.Setter, refHold.Value, refHold.From = "apps:podinfo", "ghcr.io/x/podinfo:1.1.0", "ghcr.io/x/podinfo:1.2.0"
	digestHold := tagHold
	digestHold.Setter, digestHold.Value, digestHold.From = "apps:podinfo:digest", "sha256:aaa", "sha256:bbb"
	img := func(tag string) *meta.ImageRef { return &meta.ImageRef{Name: "ghcr.io/x/podinfo", Tag: tag} }
	now := since.Add(time.Hour)
	for _, c := range []struct {
		name  string
		in    Input
		ended string
		msg   string
	}{
		{"the policy still chooses the image rolled back from", Input{Hold: tagHold, Choice: img("1.2.0"), Rank: semverRank, Now: now}, "", "held until the policy chooses a newer image than 1.2.0"},
		{"the policy chooses an older image than rolled back from", Input{Hold: tagHold, Choice: img("1.1.5"), Rank: semverRank, Now: now}, "", "held until"},
		{"the policy chooses a newer image", Input{Hold: tagHold, Choice: img("1.2.1"), Rank: semverRank, Now: now}, imagev1.NewerImageReason, "the policy chose 1.2.1, newer than 1.2.0"},
		{"a whole reference: a newer tag of the same image", Input{Hold: refHold, Choice: img("1.3.0"), Rank: semverRank, Now: now}, imagev1.NewerImageReason, "ghcr.io/x/podinfo:1.3.0"},
		{"a whole reference: the same tag with a new digest is not newer", Input{Hold: refHold, Choice: &meta.ImageRef{Name: "ghcr.io/x/podinfo", Tag: "1.2.0", Digest: "sha256:ccc"}, Rank: semverRank, Now: now}, "", "held"},
		{"a policy without an order: another tag ends it", Input{Hold: tagHold, Choice: img("main-abc"), Now: now}, imagev1.NewerImageReason, ""},
		{"a policy without an order: the same tag lasts", Input{Hold: tagHold, Choice: img("1.2.0"), Now: now}, "", ""},
		{"the rank cannot tell: another tag ends it", Input{Hold: tagHold, Choice: img("latest"), Rank: semverRank, Now: now}, imagev1.NewerImageReason, ""},
		{"the policy moved to the held value: nothing to hold against", Input{Hold: tagHold, Choice: img("1.1.0"), Rank: semverRank, Now: now}, "", ""},
		{"a digest marker: another digest ends it", Input{Hold: digestHold, Choice: &meta.ImageRef{Name: "ghcr.io/x/podinfo", Tag: "1.2.0", Digest: "sha256:ccc"}, Now: now}, imagev1.NewerImageReason, ""},
		{"a digest marker: the same digest lasts", Input{Hold: digestHold, Choice: &meta.ImageRef{Name: "ghcr.io/x/podinfo", Tag: "1.2.0", Digest: "sha256:bbb"}, Now: now}, "", ""},
		{"released", Input{Hold: tagHold, Choice: img("1.2.0"), Rank: semverRank, Released: true, Now: now}, imagev1.HoldReleasedReason, "released"},
		{"holdFor not passed", Input{Hold: tagHold, Choice: img("1.2.0"), Rank: semverRank, HoldFor: 2 * time.Hour, Now: now}, "", "2026-11-26T12:00:00Z"},
		{"holdFor passed", Input{Hold: tagHold, Choice: img("1.2.0"), Rank: semverRank, HoldFor: time.Hour, Now: now}, imagev1.HoldExpiredReason, "holdFor 1h0m0s has passed"},
		{"the policy has no image", Input{Hold: tagHold, Rank: semverRank, Now: now}, "", "the policy has no image"},
	} {
		d := Decide(c.in)
		if d.Ended != c.ended || !strings.Contains(d.Message, c.msg) {
			t.Errorf("%s: ended %q (%s), want %q (%q)", c.name, d.Ended, d.Message, c.ended, c.msg)
		}
		if c.in.HoldFor > 0 && (d.Ends == nil || !d.Ends.Equal(since.Add(c.in.HoldFor))) {
			t.Errorf("%s: ends %v", c.name, d.Ends)
		}
	}
}

func TestRelease(t *testing.T) {
	h := updatev1.Hold{HoldKey: updatev1.HoldKey{Path: "apps/prod.yaml", Setter: "apps:podinfo:tag", Commit: "c"}}
	for _, c := range []struct {
		value string
		want  bool
	}{
		{"2026-11-26T10:00:00Z", true},
		{"2026-11-26T10:00:00Z apps:podinfo:tag", true},
		{"2026-11-26T10:00:00Z apps:podinfo", true},
		{"2026-11-26T10:00:00Z podinfo", true},
		{"2026-11-26T10:00:00Z apps/prod.yaml", true},
		{"2026-11-26T10:00:00Z other apps:redis", false},
	} {
		token, sel := ParseRelease(c.value)
		if token != "2026-11-26T10:00:00Z" || Matches(h, sel) != c.want {
			t.Errorf("%q: token %q, matches %t, want %t", c.value, token, Matches(h, sel), c.want)
		}
	}
}
