// Package imagesource reads where an image was built from, out of the
// OCI annotations its builder wrote (org.opencontainers.image.source,
// .revision, .version, .created: docker/metadata-action writes them as
// both manifest annotations and config labels), and says what an update
// from one image to another brings: the two revisions and the forge's page
// comparing them.
//
// Those values are the image builder's word and end up in commit messages
// and pull requests, which people click: a value is taken only when it is
// what it claims (an http(s) URL without credentials, a hexadecimal commit
// hash, a short printable version, an RFC 3339 time), and anything else is
// dropped with its reason, never rendered.
package imagesource

import (
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode"

	"toolkit.dev/image-toolkit/pkg/apis/meta"
)

// The OCI image spec's annotation keys this package reads.
const (
	KeySource   = "org.opencontainers.image.source"
	KeyRevision = "org.opencontainers.image.revision"
	KeyVersion  = "org.opencontainers.image.version"
	KeyCreated  = "org.opencontainers.image.created"
)

// Limits of what is taken.
const (
	maxURL     = 512
	maxVersion = 128
)

var (
	revision = regexp.MustCompile(`^[0-9a-f]{7,64}$`)
	// version and urlPath are the characters a version and a
	// repository's path are made of: none of them means anything to
	// Markdown or HTML, so a value is safe in a commit message, a pull
	// request's body and the dashboard as it is.
	version = regexp.MustCompile(`^[A-Za-z0-9._+~-]+$`)
	urlPath = regexp.MustCompile(`^[A-Za-z0-9._~/%+-]*$`)
	// scpLike is git's user@host:path form, which builders sometimes
	// write as the source.
	scpLike = regexp.MustCompile(`^[A-Za-z0-9._-]+@([A-Za-z0-9.-]+):([^/].*)$`)
)

// Read is the source the manifest's annotations give, each key falling
// back to the config's labels: the OCI spec's place for them is the
// manifest, and builders that only label the config are common.
func Read(annotations, labels map[string]string) meta.ImageSource {
	var s meta.ImageSource
	get := func(key string) (string, bool) {
		if v, ok := annotations[key]; ok {
			return v, true
		}
		v, ok := labels[key]
		return v, ok
	}
	drop := func(key, why string) { s.Dropped = append(s.Dropped, key+": "+why) }
	if v, ok := get(KeySource); ok {
		if u, err := sourceURL(v); err != nil {
			drop(KeySource, err.Error())
		} else {
			s.URL = u
		}
	}
	if v, ok := get(KeyRevision); ok {
		if r := strings.ToLower(strings.TrimSpace(v)); revision.MatchString(r) {
			s.Revision = r
		} else {
			drop(KeyRevision, fmt.Sprintf("%s is not a commit hash", describe(v)))
		}
	}
	if v, ok := get(KeyVersion); ok {
		switch v = strings.TrimSpace(v); {
		case len(v) > maxVersion:
			drop(KeyVersion, fmt.Sprintf("%d bytes, more than %d", len(v), maxVersion))
		case !version.MatchString(v):
			drop(KeyVersion, fmt.Sprintf("%s holds characters other than letters, digits and ._+~-", describe(v)))
		default:
			s.Version = v
		}
	}
	if v, ok := get(KeyCreated); ok {
		if t, err := time.Parse(time.RFC3339Nano, strings.TrimSpace(v)); err != nil {
			drop(KeyCreated, fmt.Sprintf("%s is not an RFC 3339 time", describe(v)))
		} else {
			s.Created = t.UTC().Format(time.RFC3339)
		}
	}
	return s
}

// sourceURL is the https (or http) address of a repository, as given or
// from git's scp-like form, without .git or a trailing slash.
func sourceURL(v string) (string, error) {
	v = strings.TrimSpace(v)
	if len(v) > maxURL {
		return "", fmt.Errorf("%d bytes, more than %d", len(v), maxURL)
	}
	if m := scpLike.FindStringSubmatch(v); m != nil {
		v = "https://" + m[1] + "/" + m[2]
	}
	v = strings.TrimPrefix(v, "git+")
	u, err := url.Parse(v)
	switch {
	case err != nil:
		return "", fmt.Errorf("%s is not a URL", describe(v))
	case u.Scheme != "https" && u.Scheme != "http":
		return "", fmt.Errorf("%s is not an http(s) URL", describe(v))
	case u.Host == "" || u.Opaque != "":
		return "", fmt.Errorf("%s names no host", describe(v))
	case u.User != nil:
		return "", fmt.Errorf("the URL carries credentials")
	case u.RawQuery != "" || u.Fragment != "":
		return "", fmt.Errorf("%s has a query or fragment, which a repository's address has not", describe(v))
	case strings.IndexFunc(v, func(r rune) bool { return !unicode.IsPrint(r) || unicode.IsSpace(r) }) >= 0:
		return "", fmt.Errorf("%s holds spaces or characters that do not print", describe(v))
	case !urlPath.MatchString(u.EscapedPath()) || strings.ContainsAny(u.Host, "<>\"'`"):
		return "", fmt.Errorf("%s holds characters a repository's address has not", describe(v))
	}
	u.Path = strings.TrimSuffix(strings.TrimSuffix(u.Path, "/"), ".git")
	return u.String(), nil
}

