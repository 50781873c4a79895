package setters

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
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
			{Path: "a.yaml", Line: 1, Marker: Marker{Policy: "apps:missing"}, Value: "nginx:1"},
			{Path: "a.yaml", Line: 2, Marker: Marker{Policy: "other:redis", Field: FieldTag}, Value: "x:1"},
			{Path: "b/app.yaml", Line: 1, Marker: Marker{Policy: "apps:podinfo"}, Value: "ghcr.io/stefanprodan/podinfo:5.0.0"},
			{Path: "b/app.yaml", Line: 4, Marker: Marker{Policy: "apps:podinfo", Field: FieldTag}, Value: "5.0.3"},
			// A block scalar is a target all the same (left alone when its
			// value differs).
			{Path: "c/block.yaml", Line: 4, Marker: Marker{Policy: "apps:numbers", Field: FieldTag}, Value: `y # {"$imagepolicy": "apps:numbers"}`},
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
	if want := fmt.Sprint([]MarkerSite{{Path: "deploy/a.yaml", Marker: Marker{Policy: "apps:nope"}, Value: "x:1"}}); fmt.Sprint(res.Markers) != want {
		t.Errorf("markers %v, want %s", res.Markers, want)
	}
}

// Options.Keep leaves the values it keeps, and their changes out of the
// result, while the other markers of the same file are still set.
func TestUpdateDirKeepsWhatKeepSays(t *testing.T) {
	dir := t.TempDir()
	body := `image: ghcr.io/stefanprodan/podinfo:5.0.0 # {"$imagepolicy": "apps:podinfo"}
# {"$imagepolicy": "apps:podinfo:tag"}
tag: 5.0.0
`
	if err := os.WriteFile(filepath.Join(dir, "app.yaml"), []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	var asked []string
	var mu sync.Mutex
	res, err := UpdateDir(dir, testPolicies, Options{Keep: func(s MarkerSite, value string) bool {
		mu.Lock()
		defer mu.Unlock()
		asked = append(asked, fmt.Sprintf("%s:%d %s %s->%s", s.Path, s.Line, s.Marker, s.Value, value))
		return s.Marker.Field == FieldTag
	}})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"app.yaml:1 apps:podinfo ghcr.io/stefanprodan/podinfo:5.0.0->ghcr.io/stefanprodan/podinfo:5.0.3",
		"app.yaml:3 apps:podinfo:tag 5.0.0->5.0.3",
	}
	if fmt.Sprint(asked) != fmt.Sprint(want) {
		t.Errorf("asked %q, want %q", asked, want)
	}
	got, _ := os.ReadFile(filepath.Join(dir, "app.yaml"))
	if wantBody := strings.Replace(body, "podinfo:5.0.0", "podinfo:5.0.3", 1); string(got) != wantBody {
		t.Errorf("file\n%s\nwant\n%s", got, wantBody)
	}
	if ch := res.Changes(); len(ch) != 1 || ch[0].Setter != "apps:podinfo" {
		t.Errorf("changes %v, want only apps:podinfo's", ch)
	}
}
