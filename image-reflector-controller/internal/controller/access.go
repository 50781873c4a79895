package controller

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sort"
	"sync/atomic"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	kauth "github.com/google/go-containerregistry/pkg/authn/kubernetes"
	"github.com/google/go-containerregistry/pkg/name"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"toolkit.dev/image-toolkit/image-reflector-controller/internal/registry"
	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/cloudauth"
	"toolkit.dev/image-toolkit/pkg/runtime/conditions"
)

// access is how to reach one ImageRepository's registry, or its Helm
// repository.
type access struct {
	repo name.Repository
	// chart is set for a chart of an HTTP(S) Helm repository; repo is
	// then unset.
	chart *helmChart
	opts  registry.Options
	// key identifies the scan: repositories with equal keys see the same
	// tags and can share one.
	key string
	// secrets are credential values, to redact from messages.
	secrets []string
}

// resolveAccess reads the Secrets and ServiceAccount an ImageRepository
// names, for the registry repo or, when chart is set, for that Helm
// repository. Secrets are read uncached: watching every Secret of the
// cluster would cost memory and RBAC we do not need. TLS and proxy are
// built the same way for both.
func resolveAccess(ctx context.Context, reader client.Reader, obj *imagev1.ImageRepository, repo name.Repository, chart *helmChart, cloud *cloudauth.Issuer) (*access, error) {
	a := &access{repo: repo, chart: chart}
	fp := sha256.New()
	target := repo.Name()
	if chart != nil {
		target = "helm:" + chart.name()
	}
	fmt.Fprintf(fp, "%s\x00%t\x00%s\x00", target, obj.Spec.Insecure, obj.Spec.Provider)
	for _, e := range obj.Spec.ExclusionList {
		fmt.Fprintf(fp, "x:%s\x00", e)
	}
	if chart != nil {
		if err := helmCredentials(ctx, reader, obj, a, fp); err != nil {
			return nil, err
		}
	}
	pullSecrets, err := readPullSecrets(ctx, reader, obj, chart != nil)
	if err != nil {
		return nil, err
	}
	if chart == nil {
		// Helm credentials were read above.
		if err := registryAuth(ctx, pullSecrets, repo, a, fp); err != nil {
			return nil, err
		}
	}
	tlsConfig, proxy, err := transportSecrets(ctx, reader, obj, a, fp)
	if err != nil {
		return nil, err
	}
	if usesCloud(obj) {
		if err := cloudAccess(ctx, cloud, obj, repo, chart, proxy, a, fp); err != nil {
			return nil, err
		}
	}
	a.opts.Transport = defaultTransport
	if tlsConfig != nil || proxy != nil {
		a.opts.Transport = newTransport(tlsConfig, proxy)
	}
	a.opts.Insecure = obj.Spec.Insecure
	a.key = hex.EncodeToString(fp.Sum(nil))
	return a, nil
}

// readPullSecrets reads the registry credentials: spec.secretRef (not for
// a Helm repository, whose Secret helmCredentials reads) and the
// imagePullSecrets of spec.serviceAccountName, unless a cloud provider
// uses that ServiceAccount's identity instead.
func readPullSecrets(ctx context.Context, reader client.Reader, obj *imagev1.ImageRepository, helm bool) ([]corev1.Secret, error) {
	ns := obj.Namespace
	var pullSecrets []corev1.Secret
	if !helm && obj.Spec.SecretRef != nil {
		s, err := getSecret(ctx, reader, ns, obj.Spec.SecretRef.Name)
		if err != nil {
			return nil, authFailed(err)
		}
		pullSecrets = append(pullSecrets, *s)
	}
	if obj.Spec.ServiceAccountName == "" || usesCloud(obj) {
		return pullSecrets, nil
	}
	sa := &corev1.ServiceAccount{}
	if err := reader.Get(ctx, types.NamespacedName{Namespace: ns, Name: obj.Spec.ServiceAccountName}, sa); err != nil {
		return nil, authFailed(fmt.Errorf("reading ServiceAccount %s: %w", obj.Spec.ServiceAccountName, err))
	}
	for _, ref := range sa.ImagePullSecrets {
		s, err := getSecret(ctx, reader, ns, ref.Name)
		if err != nil {
			return nil, authFailed(err)
		}
		pullSecrets = append(pullSecrets, *s)
	}
	return pullSecrets, nil
}

// registryAuth sets a's registry credentials from the pull secrets, or
// anonymous without any.
func registryAuth(ctx context.Context, pullSecrets []corev1.Secret, repo name.Repository, a *access, fp io.Writer) error {
	if len(pullSecrets) == 0 {
		a.opts.Auth = authn.Anonymous
		return nil
	}
	for _, s := range pullSecrets {
		hashSecret(fp, s)
		a.secrets = append(a.secrets, secretValues(s)...)
	}
	kc, err := kauth.NewFromPullSecrets(ctx, pullSecrets)
	if err != nil {
		return authFailed(fmt.Errorf("reading pull secrets: %w", err))
	}
	auth, err := kc.Resolve(repo)
	if err != nil {
		return authFailed(err)
	}
	a.opts.Auth = auth
	return nil
}

