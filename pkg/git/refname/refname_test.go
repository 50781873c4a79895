package refname

import "testing"

// The cases are git check-ref-format's rules, and the names the
// update-job-controller's tests gave libgit2's validator before this one
// replaced it (a..b refused, refs/for/main and refs/heads/auto accepted).
func TestValidFollowsCheckRefFormat(t *testing.T) {
	tests := []struct {
		name string
		want bool
	}{
		{"refs/heads/main", true},
		{"refs/heads/auto", true},
		{"refs/for/main", true},
		{"refs/heads/image-toolkit/default-job-1", true},
		{"refs/heads/feature/a.b", true},
		{"refs/heads/v1.2@x", true},
		{"refs/heads/ünïcode", true},
		{"HEAD", true},
		{"FETCH_HEAD", true},
		{"foo/bar", true},

		{"", false},
		{"@", false},
		{"main", false},             // one level, not all capitals
		{"refs/heads/a..b", false},  // ..
		{"refs/heads/a@{1}", false}, // @{
		{"refs/heads/.hidden", false},
		{"refs/heads/x.lock", false},
		{"refs/heads/x.lock/y", false},
		{"refs/heads/x.", false},
		{"refs/heads/x/", false},
		{"/refs/heads/x", false},
		{"refs//heads/x", false},
		{"refs/heads/a b", false},
		{"refs/heads/a~1", false},
		{"refs/heads/a^", false},
		{"refs/heads/a:b", false},
		{"refs/heads/a?", false},
		{"refs/heads/a*", false},
		{"refs/heads/a[b", false},
		{"refs/heads/a\\b", false},
		{"refs/heads/a\tb", false},
		{"refs/heads/a\x7fb", false},
		{"refs/heads/", false},
	}
	for _, tt := range tests {
		if got := Valid(tt.name); got != tt.want {
			t.Errorf("Valid(%q) = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestBranchIsUnderRefsHeads(t *testing.T) {
	for b, want := range map[string]bool{"main": true, "release/1.x": true, "a..b": false, "": false, "-x": true} {
		if got := Branch(b); got != want {
			t.Errorf("Branch(%q) = %v, want %v", b, got, want)
		}
	}
}
