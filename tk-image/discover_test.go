package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	sigsyaml "sigs.k8s.io/yaml"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/discover/propose"
	"toolkit.dev/image-toolkit/pkg/policy/policytest"
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
	if code != 0 || strings.Contains(errs, "\nmarked") || strings.HasPrefix(errs, "marked") || !strings.Contains(errs, "nothing to mark: every location of the") {
		t.Errorf("second run: exit %d: %s; want it to say there is nothing to mark", code, errs)
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

// Official images, tagged as their registries tag them, through discover:
// each gets a default policy (Docker-style versions and dates too; only
// latest and a SHA are left out), the exported ImagePolicy evaluated with
// policy eval -f over the image's tags picks the vectors' answer, and
// --write-markers then update moves every one of them.
func TestDiscoverOfficialImages(t *testing.T) {
	var containers strings.Builder
	want := map[string]policytest.Case{}
	tags := map[string][]string{}
	for _, img := range policytest.OfficialImages() {
		i := slices.IndexFunc(img.Cases, func(c policytest.Case) bool { return c.Mode == string(propose.ModeMinor) })
		if i < 0 {
			continue
		}
		c := img.Cases[i]
		fmt.Fprintf(&containers, "      - name: c%d\n        image: %s:%s\n", len(want), img.Image, c.Current)
		want[img.Image], tags[img.Image] = c, img.Tags
	}
	containers.WriteString("      - name: tool\n        image: ghcr.io/acme/tool:latest\n      - name: ci\n        image: ghcr.io/acme/ci:4f2a9c1\n")
	dir := tree(t, map[string]string{"deploy.yaml": "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec:\n  template:\n    spec:\n      containers:\n" + containers.String()})

	code, out, errs := runCLI(t, "", "discover", "--dir", dir, "--export", "-n", "apps")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	// Discovery skips latest itself; the SHA has no order.
	if !strings.Contains(errs, "ghcr.io/acme/ci: tag \"4f2a9c1\" has no order") {
		t.Errorf("stderr lacks the SHA:\n%s", errs)
	}
	images := map[string]string{} // object name: image as written
	policies := map[string]string{}
	for _, doc := range strings.Split(strings.TrimPrefix(out, "---\n"), "---\n") {
		var obj struct {
			Kind     string
			Metadata struct{ Name string }
			Spec     struct{ Image string }
		}
		if err := sigsyaml.Unmarshal([]byte(doc), &obj); err != nil {
			t.Fatal(err)
		}
		switch obj.Kind {
		case imagev1.ImageRepositoryKind:
			for written := range want {
				if obj.Spec.Image == written || strings.HasSuffix(obj.Spec.Image, "/"+written) || obj.Spec.Image == "docker.io/library/"+written {
					images[obj.Metadata.Name] = written
				}
			}
		case imagev1.ImagePolicyKind:
			policies[obj.Metadata.Name] = doc
		}
	}
	if len(images) != len(want) || len(policies) != len(want) {
		t.Fatalf("exported %d repositories and %d policies of %d images:\n%s", len(images), len(policies), len(want), out)
	}
	args := []string{"update", "--dir", dir}
	for name, written := range images {
		file := filepath.Join(t.TempDir(), name+".yaml")
		if err := os.WriteFile(file, []byte(policies[name]), 0o600); err != nil {
			t.Fatal(err)
		}
		c := want[written]
		code, out, errs := runCLI(t, strings.Join(tags[written], "\n"), "policy", "eval", "-f", file)
		if code != 0 || out != c.Want+"\n" {
			t.Errorf("%s:%s: exported policy picks %q (%s), want %s:\n%s", written, c.Current, out, errs, c.Want, policies[name])
		}
		args = append(args, "--policy", "apps:"+name+"="+written+":"+c.Want)
	}

	if code, _, errs := runCLI(t, "", "discover", "--dir", dir, "--write-markers", "-n", "apps"); code != 0 {
		t.Fatalf("write-markers: exit %d: %s", code, errs)
	}
	if code, _, errs := runCLI(t, "", args...); code != 0 {
		t.Fatalf("update: exit %d: %s", code, errs)
	}
	b, err := os.ReadFile(filepath.Join(dir, "deploy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for written, c := range want {
		if !strings.Contains(string(b), "image: "+written+":"+c.Want+" # {\"$imagepolicy\"") {
			t.Errorf("%s not moved to %s:\n%s", written, c.Want, b)
		}
	}
}

// A location in a flow mapping cannot be marked: the summary says update
// leaves it behind; --expand-flow rewrites just that mapping in block style
// (CRLF, quotes and the comment kept), marks it, and update then moves it.
func TestDiscoverExpandFlow(t *testing.T) {
	deploy := "kind: Deployment\r\nspec:\r\n  template:\r\n    spec:\r\n      containers:\r\n" +
		"      - {name: envoy, image: 'docker.io/envoyproxy/envoy:v1.29.1'} # edge proxy\r\n" +
		"      - name: app\r\n        image: ghcr.io/acme/app:1.4.2\r\n"
	dir := tree(t, map[string]string{"deploy.yaml": deploy})
	read := func() string {
		b, err := os.ReadFile(filepath.Join(dir, "deploy.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	if code, _, errs := runCLI(t, "", "discover", "--dir", dir, "--expand-flow"); code != 2 || !strings.Contains(errs, "--expand-flow needs --write-markers") {
		t.Errorf("--expand-flow alone: exit %d: %s", code, errs)
	}
	code, _, errs := runCLI(t, "", "discover", "--dir", dir, "--write-markers", "-n", "apps")
	if code != 0 || !strings.Contains(errs, "deploy.yaml:6: not marked: in flow style") ||
		!strings.Contains(errs, "1 location in flow style is not marked: tk-image update leaves them behind") {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if got := read(); !strings.Contains(got, "      - {name: envoy, image: 'docker.io/envoyproxy/envoy:v1.29.1'} # edge proxy\r\n") {
		t.Errorf("the flow mapping changed:\n%q", got)
	}

	code, _, errs = runCLI(t, "", "discover", "--dir", dir, "--write-markers", "--expand-flow", "-n", "apps")
	if code != 0 || !strings.Contains(errs, "expanded flow style in deploy.yaml") || strings.Contains(errs, "not marked") {
		t.Fatalf("--expand-flow: exit %d: %s", code, errs)
	}
	want := "kind: Deployment\r\nspec:\r\n  template:\r\n    spec:\r\n      containers:\r\n" +
		"      - name: envoy\r\n        image: 'docker.io/envoyproxy/envoy:v1.29.1' # edge proxy\r\n" +
		"      - name: app\r\n        image: ghcr.io/acme/app:1.4.2 # {\"$imagepolicy\": \"apps:app\"}\r\n"
	// The envoy line ends in a comment: its marker goes above the field.
	want = strings.Replace(want, "        image: 'docker.io", "        # {\"$imagepolicy\": \"apps:envoy\"}\r\n        image: 'docker.io", 1)
	if got := read(); got != want {
		t.Errorf("expanded and marked\n got %q\nwant %q", got, want)
	}
	if code, _, errs := runCLI(t, "", "update", "--dir", dir, "--policy", "apps:envoy=docker.io/envoyproxy/envoy:v1.30.0"); code != 0 {
		t.Fatalf("update: exit %d: %s", code, errs)
	}
	if got := read(); !strings.Contains(got, "        image: 'docker.io/envoyproxy/envoy:v1.30.0' # edge proxy\r\n") {
		t.Errorf("envoy not moved:\n%q", got)
	}
}
