// Package refname checks git reference names as git check-ref-format (and
// libgit2's git_reference_name_is_valid) do, in pure Go.
//
// It is a package of its own, not part of package git, so that what only
// needs to check a branch name (pkg/writeback's Plan, asked by the events
// of every controller) does not link package git's SSH and HTTP clients.
package refname

import "strings"

// Valid reports whether name is a valid full reference name, such as
// refs/heads/main or HEAD. The rules are git check-ref-format's:
//
//   - no component begins with a dot or ends with .lock;
//   - no "..", no "@{", and the name is not "@";
//   - no ASCII control character, space, ~, ^, :, ?, *, [ or \;
//   - it neither begins nor ends with a slash, has no empty component, and
//     does not end with a dot;
//   - a one-level name (no slash) is all capitals and underscores, as
//     HEAD and FETCH_HEAD are: git would not take "main" for a full name.
func Valid(name string) bool {
	if name == "" || name == "@" || strings.Contains(name, "..") || strings.Contains(name, "@{") ||
		strings.HasSuffix(name, ".") {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if c < 0x20 || c == 0x7f || strings.IndexByte(" ~^:?*[\\", c) >= 0 {
			return false
		}
	}
	parts := strings.Split(name, "/")
	if len(parts) == 1 {
		return oneLevel(name)
	}
	for _, p := range parts {
		if p == "" || p[0] == '.' || strings.HasSuffix(p, ".lock") {
			return false
		}
	}
	return true
}

// Branch reports whether b is a valid branch name: refs/heads/b is valid.
func Branch(b string) bool { return Valid("refs/heads/" + b) }

func oneLevel(name string) bool {
	for i := 0; i < len(name); i++ {
		if c := name[i]; (c < 'A' || c > 'Z') && c != '_' {
			return false
		}
	}
	return true
}
