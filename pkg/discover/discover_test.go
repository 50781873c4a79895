package discover

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"toolkit.dev/image-toolkit/pkg/apis/meta"
)

// found is an image as a test names it: name, tag, and its locations as
// file:line:path[:field].
type found struct {
	name, tag string
	locs      []string
}

func summarize(res *Result) []found {
	var out []found
	for _, img := range res.Images {
		f := found{name: img.Name, tag: img.Tag}
		for _, l := range img.Locations {
			s := l.File + ":" + itoa(l.Line) + ":" + l.Path
			if l.Field != "" {
				s += ":" + string(l.Field)
			}
			f.locs = append(f.locs, s)
		}
		out = append(out, f)
	}
	return out
}

func itoa(i int) string { return fmt.Sprintf("%03d", i) }

func skipped(res *Result) []string {
	var out []string
	for _, s := range res.Skipped {
		out = append(out, s.Value+": "+s.Reason)
	}
	return out
}

// Each kind of place an image is written is found, with its line, path
// and field; strings that merely look like images are not; references
// that cannot be automated are skipped with their reason.
func TestBytes(t *testing.T) {
	tests := []struct {
		name    string
		file    string
		yaml    string
		want    []found
		skipped []string
	}{
		{"deployment containers and init containers", "app.yaml", `apiVersion: apps/v1
kind: Deployment
metadata: {name: app, namespace: prod}
spec:
  template:
    spec:
      initContainers:
      - name: migrate
        image: ghcr.io/acme/migrate:1.0.0
      containers:
      - name: app
        image: "ghcr.io/acme/app:1.4.2"
        env:
        - name: SIDECAR
          value: ghcr.io/acme/not-an-image-field:1.0.0
`, []found{
			{"ghcr.io/acme/app", "1.4.2", []string{"app.yaml:012:spec.template.spec.containers[app].image"}},
			{"ghcr.io/acme/migrate", "1.0.0", []string{"app.yaml:009:spec.template.spec.initContainers[migrate].image"}},
		}, nil},
		{"cronjob, pod, knative service, list", "all.yaml", `kind: CronJob
spec:
  jobTemplate:
    spec:
      template:
        spec:
          containers: [{name: job, image: busybox:1.36}]
---
kind: Pod
spec:
  containers:
  - {name: p, image: 'registry.local:5000/team/p:2.0'}
---
apiVersion: serving.knative.dev/v1
kind: Service
spec:
  template:
    spec:
      containers:
      - image: gcr.io/knative/hello:0.3
---
kind: List
items:
- kind: Deployment
  spec: {template: {spec: {containers: [{name: x, image: "nginx:1.27.1"}]}}}
`, []found{
			{"docker.io/library/busybox", "1.36", []string{"all.yaml:007:spec.jobTemplate.spec.template.spec.containers[job].image"}},
			{"docker.io/library/nginx", "1.27.1", []string{"all.yaml:025:items[0].spec.template.spec.containers[x].image"}},
			{"gcr.io/knative/hello", "0.3", []string{"all.yaml:020:spec.template.spec.containers[0].image"}},
			{"registry.local:5000/team/p", "2.0", []string{"all.yaml:012:spec.containers[p].image"}},
		}, nil},
		{"not image fields", "cm.yaml", `apiVersion: v1
kind: ConfigMap
metadata:
  annotations:
    image: ghcr.io/acme/app:1.0.0
data:
  image: ghcr.io/acme/app:1.0.0
  values.yaml: |
    image:
      repository: ghcr.io/acme/app
      tag: 1.0.0
`, nil, nil},
		{"kustomization images", "kustomization.yaml", `resources: [deploy.yaml]
images:
- name: app
  newName: ghcr.io/acme/app
  newTag: "1.4.2"
- name: nginx
  newTag: 1.27.0
- name: pinned
  digest: sha256:0123456789012345678901234567890123456789012345678901234567890123
- name: renamed-only
  newName: ghcr.io/acme/other
`, []found{
			{"docker.io/library/nginx", "1.27.0", []string{"kustomization.yaml:007:images[1].newTag:tag"}},
			{"ghcr.io/acme/app", "1.4.2", []string{"kustomization.yaml:004:images[0].newName:name", "kustomization.yaml:005:images[0].newTag:tag"}},
		}, []string{"pinned@sha256:0123456789012345678901234567890123456789012345678901234567890123: " + ReasonDigestOnly,
			"ghcr.io/acme/other: " + ReasonNoTagField}},
		{"helm release values", "release.yaml", `apiVersion: helm.toolkit.fluxcd.io/v2
kind: HelmRelease
spec:
  values:
    image:
      repository: ghcr.io/acme/app
      tag: 1.4.2
    worker:
      image:
        registry: quay.io
        repository: acme/worker
        tag: "2.0.1"
    sidecarImage:
      repository: envoyproxy/envoy
      tag: "{{ .Values.envoyVersion }}"
    replicaCount: 2
`, []found{
			{"ghcr.io/acme/app", "1.4.2", []string{"release.yaml:006:spec.values.image.repository:name", "release.yaml:007:spec.values.image.tag:tag"}},
			{"quay.io/acme/worker", "2.0.1", []string{"release.yaml:012:spec.values.worker.image.tag:tag"}},
		}, []string{"envoyproxy/envoy:{{ .Values.envoyVersion }}: " + ReasonTemplate}},
		{"values file", "charts/app/values.yaml", "image:\r\n  repository: ghcr.io/acme/app # the app\r\n  tag: 1.4.2\r\n", []found{
			{"ghcr.io/acme/app", "1.4.2", []string{"charts/app/values.yaml:002:image.repository:name", "charts/app/values.yaml:003:image.tag:tag"}},
		}, nil},
		{"cannot be automated", "bad.yaml", `kind: Deployment
metadata:
  annotations:
    image.toolkit.dev/policy.app: semver:~1.4
spec:
  template:
    spec:
      containers:
      - {name: a, image: nginx}
      - {name: b, image: nginx:latest}
      - {name: c, image: "nginx@sha256:0123456789012345678901234567890123456789012345678901234567890123"}
      - {name: d, image: "${IMAGE}"}
      - {name: e, image: "not a ref"}
      - {name: app, image: "nginx:1.27.1@sha256:0123456789012345678901234567890123456789012345678901234567890123"}
`, []found{
			{"docker.io/library/nginx", "1.27.1", []string{"bad.yaml:014:spec.template.spec.containers[app].image"}},
		}, []string{"nginx: " + ReasonNoTag, "nginx:latest: " + ReasonLatest,
			"nginx@sha256:0123456789012345678901234567890123456789012345678901234567890123: " + ReasonDigestOnly,
			"${IMAGE}: " + ReasonTemplate, "not a ref: " + ReasonInvalid}},
		{"opted out", "out.yaml", `kind: StatefulSet
metadata:
  annotations: {image.toolkit.dev/automated: "false"}
spec: {template: {spec: {containers: [{name: db, image: "postgres:16.2"}]}}}
`, nil, []string{"postgres:16.2: " + ReasonOptedOut}},
		{"does not parse", "broken.yaml", "kind: Deployment\nspec: [\n", nil, []string{": " + ReasonParse + ": yaml: line 2: did not find expected node content"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := Bytes(tt.file, []byte(tt.yaml))
			if got := summarize(res); !equalFound(got, tt.want) {
				t.Errorf("images\n got %+v\nwant %+v", got, tt.want)
			}
			if got := skipped(res); !slices.Equal(got, tt.skipped) {
				t.Errorf("skipped\n got %q\nwant %q", got, tt.skipped)
			}
		})
	}
}

