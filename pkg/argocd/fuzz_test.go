package argocd

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// FuzzFile feeds the reader arbitrary files. It must never panic; a file it
// accepts must come back from Bytes as Argo CD read it; and after a set that
// succeeds, Argo CD must read the new value and every entry it read before
// under another name.
func FuzzFile(f *testing.F) {
	seeds, _ := filepath.Glob("testdata/*.yaml")
	for _, s := range seeds {
		if b, err := os.ReadFile(s); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte("kustomize: {images: [\"a:1\", 'b=c@sha256:0']}\nhelm: {parameters: [{name: x, value: y}]}\n"))
	f.Add([]byte("# c\n---\nhelm:\n  parameters:\n  - NAME: image.tag\n    Value: \"1.0\"\n"))

	img := KustomizeImage{Name: "podinfo", NewName: "ghcr.io/stefanprodan/podinfo", NewTag: "6.5.1"}
	param := HelmParameter{Name: "image.tag", Value: "1.10", ForceString: true}
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := Parse(data)
		if err != nil {
			return
		}
		images, imagesErr := file.KustomizeImages()
		params, paramsErr := file.HelmParameters()
		out, err := file.Bytes()
		if err != nil {
			t.Fatalf("an accepted file does not encode: %v\n%q", err, data)
		}
		again, err := Parse(out)
		if err != nil {
			t.Fatalf("the encoded file does not parse: %v\n%q", err, out)
		}
		if imagesErr == nil {
			got, err := again.KustomizeImages()
			if err != nil || !reflect.DeepEqual(got, images) {
				t.Fatalf("images changed by encoding: %v %v -> %v\n%q\n%q", err, images, got, data, out)
			}
		}
		if paramsErr == nil && !reflect.DeepEqual(mustParams(t, again), params) {
			t.Fatalf("parameters changed by encoding\n%q\n%q", data, out)
		}

		if _, err := file.SetKustomizeImage(img); err == nil && imagesErr == nil {
			got, err := file.KustomizeImages()
			if err != nil {
				t.Fatalf("after a set, Argo CD cannot read the file: %v\n%q", err, data)
			}
			if !contains(got, img) || !containsOthers(got, images, func(i KustomizeImage) bool { return i.Name == img.Name }) {
				t.Fatalf("set %v: read %v, had %v\n%q", img, got, images, data)
			}
		}
		if _, err := file.SetHelmParameter(param); err == nil && paramsErr == nil {
			got := mustParams(t, file)
			if !contains(got, param) || !containsOthers(got, params, func(p HelmParameter) bool { return p.Name == param.Name }) {
				t.Fatalf("set %v: read %v, had %v\n%q", param, got, params, data)
			}
		}
	})
}

func mustParams(t *testing.T, f *File) []HelmParameter {
	t.Helper()
	p, err := f.HelmParameters()
	if err != nil {
		t.Fatalf("Argo CD cannot read the file: %v", err)
	}
	return p
}

// containsOthers is whether got holds, in order, every entry of had that
// same does not pick.
func containsOthers[T comparable](got, had []T, same func(T) bool) bool {
	i := 0
	for _, h := range had {
		if same(h) {
			continue
		}
		for i < len(got) && got[i] != h {
			i++
		}
		if i == len(got) {
			return false
		}
		i++
	}
	return true
}

func FuzzParseKustomizeImage(f *testing.F) {
	for _, s := range []string{"nginx:1", "a=b:1@sha256:0", "localhost:5000/a", "a@b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		img, err := ParseKustomizeImage(s)
		if err != nil {
			return
		}
		again, err := ParseKustomizeImage(img.String())
		if err != nil || again != img {
			t.Fatalf("%q -> %+v -> %q -> %+v, %v", s, img, img.String(), again, err)
		}
	})
}
