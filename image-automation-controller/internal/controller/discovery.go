package controller

import (
	"context"
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/apis/meta"
	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
	"toolkit.dev/image-toolkit/pkg/discover"
	"toolkit.dev/image-toolkit/pkg/discover/propose"
	"toolkit.dev/image-toolkit/pkg/selection"
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
		out = append(out, imagev1.DiscoveredImage{DiscoveredImage: d})
	}
	return out, true
}

// reconcileDiscovered keeps an ImageRepository and an ImagePolicy, made
// and owned by the automation, for each image status.discovered lists,
// unless the namespace has a policy of its own for the image, which it
// then follows instead (selection.ForImages); it deletes the ones it made
// for images no longer found, and never touches objects it did not make.
// It records in status.discovered which policy follows each image, which
// selection.Of then applies. Without spec.discover, it deletes what it
// made. pols are the namespace's policies.
func (r *ImageUpdateAutomationReconciler) reconcileDiscovered(ctx context.Context, obj *imagev1.ImageUpdateAutomation, pols []imagev1.ImagePolicy) error {
	var repos imagev1.ImageRepositoryList
	if err := r.List(ctx, &repos, client.InNamespace(obj.Namespace)); err != nil {
		return fmt.Errorf("listing ImageRepositories: %w", err)
	}
	var images []imagev1.DiscoveredImage
	if obj.Spec.Discover != nil {
		images = obj.Status.Discovered
	}
	keep := r.followImages(ctx, obj, images, selection.ForImages(obj.Namespace, pols, repos.Items))
	if obj.Spec.Discover != nil {
		obj.Status.Discovered = images
	} else {
		obj.Status.Discovered = nil
	}
	return r.deleteGone(ctx, obj, pols, repos.Items, keep)
}

// followImages sets, for each image, the policy that follows it: the
// namespace's own (theirs, by image), or one it makes and owns. It returns
// the names of the objects it made and keeps.
func (r *ImageUpdateAutomationReconciler) followImages(ctx context.Context, obj *imagev1.ImageUpdateAutomation,
	images []imagev1.DiscoveredImage, theirs map[string]string) map[string]bool {
	mode, _ := propose.ParseMode("")
	if obj.Spec.Discover != nil {
		mode, _ = propose.ParseMode(obj.Spec.Discover.PolicyMode)
	}
	dimgs := make([]discover.Image, len(images))
	for i, d := range images {
		dimgs[i] = discover.Image{ImageRef: d.ImageRef}
	}
	names := propose.Names(dimgs)
	keep := map[string]bool{}
	for i := range images {
		d := &images[i]
		d.Policy, d.Owned, d.Reason = "", false, ""
		if p, ok := theirs[d.Name]; ok {
			d.Policy = p
			continue
		}
		choice, filter, err := propose.PolicyOf(d.Tag, d.PolicyAnnotation, mode)
		if err != nil {
			d.Reason = err.Error()
			continue
		}
		name := objectName(obj.Name, names[d.Name])
		source := string(mode)
		if d.PolicyAnnotation != "" {
			source = "annotation:" + d.PolicyAnnotation
		}
		if err := r.applyDiscovered(ctx, obj, name, d.Name, source, choice, filter); err != nil {
			d.Reason = err.Error()
			continue
		}
		d.Policy, d.Owned = name, true
		keep[name] = true
	}
	return keep
}

// deleteGone deletes the objects the automation's discovery made that it
// no longer keeps (their image is no longer found).
func (r *ImageUpdateAutomationReconciler) deleteGone(ctx context.Context, obj *imagev1.ImageUpdateAutomation,
	pols []imagev1.ImagePolicy, repos []imagev1.ImageRepository, keep map[string]bool) error {
	mine := func(o client.Object) bool {
		if o.GetLabels()[imagev1.DiscoveredByLabel] != obj.Name {
			return false
		}
		ref := metav1.GetControllerOf(o)
		return ref != nil && ref.UID == obj.UID
	}
	for i := range pols {
		if p := &pols[i]; mine(p) && !keep[p.Name] {
			if err := r.Delete(ctx, p); client.IgnoreNotFound(err) != nil {
				return fmt.Errorf("deleting ImagePolicy %s: %w", p.Name, err)
			}
			r.Events.Normal(ctx, obj, "DiscoveredImageGone", "Discover", fmt.Sprintf("deleted ImagePolicy %s: its image is no longer in the repository", p.Name))
		}
	}
	for i := range repos {
		if rp := &repos[i]; mine(rp) && !keep[rp.Name] {
			if err := r.Delete(ctx, rp); client.IgnoreNotFound(err) != nil {
				return fmt.Errorf("deleting ImageRepository %s: %w", rp.Name, err)
			}
		}
	}
	return nil
}

// applyDiscovered creates or updates the ImageRepository and ImagePolicy
// named name for a discovered image. The repository's spec follows the
// automation's discover settings; the policy's is written when made and
// when its source (mode or annotation) changes.
func (r *ImageUpdateAutomationReconciler) applyDiscovered(ctx context.Context, obj *imagev1.ImageUpdateAutomation,
	name, image, source string, choice imagev1.ImagePolicyChoice, filter *imagev1.TagFilter) error {
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
		repo.Spec = discoveredRepository(obj, image, &repo.Spec)
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

// discoveredRepository is the spec of the ImageRepository for a
// discovered image: the automation's discover settings, and for its
// registry host those of spec.discover.registries, over cur, the spec the
// repository has (defaults the API server filled in stay as they are).
func discoveredRepository(obj *imagev1.ImageUpdateAutomation, image string, cur *imagev1.ImageRepositorySpec) imagev1.ImageRepositorySpec {
	d := obj.Spec.Discover
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
	if spec.Provider == "" {
		spec.Provider = cur.Provider
	}
	spec.ExclusionList, spec.Timeout = cur.ExclusionList, cur.Timeout
	return spec
}

// objectName is <automation>-<image name>, cut to a DNS label.
func objectName(automation, image string) string {
	n := automation + "-" + image
	if len(n) > 63 {
		n = strings.TrimRight(n[:63], "-")
	}
	return n
}
