// Package registryaccess reads how to reach an ImageRepository's registry:
// its pull secret and its ServiceAccount's imagePullSecrets, its TLS and
// proxy Secrets, and a cloud identity (spec.provider). The reflector scans
// with it and the update job reads a verified tag again with it, so the
// job reaches every registry the scan reached, with the same credentials:
// one implementation, not one per controller.
//
// Secrets are read through the reader given, which should read past any
// cache: watching every Secret of the cluster would cost memory and RBAC
// the controllers do not need. Problems are *Error values, which say
// what they mean for the ImageRepository's conditions (Error.Classify).
package registryaccess

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"

	"github.com/google/go-containerregistry/pkg/authn"
	kauth "github.com/google/go-containerregistry/pkg/authn/kubernetes"
	"github.com/google/go-containerregistry/pkg/name"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/cloudauth"
	"toolkit.dev/image-toolkit/pkg/runtime/conditions"
)

// Access is what reaches one repository of a registry.
type Access struct {
	// Auth authenticates; anonymous without credentials.
	Auth authn.Authenticator
	// TLS is spec.certSecretRef's CA and client certificate; nil for the
	// system's trust.
	TLS *tls.Config
	// Proxy is spec.proxySecretRef's proxy; nil for none.
	Proxy *url.URL
	// Insecure is spec.insecure: plain HTTP.
	Insecure bool
	// Secrets are the credential values read, to redact from messages.
	Secrets []string
}

// Transport is base with the TLS and proxy settings, or base itself
// without any.
func (a *Access) Transport(base *http.Transport) *http.Transport {
	if a.TLS == nil && a.Proxy == nil {
		return base
	}
	tr := base.Clone()
	if a.TLS != nil {
		tr.TLSClientConfig = a.TLS
	}
	if a.Proxy != nil {
		tr.Proxy = http.ProxyURL(a.Proxy)
	}
	return tr
}

// Resolve reads what reaches obj's registry repository repo. fp receives
// what identifies the access: names, and hashes of Secret values, never
// the values; the cloud identity, never its token. cloud issues cloud
// credentials; nil refuses providers.
func Resolve(ctx context.Context, reader client.Reader, obj *imagev1.ImageRepository, repo name.Repository,
	cloud *cloudauth.Issuer, fp io.Writer) (*Access, error) {
	a := &Access{Insecure: obj.Spec.Insecure}
	pullSecrets, err := pullSecrets(ctx, reader, obj)
	if err != nil {
		return nil, err
	}
	if err := registryAuth(ctx, pullSecrets, repo, a, fp); err != nil {
		return nil, err
	}
	if err := TransportSecrets(ctx, reader, obj, a, fp); err != nil {
		return nil, err
	}
	if UsesCloud(obj) {
		if err := cloudAuth(ctx, cloud, obj, repo, a, fp); err != nil {
			return nil, err
		}
	}
	return a, nil
}

// UsesCloud reports whether the repository's credentials come from a
// cloud identity: a cloud provider, and no secretRef (which wins, as the
// credentials a user wrote down).
func UsesCloud(obj *imagev1.ImageRepository) bool {
	p := obj.Spec.Provider
	return p != "" && p != "generic" && obj.Spec.SecretRef == nil
}

// pullSecrets reads the registry credentials: spec.secretRef and the
// imagePullSecrets of spec.serviceAccountName, unless a cloud provider
// uses that ServiceAccount's identity instead.
func pullSecrets(ctx context.Context, reader client.Reader, obj *imagev1.ImageRepository) ([]corev1.Secret, error) {
	ns := obj.Namespace
	var out []corev1.Secret
	if obj.Spec.SecretRef != nil {
		s, err := GetSecret(ctx, reader, ns, obj.Spec.SecretRef.Name)
		if err != nil {
			return nil, AuthFailed(err)
		}
		out = append(out, *s)
	}
	if obj.Spec.ServiceAccountName == "" || UsesCloud(obj) {
		return out, nil
	}
	sa := &corev1.ServiceAccount{}
	if err := reader.Get(ctx, types.NamespacedName{Namespace: ns, Name: obj.Spec.ServiceAccountName}, sa); err != nil {
		return nil, AuthFailed(fmt.Errorf("reading ServiceAccount %s: %w", obj.Spec.ServiceAccountName, err))
	}
	for _, ref := range sa.ImagePullSecrets {
		s, err := GetSecret(ctx, reader, ns, ref.Name)
		if err != nil {
			return nil, AuthFailed(err)
		}
		out = append(out, *s)
	}
	return out, nil
}

// registryAuth sets a's credentials from the pull secrets, or anonymous
// without any.
func registryAuth(ctx context.Context, pullSecrets []corev1.Secret, repo name.Repository, a *Access, fp io.Writer) error {
	if len(pullSecrets) == 0 {
		a.Auth = authn.Anonymous
		return nil
	}
	for _, s := range pullSecrets {
		HashSecret(fp, s)
		a.Secrets = append(a.Secrets, SecretValues(s)...)
	}
	kc, err := kauth.NewFromPullSecrets(ctx, pullSecrets)
	if err != nil {
		return AuthFailed(fmt.Errorf("reading pull secrets: %w", err))
	}
	auth, err := kc.Resolve(repo)
	if err != nil {
		return AuthFailed(err)
	}
	a.Auth = auth
	return nil
}

