package setters

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"sigs.k8s.io/kustomize/kyaml/kio"
	"sigs.k8s.io/kustomize/kyaml/yaml"

	"toolkit.dev/image-toolkit/pkg/apis/meta"
)

// Node mode finds the same changes as byte mode on the golden inputs, and
// its output carries the new values.
func TestUpdateNodesAgreesWithBytes(t *testing.T) {
	files, _ := filepath.Glob("testdata/golden/in/*/*")
	for _, f := range files {
		data, _ := os.ReadFile(f)
		if !bytes.Contains(data, needle) {
			continue
		}
		t.Run(f, func(t *testing.T) {
			_, objs, _, err := UpdateBytes(data, testPolicies)
			if err != nil {
				t.Skipf("does not parse: %v", err)
			}
			items, err := (&kio.ByteReader{Reader: bytes.NewReader(data), OmitReaderAnnotations: true}).Read()
			if err != nil {
				t.Fatal(err)
			}
			res := UpdateNodes(items, testPolicies)
			var want, got []meta.Change
			for _, o := range objs {
				want = append(want, o.Changes...)
			}
			got = res.Changes()
			if !reflect.DeepEqual(got, want) {
				t.Errorf("node mode changes:\n%+v\nbyte mode:\n%+v", got, want)
			}
			var out strings.Builder
			if err := (&kio.ByteWriter{Writer: &out}).Write(items); err != nil {
				t.Fatal(err)
			}
			for _, c := range got {
				if !strings.Contains(out.String(), c.NewValue) {
					t.Errorf("output lacks %q", c.NewValue)
				}
			}
		})
	}
}

func TestUpdateNodesQuotesAndReportsPaths(t *testing.T) {
	item, err := yaml.Parse("apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  annotations:\n    internal.config.kubernetes.io/path: deploy/p.yaml\nspec:\n  tag: v1 # {\"$imagepolicy\": \"apps:numbers:tag\"}\n")
	if err != nil {
		t.Fatal(err)
	}
	res := UpdateNodes([]*yaml.RNode{item}, testPolicies)
	if len(res.Files) != 1 || res.Files[0].Path != "deploy/p.yaml" || res.Files[0].Objects[0].Name != "p" {
		t.Fatalf("result %+v", res)
	}
	s, _ := item.String()
	if !strings.Contains(s, `tag: "1.10" # {"$imagepolicy": "apps:numbers:tag"}`) {
		t.Errorf("tag not quoted:\n%s", s)
	}
}
