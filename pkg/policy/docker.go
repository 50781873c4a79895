package policy

import (
	"slices"
	"strings"

	"github.com/Masterminds/semver/v3"
)

// Docker-style versions are the tags official images publish: postgres
// 16.4, node 22, redis 7.4-alpine, python 3.12-slim-bookworm, a date
// 2024.01.15, a build 20240115-1. Semver cannot read them (it needs three
// numbers, and reads -alpine as a prerelease), so the docker kind reads
// them by these rules:
//
//   - 1 to 4 dot-separated numbers, an optional v or V before them,
//     leading zeros allowed (2024.01.15); numbers compare as numbers.
//   - a prerelease either written right after the numbers (17rc1,
//     1.24rc1, 3.14.0a1) or as the first dash-separated word after them
//     (7.4-rc2-alpine, 3.14-rc-slim). Only a word of preWords, or a, b or
//     m with a number, is one: 1.2-beta2 is a prerelease of 1.2, while
//     1.2-dev is a variant (chainguard's -dev images).
//   - a build number: a first dash-separated word of digits alone
//     (20240115-1, 1.2.3-2). It orders after the numbers, so a rebuild
//     of a release ranks above it.
//   - the rest after the dash is the suffix, the compatibility: alpine,
//     slim-bookworm, alpine3.20. A candidate must have the reference's
//     suffix exactly, and its number of parts.
//
// An empty suffix after a dash (1.2-) or any other character makes the tag
// no Docker-style version.

// dockerVersion is a parsed Docker-style tag. It points into the tag: a
// parse does not allocate.
type dockerVersion struct {
	nums [4]uint64
	// parts is how many numbers the tag writes, 1 to 4.
	parts int
	// pre is the prerelease word as written (rc1, RC.2); "" for a
	// release. semverPrerelease gives it as semver orders it.
	pre string
	// build is the build number plus one; 0 for none.
	build uint64
	// suffix is the compatibility, without its dash.
	suffix string
}

// preWords are the words that make a prerelease (see above); a, b and m
// (python's 3.14.0a1, redis's 8.0-M02) are one only with a number.
var preWords = []string{"alpha", "beta", "rc", "pre", "preview"}

// parseDocker reads a Docker-style tag.
func parseDocker(tag string) (dockerVersion, bool) {
	var v dockerVersion
	if tag == "" || len(tag) > maxVersionLen || CommitLike(tag) {
		return v, false
	}
	i := 0
	if tag[0] == 'v' || tag[0] == 'V' {
		i++
	}
	for {
		n, j, ok := number(tag, i)
		if !ok {
			return v, false
		}
		v.nums[v.parts], v.parts, i = n, v.parts+1, j
		if i == len(tag) || tag[i] != '.' || v.parts == len(v.nums) {
			break
		}
		i++
	}
	// A word right after the numbers is a prerelease or nothing.
	if i < len(tag) && tag[i] != '-' {
		end := i + strings.IndexByte(tag[i:], '-')
		if end < i {
			end = len(tag)
		}
		if !isPrerelease(tag[i:end]) {
			return v, false
		}
		v.pre, i = tag[i:end], end
	}
	if i == len(tag) {
		return v, true
	}
	// tag[i] is '-': a prerelease (when none came before) or a build
	// number, then the suffix.
	rest := tag[i+1:]
	word, after, more := strings.Cut(rest, "-")
	if word == "" || (more && after == "") {
		return v, false
	}
	if n, j, ok := number(word, 0); ok && j == len(word) && n < 1<<64-1 {
		v.build = n + 1
	} else if v.pre == "" && isPrerelease(word) {
		v.pre = word
	} else {
		v.suffix = rest
		return v, validSuffix(rest)
	}
	if more {
		v.suffix = after
		return v, validSuffix(after)
	}
	return v, true
}

// CommitLike reports whether a tag looks like a git commit, short or
// whole, as CI tags images with one: 7 to 40 lowercase hex digits with at
// least one letter (digits alone are a number). Read by the rules above,
// 3a91042 would be version 3 with prerelease a91042, and win over 2.0.0
// under a range that admits prereleases; Renovate's docker versioning
// refuses the same pattern.
func CommitLike(tag string) bool {
	if len(tag) < 7 || len(tag) > 40 {
		return false
	}
	letter := false
	for i := 0; i < len(tag); i++ {
		switch c := tag[i]; {
		case c >= 'a' && c <= 'f':
			letter = true
		case c < '0' || c > '9':
			return false
		}
	}
	return letter
}

// number reads the decimal number at s[i:]: its value and end; false when
// there is none or it overflows uint64.
func number(s string, i int) (uint64, int, bool) {
	start := i
	var n uint64
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		d := uint64(s[i] - '0')
		if n > (1<<64-1-d)/10 {
			return 0, i, false
		}
		n = n*10 + d
		i++
	}
	return n, i, i > start
}

// isPrerelease reports whether a word is a prerelease (see preWords): a
// word of them, any case, then an optional number (rc1, rc.1, RC), or a, b
// or m with a number. It does not allocate: most tags are parsed only to
// lose.
func isPrerelease(word string) bool {
	letters := 0
	for letters < len(word) && isLetter(word[letters]) {
		letters++
	}
	name, rest := word[:letters], strings.TrimPrefix(word[letters:], ".")
	if rest != "" {
		if _, j, ok := number(rest, 0); !ok || j != len(rest) {
			return false
		}
	}
	if len(name) == 1 && strings.ContainsAny(name, "abmABM") {
		return rest != ""
	}
	return slices.ContainsFunc(preWords, func(w string) bool { return strings.EqualFold(w, name) })
}

