package git

import "strings"

// FormatRevision names a commit as the status fields of both kinds (and
// Flux) write it: what was asked for and the object name with its hash
// format, e.g. main@sha1:0123abcd... or v1.2.0@sha256:... (a 64-digit name).
func FormatRevision(label, hash string) string {
	format := "sha1"
	if len(hash) == 64 {
		format = "sha256"
	}
	return label + "@" + format + ":" + hash
}

// ParseRevision takes a revision apart; ok is false for anything
// FormatRevision would not have written.
func ParseRevision(rev string) (label, hash string, ok bool) {
	i := strings.LastIndex(rev, "@")
	if i < 0 {
		return "", "", false
	}
	format, hash, found := strings.Cut(rev[i+1:], ":")
	if !found || (format != "sha1" && format != "sha256") || hash == "" {
		return "", "", false
	}
	return rev[:i], hash, true
}

// ShortRevision is a revision for messages: label@hash with the hash cut
// to 12 characters (the hash alone without a label); what does not parse
// as it is.
func ShortRevision(rev string) string {
	label, hash, ok := ParseRevision(rev)
	if !ok {
		return rev
	}
	if len(hash) > 12 {
		hash = hash[:12]
	}
	if label == "" {
		return hash
	}
	return label + "@" + hash
}
