// Package propose gives each image pkg/discover found the ImagePolicy it
// gets when nobody wrote one (a default by mode from its tag, or its policy
// annotation) and object names for its ImageRepository and ImagePolicy. It
// speaks the API's types, so it is apart from pkg/discover, which the
// write-back engine imports without them.
package propose

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/Masterminds/semver/v3"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/discover"
	"toolkit.dev/image-toolkit/pkg/policy"
)

// Mode is how far a default policy lets an image move from its current
// tag.
type Mode string

const (
	// ModePatch: the newest patch of the current minor (~1.4.2).
	ModePatch Mode = "patch"
	// ModeMinor, the default: the newest version of the current major
	// (^1.4.2; for 0.x, of the current minor, as semver makes 0.x minors
	// breaking).
	ModeMinor Mode = "minor"
	// ModeMajor: the newest version, any major.
	ModeMajor Mode = "major"
)

// ParseMode reads a mode; "" is ModeMinor.
func ParseMode(s string) (Mode, error) {
	switch Mode(s) {
	case "", ModeMinor:
		return ModeMinor, nil
	case ModePatch, ModeMajor:
		return Mode(s), nil
	}
	return "", fmt.Errorf("policy mode %q: want patch, minor or major", s)
}

// maxMajorDigits is the longest tag of digits alone read as a major
// version rather than a build number: node's 22 stays within its major
// (a move to 24 would break what minor mode promises), a CI's 1234 moves to
// the greatest number as before. Mode major moves a major version as it
// moves build numbers.
const maxMajorDigits = 3

var (
	digits = regexp.MustCompile(`^[0-9]+$`)
)

// Policy is the policy an image gets: from its locations' policy
// annotation when they give one, else derived from its tag by mode. The
// lower bound is always the current tag, so a discovered image never
// moves to a lower version. An error says why the image cannot get one
// (a tag that has no order, such as latest or a SHA; an annotation that does
// not parse): the image is then reported, not automated.
func Policy(img discover.Image, mode Mode) (imagev1.ImagePolicyChoice, *imagev1.TagFilter, error) {
	annotation := ""
	for _, l := range img.Locations {
		if l.Policy != "" {
			annotation = l.Policy
			break
		}
	}
	return PolicyOf(img.Tag, annotation, mode)
}

// PolicyOf is Policy of an image known by its tag and its policy
// annotation ("" when none), as an UpdateJob reports them.
func PolicyOf(tag, annotation string, mode Mode) (imagev1.ImagePolicyChoice, *imagev1.TagFilter, error) {
	if annotation != "" {
		choice, filter, err := annotated(annotation)
		// docker:RANGE gives the range; the shape is the current tag's.
		if d := choice.Docker; d != nil && d.CompatibleWith == "" {
			if _, ok := policy.ParseDockerTag(tag); ok {
				d.CompatibleWith = tag
			}
		}
		return choice, filter, err
	}
	return Default(tag, mode)
}

