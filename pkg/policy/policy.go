// Package policy picks the latest tag of an image repository: by semver
// range, Docker-style version range (docker, see docker.go), alphabetical
// or numerical order, or build time (newestBuild),
// after an optional regexp filter that can extract the part of the tag to
// order by, and optionally only among tags older than a minimum age
// (Evaluate). The controller and `tk-image policy eval` share it, so an
// offline test gives the answer the cluster will.
//
// The kinds of policy are one table, Kinds: each entry is a field of
// spec.policy with its checks and ordering, its tk-image flags and their
// completion, its workload annotation, and its words in explain. New, the
// CLI, discover and explain read the table instead of each switching over
// the fields, so a new kind is one entry, its test, and its field in the
// API (whose static CEL rule a test holds to the table).
package policy

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/Masterminds/semver/v3"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
)

// Order values of the alphabetical and numerical policies.
const (
	Ascending  = "asc"
	Descending = "desc"
)

// invalid marks an error of New: every one means the policy cannot be
// evaluated as written (a bad range, regexp or order, or not exactly one
// policy), which reconcilers report as InvalidPolicy and the CLI as exit 2.
func invalid(err error) error { return fmt.Errorf("invalid policy: %w", err) }

// NoMatchError says why no tag was selected.
type NoMatchError struct {
	// Considered is the number of tags given.
	Considered int
	// Filtered is how many the filter pattern dropped.
	Filtered int
	// Dropped is how many the policy dropped (not a version, out of range,
	// not a number).
	Dropped int
}

func (e *NoMatchError) Error() string {
	return fmt.Sprintf("no tag matches the policy: %d tags considered, %d dropped by the filter, %d by the policy",
		e.Considered, e.Filtered, e.Dropped)
}

// Policy selects the latest tag.
type Policy struct {
	order   orderer
	filter  *regexp.Regexp
	extract string
}

// orderer is one ordering of candidates, with two ways to walk them that
// share its parsing and comparison: a selection (Select's) keeps only the
// best, a ranking (Explain's) also counts exactly why each tag is dropped.
type orderer interface {
	// newSelection starts a selection.
	newSelection() selection
	// newRanking starts a ranking that keeps the n best candidates (all
	// of them, when n < 0).
	newRanking(n int) ranking
}

type selection interface {
	// offer considers a candidate; it reports false when the policy drops it.
	offer(tag, value string) bool
	// best returns the selected tag, or "" when none.
	best() string
}

// verdict is what a ranking did with a candidate.
type verdict int

const (
	kept verdict = iota
	unparsable
	outOfRange
)

type ranking interface {
	// add considers a candidate.
	add(tag, value string) verdict
	// top returns the best candidates' tags, best first.
	top() []string
}

// New builds a policy from an ImagePolicy's choice and filter: the choice
// must set exactly one of Kinds, which checks its settings.
func New(choice imagev1.ImagePolicyChoice, filter *imagev1.TagFilter) (*Policy, error) {
	p := &Policy{}
	n := 0
	for _, k := range Kinds {
		if !k.set(choice) {
			continue
		}
		n++
		o, err := k.order(choice)
		if err != nil {
			return nil, err
		}
		p.order = o
	}
	if n != 1 {
		return nil, invalid(errors.New(ExactlyOne()))
	}
	if filter != nil && filter.Pattern != "" {
		re, err := regexp.Compile(filter.Pattern)
		if err != nil {
			return nil, invalid(fmt.Errorf("filterTags.pattern %q: %w", filter.Pattern, err))
		}
		p.filter, p.extract = re, filter.Extract
	} else if filter != nil && filter.Extract != "" {
		return nil, invalid(errors.New("filterTags.extract needs filterTags.pattern"))
	}
	return p, nil
}

func order(o string) (string, error) {
	switch o {
	case "", Ascending:
		return Ascending, nil
	case Descending:
		return Descending, nil
	}
	return "", invalid(fmt.Errorf("order must be asc or desc, got %q", o))
}

// byBuildTime is an ordering by build time (newestBuild's): Evaluate,
// given Times, orders its candidates, the limit most recently first seen.
type byBuildTime interface {
	orderer
	limit() int
}

// NeedsTimes reports whether the policy orders by build time, which only
// Evaluate, given Times, can do.
func (p *Policy) NeedsTimes() bool {
	_, ok := p.order.(byBuildTime)
	return ok
}

// Prefers reports whether the policy ranks tag a above tag b (a in its
// range and filter, and b out of them or ranked lower); ok is false when
// it cannot tell from the tags alone (newestBuild ranks by build time).
func (p *Policy) Prefers(a, b string) (prefers, ok bool) {
	if p.NeedsTimes() {
		return false, false
	}
	best, err := p.Select([]string{a, b})
	return err == nil && best == a, true
}

