package imagesource

import (
	"strings"
	"testing"

	"toolkit.dev/image-toolkit/pkg/apis/meta"
)

// The manifest's annotations win over the config's labels, key by key;
// what docker/metadata-action writes is taken as it is, git's scp-like
// address becomes the https one, and a revision is lower-cased.
func TestReadTakesWhatBuildersWrite(t *testing.T) {
	got := Read(
		map[string]string{KeySource: "https://github.com/acme/api", KeyRevision: "3A91042C0FFEE"},
		map[string]string{KeySource: "https://github.com/evil/fork", KeyVersion: "1.4.0", KeyCreated: "2026-12-01T10:11:12.5+01:00"})
	want := meta.ImageSource{URL: "https://github.com/acme/api", Revision: "3a91042c0ffee", Version: "1.4.0", Created: "2026-12-01T09:11:12Z"}
	if got.URL != want.URL || got.Revision != want.Revision || got.Version != want.Version || got.Created != want.Created || len(got.Dropped) != 0 {
		t.Errorf("Read = %+v, want %+v", got, want)
	}
	if s := Read(nil, map[string]string{KeySource: "git@gitlab.com:group/sub/app.git"}); s.URL != "https://gitlab.com/group/sub/app" {
		t.Errorf("scp-like source read as %q", s.URL)
	}
	if s := Read(nil, map[string]string{KeySource: "git+https://codeberg.org/team/app.git/"}); s.URL != "https://codeberg.org/team/app" {
		t.Errorf("git+https source read as %q", s.URL)
	}
	if s := Read(nil, nil); !s.IsZero() || len(s.Dropped) != 0 {
		t.Errorf("no labels: %+v", s)
	}
}

// Hostile or wrong labels are dropped, each with the label and its
// reason, and never taken: a script URL, credentials, a megabyte, a
// revision that is a branch name, a version with a newline, a date that
// is not one.
func TestReadDropsWhatIsNotWhatItClaims(t *testing.T) {
	huge := "https://github.com/acme/" + strings.Repeat("a", 1<<20)
	for _, c := range []struct {
		key, value, why string
	}{
		{KeySource, "javascript:alert(1)", "is not an http(s) URL"},
		{KeySource, "https://user:token@github.com/acme/api", "carries credentials"},
		{KeySource, huge, "more than 512"},
		{KeySource, "https://github.com/acme/api)<img/src=x>", "characters a repository's address has not"},
		{KeySource, "https://github.com/acme/api?utm=x", "query or fragment"},
		{KeySource, "https:///nohost", "names no host"},
		{KeySource, "https://github.com/acme/a pi", "do not print"},
		{KeySource, "https://github.com/%zz", "is not a URL"},
		{KeyRevision, "main", "is not a commit hash"},
		{KeyRevision, strings.Repeat("f", 100000), "is not a commit hash"},
		{KeyVersion, "1.0\n<script>", "other than letters"},
		{KeyVersion, "1.0|x", "other than letters"},
		{KeyVersion, strings.Repeat("1", 200), "more than 128"},
		{KeyCreated, "yesterday", "not an RFC 3339 time"},
	} {
		s := Read(nil, map[string]string{c.key: c.value})
		if !s.IsZero() || len(s.Dropped) != 1 || !strings.HasPrefix(s.Dropped[0], c.key+": ") || !strings.Contains(s.Dropped[0], c.why) || len(s.Dropped[0]) > 300 {
			t.Errorf("%s=%.40q: %+v, want it dropped because it %s", c.key, c.value, s, c.why)
		}
	}
}