// Default derives a policy from the current tag, by its shape:
//
//   - a date (2024.01.15, 2025.6.1, 20240115, 20240115-1: a year 1970 to
//     2099, then a month, and so on): the docker kind from the tag up, any
//     mode, since a date has no major to stay within;
//   - a semver tag (a leading v is fine) whose prerelease, if any, is one
//     (1.5.0-rc.1, not 7.4.4-alpine): a semver range from the tag up to the
//     mode's bound, without prereleases unless the tag is one;
//   - a Docker-style version (22, 1.27, 7.4-alpine, 3.12-slim-bookworm,
//     7.4.4-alpine): the docker kind, as semver's range by mode over its
//     numbers, compatible with the tag (its suffix and number of parts);
//   - digits alone: up to maxMajorDigits a major version (node:22,
//     postgres:17), a Docker-style version, which the minor mode keeps;
//     longer, a build number: the greatest number.
//
// Anything else has no order and no default: latest, a branch name, a git
// SHA.
func Default(tag string, mode Mode) (imagev1.ImagePolicyChoice, *imagev1.TagFilter, error) {
	d, docker := policy.ParseDockerTag(tag)
	switch {
	case policy.CommitLike(strings.TrimPrefix(tag, "sha-")):
	case docker && isDate(d):
		return dockerChoice(">="+lowerBound(d), tag), nil, nil
	case semverTag(tag, d, docker):
		v, _ := semver.StrictNewVersion(strings.TrimPrefix(tag, "v"))
		// Masterminds/semver matches prereleases only for a range that
		// names one: the bounds name one exactly when the tag is one.
		pre := ""
		if v.Prerelease() != "" {
			pre = "-0"
		}
		return imagev1.ImagePolicyChoice{SemVer: &imagev1.SemVerPolicy{Range: ">=" + tag + upperBound(mode, v.Major(), v.Minor(), ".0", pre)}}, nil, nil
	case digits.MatchString(tag) && len(tag) > maxMajorDigits:
		return imagev1.ImagePolicyChoice{Numerical: &imagev1.NumericalPolicy{Order: "asc"}},
			&imagev1.TagFilter{Pattern: `^[0-9]+$`}, nil
	case docker:
		pre := ""
		if d.Prerelease != "" {
			pre = "-0"
		}
		minor := uint64(0)
		if len(d.Numbers) > 1 {
			minor = d.Numbers[1]
		}
		return dockerChoice(">="+lowerBound(d)+upperBound(mode, d.Numbers[0], minor, "", pre), tag), nil, nil
	}
	return imagev1.ImagePolicyChoice{}, nil, fmt.Errorf("tag %q has no order (not a version, date or number): write its policy (annotation %sCONTAINER)", tag, discover.PolicyAnnotationPrefix)
}

// semverTag reports whether a tag is semver that keeps the semver rule: a
// release, or a prerelease the docker kind reads as one (its suffix is a
// compatibility: 7.4.4-alpine is a Docker-style version).
func semverTag(tag string, d policy.DockerTag, docker bool) bool {
	if _, err := semver.StrictNewVersion(strings.TrimPrefix(tag, "v")); err != nil || digits.MatchString(tag) {
		return false
	}
	return !docker || d.Suffix == ""
}

// upperBound is the mode's bound of a version major.minor: patch keeps the
// minor, minor the major (for 0.x the minor, as semver makes 0.x minors
// breaking), major none. zeros (".0" or "") pads the bound's numbers to
// three: semver writes them all (<2.0.0), Docker-style versions as few as
// they need (<2); pre ("-0" or "") lets prereleases below it match.
func upperBound(mode Mode, major, minor uint64, zeros, pre string) string {
	switch {
	case mode == ModeMajor:
		return ""
	case mode == ModePatch:
		return fmt.Sprintf(" <%d.%d%s%s", major, minor+1, zeros, pre)
	case major == 0:
		return fmt.Sprintf(" <0.%d%s%s", minor+1, zeros, pre)
	}
	return fmt.Sprintf(" <%d%s%s%s", major+1, zeros, zeros, pre)
}

// lowerBound is a Docker-style tag as a range's bound: its first three
// numbers (a range knows no fourth) and its prerelease.
func lowerBound(d policy.DockerTag) string {
	nums := make([]string, min(len(d.Numbers), 3))
	for i := range nums {
		nums[i] = strconv.FormatUint(d.Numbers[i], 10)
	}
	s := strings.Join(nums, ".")
	if d.Prerelease != "" {
		s += "-" + d.Prerelease
	}
	return s
}

// isDate reports whether a Docker-style tag is a date: YYYY.MM[.DD[.N]]
// or YYYYMMDD, a year from 1970 to 2099 (a build number, -N, may follow,
// which the docker kind orders).
func isDate(d policy.DockerTag) bool {
	if d.Suffix != "" || d.Prerelease != "" {
		return false
	}
	n := d.Numbers
	if len(n) == 1 {
		y, m, day := n[0]/10000, n[0]/100%100, n[0]%100
		return n[0] >= 19700101 && n[0] <= 20991231 && y >= 1970 && m >= 1 && m <= 12 && day >= 1 && day <= 31
	}
	return n[0] >= 1970 && n[0] <= 2099 && n[1] >= 1 && n[1] <= 12 && (len(n) < 3 || n[2] >= 1 && n[2] <= 31)
}