func equalFound(a, b []found) bool {
	return slices.EqualFunc(a, b, func(x, y found) bool {
		return x.name == y.name && x.tag == y.tag && slices.Equal(x.locs, y.locs)
	})
}

// The policy annotation of a workload names its container's policy.
func TestPolicyAnnotation(t *testing.T) {
	res := Bytes("a.yaml", []byte(`kind: Deployment
metadata:
  annotations:
    image.toolkit.dev/policy.app: semver:~1.4
spec: {template: {spec: {containers: [{name: app, image: "ghcr.io/acme/app:1.4.2"}, {name: side, image: "ghcr.io/acme/side:1.0.0"}]}}}
`))
	if len(res.Images) != 2 || res.Images[0].Locations[0].Policy != "semver:~1.4" || res.Images[1].Locations[0].Policy != "" {
		t.Errorf("%+v", res.Images)
	}
}

// A directory is read as the setters read it: one image written in several
// files is one entry with every location, its tag the one most locations
// have; Helm templates, .git and files outside by symlink are left out; a
// file that does not parse is reported and the rest goes on.
func TestDir(t *testing.T) {
	dir := t.TempDir()
	write := func(p, s string) {
		full := filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	deploy := func(tag string) string {
		return "kind: Deployment\nspec:\n  template:\n    spec:\n      containers:\n      - name: app\n        image: ghcr.io/acme/app:" + tag + "\n"
	}
	write("apps/a/deploy.yaml", deploy("1.4.2"))
	write("apps/b/deploy.yml", deploy("1.4.2"))
	write("apps/c/deploy.yaml", deploy("1.4.1"))
	write("apps/c/kustomization.yaml", "images:\n- name: ghcr.io/acme/app\n  newTag: 1.4.2\n")
	write("charts/app/Chart.yaml", "name: app\nversion: 0.1.0\n")
	write("charts/app/templates/deploy.yaml", "kind: Deployment\nspec: {{ .Values.x }}\n")
	write("broken.yaml", "a: [\n")
	write(".git/config.yaml", deploy("9.9.9"))
	write("README.md", "image: ghcr.io/acme/app:0.0.1\n")
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "x.yaml"), []byte(deploy("8.8.8")), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(outside, "x.yaml"), filepath.Join(dir, "escape.yaml")); err != nil {
		t.Fatal(err)
	}
	res, err := Dir(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := []found{{"ghcr.io/acme/app", "1.4.2", []string{
		"apps/a/deploy.yaml:007:spec.template.spec.containers[app].image",
		"apps/b/deploy.yml:007:spec.template.spec.containers[app].image",
		"apps/c/deploy.yaml:007:spec.template.spec.containers[app].image",
		"apps/c/kustomization.yaml:003:images[0].newTag:tag",
	}}}
	if got := summarize(res); !equalFound(got, want) {
		t.Errorf("images\n got %+v\nwant %+v", got, want)
	}
	var reasons []string
	for _, s := range res.Skipped {
		reasons = append(reasons, s.File+": "+strings.SplitN(s.Reason, ":", 2)[0])
	}
	wantSkipped := []string{"broken.yaml: " + ReasonParse, "charts/app/templates/deploy.yaml: " + strings.SplitN(ReasonHelmTemplate, ":", 2)[0], "escape.yaml: symlink not followed"}
	if !slices.Equal(reasons, wantSkipped) {
		t.Errorf("skipped\n got %q\nwant %q", reasons, wantSkipped)
	}
}

