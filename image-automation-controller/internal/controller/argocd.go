package controller

import (
	"cmp"
	"slices"
	"strings"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/apis/meta"
	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
	"toolkit.dev/image-toolkit/pkg/argocd"
	"toolkit.dev/image-toolkit/pkg/gitsource"
	"toolkit.dev/image-toolkit/pkg/imagename"
	"toolkit.dev/image-toolkit/pkg/runtime/conditions"
)

// +kubebuilder:rbac:groups=argoproj.io,resources=applications,verbs=get;list;watch

// usesArgoCD reports whether the automation writes Argo CD override files.
func usesArgoCD(a *imagev1.ImageUpdateAutomationSpec) bool {
	return a.Update != nil && a.Update.Strategy == imagev1.UpdateStrategyArgoCD
}

// checkArgoCD checks that strategy ArgoCD has an Application to write for,
// each of whose written sources Argo CD renders as Kustomize or Helm.
// Until Argo CD first compared the Application its source types are
// unknown: that is waited for.
func checkArgoCD(obj *imagev1.ImageUpdateAutomation, src *gitsource.Source) error {
	if !usesArgoCD(&obj.Spec) {
		return nil
	}
	if len(src.Applications) == 0 {
		return conditions.Stallf(imagev1.UnsupportedUpdateStrategyReason,
			"update strategy ArgoCD writes the override files of Argo CD Applications: name one in spec.sourceRef or select them with spec.applicationSelector, not %s", src.Describe)
	}
	names, err := valuesObjectNames(obj.Spec.Update.ArgoCD)
	if err != nil {
		return err
	}
	for _, app := range src.Applications {
		for _, s := range app.Written {
			if s.Type == argocd.TypeHelm && len(names) > 0 {
				if err := checkValuesObject(app, s, names); err != nil {
					return err
				}
			}
			switch s.Type {
			case argocd.TypeKustomize, argocd.TypeHelm:
			case "":
				return conditions.Retryf(conditions.DependencyNotReadyReason,
					"Argo CD has not reported how it renders source %d of %s yet (status.sourceType)", s.Index, app)
			default:
				return conditions.Stallf(imagev1.UnsupportedUpdateStrategyReason,
					"Argo CD renders source %d of %s as %s: override files set the images of Kustomize and Helm sources only; use strategy Setters (markers or spec.discover) for it",
					s.Index, app, s.Type)
			}
		}
	}
	return nil
}

// argoCDOverrides are the override files a job writes, one per written
// source of each Application, each with the setters whose image the
// Application runs (status.summary.images) at another reference, or that
// spec.update.argoCD forces.
// A source none of them applies to gets no file.
func argoCDOverrides(a *imagev1.ImageUpdateAutomationSpec, src gitsource.Source, setters []updatev1.PolicySetter) []updatev1.ArgoCDOverride {
	if !usesArgoCD(a) {
		return nil
	}
	listed := map[string]imagev1.ArgoCDImage{}
	if a.Update.ArgoCD != nil {
		for _, img := range a.Update.ArgoCD.Images {
			listed[img.Policy] = img
		}
	}
	var out []updatev1.ArgoCDOverride
	for _, app := range src.Applications {
		images := overrideImages(app, listed, a.Update.ArgoCD != nil && a.Update.ArgoCD.HelmValuesObject, setters)
		if len(images) == 0 {
			continue
		}
		for _, s := range app.Written {
			f := app.OverrideFile(app.ArgoNamespace, s)
			if f == "" || slices.ContainsFunc(out, func(o updatev1.ArgoCDOverride) bool { return o.File == f }) {
				continue
			}
			out = append(out, updatev1.ArgoCDOverride{File: f, Type: s.Type, Images: images})
		}
	}
	return out
}

