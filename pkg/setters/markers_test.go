package setters

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"sigs.k8s.io/kustomize/kyaml/kio/kioutil"
	"sigs.k8s.io/kustomize/kyaml/yaml"
)

// UpdateDir reports every marker it finds, by path and line: those whose
// policy is given and changed, those already up to date, those naming a
// policy it was not given, in dry runs too; a file that does not parse has
// none.
func TestUpdateDirReportsMarkers(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"b/app.yaml": `image: ghcr.io/stefanprodan/podinfo:5.0.0 # {"$imagepolicy": "apps:podinfo"}
other: x
# {"$imagepolicy": "apps:podinfo:tag"}
tag: 5.0.3
`,
		"a.yaml": `- image: nginx:1 # {"$imagepolicy": "apps:missing"}
- image: x:1 # {"$imagepolicy": "other:redis:tag"}
`,
		"broken.yaml":  "a: b # {\"$imagepolicy\": \"apps:podinfo\"}\n  c: [\n",
		"nomarker.yml": "a: b\n",
		"c/block.yaml": "v: |\n  x\n# {\"$imagepolicy\": \"apps:numbers:tag\"}\nw: |-\n  y # {\"$imagepolicy\": \"apps:numbers\"}\n",
	}
	for p, body := range files {
		full := filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, dry := range []bool{true, false} {
		res, err := UpdateDir(dir, testPolicies, Options{DryRun: dry})
		if err != nil {
			t.Fatal(err)
		}
		got := fmt.Sprint(res.Markers)
		want := fmt.Sprint([]MarkerSite{
			{Path: "a.yaml", Line: 1, Marker: Marker{Policy: "apps:missing"}},
			{Path: "a.yaml", Line: 2, Marker: Marker{Policy: "other:redis", Field: FieldTag}},
			{Path: "b/app.yaml", Line: 1, Marker: Marker{Policy: "apps:podinfo"}},
			{Path: "b/app.yaml", Line: 4, Marker: Marker{Policy: "apps:podinfo", Field: FieldTag}},
			// A block scalar is a target all the same (left alone when its
			// value differs).
			{Path: "c/block.yaml", Line: 4, Marker: Marker{Policy: "apps:numbers", Field: FieldTag}},
		})
		if got != want {
			t.Errorf("dry run %t: markers\n%s\nwant\n%s", dry, got, want)
		}
	}
}

// UpdateNodes reports the markers of the items it is given, by their path
// annotations, without lines.
func TestUpdateNodesReportsMarkers(t *testing.T) {
	item, err := yaml.Parse("kind: A\nimage: x:1 # {\"$imagepolicy\": \"apps:nope\"}\n")
	if err != nil {
		t.Fatal(err)
	}
	if err := item.PipeE(yaml.SetAnnotation(kioutil.PathAnnotation, "deploy/a.yaml")); err != nil {
		t.Fatal(err)
	}
	res := UpdateNodes([]*yaml.RNode{item}, testPolicies)
	if want := fmt.Sprint([]MarkerSite{{Path: "deploy/a.yaml", Marker: Marker{Policy: "apps:nope"}}}); fmt.Sprint(res.Markers) != want {
		t.Errorf("markers %v, want %s", res.Markers, want)
	}
}