// Verified is the source with a verified SLSA provenance's repository
// and commit in place of the labels' (the first attestation that names
// both): the labels are the builder's word, the provenance is signed by
// a signer the policy trusts. A label that says otherwise is dropped,
// and Dropped says so. Without such an attestation the labels' source is
// returned as it is.
func Verified(labels meta.ImageSource, atts []meta.Attestation) meta.ImageSource {
	for _, a := range atts {
		if a.SourceRepository == "" || a.Revision == "" {
			continue
		}
		u, err := sourceURL("https://" + a.SourceRepository)
		r := strings.ToLower(a.Revision)
		if err != nil || !revision.MatchString(r) {
			continue
		}
		s := labels
		s.Dropped = slices.Clone(labels.Dropped)
		if s.URL != "" && s.URL != u {
			s.Dropped = append(s.Dropped, KeySource+": "+describe(s.URL)+" differs from the verified provenance's "+u)
		}
		if s.Revision != "" && s.Revision != r {
			s.Dropped = append(s.Dropped, KeyRevision+": "+describe(s.Revision)+" differs from the verified provenance's "+r)
		}
		if len(s.Dropped) > 4 {
			s.Dropped = s.Dropped[len(s.Dropped)-4:]
		}
		s.URL, s.Revision, s.Verified = u, r, true
		return s
	}
	return labels
}

// describe quotes a value for a message, cut short: a hostile label may
// be a megabyte.
func describe(v string) string {
	if len(v) > 64 {
		return fmt.Sprintf("%q… (%d bytes)", v[:64], len(v))
	}
	return fmt.Sprintf("%q", v)
}

// Change is what replacing the image of oldValue by the new image of sc
// brings: the new source and revision, and when oldValue is the image the
// policy chose before (the value replaced names its tag or digest), that
// image's revision and the page comparing the two, which compare makes of
// the source's URL and the revisions (empty when it knows none: a forge's
// page, pkg/forge.CompareURL). Nil when the new image says nothing of its
// source.
func Change(sc *meta.ImageSourceChange, oldValue string, compare func(url, from, to string) string) *meta.ChangeSource {
	if sc == nil || sc.Source.IsZero() {
		return nil
	}
	out := &meta.ChangeSource{URL: sc.Source.URL, Revision: sc.Source.Revision, Version: sc.Source.Version, Verified: sc.Source.Verified}
	prev, ps := sc.Previous, sc.PreviousSource
	if prev == nil || ps == nil || ps.Revision == "" || ps.URL != sc.Source.URL || !replaces(oldValue, *prev) {
		return out
	}
	out.PreviousRevision = ps.Revision
	if out.Revision != "" && out.Revision != out.PreviousRevision && out.URL != "" {
		out.CompareURL = compare(out.URL, out.PreviousRevision, out.Revision)
	}
	return out
}

// replaces reports whether a replaced value is ref: the whole reference,
// or the tag or the digest a :tag or :digest marker held.
func replaces(oldValue string, ref meta.ImageRef) bool {
	return oldValue != "" && (oldValue == ref.String() || oldValue == ref.Name+":"+ref.Tag ||
		oldValue == ref.Tag || (ref.Digest != "" && oldValue == ref.Digest))
}

// markdownSpecial are the characters that mean something to Markdown or
// HTML in a line of text.
var markdownSpecial = strings.NewReplacer(
	"\\", "\\\\", "`", "\\`", "*", "\\*", "_", "\\_", "[", "\\[", "]", "\\]", "|", "\\|",
	"#", "\\#", "~", "\\~", "!", "\\!", "<", "&lt;", ">", "&gt;", "&", "&amp;")

// Subject is a commit subject as a line of Markdown: its first line, at
// most 200 characters, every character Markdown or HTML reads escaped. A
// source repository's commit messages are anyone's text.
func Subject(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return -1
		}
		return r
	}, s)
	if r := []rune(s); len(r) > 200 {
		s = string(r[:200]) + "…"
	}
	return markdownSpecial.Replace(s)
}
