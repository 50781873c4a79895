package selection

import (
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/apis/meta"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func policy(name string, lbls map[string]string, tag string) imagev1.ImagePolicy {
	p := imagev1.ImagePolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, Labels: lbls}}
	p.Spec.ImageRepositoryRef = meta.NamespacedObjectReference{Name: name}
	if tag != "" {
		p.Status.LatestRef = &meta.ImageRef{Name: "ghcr.io/org/" + name, Tag: tag}
		p.Status.LatestRefTime = &metav1.MicroTime{Time: t0}
	}
	return p
}

func automation(selector map[string]string, discover bool, followed ...string) *imagev1.ImageUpdateAutomation {
	a := &imagev1.ImageUpdateAutomation{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "auto"}}
	if selector != nil {
		a.Spec.PolicySelector = &metav1.LabelSelector{MatchLabels: selector}
	}
	if discover {
		a.Spec.Discover = &imagev1.DiscoverSpec{}
	}
	for _, f := range followed {
		a.Status.Discovered = append(a.Status.Discovered, imagev1.DiscoveredImage{DiscoveredImage: meta.DiscoveredImage{ImageRef: meta.ImageRef{Name: "ghcr.io/org/" + f}, Policy: f}})
	}
	return a
}

// summary is each policy as name=how, how being the value it applies or
// why it applies none.
func summary(s *Selection) string {
	var out []string
	set := map[string]string{}
	for _, st := range s.Setters {
		set[st.Policy] = st.Tag
	}
	for _, p := range s.Policies {
		how := p.Why()
		if p.Applied() {
			how = string(p.By) + ":" + set[p.Key]
		}
		out = append(out, p.Name+"="+how)
	}
	return strings.Join(out, " ")
}

func TestOf(t *testing.T) {
	team := map[string]string{"team": "a"}
	tests := []struct {
		name     string
		auto     *imagev1.ImageUpdateAutomation
		policies []imagev1.ImagePolicy
		want     string
	}{
		{
			name:     "without a selector every policy of the namespace with a latest image is applied",
			auto:     automation(nil, false),
			policies: []imagev1.ImagePolicy{policy("b", nil, "2"), policy("a", team, "1")},
			want:     "a=policySelector:1 b=policySelector:2",
		},
		{
			name:     "a selector leaves out the policies it does not match, and says so",
			auto:     automation(team, false),
			policies: []imagev1.ImagePolicy{policy("a", team, "1"), policy("b", nil, "2")},
			want:     "a=policySelector:1 b=is not selected by spec.policySelector",
		},
		{
			name:     "a selected policy without a latest image is not applied yet",
			auto:     automation(nil, false),
			policies: []imagev1.ImagePolicy{policy("a", nil, "")},
			want:     "a=has no latest image yet",
		},
		{
			name:     "a policy following a discovered image is applied though the selector does not match it",
			auto:     automation(team, true, "found"),
			policies: []imagev1.ImagePolicy{policy("found", nil, "3"), policy("other", nil, "4")},
			want:     "found=discovery:3 other=is not selected by spec.policySelector",
		},
		{
			name:     "a policy both selected and followed is applied once, as selected",
			auto:     automation(team, true, "a"),
			policies: []imagev1.ImagePolicy{policy("a", team, "1")},
			want:     "a=policySelector:1",
		},
		{
			name:     "without spec.discover what status.discovered names is not followed",
			auto:     automation(team, false, "found"),
			policies: []imagev1.ImagePolicy{policy("found", nil, "3")},
			want:     "found=is not selected by spec.policySelector",
		},
		{
			name:     "policies of other namespaces are never applied",
			auto:     automation(nil, false),
			policies: []imagev1.ImagePolicy{func() imagev1.ImagePolicy { p := policy("x", nil, "1"); p.Namespace = "other"; return p }()},
			want:     "",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sel, err := Selector(tt.auto)
			if err != nil {
				t.Fatal(err)
			}
			s := Of(tt.auto, sel, tt.policies)
			if got := summary(s); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
			for _, st := range s.Setters {
				_, name, _ := strings.Cut(st.Policy, ":")
				if s.Observed[name].Tag != st.Tag || !s.Times[st.Policy].Equal(t0) {
					t.Errorf("setter %+v: observed %+v, time %v", st, s.Observed[name], s.Times[st.Policy])
				}
			}
			if len(s.Observed) != len(s.Setters) || len(s.Times) != len(s.Setters) {
				t.Errorf("%d setters, %d observed, %d times", len(s.Setters), len(s.Observed), len(s.Times))
			}
		})
	}
}

