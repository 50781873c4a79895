package setters

import (
	"strings"
	"testing"
)

// siteOf is the site of the first scalar whose source text is value.
func siteOf(t *testing.T, data, value string) Site {
	t.Helper()
	docs, err := parseDocs([]byte(data))
	if err != nil {
		t.Fatal(err)
	}
	for pos, v := range scalarsAt(docs) {
		if v == value {
			return Site{Line: pos[0], Column: pos[1], Marker: Marker{Policy: "apps:envoy"}}
		}
	}
	t.Fatalf("no scalar %q", value)
	return Site{}
}

// A flow mapping holding a site is rewritten in block style, alone: the
// indentation follows the item or the key, quotes, the trailing comment
// and CRLF are kept; after it the marker can be written and read back.
// What cannot be rewritten so is left alone with the reason.
func TestExpandFlow(t *testing.T) {
	tests := []struct {
		name, in, value, want, skip string
	}{
		{name: "sequence item",
			in:    "spec:\n  containers:\n  - {name: envoy, image: 'docker.io/envoyproxy/envoy:v1.29.1'} # edge\n  - name: app\n    image: app:1\n",
			value: "docker.io/envoyproxy/envoy:v1.29.1",
			want:  "spec:\n  containers:\n  - name: envoy\n    image: 'docker.io/envoyproxy/envoy:v1.29.1' # edge\n  - name: app\n    image: app:1\n"},
		{name: "CRLF, trailing comma",
			in:    "images:\r\n- {name: ghcr.io/acme/side, newTag: \"2.0.0\", }\r\n- name: x\r\n",
			value: "2.0.0",
			want:  "images:\r\n- name: ghcr.io/acme/side\r\n  newTag: \"2.0.0\"\r\n- name: x\r\n"},
		{name: "key value",
			in:    "image: {repository: ghcr.io/acme/api, tag: 1.4.2}\nother: 1\n",
			value: "1.4.2",
			want:  "image:\n  repository: ghcr.io/acme/api\n  tag: 1.4.2\nother: 1\n"},
		{name: "nested key value",
			in:    "values:\n  - name: a\n    image: {tag: !!str 1.4.2}   # pinned\n",
			value: "1.4.2",
			want:  "values:\n  - name: a\n    image:\n      tag: !!str 1.4.2   # pinned\n"},
		{name: "holds a collection", in: "- {name: a, env: [x], image: 'a:1'}\n", value: "a:1", skip: "holds a collection"},
		{name: "spans lines", in: "- {name: a,\n   image: 'a:1'}\n", value: "a:1", skip: "spans lines"},
		{name: "in a flow sequence", in: "containers: [{name: a, image: 'a:1'}]\n", value: "a:1", skip: "only a flow mapping"},
		{name: "one pair", in: "- {image: 'a:1'}\n", value: "a:1",
			want: "- image: 'a:1'\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			site := siteOf(t, tt.in, tt.value)
			out, moved, n, skipped, err := ExpandFlow([]byte(tt.in), []Site{site})
			if err != nil {
				t.Fatal(err)
			}
			if tt.skip != "" {
				if n != 0 || string(out) != tt.in || len(skipped) != 1 || !strings.Contains(skipped[0].Error(), tt.skip) {
					t.Errorf("expanded %d, skipped %v:\n%s", n, skipped, out)
				}
				return
			}
			if n != 1 || string(out) != tt.want {
				t.Errorf("expanded %d\n got %q\nwant %q", n, out, tt.want)
			}
			marked, added, notMarked, err := AddMarkers(out, moved)
			if err != nil || len(added) != 1 || len(notMarked) != 0 {
				t.Fatalf("marking the expanded file: %v, %v, %v", err, added, notMarked)
			}
			if !strings.Contains(string(marked), site.Marker.Comment()) {
				t.Errorf("no marker:\n%s", marked)
			}
		})
	}
}

// Sites after an expanded mapping move down with it; sites in other
// mappings of the same file each move with theirs.
func TestExpandFlowMovesOtherSites(t *testing.T) {
	in := "a:\n- {name: x, image: 'x:1'}\n- {name: y, image: 'y:1'}\nb:\n  image: z:1\n"
	sites := []Site{siteOf(t, in, "x:1"), siteOf(t, in, "y:1"), siteOf(t, in, "z:1")}
	out, moved, n, _, err := ExpandFlow([]byte(in), sites)
	if err != nil || n != 2 {
		t.Fatalf("%d, %v", n, err)
	}
	want := []Site{{Line: 3, Column: 10}, {Line: 5, Column: 10}, {Line: 7, Column: 10}}
	for i := range want {
		if moved[i].Line != want[i].Line || moved[i].Column != want[i].Column {
			t.Errorf("site %d at %d:%d, want %d:%d\n%s", i, moved[i].Line, moved[i].Column, want[i].Line, want[i].Column, out)
		}
	}
}