// semverPrerelease is a prerelease word as semver orders it: lower case,
// its name and number dot-separated, the number without leading zeros
// (rc1 and RC.1 are rc.1, M02 is m.2).
func semverPrerelease(word string) string {
	if word == "" {
		return ""
	}
	letters := 0
	for letters < len(word) && isLetter(word[letters]) {
		letters++
	}
	name, rest := strings.ToLower(word[:letters]), strings.TrimPrefix(word[letters:], ".")
	if rest == "" {
		return name
	}
	if rest = strings.TrimLeft(rest, "0"); rest == "" {
		rest = "0"
	}
	return name + "." + rest
}

func isLetter(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }

// validSuffix: a suffix is letters, digits, dots, dashes and underscores,
// as a tag may hold, without an empty dash-separated word.
func validSuffix(s string) bool {
	if s == "" || s[0] == '-' || s[len(s)-1] == '-' || strings.Contains(s, "--") {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !isLetter(c) && !(c >= '0' && c <= '9') && c != '.' && c != '-' && c != '_' {
			return false
		}
	}
	return true
}

// compare orders versions: by their numbers, one by one (a missing number
// ranks below any: 16.4 < 16.4.0, so mixed precisions are told apart
// rather than equal), then a prerelease below its release, then by build
// number (none first).
func (a dockerVersion) compare(b dockerVersion) int {
	for i := range min(a.parts, b.parts) {
		if a.nums[i] != b.nums[i] {
			if a.nums[i] < b.nums[i] {
				return -1
			}
			return 1
		}
	}
	if a.parts != b.parts {
		if a.parts < b.parts {
			return -1
		}
		return 1
	}
	if a.pre != b.pre {
		if a.pre == "" {
			return 1
		}
		if b.pre == "" {
			return -1
		}
		if c := semver.New(0, 0, 0, semverPrerelease(a.pre), "").Compare(semver.New(0, 0, 0, semverPrerelease(b.pre), "")); c != 0 {
			return c
		}
	}
	switch {
	case a.build < b.build:
		return -1
	case a.build > b.build:
		return 1
	}
	return 0
}

// semver is the version a range checks: the first three numbers (missing
// ones 0) and the prerelease.
func (a dockerVersion) semver() *semver.Version {
	return semver.New(a.nums[0], a.nums[1], a.nums[2], semverPrerelease(a.pre), "")
}

// dockerShape is what a candidate must share with the reference tag.
type dockerShape struct {
	suffix string
	// parts is the number of numbers; 0 for any.
	parts int
}

// fits reports whether v has the shape.
func (s dockerShape) fits(v dockerVersion) bool {
	return v.suffix == s.suffix && (s.parts == 0 || v.parts == s.parts)
}

// dockerOrder picks the highest Docker-style version of a shape in range.
type dockerOrder struct {
	c     *semver.Constraints
	shape dockerShape
}

type dockerCandidate struct {
	version dockerVersion
	tag     string
}

// compare: the higher version wins; between equal versions (v1.2 and 1.2)
// the greater tag.
func (a dockerCandidate) compare(b dockerCandidate) int {
	if c := a.version.compare(b.version); c != 0 {
		return c
	}
	return strings.Compare(a.tag, b.tag)
}

// candidate reads a value as a candidate of the order.
func (o dockerOrder) candidate(value string) (dockerVersion, verdict) {
	v, ok := parseDocker(value)
	if !ok || !o.shape.fits(v) {
		return v, unparsable
	}
	return v, kept
}

func (o dockerOrder) newSelection() selection { return &dockerSelection{o: o} }

func (o dockerOrder) newRanking(n int) ranking {
	return &dockerRanking{o: o, podium: podium[dockerCandidate]{n: n, compare: dockerCandidate.compare}}
}

type dockerSelection struct {
	o    dockerOrder
	lead dockerCandidate
	any  bool
}

func (s *dockerSelection) offer(tag, value string) bool {
	v, verdict := s.o.candidate(value)
	if verdict != kept {
		return false
	}
	c := dockerCandidate{v, tag}
	// As semver's: a loser's range is irrelevant, and the comparison is
	// cheaper than the range check.
	if s.any && c.compare(s.lead) <= 0 {
		return true
	}
	if !s.o.c.Check(v.semver()) {
		return false
	}
	s.lead, s.any = c, true
	return true
}

func (s *dockerSelection) best() string { return s.lead.tag }

type dockerRanking struct {
	o      dockerOrder
	podium podium[dockerCandidate]
}

func (r *dockerRanking) add(tag, value string) verdict {
	v, verdict := r.o.candidate(value)
	if verdict != kept {
		return verdict
	}
	if !r.o.c.Check(v.semver()) {
		return outOfRange
	}
	r.podium.add(dockerCandidate{v, tag})
	return kept
}

func (r *dockerRanking) top() []string {
	return r.podium.tags(func(c dockerCandidate) string { return c.tag })
}

// DockerTag is a tag as the docker kind reads it, for what derives a
// policy from a current tag (discover).
type DockerTag struct {
	// Numbers are the 1 to 4 numbers.
	Numbers []uint64
	// Prerelease is "" for a release, else as semver orders it (rc.1).
	Prerelease string
	// Suffix is the compatibility, without its dash; "" for none.
	Suffix string
}

// ParseDockerTag reads a tag by the docker kind's rules; false when it is
// no Docker-style version.
func ParseDockerTag(tag string) (DockerTag, bool) {
	v, ok := parseDocker(tag)
	if !ok {
		return DockerTag{}, false
	}
	return DockerTag{Numbers: v.nums[:v.parts:v.parts], Prerelease: semverPrerelease(v.pre), Suffix: v.suffix}, true
}
