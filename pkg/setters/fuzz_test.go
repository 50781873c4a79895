package setters

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"sigs.k8s.io/kustomize/kyaml/yaml"

	"toolkit.dev/image-toolkit/pkg/apis/meta"
)

func FuzzUpdate(f *testing.F) {
	seeds, _ := filepath.Glob("testdata/golden/in/*/*")
	for _, s := range seeds {
		if b, err := os.ReadFile(s); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte("a: b # {\"$imagepolicy\": \"apps:redis\"}\n"))
	f.Add([]byte("- 'x' # {\"$imagepolicy\": \"apps:numbers:tag\"}\r\n- \"y\" # {\"$imagepolicy\": \"apps:redis:digest\"}"))

	f.Fuzz(func(t *testing.T, data []byte) {
		out, objs, _, edits, _, err := update(data, testPolicies, nil)
		if err != nil {
			if !bytes.Equal(out, data) {
				t.Fatal("a failed update changed the bytes")
			}
			return
		}
		if len(edits) == 0 {
			if !bytes.Equal(out, data) || len(objs) != 0 {
				t.Fatal("no edits but a change")
			}
			return
		}
		if _, err := parseDocs(out); err != nil {
			t.Fatalf("output does not parse: %v\n%q", err, out)
		}

		// Outside the edits, the output is the input, byte for byte; each
		// edit replaced exactly one scalar with the recorded old value.
		var changes []meta.Change
		for _, o := range objs {
			changes = append(changes, o.Changes...)
		}
		if len(changes) != len(edits) {
			t.Fatalf("%d changes, %d edits", len(changes), len(edits))
		}
		in, o := 0, 0
		for i, e := range edits {
			if e.start < in || e.end < e.start || e.end > len(data) {
				t.Fatalf("edit %d out of order or range: %+v", i, e)
			}
			gap := data[in:e.start]
			if !bytes.HasPrefix(out[o:], gap) {
				t.Fatalf("bytes before edit %d differ", i)
			}
			o += len(gap)
			if !bytes.HasPrefix(out[o:], []byte(e.text)) {
				t.Fatalf("edit %d text not in the output", i)
			}
			o += len(e.text)
			in = e.end
			var old yaml.Node
			if err := yaml.Unmarshal(data[e.start:e.end], &old); err == nil && len(old.Content) == 1 &&
				old.Content[0].Kind == yaml.ScalarNode && old.Content[0].Value != changes[i].OldValue {
				t.Fatalf("edit %d replaced %q, not the old value %q", i, data[e.start:e.end], changes[i].OldValue)
			}
		}
		if !bytes.Equal(out[o:], data[in:]) {
			t.Fatal("bytes after the last edit differ")
		}

		// A second run is a no-op.
		again, objs2, _, edits2, _, err := update(out, testPolicies, nil)
		if err != nil || len(edits2) != 0 || len(objs2) != 0 || !bytes.Equal(again, out) {
			t.Fatalf("second run: err %v, %d edits", err, len(edits2))
		}
	})
}