// transportSecrets reads the TLS and proxy Secrets, spec.certSecretRef
// and spec.proxySecretRef.
func transportSecrets(ctx context.Context, reader client.Reader, obj *imagev1.ImageRepository, a *access, fp io.Writer) (*tls.Config, *url.URL, error) {
	var tlsConfig *tls.Config
	if obj.Spec.CertSecretRef != nil {
		s, err := getSecret(ctx, reader, obj.Namespace, obj.Spec.CertSecretRef.Name)
		if err != nil {
			return nil, nil, err
		}
		hashSecret(fp, *s)
		if tlsConfig, err = tlsFromSecret(s); err != nil {
			return nil, nil, err
		}
	}
	var proxy *url.URL
	if obj.Spec.ProxySecretRef != nil {
		s, err := getSecret(ctx, reader, obj.Namespace, obj.Spec.ProxySecretRef.Name)
		if err != nil {
			return nil, nil, err
		}
		hashSecret(fp, *s)
		a.secrets = append(a.secrets, string(s.Data["password"]))
		if proxy, err = proxyFromSecret(s); err != nil {
			return nil, nil, err
		}
	}
	return tlsConfig, proxy, nil
}

// helmCredentials reads the credentials of a Helm repository the way Helm
// and Flux's HelmRepository take them: a Secret with username and
// password (basic authentication; a kubernetes.io/basic-auth Secret has
// them), or with bearerToken for repositories behind a token (Artifactory,
// GitLab, ...). imagePullSecrets and cloud providers are for registries
// only, and are refused rather than ignored.
func helmCredentials(ctx context.Context, reader client.Reader, obj *imagev1.ImageRepository, a *access, fp io.Writer) error {
	if obj.Spec.ServiceAccountName != "" {
		return conditions.Stallf(imagev1.ImageURLInvalidReason,
			"spec.serviceAccountName (imagePullSecrets) does not apply to a Helm repository: use spec.secretRef with username and password")
	}
	if obj.Spec.Provider != "" && obj.Spec.Provider != "generic" {
		return conditions.Stallf(imagev1.ImageURLInvalidReason,
			"spec.provider %s does not apply to a Helm repository over HTTP(S)", obj.Spec.Provider)
	}
	a.opts.Auth = authn.Anonymous
	if obj.Spec.SecretRef == nil {
		return nil
	}
	s, err := getSecret(ctx, reader, obj.Namespace, obj.Spec.SecretRef.Name)
	if err != nil {
		return authFailed(err)
	}
	hashSecret(fp, *s)
	a.secrets = append(a.secrets, secretValues(*s)...)
	user, pass, token := string(s.Data["username"]), string(s.Data["password"]), string(s.Data["bearerToken"])
	switch {
	case token != "" && (user != "" || pass != ""):
		return authFailed(fmt.Errorf("Secret %s: give either username and password or bearerToken, not both", s.Name))
	case token != "":
		a.opts.Auth = &authn.Bearer{Token: token}
	case user != "" && pass != "":
		a.opts.Auth = &authn.Basic{Username: user, Password: pass}
	case s.Type == corev1.SecretTypeDockerConfigJson:
		return authFailed(fmt.Errorf("Secret %s is a %s: a Helm repository takes username and password, or bearerToken", s.Name, s.Type))
	default:
		return authFailed(fmt.Errorf("Secret %s: a Helm repository needs username and password, or bearerToken", s.Name))
	}
	return nil
}

func getSecret(ctx context.Context, reader client.Reader, ns, name string) (*corev1.Secret, error) {
	s := &corev1.Secret{}
	if err := reader.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, s); err != nil {
		return nil, fmt.Errorf("reading Secret %s: %w", name, err)
	}
	return s, nil
}

func hashSecret(h interface{ Write([]byte) (int, error) }, s corev1.Secret) {
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

func secretValues(s corev1.Secret) []string {
	var out []string
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

func newTransport(tlsConfig *tls.Config, proxy *url.URL) *http.Transport {
	tr := defaultTransport.Clone()
	if tlsConfig != nil {
		tr.TLSClientConfig = tlsConfig
	}
	if proxy != nil {
		tr.Proxy = http.ProxyURL(proxy)
	}
	return tr
}

// defaultTransport is shared by every repository without TLS or proxy
// settings, so connections to a registry are reused across scans.
var defaultTransport = func() *http.Transport {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	dial := tr.DialContext
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		if d := testDial.Load(); d != nil {
			return (*d)(ctx, network, addr)
		}
		return dial(ctx, network, addr)
	}
	tr.MaxIdleConnsPerHost = 16
	tr.TLSHandshakeTimeout = 10 * time.Second
	tr.ResponseHeaderTimeout = 30 * time.Second
	return tr
}()

// testDial, set by protocol tests only, dials for every registry
// transport: cloud registries' host names then reach loopback servers.
var testDial atomic.Pointer[func(ctx context.Context, network, addr string) (net.Conn, error)]

// authFailed marks a credential problem: AuthenticationFailed, retried.
func authFailed(err error) error {
	return conditions.Retry(conditions.AuthenticationFailedReason, err)
}