// overrideImages are the setters an Application's override files get: those
// whose image it runs at another reference (one it runs as the policy says
// needs no override, which would be a commit changing nothing deployed),
// and those forced.
func overrideImages(app *gitsource.Application, listed map[string]imagev1.ArgoCDImage, valuesObject bool, setters []updatev1.PolicySetter) []updatev1.ArgoCDOverrideImage {
	// The names the Application's Pods run, canonical, to the spelling
	// its manifests use (which kustomize.images matches), and the
	// references they run.
	running := map[string]string{}
	refs := map[string][]string{}
	for _, ref := range app.Images {
		name := imageName(ref)
		n := imagename.Normalize(name)
		running[n] = name
		refs[n] = append(refs[n], strings.TrimPrefix(ref, name))
	}
	var images []updatev1.ArgoCDOverrideImage
	for _, s := range setters {
		_, policy, _ := strings.Cut(s.Policy, ":")
		n := imagename.Normalize(s.Name)
		spelled, runs := running[n]
		l := listed[policy]
		if !runs && !l.Force || runs && !l.Force && runsOnly(refs[n], s.ImageRef) {
			continue
		}
		img := updatev1.ArgoCDOverrideImage{Policy: s.Policy, ArgoCDImageFields: l.ArgoCDImageFields}
		img.KustomizeName = cmp.Or(l.KustomizeName, spelled)
		img.HelmValuesObject = l.HelmValuesObject || valuesObject
		images = append(images, img)
	}
	return images
}

// runsOnly reports whether every reference an image runs at (":tag",
// ":tag@digest", "@digest") is ref's.
func runsOnly(running []string, ref meta.ImageRef) bool {
	for _, r := range running {
		tag, digest, _ := strings.Cut(strings.TrimPrefix(r, ":"), "@")
		if strings.HasPrefix(r, "@") {
			tag, digest = "", strings.TrimPrefix(r, "@")
		}
		if tag != ref.Tag || ref.Digest != "" && digest != ref.Digest {
			return false
		}
	}
	return true
}

// imageName is ref without its tag or digest.
func imageName(ref string) string {
	ref, _, _ = strings.Cut(ref, "@")
	if i := strings.LastIndexByte(ref, ':'); i > strings.LastIndexByte(ref, '/') {
		ref = ref[:i]
	}
	return ref
}

// valuesObjectNames are the Helm names written into helm.valuesObject, by
// name, each with the policy that writes it ("" for every policy not
// listed, with the default names); none when nothing is written there.
// A name helm.valuesObject cannot hold is refused.
func valuesObjectNames(u *imagev1.ArgoCDUpdate) (map[string]string, error) {
	if u == nil {
		return nil, nil
	}
	names := map[string]string{}
	add := func(policy string, ns ...string) error {
		for _, n := range ns {
			if n == "" {
				continue
			}
			if _, err := argocd.SplitHelmValueName(n); err != nil {
				return conditions.Stallf(conditions.InvalidSpecReason, "spec.update.argoCD.images[%s]: %s", policy, err)
			}
			names[n] = policy
		}
		return nil
	}
	for _, img := range u.Images {
		if !img.HelmValuesObject && !u.HelmValuesObject {
			continue
		}
		if img.HelmImageSpec != "" {
			if err := add(img.Policy, img.HelmImageSpec); err != nil {
				return nil, err
			}
			continue
		}
		if err := add(img.Policy, cmp.Or(img.HelmImageName, meta.DefaultHelmImageName), cmp.Or(img.HelmImageTag, meta.DefaultHelmImageTag)); err != nil {
			return nil, err
		}
	}
	if u.HelmValuesObject {
		names[meta.DefaultHelmImageName], names[meta.DefaultHelmImageTag] = "", ""
	}
	return names, nil
}

// checkValuesObject refuses to write helm.valuesObject for a Helm source
// where Argo CD would not render it: one whose helm.values (the string)
// the object would replace whole, or whose own helm.parameters set a name
// (they win over valuesObject).
func checkValuesObject(app *gitsource.Application, s argocd.Source, names map[string]string) error {
	if s.HelmValues {
		return conditions.Stallf(imagev1.UnsupportedUpdateStrategyReason,
			"source %d of %s sets helm.values, which Argo CD ignores once the override file sets helm.valuesObject: move its values to helm.valuesObject, or write helm.parameters (leave helmValuesObject unset)",
			s.Index, app)
	}
	for _, p := range s.HelmParameters {
		if _, ok := names[p]; ok {
			return conditions.Stallf(imagev1.UnsupportedUpdateStrategyReason,
				"source %d of %s sets the Helm parameter %s, which wins over helm.valuesObject: remove it from the Application, or write helm.parameters (leave helmValuesObject unset)",
				s.Index, app, p)
		}
	}
	return nil
}
