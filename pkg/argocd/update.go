package argocd

import (
	"fmt"

	"toolkit.dev/image-toolkit/pkg/apis/meta"
)

// Source types Argo CD reports in status.sourceType, for which an override
// file can set images.
const (
	TypeKustomize = "Kustomize"
	TypeHelm      = "Helm"
)

// Image is one image to write into an override file: its new value, and
// where the file holds it. Which fields count depends on the source type:
// KustomizeName for Kustomize, the Helm names for Helm.
type Image struct {
	// Setter names what asked for the value (a policy key), for the
	// changes reported.
	Setter string
	meta.ImageRef
	// ArgoCDImageFields is where the file holds it: with HelmImageSpec
	// one parameter for the whole reference, else the name's and the
	// tag's (meta's defaults when empty; the tag's holds tag@digest when
	// the reference has a digest).
	meta.ArgoCDImageFields
}

// Update writes images into the override file data (empty: none yet) of a
// source Argo CD renders as typ, and returns the new file and what
// changed, nil when nothing did. Other keys, entries and comments keep
// their bytes.
func Update(data []byte, typ string, images []Image) ([]byte, []meta.Change, error) {
	f, err := Parse(data)
	if err != nil {
		return nil, nil, err
	}
	var changes []meta.Change
	switch typ {
	case TypeKustomize:
		old, err := f.KustomizeImages()
		if err != nil {
			return nil, nil, err
		}
		for _, img := range images {
			name := img.KustomizeName
			if name == "" {
				name = img.Name
			}
			k := KustomizeImage{Name: name, NewTag: img.Tag, Digest: img.Digest}
			if img.Name != name {
				k.NewName = img.Name
			}
			before := ""
			for _, o := range old {
				if o.Name == name {
					before = o.String()
				}
			}
			changed, err := f.SetKustomizeImage(k)
			if err != nil {
				return nil, nil, err
			}
			if changed {
				changes = append(changes, meta.Change{OldValue: before, NewValue: k.String(), Setter: img.Setter})
			}
		}
	case TypeHelm:
		old, err := f.HelmParameters()
		if err != nil {
			return nil, nil, err
		}
		for _, img := range images {
			for _, p := range helmParameters(img) {
				before := ""
				for _, o := range old {
					if o.Name == p.Name {
						before = o.Value
					}
				}
				set := f.SetHelmParameter
				if img.HelmValuesObject {
					if v, ok, err := f.HelmValue(p.Name); err != nil {
						return nil, nil, err
					} else if ok {
						before = v
					}
					set = func(p HelmParameter) (bool, error) { return f.SetHelmValue(p.Name, p.Value) }
				}
				changed, err := set(p)
				if err != nil {
					return nil, nil, err
				}
				if changed {
					changes = append(changes, meta.Change{OldValue: before, NewValue: p.Value, Setter: img.Setter})
				}
			}
		}
	default:
		return nil, nil, fmt.Errorf("argo CD renders this source as %q: image overrides are written for Kustomize and Helm sources only", typ)
	}
	if len(changes) == 0 {
		return nil, nil, nil
	}
	out, err := f.Bytes()
	if err != nil {
		return nil, nil, err
	}
	return out, changes, nil
}

// helmParameters are the parameters that set img, forced to strings as
// argocd-image-updater writes them, so that a tag such as 1.10 stays one.
func helmParameters(img Image) []HelmParameter {
	tag := img.Tag
	if img.Digest != "" {
		tag = img.Digest
		if img.Tag != "" {
			tag = img.Tag + "@" + img.Digest
		}
	}
	if img.HelmImageSpec != "" {
		spec := img.Name
		if img.Tag != "" {
			spec += ":" + img.Tag
		}
		if img.Digest != "" {
			spec += "@" + img.Digest
		}
		return []HelmParameter{{Name: img.HelmImageSpec, Value: spec, ForceString: true}}
	}
	name, tagName := img.HelmImageName, img.HelmImageTag
	if name == "" {
		name = meta.DefaultHelmImageName
	}
	if tagName == "" {
		tagName = meta.DefaultHelmImageTag
	}
	return []HelmParameter{{Name: name, Value: img.Name, ForceString: true}, {Name: tagName, Value: tag, ForceString: true}}
}
