package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	sigsyaml "sigs.k8s.io/yaml"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
)

// fleet is a repository of two apps without a marker: web's image in a
// Deployment and its kustomization, a Helm chart's values, a README naming
// an image in prose, and a CRLF file.
func fleet(t *testing.T) string {
	return tree(t, map[string]string{
		"apps/web/deploy.yaml":        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec:\n  template:\n    spec:\n      containers:\n      - name: web\n        image: ghcr.io/acme/web:1.4.2\n      - name: proxy\n        image: nginx:1.27.1 # edge\n",
		"apps/web/kustomization.yaml": "images:\n- name: ghcr.io/acme/web\n  newTag: 1.4.2\n",
		"apps/api/values.yaml":        "image:\r\n  repository: ghcr.io/acme/api\r\n  tag: \"2.0.0\"\r\n",
		"apps/api/job.yaml":           "kind: CronJob\nspec:\n  jobTemplate:\n    spec:\n      template:\n        spec:\n          containers:\n          - name: tool\n            image: ghcr.io/acme/tool:latest\n",
		"README.md":                   "Deploys ghcr.io/acme/web:1.4.2 and nginx:1.27.1.\n",
	})
}

// discover lists each image once with every location (table and JSON),
// reports what it skipped, exports a repository and a policy per image,
// and writes markers that make `update` move every location, byte for
// byte otherwise, once however often it runs.
func TestDiscover(t *testing.T) {
	dir := fleet(t)
	code, out, errs := runCLI(t, "", "discover", "--dir", dir)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{
		"IMAGE", "docker.io/library/nginx  1.27.1", "apps/web/deploy.yaml:11",
		"ghcr.io/acme/web         1.4.2   apps/web/deploy.yaml:9 apps/web/kustomization.yaml:3",
		"apps/api/job.yaml:9: ghcr.io/acme/tool:latest: latest: not a version",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}

	code, out, errs = runCLI(t, "", "discover", "--dir", dir, "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var res struct {
		Images []struct {
			Name, Tag, Digest string
			Locations         []struct {
				File, Path string
				Line       int
			}
		}
		Skipped []struct {
			File, Value, Reason string
			Line                int
		}
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatal(err)
	}
	if len(res.Images) != 3 || res.Images[2].Name != "ghcr.io/acme/web" || len(res.Images[2].Locations) != 2 ||
		res.Images[2].Locations[0].Path != "spec.template.spec.containers[web].image" || len(res.Skipped) != 1 {
		t.Errorf("json %s", out)
	}

	code, out, errs = runCLI(t, "", "discover", "--dir", dir, "--export", "-n", "apps", "--policy-mode", "patch")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	docs := strings.Split(strings.TrimPrefix(out, "---\n"), "---\n")
	if len(docs) != 6 {
		t.Fatalf("%d objects exported, want 6:\n%s", len(docs), out)
	}
	var pol imagev1.ImagePolicy
	if err := sigsyaml.UnmarshalStrict([]byte(docs[5]), &pol); err != nil {
		t.Fatal(err)
	}
	if pol.Name != "web" || pol.Namespace != "apps" || pol.Spec.Policy.SemVer == nil || pol.Spec.Policy.SemVer.Range != ">=1.4.2 <1.5.0" {
		t.Errorf("policy %+v", pol)
	}

	before := map[string]string{}
	for _, f := range []string{"README.md", "apps/api/job.yaml"} {
		b, _ := os.ReadFile(filepath.Join(dir, f))
		before[f] = string(b)
	}
	code, _, errs = runCLI(t, "", "discover", "--dir", dir, "--write-markers", "-n", "apps")
	if code != 0 || !strings.Contains(errs, "marked apps/web/kustomization.yaml") {
		t.Fatalf("exit %d: %s", code, errs)
	}
	code, _, errs = runCLI(t, "", "discover", "--dir", dir, "--write-markers", "-n", "apps")
	if code != 0 || strings.Contains(errs, "marked") {
		t.Errorf("second run: exit %d: %s", code, errs)
	}
	code, out, errs = runCLI(t, "", "update", "--dir", dir,
		"--policy", "apps:web=ghcr.io/acme/web:1.5.0", "--policy", "apps:api=ghcr.io/acme/api:2.1.0", "--policy", "apps:nginx=nginx:1.27.2")
	if code != 0 {
		t.Fatalf("update: exit %d: %s", code, errs)
	}
	read := func(p string) string {
		b, err := os.ReadFile(filepath.Join(dir, p))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	if got := read("apps/web/deploy.yaml"); !strings.Contains(got, "        image: ghcr.io/acme/web:1.5.0 # {\"$imagepolicy\": \"apps:web\"}\n") {
		t.Errorf("deploy.yaml:\n%s", got)
	}
	if got := read("apps/web/kustomization.yaml"); got != "images:\n- name: ghcr.io/acme/web\n  newTag: 1.5.0 # {\"$imagepolicy\": \"apps:web:tag\"}\n" {
		t.Errorf("kustomization.yaml %q", got)
	}
	if got := read("apps/api/values.yaml"); got != "image:\r\n  repository: ghcr.io/acme/api # {\"$imagepolicy\": \"apps:api:name\"}\r\n  tag: \"2.1.0\" # {\"$imagepolicy\": \"apps:api:tag\"}\r\n" {
		t.Errorf("values.yaml %q", got)
	}
	if got := read("apps/web/deploy.yaml"); !strings.Contains(got, "  # {\"$imagepolicy\": \"apps:nginx\"}\n        image: nginx:1.27.2 # edge\n") {
		t.Errorf("nginx, whose line has a comment, is not marked above:\n%s", got)
	}
	for f, b := range before {
		if read(f) != b {
			t.Errorf("%s changed", f)
		}
	}
}
