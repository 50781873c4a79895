package discover

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"
	"strings"

	"github.com/Masterminds/semver/v3"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
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

var digits = regexp.MustCompile(`^[0-9]+$`)

// Policy is the policy an image gets: from its locations' policy
// annotation when they give one, else derived from its tag by mode. The
// lower bound is always the current tag, so a discovered image never
// moves to a lower version. An error says why the image cannot get one
// (a tag that is neither a version nor a number, an annotation that does
// not parse): the image is then reported, not automated.
func Policy(img Image, mode Mode) (imagev1.ImagePolicyChoice, *imagev1.TagFilter, error) {
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
		return annotated(annotation)
	}
	return Default(tag, mode)
}

// Default derives a policy from the current tag. For a semver tag (a
// leading v is fine) it is a range from the tag up to the mode's bound,
// without prereleases unless the tag is one; for a tag of digits alone
// (a build number, a date like 20240105) the greatest number. Anything
// else has no safe default.
func Default(tag string, mode Mode) (imagev1.ImagePolicyChoice, *imagev1.TagFilter, error) {
	v, err := semver.StrictNewVersion(strings.TrimPrefix(tag, "v"))
	if err == nil && !digits.MatchString(tag) {
		// Masterminds/semver matches prereleases only for a range that
		// names one: the bounds name one exactly when the tag is one.
		pre := ""
		if v.Prerelease() != "" {
			pre = "-0"
		}
		upper := ""
		switch {
		case mode == ModeMajor:
		case mode == ModePatch:
			upper = fmt.Sprintf(" <%d.%d.0%s", v.Major(), v.Minor()+1, pre)
		case v.Major() == 0:
			upper = fmt.Sprintf(" <0.%d.0%s", v.Minor()+1, pre)
		default:
			upper = fmt.Sprintf(" <%d.0.0%s", v.Major()+1, pre)
		}
		return imagev1.ImagePolicyChoice{SemVer: &imagev1.SemVerPolicy{Range: ">=" + tag + upper}}, nil, nil
	}
	if digits.MatchString(tag) {
		return imagev1.ImagePolicyChoice{Numerical: &imagev1.NumericalPolicy{Order: "asc"}},
			&imagev1.TagFilter{Pattern: `^[0-9]+$`}, nil
	}
	return imagev1.ImagePolicyChoice{}, nil, fmt.Errorf("tag %q is neither a version nor a number: write its policy (annotation %sCONTAINER)", tag, PolicyAnnotationPrefix)
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
func Names(images []Image) map[string]string {
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
