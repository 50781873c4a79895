package argocd

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"
)

var updateGolden = flag.Bool("update", false, "rewrite the expected files of the golden tests")

const testDigest = "sha256:2d9a00b3981628a533ff43352193b1838b0a4bf6b0033444286f563205e51a2c"

var (
	podinfo    = KustomizeImage{Name: "podinfo", NewName: "ghcr.io/stefanprodan/podinfo", NewTag: "6.5.1"}
	helmName   = HelmParameter{Name: "image.name", Value: "ghcr.io/stefanprodan/podinfo"}
	helmTag    = HelmParameter{Name: "image.tag", Value: "6.5.1"}
	helmDigest = HelmParameter{Name: "image.digest", Value: testDigest, ForceString: true}
)

// Each case reads testdata/<name>.in.yaml, applies its changes and must
// write testdata/<name>.out.yaml byte for byte. The outputs of the cases
// named image-updater are written by hand from what argocd-image-updater
// writes (its marshalParamsOverride and its tests): a file it wrote, updated
// here, must differ only in the changed values. Rewrite the other outputs
// with `go test -run TestGolden -update` and review the diff.
func TestGolden(t *testing.T) {
	for _, tc := range []struct {
		name   string
		images []KustomizeImage
		params []HelmParameter
	}{
		{name: "kustomize-new", images: []KustomizeImage{podinfo}},
		{name: "kustomize-image-updater", images: []KustomizeImage{
			{Name: "ghcr.io/org/foo", NewTag: "1.1.0"}, podinfo,
			{Name: "bar", NewName: "registry.example.com:5000/team/bar", NewTag: "2.0"}}},
		{name: "kustomize-keep", images: []KustomizeImage{podinfo, {Name: "redis", NewTag: "7.2.4", Digest: testDigest}}},
		{name: "kustomize-flow", images: []KustomizeImage{{Name: "podinfo", NewTag: "6.5.1"}}},
		{name: "kustomize-null", images: []KustomizeImage{podinfo}},
		{name: "doc-start", images: []KustomizeImage{{Name: "podinfo", NewTag: "6.5.1"}}},
		{name: "comments-only", images: []KustomizeImage{podinfo}},
		{name: "helm-new", params: []HelmParameter{helmTag, helmName}},
		{name: "helm-image-updater", params: []HelmParameter{helmTag, helmDigest, helmName}},
		{name: "helm-keep", params: []HelmParameter{helmTag, {Name: "autoscaling.enabled", Value: "true", ForceString: true}}},
		{name: "helm-quoting", params: []HelmParameter{
			{Name: "float", Value: "1.10"}, {Name: "bool", Value: "yes"}, {Name: "int", Value: "010"},
			{Name: "sexagesimal", Value: "1:20"}, {Name: "null", Value: "~"}, {Name: "empty", Value: ""},
			{Name: "multiline", Value: "a\nb"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in, err := os.ReadFile(filepath.Join("testdata", tc.name+".in.yaml"))
			if err != nil {
				t.Fatal(err)
			}
			f, err := Parse(in)
			if err != nil {
				t.Fatal(err)
			}
			for _, img := range tc.images {
				if _, err := f.SetKustomizeImage(img); err != nil {
					t.Fatal(err)
				}
			}
			for _, p := range tc.params {
				if _, err := f.SetHelmParameter(p); err != nil {
					t.Fatal(err)
				}
			}
			got, err := f.Bytes()
			if err != nil {
				t.Fatal(err)
			}
			golden := filepath.Join("testdata", tc.name+".out.yaml")
			if *updateGolden && !bytes.Contains([]byte(tc.name), []byte("image-updater")) && tc.name != "kustomize-new" && tc.name != "helm-new" {
				if err := os.WriteFile(golden, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("%s differs:\n--- got\n%s\n--- want\n%s", golden, got, want)
			}
			assertReadsBack(t, got, tc.images, tc.params)
		})
	}
}

// assertReadsBack checks that Argo CD's reading of out holds every image
// and parameter that was set.
func assertReadsBack(t *testing.T, out []byte, images []KustomizeImage, params []HelmParameter) {
	t.Helper()
	o, err := argoRead(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, img := range images {
		if o.Kustomize == nil || !contains(o.Kustomize.Images, img.String()) {
			t.Errorf("Argo CD does not read image %s from\n%s", img, out)
		}
	}
	for _, p := range params {
		if o.Helm == nil || !contains(o.Helm.Parameters, p) {
			t.Errorf("Argo CD does not read parameter %+v from\n%s", p, out)
		}
	}
}

func contains[T comparable](list []T, v T) bool {
	for _, e := range list {
		if e == v {
			return true
		}
	}
	return false
}
