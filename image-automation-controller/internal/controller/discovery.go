package controller

import (
	"context"
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/apis/meta"
	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
	"toolkit.dev/image-toolkit/pkg/discover"
	"toolkit.dev/image-toolkit/pkg/imagename"
)

// +kubebuilder:rbac:groups=image.toolkit.dev,resources=imagerepositories,verbs=get;list;watch;create;update;delete
// +kubebuilder:rbac:groups=image.toolkit.dev,resources=imagepolicies,verbs=create;update;delete

// PolicySourceAnnotation records on a discovered ImagePolicy what its
// policy was derived from (the mode, or the workload's annotation): its
// spec is written when it is made and again only when that changes, so
// the range keeps the lower bound of the tag it was made from.
const PolicySourceAnnotation = "image.toolkit.dev/policy-source"

// discovered records what a job found in status.discovered; what follows
// each image is decided by reconcileDiscovered.
func discovered(job *updatev1.UpdateJob) ([]imagev1.DiscoveredImage, bool) {
	if job.Spec.Update.Discover == nil || job.Status.Result == nil || job.Status.Phase == updatev1.UpdateJobFailed {
		return nil, false
	}
	out := []imagev1.DiscoveredImage{}
	for _, d := range job.Status.Result.Discovered {
		out = append(out, imagev1.DiscoveredImage{Image: d.Name, Tag: d.Tag, Locations: d.Locations, PolicyAnnotation: d.PolicyAnnotation})
	}
	return out, true
}

// reconcileDiscovered keeps an ImageRepository and an ImagePolicy, made
// and owned by the automation, for each image status.discovered lists,
// unless the namespace has a policy of its own for the image, which it
// then follows instead; it deletes the ones it made for images no longer
// found, and never touches objects it did not make. The policies it
// follows that have chosen an image are added to sel. Without
// spec.discover, it deletes what it made.
func (r *ImageUpdateAutomationReconciler) reconcileDiscovered(ctx context.Context, obj *imagev1.ImageUpdateAutomation, sel *selection) error {
	ns := obj.Namespace
	mine := func(o client.Object) bool {
		if o.GetLabels()[imagev1.DiscoveredByLabel] != obj.Name {
			return false
		}
		ref := metav1.GetControllerOf(o)
		return ref != nil && ref.UID == obj.UID
	}
	var pols imagev1.ImagePolicyList
	if err := r.List(ctx, &pols, client.InNamespace(ns)); err != nil {
		return fmt.Errorf("listing ImagePolicies: %w", err)
	}
	var repos imagev1.ImageRepositoryList
	if err := r.List(ctx, &repos, client.InNamespace(ns)); err != nil {
		return fmt.Errorf("listing ImageRepositories: %w", err)
	}
	repoImage := map[string]string{}
	for _, rp := range repos.Items {
		repoImage[rp.Name] = imagename.Normalize(rp.Spec.Image)
	}
	// The namespace's own policies, by image: the first by name wins.
	theirs := map[string]*imagev1.ImagePolicy{}
	slices.SortFunc(pols.Items, func(a, b imagev1.ImagePolicy) int { return strings.Compare(a.Name, b.Name) })
	for i := range pols.Items {
		p := &pols.Items[i]
		if mine(p) || p.Labels[imagev1.DiscoveredByLabel] != "" {
			continue // made by discovery, this automation's or another's
		}
		if ref := p.Spec.ImageRepositoryRef; ref.Namespace == "" || ref.Namespace == ns {
			if img, ok := repoImage[ref.Name]; ok {
				if _, taken := theirs[img]; !taken {
					theirs[img] = p
				}
			}
		}
	}

	var images []imagev1.DiscoveredImage
	if obj.Spec.Discover != nil {
		images = obj.Status.Discovered
	}
	mode, _ := discover.ParseMode("")
	if obj.Spec.Discover != nil {
		mode, _ = discover.ParseMode(obj.Spec.Discover.PolicyMode)
	}
	dimgs := make([]discover.Image, len(images))
	for i, d := range images {
		dimgs[i] = discover.Image{Name: d.Image}
	}
	names := discover.Names(dimgs)
	keepRepo, keepPol := map[string]bool{}, map[string]bool{}
	follow := map[string]bool{} // policy names whose choice becomes a setter
	for i := range images {
		d := &images[i]
		d.Policy, d.Owned, d.Reason = "", false, ""
		if p, ok := theirs[d.Image]; ok {
			d.Policy = p.Name
			follow[p.Name] = true
			continue
		}
		choice, filter, err := discover.PolicyOf(d.Tag, d.PolicyAnnotation, mode)
		if err != nil {
			d.Reason = err.Error()
			continue
		}
		name := objectName(obj.Name, names[d.Image])
		source := string(mode)
		if d.PolicyAnnotation != "" {
			source = "annotation:" + d.PolicyAnnotation
		}
		if err := r.applyDiscovered(ctx, obj, name, d.Image, source, choice, filter); err != nil {
			d.Reason = err.Error()
			continue
		}
		d.Policy, d.Owned = name, true
		keepRepo[name], keepPol[name] = true, true
		follow[name] = true
	}
	if obj.Spec.Discover != nil {
		obj.Status.Discovered = images
	} else {
		obj.Status.Discovered = nil
	}

	// What it made for images no longer found goes.
	for i := range pols.Items {
		if p := &pols.Items[i]; mine(p) && !keepPol[p.Name] {
			if err := r.Delete(ctx, p); client.IgnoreNotFound(err) != nil {
				return fmt.Errorf("deleting ImagePolicy %s: %w", p.Name, err)
			}
			r.Events.Normal(ctx, obj, "DiscoveredImageGone", "Discover", fmt.Sprintf("deleted ImagePolicy %s: its image is no longer in the repository", p.Name))
		}
	}
	for i := range repos.Items {
		if rp := &repos.Items[i]; mine(rp) && !keepRepo[rp.Name] {
			if err := r.Delete(ctx, rp); client.IgnoreNotFound(err) != nil {
				return fmt.Errorf("deleting ImageRepository %s: %w", rp.Name, err)
			}
		}
	}

	// The followed policies that have chosen an image are setters too.
	have := map[string]bool{}
	for _, s := range sel.setters {
		have[s.Policy] = true
	}
	for i := range pols.Items {
		p := &pols.Items[i]
		key := updatev1.PolicyKey(p.Namespace, p.Name)
		if !follow[p.Name] || p.Status.LatestRef == nil || have[key] {
			continue
		}
		ref := *p.Status.LatestRef
		sel.setters = append(sel.setters, updatev1.PolicySetter{Policy: key, Name: ref.Name, Tag: ref.Tag, Digest: ref.Digest})
		sel.observed[p.Name] = ref
		if p.Status.LatestRefTime != nil {
			sel.times[key] = p.Status.LatestRefTime.Time
		}
	}
	slices.SortFunc(sel.setters, func(a, b updatev1.PolicySetter) int { return strings.Compare(a.Policy, b.Policy) })
	return nil
}