// An invalid selector stalls the automation: it applies nothing, not even
// what discovery follows, and says of each policy that it is not selected.
func TestInvalidSelectorAppliesNothing(t *testing.T) {
	a := automation(nil, true, "found")
	a.Spec.PolicySelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "k", Operator: "Bogus"}}}
	sel, err := Selector(a)
	if err == nil || sel != nil {
		t.Fatalf("an invalid selector gave %v, %v", sel, err)
	}
	found := policy("found", map[string]string{imagev1.DiscoveredByLabel: "auto"}, "1")
	s := Of(a, sel, []imagev1.ImagePolicy{found, policy("a", nil, "1")})
	if got, want := summary(s), "a=is not selected by spec.policySelector found=is not selected by spec.policySelector"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if Concerns(a, sel, &found) {
		t.Error("a policy concerns an automation whose selector is invalid")
	}
}

func TestConcerns(t *testing.T) {
	team := map[string]string{"team": "a"}
	made := map[string]string{imagev1.DiscoveredByLabel: "auto"}
	madeByOther := map[string]string{imagev1.DiscoveredByLabel: "other"}
	tests := []struct {
		name string
		auto *imagev1.ImageUpdateAutomation
		p    imagev1.ImagePolicy
		want bool
	}{
		{"a selected policy with a latest image concerns the automation", automation(team, false), policy("a", team, "1"), true},
		{"a selected policy without a latest image does not, yet", automation(team, false), policy("a", team, ""), false},
		{"a policy the selector does not match does not", automation(team, false), policy("a", nil, "1"), false},
		{"a policy the automation's discovery made does, latest image or not", automation(team, true), policy("a", made, ""), true},
		{"a policy another automation's discovery made does not", automation(team, true), policy("a", madeByOther, "1"), false},
		{"the namespace's own policy a discovered image follows does", automation(team, true, "own"), policy("own", nil, "1"), true},
		{"without spec.discover, policies it made no longer do", automation(team, false), policy("a", made, "1"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sel, _ := Selector(tt.auto)
			if got := Concerns(tt.auto, sel, &tt.p); got != tt.want {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}

// Every policy a change of which concerns an automation shares an index
// key with it, over selectors of pairs, of expressions, none, an invalid
// one, and discovery; and an automation that selects by a pair is not
// under AnyPolicy, so a policy without the pair never lists it.
func TestCandidatesFindEveryConcernedAutomation(t *testing.T) {
	exprs := automation(nil, false)
	exprs.Spec.PolicySelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
		{Key: "team", Operator: metav1.LabelSelectorOpIn, Values: []string{"a", "b"}}}}
	mixed := automation(map[string]string{"team": "a"}, false)
	mixed.Spec.PolicySelector.MatchExpressions = []metav1.LabelSelectorRequirement{{Key: "tier", Operator: metav1.LabelSelectorOpExists}}
	invalid := automation(nil, false)
	invalid.Spec.PolicySelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "team", Operator: "Near"}}}
	autos := map[string]*imagev1.ImageUpdateAutomation{
		"no selector":     automation(nil, false),
		"one pair":        automation(map[string]string{"team": "a"}, false),
		"two pairs":       automation(map[string]string{"team": "a", "app": "web"}, false),
		"expressions":     exprs,
		"pairs and exprs": mixed,
		"invalid":         invalid,
		"discovery":       automation(map[string]string{"team": "z"}, true, "own"),
	}
	pols := []imagev1.ImagePolicy{
		policy("none", nil, "1"),
		policy("team-a", map[string]string{"team": "a"}, "1"),
		policy("team-b", map[string]string{"team": "b"}, "1"),
		policy("web", map[string]string{"team": "a", "app": "web", "tier": "front"}, "1"),
		policy("own", nil, "1"),
		policy("made", map[string]string{imagev1.DiscoveredByLabel: "auto"}, ""),
	}
	concerned := 0
	for name, a := range autos {
		keys := AutomationKeys(a)
		sel, _ := Selector(a)
		for _, p := range pols {
			if !Concerns(a, sel, &p) {
				continue
			}
			concerned++
			if !slices.ContainsFunc(PolicyKeys(&p), func(k string) bool { return slices.Contains(keys, k) }) {
				t.Errorf("%s: concerned by %s, but keys %v and %v share none", name, p.Name, keys, PolicyKeys(&p))
			}
		}
	}
	if concerned < 10 {
		t.Errorf("only %d concerned pairs: the table no longer tests much", concerned)
	}
	for _, name := range []string{"one pair", "two pairs", "pairs and exprs"} {
		if keys := AutomationKeys(autos[name]); slices.Contains(keys, AnyPolicy) {
			t.Errorf("%s: indexed under AnyPolicy %v, found by every policy", name, keys)
		}
	}
	if keys := AutomationKeys(autos["invalid"]); len(keys) != 0 {
		t.Errorf("an invalid selector is indexed %v; it applies nothing", keys)
	}
}