// An update brings the new revision; the previous one and the compare
// page only when the value replaced is the image the policy chose before,
// from the same repository; a forge without compare pages gets none.
func TestChangeComparesOnlyWhatItReplaced(t *testing.T) {
	compare := func(url, from, to string) string {
		if !strings.HasPrefix(url, "https://code.example/") {
			return ""
		}
		return url + "/compare/" + from + "..." + to
	}
	prev := meta.ImageRef{Name: "ghcr.io/acme/api", Tag: "1.3.0", Digest: "sha256:aaaa"}
	sc := &meta.ImageSourceChange{
		Source:         meta.ImageSource{URL: "https://code.example/acme/api", Revision: "bbbbbbb", Version: "1.4.0"},
		Previous:       &prev,
		PreviousSource: &meta.ImageSource{URL: "https://code.example/acme/api", Revision: "aaaaaaa"},
	}
	for _, old := range []string{"ghcr.io/acme/api:1.3.0", "1.3.0", "sha256:aaaa", "ghcr.io/acme/api:1.3.0@sha256:aaaa"} {
		c := Change(sc, old, compare)
		if c == nil || c.PreviousRevision != "aaaaaaa" || c.CompareURL != "https://code.example/acme/api/compare/aaaaaaa...bbbbbbb" || c.Revision != "bbbbbbb" {
			t.Errorf("from %q: %+v", old, c)
		}
	}
	if c := Change(sc, "ghcr.io/acme/api:1.2.0", compare); c == nil || c.PreviousRevision != "" || c.CompareURL != "" || c.URL == "" {
		t.Errorf("from another value: %+v, want the new source alone", c)
	}
	other := *sc
	other.PreviousSource = &meta.ImageSource{URL: "https://code.example/acme/old-api", Revision: "aaaaaaa"}
	if c := Change(&other, "1.3.0", compare); c.CompareURL != "" {
		t.Errorf("across repositories: %+v", c)
	}
	elsewhere := *sc
	elsewhere.Source.URL, elsewhere.PreviousSource = "https://git.example/acme/api", &meta.ImageSource{URL: "https://git.example/acme/api", Revision: "aaaaaaa"}
	if c := Change(&elsewhere, "1.3.0", compare); c.PreviousRevision != "aaaaaaa" || c.CompareURL != "" {
		t.Errorf("no forge serves the source: %+v", c)
	}
	if c := Change(&meta.ImageSourceChange{}, "1.3.0", compare); c != nil {
		t.Errorf("an image that says nothing: %+v", c)
	}
}

// A source commit's subject is one line of plain text in Markdown: links,
// HTML, emphasis and table pipes are escaped, control characters dropped,
// and a long one cut.
func TestSubjectIsEscapedMarkdown(t *testing.T) {
	for in, want := range map[string]string{
		"fix: the typo":                             "fix: the typo",
		"feat: [click](javascript:alert(1))":        `feat: \[click\](javascript:alert(1))`,
		"<img src=x onerror=alert(1)> & more\nbody": `&lt;img src=x onerror=alert(1)&gt; &amp; more`,
		"**bold** _it_ `code` a|b #1 ~x~ !":         `\*\*bold\*\* \_it\_ \` + "`code\\`" + ` a\|b \#1 \~x\~ \!`,
		"bell\a\x1b[31m":                            `bell\[31m`,
	} {
		if got := Subject(in); got != want {
			t.Errorf("Subject(%q) = %q, want %q", in, got, want)
		}
	}
	if got := Subject(strings.Repeat("a", 300)); len([]rune(got)) != 201 {
		t.Errorf("a long subject is %d characters", len([]rune(got)))
	}
}

// A verified provenance's repository and commit win over the labels, and
// a label that disagrees is dropped with the reason.
func TestAVerifiedProvenanceNamesTheSource(t *testing.T) {
	labels := Read(map[string]string{KeySource: "https://github.com/evil/fork", KeyRevision: "1111111", KeyVersion: "1.0.0"}, nil)
	atts := []meta.Attestation{
		{Name: "scan"},
		{Name: "provenance", SourceRepository: "github.com/acme/api", Revision: "0123456789ABCDEF0123456789abcdef01234567"},
	}
	s := Verified(labels, atts)
	if !s.Verified || s.URL != "https://github.com/acme/api" || s.Revision != "0123456789abcdef0123456789abcdef01234567" || s.Version != "1.0.0" {
		t.Fatalf("source %+v", s)
	}
	if len(s.Dropped) != 2 || !strings.Contains(s.Dropped[0], "differs from the verified provenance's https://github.com/acme/api") {
		t.Errorf("dropped %q", s.Dropped)
	}
	if len(labels.Dropped) != 0 {
		t.Errorf("the labels' source was changed: %q", labels.Dropped)
	}
	// A provenance that names no commit, or no usable address, leaves
	// the labels' source.
	for _, a := range []meta.Attestation{{SourceRepository: "github.com/acme/api"}, {SourceRepository: "github.com/a b", Revision: "1111111"}} {
		if got := Verified(labels, []meta.Attestation{a}); got.Verified || got.URL != labels.URL {
			t.Errorf("%+v: source %+v", a, got)
		}
	}
	c := Change(&meta.ImageSourceChange{Source: s}, "", nil)
	if !c.Verified {
		t.Error("the change's source does not say it is verified")
	}
}
