package discover

import (
	"toolkit.dev/image-toolkit/pkg/apis/meta"

	"strings"
	"testing"

	"toolkit.dev/image-toolkit/pkg/policy"
)

// A default policy, run by the one policy engine over a repository's tags,
// picks the newest version the mode allows and never one below the
// current tag; prereleases only when the current tag is one; numbers for
// build-number and date tags; no default for other tags. Annotations win.
func TestPolicy(t *testing.T) {
	tags := strings.Fields("1.4.1 1.4.2 1.4.3 1.5.0-rc.1 1.5.0 1.6.0-rc.1 2.0.0 v2.1.0 0.3.9 0.4.0 0.4.7 0.5.0 20240101 20240301 build-7")
	tests := []struct {
		tag, mode, annotation string
		want                  string // "" for no policy
	}{
		{"1.4.2", "", "", "1.5.0"}, // the example
		{"1.4.2", "patch", "", "1.4.3"},
		{"1.4.2", "major", "", "v2.1.0"}, // the engine reads a leading v
		{"1.5.0-rc.1", "", "", "1.6.0-rc.1"},
		{"0.4.0", "", "", "0.4.7"},
		{"20240101", "", "", "20240301"},
		{"2.0.0", "minor", "", "v2.1.0"},
		{"v2.0.0", "patch", "", "2.0.0"},
		{"build-7", "", "", ""},
		{"build-7", "", "regex:^build-", "build-7"},
		{"1.4.2", "", "semver:~1.4", "1.4.3"},
		{"1.4.2", "", "alphabetical:asc", "v2.1.0"},
		{"1.4.2", "", "semver:not a range", ""},
	}
	for _, tt := range tests {
		mode, err := ParseMode(tt.mode)
		if err != nil {
			t.Fatal(err)
		}
		img := Image{ImageRef: meta.ImageRef{Name: "ghcr.io/acme/app", Tag: tt.tag}, Locations: []Location{{Policy: tt.annotation}}}
		choice, filter, err := Policy(img, mode)
		if tt.want == "" {
			if err == nil {
				t.Errorf("%s %s %q: policy %+v, want none", tt.tag, tt.mode, tt.annotation, choice)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s %s %q: %v", tt.tag, tt.mode, tt.annotation, err)
			continue
		}
		p, err := policy.New(choice, filter)
		if err != nil {
			t.Fatalf("%s: %v", tt.tag, err)
		}
		got, err := p.Select(tags)
		if err != nil || got != tt.want {
			t.Errorf("%s %s %q: picked %q (%v), want %q", tt.tag, tt.mode, tt.annotation, got, err, tt.want)
		}
	}
	if _, err := ParseMode("minor-ish"); err == nil {
		t.Error("ParseMode accepted minor-ish")
	}
}

// Object names are the image's last name part, made a DNS label, with a
// hash only where two images would share one; the same whatever the order.
func TestNames(t *testing.T) {
	imgs := []Image{named("ghcr.io/acme/app"), named("docker.io/other/app"), named("docker.io/library/nginx"), named("quay.io/x/My_Tool.v2")}
	n := Names(imgs)
	if n["docker.io/library/nginx"] != "nginx" || n["quay.io/x/My_Tool.v2"] != "my-tool-v2" {
		t.Errorf("%v", n)
	}
	a, b := n["ghcr.io/acme/app"], n["docker.io/other/app"]
	if a == b || !strings.HasPrefix(a, "app-") || !strings.HasPrefix(b, "app-") || len(a) != len("app-")+6 {
		t.Errorf("colliding names %q %q", a, b)
	}
	rev := Names([]Image{imgs[3], imgs[2], imgs[1], imgs[0]})
	for k, v := range n {
		if rev[k] != v {
			t.Errorf("%s: %q in one order, %q in another", k, v, rev[k])
		}
	}
}

// A policy annotation is KIND:ARG for each policy kind with one, or
// regex:PATTERN; anything else is refused with the forms there are.
func TestAnnotationErrors(t *testing.T) {
	tests := []struct{ annotation, want string }{
		{"semver", `policy annotation "semver": want semver:RANGE, alphabetical:asc|desc, numerical:asc|desc or regex:PATTERN`},
		{"newestBuild:yes", `policy annotation "newestBuild:yes": want semver:, alphabetical:, numerical: or regex:`},
		{"numerical:up", `policy annotation "numerical:up": order is asc or desc`},
		{"regex:(", "policy annotation \"regex:(\": error parsing regexp: missing closing ): `(`"},
	}
	for _, tt := range tests {
		_, _, err := PolicyOf("1.0.0", tt.annotation, ModeMinor)
		if err == nil || err.Error() != tt.want {
			t.Errorf("%q: %v, want %s", tt.annotation, err, tt.want)
		}
	}
}

func named(name string) Image { return Image{ImageRef: meta.ImageRef{Name: name}} }
