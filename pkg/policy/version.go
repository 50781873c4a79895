package policy

import (
	"strings"

	"github.com/Masterminds/semver/v3"
)

// maxVersionLen is semver's own limit.
const maxVersionLen = 256

// parseVersion parses a tag as Masterminds/semver/v3's NewVersion does by
// default (an optional v, leading zeros allowed in the numbers, validated
// prerelease and metadata), with Flux's rule on top: all three numbers must
// be written, so 1.2 is not a version. It lexes by hand: the library's
// regexp costs more than a whole policy evaluation may.
func parseVersion(tag string) (*semver.Version, bool) {
	if tag == "" || len(tag) > maxVersionLen {
		return nil, false
	}
	i := 0
	if tag[0] == 'v' {
		i++
	}
	var nums [3]uint64
	for part := range 3 {
		if part > 0 {
			if i >= len(tag) || tag[i] != '.' {
				return nil, false
			}
			i++
		}
		// number refuses what overflows uint64, as ParseUint does.
		n, j, ok := number(tag, i)
		if !ok {
			return nil, false
		}
		nums[part], i = n, j
	}
	var pre, meta string
	if i < len(tag) && tag[i] == '-' {
		end := strings.IndexByte(tag[i:], '+')
		if end < 0 {
			end = len(tag)
		} else {
			end += i
		}
		pre = tag[i+1 : end]
		if !validIdentifiers(pre, true) {
			return nil, false
		}
		i = end
	}
	if i < len(tag) && tag[i] == '+' {
		meta = tag[i+1:]
		if !validIdentifiers(meta, false) {
			return nil, false
		}
		i = len(tag)
	}
	if i != len(tag) {
		return nil, false
	}
	return semver.New(nums[0], nums[1], nums[2], pre, meta), true
}

// validIdentifiers checks dot-separated identifiers of [0-9A-Za-z-]; in a
// prerelease, numeric identifiers may not have leading zeros.
func validIdentifiers(s string, prerelease bool) bool {
	if s == "" {
		return false
	}
	for _, id := range strings.Split(s, ".") {
		if id == "" {
			return false
		}
		numeric := true
		for j := 0; j < len(id); j++ {
			c := id[j]
			switch {
			case c >= '0' && c <= '9':
			case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c == '-':
				numeric = false
			default:
				return false
			}
		}
		if prerelease && numeric && len(id) > 1 && id[0] == '0' {
			return false
		}
	}
	return true
}
