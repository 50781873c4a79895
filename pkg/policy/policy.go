// Package policy picks the latest tag of an image repository: by semver
// range, alphabetical or numerical order, after an optional regexp filter
// that can extract the part of the tag to order by. The controller and
// `tk-image policy eval` share it, so an offline test gives the answer the
// cluster will.
package policy

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"regexp"
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

// orderer keeps the best of the values it is shown.
type orderer interface {
	// newSelection starts a selection.
	newSelection() selection
}

type selection interface {
	// offer considers a candidate; it reports false when the policy drops it.
	offer(tag, value string) bool
	// best returns the selected tag, or "" when none.
	best() string
}

// New builds a policy from an ImagePolicy's choice and filter.
func New(choice imagev1.ImagePolicyChoice, filter *imagev1.TagFilter) (*Policy, error) {
	p := &Policy{}
	n := 0
	if choice.SemVer != nil {
		n++
		c, err := semver.NewConstraint(choice.SemVer.Range)
		if err != nil {
			return nil, invalid(fmt.Errorf("semver range %q: %w", choice.SemVer.Range, err))
		}
		p.order = semverOrder{c}
	}
	if choice.Alphabetical != nil {
		n++
		o, err := order(choice.Alphabetical.Order)
		if err != nil {
			return nil, err
		}
		p.order = alphabeticalOrder{desc: o == Descending}
	}
	if choice.Numerical != nil {
		n++
		o, err := order(choice.Numerical.Order)
		if err != nil {
			return nil, err
		}
		p.order = numericalOrder{desc: o == Descending}
	}
	if n != 1 {
		return nil, invalid(errors.New("exactly one of semver, alphabetical or numerical must be set"))
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

// Select returns the latest tag, or a *NoMatchError. The result does not
// depend on the order of tags.
func (p *Policy) Select(tags []string) (string, error) {
	sel := p.order.newSelection()
	stats := NoMatchError{Considered: len(tags)}
	var buf []byte
	for _, tag := range tags {
		value := tag
		if p.filter != nil {
			m := p.filter.FindStringSubmatchIndex(tag)
			if m == nil {
				stats.Filtered++
				continue
			}
			if p.extract != "" {
				buf = p.filter.ExpandString(buf[:0], p.extract, tag, m)
				value = string(buf)
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

// semverOrder picks the highest version in range.
type semverOrder struct{ c *semver.Constraints }

func (o semverOrder) newSelection() selection { return &semverSelection{c: o.c} }

type semverSelection struct {
	c       *semver.Constraints
	version *semver.Version
	tag     string
}

func (s *semverSelection) offer(tag, value string) bool {
	v, ok := parseVersion(value)
	if !ok {
		return false
	}
	// Compare before checking the range: most candidates lose to the best
	// so far, and the comparison is the cheaper test. A loser's range is
	// irrelevant: drop counts are only reported when nothing is selected.
	if s.version != nil {
		if cmp := v.Compare(s.version); cmp < 0 || (cmp == 0 && tag <= s.tag) {
			return true
		}
	}
	if !s.c.Check(v) {
		return false
	}
	s.version, s.tag = v, tag
	return true
}

func (s *semverSelection) best() string { return s.tag }

// alphabeticalOrder: byte-wise; asc picks the greatest value, desc the least.
type alphabeticalOrder struct{ desc bool }

func (o alphabeticalOrder) newSelection() selection {
	return &orderedSelection[string]{desc: o.desc, parse: func(v string) (string, bool) { return v, true }}
}

// numericalOrder: values are float64s; asc picks the greatest, desc the
// least. Values that are not finite numbers are dropped.
type numericalOrder struct{ desc bool }

func (o numericalOrder) newSelection() selection {
	return &orderedSelection[float64]{desc: o.desc, parse: parseNumber}
}

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

// orderedSelection keeps the greatest (or, desc, the least) value; equal
// values go to the lexically greatest tag.
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
	c := cmp.Compare(v, s.value)
	if s.desc {
		c = -c
	}
	if !s.any || c > 0 || (c == 0 && tag > s.tag) {
		s.value, s.tag, s.any = v, tag, true
	}
	return true
}

func (s *orderedSelection[T]) best() string { return s.tag }
