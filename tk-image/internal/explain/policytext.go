package explain

import (
	"fmt"
	"io"
	"strings"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/apis/meta"
	"toolkit.dev/image-toolkit/pkg/policy"
	"toolkit.dev/image-toolkit/pkg/runtime/conditions"
)

// The ImagePolicy explanation as text, and the selection's rules and
// drops, which tk-image policy eval --explain prints the same way.

func writeChain(w io.Writer, chain []ChainStage) {
	fmt.Fprintf(w, "Promotion chain:\t%d stages, upstream first\n", len(chain))
	for i, s := range chain {
		chosen := ""
		if s.ImageTime != nil {
			chosen = ", chosen " + formatTime(s.ImageTime.Time)
		}
		fmt.Fprintf(w, "  %d. %s:\t%s%s\n", i+1, s.Policy, refOr(s.Image, "no image yet"), chosen)
		if pr := s.Pending; pr != nil && pr.Image != nil {
			wait := "waiting for health"
			if pr.EligibleAt != nil && pr.HealthSeen != nil {
				wait = fmt.Sprintf("healthy since %s, soak ends %s", formatTime(pr.HealthSeen.Time), formatTime(pr.EligibleAt.Time))
				if pr.SoakLeft != nil {
					wait += fmt.Sprintf(" (%s left when last reconciled)", pr.SoakLeft.Duration)
				}
			}
			fmt.Fprintf(w, "     Pending:\t%s: %s\n", pr.Image, wait)
		}
		if i < len(chain)-1 && s.Ready != nil && s.Ready.Reason != conditions.SucceededReason {
			fmt.Fprintf(w, "     Ready:\t%s: %s\n", s.Ready.Reason, s.Ready.Message)
		}
		if s.Automation == "" {
			continue
		}
		applied := "nothing yet"
		if s.Applied != nil {
			applied = s.Applied.String() + ", proposed only (no commit on its branch holds it yet)"
			if s.AppliedRevision != "" {
				applied = s.Applied.String() + " at " + shortRevision(s.AppliedRevision)
			}
			if s.AppliedTime != nil {
				applied += ", last push " + formatTime(s.AppliedTime.Time)
			}
		}
		fmt.Fprintf(w, "     Applied by %s:\t%s\n", s.Automation, applied)
		for _, h := range s.Health {
			at := ""
			if h.Revision != "" {
				at = " at " + shortRevision(h.Revision)
			}
			why := ""
			if h.Reason != "" {
				why = " (" + h.Reason + ")"
			}
			fmt.Fprintf(w, "     Health:\t%s %s%s%s\n", h.Object, h.State, at, why)
		}
	}
}

func (e *PolicyExplanation) Text(w io.Writer) {
	fmt.Fprintf(w, "ImagePolicy:\t%s\n", e.Policy)
	fmt.Fprintf(w, "Rules:\t%s\n", e.Rules)
	if e.Suspended {
		fmt.Fprintf(w, "Suspended:\ttrue: the policy is not evaluated until resumed\n")
	}
	r := e.Repository
	if r.Error != "" {
		fmt.Fprintf(w, "ImageRepository:\t%s: %s\n", r.Name, r.Error)
	} else {
		fmt.Fprintf(w, "ImageRepository:\t%s (%s)\n", r.Name, orText(r.CanonicalImageName, r.Image))
		if s := r.LastScanResult; s != nil {
			fmt.Fprintf(w, "  Last scan:\t%s, revision %s\n", formatTime(s.ScanTime.Time), shortRevision(s.Revision))
			excluded := fmt.Sprintf("%d dropped by the exclusionList", s.ExcludedCount)
			if len(r.ExclusionList) > 0 {
				excluded += " " + quoteList(r.ExclusionList)
			}
			fmt.Fprintf(w, "  Tags:\t%d kept, %s\n", s.TagCount, excluded)
		} else {
			fmt.Fprintf(w, "  Last scan:\tnone yet\n")
		}
		writeCondition(w, "  Ready:", r.Ready)
	}
	switch s := e.LastSelection; {
	case len(e.Chain) > 0:
		// A promotion orders no tags.
	case s == nil:
		fmt.Fprintf(w, "Last selection:\tnone recorded: the policy has not evaluated any tags yet\n")
	case r.LastScanResult == nil || e.SelectionIsCurrent:
		fmt.Fprintf(w, "Last selection:\tof scan %s (the repository's last)\n", shortRevision(s.ScanRevision))
		WriteSelection(w, "  ", s, e.choice, e.filter)
	default:
		fmt.Fprintf(w, "Last selection:\tof scan %s, not the repository's last (%s): the policy has not been evaluated since\n",
			shortRevision(s.ScanRevision), shortRevision(r.LastScanResult.Revision))
		WriteSelection(w, "  ", s, e.choice, e.filter)
	}
	if len(e.Chain) > 0 {
		writeChain(w, e.Chain)
	}
	if pr := e.PendingRef; pr != nil && pr.Image == nil && pr.EligibleAt != nil {
		fmt.Fprintf(w, "Pending:\t%s, old enough at %s (minimumAge)\n", pr.Tag, formatTime(pr.EligibleAt.Time))
	}
	e.writeVerification(w)
	if e.LatestRef == nil {
		fmt.Fprintf(w, "Latest image:\tnone chosen yet\n")
	} else {
		fmt.Fprintf(w, "Latest image:\t%s\n", e.LatestRef)
		if e.LatestRefTime != nil {
			fmt.Fprintf(w, "  Chosen:\t%s\n", formatTime(e.LatestRefTime.Time))
		}
		if e.PreviousRef != nil {
			fmt.Fprintf(w, "  Previous:\t%s\n", e.PreviousRef)
		} else {
			fmt.Fprintf(w, "  Previous:\tnone\n")
		}
		e.writeSource(w)
	}
	writeCondition(w, "Ready:", e.Ready)
}

