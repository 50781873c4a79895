package migrate

import (
	"regexp"
	"regexp/syntax"
	"strconv"
	"strings"

	"toolkit.dev/image-toolkit/pkg/policy"
)

// fixedNumbers are the numbers a recipe's pattern writes before the one it
// extracts: 1.27. for ^1\.27\.(?P<patch>[0-9]+)$.
var fixedNumbers = regexp.MustCompile(`^([0-9]+\.)*$`)

// dockerRecipe reads Flux's recipe for a Docker-style tag: an anchored
// pattern of literal text around one group of digits (one or more, [0-9]
// or \d), the last number of the tag, which extract names alone, and
// returns the docker policy that picks the same tags in the same order:
// the range over the fixed numbers, and a reference tag of the shape.
// ok is false for any other pattern.
func dockerRecipe(pattern, extract string) (rng, ref string, ok bool) {
	re, err := syntax.Parse(pattern, syntax.Perl)
	if err != nil {
		return "", "", false
	}
	re = re.Simplify()
	if re.Op != syntax.OpConcat || len(re.Sub) < 3 || re.Sub[0].Op != syntax.OpBeginText || re.Sub[len(re.Sub)-1].Op != syntax.OpEndText {
		return "", "", false
	}
	var before, after strings.Builder
	var group *syntax.Regexp
	for _, sub := range re.Sub[1 : len(re.Sub)-1] {
		switch {
		case sub.Op == syntax.OpLiteral && sub.Flags&syntax.FoldCase == 0:
			if group == nil {
				before.WriteString(string(sub.Rune))
			} else {
				after.WriteString(string(sub.Rune))
			}
		case sub.Op == syntax.OpCapture && group == nil && digitsGroup(sub.Sub[0]):
			group = sub
		default:
			return "", "", false
		}
	}
	if group == nil || !names(extract, group) {
		return "", "", false
	}
	fixed, suffix := before.String(), after.String()
	if !fixedNumbers.MatchString(fixed) || (suffix != "" && suffix[0] != '-') {
		return "", "", false
	}
	ref = fixed + "0" + suffix
	d, ok := policy.ParseDockerTag(ref)
	if !ok || d.Prerelease != "" || d.Suffix != strings.TrimPrefix(suffix, "-") {
		return "", "", false
	}
	nums := strings.Split(strings.TrimSuffix(fixed, "."), ".")
	if fixed == "" {
		return "*", ref, true
	}
	last, err := strconv.ParseUint(nums[len(nums)-1], 10, 64)
	if err != nil {
		return "", "", false
	}
	upper := append(nums[:len(nums)-1:len(nums)-1], strconv.FormatUint(last+1, 10))
	return ">=" + strings.Join(nums, ".") + " <" + strings.Join(upper, "."), ref, true
}

// digitsGroup: one or more of [0-9].
func digitsGroup(re *syntax.Regexp) bool {
	return re.Op == syntax.OpPlus && re.Sub[0].Op == syntax.OpCharClass &&
		len(re.Sub[0].Rune) == 2 && re.Sub[0].Rune[0] == '0' && re.Sub[0].Rune[1] == '9'
}

// names reports whether extract is the group alone: $1, ${1}, $name,
// ${name}.
func names(extract string, group *syntax.Regexp) bool {
	for _, n := range []string{strconv.Itoa(group.Cap), group.Name} {
		if n != "" && (extract == "$"+n || extract == "${"+n+"}") {
			return true
		}
	}
	return false
}