func dockerChoice(rng, tag string) imagev1.ImagePolicyChoice {
	return imagev1.ImagePolicyChoice{Docker: &imagev1.DockerPolicy{Range: rng, CompatibleWith: tag}}
}

// regexAnnotation is the annotation regex:PATTERN, which is no kind: the
// tags matching PATTERN, the greatest by name, as Flux v1's regex filter
// took them.
const regexAnnotation = "regex"

// annotated reads a workload's policy annotation: KIND:ARG for each
// policy kind that has one (semver:RANGE, alphabetical:asc|desc,
// numerical:asc|desc), or regex:PATTERN.
func annotated(s string) (imagev1.ImagePolicyChoice, *imagev1.TagFilter, error) {
	kind, arg, ok := strings.Cut(s, ":")
	if !ok || arg == "" {
		return imagev1.ImagePolicyChoice{}, nil, fmt.Errorf("policy annotation %q: want %s", s, annotations(":ARG"))
	}
	if kind == regexAnnotation {
		if _, err := regexp.Compile(arg); err != nil {
			return imagev1.ImagePolicyChoice{}, nil, fmt.Errorf("policy annotation %q: %v", s, err)
		}
		return imagev1.ImagePolicyChoice{Alphabetical: &imagev1.AlphabeticalPolicy{Order: policy.Ascending}}, &imagev1.TagFilter{Pattern: arg}, nil
	}
	if k, ok := policy.KindOf(kind); ok && k.Annotation != "" {
		choice, err := k.Annotate(arg)
		if err != nil {
			return imagev1.ImagePolicyChoice{}, nil, fmt.Errorf("policy annotation %q: %v", s, err)
		}
		return choice, nil, nil
	}
	return imagev1.ImagePolicyChoice{}, nil, fmt.Errorf("policy annotation %q: want %s", s, annotations(":"))
}

// annotations lists the annotations' forms for a message: KIND:ARG
// (semver:RANGE) when arg is ":ARG", else KIND + arg (semver:).
func annotations(arg string) string {
	var forms []string
	for _, k := range policy.Kinds {
		if k.Annotation != "" {
			forms = append(forms, k.Field+strings.Replace(arg, "ARG", k.Annotation, 1))
		}
	}
	forms = append(forms, regexAnnotation+strings.Replace(arg, "ARG", "PATTERN", 1))
	return policy.Alternatives(forms)
}

// Names gives each image an object name for its ImageRepository and
// ImagePolicy: the last part of its name as a DNS label (ghcr.io/acme/app
// is app), and where two images would share one, that name and a hash of
// the image name (app-3f1c2a), so the names stay the same whatever order
// the images come in.
func Names(images []discover.Image) map[string]string {
	base := map[string]string{}
	count := map[string]int{}
	for _, img := range images {
		b := dnsLabel(img.Name[strings.LastIndexByte(img.Name, '/')+1:])
		base[img.Name] = b
		count[b]++
	}
	out := map[string]string{}
	for n, b := range base {
		if count[b] > 1 {
			sum := sha256.Sum256([]byte(n))
			b = strings.TrimRight(b[:min(len(b), 56)], "-") + "-" + hex.EncodeToString(sum[:])[:6]
		}
		out[n] = b
	}
	return out
}

// dnsLabel makes s a valid object name: lower case letters, digits and
// dashes, at most 63, starting and ending with a letter or digit.
func dnsLabel(s string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		default:
			b.WriteByte('-')
		}
	}
	out := strings.Trim(b.String(), "-")
	if len(out) > 63 {
		out = strings.TrimRight(out[:63], "-")
	}
	if out == "" {
		out = "image"
	}
	return out
}
