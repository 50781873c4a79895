package git

import (
	"strings"
	"testing"
)

// Revisions read back as written, whatever the label holds.
func TestRevision(t *testing.T) {
	sha1, sha256 := strings.Repeat("a", 40), strings.Repeat("b", 64)
	for _, tt := range []struct{ label, hash, want string }{
		{"main", sha1, "main@sha1:" + sha1},
		{"v1.2.0", sha256, "v1.2.0@sha256:" + sha256},
		{"team@feature", sha1, "team@feature@sha1:" + sha1},
	} {
		got := FormatRevision(tt.label, tt.hash)
		if got != tt.want {
			t.Errorf("FormatRevision(%q, %q) = %q, want %q", tt.label, tt.hash, got, tt.want)
		}
		if label, hash, ok := ParseRevision(got); !ok || label != tt.label || hash != tt.hash {
			t.Errorf("ParseRevision(%q) = %q, %q, %v", got, label, hash, ok)
		}
	}
	for _, bad := range []string{"", "main", "main@", "main@md5:abc", "main@sha1:"} {
		if _, _, ok := ParseRevision(bad); ok {
			t.Errorf("ParseRevision(%q) accepted it", bad)
		}
	}
}
