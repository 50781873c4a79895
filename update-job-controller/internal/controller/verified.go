package controller

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	kauth "github.com/google/go-containerregistry/pkg/authn/kubernetes"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
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
// not checked, whichever marker (tag or digest) writes it.
func (r *UpdateJobReconciler) checkVerified(ctx context.Context, job *updatev1.UpdateJob) error {
	for _, s := range job.Spec.Update.Setters {
		if s.Verified == nil {
			continue
		}
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
// access: pull secret, CA and plain HTTP. Cloud providers and service
// accounts are not supported here yet and fail closed.
func (r *UpdateJobReconciler) tagDigest(ctx context.Context, s updatev1.PolicySetter) (string, []string, error) {
	key := types.NamespacedName{Namespace: s.Verified.ImageRepository.Namespace, Name: s.Verified.ImageRepository.Name}
	var repo imagev1.ImageRepository
	if err := r.APIReader.Get(ctx, key, &repo); err != nil {
		return "", nil, fmt.Errorf("ImageRepository %s: %w", key, err)
	}
	if p := repo.Spec.Provider; p != "" && p != "generic" {
		return "", nil, fmt.Errorf("ImageRepository %s uses provider %s, whose credentials the update job controller cannot issue yet", key, p)
	}
	if repo.Spec.ServiceAccountName != "" || repo.Spec.ProxySecretRef != nil {
		return "", nil, fmt.Errorf("ImageRepository %s uses a service account or a proxy, which the update job controller cannot use yet", key)
	}
	var opts []name.Option
	if repo.Spec.Insecure {
		opts = append(opts, name.Insecure)
	}
	ref, err := name.NewTag(s.Name+":"+s.Tag, opts...)
	if err != nil {
		return "", nil, err
	}
	// Anonymous unless the repository names a pull secret: never the
	// controller's own docker config.
	var keychain authn.Keychain = authn.NewMultiKeychain()
	var secrets []string
	if sr := repo.Spec.SecretRef; sr != nil {
		var sec corev1.Secret
		if err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: key.Namespace, Name: sr.Name}, &sec); err != nil {
			return "", nil, fmt.Errorf("secret %s/%s: %w", key.Namespace, sr.Name, err)
		}
		for _, v := range sec.Data {
			secrets = append(secrets, string(v))
		}
		if keychain, err = kauth.NewFromPullSecrets(ctx, []corev1.Secret{sec}); err != nil {
			return "", secrets, err
		}
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	defer tr.CloseIdleConnections()
	if cr := repo.Spec.CertSecretRef; cr != nil {
		var sec corev1.Secret
		if err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: key.Namespace, Name: cr.Name}, &sec); err != nil {
			return "", secrets, fmt.Errorf("secret %s/%s: %w", key.Namespace, cr.Name, err)
		}
		cfg := &tls.Config{MinVersion: tls.VersionTLS12}
		if ca := sec.Data["ca.crt"]; len(ca) > 0 {
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(ca) {
				return "", secrets, fmt.Errorf("secret %s/%s: ca.crt holds no PEM certificate", key.Namespace, cr.Name)
			}
			cfg.RootCAs = pool
		}
		if crt, k := sec.Data["tls.crt"], sec.Data["tls.key"]; len(crt) > 0 && len(k) > 0 {
			pair, err := tls.X509KeyPair(crt, k)
			if err != nil {
				return "", secrets, fmt.Errorf("secret %s/%s: %w", key.Namespace, cr.Name, err)
			}
			cfg.Certificates = []tls.Certificate{pair}
		}
		tr.TLSClientConfig = cfg
	}
	ctx, cancel := context.WithTimeout(ctx, verifiedReadTimeout)
	defer cancel()
	d, err := remote.Head(ref, remote.WithContext(ctx), remote.WithAuthFromKeychain(keychain), remote.WithTransport(tr))
	if err != nil {
		return "", secrets, err
	}
	return d.Digest.String(), secrets, nil
}
