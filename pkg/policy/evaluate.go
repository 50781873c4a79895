package policy

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
)

// Times are what an evaluation knows of its tags' ages. The reflector reads
// them from its tag store, and asks the registry for build times it has not
// cached; `tk-image policy eval` reads them from a file.
type Times interface {
	// Seen is when a scan first listed the tag; ok is false when unknown.
	Seen(tag string) (t time.Time, ok bool)
	// Created is the build time of the tag's image (its config's created);
	// ok is false when the image does not say. It may ask a registry, so
	// Evaluate calls it only for candidates whose build time decides the
	// answer.
	Created(ctx context.Context, tag string) (t time.Time, ok bool, err error)
}

// Options of an evaluation.
type Options struct {
	// MinimumAge: only tags at least this old are chosen; 0 for any age.
	MinimumAge time.Duration
	// Source of a tag's age: when it was first seen (default) or built.
	Source imagev1.AgeSource
	// Now is the time ages are measured at.
	Now time.Time
	// Keep is a tag that stays eligible whatever its age: the policy's
	// current choice, so that a minimum age never moves a policy back to an
	// older tag than it already chose (when the age was added, or when
	// the store lost the tag's time).
	Keep string
	// Times gives tag times; needed for MinimumAge and newestBuild.
	Times Times
	// Top is how many candidates the selection lists.
	Top int
}

// Pending is the tag a minimum age holds back that will be chosen next.
type Pending struct {
	Tag        string
	EligibleAt time.Time
}

// Result of an evaluation.
type Result struct {
	// Selection is the breakdown; Selection.Selected() is the tag chosen,
	// "" when none.
	Selection imagev1.TagSelection
	// Pending is the tag chosen next once it is old enough, nil when no
	// better candidate waits.
	Pending *Pending
}

// LookupError is a build time Times could not give.
type LookupError struct {
	Tag string
	Err error
}

func (e *LookupError) Error() string { return fmt.Sprintf("build time of tag %s: %v", e.Tag, e.Err) }
func (e *LookupError) Unwrap() error { return e.Err }

// TooNewError: candidates exist, but none is old enough yet.
type TooNewError struct {
	// Kept is how many candidates there are.
	Kept int
	// Pending is the first to become old enough, nil when no candidate's
	// time is known.
	Pending *Pending
	// MinimumAge is the age asked for.
	MinimumAge time.Duration
}

func (e *TooNewError) Error() string {
	msg := fmt.Sprintf("none of the %d matching tags is older than the minimum age %s", e.Kept, e.MinimumAge)
	if e.Pending != nil {
		msg += fmt.Sprintf("; %s will be at %s", e.Pending.Tag, e.Pending.EligibleAt.UTC().Format(time.RFC3339))
	}
	return msg
}

// Evaluate selects a tag as Explain does, and also as time says: by build
// time for newestBuild, and only among tags at least MinimumAge old. Its
// errors are a *NoMatchError (nothing passed the filter and the policy), a
// *TooNewError (nothing is old enough), both with the Result filled in, or
// a *LookupError.
//
// Build times are asked of Times lazily: with MinimumAge and source
// created, only for the candidates from the best down to the first old
// enough one; for newestBuild, for its maxCandidates most recently seen
// candidates. Without MinimumAge and newestBuild it is Explain.
func (p *Policy) Evaluate(ctx context.Context, tags []string, o Options) (Result, error) {
	top := max(o.Top, 0)
	if o.MinimumAge <= 0 && !p.NeedsTimes() {
		sel := p.explain(tags, top)
		if sel.Kept == 0 {
			return Result{Selection: sel}, noMatch(sel)
		}
		return Result{Selection: sel}, nil
	}
	if o.Times == nil {
		return Result{}, errNeedsTimes
	}
	sel := p.explain(tags, -1)
	ranked := sel.TopCandidates
	sel.TopCandidates = nil
	if sel.Kept == 0 {
		return Result{Selection: sel}, noMatch(sel)
	}
	built := buildTimes{}
	if p.NeedsTimes() {
		var err error
		if ranked, err = p.newestFirst(ctx, ranked, o.Times, built); err != nil {
			return Result{Selection: sel}, err
		}
		sel.BeyondLimit = sel.Kept - len(ranked)
		sel.Kept = len(ranked)
	}
	chosen, pending, err := firstOldEnough(ctx, ranked, o, built, &sel)
	if err != nil {
		return Result{Selection: sel}, err
	}
	if chosen < 0 {
		return Result{Selection: sel, Pending: pending}, &TooNewError{Kept: sel.Kept, Pending: pending, MinimumAge: o.MinimumAge}
	}
	sel.TopCandidates = slices.Clone(ranked[chosen:min(len(ranked), chosen+top)])
	return Result{Selection: sel, Pending: pending}, nil
}