// applyDiscovered creates or updates the ImageRepository and ImagePolicy
// named name for a discovered image. The repository's spec follows the
// automation's discover settings; the policy's is written when made and
// when its source (mode or annotation) changes.
func (r *ImageUpdateAutomationReconciler) applyDiscovered(ctx context.Context, obj *imagev1.ImageUpdateAutomation,
	name, image, source string, choice imagev1.ImagePolicyChoice, filter *imagev1.TagFilter) error {
	d := obj.Spec.Discover
	own := func(o client.Object) error {
		labels := o.GetLabels()
		if labels == nil {
			labels = map[string]string{}
		}
		if v, ok := labels[imagev1.DiscoveredByLabel]; o.GetResourceVersion() != "" && (!ok || v != obj.Name) {
			return fmt.Errorf("%s exists and was not made by this automation: left alone", name)
		}
		labels[imagev1.DiscoveredByLabel] = obj.Name
		o.SetLabels(labels)
		return controllerutil.SetControllerReference(obj, o, r.Scheme())
	}

	repo := &imagev1.ImageRepository{}
	repo.Name, repo.Namespace = name, obj.Namespace
	res, err := controllerutil.CreateOrUpdate(ctx, r.Client, repo, func() error {
		if err := own(repo); err != nil {
			return err
		}
		spec := imagev1.ImageRepositorySpec{Image: image, Interval: obj.Spec.Interval, ServiceAccountName: d.ServiceAccountName}
		if d.Interval != nil {
			spec.Interval = *d.Interval
		}
		host, _, _ := strings.Cut(image, "/")
		for _, reg := range d.Registries {
			if strings.EqualFold(reg.Host, host) {
				spec.SecretRef, spec.CertSecretRef, spec.Insecure = reg.SecretRef.DeepCopy(), reg.CertSecretRef.DeepCopy(), reg.Insecure
				if reg.Provider != "" {
					spec.Provider = reg.Provider
				}
			}
		}
		// Defaults the API server fills in stay as they are.
		if spec.Provider == "" {
			spec.Provider = repo.Spec.Provider
		}
		spec.ExclusionList, spec.Timeout = repo.Spec.ExclusionList, repo.Spec.Timeout
		repo.Spec = spec
		return nil
	})
	if err != nil {
		return fmt.Errorf("ImageRepository %s: %w", name, err)
	}
	made := res == controllerutil.OperationResultCreated

	pol := &imagev1.ImagePolicy{}
	pol.Name, pol.Namespace = name, obj.Namespace
	_, err = controllerutil.CreateOrUpdate(ctx, r.Client, pol, func() error {
		if err := own(pol); err != nil {
			return err
		}
		if pol.GetResourceVersion() != "" && pol.Annotations[PolicySourceAnnotation] == source {
			return nil
		}
		if pol.Annotations == nil {
			pol.Annotations = map[string]string{}
		}
		pol.Annotations[PolicySourceAnnotation] = source
		pol.Spec.ImageRepositoryRef = meta.NamespacedObjectReference{Name: name}
		pol.Spec.Policy, pol.Spec.FilterTags = choice, filter
		return nil
	})
	if err != nil {
		return fmt.Errorf("ImagePolicy %s: %w", name, err)
	}
	if made {
		r.Events.Normal(ctx, obj, "DiscoveredImage", "Discover", fmt.Sprintf("made ImageRepository and ImagePolicy %s for %s", name, image))
	}
	return nil
}

// objectName is <automation>-<image name>, cut to a DNS label.
func objectName(automation, image string) string {
	n := automation + "-" + image
	if len(n) > 63 {
		n = strings.TrimRight(n[:63], "-")
	}
	return n
}