// errNeedsTimes: Select and Explain cannot order by build time.
var errNeedsTimes = errors.New("newestBuild orders by build time: it needs tag times")

// Select returns the latest tag, or a *NoMatchError. The result does not
// depend on the order of tags. It ignores time: newestBuild fails, and
// minimumAge needs Evaluate.
func (p *Policy) Select(tags []string) (string, error) {
	if p.NeedsTimes() {
		return "", errNeedsTimes
	}
	sel := p.order.newSelection()
	stats := NoMatchError{Considered: len(tags)}
	var buf []byte
	for _, tag := range tags {
		value := tag
		if p.filter != nil {
			var ok bool
			if value, buf, ok = p.filtered(tag, buf); !ok {
				stats.Filtered++
				continue
			}
		}
		if !sel.offer(tag, value) {
			stats.Dropped++
		}
	}
	if best := sel.best(); best != "" {
		return best, nil
	}
	return "", &stats
}

// Explain evaluates tags as Select does and says what happened to each:
// exact counts of what the filter and the policy dropped, and the top best
// candidates, best first; with top ≥ 1, the first is the tag Select
// returns.
// It costs more than Select, which skips the range check of a version that
// loses to the best so far; the reflector still calls it on every
// evaluation, so that the status can answer why a tag was (not) chosen.
// Like Select it ignores time: a newestBuild policy's candidates are
// counted but not ranked.
func (p *Policy) Explain(tags []string, top int) imagev1.TagSelection {
	if p.NeedsTimes() {
		top = 0
	}
	return p.explain(tags, max(top, 0))
}

// explain is Explain; top < 0 ranks every kept candidate.
func (p *Policy) explain(tags []string, top int) imagev1.TagSelection {
	r := p.order.newRanking(top)
	e := imagev1.TagSelection{Considered: len(tags)}
	var buf []byte
	for _, tag := range tags {
		value := tag
		if p.filter != nil {
			var ok bool
			if value, buf, ok = p.filtered(tag, buf); !ok {
				e.Filtered++
				continue
			}
		}
		switch r.add(tag, value) {
		case kept:
			e.Kept++
		case unparsable:
			e.Unparsable++
		case outOfRange:
			e.OutOfRange++
		}
	}
	e.TopCandidates = r.top()
	return e
}

// filtered applies the filter to tag: the value to order by (the
// extraction, in buf, or the tag) and whether the pattern matched.
func (p *Policy) filtered(tag string, buf []byte) (string, []byte, bool) {
	m := p.filter.FindStringSubmatchIndex(tag)
	if m == nil {
		return "", buf, false
	}
	if p.extract == "" {
		return tag, buf, true
	}
	buf = p.filter.ExpandString(buf[:0], p.extract, tag, m)
	return string(buf), buf, true
}

// podium keeps the n best candidates it is shown, best first, in a sorted
// slice: most candidates lose to the n-th and cost one comparison. With n
// < 0 it keeps them all and sorts once, in ranked: inserting each into a
// sorted slice would cost a copy per candidate.
type podium[C any] struct {
	n       int
	compare func(a, b C) int
	best    []C
}

func (p *podium[C]) add(c C) {
	if p.n < 0 {
		p.best = append(p.best, c)
		return
	}
	if p.n == 0 || (len(p.best) == p.n && p.compare(c, p.best[p.n-1]) <= 0) {
		return
	}
	// Best first: an element goes before c when it compares greater.
	i, _ := slices.BinarySearchFunc(p.best, c, func(e, c C) int { return p.compare(c, e) })
	p.best = slices.Insert(p.best, i, c)
	if len(p.best) > p.n {
		p.best = p.best[:p.n]
	}
}

// ranked returns the candidates kept, best first.
func (p *podium[C]) ranked() []C {
	if p.n < 0 {
		slices.SortFunc(p.best, func(a, b C) int { return p.compare(b, a) })
	}
	return p.best
}

// tags returns the tags of the candidates kept, best first.
func (p *podium[C]) tags(tag func(C) string) []string {
	best := p.ranked()
	out := make([]string, len(best))
	for i, c := range best {
		out[i] = tag(c)
	}
	return out
}

// semverOrder picks the highest version in range.
type semverOrder struct{ c *semver.Constraints }

// semverCandidate is a tag and the version it orders by.
type semverCandidate struct {
	version *semver.Version
	tag     string
}

// compare orders candidates: the higher version wins; between equal
// versions (1.0.0 and v1.0.0, or differing build metadata) the greater tag,
// so that the answer does not depend on the order of the tags.
func (a semverCandidate) compare(b semverCandidate) int {
	if c := a.version.Compare(b.version); c != 0 {
		return c
	}
	return strings.Compare(a.tag, b.tag)
}

func (o semverOrder) newSelection() selection { return &semverSelection{c: o.c} }