// TransportSecrets reads the TLS and proxy Secrets, spec.certSecretRef
// and spec.proxySecretRef, into a.
func TransportSecrets(ctx context.Context, reader client.Reader, obj *imagev1.ImageRepository, a *Access, fp io.Writer) error {
	if obj.Spec.CertSecretRef != nil {
		s, err := GetSecret(ctx, reader, obj.Namespace, obj.Spec.CertSecretRef.Name)
		if err != nil {
			return err
		}
		HashSecret(fp, *s)
		if a.TLS, err = tlsFromSecret(s); err != nil {
			return err
		}
	}
	if obj.Spec.ProxySecretRef != nil {
		s, err := GetSecret(ctx, reader, obj.Namespace, obj.Spec.ProxySecretRef.Name)
		if err != nil {
			return err
		}
		HashSecret(fp, *s)
		a.Secrets = append(a.Secrets, string(s.Data["password"]))
		if a.Proxy, err = proxyFromSecret(s); err != nil {
			return err
		}
	}
	return nil
}

// cloudAuth sets a's credentials from the provider: the controller's
// cloud identity, or the ServiceAccount's. fp names the identity, not the
// token, so that a refreshed token changes no scan key.
func cloudAuth(ctx context.Context, cloud *cloudauth.Issuer, obj *imagev1.ImageRepository, repo name.Repository, a *Access, fp io.Writer) error {
	if cloud == nil {
		return fmt.Errorf("provider %s: this controller has no cloud credentials issuer", obj.Spec.Provider)
	}
	fmt.Fprintf(fp, "cloud:%s\x00sa:%s\x00", obj.Spec.Provider, obj.Spec.ServiceAccountName)
	creds, err := cloud.Registry(ctx, cloudauth.RegistryRequest{
		Provider: obj.Spec.Provider, Repository: repo.Name(),
		Namespace: obj.Namespace, ServiceAccountName: obj.Spec.ServiceAccountName, ProxyURL: a.Proxy,
	})
	switch {
	case errors.Is(err, cloudauth.ErrProviderMismatch), errors.Is(err, cloudauth.ErrWorkloadIdentityDisabled):
		return &Error{Err: err}
	case err != nil:
		return AuthFailed(fmt.Errorf("provider %s: %w", obj.Spec.Provider, err))
	}
	a.Auth = creds
	a.Secrets = append(a.Secrets, creds.Secret)
	return nil
}

// GetSecret reads the Secret ns/name.
func GetSecret(ctx context.Context, reader client.Reader, ns, name string) (*corev1.Secret, error) {
	s := &corev1.Secret{}
	if err := reader.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, s); err != nil {
		return nil, fmt.Errorf("reading Secret %s: %w", name, err)
	}
	return s, nil
}

// HashSecret writes s's name and the hashes of its values to h.
func HashSecret(h io.Writer, s corev1.Secret) {
	keys := make([]string, 0, len(s.Data))
	for k := range s.Data {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	fmt.Fprintf(h, "secret:%s\x00", s.Name)
	for _, k := range keys {
		fmt.Fprintf(h, "%s\x00%x\x00", k, sha256.Sum256(s.Data[k]))
	}
}

// SecretValues are s's values, to redact.
func SecretValues(s corev1.Secret) []string {
	out := make([]string, 0, len(s.Data))
	for _, v := range s.Data {
		out = append(out, string(v))
	}
	return out
}

// tlsFromSecret reads ca.crt, and tls.crt with tls.key.
func tlsFromSecret(s *corev1.Secret) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if ca, ok := s.Data["ca.crt"]; ok {
		pool, err := x509.SystemCertPool()
		if err != nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(ca) {
			return nil, fmt.Errorf("Secret %s: ca.crt holds no PEM certificate", s.Name)
		}
		cfg.RootCAs = pool
	}
	crt, hasCrt := s.Data["tls.crt"]
	key, hasKey := s.Data["tls.key"]
	if hasCrt != hasKey {
		return nil, fmt.Errorf("Secret %s: tls.crt and tls.key go together", s.Name)
	}
	if hasCrt {
		pair, err := tls.X509KeyPair(crt, key)
		if err != nil {
			return nil, fmt.Errorf("Secret %s: %w", s.Name, err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}

// proxyFromSecret reads address, username and password.
func proxyFromSecret(s *corev1.Secret) (*url.URL, error) {
	addr := string(s.Data["address"])
	if addr == "" {
		return nil, fmt.Errorf("Secret %s: no proxy address", s.Name)
	}
	u, err := url.Parse(addr)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("Secret %s: invalid proxy address", s.Name)
	}
	if user := string(s.Data["username"]); user != "" {
		u.User = url.UserPassword(user, string(s.Data["password"]))
	}
	return u, nil
}

// Error is why the registry cannot be reached with what the
// ImageRepository names: its Secrets, its ServiceAccount or its cloud
// provider. It is conditions.Classified: a provider that does not serve
// the registry and a cloud identity the controller may not use are
// Stalled, since only the ImageRepository or the controller's set-up can
// change them; anything else is AuthenticationFailed, retried (a Secret
// may be fixed, a token refreshed, and neither is watched).
type Error struct{ Err error }

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// Classify is the ImageRepository's reason, and whether it is Stalled.
func (e *Error) Classify() (string, bool) {
	switch {
	case errors.Is(e.Err, cloudauth.ErrProviderMismatch):
		return conditions.ProviderMismatchReason, true
	case errors.Is(e.Err, cloudauth.ErrWorkloadIdentityDisabled):
		return conditions.WorkloadIdentityNotEnabledReason, true
	}
	return conditions.AuthenticationFailedReason, false
}

// AuthFailed is a credential problem: an *Error, AuthenticationFailed.
func AuthFailed(err error) error {
	return &Error{Err: err}
}
