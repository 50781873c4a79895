package signature

import (
	"context"
	"fmt"
)

// Check verifies one candidate tag: it resolves the tag's digest and
// returns that digest's verdict (cached or not). An error means the
// registry could not be asked.
type Check func(ctx context.Context, tag string) (Verdict, error)

// Walk is which candidate a verifying policy chooses.
type Walk struct {
	// Tag is the best candidate that verified, "" when none did.
	Tag string
	// Verdict is Tag's verdict (its Digest is what may be written).
	Verdict Verdict
	// Skipped are the better candidates that did not verify, best first.
	Skipped []Skipped
	// Truncated says the walk stopped at its limit without a verified
	// candidate, with more candidates left.
	Truncated bool
}

// Skipped is a candidate that did not verify.
type Skipped struct {
	Tag     string
	Verdict Verdict
}

// FirstVerified walks tags, best first, to the first whose signature
// verifies, checking at most limit of them (all when limit <= 0). Only the
// candidates above the winner are checked: verifying costs registry
// requests, and what ranks below the winner cannot be chosen.
//
// A candidate the registry could not be asked about stops the walk with
// its error: choosing a lower candidate while a better one might verify
// would move the policy down on a registry blip.
func FirstVerified(ctx context.Context, tags []string, limit int, check Check) (Walk, error) {
	var w Walk
	for i, tag := range tags {
		if limit > 0 && i >= limit {
			w.Truncated = true
			break
		}
		v, err := check(ctx, tag)
		if err != nil {
			return w, fmt.Errorf("verifying the signature of tag %s: %w", tag, err)
		}
		if v.Verified {
			w.Tag, w.Verdict = tag, v
			return w, nil
		}
		w.Skipped = append(w.Skipped, Skipped{Tag: tag, Verdict: v})
	}
	return w, nil
}

// Summary says in a sentence why the walk chose what it chose, for a
// Ready message and explain.
func (w Walk) Summary() string {
	switch {
	case w.Tag != "" && len(w.Skipped) == 0:
		return fmt.Sprintf("tag %s verified (%s)", w.Tag, w.Verdict.Signer)
	case w.Tag != "":
		s := w.Skipped[0]
		return fmt.Sprintf("tag %s verified (%s); %d better candidate(s) did not, the best %s: %s: %s",
			w.Tag, w.Verdict.Signer, len(w.Skipped), s.Tag, s.Verdict.Reason, s.Verdict.Message)
	case len(w.Skipped) == 0:
		return "no candidate to verify"
	}
	s := w.Skipped[0]
	more := ""
	if w.Truncated {
		more = fmt.Sprintf(" (checked the best %d; the rest were not checked)", len(w.Skipped))
	}
	return fmt.Sprintf("none of %d candidate(s) verified%s; the best, %s: %s: %s", len(w.Skipped), more, s.Tag, s.Verdict.Reason, s.Verdict.Message)
}