func (o semverOrder) newRanking(n int) ranking {
	return &semverRanking{c: o.c, podium: podium[semverCandidate]{n: n, compare: semverCandidate.compare}}
}

type semverSelection struct {
	c    *semver.Constraints
	lead semverCandidate
}

func (s *semverSelection) offer(tag, value string) bool {
	v, ok := parseVersion(value)
	if !ok {
		return false
	}
	c := semverCandidate{v, tag}
	// Compare before checking the range: most candidates lose to the best
	// so far, and the comparison is the cheaper test. A loser's range is
	// irrelevant: drop counts are only reported when nothing is selected.
	if s.lead.version != nil && c.compare(s.lead) <= 0 {
		return true
	}
	if !s.c.Check(v) {
		return false
	}
	s.lead = c
	return true
}

func (s *semverSelection) best() string { return s.lead.tag }

type semverRanking struct {
	c      *semver.Constraints
	podium podium[semverCandidate]
}

func (r *semverRanking) add(tag, value string) verdict {
	v, ok := parseVersion(value)
	if !ok {
		return unparsable
	}
	if !r.c.Check(v) {
		return outOfRange
	}
	r.podium.add(semverCandidate{v, tag})
	return kept
}

func (r *semverRanking) top() []string {
	return r.podium.tags(func(c semverCandidate) string { return c.tag })
}

// alphabeticalOrder: byte-wise; asc picks the greatest value, desc the least.
type alphabeticalOrder struct{ desc bool }

func (o alphabeticalOrder) newSelection() selection {
	return &orderedSelection[string]{desc: o.desc, parse: parseString}
}

func (o alphabeticalOrder) newRanking(n int) ranking {
	return newOrderedRanking(o.desc, parseString, n)
}

func parseString(v string) (string, bool) { return v, true }

// newestBuildOrder: every filtered tag is a candidate, in alphabetical
// order until Evaluate, which has the build times, orders the max most
// recently first seen by them.
type newestBuildOrder struct {
	alphabeticalOrder
	max int
}

func (o newestBuildOrder) limit() int { return o.max }

// numericalOrder: values are float64s; asc picks the greatest, desc the
// least. Values that are not finite numbers are dropped.
type numericalOrder struct{ desc bool }

func (o numericalOrder) newSelection() selection {
	return &orderedSelection[float64]{desc: o.desc, parse: parseNumber}
}

func (o numericalOrder) newRanking(n int) ranking { return newOrderedRanking(o.desc, parseNumber, n) }

func parseNumber(value string) (float64, bool) {
	// Most tags are not numbers; skip ParseFloat's error allocation for
	// them. Finite numbers start with a digit, a sign or a point.
	if value == "" || !strings.ContainsRune("0123456789+-.", rune(value[0])) {
		return 0, false
	}
	f, err := strconv.ParseFloat(value, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, false
	}
	return f, true
}

// compareOrdered orders candidates of the alphabetical and numerical
// policies: the greater value wins (desc: the lesser); between equal values
// the lexically greater tag.
func compareOrdered[T cmp.Ordered](desc bool, v T, tag string, w T, wtag string) int {
	c := cmp.Compare(v, w)
	if desc {
		c = -c
	}
	if c != 0 {
		return c
	}
	return strings.Compare(tag, wtag)
}

// orderedSelection keeps the best candidate by compareOrdered.
type orderedSelection[T cmp.Ordered] struct {
	desc  bool
	parse func(string) (T, bool)
	value T
	tag   string
	any   bool
}

func (s *orderedSelection[T]) offer(tag, value string) bool {
	v, ok := s.parse(value)
	if !ok {
		return false
	}
	if !s.any || compareOrdered(s.desc, v, tag, s.value, s.tag) > 0 {
		s.value, s.tag, s.any = v, tag, true
	}
	return true
}

func (s *orderedSelection[T]) best() string { return s.tag }

type orderedCandidate[T cmp.Ordered] struct {
	value T
	tag   string
}

type orderedRanking[T cmp.Ordered] struct {
	parse  func(string) (T, bool)
	podium podium[orderedCandidate[T]]
}

func newOrderedRanking[T cmp.Ordered](desc bool, parse func(string) (T, bool), n int) ranking {
	return &orderedRanking[T]{parse: parse, podium: podium[orderedCandidate[T]]{n: n,
		compare: func(a, b orderedCandidate[T]) int { return compareOrdered(desc, a.value, a.tag, b.value, b.tag) }}}
}

func (r *orderedRanking[T]) add(tag, value string) verdict {
	v, ok := r.parse(value)
	if !ok {
		return unparsable
	}
	r.podium.add(orderedCandidate[T]{v, tag})
	return kept
}

func (r *orderedRanking[T]) top() []string {
	return r.podium.tags(func(c orderedCandidate[T]) string { return c.tag })
}
