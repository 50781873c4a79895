package argocd

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	sigsyaml "sigs.k8s.io/yaml"

	"toolkit.dev/image-toolkit/pkg/apis/meta"
)

// With HelmValuesObject the Helm names go into helm.valuesObject as nested
// maps of strings: the file's other values kept, a tag that YAML 1.1 would
// read as a number quoted, and a helm.parameters entry of the same name
// (which Argo CD would let win) removed, the list with it when it empties.
func TestUpdateWritesHelmValuesObject(t *testing.T) {
	img := Image{Setter: "apps:podinfo", ImageRef: meta.ImageRef{Name: "ghcr.io/stefanprodan/podinfo", Tag: "6.10"}, ArgoCDImageFields: meta.ArgoCDImageFields{HelmImageName: "podinfo.image.repository", HelmImageTag: "podinfo.image.tag", HelmValuesObject: true}}
	for _, tc := range []struct {
		name, in, want string
		changes        []meta.Change
	}{
		{
			name: "new file",
			want: "helm:\n  valuesObject:\n    podinfo:\n      image:\n        repository: ghcr.io/stefanprodan/podinfo\n        tag: \"6.10\"\n",
			changes: []meta.Change{{NewValue: "ghcr.io/stefanprodan/podinfo", Setter: "apps:podinfo"},
				{NewValue: "6.10", Setter: "apps:podinfo"}},
		},
		{
			name: "other values and keys kept",
			in:   "# kept\nhelm:\n  valuesObject:\n    replicas: 2\n    podinfo:\n      image:\n        tag: \"6.9\" # the tag\n        pullPolicy: Always\n",
			want: "# kept\nhelm:\n  valuesObject:\n    replicas: 2\n    podinfo:\n      image:\n        tag: \"6.10\" # the tag\n        pullPolicy: Always\n        repository: ghcr.io/stefanprodan/podinfo\n",
			changes: []meta.Change{{NewValue: "ghcr.io/stefanprodan/podinfo", Setter: "apps:podinfo"},
				{OldValue: "6.9", NewValue: "6.10", Setter: "apps:podinfo"}},
		},
		{
			name: "parameters of the same names move",
			in: "helm:\n  parameters:\n  - name: podinfo.image.tag\n    value: \"6.9\"\n    forcestring: true\n" +
				"  - name: podinfo.image.repository\n    value: ghcr.io/stefanprodan/podinfo\n    forcestring: true\n",
			want: "helm:\n  valuesObject:\n    podinfo:\n      image:\n        repository: ghcr.io/stefanprodan/podinfo\n        tag: \"6.10\"\n",
			changes: []meta.Change{{OldValue: "ghcr.io/stefanprodan/podinfo", NewValue: "ghcr.io/stefanprodan/podinfo", Setter: "apps:podinfo"},
				{OldValue: "6.9", NewValue: "6.10", Setter: "apps:podinfo"}},
		},
		{
			name: "up to date: no change",
			in:   "helm:\n  valuesObject:\n    podinfo:\n      image:\n        repository: ghcr.io/stefanprodan/podinfo\n        tag: \"6.10\"\n",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, changes, err := Update([]byte(tc.in), TypeHelm, []Image{img})
			if err != nil {
				t.Fatal(err)
			}
			if string(out) != tc.want {
				t.Errorf("file:\n%s\nwant:\n%s", out, tc.want)
			}
			if !reflect.DeepEqual(changes, tc.changes) {
				t.Errorf("changes %+v, want %+v", changes, tc.changes)
			}
		})
	}
}

// What Argo CD's repo server renders from an Application whose own
// valuesObject sets other values and the file: v3.5.1's
// mergeSourceParameters merges the file over the source as a JSON merge
// patch (evanphx/json-patch v4, as gopkg.in publishes it), then helm gets ValuesYAML, the
// merged object. Both keep their values; the file's tag wins.
func TestHelmValuesObjectMergesAsArgoCDMerges(t *testing.T) {
	f, err := Parse(nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.SetHelmValue("image.tag", "1.10"); err != nil {
		t.Fatal(err)
	}
	file, err := f.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	source := `{"repoURL":"https://git.example.com/apps.git","path":"helm","helm":{"valuesObject":{"image":{"repository":"mirror/app","tag":"1.9"},"replicas":2}}}`
	patch, err := sigsyaml.YAMLToJSON(file)
	if err != nil {
		t.Fatal(err)
	}
	merged, err := jsonpatch.MergePatch([]byte(source), patch)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Helm struct {
			ValuesObject map[string]any `json:"valuesObject"`
		} `json:"helm"`
	}
	if err := json.Unmarshal(merged, &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"image": map[string]any{"repository": "mirror/app", "tag": "1.10"}, "replicas": float64(2)}
	if !reflect.DeepEqual(got.Helm.ValuesObject, want) {
		t.Errorf("merged valuesObject %v, want %v", got.Helm.ValuesObject, want)
	}
}

// Names helm.valuesObject cannot hold, and a value in the way, are
// refused with the path.
func TestHelmValuesObjectRefuses(t *testing.T) {
	for _, name := range []string{"images[0].tag", `a\.b`, "image..tag", ""} {
		if _, err := SplitHelmValueName(name); err == nil {
			t.Errorf("%q accepted", name)
		}
	}
	f, err := Parse([]byte("helm:\n  valuesObject:\n    image: nginx\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.SetHelmValue("image.tag", "1"); err == nil || !strings.Contains(err.Error(), "helm.valuesObject.image is a string, not a mapping") {
		t.Errorf("a string in the way: %v", err)
	}
}
