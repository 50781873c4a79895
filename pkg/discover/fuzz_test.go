package discover

import (
	"testing"

	"toolkit.dev/image-toolkit/pkg/setters"
)

// FuzzBytes feeds arbitrary files to discovery and its markers: whatever
// the bytes, no panic, every image has a name, a tag and a location, and
// writing markers for them either fails cleanly or yields a file that
// still parses.
func FuzzBytes(f *testing.F) {
	for _, s := range []string{
		"kind: Deployment\nspec: {template: {spec: {containers: [{name: a, image: 'nginx:1.27'}]}}}\n",
		"images:\n- name: app\n  newName: ghcr.io/x/app\n  newTag: 1.0.0\n",
		"kind: HelmRelease\nspec:\n  values:\n    image: {repository: x/y, tag: '1'}\n",
		"kind: List\nitems:\n- kind: Pod\n  spec:\n    containers:\n    - image: a/b:1 # c\r\n",
	} {
		f.Add("values.yaml", s)
		f.Add("kustomization.yaml", s)
	}
	f.Fuzz(func(t *testing.T, name, data string) {
		res := Bytes(name, []byte(data))
		for _, img := range res.Images {
			if img.Name == "" || img.Tag == "" || len(img.Locations) == 0 {
				t.Fatalf("image %+v from %q", img, data)
			}
		}
		sites := res.Sites(func(Image) string { return "ns:img" })[name]
		// Flow style expanded, when it can be, must parse and keep the
		// sites on their values; markers then go on the moved sites.
		expanded, moved, _, _, err := setters.ExpandFlow([]byte(data), sites)
		if err != nil {
			expanded, moved = []byte(data), sites
		}
		out, _, _, err := setters.AddMarkers(expanded, moved)
		if err == nil {
			if _, err := setters.ParseDocuments(out); err != nil {
				t.Fatalf("markers broke %q: %v\n%s", data, err, out)
			}
		}
	})
}
