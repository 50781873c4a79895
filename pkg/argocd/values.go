package argocd

import (
	"encoding/json"
	"fmt"
	"strings"

	"sigs.k8s.io/kustomize/kyaml/yaml"
)

// helm.valuesObject is the other place an override file can set a Helm
// source's images: Argo CD (v3.5.1's ApplicationSourceHelm.ValuesObject, a
// RawExtension) takes it as a map of values, merges the file's over the
// Application's own as a JSON merge patch does (maps key by key, case
// sensitive; lists and scalars replaced), and passes the result to helm
// template as a values file after valueFiles. Two rules of Argo CD's shape
// what is written:
//
//   - valuesObject replaces helm.values (the string) whole: ValuesYAML
//     reads the object when there is one. An Application whose source sets
//     helm.values would lose all of it; the caller refuses such a source.
//   - helm.parameters (--set) win over valuesObject: a parameter of the
//     same name would hide the value. The file's own (an earlier
//     parameters write-back) is removed with the write, and the
//     Application's own is refused by the caller.
//
// A name is a dotted path of map keys, as Helm's --set spells it; list
// indexes and escaped dots are refused (SplitHelmValueName). The values are
// strings, quoted where YAML 1.1 would read another type (a tag 1.10 stays
// "1.10"), as forcestring does for parameters.

// SplitHelmValueName splits a dotted Helm value name into its map keys.
func SplitHelmValueName(name string) ([]string, error) {
	if strings.ContainsAny(name, `[]\`) {
		return nil, fmt.Errorf("helm value %q: list indexes and escaped dots cannot be written to helm.valuesObject; use helm.parameters", name)
	}
	keys := strings.Split(name, ".")
	for _, k := range keys {
		if k == "" {
			return nil, fmt.Errorf("helm value %q: an empty key", name)
		}
	}
	return keys, nil
}

// SetHelmValue sets the string at name in helm.valuesObject, creating the
// maps on the way, and removes a helm.parameters entry of that name from
// the file (it would win over the value). It reports whether the file
// changed. A key on the way that holds something other than a map is an
// error naming it.
func (f *File) SetHelmValue(name, value string) (bool, error) {
	keys, err := SplitHelmValueName(name)
	if err != nil {
		return false, err
	}
	helm, err := child(f.root(), "helm", yaml.MappingNode, "")
	if err != nil {
		return false, err
	}
	m, err := child(helm, "valuesObject", yaml.MappingNode, "helm")
	if err != nil {
		return false, err
	}
	path := "helm.valuesObject"
	for _, k := range keys[:len(keys)-1] {
		path = join(path, k)
		v := exactValue(m, k)
		switch {
		case v == nil:
			v = &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
			m.Content = append(m.Content, str(k), v)
		case isNull(v):
			*v = yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", LineComment: v.LineComment}
		case v.Kind != yaml.MappingNode:
			return false, fmt.Errorf("override file: %s is %s, not a mapping", path, kindName(v))
		}
		m = v
	}
	changed, err := f.dropHelmParameter(name)
	if err != nil {
		return false, err
	}
	leaf := keys[len(keys)-1]
	path = join(path, leaf)
	v := exactValue(m, leaf)
	switch {
	case v == nil:
		m.Content = append(m.Content, str(leaf), str(value))
		return true, nil
	case v.Kind != yaml.ScalarNode:
		return false, fmt.Errorf("override file: %s is %s, not a string", path, kindName(v))
	case v.ShortTag() == "!!str" && v.Value == value:
		return changed, nil
	}
	setStr(v, value)
	return true, nil
}

// HelmValue is the string at name in the file's helm.valuesObject as Argo
// CD reads it; ok is false when there is none.
func (f *File) HelmValue(name string) (value string, ok bool, err error) {
	keys, err := SplitHelmValueName(name)
	if err != nil {
		return "", false, err
	}
	o, err := f.read()
	if err != nil || o.Helm == nil || len(o.Helm.ValuesObject) == 0 {
		return "", false, err
	}
	var cur any
	if err := json.Unmarshal(o.Helm.ValuesObject, &cur); err != nil {
		return "", false, fmt.Errorf("override file: helm.valuesObject: %w", err)
	}
	for _, k := range keys {
		m, isMap := cur.(map[string]any)
		if !isMap {
			return "", false, nil
		}
		if cur, ok = m[k]; !ok {
			return "", false, nil
		}
	}
	s, ok := cur.(string)
	return s, ok, nil
}

// dropHelmParameter removes the file's helm.parameters entries named
// name; a list left empty goes too, since an empty list in the file would
// replace the Application's own parameters with none.
func (f *File) dropHelmParameter(name string) (bool, error) {
	_, helm, err := lookup(f.root(), "helm", "")
	if err != nil || helm == nil || helm.Kind != yaml.MappingNode {
		return false, err
	}
	k, params, err := lookup(helm, "parameters", "helm")
	if err != nil || params == nil || params.Kind != yaml.SequenceNode {
		return false, err
	}
	kept := params.Content[:0]
	for n, e := range params.Content {
		if e.Kind == yaml.MappingNode {
			v, err := value(e, "name", fmt.Sprintf("helm.parameters[%d]", n))
			if err != nil {
				return false, err
			}
			if v != nil && v.Value == name {
				continue
			}
		}
		kept = append(kept, e)
	}
	if len(kept) == len(params.Content) {
		return false, nil
	}
	params.Content = kept
	if len(kept) == 0 {
		for i := 0; i+1 < len(helm.Content); i += 2 {
			if helm.Content[i] == k {
				helm.Content = append(helm.Content[:i], helm.Content[i+2:]...)
				break
			}
		}
	}
	return true, nil
}

// exactValue is the value of key in mapping m, matched as a JSON merge
// patch matches map keys: exactly.
func exactValue(m *yaml.Node, key string) *yaml.Node {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Kind == yaml.ScalarNode && m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}