// writeVerification says what spec.verify checked: who signed the chosen
// digest, and the best candidate that did not verify and why.
func (e *PolicyExplanation) writeVerification(w io.Writer) {
	v := e.Verify
	if v == nil {
		return
	}
	trust := "keys of Secret " + refName(v.SecretRef)
	switch {
	case v.Provider == imagev1.SignatureProviderNotation:
		trust = "certificates of Secret " + refName(v.SecretRef) + ", trust policy of ConfigMap " + refName(v.TrustPolicyRef)
	case len(v.MatchOIDCIdentity) > 0:
		ids := make([]string, len(v.MatchOIDCIdentity))
		for i, id := range v.MatchOIDCIdentity {
			ids[i] = fmt.Sprintf("subject %s issued by %s", id.Subject, id.Issuer)
		}
		root := "the public Sigstore root"
		if v.TrustedRootSecretRef != nil {
			root = "the trusted root of Secret " + v.TrustedRootSecretRef.Name
		}
		trust = "keyless: " + strings.Join(ids, "; ") + " (" + root + ")"
	}
	fmt.Fprintf(w, "Verification:\t%s signatures, trusting %s\n", v.Provider, trust)
	for _, a := range v.Attestations {
		fmt.Fprintf(w, "  Requires:\t%s\n", requirement(a))
	}
	if vs := e.Verification; vs != nil {
		fmt.Fprintf(w, "  Verified:\t%s, signed by %s (%s signature)\n", vs.Digest, vs.Signer, vs.Format)
		for _, a := range vs.Attestations {
			fmt.Fprintf(w, "  Attested:\t%s\n", a)
		}
		if vs.PlatformDigest != "" {
			fmt.Fprintf(w, "  Platform:\t%s, the platform's manifest in the verified index, is written\n", vs.PlatformDigest)
		}
		if vs.Skipped > 0 {
			fmt.Fprintf(w, "  Skipped:\t%d better candidate(s) did not verify\n", vs.Skipped)
		}
	}
	if u := e.UnverifiedRef; u != nil {
		fmt.Fprintf(w, "  Not verified:\t%s (%s): %s: %s\n", u.Tag, orText(u.Digest, "no digest"), u.Reason, u.Message)
	}
}

// requirement says what an attestation rule requires, in a line.
func requirement(a imagev1.AttestationRule) string {
	parts := []string{"attestation " + a.Name + " of type " + a.PredicateType}
	if m := a.SLSA; m != nil {
		for _, f := range []struct{ what, v string }{{"builder", m.BuilderID}, {"source repository", m.SourceRepository},
			{"source ref", m.SourceRef}, {"build type", m.BuildType}} {
			if f.v != "" {
				parts = append(parts, f.what+" "+f.v)
			}
		}
	}
	for _, c := range a.Conditions {
		parts = append(parts, "condition "+c)
	}
	if len(a.MatchOIDCIdentity) > 0 {
		ids := make([]string, len(a.MatchOIDCIdentity))
		for i, id := range a.MatchOIDCIdentity {
			ids[i] = fmt.Sprintf("subject %s issued by %s", id.Subject, id.Issuer)
		}
		parts = append(parts, "signed by "+strings.Join(ids, " or "))
	}
	return strings.Join(parts, ", ")
}

