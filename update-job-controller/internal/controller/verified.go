package controller

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"k8s.io/apimachinery/pkg/types"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
	"toolkit.dev/image-toolkit/pkg/registryaccess"
	"toolkit.dev/image-toolkit/pkg/runtime/events"
	"toolkit.dev/image-toolkit/update-job-controller/engine"
)

// +kubebuilder:rbac:groups=image.toolkit.dev,resources=imagerepositories,verbs=get

// verifiedReadTimeout bounds reading one verified image's tag again.
const verifiedReadTimeout = 30 * time.Second

// checkVerified reads again, right before the commit, the digest each
// verified setter's tag points to, and refuses the commit (terminal,
// VerifiedImageMoved) when it is no longer the digest the policy verified,
// or cannot be read: the job never writes an image whose signature was
// not checked, whichever marker (tag or digest) writes it. The setters
// are every update's the commit may carry (a batch's, a group's): each
// verified image is read once, as a monorepo's updates set the same
// policies.
func (r *UpdateJobReconciler) checkVerified(ctx context.Context, setters []updatev1.PolicySetter) error {
	seen := map[string]bool{}
	for _, s := range setters {
		if s.Verified == nil {
			continue
		}
		k := strings.Join([]string{s.Policy, s.Name, s.Tag, s.Digest, s.Verified.Digest,
			s.Verified.ImageRepository.Namespace, s.Verified.ImageRepository.Name}, "\x00")
		if seen[k] {
			continue
		}
		seen[k] = true
		digest, secrets, err := r.tagDigest(ctx, s)
		if err != nil {
			return &engine.Error{Kind: engine.KindImageMoved, Terminal: true, Err: fmt.Errorf(
				"policy %s: reading the digest of %s:%s again before the commit: %s; not writing an image whose digest cannot be checked",
				s.Policy, s.Name, s.Tag, events.Redact(err.Error(), secrets...))}
		}
		want := s.Digest
		if s.Verified.Digest != "" {
			want = s.Verified.Digest
		}
		if digest != want {
			return &engine.Error{Kind: engine.KindImageMoved, Terminal: true, Err: fmt.Errorf(
				"policy %s: %s:%s now points to %s, not %s, the digest the policy verified or promoted; not writing it (the policy checks the new digest first)",
				s.Policy, s.Name, s.Tag, digest, want)}
		}
	}
	return nil
}

// tagDigest reads the digest s's tag points to with its ImageRepository's
// access, as the reflector scans it (pkg/registryaccess): pull secret, the
// ServiceAccount's imagePullSecrets, CA, proxy, plain HTTP and a cloud
// provider's identity.
func (r *UpdateJobReconciler) tagDigest(ctx context.Context, s updatev1.PolicySetter) (string, []string, error) {
	key := types.NamespacedName{Namespace: s.Verified.ImageRepository.Namespace, Name: s.Verified.ImageRepository.Name}
	var repo imagev1.ImageRepository
	if err := r.APIReader.Get(ctx, key, &repo); err != nil {
		return "", nil, fmt.Errorf("ImageRepository %s: %w", key, err)
	}
	var opts []name.Option
	if repo.Spec.Insecure {
		opts = append(opts, name.Insecure)
	}
	ref, err := name.NewTag(s.Name+":"+s.Tag, opts...)
	if err != nil {
		return "", nil, err
	}
	a, err := registryaccess.Resolve(ctx, r.APIReader, &repo, ref.Repository, r.Cloud, io.Discard)
	if err != nil {
		return "", nil, err
	}
	// A transport of its own, cloned now: a job reads a tag once.
	tr := a.Transport(http.DefaultTransport.(*http.Transport).Clone())
	defer tr.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(ctx, verifiedReadTimeout)
	defer cancel()
	d, err := remote.Head(ref, remote.WithContext(ctx), remote.WithAuth(a.Auth), remote.WithTransport(tr))
	if err != nil {
		return "", a.Secrets, err
	}
	return d.Digest.String(), a.Secrets, nil
}
