package argocd

import (
	"fmt"
	"strconv"

	"sigs.k8s.io/kustomize/kyaml/yaml"
)

// HelmParameter is one entry of helm.parameters, which Argo CD passes to
// `helm template` as --set name=value, or --set-string when ForceString.
// The JSON names are Argo CD's; the file spells the last one forcestring, as
// image-updater writes it, which Argo CD matches case-insensitively.
type HelmParameter struct {
	Name        string `json:"name,omitempty"`
	Value       string `json:"value,omitempty"`
	ForceString bool   `json:"forceString,omitempty"`
}

// SetHelmParameter sets the parameter named p.Name in helm.parameters and
// reports whether the file changed. An existing entry is changed in place,
// its other keys kept; a new one goes before the first entry whose name
// sorts after it, so a list kept sorted by name, as image-updater keeps it,
// stays sorted.
func (f *File) SetHelmParameter(p HelmParameter) (bool, error) {
	if p.Name == "" {
		return false, fmt.Errorf("helm parameter: no name")
	}
	helm, err := child(f.root(), "helm", yaml.MappingNode, "")
	if err != nil {
		return false, err
	}
	params, err := child(helm, "parameters", yaml.SequenceNode, "helm")
	if err != nil {
		return false, err
	}
	at := len(params.Content)
	for n, e := range params.Content {
		path := fmt.Sprintf("helm.parameters[%d]", n)
		if e.Kind != yaml.MappingNode {
			return false, fmt.Errorf("override file: %s is %s, not a mapping", path, kindName(e))
		}
		name, err := value(e, "name", path)
		if err != nil {
			return false, err
		}
		switch {
		case name != nil && name.Value == p.Name:
			return setParameter(e, p, path)
		case name != nil && name.Value > p.Name && at == len(params.Content):
			at = n
		}
	}
	entry := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", Content: []*yaml.Node{
		str("name"), str(p.Name),
		str("value"), str(p.Value),
		str("forcestring"), boolean(p.ForceString),
	}}
	params.Content = append(params.Content[:at], append([]*yaml.Node{entry}, params.Content[at:]...)...)
	return true, nil
}

// setParameter sets value and forcestring of an existing entry.
func setParameter(e *yaml.Node, p HelmParameter, path string) (bool, error) {
	changed := false
	for _, kv := range []struct {
		key  string
		want *yaml.Node
	}{{"value", str(p.Value)}, {"forcestring", boolean(p.ForceString)}} {
		v, err := value(e, kv.key, path)
		if err != nil {
			return false, err
		}
		switch {
		case v == nil:
			e.Content = append(e.Content, str(kv.key), kv.want)
		case v.Value == kv.want.Value && v.ShortTag() == kv.want.Tag:
			continue
		case kv.want.Tag == "!!str":
			setStr(v, kv.want.Value)
		default:
			v.Kind, v.Value, v.Tag, v.Style = yaml.ScalarNode, kv.want.Value, kv.want.Tag, 0
		}
		changed = true
	}
	return changed, nil
}

// value is the scalar under key in entry, or nil when there is none.
func value(entry *yaml.Node, key, path string) (*yaml.Node, error) {
	_, v, err := lookup(entry, key, path)
	if err != nil || v == nil {
		return nil, err
	}
	if v.Kind != yaml.ScalarNode {
		return nil, fmt.Errorf("override file: %s.%s is %s, not a scalar", path, key, kindName(v))
	}
	return v, nil
}

func boolean(b bool) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: strconv.FormatBool(b)}
}