func refName(r *meta.LocalObjectReference) string {
	if r == nil {
		return "(none)"
	}
	return r.Name
}

// describeRules says how a policy orders tags, in the spec's words (the
// kind's, from pkg/policy's table).
func describeRules(choice imagev1.ImagePolicyChoice, filter *imagev1.TagFilter) string {
	s := "none"
	if k, ok := policy.Chosen(choice); ok {
		s = k.Describe(choice)
	}
	if filter != nil && filter.Pattern != "" {
		s += fmt.Sprintf("; only tags matching %q", filter.Pattern)
		if filter.Extract != "" {
			s += fmt.Sprintf(", ordered by %q", filter.Extract)
		}
	}
	return s
}

// WriteSelection writes a selection's breakdown as tab-separated lines,
// naming each drop as the policy's rules have it. explain policy and
// policy eval --explain both print it.
func WriteSelection(w io.Writer, indent string, s *imagev1.TagSelection, choice imagev1.ImagePolicyChoice, filter *imagev1.TagFilter) {
	fmt.Fprintf(w, "%sConsidered:\t%d tags\n", indent, s.Considered)
	if filter != nil && filter.Pattern != "" {
		fmt.Fprintf(w, "%sFiltered out:\t%d not matching %q\n", indent, s.Filtered, filter.Pattern)
	}
	if k, ok := policy.Chosen(choice); ok {
		for _, d := range k.Drops(choice, *s) {
			writeDrop(w, indent, d)
		}
	}
	if s.BeyondLimit > 0 {
		fmt.Fprintf(w, "%sBeyond limit:\t%d first seen before the newest maxCandidates\n", indent, s.BeyondLimit)
	}
	fmt.Fprintf(w, "%sKept:\t%d\n", indent, s.Kept)
	if s.TooNew > 0 {
		fmt.Fprintf(w, "%sToo new:\t%d ranking higher, younger than the minimum age\n", indent, s.TooNew)
	}
	if len(s.TopCandidates) > 0 {
		fmt.Fprintf(w, "%sBest first:\t%s\n", indent, strings.Join(s.TopCandidates, ", "))
	}
	switch sel := s.Selected(); {
	case sel != "":
		fmt.Fprintf(w, "%sSelected:\t%s\n", indent, sel)
	case s.Kept > 0 && s.TooNew > 0:
		fmt.Fprintf(w, "%sSelected:\tnothing yet: no tag is old enough\n", indent)
	default:
		fmt.Fprintf(w, "%sSelected:\tnothing: no tag is left\n", indent)
	}
}

// writeDrop writes how many tags the policy's kind dropped for a reason.
func writeDrop(w io.Writer, indent string, d policy.Drop) {
	if d.Detail == "" {
		fmt.Fprintf(w, "%s%s:\t%d\n", indent, d.Label, d.Count)
		return
	}
	fmt.Fprintf(w, "%s%s:\t%d %s\n", indent, d.Label, d.Count, d.Detail)
}

// writeSource says where the latest image says it was built from, and
// which of its labels were not taken.
func (e *PolicyExplanation) writeSource(w io.Writer) {
	s := e.Source
	if s == nil {
		return
	}
	switch {
	case s.Verified:
		fmt.Fprintf(w, "  Built from:\t%s at %s (verified provenance)\n", s.URL, s.Revision)
	case s.URL != "" && s.Revision != "":
		fmt.Fprintf(w, "  Built from:\t%s at %s\n", s.URL, s.Revision)
	case s.URL != "":
		fmt.Fprintf(w, "  Built from:\t%s (no revision label)\n", s.URL)
	case s.Revision != "":
		fmt.Fprintf(w, "  Built from:\trevision %s (no source label)\n", s.Revision)
	case len(s.Dropped) == 0:
		fmt.Fprintf(w, "  Built from:\tnot said (no org.opencontainers.image.source or .revision label)\n")
	}
	for _, d := range s.Dropped {
		fmt.Fprintf(w, "  Label not taken:\t%s\n", d)
	}
}
