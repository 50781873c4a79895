package argocd

import (
	"strings"

	"sigs.k8s.io/kustomize/kyaml/yaml"

	"toolkit.dev/image-toolkit/pkg/apis/meta"
)

// Current is the image an override file (data; empty: none) sets for img
// now, and the line that holds it: the kustomize.images entry, the Helm
// spec parameter, or the tag parameter of Helm name and tag parameters
// (the line a rollback changes). ok is false when the file does not set
// it; helm.valuesObject is not read. The job blames that line to tell a
// person's value from the automation's (holds).
func Current(data []byte, typ string, img Image) (ref meta.ImageRef, line int, ok bool, err error) {
	f, err := Parse(data)
	if err != nil || f.doc == nil || len(f.doc.Content) == 0 || img.HelmValuesObject {
		return meta.ImageRef{}, 0, false, err
	}
	switch typ {
	case TypeKustomize:
		name := img.KustomizeName
		if name == "" {
			name = img.Name
		}
		for _, n := range entries(f.root(), "kustomize", "images") {
			k, err := ParseKustomizeImage(n.Value)
			if n.Kind != yaml.ScalarNode || err != nil || k.Name != name {
				continue
			}
			ref = meta.ImageRef{Name: k.Name, Tag: k.NewTag, Digest: k.Digest}
			if k.NewName != "" {
				ref.Name = k.NewName
			}
			return ref, n.Line, true, nil
		}
	case TypeHelm:
		params := map[string]*yaml.Node{}
		for _, n := range entries(f.root(), "helm", "parameters") {
			if n.Kind != yaml.MappingNode {
				continue
			}
			_, name, _ := lookup(n, "name", "")
			_, value, _ := lookup(n, "value", "")
			if name != nil && value != nil {
				params[name.Value] = value
			}
		}
		want := helmParameters(img)
		if len(want) == 1 {
			v := params[want[0].Name]
			if v == nil {
				return meta.ImageRef{}, 0, false, nil
			}
			return splitRef(v.Value), v.Line, true, nil
		}
		name, tag := params[want[0].Name], params[want[1].Name]
		if name == nil || tag == nil {
			return meta.ImageRef{}, 0, false, nil
		}
		ref = splitRef(name.Value + ":" + tag.Value)
		return ref, tag.Line, true, nil
	}
	return meta.ImageRef{}, 0, false, nil
}

// entries are the items of the sequence at m.first.second; none when
// absent or of another kind.
func entries(m *yaml.Node, first, second string) []*yaml.Node {
	_, a, err := lookup(m, first, "")
	if err != nil || a == nil || a.Kind != yaml.MappingNode {
		return nil
	}
	_, s, err := lookup(a, second, "")
	if err != nil || s == nil || s.Kind != yaml.SequenceNode {
		return nil
	}
	return s.Content
}

// splitRef reads NAME[:TAG][@DIGEST], a tag after the last slash.
func splitRef(s string) meta.ImageRef {
	var ref meta.ImageRef
	s, ref.Digest, _ = strings.Cut(s, "@")
	if i := strings.LastIndexByte(s, ':'); i > strings.LastIndexByte(s, '/') {
		s, ref.Tag = s[:i], s[i+1:]
	}
	ref.Name = s
	return ref
}
