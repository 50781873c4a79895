package argocd

import (
	"encoding/json"
	"fmt"
	"path"
)

// Application is what image-toolkit reads of an Argo CD Application
// (argoproj.io/v1alpha1): where each source renders from, how Argo CD
// renders it, and the images it last saw running. It is decoded from the
// object's JSON, so this package needs neither Argo CD's types nor a
// Kubernetes client.
type Application struct {
	Name, Namespace string
	// Sources are the sources Argo CD renders, in spec order: spec.source,
	// or each of spec.sources but those that only name a ref for the
	// others' values files.
	Sources []Source
	// Images are status.summary.images: the images of the Application's
	// Pods, as Argo CD last saw them.
	Images []string
}

// Source is one rendered source of an Application.
type Source struct {
	// Index is the source's position in spec.sources; 0 for spec.source.
	Index          int
	RepoURL        string
	Path           string
	TargetRevision string
	// Chart is set for a Helm chart from a chart repository, which has no
	// path to write to.
	Chart string
	// Type is how Argo CD rendered it (status.sourceType or
	// status.sourceTypes): Kustomize, Helm, Directory or Plugin; empty
	// before Argo CD first compared the Application.
	Type string
	// HelmValues is set when the source's helm.values (the string) is,
	// which a helm.valuesObject in the override file would replace whole.
	HelmValues bool
	// HelmParameters are the names of the source's own helm.parameters,
	// which win over helm.valuesObject.
	HelmParameters []string
}

type appSource struct {
	RepoURL        string `json:"repoURL"`
	Path           string `json:"path"`
	TargetRevision string `json:"targetRevision"`
	Chart          string `json:"chart"`
	Ref            string `json:"ref"`
	Helm           *struct {
		Values       string          `json:"values"`
		ValuesObject json.RawMessage `json:"valuesObject"`
		Parameters   []struct {
			Name string `json:"name"`
		} `json:"parameters"`
	} `json:"helm"`
}

// source is what is read of s, the index'th source.
func (s appSource) source(index int, typ string) Source {
	src := Source{Index: index, RepoURL: s.RepoURL, Path: s.Path, TargetRevision: s.TargetRevision, Chart: s.Chart, Type: typ}
	if h := s.Helm; h != nil {
		src.HelmValues = h.Values != "" && len(h.ValuesObject) == 0
		for _, p := range h.Parameters {
			src.HelmParameters = append(src.HelmParameters, p.Name)
		}
	}
	return src
}

// ReadApplication decodes an Application from its JSON.
func ReadApplication(data []byte) (Application, error) {
	var obj struct {
		Kind     string `json:"kind"`
		Metadata struct {
			Name      string `json:"name"`
			Namespace string `json:"namespace"`
		} `json:"metadata"`
		Spec struct {
			Source  *appSource  `json:"source"`
			Sources []appSource `json:"sources"`
		} `json:"spec"`
		Status struct {
			SourceType  string   `json:"sourceType"`
			SourceTypes []string `json:"sourceTypes"`
			Summary     struct {
				Images []string `json:"images"`
			} `json:"summary"`
		} `json:"status"`
	}
	if err := json.Unmarshal(data, &obj); err != nil {
		return Application{}, fmt.Errorf("argo CD Application: %w", err)
	}
	if obj.Kind != "" && obj.Kind != "Application" {
		return Application{}, fmt.Errorf("argo CD Application: the object is %s, not an Application", obj.Kind)
	}
	app := Application{Name: obj.Metadata.Name, Namespace: obj.Metadata.Namespace, Images: obj.Status.Summary.Images}
	switch {
	case len(obj.Spec.Sources) > 0:
		for i, s := range obj.Spec.Sources {
			// Argo CD renders nothing for a source that only lends its
			// files to the others' values (ref set, no path, no chart).
			if s.Ref != "" && s.Path == "" && s.Chart == "" {
				continue
			}
			typ := ""
			if i < len(obj.Status.SourceTypes) {
				typ = obj.Status.SourceTypes[i]
			}
			app.Sources = append(app.Sources, s.source(i, typ))
		}
	case obj.Spec.Source != nil:
		app.Sources = []Source{obj.Spec.Source.source(0, obj.Status.SourceType)}
	}
	return app, nil
}

// InstanceName is the name Argo CD gives the Application in its override
// file's name: its name in Argo CD's own namespace, namespace_name in any
// other (Applications in any namespace).
func (a Application) InstanceName(argoNamespace string) string {
	if a.Namespace == "" || a.Namespace == argoNamespace {
		return a.Name
	}
	return a.Namespace + "_" + a.Name
}

// OverrideFile is the path, in s's repository, of the override file Argo CD
// merges over s when it renders a; "" for a chart from a chart repository.
func (a Application) OverrideFile(argoNamespace string, s Source) string {
	if s.Chart != "" {
		return ""
	}
	return path.Join(s.Path, FileName(a.InstanceName(argoNamespace)))
}