// firstOldEnough returns the index of the best ranked tag at least
// o.MinimumAge old, or o.Keep (0 without a minimum age; -1 when none is
// old enough), counting the better ones passed over in sel.TooNew. pending
// is the passed-over tag that becomes old enough first.
func firstOldEnough(ctx context.Context, ranked []string, o Options, built buildTimes, sel *imagev1.TagSelection) (chosen int, pending *Pending, err error) {
	if o.MinimumAge <= 0 {
		return 0, nil, nil
	}
	for i, tag := range ranked {
		var t time.Time
		var known bool
		if o.Source == imagev1.AgeCreated {
			if t, known, err = built.of(ctx, o.Times, tag); err != nil {
				return -1, pending, err
			}
		} else {
			t, known = o.Times.Seen(tag)
		}
		eligibleAt := t.Add(o.MinimumAge)
		if tag == o.Keep || (known && !o.Now.Before(eligibleAt)) {
			return i, pending, nil
		}
		sel.TooNew++
		// Best first, so among equal times the better tag stays.
		if known && (pending == nil || eligibleAt.Before(pending.EligibleAt)) {
			pending = &Pending{Tag: tag, EligibleAt: eligibleAt}
		}
	}
	return -1, pending, nil
}

// buildTimes are the build times of one evaluation, looked up at most once
// per tag. (A map of its own, not a field beside the Times it asks: so it
// stays on the stack.)
type buildTimes map[string]builtTime

type builtTime struct {
	t  time.Time
	ok bool
}

// of is a tag's build time, asked of times once; ok is false when neither
// it nor the tag's first sighting is known.
func (b buildTimes) of(ctx context.Context, times Times, tag string) (time.Time, bool, error) {
	if bt, ok := b[tag]; ok {
		return bt.t, bt.ok, nil
	}
	t, ok, err := times.Created(ctx, tag)
	if err != nil {
		return time.Time{}, false, &LookupError{Tag: tag, Err: err}
	}
	if !ok || !plausible(t) {
		// No build time, or the epoch reproducible builds write: the
		// first sighting is the best lower bound of the age left.
		t, ok = times.Seen(tag)
	}
	b[tag] = builtTime{t, ok}
	return t, ok, nil
}

// plausible rejects build times no real build has: before 2000 (the zero
// time, the Unix epoch that reproducible builds write) or unset.
func plausible(t time.Time) bool { return t.Year() >= 2000 }

// newestFirst orders newestBuild's candidates: the maxCandidates a scan
// first listed most recently (ties: the greater tag), by build time, newest
// first, then the greater tag; a candidate with no time at all comes last.
func (p *Policy) newestFirst(ctx context.Context, candidates []string, times Times, built buildTimes) ([]string, error) {
	type cand struct {
		tag string
		t   time.Time
		ok  bool
	}
	cs := make([]cand, len(candidates))
	for i, tag := range candidates {
		t, ok := times.Seen(tag)
		cs[i] = cand{tag, t, ok}
	}
	later := func(a, b cand) int {
		switch {
		case a.ok != b.ok:
			if a.ok {
				return -1
			}
			return 1
		case !a.t.Equal(b.t):
			return b.t.Compare(a.t)
		}
		return strings.Compare(b.tag, a.tag)
	}
	slices.SortFunc(cs, later)
	cs = cs[:min(len(cs), p.order.(byBuildTime).limit())]
	for i := range cs {
		t, ok, err := built.of(ctx, times, cs[i].tag)
		if err != nil {
			return nil, err
		}
		cs[i].t, cs[i].ok = t, ok
	}
	slices.SortFunc(cs, later)
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.tag
	}
	return out, nil
}

// noMatch is the NoMatchError of a selection that kept nothing.
func noMatch(sel imagev1.TagSelection) *NoMatchError {
	return &NoMatchError{Considered: sel.Considered, Filtered: sel.Filtered, Dropped: sel.Unparsable + sel.OutOfRange}
}