func TestForImages(t *testing.T) {
	repo := func(name, image string) imagev1.ImageRepository {
		r := imagev1.ImageRepository{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}}
		r.Spec.Image = image
		return r
	}
	refTo := func(p imagev1.ImagePolicy, repo, ns string) imagev1.ImagePolicy {
		p.Spec.ImageRepositoryRef = meta.NamespacedObjectReference{Name: repo, Namespace: ns}
		return p
	}
	repos := []imagev1.ImageRepository{repo("nginx", "nginx"), repo("app", "ghcr.io/org/app")}
	policies := []imagev1.ImagePolicy{
		refTo(policy("z-nginx", nil, "1"), "nginx", ""),
		refTo(policy("b-nginx", nil, "1"), "nginx", "ns"),
		refTo(policy("a-discovered", map[string]string{imagev1.DiscoveredByLabel: "auto"}, "1"), "nginx", ""),
		refTo(policy("elsewhere", nil, "1"), "app", "other"),
		refTo(policy("no-repo", nil, "1"), "missing", ""),
	}
	got := ForImages("ns", policies, repos)
	// The first by name of the namespace's own wins; what discovery made,
	// refers to another namespace's repository, or to none, never does.
	want := map[string]string{"docker.io/library/nginx": "b-nginx"}
	if len(got) != len(want) || got["docker.io/library/nginx"] != "b-nginx" {
		t.Errorf("got %v, want %v", got, want)
	}
	if policies[0].Name != "z-nginx" {
		t.Error("ForImages reordered its caller's list")
	}
}

// A verified policy's setter says how to read its tag again, so the job
// can refuse a tag re-pushed after the check; an unverified one does not.
func TestVerifiedPolicyMarksItsSetter(t *testing.T) {
	signed := policy("signed", nil, "2")
	signed.Spec.ImageRepositoryRef = meta.NamespacedObjectReference{Name: "repo", Namespace: "images"}
	signed.Spec.Verify = &imagev1.ImageVerification{Provider: imagev1.SignatureProviderCosign}
	signed.Status.LatestRef.Digest = "sha256:aa"
	signed.Status.Verification = &imagev1.VerificationStatus{Digest: "sha256:aa", Signer: "key cosign.pub"}
	stale := policy("stale", nil, "3")
	stale.Spec.Verify = signed.Spec.Verify
	stale.Status.LatestRef.Digest = "sha256:bb"
	stale.Status.Verification = &imagev1.VerificationStatus{Digest: "sha256:aa"}
	// With a platform, the platform's manifest is written and the tag must
	// still point to the index that verified.
	arm := policy("arm", nil, "4")
	arm.Spec.Verify = signed.Spec.Verify
	arm.Spec.Platform = "linux/arm64"
	arm.Status.LatestRef.Digest = "sha256:child"
	arm.Status.Verification = &imagev1.VerificationStatus{Digest: "sha256:index", PlatformDigest: "sha256:child"}
	// A promotion holds the tag to the digest that ran upstream, with no
	// verify of its own.
	promoted := policy("promoted", nil, "5")
	promoted.Spec.Policy.Promotion = &imagev1.PromotionPolicy{}
	promoted.Status.LatestRef.Digest = "sha256:cc"
	unpinned := policy("promoted-no-digest", nil, "6")
	unpinned.Spec.Policy.Promotion = &imagev1.PromotionPolicy{}
	s := Of(automation(nil, false), labels.Everything(), []imagev1.ImagePolicy{signed, stale, arm, promoted, unpinned, policy("plain", nil, "1")})
	for _, st := range s.Setters {
		switch st.Policy {
		case "ns:signed":
			if st.Verified == nil || st.Verified.ImageRepository != (meta.NamespacedObjectReference{Namespace: "images", Name: "repo"}) || st.Verified.Digest != "" {
				t.Errorf("signed: verified %+v", st.Verified)
			}
		case "ns:arm":
			if st.Verified == nil || st.Verified.Digest != "sha256:index" || st.Digest != "sha256:child" {
				t.Errorf("arm: setter %+v verified %+v, want the child written and the index held", st.ImageRef, st.Verified)
			}
		case "ns:promoted":
			if st.Verified == nil || st.Verified.Digest != "" {
				t.Errorf("promoted: verified %+v, want the promoted digest held", st.Verified)
			}
		default:
			if st.Verified != nil {
				t.Errorf("%s: verified %+v without a verification of its digest", st.Policy, st.Verified)
			}
		}
	}
}

