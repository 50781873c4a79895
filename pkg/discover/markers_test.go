package discover

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"toolkit.dev/image-toolkit/pkg/setters"
)

// Markers written for the discovered images change nothing else, byte for
// byte (CRLF, quotes, comments and flow style kept), are written once
// however often it runs, keep markers already there, and make the
// setters update every location: after them, setters.UpdateDir with the
// policies moves each image everywhere it is written. Sites alone, without
// markers, update the same bytes.
func TestWriteMarkersThenUpdate(t *testing.T) {
	files := map[string]string{
		"apps/a.yaml":             "kind: Deployment\r\nspec:\r\n  template:\r\n    spec:\r\n      containers:\r\n      - name: app\r\n        image: \"ghcr.io/acme/app:1.4.2\" # pinned by the team\r\n      - name: side\r\n        image: ghcr.io/acme/side:2.0.0\r\n",
		"apps/kustomization.yaml": "images:\n- name: ghcr.io/acme/app\n  newTag: '1.4.2'\n- {name: ghcr.io/acme/side, newTag: 2.0.0}\n",
		"apps/values.yaml":        "image:\n  repository: ghcr.io/acme/app\n  tag: 1.4.2 # {\"$imagepolicy\": \"prod:app:tag\"}\n",
	}
	dir := writeTree(t, files)
	res, err := Dir(dir)
	if err != nil {
		t.Fatal(err)
	}
	policy := func(img Image) string { return "prod:" + img.Name[strings.LastIndexByte(img.Name, '/')+1:] }
	sites := res.Sites(policy)

	// Sites alone update without markers.
	for f, ss := range sites {
		data, _ := os.ReadFile(filepath.Join(dir, f))
		out, _, _, err := setters.UpdateSites(data, ss, setters.Policies{"prod:app": {Name: "ghcr.io/acme/app", Tag: "1.5.0"}})
		if err != nil {
			t.Fatal(err)
		}
		if strings.Count(string(out), "1.5.0") != strings.Count(string(data), "1.4.2") {
			t.Errorf("%s: sites updated\n%s", f, out)
		}
	}

	written, skipped, err := WriteMarkers(dir, sites)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"apps/a.yaml", "apps/kustomization.yaml", "apps/values.yaml"}; !slices.Equal(written, want) {
		t.Errorf("written %v, want %v", written, want)
	}
	if len(skipped) != 1 || skipped[0].File != "apps/kustomization.yaml" || !strings.Contains(skipped[0].Reason, "flow style") {
		t.Errorf("skipped %+v, want the flow-style kustomization entry", skipped)
	}
	read := func(p string) string {
		b, err := os.ReadFile(filepath.Join(dir, p))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	wantA := "kind: Deployment\r\nspec:\r\n  template:\r\n    spec:\r\n      containers:\r\n      - name: app\r\n        # {\"$imagepolicy\": \"prod:app\"}\r\n        image: \"ghcr.io/acme/app:1.4.2\" # pinned by the team\r\n      - name: side\r\n        image: ghcr.io/acme/side:2.0.0 # {\"$imagepolicy\": \"prod:side\"}\r\n"
	if got := read("apps/a.yaml"); got != wantA {
		t.Errorf("a.yaml\n got %q\nwant %q", got, wantA)
	}
	wantValues := "image:\n  repository: ghcr.io/acme/app # {\"$imagepolicy\": \"prod:app:name\"}\n  tag: 1.4.2 # {\"$imagepolicy\": \"prod:app:tag\"}\n"
	if got := read("apps/values.yaml"); got != wantValues {
		t.Errorf("values.yaml\n got %q\nwant %q", got, wantValues)
	}

	// Again: nothing to write.
	res2, err := Dir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if again, _, err := WriteMarkers(dir, res2.Sites(policy)); err != nil || len(again) != 0 {
		t.Errorf("second run wrote %v, %v", again, err)
	}

	up, err := setters.UpdateDir(dir, setters.Policies{
		"prod:app":  {Name: "ghcr.io/acme/app", Tag: "1.5.0"},
		"prod:side": {Name: "ghcr.io/acme/side", Tag: "2.1.0"},
	}, setters.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(up.Changes()); n != 4 {
		t.Errorf("%d changes, want 4 (a.yaml twice, kustomization and values once each): %+v", n, up.Changes())
	}
	if got := read("apps/a.yaml"); got != strings.NewReplacer("1.4.2", "1.5.0", "2.0.0", "2.1.0").Replace(wantA) {
		t.Errorf("a.yaml after update %q", got)
	}
}

// ExpandFlow rewrites the flow-style kustomization entry in block style,
// after which WriteMarkers marks it and the setters move it too.
func TestExpandFlowThenMark(t *testing.T) {
	dir := t.TempDir()
	kust := "images:\n- name: ghcr.io/acme/app\n  newTag: '1.4.2'\n- {name: ghcr.io/acme/side, newTag: 2.0.0}\n"
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(kust), 0o644); err != nil {
		t.Fatal(err)
	}
	res, err := Dir(dir)
	if err != nil {
		t.Fatal(err)
	}
	sites := res.Sites(func(img Image) string { return "prod:" + img.Name[strings.LastIndexByte(img.Name, '/')+1:] })
	expanded, moved, left, err := ExpandFlow(dir, sites)
	if err != nil || !slices.Equal(expanded, []string{"kustomization.yaml"}) || len(left) != 0 {
		t.Fatalf("expanded %v, left %v, %v", expanded, left, err)
	}
	if _, skipped, err := WriteMarkers(dir, moved); err != nil || len(skipped) != 0 {
		t.Fatalf("skipped %v, %v", skipped, err)
	}
	up, err := setters.UpdateDir(dir, setters.Policies{"prod:side": {Name: "ghcr.io/acme/side", Tag: "2.1.0"}}, setters.Options{})
	if err != nil || len(up.Changes()) != 1 {
		t.Fatalf("%+v, %v", up, err)
	}
	b, _ := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	want := "images:\n- name: ghcr.io/acme/app\n  newTag: '1.4.2' # {\"$imagepolicy\": \"prod:app:tag\"}\n- name: ghcr.io/acme/side\n  newTag: 2.1.0 # {\"$imagepolicy\": \"prod:side:tag\"}\n"
	if string(b) != want {
		t.Errorf("got %q\nwant %q", b, want)
	}
}