// A status records an image by its value, a count of its locations, its
// files once each (at most MaxListedFiles, in path order) and the first
// workload annotation's policy.
func TestSummaryCountsLocationsAndListsFilesOnce(t *testing.T) {
	loc := func(file, policy string) Location { return Location{File: file, Policy: policy} }
	img := Image{ImageRef: meta.ImageRef{Name: "ghcr.io/acme/app", Tag: "1.4.2", Digest: "sha256:abc"}, Locations: []Location{
		loc("a.yaml", ""), loc("a.yaml", "semver:~1.4"), loc("b.yaml", "semver:~2"), loc("c.yaml", ""), loc("d.yaml", "")}}
	got := img.Summary("apps:app")
	want := meta.DiscoveredImage{ImageRef: img.ImageRef, Locations: 5, Files: []string{"a.yaml", "b.yaml", "c.yaml"},
		Policy: "apps:app", PolicyAnnotation: "semver:~1.4"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v\nwant %+v", got, want)
	}
}

// A Dockerfile's images are found where docker build pulls them (FROM,
// COPY --from), as one image with the manifests' locations of the same
// image; a reference made of build arguments and one that is no version
// are skipped with the reason, and so is a Dockerfile that does not parse;
// stages and scratch are no images.
func TestDirReadsDockerfiles(t *testing.T) {
	dir := writeTree(t, map[string]string{
		"deploy.yaml":       "kind: Deployment\nspec:\n  template:\n    spec:\n      containers:\n      - name: app\n        image: ghcr.io/acme/app:1.4.2\n",
		"Dockerfile":        "ARG GO=1.26\nFROM golang:${GO} AS build\nFROM ghcr.io/acme/app:1.4.2 AS run\nCOPY --from=build /a /a\nFROM run\nFROM scratch\nFROM alpine:latest\n",
		"broken/Dockerfile": "# escape=x\nFROM a:1\n",
		"Dockerfile.md":     "FROM ghcr.io/acme/app:0.0.1\n",
	})
	res, err := Dir(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := []found{{"ghcr.io/acme/app", "1.4.2", []string{"Dockerfile:003:FROM", "deploy.yaml:007:spec.template.spec.containers[app].image"}}}
	if got := summarize(res); !equalFound(got, want) {
		t.Errorf("images\n got %+v\nwant %+v", got, want)
	}
	var reasons []string
	for _, s := range res.Skipped {
		reasons = append(reasons, fmt.Sprintf("%s:%d: %s", s.File, s.Line, strings.SplitN(s.Reason, ":", 2)[0]))
	}
	wantSkipped := []string{"Dockerfile:2: " + strings.SplitN(ReasonBuildArg, ":", 2)[0], "Dockerfile:7: latest", "broken/Dockerfile:0: " + ReasonDockerfile}
	if !slices.Equal(reasons, wantSkipped) {
		t.Errorf("skipped\n got %q\nwant %q", reasons, wantSkipped)
	}
	if img := res.Images[0]; img.Locations[0].Object.Kind != "Dockerfile" || img.Locations[0].Column != 6 {
		t.Errorf("the Dockerfile's location: %+v", img.Locations[0])
	}
}
