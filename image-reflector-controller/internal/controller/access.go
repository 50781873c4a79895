package controller

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"toolkit.dev/image-toolkit/image-reflector-controller/internal/registry"
	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/cloudauth"
	"toolkit.dev/image-toolkit/pkg/registryaccess"
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
// names, for the registry repo (pkg/registryaccess, which the update job
// shares) or, when chart is set, for that Helm repository. TLS and proxy
// are read the same way for both.
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
	var ra *registryaccess.Access
	if chart != nil {
		ra = &registryaccess.Access{Insecure: obj.Spec.Insecure}
		if err := helmCredentials(ctx, reader, obj, ra, fp); err != nil {
			return nil, err
		}
		if err := registryaccess.TransportSecrets(ctx, reader, obj, ra, fp); err != nil {
			return nil, err
		}
	} else {
		var err error
		if ra, err = registryaccess.Resolve(ctx, reader, obj, repo, cloud, fp); err != nil {
			return nil, err
		}
	}
	a.opts = registry.Options{Auth: ra.Auth, Transport: ra.Transport(defaultTransport), Insecure: ra.Insecure}
	a.secrets = ra.Secrets
	a.key = hex.EncodeToString(fp.Sum(nil))
	return a, nil
}

// helmCredentials reads the credentials of a Helm repository the way Helm
// and Flux's HelmRepository take them: a Secret with username and
// password (basic authentication; a kubernetes.io/basic-auth Secret has
// them), or with bearerToken for repositories behind a token (Artifactory,
// GitLab, ...). imagePullSecrets and cloud providers are for registries
// only, and are refused rather than ignored.
func helmCredentials(ctx context.Context, reader client.Reader, obj *imagev1.ImageRepository, a *registryaccess.Access, fp io.Writer) error {
	if obj.Spec.ServiceAccountName != "" {
		return conditions.Stallf(imagev1.ImageURLInvalidReason,
			"spec.serviceAccountName (imagePullSecrets) does not apply to a Helm repository: use spec.secretRef with username and password")
	}
	if obj.Spec.Provider != "" && obj.Spec.Provider != "generic" {
		return conditions.Stallf(imagev1.ImageURLInvalidReason,
			"spec.provider %s does not apply to a Helm repository over HTTP(S)", obj.Spec.Provider)
	}
	a.Auth = authn.Anonymous
	if obj.Spec.SecretRef == nil {
		return nil
	}
	s, err := registryaccess.GetSecret(ctx, reader, obj.Namespace, obj.Spec.SecretRef.Name)
	if err != nil {
		return registryaccess.AuthFailed(err)
	}
	registryaccess.HashSecret(fp, *s)
	a.Secrets = append(a.Secrets, registryaccess.SecretValues(*s)...)
	user, pass, token := string(s.Data["username"]), string(s.Data["password"]), string(s.Data["bearerToken"])
	switch {
	case token != "" && (user != "" || pass != ""):
		return registryaccess.AuthFailed(fmt.Errorf("Secret %s: give either username and password or bearerToken, not both", s.Name))
	case token != "":
		a.Auth = &authn.Bearer{Token: token}
	case user != "" && pass != "":
		a.Auth = &authn.Basic{Username: user, Password: pass}
	case s.Type == corev1.SecretTypeDockerConfigJson:
		return registryaccess.AuthFailed(fmt.Errorf("Secret %s is a %s: a Helm repository takes username and password, or bearerToken", s.Name, s.Type))
	default:
		return registryaccess.AuthFailed(fmt.Errorf("Secret %s: a Helm repository needs username and password, or bearerToken", s.Name))
	}
	return nil
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
