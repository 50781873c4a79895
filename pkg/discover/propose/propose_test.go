package propose

import (
	"cmp"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/apis/meta"
	"toolkit.dev/image-toolkit/pkg/discover"
	"toolkit.dev/image-toolkit/pkg/policy"
	"toolkit.dev/image-toolkit/pkg/policy/policytest"
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
		img := discover.Image{ImageRef: meta.ImageRef{Name: "ghcr.io/acme/app", Tag: tt.tag}, Locations: []discover.Location{{Policy: tt.annotation}}}
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
	imgs := []discover.Image{named("ghcr.io/acme/app"), named("docker.io/other/app"), named("docker.io/library/nginx"), named("quay.io/x/My_Tool.v2")}
	n := Names(imgs)
	if n["docker.io/library/nginx"] != "nginx" || n["quay.io/x/My_Tool.v2"] != "my-tool-v2" {
		t.Errorf("%v", n)
	}
	a, b := n["ghcr.io/acme/app"], n["docker.io/other/app"]
	if a == b || !strings.HasPrefix(a, "app-") || !strings.HasPrefix(b, "app-") || len(a) != len("app-")+6 {
		t.Errorf("colliding names %q %q", a, b)
	}
	rev := Names([]discover.Image{imgs[3], imgs[2], imgs[1], imgs[0]})
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
		{"semver", `policy annotation "semver": want semver:RANGE, docker:RANGE, alphabetical:asc|desc, numerical:asc|desc or regex:PATTERN`},
		{"newestBuild:yes", `policy annotation "newestBuild:yes": want semver:, docker:, alphabetical:, numerical: or regex:`},
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

// The vectors of official images: the default policy of each case's
// current tag, by its mode, picks the case's answer and never makes a
// candidate of a tag that must never win; where it is the docker kind it
// is the case's policy exactly (semver tags keep the semver rule).
func TestDefaultOfficialImages(t *testing.T) {
	for _, img := range policytest.OfficialImages() {
		for _, c := range img.Cases {
			if c.Mode == "" {
				continue
			}
			t.Run(c.Name(img), func(t *testing.T) {
				choice, filter, err := Default(c.Current, Mode(c.Mode))
				if err != nil {
					t.Fatal(err)
				}
				switch {
				case choice.Docker != nil:
					if want := (imagev1.DockerPolicy{Range: c.Range, CompatibleWith: c.CompatibleWith()}); *choice.Docker != want {
						t.Errorf("policy %+v, want %+v", *choice.Docker, want)
					}
				case choice.SemVer == nil:
					t.Errorf("policy %+v, want docker or semver", choice)
				}
				p, err := policy.New(choice, filter)
				if err != nil {
					t.Fatal(err)
				}
				if got, err := p.Select(img.Tags); got != c.Want {
					t.Errorf("picked %q (%v), want %s", got, err, c.Want)
				}
				sel := p.Explain(img.Tags, len(img.Tags))
				for _, never := range c.Never {
					if slices.Contains(sel.TopCandidates, never) {
						t.Errorf("%s is a candidate", never)
					}
				}
			})
		}
	}
}

// Each tag shape gets its policy, and only what has no order gets none.
func TestDefaultShapes(t *testing.T) {
	tests := []struct {
		tag, mode string
		want      string // the choice as JSON, "" for none
	}{
		{"1.4.2", "", `{"semver":{"range":"\u003e=1.4.2 \u003c2.0.0"}}`},
		{"1.5.0-rc.1", "", `{"semver":{"range":"\u003e=1.5.0-rc.1 \u003c2.0.0-0"}}`},
		{"7.4.4-alpine", "", `{"docker":{"range":"\u003e=7.4.4 \u003c8","compatibleWith":"7.4.4-alpine"}}`},
		{"7.2-alpine", "patch", `{"docker":{"range":"\u003e=7.2 \u003c7.3","compatibleWith":"7.2-alpine"}}`},
		{"0.9", "", `{"docker":{"range":"\u003e=0.9 \u003c0.10","compatibleWith":"0.9"}}`},
		{"v22", "major", `{"docker":{"range":"\u003e=22","compatibleWith":"v22"}}`},
		{"1.2.3.4", "", `{"docker":{"range":"\u003e=1.2.3 \u003c2","compatibleWith":"1.2.3.4"}}`},
		{"18beta1", "", `{"docker":{"range":"\u003e=18-beta.1 \u003c19-0","compatibleWith":"18beta1"}}`},
		{"2024.01.15", "patch", `{"docker":{"range":"\u003e=2024.1.15","compatibleWith":"2024.01.15"}}`},
		{"2025.6.1", "", `{"docker":{"range":"\u003e=2025.6.1","compatibleWith":"2025.6.1"}}`},
		{"20240115-1", "", `{"docker":{"range":"\u003e=20240115","compatibleWith":"20240115-1"}}`},
		{"20240115", "", `{"docker":{"range":"\u003e=20240115","compatibleWith":"20240115"}}`},
		{"22", "", `{"docker":{"range":"\u003e=22 \u003c23","compatibleWith":"22"}}`},
		{"1234", "", `{"numerical":{"order":"asc"}}`},
		{"20241399", "", `{"numerical":{"order":"asc"}}`},
		{"1234567", "", `{"numerical":{"order":"asc"}}`},
		{"latest", "", ""},
		{"main", "", ""},
		{"feature-x", "", ""},
		{"4f2a9c1", "", ""},
		{"1234b56", "", ""},
		{"sha-4f2a9c1", "", ""},
		{"3f786850e387550fdab836ed7e6dc881de23001b", "", ""},
	}
	for _, tt := range tests {
		choice, _, err := Default(tt.tag, Mode(cmp.Or(tt.mode, string(ModeMinor))))
		got, _ := json.Marshal(choice)
		if tt.want == "" {
			if err == nil || !strings.Contains(err.Error(), "has no order") {
				t.Errorf("%s: %s, %v; want no policy", tt.tag, got, err)
			}
			continue
		}
		if err != nil || string(got) != tt.want {
			t.Errorf("%s %s: %s, %v; want %s", tt.tag, tt.mode, got, err, tt.want)
			continue
		}
		if _, err := policy.New(choice, nil); err != nil {
			t.Errorf("%s: %v", tt.tag, err)
		}
	}
}

// docker:RANGE takes the shape from the current tag.
func TestDockerAnnotation(t *testing.T) {
	choice, _, err := PolicyOf("7.2-alpine", "docker:~7", ModeMinor)
	if err != nil || choice.Docker == nil || *choice.Docker != (imagev1.DockerPolicy{Range: "~7", CompatibleWith: "7.2-alpine"}) {
		t.Errorf("%+v, %v", choice.Docker, err)
	}
}
func named(name string) discover.Image { return discover.Image{ImageRef: meta.ImageRef{Name: name}} }
