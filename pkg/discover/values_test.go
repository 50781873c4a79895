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

// A JSON document's images (an ECS task definition's) are discovered by
// their keys and listed by JSON Pointer; they cannot be marked (JSON has
// no comments: the reason says to name them in update.files), and
// discovery's sites set them in place, byte for byte but the value.
func TestDiscoveryReadsJSONByPointer(t *testing.T) {
	task := "{\n  \"family\": \"api\",\n  \"containerDefinitions\": [\n    {\"name\": \"api\", \"image\": \"ghcr.io/acme/api:1.4.2\", \"cpu\": 256},\n    {\"name\": \"log\", \"image\": \"ghcr.io/acme/log:2.0.0\"}\n  ]\n}\n"
	dir := writeTree(t, map[string]string{"ecs/task.json": task, "tsconfig.json": "{\"compilerOptions\": {\"strict\": true}}\n", "bad.json": "{\"image\": \"ghcr.io/acme/api:1.0\",}\n"})
	res, err := Dir(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := []found{
		{"ghcr.io/acme/api", "1.4.2", []string{"ecs/task.json:004:/containerDefinitions/0/image"}},
		{"ghcr.io/acme/log", "2.0.0", []string{"ecs/task.json:005:/containerDefinitions/1/image"}},
	}
	if got := summarize(res); !equalFound(got, want) {
		t.Fatalf("images\n got %+v\nwant %+v", got, want)
	}
	if len(res.Skipped) != 1 || res.Skipped[0].File != "bad.json" || !strings.HasPrefix(res.Skipped[0].Reason, ReasonFormat) {
		t.Errorf("skipped %+v, want bad.json alone", res.Skipped)
	}
	policy := func(img Image) string { return "prod:" + img.Name[strings.LastIndexByte(img.Name, '/')+1:] }
	sites := res.Sites(policy)
	written, skipped, err := WriteMarkers(dir, sites)
	if err != nil || len(written) != 0 || len(skipped) != 2 || !strings.Contains(skipped[0].Reason, "update.files") || !strings.Contains(skipped[0].Reason, "(pointer /containerDefinitions/0/image, policy prod:api)") {
		t.Fatalf("WriteMarkers: written %v, skipped %+v, %v; want both refused, naming update.files", written, skipped, err)
	}
	if _, err := setters.UpdateDir(dir, setters.Policies{"prod:api": {Name: "ghcr.io/acme/api", Tag: "1.5.0"}}, setters.Options{Sites: sites}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "ecs/task.json"))
	if err != nil {
		t.Fatal(err)
	}
	if w := strings.Replace(task, "api:1.4.2", "api:1.5.0", 1); string(b) != w {
		t.Errorf("task.json\n got %q\nwant %q", b, w)
	}
}
