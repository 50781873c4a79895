package discover

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"toolkit.dev/image-toolkit/pkg/setters"
)

// Terraform, fly.toml and .env files hold images under keys that say so
// (image, container_image, APP_IMAGE): discovery reads those, and no other
// string; markers go on the line before, in each format's # comments,
// once; the setters then update the values and nothing else.
func TestDiscoveryReadsImageKeysOfHCLTOMLAndDotenv(t *testing.T) {
	files := map[string]string{
		"infra/ecs.tf": "resource \"aws_ecs_task_definition\" \"app\" {\n  family = \"ghcr.io/acme/not-an-image:1.0\"\n  container {\n    image = \"ghcr.io/acme/app:1.4.2\"\n  }\n}\n" +
			"module \"run\" {\n  container_image = \"ghcr.io/acme/side:2.0.0\"\n  other_image     = \"${var.registry}/x:1\" # interpolated: not a plain value\n}\n",
		"fly.toml":    "app = \"acme\"\n\n[build]\nimage = 'ghcr.io/acme/app:1.4.2'\n",
		".env":        "# compose\nAPP_IMAGE=ghcr.io/acme/app:1.4.2\nexport SIDE_IMAGE=\"ghcr.io/acme/side:2.0.0\" # pinned\nNOT_AN_IMAGE_TAG=ghcr.io/acme/app:0.1\n",
		"broken.toml": "image = \"ghcr.io/acme/app:1.4.2\n",
	}
	dir := writeTree(t, files)
	res, err := Dir(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := []found{
		{"ghcr.io/acme/app", "1.4.2", []string{".env:002:APP_IMAGE", "fly.toml:004:image", "infra/ecs.tf:004:image"}},
		{"ghcr.io/acme/side", "2.0.0", []string{".env:003:SIDE_IMAGE", "infra/ecs.tf:008:container_image"}},
	}
	if got := summarize(res); !equalFound(got, want) {
		t.Fatalf("images\n got %+v\nwant %+v", got, want)
	}
	var reasons []string
	for _, s := range res.Skipped {
		reasons = append(reasons, s.File+": "+strings.SplitN(s.Reason, ":", 2)[0])
	}
	if !slices.Contains(reasons, "broken.toml: "+strings.SplitN(ReasonFormat, ":", 2)[0]) {
		t.Errorf("skipped %q, want the broken TOML", reasons)
	}

	policy := func(img Image) string { return "prod:" + img.Name[strings.LastIndexByte(img.Name, '/')+1:] }
	written, skipped, err := WriteMarkers(dir, res.Sites(policy))
	if err != nil || len(skipped) != 0 {
		t.Fatalf("WriteMarkers: %v, skipped %+v", err, skipped)
	}
	if w := []string{".env", "fly.toml", "infra/ecs.tf"}; !slices.Equal(written, w) {
		t.Errorf("written %v, want %v", written, w)
	}
	read := func(p string) string {
		b, err := os.ReadFile(filepath.Join(dir, p))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	if got, w := read(".env"), "# compose\n# {\"$imagepolicy\": \"prod:app\"}\nAPP_IMAGE=ghcr.io/acme/app:1.4.2\n# {\"$imagepolicy\": \"prod:side\"}\nexport SIDE_IMAGE=\"ghcr.io/acme/side:2.0.0\" # pinned\nNOT_AN_IMAGE_TAG=ghcr.io/acme/app:0.1\n"; got != w {
		t.Errorf(".env\n got %q\nwant %q", got, w)
	}
	if got := read("infra/ecs.tf"); !strings.Contains(got, "  container {\n    # {\"$imagepolicy\": \"prod:app\"}\n    image = ") {
		t.Errorf("ecs.tf:\n%s", got)
	}
	again, err := Dir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if w, _, err := WriteMarkers(dir, again.Sites(policy)); err != nil || len(w) != 0 {
		t.Errorf("a second run wrote %v, %v", w, err)
	}

	before := map[string]string{}
	for _, p := range []string{".env", "fly.toml", "infra/ecs.tf"} {
		before[p] = read(p)
	}
	if _, err := setters.UpdateDir(dir, setters.Policies{
		"prod:app":  {Name: "ghcr.io/acme/app", Tag: "1.5.0"},
		"prod:side": {Name: "ghcr.io/acme/side", Tag: "2.1.0"},
	}, setters.Options{}); err != nil {
		t.Fatal(err)
	}
	for p, b := range before {
		w := strings.NewReplacer("ghcr.io/acme/app:1.4.2", "ghcr.io/acme/app:1.5.0", "ghcr.io/acme/side:2.0.0", "ghcr.io/acme/side:2.1.0").Replace(b)
		if got := read(p); got != w {
			t.Errorf("%s after the update\n got %q\nwant %q", p, got, w)
		}
	}
}

// writeTree writes files (path → content) into a new directory.
func writeTree(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for p, s := range files {
		full := filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}
