package argocd

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestFileNameIsArgoCDsPerApplicationFile(t *testing.T) {
	if got := FileName("podinfo-staging"); got != ".argocd-source-podinfo-staging.yaml" {
		t.Fatalf("FileName = %q", got)
	}
}

func TestParseKustomizeImageReadsEveryFormOfSetImage(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want KustomizeImage
	}{
		{"nginx", KustomizeImage{Name: "nginx"}},
		{"nginx:1.25", KustomizeImage{Name: "nginx", NewTag: "1.25"}},
		{"nginx@" + testDigest, KustomizeImage{Name: "nginx", Digest: testDigest}},
		{"nginx:1.25@" + testDigest, KustomizeImage{Name: "nginx", NewTag: "1.25", Digest: testDigest}},
		{"nginx=ghcr.io/org/nginx", KustomizeImage{Name: "nginx", NewName: "ghcr.io/org/nginx"}},
		{"nginx=ghcr.io/org/nginx:1.25", KustomizeImage{Name: "nginx", NewName: "ghcr.io/org/nginx", NewTag: "1.25"}},
		{"nginx=ghcr.io/org/nginx@" + testDigest, KustomizeImage{Name: "nginx", NewName: "ghcr.io/org/nginx", Digest: testDigest}},
		{"localhost:5000/app", KustomizeImage{Name: "localhost:5000/app"}},
		{"localhost:5000/app:v2", KustomizeImage{Name: "localhost:5000/app", NewTag: "v2"}},
		{"app=localhost:5000/app:v2", KustomizeImage{Name: "app", NewName: "localhost:5000/app", NewTag: "v2"}},
	} {
		got, err := ParseKustomizeImage(tc.in)
		if err != nil {
			t.Fatalf("%s: %v", tc.in, err)
		}
		if got != tc.want {
			t.Errorf("%s: got %+v, want %+v", tc.in, got, tc.want)
		}
		if got.String() != tc.in {
			t.Errorf("%s: String() = %s", tc.in, got.String())
		}
	}
	for _, bad := range []string{"", "=nginx:1", ":1.25", "@" + testDigest, "nginx:", "nginx@", "0::", "a:1=b:2", ":="} {
		if _, err := ParseKustomizeImage(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func TestKustomizeImageStringDropsARenameToItself(t *testing.T) {
	img := KustomizeImage{Name: "nginx", NewName: "nginx", NewTag: "1.25"}
	if got := img.String(); got != "nginx:1.25" {
		t.Fatalf("String() = %s", got)
	}
}

// Setting what a file already says changes nothing: not a byte, and the
// caller is told, so it makes no empty commit.
func TestSettingTheCurrentValuesChangesNothing(t *testing.T) {
	for name, set := range map[string]func(*File) (bool, error){
		"kustomize-image-updater": func(f *File) (bool, error) {
			return f.SetKustomizeImage(KustomizeImage{Name: "bar", NewName: "registry.example.com:5000/team/bar", NewTag: "2.0"})
		},
		"kustomize-rename-to-itself": func(f *File) (bool, error) {
			return f.SetKustomizeImage(KustomizeImage{Name: "podinfo", NewTag: "6.5.0"})
		},
		"helm-image-updater": func(f *File) (bool, error) {
			return f.SetHelmParameter(HelmParameter{Name: "image.tag", Value: "6.5.0"})
		},
		"helm-keep": func(f *File) (bool, error) {
			return f.SetHelmParameter(HelmParameter{Name: "image.tag", Value: "6.5.0", ForceString: true})
		},
	} {
		in, err := os.ReadFile(filepath.Join("testdata", name+".in.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		f, err := Parse(in)
		if err != nil {
			t.Fatal(err)
		}
		changed, err := set(f)
		if err != nil || changed {
			t.Fatalf("%s: changed=%v err=%v", name, changed, err)
		}
		out, err := f.Bytes()
		if err != nil {
			t.Fatal(err)
		}
		if name != "helm-keep" && !bytes.Equal(out, in) { // helm-keep's comment spacing is the encoder's
			t.Fatalf("%s: bytes changed:\n%s", name, out)
		}
	}
}

func TestReadersSeeWhatArgoCDReads(t *testing.T) {
	f, err := Parse([]byte("Kustomize:\n  IMAGES: [\"a:1\", b=c@" + testDigest + "]\nhelm:\n  parameters:\n  - {Name: x, value: \"1\", forceString: true}\n"))
	if err != nil {
		t.Fatal(err)
	}
	images, err := f.KustomizeImages()
	if err != nil {
		t.Fatal(err)
	}
	if len(images) != 2 || images[0] != (KustomizeImage{Name: "a", NewTag: "1"}) ||
		images[1] != (KustomizeImage{Name: "b", NewName: "c", Digest: testDigest}) {
		t.Fatalf("images = %+v", images)
	}
	params, err := f.HelmParameters()
	if err != nil {
		t.Fatal(err)
	}
	if len(params) != 1 || params[0] != (HelmParameter{Name: "x", Value: "1", ForceString: true}) {
		t.Fatalf("parameters = %+v", params)
	}
	// The key is matched as Argo CD matches it, so the entry is updated in
	// place rather than added under a second spelling.
	if _, err := f.SetKustomizeImage(KustomizeImage{Name: "a", NewTag: "2"}); err != nil {
		t.Fatal(err)
	}
	out, _ := f.Bytes()
	if strings.Count(string(out), "a:") != 1 || !strings.Contains(string(out), "a:2") {
		t.Fatalf("not updated in place:\n%s", out)
	}
}

func TestBadFilesAreRefusedWithTheReason(t *testing.T) {
	for _, tc := range []struct {
		name, in, set, want string
	}{
		{"not yaml", "kustomize: [", "", "override file:"},
		{"two documents", "a: 1\n---\nb: 2\n", "", "more than one YAML document"},
		{"a list", "- a\n", "", "is a list, not a mapping"},
		{"a value Argo CD reads as a number", "helm:\n  parameters:\n  - name: a\n    value: 1.10\n", "", "Argo CD cannot read it"},
		{"a value Argo CD reads as a bool", "helm:\n  parameters:\n  - name: a\n    value: yes\n", "", "Argo CD cannot read it"},
		{"kustomize is an alias", "base: &b {images: [\"x:1\"]}\nkustomize: *b\n", "image", "kustomize is an alias, not a mapping"},
		{"parameters is an alias", "base: &b [{name: a}]\nhelm: {parameters: *b}\n", "param", "helm.parameters is an alias, not a list"},
		{"images is a string", "kustomize:\n  images: a:1\n", "", "Argo CD cannot read it"},
		{"an image is a mapping", "kustomize:\n  images:\n  - {a: 1}\n", "", "Argo CD cannot read it"},
		{"a key twice", "helm:\n  parameters:\n  - name: a\n    Name: b\n", "param", `key "name" appears twice`},
		{"a parameter is a string", "helm:\n  parameters: [a]\n", "", "Argo CD cannot read it"},
		{"an image without a name", "kustomize:\n  images: [\"=b:1\"]\n", "image", "no image name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := Parse([]byte(tc.in))
			if err == nil {
				switch tc.set {
				case "image":
					_, err = f.SetKustomizeImage(KustomizeImage{Name: "x", NewTag: "1"})
				case "param":
					_, err = f.SetHelmParameter(HelmParameter{Name: "a", Value: "1"})
				}
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to say %q", err, tc.want)
			}
		})
	}
}

func TestSettersRefuseAnIncompleteValue(t *testing.T) {
	f, _ := Parse(nil)
	if _, err := f.SetKustomizeImage(KustomizeImage{Name: "nginx"}); err == nil {
		t.Error("an image with neither a new name, tag nor digest was accepted; kustomize edit set image refuses it")
	}
	if _, err := f.SetHelmParameter(HelmParameter{Value: "1"}); err == nil {
		t.Error("a parameter without a name was accepted")
	}
}