// An automation does not write a promoted image while another member of
// its promotion group, moved by the same upstream commit, has not been
// promoted yet: it keeps the image it applied before (and applies none
// it never applied), and says which member it waits for; once the member
// moves, both are written. An approval of the image goes to its setter.
func TestPromotionGroupIsWrittenTogether(t *testing.T) {
	const rev = "main@sha1:aaaa"
	member := func(name, tag string) imagev1.ImagePolicy {
		p := policy(name, nil, tag)
		p.Spec.Policy.Promotion = &imagev1.PromotionPolicy{From: imagev1.PromotionSource{Automation: "dev"}}
		p.Status.Promotion = &imagev1.PromotionStatus{Automation: "dev"}
		return p
	}
	api := member("api", "2.0.0")
	api.Status.Promotion.PromotedRevision = rev
	api.Status.Promotion.Approval = &imagev1.PromotionApproval{Approval: meta.Approval{Digest: "2.0.0", By: "alice"}}
	web := member("web", "1.0.0")
	web.Status.PendingRef = &imagev1.PendingRef{Tag: "1.1.0", Image: &meta.ImageRef{Name: "ghcr.io/org/web", Tag: "1.1.0"}, UpstreamRevision: rev}
	other := member("other", "1.0.0")
	other.Status.Promotion.Automation = "staging"
	other.Status.PendingRef = web.Status.PendingRef

	a := automation(nil, false)
	a.Status.ObservedPolicies = imagev1.ObservedPolicies{"api": {Name: "ghcr.io/org/api", Tag: "1.0.0"}, "web": {Name: "ghcr.io/org/web", Tag: "1.0.0"}}
	s := Of(a, labels.Everything(), []imagev1.ImagePolicy{api, web, other})
	if got, want := summary(s), "api=waits for web of its promotion group, which its upstream commit also moved, before its new image is written other=policySelector:1.0.0 web=policySelector:1.0.0"; got != want {
		t.Errorf("while web waits: %s, want %s", got, want)
	}
	if st := s.Setters[0]; st.Policy != "ns:api" || st.Tag != "1.0.0" || st.Approval != nil || s.Observed["api"].Tag != "1.0.0" {
		t.Errorf("api's setter %+v (observed %v), want the image applied before, 1.0.0", st, s.Observed["api"])
	}
	fresh := automation(nil, false)
	if s := Of(fresh, labels.Everything(), []imagev1.ImagePolicy{api, web}); len(s.Setters) != 1 || s.Setters[0].Policy != "ns:web" {
		t.Errorf("never applied: setters %+v, want web's only", s.Setters)
	}

	// web moved: both are written, api with its approval.
	web.Status.LatestRef, web.Status.PendingRef = &meta.ImageRef{Name: "ghcr.io/org/web", Tag: "1.1.0"}, nil
	s = Of(a, labels.Everything(), []imagev1.ImagePolicy{api, web})
	if got, want := summary(s), "api=policySelector:2.0.0 web=policySelector:1.1.0"; got != want {
		t.Errorf("after web moved: %s, want %s", got, want)
	}
	if st := s.Setters[0]; st.Approval == nil || st.Approval.By != "alice" {
		t.Errorf("api's setter %+v carries no approval", st)
	}
	// Suspended, web leaves the group.
	web.Status.LatestRef, web.Status.PendingRef = &meta.ImageRef{Name: "ghcr.io/org/web", Tag: "1.0.0"}, &imagev1.PendingRef{Tag: "1.1.0", Image: &meta.ImageRef{Name: "ghcr.io/org/web", Tag: "1.1.0"}, UpstreamRevision: rev}
	web.Spec.Suspend = true
	if got := summary(Of(a, labels.Everything(), []imagev1.ImagePolicy{api, web})); !strings.HasPrefix(got, "api=policySelector:2.0.0") {
		t.Errorf("with web suspended: %s, want api written", got)
	}
}
