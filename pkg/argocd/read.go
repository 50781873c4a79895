package argocd

import (
	"encoding/json"
	"fmt"

	sigsyaml "sigs.k8s.io/yaml"
)

// overrides is the part of Argo CD's ApplicationSource that image-toolkit
// writes, with the JSON names Argo CD decodes.
type overrides struct {
	Kustomize *struct {
		Images []string `json:"images,omitempty"`
	} `json:"kustomize,omitempty"`
	Helm *struct {
		Parameters []HelmParameter `json:"parameters,omitempty"`
		// ValuesObject is any JSON to Argo CD (a RawExtension).
		ValuesObject json.RawMessage `json:"valuesObject,omitempty"`
	} `json:"helm,omitempty"`
}

// argoRead reads data as Argo CD's repo server does (YAMLToJSON, then
// encoding/json); the merge patch in between changes neither the names nor
// the types of what it carries.
func argoRead(data []byte) (overrides, error) {
	var o overrides
	j, err := sigsyaml.YAMLToJSON(data)
	if err != nil {
		return o, fmt.Errorf("override file: Argo CD cannot read it: %w", err)
	}
	if err := json.Unmarshal(j, &o); err != nil {
		return o, fmt.Errorf("override file: Argo CD cannot read it: %w", err)
	}
	return o, nil
}

// KustomizeImages are the file's kustomize.images as Argo CD reads them.
func (f *File) KustomizeImages() ([]KustomizeImage, error) {
	o, err := f.read()
	if err != nil || o.Kustomize == nil {
		return nil, err
	}
	images := make([]KustomizeImage, 0, len(o.Kustomize.Images))
	for _, s := range o.Kustomize.Images {
		img, err := ParseKustomizeImage(s)
		if err != nil {
			return nil, err
		}
		images = append(images, img)
	}
	return images, nil
}

// HelmParameters are the file's helm.parameters as Argo CD reads them.
func (f *File) HelmParameters() ([]HelmParameter, error) {
	o, err := f.read()
	if err != nil || o.Helm == nil {
		return nil, err
	}
	return o.Helm.Parameters, nil
}

func (f *File) read() (overrides, error) {
	b, err := f.Bytes()
	if err != nil {
		return overrides{}, err
	}
	return argoRead(b)
}
